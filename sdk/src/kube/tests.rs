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

/// As the host: under a rule with selectors, a Node outside them and one
/// that does not exist answer alike (tend-rules' check_found), whatever the
/// call, and nothing is recorded.
#[test]
fn by_selectors_absent_and_outside_answer_alike() {
    let kube = cluster();
    kube.put(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-3", "uid": "u3", "labels": {"pool": "a"}}}));
    kube.grant(
        r#"{ resource = "nodes", verbs = ["get", "patch", "delete"], label-selector = "pool=a" }"#,
    );
    let label = json!({"metadata": {"labels": {"x": "y"}}});
    let answers = |name: &str| {
        [
            kube.get(&node(name)).unwrap_err(),
            kube.patch(&node(name), PatchType::Merge, &label)
                .unwrap_err(),
            kube.delete(&node(name)).unwrap_err(),
            kube.emit_event(&node(name), EventType::Normal, "Probe", "x")
                .unwrap_err(),
        ]
    };
    let outside = answers("node-2");
    assert_eq!(outside[0], Error::NotFound("get nodes named node-2: no such object within the grant's selectors ({ resource = \"nodes\", label-selector = \"pool=a\" }); one outside them is answered as absent: if it exists, label it to match, or widen the selectors in [plugins.labeler.grants] kube".into()));
    let absent = answers("node-9").map(|e| e.map_message(|m| m.replace("node-9", "node-2")));
    assert_eq!(outside, absent);
    assert!(kube.actions().is_empty(), "{:?}", kube.actions());
    kube.get(&node("node-3")).unwrap();
    kube.patch(&node("node-3"), PatchType::Merge, &label)
        .unwrap();
    assert_eq!(kube.actions(), ["patch nodes/node-3 merge"]);
    // As the host: a body that could not carry the UID it is bound to.
    let unbound = json!({"apiVersion": "v1", "kind": "Node", "metadata": null});
    let err = kube
        .patch(&node("node-3"), PatchType::Apply, &unbound)
        .unwrap_err();
    assert_eq!(err.kind(), "invalid", "{err}");
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

const CORDON: &str = r#"{ resource = "nodes", verbs = ["patch"], names = ["$NODE"], fields = ["spec.unschedulable"] }"#;
const NODE_PODS: &str =
    r#"{ resource = "pods", verbs = ["list", "get"], field-selector = "spec.nodeName=$NODE" }"#;
const EVICT_NODE_PODS: &str =
    r#"{ resource = "pods/eviction", verbs = ["create"], field-selector = "spec.nodeName=$NODE" }"#;

fn pod(namespace: &str, name: &str, node: &str, meta: Value) -> Value {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace}, "spec": {"nodeName": node}});
    if let (Value::Object(into), Value::Object(extra)) = (&mut pod["metadata"], meta) {
        into.extend(extra);
    }
    pod
}

fn pod_key(namespace: &str, name: &str) -> ObjectKey {
    ObjectKey::namespaced("v1", "Pod", namespace, name)
}

fn unschedulable(kube: &FakeKube, name: &str) -> Value {
    kube.object(&node(name)).unwrap()["spec"]["unschedulable"].clone()
}

/// A cluster whose node-1 runs a pod of each kind a drain meets, and
/// node-2 one pod; the plugin granted all a drain needs.
fn to_drain() -> FakeKube {
    let kube = cluster();
    kube.grant(CORDON).grant(NODE_PODS).grant(EVICT_NODE_PODS);
    let daemon =
        json!({"ownerReferences": [{"kind": "DaemonSet", "name": "cni", "controller": true}]});
    let mirror = json!({"annotations": {"kubernetes.io/config.mirror": "abc"}});
    let leaving = json!({"deletionTimestamp": "2026-01-01T00:00:00Z"});
    let replica =
        json!({"ownerReferences": [{"kind": "ReplicaSet", "name": "web-1", "controller": true}]});
    kube.put(pod("default", "web", "node-1", replica))
        .put(pod("default", "db", "node-1", json!({})))
        .put(pod("kube-system", "cni", "node-1", daemon))
        .put(pod("kube-system", "etcd", "node-1", mirror))
        .put(pod("default", "old", "node-1", leaving))
        .put(pod("default", "far", "node-2", json!({})));
    kube
}

#[test]
fn a_cordon_sets_only_the_own_nodes_unschedulable_and_is_recorded_when_it_changes() {
    let kube = cluster();
    let err = kube.cordon(true).unwrap_err();
    assert_eq!(
        err,
        Error::Denied(
            "no kube grant allows patch nodes named node-1: add { resource = \"nodes\", verbs = [\"patch\"], names = [\"node-1\"] } to [plugins.labeler.grants] kube".into()
        )
    );
    kube.grant(
        r#"{ resource = "nodes", verbs = ["patch"], names = ["$NODE"], fields = ["metadata.labels"] }"#,
    );
    let err = kube.cordon(true).unwrap_err();
    assert_eq!(err.kind(), "denied");
    assert!(
        err.message().contains(
            "the patch touches \"spec.unschedulable\", outside the fields of { resource = \"nodes\", fields = [\"metadata.labels\"] }"
        ),
        "{err}"
    );
    assert_eq!(kube.actions(), Vec::<String>::new());

    kube.grant(CORDON);
    kube.cordon(true).unwrap();
    assert_eq!(unschedulable(&kube, "node-1"), true);
    assert_eq!(unschedulable(&kube, "node-2"), Value::Null);
    // Already cordoned: nothing changes, nothing is recorded (the host journals nothing).
    kube.cordon(true).unwrap();
    kube.cordon(false).unwrap();
    // An uncordon removes the field, as `kubectl uncordon` does.
    assert_eq!(kube.object(&node("node-1")).unwrap()["spec"], json!({}));
    kube.cordon(false).unwrap();
    assert_eq!(
        kube.actions(),
        ["cordon nodes/node-1", "uncordon nodes/node-1"]
    );
    assert!(kube.patches().is_empty(), "a cordon is no `patch` call");

    kube.set_node_name("node-2");
    kube.cordon(true).unwrap();
    assert_eq!(unschedulable(&kube, "node-2"), true);
    kube.set_node_name("node-3");
    assert_eq!(
        kube.cordon(true).unwrap_err(),
        Error::NotFound("cordon nodes/node-3: nodes \"node-3\" not found (NotFound)".into())
    );
    kube.set_node_name("node-1");
    kube.fail_call("cordon", Some(Error::Unavailable("down".into())));
    assert_eq!(kube.cordon(true).unwrap_err().kind(), "unavailable");
    assert_eq!(unschedulable(&kube, "node-1"), Value::Null);
}

#[test]
fn an_eviction_needs_its_grant_and_a_budget_that_allows_it() {
    let kube = cluster();
    kube.put(pod("default", "web", "node-1", json!({})))
        .put(pod("default", "far", "node-2", json!({})));
    assert_eq!(
        kube.evict("default", "web").unwrap_err(),
        Error::Denied(
            "no kube grant allows create pods/eviction in namespace default named web: add { resource = \"pods/eviction\", verbs = [\"create\"], namespaces = [\"default\"], names = [\"web\"] } to [plugins.labeler.grants] kube".into()
        )
    );
    // Deleting pods is another grant.
    kube.grant(r#"{ resource = "pods", verbs = ["delete", "create"] }"#);
    assert_eq!(kube.evict("default", "web").unwrap_err().kind(), "denied");
    kube.grant(EVICT_NODE_PODS);
    // Names are URL parts: checked first.
    for (ns, name) in [("default", "web/status"), ("default", ".."), ("a/b", "web")] {
        assert_eq!(
            kube.evict(ns, name).unwrap_err().kind(),
            "invalid",
            "{ns}/{name}"
        );
    }
    // Another node's pod is not this plugin's, whatever the grant: answered
    // as a pod that does not exist is, as the host answers.
    let far = kube.evict("default", "far").unwrap_err();
    let gone = kube.evict("default", "gone").unwrap_err();
    assert_eq!(far.kind(), "not-found", "{far}");
    assert!(
        far.message()
            .contains("no such object within the grant's selectors"),
        "{far}"
    );
    assert_eq!(
        far.message().replace("far", "gone"),
        gone.message(),
        "the same answer"
    );

    kube.block_eviction("default", "web", "web-pdb");
    let err = kube.evict("default", "web").unwrap_err();
    assert_eq!(err.kind(), "budget-exhausted");
    assert_eq!(
        err.message(),
        "[pdb:default/web-pdb] blocked by PodDisruptionBudget default/web-pdb: evicting default/web now would break it (Cannot evict pod as it would violate the pod's disruption budget.); nothing was done, try again later"
    );
    assert!(kube.object(&pod_key("default", "web")).is_some());
    assert_eq!(kube.actions(), Vec::<String>::new());

    kube.unblock_eviction("default", "web");
    kube.evict("default", "web").unwrap();
    assert_eq!(kube.object(&pod_key("default", "web")), None);
    assert_eq!(kube.actions(), ["evict pods/default/web"]);
}

#[test]
fn a_drain_cordons_evicts_and_leaves_daemonset_mirror_and_blocked_pods() {
    let kube = to_drain();
    kube.block_eviction("default", "db", "db-pdb");
    let report = kube
        .drain(&DrainOptions::within(std::time::Duration::from_secs(60)))
        .unwrap();
    assert_eq!(
        report,
        DrainReport {
            evicted: vec!["default/web".into()],
            skipped: vec![
                "kube-system/cni: a DaemonSet pod".into(),
                "kube-system/etcd: a mirror pod (the kubelet's static pod)".into(),
            ],
            remaining: vec![
                "default/db: [pdb:default/db-pdb] blocked by PodDisruptionBudget default/db-pdb"
                    .into(),
                "default/old: terminating".into(),
            ],
            uncordoned: false,
        }
    );
    assert!(!report.completed());
    // Gave up without uncordon-on-give-up: the Node stays cordoned.
    assert_eq!(unschedulable(&kube, "node-1"), true);
    assert_eq!(
        kube.actions(),
        ["cordon nodes/node-1", "evict pods/default/web"]
    );
    assert!(kube.object(&pod_key("default", "far")).is_some());
    assert!(kube.object(&pod_key("kube-system", "cni")).is_some());
}

#[test]
fn a_drain_that_gives_up_uncordons_when_asked() {
    let kube = to_drain();
    kube.block_eviction("default", "db", "db-pdb");
    let options = DrainOptions::within(std::time::Duration::from_secs(60)).uncordon_on_give_up();
    let report = kube.drain(&options).unwrap();
    assert!(report.uncordoned);
    assert_eq!(report.remaining.len(), 2);
    assert_eq!(unschedulable(&kube, "node-1"), Value::Null);
    assert_eq!(
        kube.actions(),
        [
            "cordon nodes/node-1",
            "evict pods/default/web",
            "uncordon nodes/node-1"
        ]
    );
}

#[test]
fn a_drain_completes_when_every_pod_to_move_is_gone() {
    let kube = to_drain();
    kube.remove(&pod_key("default", "old"));
    let options = DrainOptions::within(std::time::Duration::from_secs(60)).uncordon_on_give_up();
    let report = kube.drain(&options).unwrap();
    assert!(report.completed(), "{report:?}");
    assert_eq!(report.evicted, ["default/db", "default/web"]);
    assert!(!report.uncordoned);
    assert_eq!(unschedulable(&kube, "node-1"), true);
    assert_eq!(
        kube.actions(),
        [
            "cordon nodes/node-1",
            "evict pods/default/db",
            "evict pods/default/web"
        ]
    );
}

#[test]
fn a_drain_checks_every_grant_before_it_changes_anything() {
    let options = DrainOptions::within(std::time::Duration::from_secs(60));
    // No cordon: the cordon's refusal.
    let kube = to_drain();
    let kube_without = FakeKube::new("labeler");
    kube_without.put(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}}));
    assert_eq!(
        kube_without.drain(&options).unwrap_err(),
        kube_without.cordon(true).unwrap_err()
    );
    // No list of the pods.
    let only_cordon = cluster();
    only_cordon.grant(CORDON).grant(EVICT_NODE_PODS);
    let err = only_cordon.drain(&options).unwrap_err();
    assert!(
        err.message().starts_with("no kube grant allows list pods"),
        "{err}"
    );
    assert_eq!(only_cordon.actions(), Vec::<String>::new());
    // Evictions granted in one namespace only: refused before the cordon.
    let one_namespace = cluster();
    one_namespace.grant(CORDON).grant(NODE_PODS).grant(
        r#"{ resource = "pods/eviction", verbs = ["create"], namespaces = ["kube-system"] }"#,
    );
    one_namespace.put(pod("default", "web", "node-1", json!({})));
    let err = one_namespace.drain(&options).unwrap_err();
    assert!(
        err.message().starts_with(
            "no kube grant allows create pods/eviction in namespace default named web"
        ),
        "{err}"
    );
    assert_eq!(unschedulable(&one_namespace, "node-1"), Value::Null);
    // Uncordon on give-up needs the uncordon's grant too (the same rule here).
    assert!(kube.drain(&options.uncordon_on_give_up()).is_ok());
    // A scripted failure of the drain comes after the grants.
    let failing = to_drain();
    failing.fail_call("drain", Some(Error::Unavailable("down".into())));
    assert_eq!(failing.drain(&options).unwrap_err().kind(), "unavailable");
    assert_eq!(failing.actions(), Vec::<String>::new());
}

#[test]
fn a_drain_stops_when_someone_else_uncordons_the_node() {
    let kube = to_drain();
    kube.put(pod("default", "zz", "node-1", json!({})));
    kube.uncordon_during_drain(1);
    let options = DrainOptions::within(std::time::Duration::from_secs(60)).uncordon_on_give_up();
    let report = kube.drain(&options).unwrap();
    assert_eq!(report.evicted, ["default/db"]);
    assert_eq!(
        report.remaining,
        [
            "default/old: terminating",
            "default/web: not evicted yet",
            "default/zz: not evicted yet"
        ]
    );
    // Someone else's uncordon: the drain undoes nothing itself.
    assert!(!report.uncordoned);
    assert_eq!(
        kube.actions(),
        ["cordon nodes/node-1", "evict pods/default/db"]
    );
    // It fired once: the next drain cordons again and goes on.
    let report = kube.drain(&options).unwrap();
    assert_eq!(report.evicted, ["default/web", "default/zz"]);
}

#[test]
fn a_drain_reports_an_eviction_the_api_server_refuses() {
    let kube = to_drain();
    kube.remove(&pod_key("default", "old"));
    kube.fail_call(
        "evict",
        Some(Error::Unavailable("the API server is down".into())),
    );
    let report = kube
        .drain(&DrainOptions::within(std::time::Duration::from_secs(1)))
        .unwrap();
    assert_eq!(
        report.remaining,
        [
            "default/db: the API server is down",
            "default/web: the API server is down"
        ]
    );
    assert_eq!(report.evicted, Vec::<String>::new());
    kube.fail_call("evict", Some(Error::Denied("scripted".into())));
    assert_eq!(
        kube.drain(&DrainOptions::within(std::time::Duration::from_secs(1)))
            .unwrap_err(),
        Error::Denied("scripted".into())
    );
}
