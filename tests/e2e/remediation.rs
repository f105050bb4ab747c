//! node-remediator end to end: the real `tend` and the real
//! `node-remediator` plugin, a real systemd (tests/peers/systemd.sh, on a
//! private bus) whose units stand in for the kubelet and the container
//! runtime, and the project's Kubernetes API fake (held to kubectl in
//! tests/e2e/kube_fake.rs) with the RBAC `tend rbac` renders. The test
//! writes the NodeCondition itself, as problem-detector would, and clears
//! it, as its TTL would. The reboot step is tested against the SDK's fakes
//! (plugins/node-remediator/src/tests.rs): a reboot of a real machine, or of
//! the peer's systemd, cannot run in this suite (said in docs/design.md).
//! Every wait is on a condition with a deadline.

use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use tend_e2e::{
    Daemon, KubeApi, Sandbox, SystemdPeer, free_port, kubelet_conditions, plugin_status, starts,
    wait_until,
};

const WITHIN: Duration = Duration::from_secs(30);
const NODE: &str = "e2e-node";

/// A unit that stays up and counts its starts in `count`.
fn sleeper(peer: &SystemdPeer, unit: &str, count: &Path) {
    peer.counting_unit(unit, count);
    peer.manager(&["StartUnit", "ss", unit, "replace"]);
    peer.wait_for_unit(unit, "ActiveState", "active", WITHIN);
}

/// The Node's conditions: the kubelet's, and KernelDeadlock as `status`
/// (what problem-detector writes, through the status subresource).
fn deadlock(api: &KubeApi, status: &str) {
    let mut conditions = kubelet_conditions().as_array().unwrap().clone();
    conditions.push(
        json!({"type": "KernelDeadlock", "status": status, "reason": "TaskHung",
                           "message": "task blocked for more than 120 seconds"}),
    );
    api.merge_patch(
        &format!("/api/v1/nodes/{NODE}/status"),
        &json!({"status": {"conditions": conditions}}),
    );
}

/// tend with node-remediator: restart the kubelet's unit, then the
/// runtime's; a step verifies after 2 s clear, escalates after
/// `verify_within_ms`.
fn config(api: &KubeApi, peer: &SystemdPeer, sandbox: &Sandbox, port: u16, verify_within_ms: u64) {
    let host = format!(
        "listen = \"127.0.0.1:{port}\"\n[host.systemd]\nbus = \"{}\"\n{}",
        peer.bus_address(),
        api.host_kube(sandbox)
    );
    let plugin = format!(
        r#"[plugins.node-remediator]
interval = "1s"
[plugins.node-remediator.grants]
systemd = {{ units = ["tend-*.service"], operations = ["restart"] }}
kube = [{{ resource = "nodes", verbs = ["get", "list", "watch", "patch"], names = ["$NODE"], fields = ["spec.unschedulable"] }}]
[plugins.node-remediator.config]
conditions = ["KernelDeadlock"]
settle-ms = 2000
verify-within-ms = {verify_within_ms}
quiet-ms = 60000
steps = [
  {{ action = "restart-unit", unit = "tend-kubelet.service" }},
  {{ action = "restart-unit", unit = "tend-runtime.service" }},
]
"#
    );
    sandbox.add_plugin("node-remediator", "node-remediator");
    sandbox.config_with_host(&host, &plugin);
}

fn message(port: u16) -> String {
    plugin_status(port, "node-remediator")["last"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The Events about the Node, by reason.
fn events(api: &KubeApi) -> Vec<String> {
    let (_, list) = api.call("GET", "/api/v1/namespaces/default/events", None);
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter(|e| e["involvedObject"]["name"] == NODE)
                .map(|e| e["reason"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

struct World {
    api: KubeApi,
    peer: SystemdPeer,
    sandbox: Sandbox,
    port: u16,
    kubelet: std::path::PathBuf,
    runtime: std::path::PathBuf,
}

fn world(verify_within_ms: u64) -> World {
    let api = KubeApi::start();
    api.seed_node(NODE);
    let peer = SystemdPeer::start();
    let sandbox = Sandbox::new();
    let (kubelet, runtime) = (sandbox.path("kubelet.count"), sandbox.path("runtime.count"));
    sleeper(&peer, "tend-kubelet.service", &kubelet);
    sleeper(&peer, "tend-runtime.service", &runtime);
    let port = free_port();
    config(&api, &peer, &sandbox, port, verify_within_ms);
    api.grant_rbac(&sandbox);
    World {
        api,
        peer,
        sandbox,
        port,
        kubelet,
        runtime,
    }
}

#[test]
fn a_condition_that_stays_escalates_exactly_once_and_a_recovery_ends_the_ladder() {
    let w = world(4000);
    let daemon = w.sandbox.daemon();
    wait_until(WITHIN, "the first reconcile", || {
        message(w.port).contains("no remediation needed")
    });
    // Healthy and idle: its reads come from the watch cache its grant's
    // `watch` starts, so three more reconciles ask the API server nothing
    // (the fleet's and the cache's own watch are tend's, not the plugin's).
    let reconciles = || {
        plugin_status(w.port, "node-remediator")["reconciles"]
            .as_u64()
            .unwrap_or(0)
    };
    let seq = w.api.request_seq();
    let before = reconciles();
    wait_until(WITHIN, "three idle reconciles", || {
        reconciles() >= before + 3
    });
    let asked: Vec<Value> = w
        .api
        .requests_since(seq)
        .into_iter()
        .filter(|r| r["verb"] != "watch")
        .collect();
    assert!(
        asked.is_empty(),
        "an idle node asked the API server: {asked:?}"
    );
    deadlock(&w.api, "True");
    wait_until(WITHIN, "the kubelet's unit restarted", || {
        starts(&w.kubelet) == 2
    });
    assert_eq!(starts(&w.runtime), 1, "escalated before the step's window");
    // Not verified within 4 s: the next step, once.
    wait_until(WITHIN, "the runtime's unit restarted", || {
        starts(&w.runtime) == 2
    });
    assert_eq!(starts(&w.kubelet), 2, "the first step was taken once");
    // It clears (problem-detector's TTL): verified after 2 s clear.
    deadlock(&w.api, "False");
    // Verified, then watching (the next reconcile, a second later).
    wait_until(WITHIN, "the step verified", || {
        let m = message(w.port);
        m.contains("step 2/2 (restart tend-runtime.service) verified")
            || m.contains("recovered by step 2/2 (restart tend-runtime.service)")
    });
    assert_eq!((starts(&w.kubelet), starts(&w.runtime)), (2, 2));
    let reasons = events(&w.api);
    assert_eq!(
        reasons.iter().filter(|r| *r == "Remediating").count(),
        2,
        "{reasons:?}"
    );
    assert!(reasons.contains(&"Remediated".to_string()), "{reasons:?}");
    // Every step was journaled, with its fleet and budget checks passed.
    let journal = w
        .sandbox
        .tend(&["journal", "--plugin", "node-remediator"])
        .stdout;
    assert!(
        journal.contains("did systemd.restart tend-kubelet.service"),
        "{journal}"
    );
    assert!(
        journal.contains("did systemd.restart tend-runtime.service"),
        "{journal}"
    );
    drop(daemon);
    drop(w.peer);
}

#[test]
fn tend_killed_mid_step_resumes_at_that_step_without_repeating_it() {
    let w = world(60_000);
    deadlock(&w.api, "True");
    let daemon = w.sandbox.daemon();
    wait_until(WITHIN, "the kubelet's unit restarted", || {
        starts(&w.kubelet) == 2
    });
    let pid = daemon.pid();
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    drop(daemon);
    let again: Daemon = w.sandbox.daemon();
    wait_until(WITHIN, "the ladder read back after the restart", || {
        message(w.port).contains("step 1/2 (restart tend-kubelet.service) taken")
    });
    let status: Value = plugin_status(w.port, "node-remediator");
    assert_eq!(
        starts(&w.kubelet),
        2,
        "repeated after the restart: {status}"
    );
    assert_eq!(starts(&w.runtime), 1);
    drop(again);
    drop(w.peer);
}

/// Two nodes with KernelDeadlock at once under a fleet class of one ticket
/// (`systemd.restart`): one remediates, the other waits and says why.
#[test]
fn two_nodes_failing_at_once_under_one_ticket_remediate_one_at_a_time() {
    let api = KubeApi::start();
    let peer = SystemdPeer::start();
    let mut agents = Vec::new();
    for node in ["node-a", "node-b"] {
        api.seed_node(node);
        let sandbox = Sandbox::new();
        let count = sandbox.path("kubelet.count");
        sleeper(&peer, &format!("tend-kubelet-{node}.service"), &count);
        let port = free_port();
        let host = format!(
            "listen = \"127.0.0.1:{port}\"\n[host.systemd]\nbus = \"{}\"\n{}[host.fleet]\nnamespace = \"tend-system\"\nliveness = \"10s\"\nrenew-every = \"1s\"\nretry-every = \"500ms\"\n[host.fleet.classes.restart]\noperations = [\"systemd.restart\"]\nshare = 0.0\nmin = 1\n[host.fleet.classes.restart.settle]\nready-for = \"1h\"\n",
            peer.bus_address(),
            api.host_kube(&sandbox)
        );
        let plugin = format!(
            r#"[plugins.node-remediator]
interval = "1s"
[plugins.node-remediator.grants]
systemd = {{ units = ["tend-kubelet-{node}.service"], operations = ["restart"] }}
kube = [{{ resource = "nodes", verbs = ["get", "list", "watch", "patch"], names = ["$NODE"], fields = ["spec.unschedulable"] }}]
[plugins.node-remediator.config]
conditions = ["KernelDeadlock"]
verify-within-ms = 600000
steps = [{{ action = "restart-unit", unit = "tend-kubelet-{node}.service" }}]
"#
        );
        sandbox.add_plugin("node-remediator", "node-remediator");
        sandbox.config_on_node(node, &host, &plugin);
        api.grant_rbac(&sandbox);
        agents.push((node, sandbox, port, count));
    }
    for (node, ..) in &agents {
        let mut conditions = kubelet_conditions().as_array().unwrap().clone();
        conditions.push(json!({"type": "KernelDeadlock", "status": "True", "reason": "TaskHung"}));
        api.merge_patch(
            &format!("/api/v1/nodes/{node}/status"),
            &json!({"status": {"conditions": conditions}}),
        );
    }
    let daemons: Vec<Daemon> = agents
        .iter()
        .map(|(_, sandbox, ..)| sandbox.daemon())
        .collect();
    wait_until(WITHIN, "one node's restart", || {
        agents.iter().any(|(.., count)| starts(count) == 2)
    });
    let (first, second) = match starts(&agents[0].3) == 2 {
        true => (&agents[0], &agents[1]),
        false => (&agents[1], &agents[0]),
    };
    wait_until(WITHIN, "the other waiting, saying why", || {
        message(second.2).contains("held: budget-exhausted: fleet budget restart")
    });
    assert_eq!(starts(&second.3), 1, "both remediated at once");
    assert_eq!(starts(&first.3), 2);
    drop(daemons);
    drop(peer);
}
