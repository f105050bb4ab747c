//! Attacks on the Kubernetes grant rules, end to end: the real `tend`, the
//! `chaos` plugin's `kube-call` mode as the hostile plugin, the Kubernetes API
//! fake (tests/peers/kube-apiserver.py). Each test is the attack, and asserts
//! that nothing outside the grant happened: the request log of the fake shows
//! no request that reached outside, and the objects are unchanged.

use serde_json::{Value, json};
use tend_e2e::{KubeApi, Sandbox};

const LEASE_NS: &str = "tend-system";
const LEASE: &str = "tend-cluster";

/// `[host.kube]` with the kubeconfig [`KubeApi::grant_rbac`] writes for the
/// tend of `sandbox`, and `extra` host tables.
fn kube_host(api: &KubeApi, sandbox: &Sandbox, extra: &str) -> String {
    format!("{}{extra}", api.host_kube(sandbox))
}

/// A chaos plugin NAME in kube-call mode: its kube `grant` (a TOML array) and
/// its call (TOML lines).
fn hostile(name: &str, grant: &str, call: &str) -> String {
    format!(
        "[plugins.{name}]\n[plugins.{name}.grants]\nkube = {grant}\n[plugins.{name}.config]\nmode = \"kube-call\"\n{call}\n"
    )
}

/// Plugin `name`'s config `text` in the cluster scope: with the
/// leader-election Lease, one tend (as one ServiceAccount, tend-cluster) runs
/// them.
fn cluster_scope(name: &str, text: &str) -> String {
    text.replacen(
        &format!("[plugins.{name}]\n"),
        &format!("[plugins.{name}]\nscope = \"cluster\"\n"),
        1,
    )
}

fn create(api: &KubeApi, path: &str, object: Value) {
    let (code, body) = api.call("POST", path, Some(&object));
    assert_eq!(code, 201, "create {path}: {body}");
}

fn object(api: &KubeApi, path: &str) -> Value {
    let (code, body) = api.call("GET", path, None);
    assert_eq!(code, 200, "get {path}: {body}");
    body
}

fn pod(name: &str, node: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox:1.36"}]},
    })
}

/// Run plugin `name` once; what tend said about it.
fn reconcile(sandbox: &Sandbox, name: &str) -> String {
    let out = sandbox.tend(&["reconcile", name]);
    format!("{}{}", out.stdout, out.stderr)
}

/// The not-found a reconcile's output reports, from its kind to the end of
/// its line but the reconcile's time (empty when there is none).
fn answer(said: &str) -> &str {
    said.lines()
        .find_map(|line| line.find("not-found: ").map(|at| &line[at..]))
        .and_then(|answer| answer.rsplit_once(" (").map(|(answer, _)| answer))
        .unwrap_or_default()
}

/// The requests tend (not the test) made after `seq`.
fn tends_requests(api: &KubeApi, seq: u64) -> Vec<Value> {
    api.requests_since(seq)
        .into_iter()
        .filter(|e| {
            e["userAgent"]
                .as_str()
                .is_some_and(|a| a.starts_with("tend/"))
        })
        .collect()
}

#[test]
fn names_and_namespaces_cannot_address_subresources_secrets_evictions_or_query_parameters() {
    let api = KubeApi::start();
    create(
        &api,
        "/api/v1/namespaces/default/pods",
        pod("web", "node-1", json!({})),
    );
    let web = object(&api, "/api/v1/namespaces/default/pods/web");
    let sandbox = Sandbox::new();
    let attacks = [
        // patch granted on Pods in default: the status subresource through the name
        (
            "status",
            r#"[{ resource = "pods", verbs = ["patch"], namespaces = ["default"] }]"#,
            "op = \"patch\"\napi-version = \"v1\"\nkind = \"Pod\"\nnamespace = \"default\"\nname = \"web/status\"\nbody = '{\"status\": {\"phase\": \"Failed\"}}'",
            "invalid: kube name \"web/status\": expected a DNS-1123 subdomain",
        ),
        // get granted on ConfigMaps: a Secret through the namespace
        (
            "secret",
            r#"[{ resource = "configmaps", verbs = ["get"] }]"#,
            "op = \"get\"\napi-version = \"v1\"\nkind = \"ConfigMap\"\nnamespace = \"kube-system/secrets/db?x=\"\nname = \"x\"",
            "invalid: kube namespace \"kube-system/secrets/db?x=\": expected a DNS-1123 label",
        ),
        // create granted on ConfigMaps: an eviction of the Pod
        (
            "evict",
            r#"[{ resource = "configmaps", verbs = ["create"] }]"#,
            "op = \"create\"\napi-version = \"v1\"\nkind = \"ConfigMap\"\nnamespace = \"default/pods/web/eviction\"\nbody = '{\"metadata\": {\"name\": \"web\"}}'",
            "invalid: kube namespace \"default/pods/web/eviction\": expected a DNS-1123 label",
        ),
        // a forced server-side apply smuggled into the name
        (
            "force",
            r#"[{ resource = "pods", verbs = ["patch"], namespaces = ["default"] }]"#,
            "op = \"patch\"\napi-version = \"v1\"\nkind = \"Pod\"\nnamespace = \"default\"\nname = \"web?fieldManager=kubelet&force=true\"\npatch-type = \"apply\"\nbody = '{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"web\", \"labels\": {\"owned\": \"yes\"}}}'",
            "invalid: kube name \"web?fieldManager=kubelet&force=true\": expected a DNS-1123 subdomain",
        ),
    ];
    let mut plugins = String::new();
    for (name, grant, call, _) in &attacks {
        sandbox.add_plugin("chaos", name);
        plugins += &hostile(name, grant, call);
    }
    sandbox.config_on_node("node-1", &kube_host(&api, &sandbox, ""), &plugins);
    api.grant_rbac(&sandbox);
    let seq = api.request_seq();
    for (name, _, _, refused) in &attacks {
        let said = reconcile(&sandbox, name);
        assert!(said.contains(refused), "{name}: {said}");
    }
    let requests = tends_requests(&api, seq);
    assert!(
        requests.is_empty(),
        "refused before any request (discovery included): {requests:#?}"
    );
    let after = object(&api, "/api/v1/namespaces/default/pods/web");
    assert_eq!(after, web, "the Pod changed");
}

#[test]
fn a_plugin_cannot_write_tends_own_election_lease() {
    let api = KubeApi::start();
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": LEASE, "namespace": LEASE_NS},
        "spec": {"holderIdentity": "tend-0", "leaseDurationSeconds": 15},
    });
    create(
        &api,
        "/api/v1/namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NS}}),
    );
    let leases = format!("/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases");
    create(&api, &leases, lease);
    let before = object(&api, &format!("{leases}/{LEASE}"));
    let sandbox = Sandbox::new();
    sandbox
        .add_plugin("chaos", "usurper")
        .add_plugin("chaos", "own");
    let grant = r#"[{ group = "coordination.k8s.io", resource = "leases", verbs = ["get", "create", "patch", "delete"] }]"#;
    let patch = |name: &str| {
        format!(
            "op = \"patch\"\napi-version = \"coordination.k8s.io/v1\"\nkind = \"Lease\"\nnamespace = \"{LEASE_NS}\"\nname = \"{name}\"\nbody = '{{\"spec\": {{\"holderIdentity\": \"usurper\"}}}}'"
        )
    };
    let election =
        format!("[host.leader-election]\nnamespace = \"{LEASE_NS}\"\nname = \"{LEASE}\"\n");
    let create_own = format!(
        "op = \"create\"\napi-version = \"coordination.k8s.io/v1\"\nkind = \"Lease\"\nnamespace = \"{LEASE_NS}\"\nbody = '{{\"metadata\": {{\"name\": \"usurper\"}}, \"spec\": {{\"holderIdentity\": \"usurper\"}}}}'"
    );
    sandbox.config_on_node(
        "node-1",
        &kube_host(&api, &sandbox, &election),
        &(cluster_scope("usurper", &hostile("usurper", grant, &patch(LEASE)))
            + &cluster_scope("own", &hostile("own", grant, &create_own))),
    );
    api.grant_rbac(&sandbox);
    let seq = api.request_seq();
    let said = reconcile(&sandbox, "usurper");
    assert!(
        said.contains(&format!(
            "denied: patch leases.coordination.k8s.io in namespace {LEASE_NS} named {LEASE}: it is Tend's own leader-election Lease ([host.leader-election])"
        )),
        "{said}"
    );
    assert!(
        tends_requests(&api, seq)
            .iter()
            .all(|e| e["method"] == "GET"),
        "no write reached the API server"
    );
    assert_eq!(
        object(&api, &format!("{leases}/{LEASE}")),
        before,
        "the Lease changed"
    );
    // The grant still holds for a Lease of the plugin's own.
    let said = reconcile(&sandbox, "own");
    assert!(said.contains("healthy: ok"), "{said}");
    assert_eq!(
        object(&api, &format!("{leases}/usurper"))["spec"]["holderIdentity"],
        "usurper"
    );
}

#[test]
fn rule_selectors_bound_lists_and_gets() {
    let api = KubeApi::start();
    for (name, node, labels) in [
        ("mine", "node-1", json!({})),
        ("theirs", "node-2", json!({"tend": "yes"})),
        ("tended", "node-1", json!({"tend": "yes"})),
    ] {
        create(
            &api,
            "/api/v1/namespaces/default/pods",
            pod(name, node, labels),
        );
    }
    let sandbox = Sandbox::new();
    for name in ["on-node", "labelled", "peek", "probe"] {
        sandbox.add_plugin("chaos", name);
    }
    let list = "op = \"list\"\napi-version = \"v1\"\nkind = \"Pod\"\nnamespace = \"default\"";
    let node_rule = r#"[{ resource = "pods", verbs = ["list", "get"], field-selector = "spec.nodeName=$NODE" }]"#;
    let label_rule =
        r#"[{ resource = "pods", verbs = ["list", "get"], label-selector = "tend=yes" }]"#;
    let get_bare = "op = \"get\"\napi-version = \"v1\"\nkind = \"Pod\"\nnamespace = \"default\"\nname = \"mine\"";
    sandbox.config_on_node(
        "node-1",
        &kube_host(&api, &sandbox, ""),
        &(hostile("on-node", node_rule, list)
            + &hostile("labelled", label_rule, list)
            + &hostile("peek", label_rule, get_bare)
            + &hostile(
                "probe",
                label_rule,
                &get_bare.replace("\"mine\"", "\"absent\""),
            )),
    );
    api.grant_rbac(&sandbox);
    let seq = api.request_seq();
    let said = reconcile(&sandbox, "on-node");
    assert!(
        said.contains("healthy: listed mine, tended"),
        "another node's Pod listed: {said}"
    );
    let said = reconcile(&sandbox, "labelled");
    assert!(
        said.contains("healthy: listed tended, theirs"),
        "an unlabelled Pod listed: {said}"
    );
    // A Pod outside the selectors is answered as one that does not exist,
    // word for word: a get by name is no oracle for what exists beyond them.
    let said = reconcile(&sandbox, "peek");
    assert!(
        said.contains("not-found: get pods in namespace default named mine: no such object within the grant's selectors"),
        "{said}"
    );
    let probed = reconcile(&sandbox, "probe");
    assert_eq!(
        answer(&said)
            .replace("mine", "absent")
            .replace("plugins.peek", "plugins.probe"),
        answer(&probed),
        "{said}\n{probed}"
    );
    // The rules' selectors went to the API server (and so into the cache key).
    let lists: Vec<Value> = tends_requests(&api, seq)
        .into_iter()
        .filter(|e| e["resource"] == "pods" && e["verb"] != "get")
        .collect();
    assert!(
        lists
            .iter()
            .any(|e| e["query"]["fieldSelector"] == "spec.nodeName=node-1"),
        "{lists:#?}"
    );
    assert!(
        lists
            .iter()
            .any(|e| e["query"]["labelSelector"] == "tend=yes"),
        "{lists:#?}"
    );
    assert!(
        lists
            .iter()
            .all(|e| e["query"].get("labelSelector").is_some()
                || e["query"].get("fieldSelector").is_some()),
        "no list without the rule's selector: {lists:#?}"
    );
}

/// Under a rule with selectors the host reads the object to check it, and
/// its write names that object's UID (a patch's `metadata.uid` or JSON
/// `test`, a delete's precondition): the API server takes every kind of
/// them for the object checked.
#[test]
fn by_selectors_writes_name_the_object_they_were_checked_on() {
    let api = KubeApi::start();
    create(
        &api,
        "/api/v1/namespaces/default/pods",
        pod("tended", "node-1", json!({"tend": "yes"})),
    );
    let sandbox = Sandbox::new();
    let rule = r#"[{ resource = "pods", verbs = ["get", "patch", "delete"], label-selector = "tend=yes" }]"#;
    let key = "api-version = \"v1\"\nkind = \"Pod\"\nnamespace = \"default\"\nname = \"tended\"";
    let calls = [
        (
            "merge",
            "op = \"patch\"\nbody = '{\"metadata\": {\"labels\": {\"a\": \"1\"}}}'",
        ),
        (
            "json",
            "op = \"patch\"\npatch-type = \"json\"\nbody = '[{\"op\": \"add\", \"path\": \"/metadata/labels/b\", \"value\": \"2\"}]'",
        ),
        (
            "apply",
            "op = \"patch\"\npatch-type = \"apply\"\nbody = '{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"tended\", \"labels\": {\"tend\": \"yes\", \"c\": \"3\"}}}'",
        ),
        ("drop", "op = \"delete\""),
    ];
    let mut config = String::new();
    for (name, call) in calls {
        sandbox.add_plugin("chaos", name);
        config += &hostile(name, rule, &format!("{call}\n{key}"));
    }
    sandbox.config_on_node("node-1", &kube_host(&api, &sandbox, ""), &config);
    api.grant_rbac(&sandbox);
    let path = "/api/v1/namespaces/default/pods/tended";
    let uid = object(&api, path)["metadata"]["uid"].clone();
    for (name, _) in &calls[..3] {
        let said = reconcile(&sandbox, name);
        assert!(said.contains(&format!("{name}: healthy: ok")), "{said}");
    }
    let labels = object(&api, path)["metadata"]["labels"].clone();
    assert_eq!(
        labels,
        json!({"tend": "yes", "a": "1", "b": "2", "c": "3"}),
        "each patch reached the object"
    );
    assert_eq!(object(&api, path)["metadata"]["uid"], uid);
    let said = reconcile(&sandbox, "drop");
    assert!(said.contains("drop: healthy: ok"), "{said}");
    // A Pod's delete starts its graceful termination (the kubelet removes it).
    let deleted = object(&api, path);
    assert!(
        deleted["metadata"]["deletionTimestamp"].is_string(),
        "{deleted}"
    );
}

#[test]
fn a_one_name_rule_with_a_plugin_field_selector_does_not_list_other_nodes() {
    let api = KubeApi::start();
    for name in ["node-1", "node-2", "node-3"] {
        create(
            &api,
            "/api/v1/nodes",
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}),
        );
    }
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "widen");
    let grant = r#"[{ resource = "nodes", verbs = ["list"], names = ["$NODE"] }]"#;
    let call = "op = \"list\"\napi-version = \"v1\"\nkind = \"Node\"\nfield-selector = \"metadata.name!=nothing\"";
    sandbox.config_on_node(
        "node-1",
        &kube_host(&api, &sandbox, ""),
        &hostile("widen", grant, call),
    );
    api.grant_rbac(&sandbox);
    let seq = api.request_seq();
    let said = reconcile(&sandbox, "widen");
    assert!(
        said.contains("healthy: listed node-1\n") || said.contains("healthy: listed node-1"),
        "{said}"
    );
    assert!(
        !said.contains("node-2") && !said.contains("node-3"),
        "{said}"
    );
    let lists: Vec<Value> = tends_requests(&api, seq)
        .into_iter()
        .filter(|e| e["resource"] == "nodes")
        .collect();
    assert!(!lists.is_empty(), "the list went to the API server");
    for e in &lists {
        assert_eq!(
            e["query"]["fieldSelector"], "metadata.name=node-1,metadata.name!=nothing",
            "the one name ANDed, never replaced: {e:#}"
        );
    }
}

#[test]
fn a_fields_narrowed_patch_cannot_cordon_or_taint_its_own_node() {
    let api = KubeApi::start();
    create(
        &api,
        "/api/v1/nodes",
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1", "labels": {"a": "b"}}}),
    );
    let before = object(&api, "/api/v1/nodes/node-1");
    let sandbox = Sandbox::new();
    for name in ["cordon", "taint", "smuggle", "label"] {
        sandbox.add_plugin("chaos", name);
    }
    let grant = r#"[{ resource = "nodes", verbs = ["get", "patch"], names = ["$NODE"], fields = ["metadata.labels", "metadata.annotations", "status.conditions"] }]"#;
    let patch = |kind: &str, body: &str| {
        format!(
            "op = \"patch\"\napi-version = \"v1\"\nkind = \"Node\"\nname = \"node-1\"\npatch-type = \"{kind}\"\nbody = '{body}'"
        )
    };
    sandbox.config_on_node(
        "node-1",
        &kube_host(&api, &sandbox, ""),
        &(hostile("cordon", grant, &patch("merge", r#"{"metadata": {"labels": {"x": "y"}}, "spec": {"unschedulable": true}}"#))
            + &hostile(
                "taint",
                grant,
                &patch("json", r#"[{"op": "add", "path": "/spec/taints", "value": [{"key": "k", "effect": "NoExecute"}]}]"#),
            )
            + &hostile(
                "smuggle",
                grant,
                &patch("json", r#"[{"op": "add", "path": "/metadata~1labels/x", "value": "y"}, {"op": "replace", "path": "/spec/unschedulable", "value": true}]"#),
            )
            + &hostile("label", grant, &patch("merge", r#"{"metadata": {"labels": {"tended": "yes"}}}"#))),
    );
    api.grant_rbac(&sandbox);
    let seq = api.request_seq();
    for (name, path) in [
        ("cordon", "spec.unschedulable"),
        ("taint", "spec.taints"),
        ("smuggle", "[metadata/labels].x"),
    ] {
        let said = reconcile(&sandbox, name);
        assert!(
            said.contains(&format!("denied: patch nodes named node-1: the patch touches \"{path}\", outside the fields of")),
            "{name}: {said}"
        );
    }
    assert!(
        tends_requests(&api, seq)
            .iter()
            .all(|e| e["method"] == "GET"),
        "no patch reached the API server"
    );
    assert_eq!(
        object(&api, "/api/v1/nodes/node-1"),
        before,
        "the Node changed"
    );
    // Within the fields, the patch goes through.
    let said = reconcile(&sandbox, "label");
    assert!(said.contains("healthy: ok"), "{said}");
    let after = object(&api, "/api/v1/nodes/node-1");
    assert_eq!(after["metadata"]["labels"]["tended"], "yes");
    assert!(after["spec"].get("unschedulable").is_none() && after["spec"].get("taints").is_none());
}
