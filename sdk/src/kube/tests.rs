use super::rules::parse_rules;
use super::*;
use crate::Error;
use serde_json::json;
use tend_rules::kube::{KubeRule, Verb};

fn node(name: &str) -> ObjectKey {
    ObjectKey::cluster("v1", "Node", name)
}

fn cluster() -> FakeKube {
    let kube = FakeKube::new("labeler");
    kube.put(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}}))
        .put(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-2"}}));
    kube
}

const OWN_NODE: &str =
    r#"{ resource = "nodes", verbs = ["get", "list", "patch"], names = ["$NODE"] }"#;

#[test]
fn only_my_own_node_with_the_hosts_messages() {
    let kube = cluster();
    let err = kube.get(&node("node-1")).unwrap_err();
    assert_eq!(
        err,
        Error::Denied(
            "no kube grant allows get nodes named node-1: add { resource = \"nodes\", verbs = [\"get\"], names = [\"node-1\"] } to [plugins.labeler.grants] kube".into()
        )
    );
    kube.grant(OWN_NODE);
    let patch = json!({"metadata": {"labels": {"a": "b"}}});
    let patched = kube
        .patch(&node("node-1"), PatchType::Merge, &patch)
        .unwrap();
    assert_eq!(patched["metadata"]["labels"]["a"], "b");
    let err = kube
        .patch(&node("node-2"), PatchType::Merge, &patch)
        .unwrap_err();
    assert_eq!(
        err.message(),
        "no kube grant allows patch nodes named node-2: add { resource = \"nodes\", verbs = [\"patch\"], names = [\"node-2\"] } to [plugins.labeler.grants] kube"
    );
    assert_eq!(kube.delete(&node("node-1")).unwrap_err().kind(), "denied");
    assert_eq!(kube.actions(), ["patch nodes/node-1 merge"]);
    assert_eq!(
        kube.object(&node("node-1")).unwrap()["metadata"]["labels"]["a"],
        "b"
    );

    kube.set_node_name("node-2");
    assert!(
        kube.get(&node("node-2")).is_ok(),
        "$NODE follows the node name"
    );
    assert_eq!(kube.get(&node("node-1")).unwrap_err().kind(), "denied");
}

#[test]
fn lists_are_cut_to_the_granted_names_and_filtered() {
    let kube = cluster();
    let err = kube
        .list("v1", "Node", None, &ListParams::default())
        .unwrap_err();
    assert!(
        err.message().starts_with(
            "no kube grant allows list nodes: add { resource = \"nodes\", verbs = [\"list\"] }"
        ),
        "{err}"
    );
    kube.grant(OWN_NODE);
    let listed = kube
        .list("v1", "Node", None, &ListParams::default())
        .unwrap();
    assert_eq!(listed.names(), ["node-1"]);

    kube.grant(r#"[{ resource = "pods", verbs = ["list"], namespaces = ["default"] }]"#);
    for (name, ns, app) in [
        ("a", "default", "web"),
        ("b", "default", "db"),
        ("c", "other", "web"),
    ] {
        kube.put(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
            "spec": {"nodeName": "node-1"}}));
    }
    let list = |ns: Option<&str>, params: &ListParams| kube.list("v1", "Pod", ns, params);
    assert_eq!(
        list(Some("default"), &ListParams::default())
            .unwrap()
            .names(),
        ["a", "b"]
    );
    assert_eq!(
        list(None, &ListParams::default()).unwrap_err().kind(),
        "denied",
        "all namespaces need a rule for all"
    );
    assert_eq!(
        list(Some("default"), &ListParams::labels("app=web"))
            .unwrap()
            .names(),
        ["a"]
    );
    assert_eq!(
        list(Some("default"), &ListParams::labels("app notin (web)"))
            .unwrap()
            .names(),
        ["b"]
    );
    assert_eq!(
        list(Some("default"), &ListParams::labels("!app"))
            .unwrap()
            .names(),
        Vec::<&str>::new()
    );
    assert_eq!(
        list(Some("default"), &ListParams::labels("app in (web, db),app"))
            .unwrap()
            .names(),
        ["a", "b"]
    );
    assert_eq!(
        list(Some("default"), &ListParams::labels("=x"))
            .unwrap_err()
            .kind(),
        "invalid"
    );
    assert_eq!(
        list(Some("default"), &ListParams::fields("metadata.name!=a"))
            .unwrap()
            .names(),
        ["b"]
    );
    assert_eq!(
        list(Some("default"), &ListParams::fields("spec.nodeName=node-2"))
            .unwrap()
            .items,
        Vec::<Value>::new()
    );

    let page = ListParams {
        limit: Some(1),
        ..ListParams::default()
    };
    let first = list(Some("default"), &page).unwrap();
    assert_eq!(first.names(), ["a"]);
    let next = ListParams {
        continue_token: first.continue_token,
        ..page
    };
    let second = list(Some("default"), &next).unwrap();
    assert_eq!(second.names(), ["b"]);
    assert_eq!(second.continue_token, None);
}

#[test]
fn patches_apply_as_on_the_api_server_and_are_recorded() {
    let mut target = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
    merge_patch(
        &mut target,
        &json!({"a": "z", "c": {"f": null}, "l": [3], "n": {"m": 1}}),
    );
    assert_eq!(
        target,
        json!({"a": "z", "c": {"d": "e"}, "l": [3], "n": {"m": 1}})
    );
    merge_patch(&mut target, &json!("replaced"));
    assert_eq!(target, json!("replaced"));

    let kube = cluster();
    kube.grant(OWN_NODE);
    let json_patch = json!([{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]);
    let patched = kube
        .patch(&node("node-1"), PatchType::Json, &json_patch)
        .unwrap();
    assert_eq!(patched["metadata"]["labels"], json!({"a": "b"}));
    assert_eq!(kube.get(&node("node-1")).unwrap(), patched);
    // A JSON patch that does not apply changes nothing, as a 422 would.
    let missing = json!([
        {"op": "add", "path": "/metadata/labels/c", "value": "d"},
        {"op": "remove", "path": "/metadata/annotations/x"}
    ]);
    let err = kube
        .patch(&node("node-1"), PatchType::Json, &missing)
        .unwrap_err();
    assert_eq!(err.kind(), "invalid");
    assert!(
        err.message()
            .starts_with("kube patch nodes/node-1: the JSON patch does not apply"),
        "{err}"
    );
    assert_eq!(kube.get(&node("node-1")).unwrap(), patched);
    // A server-side apply merges.
    let apply = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1", "labels": {"e": "f"}}});
    let applied = kube
        .patch(&node("node-1"), PatchType::Apply, &apply)
        .unwrap();
    assert_eq!(applied["metadata"]["labels"], json!({"a": "b", "e": "f"}));
    assert_eq!(
        kube.patch(&node("node-1"), PatchType::Json, &json!({}))
            .unwrap_err()
            .kind(),
        "invalid"
    );
    assert_eq!(
        kube.actions(),
        ["patch nodes/node-1 json", "patch nodes/node-1 apply"]
    );
    assert_eq!(kube.patches()[0].patch, json_patch);
    assert_eq!(kube.patches()[1].patch_type, PatchType::Apply);
}

#[test]
fn scopes_kinds_creates_deletes_and_failures() {
    let kube = FakeKube::default();
    kube.grant(r#"
        # The host config's inline tables, as written there.
        [
          { resource = "configmaps", verbs = ["get", "create", "delete"], namespaces = ['default'] },
          { group = "apps", resource = "deployments", verbs = ["get"] },
        ]"#);
    let cm = ObjectKey::namespaced("v1", "ConfigMap", "default", "x");
    let object = json!({"metadata": {"name": "x"}, "data": {"k": "v"}});
    let created = kube
        .create("v1", "ConfigMap", Some("default"), &object)
        .unwrap();
    assert_eq!(created["metadata"]["namespace"], "default");
    assert_eq!(kube.get(&cm).unwrap()["data"]["k"], "v");
    let again = kube
        .create("v1", "ConfigMap", Some("default"), &object)
        .unwrap_err();
    assert_eq!(
        again.message(),
        "create configmaps: configmaps \"x\" already exists (AlreadyExists)"
    );
    assert_eq!(
        kube.create("v1", "ConfigMap", Some("other"), &object)
            .unwrap_err()
            .kind(),
        "denied"
    );
    assert_eq!(
        kube.create("v1", "ConfigMap", Some("default"), &json!({}))
            .unwrap_err()
            .kind(),
        "invalid"
    );

    let err = kube
        .get(&ObjectKey {
            namespace: None,
            ..cm.clone()
        })
        .unwrap_err();
    assert_eq!(
        err,
        Error::Invalid("ConfigMap is namespaced: name its namespace".into())
    );
    let err = kube
        .get(&ObjectKey::namespaced("v1", "Node", "x", "n"))
        .unwrap_err();
    assert_eq!(
        err,
        Error::Invalid("Node is cluster-scoped: call without a namespace (got \"x\")".into())
    );
    let deployment = ObjectKey::namespaced("apps/v1", "Deployment", "default", "web");
    let err = kube.get(&deployment).unwrap_err();
    assert_eq!(
        err,
        Error::NotFound("the API server has no kind Deployment in apps/v1".into())
    );
    kube.add_kind("apps/v1", "Deployment", "deployments", true);
    assert_eq!(
        kube.get(&deployment).unwrap_err(),
        Error::NotFound("get deployments/web: deployments \"web\" not found (NotFound)".into())
    );

    kube.fail_call(
        "get",
        Some(Error::Unavailable("the API server is down".into())),
    );
    assert_eq!(kube.get(&cm).unwrap_err().kind(), "unavailable");
    kube.fail_call("get", None)
        .fail_with(Some(Error::Timeout("slow".into())));
    assert_eq!(kube.delete(&cm).unwrap_err().kind(), "timeout");
    kube.fail_with(None);
    kube.delete(&cm).unwrap();
    assert_eq!(kube.delete(&cm).unwrap_err().kind(), "not-found");
    assert_eq!(kube.object(&cm), None);
    assert_eq!(
        kube.actions(),
        [
            "create configmaps/default/x",
            "delete configmaps/default/x",
            "delete configmaps/default/x"
        ]
    );
}

#[test]
fn events_need_a_readable_object_and_aggregate() {
    let kube = cluster();
    kube.grant(OWN_NODE);
    kube.emit_event(
        &node("node-1"),
        EventType::Normal,
        "LabelApplied",
        "set a=b\n",
    )
    .unwrap();
    kube.emit_event(
        &node("node-1"),
        EventType::Normal,
        "LabelApplied",
        "set a=b\n",
    )
    .unwrap();
    assert_eq!(
        kube.emit_event(&node("node-2"), EventType::Normal, "X", "y")
            .unwrap_err()
            .kind(),
        "denied"
    );
    assert_eq!(
        kube.emit_event(&node("node-1"), EventType::Warning, "bad reason", "y")
            .unwrap_err()
            .kind(),
        "invalid"
    );
    assert_eq!(
        kube.actions(),
        ["event nodes/node-1 LabelApplied: set a=b\\n"; 2]
    );
    assert_eq!(
        kube.events(),
        [RecordedEvent {
            regarding: node("node-1"),
            event_type: EventType::Normal,
            reason: "LabelApplied".into(),
            message: "set a=b\\n".into(),
            count: 2,
        }]
    );
}

#[test]
fn grants_parse_as_strictly_as_the_hosts() {
    let result = std::panic::catch_unwind(|| {
        FakeKube::default().grant(r#"{ resource = "Nodes", verbs = ["get"] }"#);
    });
    assert!(result.is_err());
    // TOML as in the config: literal strings, trailing commas, comments.
    let rules = parse_rules(
        "[\n  # nodes\n  { resource = 'nodes', verbs = ['get',], names = [\"$NODE\"] },\n]",
    )
    .unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0].resource, "nodes");
    assert_eq!(rules[0].verbs, [Verb::Get]);
    // Unknown keys are refused, as the host refuses them.
    let err = parse_rules(r#"{ resource = "nodes", verbs = ["get"], n = 1 }"#).unwrap_err();
    assert!(err.contains("unknown field `n`"), "{err}");
    // JSON too.
    assert_eq!(
        parse_rules(r#"{"resource": "nodes", "verbs": ["get"]}"#).unwrap(),
        rules[..1]
            .iter()
            .map(|r| KubeRule {
                names: None,
                ..r.clone()
            })
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_host_without_kube_denies_it() {
    struct Bare;
    impl crate::Host for Bare {}
    let err = crate::Host::kube(&Bare).get(&node("node-1")).unwrap_err();
    assert_eq!(
        err,
        Error::Denied("kube is not provided by this host: its Host implementation does not override Host::kube".into())
    );
}

#[test]
fn keys_of_objects() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"}});
    assert_eq!(
        ObjectKey::of(&pod),
        Some(ObjectKey::namespaced("v1", "Pod", "default", "web"))
    );
    assert_eq!(ObjectKey::of(&json!({"kind": "Pod"})), None);
}
