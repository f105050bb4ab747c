//! Drain end to end: the real `tend` and the real `chaos` plugin calling
//! `kube.drain`, against the project's Kubernetes API fake
//! (tests/peers/kube-apiserver.py), whose evictions keep PodDisruptionBudgets
//! as the real API server does and whose kubelet stand-in ends a pod's
//! graceful deletion when its grace period is over (both held to `kubectl
//! drain` in tests/e2e/kube_fake.rs). RBAC is what `tend rbac` renders, and
//! tend authenticates with a ServiceAccount token. Every wait is on a
//! condition with a deadline.

use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tend_e2e::{Daemon, KubeApi, Kubectl, Sandbox, free_port, http_get, wait_until};

const WITHIN: Duration = Duration::from_secs(30);
const NODE: &str = "e2e-node";

/// The grants a drain needs: this Node's `spec.unschedulable`, listing and
/// reading this node's pods, evicting them (and no other node's).
const GRANTS: &str = r#"kube = [
  { resource = "nodes", verbs = ["get", "patch"], names = ["$NODE"], fields = ["spec.unschedulable"] },
  { resource = "pods", verbs = ["get", "list"], field-selector = "spec.nodeName=$NODE" },
  { resource = "pods/eviction", verbs = ["create"], field-selector = "spec.nodeName=$NODE" },
]"#;

/// chaos draining its Node within `deadline_ms`, every `interval`.
fn drainer(name: &str, deadline_ms: u64, interval: &str) -> String {
    format!(
        "[plugins.{name}]\nfile = \"plugins/chaos.wasm\"\ninterval = \"{interval}\"\n[plugins.{name}.grants]\n{GRANTS}\n[plugins.{name}.config]\nmode = \"drain\"\ndeadline-ms = {deadline_ms}\nuncordon-on-give-up = true\n"
    )
}

/// A pod on `node` labelled `app`, with a 1 s grace period, Running and
/// Ready (its status written as its kubelet would): what a budget counts
/// as healthy.
fn ready_pod(api: &KubeApi, name: &str, node: &str, app: &str, owner: Option<Value>) {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "c", "image": "busybox"}]},
    });
    if let Some(owner) = owner {
        pod["metadata"]["ownerReferences"] = json!([owner]);
    }
    let (status, body) = api.call("POST", "/api/v1/namespaces/default/pods", Some(&pod));
    assert_eq!(status, 201, "{body}");
    api.merge_patch(
        &format!("/api/v1/namespaces/default/pods/{name}/status"),
        &json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}),
    );
}

/// A PodDisruptionBudget over `app=APP` keeping `min_available` pods.
fn budget(api: &KubeApi, name: &str, app: &str, min_available: u32) {
    let pdb = json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}},
    });
    let (status, body) = api.call(
        "POST",
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
        Some(&pdb),
    );
    assert_eq!(status, 201, "{body}");
}

/// Make `web-pdb` keep `min_available` pods.
fn keep(api: &KubeApi, min_available: u32) {
    api.merge_patch(
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets/web-pdb",
        &json!({"spec": {"minAvailable": min_available}}),
    );
}

fn pod_exists(api: &KubeApi, name: &str) -> bool {
    api.call(
        "GET",
        &format!("/api/v1/namespaces/default/pods/{name}"),
        None,
    )
    .0 == 200
}

fn cordoned(api: &KubeApi, node: &str) -> bool {
    let (status, node) = api.call("GET", &format!("/api/v1/nodes/{node}"), None);
    assert_eq!(status, 200, "{node}");
    node["spec"]["unschedulable"] == true
}

/// `tend reconcile NAME`'s outcome line.
fn reconcile(sandbox: &Sandbox, name: &str) -> String {
    let out = sandbox.tend(&["reconcile", name]);
    format!("{}{}", out.stdout, out.stderr)
}

/// The node, its pods and a budget: web-1..3 (app=web) under `web-pdb`
/// keeping 2, a DaemonSet's pod, and a pod of another node.
fn cluster(api: &KubeApi) {
    api.seed_node(NODE);
    api.seed_node("other-node");
    for pod in ["web-1", "web-2", "web-3"] {
        ready_pod(api, pod, NODE, "web", None);
    }
    ready_pod(
        api,
        "proxy-x",
        NODE,
        "proxy",
        Some(
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "proxy",
                    "uid": "d5", "controller": true}),
        ),
    );
    ready_pod(api, "db-1", "other-node", "db", None);
    budget(api, "web-pdb", "web", 2);
}

#[test]
fn a_drain_evicts_what_the_budget_allows_stops_at_its_deadline_naming_it_and_uncordons() {
    let api = KubeApi::start();
    cluster(&api);
    api.run_kubelet(NODE);
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "chaos");
    sandbox.config_with_host(&api.host_kube(&sandbox), &drainer("drainer", 6_000, "24h"));
    api.grant_rbac(&sandbox);

    // 3 healthy, 2 needed: one eviction is allowed; the kubelet ends it after
    // its 1 s grace; the other two stay blocked past the 6 s deadline.
    let started = Instant::now();
    let out = reconcile(&sandbox, "drainer");
    let took = started.elapsed();
    assert!(
        out.contains("gave up (uncordoned: true)"),
        "the drain should give up and uncordon: {out}"
    );
    for blocked in ["default/web-2", "default/web-3"] {
        assert!(
            out.contains(&format!(
                "{blocked}: [pdb:default/web-pdb] blocked by PodDisruptionBudget default/web-pdb"
            )),
            "{blocked} should be named as blocked by the budget: {out}"
        );
    }
    assert!(out.contains("evicted default/web-1"), "{out}");
    assert!(took >= Duration::from_secs(6), "gave up early: {took:?}");
    assert!(!pod_exists(&api, "web-1"), "evicted and gone");
    assert!(
        pod_exists(&api, "web-2") && pod_exists(&api, "web-3"),
        "never deleted"
    );
    assert!(pod_exists(&api, "proxy-x"), "a DaemonSet's pod stays");
    assert!(pod_exists(&api, "db-1"), "another node's pod stays");
    assert!(!cordoned(&api, NODE), "uncordoned on giving up");

    // Every act was journaled: the cordon, the eviction, the uncordon. The
    // blocked pods were only asked as the server's dry run: no act, no spend.
    let journal = sandbox.tend(&["journal", "--plugin", "drainer"]);
    let journal = journal.stdout;
    for line in [
        "did kube.cordon nodes/e2e-node",
        "did kube.evict pods/default/web-1",
        "did kube.uncordon nodes/e2e-node",
    ] {
        assert!(journal.contains(line), "{line} not journaled: {journal}");
    }
    assert!(!journal.contains("pods/default/web-2"), "{journal}");

    // The budget loosened: the next drain completes and leaves the Node cordoned.
    keep(&api, 0);
    let out = reconcile(&sandbox, "drainer");
    assert!(
        out.contains("drained: evicted default/web-2, default/web-3"),
        "{out}"
    );
    assert!(out.contains("default/proxy-x: a DaemonSet pod"), "{out}");
    assert!(!pod_exists(&api, "web-2") && !pod_exists(&api, "web-3"));
    assert!(cordoned(&api, NODE), "a drained Node stays cordoned");
}

#[test]
fn a_plan_of_a_drain_names_the_budget_and_changes_nothing() {
    let api = KubeApi::start();
    cluster(&api);
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "chaos");
    sandbox.config_with_host(&api.host_kube(&sandbox), &drainer("drainer", 6_000, "24h"));
    api.grant_rbac(&sandbox);
    let before = api.call("GET", "/fake/state", None).1["resourceVersion"].clone();
    let plan = sandbox.tend(&["plan", "drainer"]);
    let text = format!("{}{}", plan.stdout, plan.stderr);
    assert!(text.contains("cordon nodes/e2e-node"), "{text}");
    // 3 healthy, 2 needed: the server's dry run allows each eviction alone.
    assert!(text.contains("evict pods/default/web-1"), "{text}");
    assert!(
        !text.contains("evict pods/default/proxy-x"),
        "a DaemonSet pod is no step: {text}"
    );
    assert_eq!(
        api.call("GET", "/fake/state", None).1["resourceVersion"],
        before,
        "a plan writes nothing"
    );
    assert!(!cordoned(&api, NODE));
    // With a budget that allows nothing, the plan shows its refusal by name.
    keep(&api, 3);
    let plan = sandbox.tend(&["plan", "drainer"]);
    let text = format!("{}{}", plan.stdout, plan.stderr);
    assert!(
        text.contains("[pdb:default/web-pdb] blocked by PodDisruptionBudget default/web-pdb"),
        "{text}"
    );
    assert!(text.contains("held back by: pdb:default/web-pdb"), "{text}");
    assert!(pod_exists(&api, "web-1") && !cordoned(&api, NODE));
}

#[test]
fn an_uncordon_by_someone_else_during_a_drain_stops_it_before_the_next_eviction() {
    let api = KubeApi::start();
    cluster(&api);
    let kubectl = Kubectl::version("1.33", &api);
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "chaos");
    // Everything blocked: web-pdb keeps all three.
    keep(&api, 3);
    sandbox.config_with_host(&api.host_kube(&sandbox), &drainer("drainer", 25_000, "24h"));
    api.grant_rbac(&sandbox);
    let out = std::thread::scope(|scope| {
        let drain = scope.spawn(|| reconcile(&sandbox, "drainer"));
        wait_until(WITHIN, "the drain's cordon", || cordoned(&api, NODE));
        // Someone uncordons the Node, then the budget frees up: the drain must
        // not take that as leave to go on.
        kubectl.ok(&["uncordon", NODE]);
        keep(&api, 0);
        drain.join().unwrap()
    });
    assert!(out.contains("uncordoned by someone else"), "{out}");
    for pod in ["web-1", "web-2", "web-3"] {
        assert!(
            pod_exists(&api, pod),
            "{pod} evicted after the uncordon: {out}"
        );
    }
    assert!(!cordoned(&api, NODE));
}

/// `/status` of one plugin, or null before the daemon listens.
fn plugin(port: u16, name: &str) -> Value {
    match http_get(port, "/status") {
        Ok((200, body)) => serde_json::from_str::<Value>(&body).unwrap()["plugins"]
            .as_array()
            .and_then(|plugins| plugins.iter().find(|p| p["name"] == name).cloned())
            .unwrap_or(Value::Null),
        _ => Value::Null,
    }
}

fn message(port: u16, name: &str) -> String {
    plugin(port, name)["last"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Two nodes draining under a fleet class of one ticket: the first is held
/// by a budget past its deadline, gives up, uncordons and gives its ticket
/// back; the second, refused while the first held it, then drains.
#[test]
fn a_drain_held_by_a_budget_gives_its_fleet_ticket_back_and_the_next_node_drains() {
    let api = KubeApi::start();
    cluster(&api);
    keep(&api, 3);
    api.seed_node("node-b");
    ready_pod(&api, "job-b", "node-b", "batch", None);
    api.run_kubelet(NODE);
    api.run_kubelet("node-b");
    let fleet = |port: u16, sandbox: &Sandbox| {
        format!(
            "listen = \"127.0.0.1:{port}\"\n{}[host.fleet]\nnamespace = \"tend-system\"\nliveness = \"10s\"\nrenew-every = \"1s\"\nretry-every = \"500ms\"\n[host.fleet.classes.drain]\noperations = [\"kube.cordon\", \"kube.evict\"]\nshare = 0.0\nmin = 1\n[host.fleet.classes.drain.settle]\nready-for = \"1h\"\n",
            api.host_kube(sandbox)
        )
    };
    let start = |node: &str, interval: &str| -> (Sandbox, u16, Daemon) {
        let sandbox = Sandbox::new();
        sandbox.add_plugin("chaos", "chaos");
        let port = free_port();
        sandbox.config_on_node(
            node,
            &fleet(port, &sandbox),
            &drainer("drainer", 6_000, interval),
        );
        api.grant_rbac(&sandbox);
        let daemon = sandbox.daemon();
        (sandbox, port, daemon)
    };
    let (_a, port_a, daemon_a) = start(NODE, "1h");
    wait_until(WITHIN, "node a's drain to cordon it", || {
        cordoned(&api, NODE)
    });
    let (b, port_b, daemon_b) = start("node-b", "1s");
    wait_until(WITHIN, "node b refused while a holds the ticket", || {
        message(port_b, "drainer").contains("fleet budget drain")
    });
    assert!(!cordoned(&api, "node-b"), "refused before its cordon");
    wait_until(
        WITHIN,
        "node a gives up, names the budget and uncordons",
        || {
            let m = message(port_a, "drainer");
            m.contains("gave up (uncordoned: true)")
                && m.contains(
                    "[pdb:default/web-pdb] blocked by PodDisruptionBudget default/web-pdb",
                )
        },
    );
    // What lasts (the next reconcile, a second later, finds nothing to do).
    wait_until(WITHIN, "node b drains under the ticket a gave back", || {
        !pod_exists(&api, "job-b") && cordoned(&api, "node-b")
    });
    let journal = b.tend(&["journal", "--plugin", "drainer"]).stdout;
    assert!(
        journal.contains("did kube.evict pods/default/job-b"),
        "{journal}"
    );
    assert!(!cordoned(&api, NODE), "a stays schedulable");
    assert!(cordoned(&api, "node-b"));
    assert!(pod_exists(&api, "web-1"), "a's pods were never evicted");
    drop((daemon_a, daemon_b));
}
