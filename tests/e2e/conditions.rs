//! NodeConditions end to end: the real `tend`, the real `problem-detector`
//! and `chaos` plugins, the fake Kubernetes API server
//! (tests/peers/kube-apiserver.py: the Node `status` subresource with the
//! API server's strategic merge, RBAC from `tend rbac`, held to kubectl in
//! tests/e2e/kube_fake.rs), and kubectl to look at the Node. The kernel log
//! is a file in the `/dev/kmsg` record format behind the same reader as the
//! device (tests/e2e/logs.rs says why). Every wait is on a condition with a
//! deadline.

use serde_json::Value;
use std::time::{Duration, Instant};
use tend_e2e::{
    Daemon, KubeApi, Kubectl, Sandbox, append_kmsg, free_port, http_get, metric, node_condition,
    wait_until,
};

const WITHIN: Duration = Duration::from_secs(20);
const NODE: &str = "e2e-node";
const HUNG: &str = "INFO: task kworker/0:1:77 blocked for more than 120 seconds.";

/// `[host]` lines: listen, the kernel log file, the boot ID, the kube
/// client's kubeconfig, and a short heartbeat.
fn host(api: &KubeApi, sandbox: &Sandbox, port: u16, heartbeat: &str) -> String {
    format!(
        "listen = \"127.0.0.1:{port}\"\n[host.logs]\nkernel-path = \"{}\"\nboot-id-path = \"{}\"\n[host.conditions]\nheartbeat = \"{heartbeat}\"\n{}",
        sandbox.path("kmsg").display(),
        sandbox.path("boot_id").display(),
        api.host_kube(sandbox)
    )
}

/// problem-detector with the hung-task rule, `KernelDeadlock` tainting the
/// Node, and Events on its own Node; `enabled` as given.
fn detector(enabled: bool) -> String {
    format!(
        r#"[plugins.problem-detector]
enabled = {enabled}
interval = "24h"
[plugins.problem-detector.grants]
conditions = [{{ condition = "KernelDeadlock", taint-on = {{ effect = "NoSchedule" }} }}]
kube = [{{ resource = "nodes", verbs = ["get"], names = ["$NODE"] }}]
[plugins.problem-detector.grants.logs]
kernel = true
[[plugins.problem-detector.grants.logs.watch]]
rule = "task-hung"
source = "kernel"
pattern = 'task [\S ]+:\w+ blocked for more than \w+ seconds\.'
"#
    )
}

/// A chaos plugin `name` granted `grant` (a TOML array), making one
/// conditions call (`config`: the mode's TOML lines).
fn chaos(name: &str, grant: &str, config: &str) -> String {
    format!(
        "[plugins.{name}]\ninterval = \"24h\"\n[plugins.{name}.grants]\nconditions = {grant}\n[plugins.{name}.config]\nmode = \"condition\"\n{config}\n"
    )
}

fn sandbox() -> Sandbox {
    let sandbox = Sandbox::new();
    std::fs::write(
        sandbox.path("boot_id"),
        "0f5e3c7d-9a0b-4c1d-8e2f-3a4b5c6d7e8f\n",
    )
    .unwrap();
    append_kmsg(&sandbox.path("kmsg"), 1, 6, ["booted".to_string()]);
    sandbox
}

fn node(api: &KubeApi) -> Value {
    let (status, node) = api.call("GET", &format!("/api/v1/nodes/{NODE}"), None);
    assert_eq!(status, 200, "{node}");
    node
}

/// The Node's condition of `kind`, if it has one.
fn condition(node: &Value, kind: &str) -> Option<Value> {
    node_condition(node, kind).cloned()
}

fn taint(node: &Value, key: &str) -> Option<Value> {
    node["spec"]["taints"]
        .as_array()?
        .iter()
        .find(|t| t["key"] == key)
        .cloned()
}

fn wait_ready(port: u16) {
    wait_until(WITHIN, "/readyz", || {
        matches!(http_get(port, "/readyz"), Ok((200, _)))
    });
}

fn start(sandbox: &Sandbox, port: u16) -> Daemon {
    let daemon = sandbox.daemon();
    wait_ready(port);
    daemon
}

#[test]
fn a_hung_task_sets_kernel_deadlock_and_its_taint_and_disabling_the_plugin_removes_both() {
    let api = KubeApi::start();
    api.seed_node(NODE);
    let kubectl = Kubectl::version("1.33", &api);
    let sandbox = sandbox();
    sandbox.add_plugin("problem-detector", "problem-detector");
    let port = free_port();
    sandbox.config_with_host(&host(&api, &sandbox, port, "3s"), &detector(true));
    api.grant_rbac(&sandbox);
    let daemon = start(&sandbox, port);
    // The follower has started (the rule's cursor saved): a line written
    // before would be the past, which a new rule does not match.
    wait_until(WITHIN, "the rule's cursor", || {
        sandbox.path("state/logs/problem-detector.json").exists()
    });
    assert!(
        condition(&node(&api), "KernelDeadlock").is_none(),
        "nothing is written before a problem is seen"
    );

    let written = Instant::now();
    append_kmsg(&sandbox.path("kmsg"), 2, 3, [HUNG.to_string()]);
    wait_until(WITHIN, "KernelDeadlock True on the Node", || {
        condition(&node(&api), "KernelDeadlock").is_some_and(|c| c["status"] == "True")
    });
    let took = written.elapsed();
    // kubectl reads what tend wrote, with the kubelet's conditions untouched.
    let seen = kubectl.json(&["get", "node", NODE]);
    let deadlock = condition(&seen, "KernelDeadlock").unwrap();
    assert_eq!(deadlock["reason"], "TaskHung", "{deadlock}");
    assert_eq!(deadlock["message"], HUNG);
    assert!(
        deadlock["lastTransitionTime"].is_string() && deadlock["lastHeartbeatTime"].is_string()
    );
    assert_eq!(
        condition(&seen, "Ready").unwrap()["status"],
        "True",
        "Ready is the kubelet's"
    );
    assert_eq!(seen["status"]["conditions"].as_array().unwrap().len(), 6);
    wait_until(WITHIN, "the taint tied to it", || {
        taint(&node(&api), "tend.dev/KernelDeadlock").is_some_and(|t| t["effect"] == "NoSchedule")
    });
    eprintln!("hung task line -> condition on the Node: {took:?}");
    assert!(metric(port, "tend_conditions_writes_total").unwrap_or(0.0) >= 1.0);

    // The heartbeat refreshes it; the transition time stays.
    let first_beat = deadlock["lastHeartbeatTime"].as_str().unwrap().to_string();
    wait_until(WITHIN, "a heartbeat", || {
        condition(&node(&api), "KernelDeadlock")
            .is_some_and(|c| c["lastHeartbeatTime"].as_str() != Some(&first_beat))
    });
    assert_eq!(
        condition(&node(&api), "KernelDeadlock").unwrap()["lastTransitionTime"],
        deadlock["lastTransitionTime"]
    );

    // Disabled: its condition and its taint leave the Node, within a heartbeat.
    sandbox.config_with_host(&host(&api, &sandbox, port, "3s"), &detector(false));
    let disabled = Instant::now();
    wait_until(WITHIN, "the condition and taint removed", || {
        let node = node(&api);
        condition(&node, "KernelDeadlock").is_none()
            && taint(&node, "tend.dev/KernelDeadlock").is_none()
    });
    assert!(
        disabled.elapsed() < Duration::from_secs(3) + Duration::from_secs(5),
        "{:?}",
        disabled.elapsed()
    );
    assert_eq!(condition(&node(&api), "Ready").unwrap()["status"], "True");
    drop(daemon);
}

#[test]
fn a_plugin_cannot_set_ready_or_another_plugins_type_and_a_plan_writes_nothing() {
    let api = KubeApi::start();
    api.seed_node(NODE);
    let sandbox = sandbox();
    sandbox.add_plugin("chaos", "mallory");
    sandbox.add_plugin("problem-detector", "problem-detector");
    let port = free_port();
    let set = |what: &str| {
        format!("op = \"set\"\ncondition = \"{what}\"\nreason = \"Mine\"\nmessage = \"m\"")
    };
    let config =
        |what: &str| detector(true) + &chaos("mallory", r#"["MalloryProblem"]"#, &set(what));
    sandbox.config_with_host(&host(&api, &sandbox, port, "5m"), &config("Ready"));
    api.grant_rbac(&sandbox);
    let status_path = format!("/api/v1/nodes/{NODE}/status");

    for (what, refusal) in [
        ("Ready", "kubelet"),
        ("KernelDeadlock", "not granted"),
        ("ready/../x", "invalid"),
    ] {
        sandbox.config_with_host(&host(&api, &sandbox, port, "5m"), &config(what));
        let out = sandbox.tend(&["reconcile", "mallory"]);
        assert!(
            out.stdout.contains("mallory: degraded:") && out.stdout.contains(refusal),
            "{what}: {}{}",
            out.stdout,
            out.stderr
        );
    }
    assert_eq!(
        api.writes_to(&status_path),
        0,
        "nothing was written to the Node"
    );

    // A grant of the kubelet's type, or of another plugin's, is a config error.
    sandbox.config_with_host(
        &host(&api, &sandbox, port, "5m"),
        &(detector(true) + &chaos("mallory", r#"["KernelDeadlock"]"#, &set("KernelDeadlock"))),
    );
    let out = sandbox.tend(&["check"]);
    assert!(
        !out.success && out.stderr.contains("granted to both"),
        "{}",
        out.stderr
    );
    sandbox.config_with_host(
        &host(&api, &sandbox, port, "5m"),
        &chaos("mallory", r#"["Ready"]"#, &set("Ready")),
    );
    let out = sandbox.tend(&["check"]);
    assert!(
        !out.success && out.stderr.contains("tend.toml:") && out.stderr.contains("kubelet"),
        "{}",
        out.stderr
    );

    // A plan shows the change and holds nothing.
    sandbox.config_with_host(&host(&api, &sandbox, port, "5m"), &config("MalloryProblem"));
    let plan = sandbox.tend(&["plan", "mallory"]);
    assert!(plan.success, "{}{}", plan.stdout, plan.stderr);
    assert!(
        plan.stdout.contains("conditions.set MalloryProblem"),
        "{}",
        plan.stdout
    );
    assert!(plan.stdout.contains("+ True Mine: m"), "{}", plan.stdout);
    let book = std::fs::read_to_string(sandbox.path("state/conditions.json")).unwrap_or_default();
    assert!(
        !book.contains("MalloryProblem"),
        "a plan holds nothing: {book}"
    );
    assert_eq!(api.writes_to(&status_path), 0);
}

#[test]
fn a_ttl_clears_the_condition_and_its_taint_a_restart_keeps_what_was_set_and_removal_takes_both() {
    let api = KubeApi::start();
    api.seed_node(NODE);
    let sandbox = sandbox();
    sandbox.add_plugin("chaos", "reporter");
    let port = free_port();
    let grant =
        r#"[{ condition = "ReporterProblem", taint-on = { effect = "PreferNoSchedule" } }]"#;
    let report = |op: &str, ttl: &str| {
        chaos(
            "reporter",
            grant,
            &format!(
                "op = \"{op}\"\ncondition = \"ReporterProblem\"\nreason = \"Seen\"\nmessage = \"seen\"\n{ttl}"
            ),
        )
    };
    sandbox.config_with_host(&host(&api, &sandbox, port, "5m"), &report("set", ""));
    api.grant_rbac(&sandbox);
    let daemon = start(&sandbox, port);
    wait_until(WITHIN, "ReporterProblem True and tainted", || {
        let node = node(&api);
        condition(&node, "ReporterProblem").is_some_and(|c| c["status"] == "True")
            && taint(&node, "tend.dev/ReporterProblem").is_some()
    });
    let set = condition(&node(&api), "ReporterProblem").unwrap();

    // kill -9: the restarted tend reads its book, resets nothing, and writes
    // nothing new before a change is due (the heartbeat is 5 minutes).
    let writes = api.writes_to(&format!("/api/v1/nodes/{NODE}"));
    nix_kill(daemon.pid());
    drop(daemon);
    sandbox.config_with_host(&host(&api, &sandbox, port, "5m"), &report("list", ""));
    let daemon = start(&sandbox, port);
    wait_until(WITHIN, "the list reconcile", || {
        daemon.log().contains("held ReporterProblem=true(Seen)")
    });
    let after = condition(&node(&api), "ReporterProblem").unwrap();
    assert_eq!(after["status"], "True", "no reset to a default");
    assert_eq!(after["lastTransitionTime"], set["lastTransitionTime"]);
    assert!(taint(&node(&api), "tend.dev/ReporterProblem").is_some());
    assert_eq!(
        api.writes_to(&format!("/api/v1/nodes/{NODE}")),
        writes,
        "the Node already shows what tend holds: nothing written"
    );

    // A report with a TTL of 2 s not renewed: cleared, reason Expired, and
    // the taint goes.
    sandbox.config_with_host(&host(&api, &sandbox, port, "5m"), &report("set", "ttl = 2"));
    wait_until(WITHIN, "Expired, untainted", || {
        let node = node(&api);
        condition(&node, "ReporterProblem")
            .is_some_and(|c| c["status"] == "False" && c["reason"] == "Expired")
            && taint(&node, "tend.dev/ReporterProblem").is_none()
    });
    let expired = condition(&node(&api), "ReporterProblem").unwrap();
    assert!(
        expired["message"]
            .as_str()
            .unwrap()
            .contains("was Seen: seen"),
        "{expired}"
    );

    // Set again, then the plugin removed from the config while it is set:
    // the condition and its taint leave the Node.
    sandbox.config_with_host(&host(&api, &sandbox, port, "5m"), &report("set", ""));
    wait_until(WITHIN, "ReporterProblem True again, tainted", || {
        let node = node(&api);
        condition(&node, "ReporterProblem").is_some_and(|c| c["status"] == "True")
            && taint(&node, "tend.dev/ReporterProblem").is_some()
    });
    sandbox.config_with_host(&host(&api, &sandbox, port, "5m"), "");
    wait_until(
        WITHIN,
        "the removed plugin's condition and taint gone",
        || {
            let node = node(&api);
            condition(&node, "ReporterProblem").is_none()
                && taint(&node, "tend.dev/ReporterProblem").is_none()
        },
    );
    assert_eq!(condition(&node(&api), "Ready").unwrap()["status"], "True");
    drop(daemon);
}

fn nix_kill(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}
