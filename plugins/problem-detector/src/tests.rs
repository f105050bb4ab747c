//! problem-detector against the SDK's in-memory fakes: lines written to the
//! fake kernel log and journal are matched by the grant's watch rules, as
//! the host matches them; conditions and Events land in the fakes.

use super::*;
use serde_json::json;
use std::time::Duration;
use tend_sdk::Conditions;
use tend_sdk::testing::FakeHost;

const HUNG: &str = "INFO: task kworker/0:1:123 blocked for more than 120 seconds.";
const OOM: &str =
    "Killed process 4242 (stress) total-vm:1024kB, anon-rss:512kB, file-rss:0kB, shmem-rss:0kB";
const T0: u64 = 1_800_000_000;

/// A host with the README's grant: the kernel rules, containerd's restarts
/// from the journal, Events on the own Node, the conditions, and the clock
/// units' status.
fn host() -> FakeHost {
    let host = FakeHost::named("problem-detector");
    host.logs.grant(json!({
        "kernel": true,
        "units": ["containerd.service"],
        "watch": [
            {"rule": "task-hung", "source": "kernel", "pattern": r"task [\S ]+:\w+ blocked for more than \w+ seconds\."},
            {"rule": "oom-kill", "source": "kernel", "pattern": r"Killed process \d+ (.+) total-vm:\d+kB"},
            {"rule": "containerd-restart", "source": "journal", "units": ["containerd.service"], "pattern": "Started containerd"},
        ]
    }));
    host.conditions.grant(json!([
        {"condition": "KernelDeadlock", "taint-on": {"effect": "NoSchedule"}},
        "FrequentContainerdRestart",
        "NTPProblem",
    ]));
    host.kube
        .set_node_name("test-node")
        .grant(r#"{ resource = "nodes", verbs = ["get"], names = ["$NODE"] }"#)
        .put(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "test-node"}}));
    host.systemd
        .grant(&["chrony.service", "systemd-timesyncd.service"], &[]);
    host
}

fn context(config: serde_json::Value) -> Context {
    Context::new("problem-detector", &config.to_string())
}

fn run(host: &FakeHost, config: serde_json::Value, now: u64) -> Outcome {
    reconcile_at(&context(config), host, now).unwrap()
}

fn held(host: &FakeHost) -> Vec<(String, bool, String)> {
    host.conditions
        .list()
        .unwrap()
        .into_iter()
        .map(|h| (h.condition, h.active, h.reason))
        .collect()
}

#[test]
fn a_hung_task_sets_kernel_deadlock_with_a_ttl_and_an_oom_kill_is_an_event() {
    let host = host();
    host.logs
        .kernel(3, HUNG)
        .kernel(3, OOM)
        .kernel(6, "eth0: link up");
    let outcome = run(&host, json!({}), T0);
    assert_eq!(
        held(&host),
        [("KernelDeadlock".to_string(), true, "TaskHung".to_string())]
    );
    assert_eq!(outcome.health, tend_sdk::Health::Degraded);
    assert!(
        outcome.message.contains("KernelDeadlock (TaskHung)"),
        "{}",
        outcome.message
    );
    let events = host.kube.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].reason, "OOMKilling");
    assert_eq!(events[0].regarding.name, "test-node");
    let list = host.conditions.list().unwrap();
    assert_eq!(list[0].message, HUNG);
    assert_eq!(list[0].expires_in, Some(3600));

    // Not seen again within the hour: the host clears it, and the plugin
    // says the node is healthy.
    host.conditions.advance(Duration::from_secs(3601));
    let outcome = run(&host, json!({}), T0 + 3601);
    assert_eq!(
        held(&host),
        [("KernelDeadlock".to_string(), false, "Expired".to_string())]
    );
    assert_eq!(outcome.health, tend_sdk::Health::Healthy);
}

#[test]
fn containerd_restarting_five_times_in_twenty_minutes_sets_its_condition_across_reconciles() {
    let host = host();
    for reconcile in 0..4u64 {
        host.logs.journal(
            Some("containerd.service"),
            Some("systemd"),
            6,
            "Started containerd container runtime.",
        );
        run(&host, json!({}), T0 + reconcile * 60);
        assert!(
            held(&host).is_empty(),
            "{} restarts are not yet frequent",
            reconcile + 1
        );
    }
    host.logs.journal(
        Some("containerd.service"),
        Some("systemd"),
        6,
        "Started containerd container runtime.",
    );
    run(&host, json!({}), T0 + 240);
    assert_eq!(
        held(&host),
        [(
            "FrequentContainerdRestart".to_string(),
            true,
            "FrequentContainerdRestart".to_string()
        )]
    );
}

#[test]
fn an_operator_rule_in_config_needs_no_rebuild() {
    let host = host();
    host.logs.grant(json!({"kernel": true, "watch": [
        {"rule": "gpu-xid", "source": "kernel", "pattern": r"NVRM: Xid \(PCI:[0-9a-f:.]+\): 79"}
    ]}));
    host.conditions.grant(json!(["GpuLost"]));
    host.logs.kernel(
        3,
        "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
    );
    run(
        &host,
        json!({"extra-rules": [{"watch": "gpu-xid", "condition": "GpuLost", "reason": "XidError79", "ttl": "6h"}]}),
        T0,
    );
    assert_eq!(
        held(&host),
        [("GpuLost".to_string(), true, "XidError79".to_string())]
    );
    assert_eq!(
        host.conditions.list().unwrap()[0].expires_in,
        Some(6 * 3600)
    );
}

#[test]
fn a_rule_without_a_meaning_is_said_and_nothing_is_set() {
    let host = host();
    host.logs.grant(json!({"kernel": true, "watch": [
        {"rule": "mystery", "source": "kernel", "pattern": "mystery"}
    ]}));
    host.logs.kernel(3, "a mystery line");
    let outcome = run(&host, json!({}), T0);
    assert!(held(&host).is_empty());
    assert_eq!(outcome.health, tend_sdk::Health::Healthy);
    assert!(
        host.log_lines()
            .iter()
            .any(|(_, line)| line.contains("mystery") && line.contains("extra-rules"))
    );
}

#[test]
fn the_clock_check_sets_ntp_problem_while_no_time_sync_unit_is_active() {
    let host = host();
    host.systemd.set_unit("chrony.service", "inactive");
    host.systemd.set_unit("systemd-timesyncd.service", "failed");
    let clock = json!({"clock": {"units": ["chrony.service", "systemd-timesyncd.service"]}});
    run(&host, clock.clone(), T0);
    assert_eq!(
        held(&host),
        [("NTPProblem".to_string(), true, "NTPIsDown".to_string())]
    );
    host.systemd.set_unit("chrony.service", "active");
    run(&host, clock, T0 + 60);
    assert_eq!(
        held(&host),
        [("NTPProblem".to_string(), false, "NTPIsUp".to_string())]
    );
}

#[test]
fn a_bad_config_is_refused_before_anything_is_done() {
    let host = host();
    host.logs.kernel(3, HUNG);
    let error = reconcile_at(
        &context(json!({"rules": [{"watch": "task-hung", "reason": "hung task"}]})),
        &host,
        T0,
    )
    .unwrap_err();
    assert_eq!(error.kind(), "invalid");
    assert!(error.to_string().contains("CamelCase"), "{error}");
    assert!(held(&host).is_empty());
}

#[test]
fn a_condition_not_granted_fails_the_reconcile_with_the_grant_to_add() {
    let host = FakeHost::named("problem-detector");
    host.logs.grant(json!({"kernel": true, "watch": [
        {"rule": "task-hung", "source": "kernel", "pattern": "blocked for more than"}
    ]}));
    host.logs.kernel(3, HUNG);
    let error = reconcile_at(&context(json!({})), &host, T0).unwrap_err();
    assert_eq!(error.kind(), "denied");
    assert!(error.to_string().contains("grants] conditions"), "{error}");
}
