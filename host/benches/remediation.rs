//! Remediation as operators run it: the release `tend` with the real
//! node-remediator (its ladder's step a reboot, so it drains first), the
//! project's Kubernetes API fake with a kubelet stand-in, and 30 pods on the
//! Node. Measured: a NodeCondition set -> the Node cordoned (p50 over
//! rounds, seen on the API server's watch); the drain of 30 pods, from the
//! condition to the last pod gone; API requests of one remediation; API
//! requests of an idle node's reconciles. The reboot's unit is on a D-Bus
//! socket that does not exist, so it is never made (unavailable: the ladder
//! does not advance); the bench uncordons and puts the pods back between
//! rounds. Needs
//! `cargo xtask plugins` and the venv (`cargo xtask test` or `cargo xtask
//! demo` makes it).
//!
//!   cargo bench -p tend --bench remediation

#[allow(dead_code)]
mod landing;
use landing::{settle, start_with_host};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tend_e2e::{KubeApi, Sandbox, kubelet_conditions, plugin_status, time_until};

const NODE: &str = "e2e-node";
const PODS: usize = 30;
const ROUNDS: usize = 5;

fn plugin() -> String {
    r#"[plugins.node-remediator]
interval = "1h"
# kubectl's own request rate (50 a second, bursts of 100); the default, 5
# and 10 as client-go's, paces a drain at about 2.5 pods a second.
[plugins.node-remediator.limits]
kube-qps = 50
kube-burst = 100
[plugins.node-remediator.grants]
kube = [
  { resource = "nodes", verbs = ["get", "list", "watch", "patch"], names = ["$NODE"], fields = ["spec.unschedulable"] },
  { resource = "pods", verbs = ["get", "list"], field-selector = "spec.nodeName=$NODE" },
  { resource = "pods/eviction", verbs = ["create"], field-selector = "spec.nodeName=$NODE" },
]
files = [{ path = "/proc/sys/kernel/random" }]
# A unit of a bus that is not there: the reboot is asked, never made.
systemd = { units = ["tend-bench-reboot.target"], operations = ["start"] }
[plugins.node-remediator.config]
conditions = ["KernelDeadlock"]
settle-ms = 1000
verify-within-ms = 60000
steps = [{ action = "reboot", drain-deadline-ms = 60000, target = "tend-bench-reboot.target" }]
"#
    .into()
}

/// The Node's conditions: the kubelet's and KernelDeadlock as `status`.
fn deadlock(api: &KubeApi, status: &str) {
    let mut conditions = kubelet_conditions().as_array().unwrap().clone();
    conditions.push(json!({"type": "KernelDeadlock", "status": status, "reason": "TaskHung"}));
    api.merge_patch(
        &format!("/api/v1/nodes/{NODE}/status"),
        &json!({"status": {"conditions": conditions}}),
    );
}

/// 30 Running, Ready pods on the Node, each leaving at once when evicted.
fn pods(api: &KubeApi) {
    for i in 0..PODS {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("web-{i}"), "namespace": "default", "labels": {"app": "web"}},
            "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": "busybox"}]}});
        let (code, body) = api.call("POST", "/api/v1/namespaces/default/pods", Some(&pod));
        assert_eq!(code, 201, "{body}");
    }
}

fn pods_left(api: &KubeApi) -> usize {
    let (_, list) = api.call(
        "GET",
        &format!("/api/v1/namespaces/default/pods?fieldSelector=spec.nodeName={NODE}"),
        None,
    );
    list["items"].as_array().map_or(0, Vec::len)
}

fn tends_requests(api: &KubeApi, since: u64) -> Vec<Value> {
    api.requests_since(since)
        .into_iter()
        .filter(|r| {
            r["userAgent"]
                .as_str()
                .is_some_and(|a| a.starts_with("tend/"))
                && r["verb"] != "watch"
        })
        .collect()
}

fn main() {
    // SAFETY: no other thread runs yet.
    unsafe { std::env::set_var("TEND_BIN", env!("CARGO_BIN_EXE_tend")) };
    let api = KubeApi::start();
    api.seed_node(NODE);
    api.run_kubelet(NODE);
    let sandbox = Sandbox::new();
    sandbox.add_plugin("node-remediator", "node-remediator");
    let host = format!(
        "{}[host.systemd]\nbus = \"unix:path=/nonexistent/tend-bench-bus\"\n",
        api.host_kube(&sandbox)
    );
    sandbox.config_with_host(&host, &plugin());
    api.grant_rbac(&sandbox);
    let (daemon, port) = start_with_host(&sandbox, &host, &plugin(), "warn");
    settle(port, "node-remediator");
    let reconciles = || {
        plugin_status(port, "node-remediator")["reconciles"]
            .as_u64()
            .unwrap_or(0)
    };

    println!(
        "== an idle node: API requests of 5 reconciles (its Node read from the watch cache) =="
    );
    let seq = api.request_seq();
    let before = reconciles();
    for _ in 0..5 {
        let asked = sandbox.tend(&["reconcile", "node-remediator"]);
        assert!(asked.success, "{}", asked.stderr);
        // The daemon takes one manual reconcile a second.
        std::thread::sleep(Duration::from_millis(1100));
    }
    time_until(Duration::from_secs(30), "5 reconciles", || {
        reconciles() >= before + 5
    });
    println!(
        "{} requests (the daemon's reconciles through its control socket)",
        tends_requests(&api, seq).len()
    );

    println!(
        "\n== KernelDeadlock set -> Node cordoned (the reboot step's drain), and the drain of {PODS} pods =="
    );
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (mut to_cordon, mut to_drained, mut requests) = (vec![], vec![], vec![]);
    for _ in 0..ROUNDS {
        pods(&api);
        let mut watch = api.watch(&format!(
            "/api/v1/nodes?watch=1&resourceVersion={}",
            api.resource_version()
        ));
        let seq = api.request_seq();
        let set = Instant::now();
        deadlock(&api, "True");
        watch.until(Duration::from_secs(30), "the cordon", |event| {
            event["object"]["spec"]["unschedulable"] == true
        });
        to_cordon.push(set.elapsed());
        time_until(Duration::from_secs(60), "every pod gone", || {
            pods_left(&api) == 0
        });
        to_drained.push(set.elapsed());
        // The reboot not made (no bus): the outcome says the step is held.
        time_until(Duration::from_secs(30), "the step held", || {
            plugin_status(port, "node-remediator")["last"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("held"))
        });
        requests.push(tends_requests(&api, seq).len());
        deadlock(&api, "False");
        api.merge_patch(
            &format!("/api/v1/nodes/{NODE}"),
            &json!({"spec": {"unschedulable": null}}),
        );
        time_until(Duration::from_secs(30), "the ladder idle", || {
            plugin_status(port, "node-remediator")["last"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("no remediation needed"))
        });
    }
    to_cordon.sort();
    to_drained.sort();
    requests.sort();
    println!(
        "condition -> cordon: p50 {:.1} ms, max {:.1} ms ({ROUNDS} rounds; the Node's watch wakes the plugin, which reads it from the cache, lists its pods fresh, checks every grant, cordons)",
        ms(to_cordon[ROUNDS / 2]),
        ms(to_cordon[ROUNDS - 1])
    );
    println!(
        "condition -> {PODS} pods gone: p50 {:.1} ms, max {:.1} ms (a server dry run and an eviction each, on the round's fresh list; the kubelet stand-in deleting at once)",
        ms(to_drained[ROUNDS / 2]),
        ms(to_drained[ROUNDS - 1])
    );
    println!(
        "API requests of one remediation (to the reboot's refusal): p50 {}, max {}",
        requests[ROUNDS / 2],
        requests[ROUNDS - 1]
    );
    drop(daemon);
}
