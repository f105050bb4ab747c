//! node-remediator end to end: the real `tend` and the real
//! `node-remediator` plugin, a real systemd (tests/peers/systemd.sh, on a
//! private bus) whose units stand in for the kubelet and the container
//! runtime, and the project's Kubernetes API fake (held to kubectl in
//! tests/e2e/kube_fake.rs) with the RBAC `tend rbac` renders. The test
//! writes the NodeCondition itself, as problem-detector would, and clears
//! it, as its TTL would. The reboot step reboots the peer's systemd (PID 1 of
//! its own namespaces: the namespace ends as a machine's processes do); a
//! unit writes a new identity on every boot, standing in for the kernel's
//! boot ID (which no test can change), and the test powers the peer back on
//! and marks the Node Ready again, as firmware and the kubelet would.
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
    node_conditions(api, true, status);
}

/// The kubelet's conditions, Ready as `ready`, and KernelDeadlock as `status`.
fn node_conditions(api: &KubeApi, ready: bool, status: &str) {
    let mut conditions = kubelet_conditions().as_array().unwrap().clone();
    for condition in &mut conditions {
        if condition["type"] == "Ready" && !ready {
            condition["status"] = "False".into();
        }
    }
    conditions.push(
        json!({"type": "KernelDeadlock", "status": status, "reason": "TaskHung",
                           "message": "task blocked for more than 120 seconds"}),
    );
    api.merge_patch(
        &format!("/api/v1/nodes/{NODE}/status"),
        &json!({"status": {"conditions": conditions}}),
    );
}

/// `[host]` listening on `port`, with the peer's systemd and the fake's API.
fn systemd_host(port: u16, peer: &SystemdPeer, api: &KubeApi, sandbox: &Sandbox) -> String {
    format!(
        "listen = \"127.0.0.1:{port}\"\n[host.systemd]\nbus = \"{}\"\n{}",
        peer.bus_address(),
        api.host_kube(sandbox)
    )
}

/// tend with node-remediator: restart the kubelet's unit, then the
/// runtime's; a step verifies after 2 s clear, escalates after
/// `verify_within_ms`. `more` adds a kube rule and config lines.
fn config(
    (api, peer, sandbox): (&KubeApi, &SystemdPeer, &Sandbox),
    port: u16,
    verify_within_ms: u64,
    more: More,
) {
    let host = systemd_host(port, peer, api, sandbox);
    let More { kube, config } = more;
    let plugin = format!(
        r#"[plugins.node-remediator]
interval = "1s"
[plugins.node-remediator.grants]
systemd = {{ units = ["tend-*.service"], operations = ["restart"] }}
kube = [
  {{ resource = "nodes", verbs = ["get", "list", "watch", "patch"], names = ["$NODE"], fields = ["spec.unschedulable"] }},
  {kube}
]
[plugins.node-remediator.config]
conditions = ["KernelDeadlock"]
settle-ms = 2000
verify-within-ms = {verify_within_ms}
quiet-ms = 60000
{config}
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

/// What a test adds to [`config`]: a kube rule and config lines.
#[derive(Default)]
struct More {
    kube: &'static str,
    config: &'static str,
}

fn world(verify_within_ms: u64, more: More) -> World {
    let api = KubeApi::start();
    api.seed_node(NODE);
    let peer = SystemdPeer::start();
    let sandbox = Sandbox::new();
    let (kubelet, runtime) = (sandbox.path("kubelet.count"), sandbox.path("runtime.count"));
    sleeper(&peer, "tend-kubelet.service", &kubelet);
    sleeper(&peer, "tend-runtime.service", &runtime);
    let port = free_port();
    config((&api, &peer, &sandbox), port, verify_within_ms, more);
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
    let w = world(4000, More::default());
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
    // The plan (through the daemon) names why no next step is taken yet.
    let plan = w.sandbox.tend(&["plan", "node-remediator"]).stdout;
    assert!(
        plan.contains("progressing: [unverified] step ")
            && plan.contains("held back by (the plugin says): unverified"),
        "{plan}"
    );
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
    let w = world(60_000, More::default());
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
            "{}[host.fleet]\nnamespace = \"tend-system\"\nliveness = \"10s\"\nrenew-every = \"1s\"\nretry-every = \"500ms\"\n[host.fleet.classes.restart]\noperations = [\"systemd.restart\"]\nshare = 0.0\nmin = 1\n[host.fleet.classes.restart.settle]\nready-for = \"1h\"\n",
            systemd_host(port, &peer, &api, &sandbox)
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
        let m = message(second.2);
        m.starts_with("[budget] step 1/1")
            && m.contains("held: budget-exhausted: [budget] fleet budget restart")
    });
    // Its plan, through its daemon, names the reason too.
    let plan = second.1.tend(&["plan", "node-remediator"]).stdout;
    assert!(plan.contains("held back by: budget"), "{plan}");
    assert_eq!(starts(&second.3), 1, "both remediated at once");
    assert_eq!(starts(&first.3), 2);
    drop(daemons);
    drop(peer);
}

/// A world to reboot: the Kubernetes fake with this Node, its kubelet
/// stand-in and one pod on it that takes `grace` seconds to leave; the
/// systemd peer made rebootable; tend running node-remediator with one
/// step, a reboot, its first reconcile done. Dropped daemon first.
struct Rebooting {
    _daemon: Daemon,
    _sandbox: Sandbox,
    port: u16,
    boot_id: std::path::PathBuf,
    peer: SystemdPeer,
    api: KubeApi,
}

fn rebooting(pod: &str, grace: u64) -> Rebooting {
    let api = KubeApi::start();
    api.seed_node(NODE);
    api.run_kubelet(NODE);
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod, "namespace": "default"},
        "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": grace,
                 "containers": [{"name": "c", "image": "busybox"}]}});
    let (code, body) = api.call("POST", "/api/v1/namespaces/default/pods", Some(&pod));
    assert_eq!(code, 201, "{body}");
    let peer = SystemdPeer::start();
    let boot_id = peer.rebootable();
    let sandbox = Sandbox::new();
    let port = free_port();
    let host = systemd_host(port, &peer, &api, &sandbox);
    let plugin = format!(
        r#"[plugins.node-remediator]
interval = "1s"
[plugins.node-remediator.grants]
systemd = {{ units = ["reboot.target"], operations = ["start"] }}
files = [{{ path = "{peer_dir}" }}]
kube = [
  {{ resource = "nodes", verbs = ["get", "list", "watch", "patch"], names = ["$NODE"], fields = ["spec.unschedulable"] }},
  {{ resource = "pods", verbs = ["get", "list"], field-selector = "spec.nodeName=$NODE" }},
  {{ resource = "pods/eviction", verbs = ["create"], field-selector = "spec.nodeName=$NODE" }},
]
[plugins.node-remediator.config]
conditions = ["KernelDeadlock"]
settle-ms = 2000
verify-within-ms = 300000
boot-id-path = "{boot_id}"
steps = [{{ action = "reboot", drain-deadline-ms = 30000 }}]
"#,
        boot_id = boot_id.display(),
        peer_dir = peer.dir().display()
    );
    sandbox.add_plugin("node-remediator", "node-remediator");
    sandbox.config_with_host(&host, &plugin);
    api.grant_rbac(&sandbox);
    let daemon = sandbox.daemon();
    wait_until(WITHIN, "the first reconcile", || {
        message(port).contains("no remediation needed")
    });
    Rebooting {
        _daemon: daemon,
        _sandbox: sandbox,
        port,
        boot_id,
        peer,
        api,
    }
}

/// The reboot step against a real systemd: it drains first (the Node's pod
/// evicted, its kubelet stand-in ending it), checks the cordon, and starts
/// `reboot.target`, which reboots the peer's systemd. While the machine is
/// off, nothing more is done and the ladder says it waits; powered on, a new
/// boot identity and the Node Ready again verify the step, which uncordons.
/// Rebooted exactly once.
#[test]
fn a_reboot_drains_reboots_the_peer_once_and_verifies_by_its_new_boot() {
    let w = rebooting("web-1", 1);
    let first_boot = std::fs::read_to_string(&w.boot_id).unwrap();
    deadlock(&w.api, "True");
    w.peer.wait_rebooted(WITHIN);
    assert_eq!(w.peer.reboots(), 1);
    let (code, _) = w
        .api
        .call("GET", "/api/v1/namespaces/default/pods/web-1", None);
    assert_eq!(code, 404, "the pod was evicted before the reboot");
    let (_, node) = w.api.call("GET", &format!("/api/v1/nodes/{NODE}"), None);
    assert_eq!(node["spec"]["unschedulable"], true, "{node}");
    // Off: its kubelet silent, the node controller marks it NotReady.
    node_conditions(&w.api, false, "True");
    wait_until(WITHIN, "the ladder waiting for the node", || {
        message(w.port).contains("waiting for the node to come back from its reboot")
    });
    // Powered on: a new boot, the problem gone, Ready again.
    w.peer.start_bus_again();
    assert_ne!(std::fs::read_to_string(&w.boot_id).unwrap(), first_boot);
    deadlock(&w.api, "False");
    wait_until(WITHIN, "the reboot verified", || {
        let m = message(w.port);
        m.contains("step 1/1 (reboot) verified; uncordoned the Node")
            || m.contains("recovered by step 1/1 (reboot)")
    });
    let (_, node) = w.api.call("GET", &format!("/api/v1/nodes/{NODE}"), None);
    assert!(node["spec"]["unschedulable"] != true, "{node}");
    assert_eq!(w.peer.reboots(), 1, "rebooted once");
    let reasons = events(&w.api);
    assert!(
        reasons.contains(&"Remediating".to_string()) && reasons.contains(&"Remediated".to_string()),
        "{reasons:?}"
    );
}

/// node-remediator as a Medik8s remediator, NodeHealthCheck played by the
/// test as NHC does it: a `TendRemediation` named after the node, made from
/// the template of examples/deploy/components/medik8s (whose CRDs the fake
/// serves as if installed). The request is a problem: the first step is
/// taken and the request's status says `Processing`; when NHC times it out
/// (escalating to its next remediator) the ladder stands down, taking no
/// further step; NHC deleting it (the node healthy) ends the ladder.
#[test]
fn a_node_health_check_request_runs_the_ladder_and_its_timeout_stands_it_down() {
    let w = world(
        4000,
        More {
            kube: r#"{ group = "remediation.tend.dev", resource = "tendremediations", verbs = ["get", "list", "watch", "patch"], namespaces = ["tend-system"], names = ["$NODE"], fields = ["status.conditions"] },"#,
            config: r#"medik8s = { namespace = "tend-system" }"#,
        },
    );
    let (api, port, kubelet, runtime) = (&w.api, w.port, &w.kubelet, &w.runtime);
    let (code, body) = api.call(
        "POST",
        "/api/v1/namespaces",
        Some(
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tend-system"}}),
        ),
    );
    assert!(code == 201 || code == 409, "{body}");
    let daemon = w.sandbox.daemon();
    wait_until(WITHIN, "the first reconcile", || {
        message(port).contains("no remediation needed")
    });
    let request = "/apis/remediation.tend.dev/v1alpha1/namespaces/tend-system/tendremediations";
    let nhc = json!({"apiVersion": "remediation.tend.dev/v1alpha1", "kind": "TendRemediation",
        "metadata": {"name": NODE, "namespace": "tend-system", "ownerReferences": [{
            "apiVersion": "remediation.medik8s.io/v1alpha1", "kind": "NodeHealthCheck",
            "name": "workers", "uid": "5f1e0c2a-0000-4000-8000-000000000001"}]},
        "spec": {}});
    let (code, body) = api.call("POST", request, Some(&nhc));
    assert_eq!(code, 201, "{body}");
    wait_until(WITHIN, "the first step, for NodeHealthCheck", || {
        starts(kubelet) == 2
    });
    let status = |kind: &str| {
        let (_, object) = api.call("GET", &format!("{request}/{NODE}"), None);
        (object["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default())
        .into_iter()
        .find(|c| c["type"] == kind)
        .map(|c| c["status"].as_str().unwrap_or_default().to_string())
    };
    wait_until(WITHIN, "the request Processing", || {
        status("Processing").as_deref() == Some("True")
    });
    // NHC times it out: the ladder stands down, whatever its window says.
    api.merge_patch(
        &format!("{request}/{NODE}"),
        &json!({"metadata": {"annotations": {"remediation.medik8s.io/nhc-timed-out": "2026-11-29T00:00:00Z"}}}),
    );
    wait_until(WITHIN, "the ladder standing down", || {
        message(port).contains("standing down for its next remediator")
    });
    let reconciles = plugin_status(port, "node-remediator")["reconciles"]
        .as_u64()
        .unwrap_or(0);
    // Past the 4 s window that would have escalated.
    wait_until(WITHIN, "six more reconciles", || {
        plugin_status(port, "node-remediator")["reconciles"]
            .as_u64()
            .unwrap_or(0)
            >= reconciles + 6
    });
    assert_eq!(
        starts(runtime),
        1,
        "a timed-out request took a further step"
    );
    // Healthy: NHC deletes its request; the ladder verifies and ends.
    let (code, body) = api.call("DELETE", &format!("{request}/{NODE}"), None);
    assert_eq!(code, 200, "{body}");
    wait_until(WITHIN, "the step verified", || {
        let m = message(port);
        m.contains("step 1/2 (restart tend-kubelet.service) verified")
            || m.contains("recovered by step 1/2")
    });
    assert_eq!((starts(kubelet), starts(runtime)), (2, 1));
    drop(daemon);
    drop(w);
}

/// kured #929 end to end: the Node uncordoned by someone else while the
/// reboot step's drain waits for its pod to leave is not rebooted. The drain
/// stops at the uncordon (the pods it left say `[stale-state]`), the step is
/// held with that reason, and the peer never reboots.
#[test]
fn a_node_uncordoned_during_its_drain_is_not_rebooted() {
    // Ten seconds to leave: the uncordon comes while it is leaving.
    let w = rebooting("slow-1", 10);
    deadlock(&w.api, "True");
    wait_until(WITHIN, "the pod evicted, leaving", || {
        let (_, pod) = w
            .api
            .call("GET", "/api/v1/namespaces/default/pods/slow-1", None);
        !pod["metadata"]["deletionTimestamp"].is_null()
    });
    // Someone else uncordons the Node while the drain waits for the pod.
    w.api.merge_patch(
        &format!("/api/v1/nodes/{NODE}"),
        &json!({"spec": {"unschedulable": false}}),
    );
    wait_until(WITHIN, "the step held for the uncordon", || {
        message(w.port).starts_with("[stale-state] step 1/1 (reboot) held")
    });
    // Its next looks respect the uncordon (for quiet-ms): no new drain.
    wait_until(WITHIN, "the step held on", || {
        message(w.port).contains("not taken again for")
    });
    assert_eq!(w.peer.reboots(), 0, "rebooted a Node someone uncordoned");
    let (_, node) = w.api.call("GET", &format!("/api/v1/nodes/{NODE}"), None);
    assert!(node["spec"]["unschedulable"] != true, "{node}");
}
