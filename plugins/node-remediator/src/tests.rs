//! node-remediator against the SDK's in-memory fakes: the Node and its pods
//! in the kube fake, units in the systemd fake, the boot identity a file.

use super::*;
use serde_json::json;
use tend_sdk::testing::FakeHost;
use tend_sdk::{Health, Host};

const S: u64 = 1000;
const M: u64 = 60 * S;
const T0: u64 = 1_800_000_000_000;
const BOOT_ID: &str = "/run/tend-test/boot_id";

/// A host with the README's grant, its Node Ready and `deadlock` as given,
/// two pods on it (one a DaemonSet's), and boot "boot-1".
fn host(deadlock: bool) -> FakeHost {
    let host = FakeHost::named("node-remediator");
    host.kube.set_node_name("test-node").grant(
        r#"[
          { resource = "nodes", verbs = ["get", "list", "patch"], names = ["$NODE"], fields = ["spec.unschedulable", "metadata.annotations[tend.dev/replace-requested]"] },
          { resource = "pods", verbs = ["get", "list"], field-selector = "spec.nodeName=$NODE" },
          { resource = "pods/eviction", verbs = ["create"], field-selector = "spec.nodeName=$NODE" },
        ]"#,
    );
    set_node(&host, deadlock, false);
    host.kube.put(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "uid": "w1"},
        "spec": {"nodeName": "test-node"}}));
    host.systemd.grant(
        &["kubelet.service", "containerd.service", "reboot.target"],
        &["restart", "start"],
    );
    host.files
        .grant("/run/tend-test", false)
        .put(BOOT_ID, b"boot-1\n");
    host
}

/// The Node: Ready, KernelDeadlock as `deadlock`, cordoned as given.
fn set_node(host: &FakeHost, deadlock: bool, cordoned: bool) {
    let status = if deadlock { "True" } else { "False" };
    let mut node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "test-node"},
    "spec": {},
    "status": {"conditions": [
        {"type": "Ready", "status": "True"},
        {"type": "KernelDeadlock", "status": status, "reason": "TaskHung"},
    ]}});
    if cordoned {
        node["spec"]["unschedulable"] = json!(true);
    }
    host.kube.put(node);
}

fn node(host: &FakeHost) -> Value {
    host.kube
        .object(&ObjectKey {
            api_version: "v1".into(),
            kind: "Node".into(),
            namespace: None,
            name: "test-node".into(),
        })
        .unwrap()
}

/// restart kubelet -> restart containerd -> reboot; 2 min settle, 5 min
/// to verify, 30 min quiet.
fn config() -> Value {
    json!({
        "conditions": ["KernelDeadlock"],
        "steps": [
            {"action": "restart-unit", "unit": "kubelet.service"},
            {"action": "restart-unit", "unit": "containerd.service"},
            {"action": "reboot", "drain-deadline-ms": 60000},
        ],
        "settle-ms": 2 * M,
        "verify-within-ms": 5 * M,
        "quiet-ms": 30 * M,
        "boot-id-path": BOOT_ID,
    })
}

fn run(host: &FakeHost, now: u64) -> Outcome {
    reconcile_at(
        &Context::new("node-remediator", &config().to_string()),
        host,
        now,
    )
    .unwrap()
}

#[test]
fn a_healthy_node_is_left_alone() {
    let host = host(false);
    let outcome = run(&host, T0);
    assert_eq!(outcome.health, Health::Healthy, "{}", outcome.message);
    assert!(host.systemd.actions().is_empty());
    assert!(host.kube.events().is_empty());
}

#[test]
fn a_problem_takes_the_first_step_once_and_escalates_once_after_its_window() {
    let host = host(true);
    let outcome = run(&host, T0);
    assert_eq!(host.systemd.actions(), ["restart kubelet.service"]);
    assert!(
        outcome
            .message
            .contains("step 1/3 (restart kubelet.service)"),
        "{}",
        outcome.message
    );
    assert_eq!(outcome.requeue_after_ms, Some(5 * M));
    let events = host.kube.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].reason, "Remediating");
    // Still there a minute later: waiting, nothing repeated.
    let outcome = run(&host, T0 + M);
    assert!(
        outcome
            .message
            .contains("waiting for KernelDeadlock to clear"),
        "{}",
        outcome.message
    );
    assert_eq!(host.systemd.actions(), ["restart kubelet.service"]);
    // Past the window: the next step, once.
    run(&host, T0 + 5 * M);
    run(&host, T0 + 5 * M + S);
    assert_eq!(
        host.systemd.actions(),
        ["restart kubelet.service", "restart containerd.service"]
    );
}

#[test]
fn a_step_that_verifies_ends_the_ladder_and_it_resets_after_the_quiet_time() {
    let host = host(true);
    run(&host, T0);
    set_node(&host, false, false);
    let outcome = run(&host, T0 + M);
    // Not verified yet: named so, and no next step.
    assert!(
        outcome
            .message
            .starts_with("[unverified] step 1/3 (restart kubelet.service) taken 1m ago")
            && outcome.message.contains("verifying it stays clear"),
        "{}",
        outcome.message
    );
    let outcome = run(&host, T0 + 3 * M);
    assert_eq!(outcome.health, Health::Healthy);
    let counted = |outcome| {
        host.metrics.counter(
            "remediation_steps",
            &[("step", "restart-unit"), ("outcome", outcome)],
        )
    };
    assert_eq!((counted("taken"), counted("verified")), (1.0, 1.0));
    assert_eq!(
        host.metrics
            .gauge("remediation_overdue_timestamp_seconds", &[]),
        Some(0.0),
        "recovered: remediating no more"
    );
    assert!(
        outcome
            .message
            .contains("step 1/3 (restart kubelet.service) verified"),
        "{}",
        outcome.message
    );
    let outcome = run(&host, T0 + 40 * M);
    assert!(outcome.message.contains("reset"), "{}", outcome.message);
    assert_eq!(Host::state(&host).get_json::<Ladder>(LADDER).unwrap(), None);
    assert_eq!(host.systemd.actions(), ["restart kubelet.service"]);
}

/// Walks to the reboot step: two restarts that do not verify.
fn to_reboot(host: &FakeHost) -> Outcome {
    run(host, T0);
    run(host, T0 + 5 * M);
    run(host, T0 + 10 * M)
}

#[test]
fn a_reboot_drains_first_and_verifies_only_by_a_new_boot_then_uncordons() {
    let host = host(true);
    let outcome = to_reboot(&host);
    assert!(
        outcome.message.contains("step 3/3 (reboot)"),
        "{}",
        outcome.message
    );
    assert_eq!(
        host.systemd.actions(),
        [
            "restart kubelet.service",
            "restart containerd.service",
            "start reboot.target"
        ]
    );
    assert!(
        host.kube
            .actions()
            .contains(&"evict pods/default/web".to_string()),
        "{:?}",
        host.kube.actions()
    );
    assert_eq!(node(&host)["spec"]["unschedulable"], true);
    // The problem gone, but no new boot: not verified, however long.
    set_node(&host, false, true);
    let outcome = run(&host, T0 + 14 * M);
    assert!(
        outcome.message.contains("come back from its reboot"),
        "{}",
        outcome.message
    );
    // Rebooted: a new boot identity, Ready; settles, verifies, uncordons.
    host.files.put(BOOT_ID, b"boot-2\n");
    run(&host, T0 + 14 * M + S);
    let outcome = run(&host, T0 + 16 * M + S);
    assert!(
        outcome.message.contains("verified; uncordoned the Node"),
        "{}",
        outcome.message
    );
    assert!(
        node(&host)["spec"]
            .get("unschedulable")
            .is_none_or(Value::is_null)
    );
}

/// A reboot closes the bus it was asked on: its answer is lost (`timeout`).
/// The ladder keeps it as taken and never asks again on a guess; the new
/// boot identity verifies it.
#[test]
fn a_reboot_whose_answer_is_lost_is_never_sent_again_and_verifies_by_its_boot() {
    let host = host(true);
    run(&host, T0);
    run(&host, T0 + 5 * M);
    host.systemd.fail_with(Some(Error::Timeout(
        "start reboot.target: the job was queued, then the bus closed".into(),
    )));
    let outcome = run(&host, T0 + 10 * M);
    assert!(
        outcome.message.starts_with("took step 3/3 (reboot), try 1")
            && outcome.message.contains("its answer was lost"),
        "{}",
        outcome.message
    );
    host.systemd.fail_with(None);
    let tried = host.systemd.actions().len();
    let outcome = run(&host, T0 + 11 * M);
    assert!(
        outcome
            .message
            .starts_with("[unverified] step 3/3 (reboot)"),
        "{}",
        outcome.message
    );
    assert_eq!(host.systemd.actions().len(), tried, "asked to reboot again");
    host.files.put(BOOT_ID, b"boot-2\n");
    set_node(&host, false, true);
    run(&host, T0 + 12 * M);
    let outcome = run(&host, T0 + 15 * M);
    assert!(
        outcome.message.contains("step 3/3 (reboot) verified"),
        "{}",
        outcome.message
    );
}

#[test]
fn a_reboot_waits_while_its_drain_is_blocked_and_never_reboots_undrained() {
    let host = host(true);
    host.kube.block_eviction("default", "web", "web-pdb");
    let outcome = to_reboot(&host);
    // Named first, for `tend plan` and alerts: what held the step back.
    assert!(
        outcome
            .message
            .starts_with("[pdb:default/web-pdb] step 3/3 (reboot) held: the drain gave up"),
        "{}",
        outcome.message
    );
    assert_eq!(
        host.metrics.counter(
            "remediation_steps",
            &[("step", "reboot"), ("outcome", "held")]
        ),
        1.0
    );
    assert!(
        outcome
            .message
            .contains("[pdb:default/web-pdb] blocked by PodDisruptionBudget default/web-pdb"),
        "{}",
        outcome.message
    );
    assert!(
        !host
            .systemd
            .actions()
            .contains(&"start reboot.target".to_string())
    );
    assert!(
        node(&host)["spec"]
            .get("unschedulable")
            .is_none_or(Value::is_null),
        "the drain undid its cordon"
    );
    // The budget frees up: the next look reboots.
    host.kube.unblock_eviction("default", "web");
    run(&host, T0 + 11 * M);
    assert!(
        host.systemd
            .actions()
            .contains(&"start reboot.target".to_string())
    );
}

#[test]
fn a_step_refused_by_a_budget_is_asked_again_and_the_ladder_does_not_move() {
    let host = host(true);
    host.systemd.fail_with(Some(Error::BudgetExhausted(
        Reason::Window.tag("fleet budget restarts: outside its maintenance windows"),
    )));
    let outcome = run(&host, T0);
    assert!(
        outcome
            .message
            .starts_with("[window] step 1/3 (restart kubelet.service) held: budget-exhausted"),
        "{}",
        outcome.message
    );
    let ladder = || {
        Host::state(&host)
            .get_json::<Ladder>(LADDER)
            .unwrap()
            .unwrap_or_default()
    };
    assert_eq!(ladder().step, None);
    // Remediating since the first refusal: a ladder held back for hours
    // is one the stuck alert names.
    assert_eq!(ladder().started_at, Some(T0));
    let gauge = |name| host.metrics.gauge(name, &[]);
    assert_eq!(gauge("remediation_step"), Some(0.0));
    assert_eq!(
        gauge("remediation_overdue_timestamp_seconds"),
        Some(((T0 + 2 * 60 * M) / 1000) as f64),
        "overdue alert-after-ms (2 h) after it began"
    );
    host.systemd.fail_with(None);
    run(&host, T0 + M);
    assert_eq!(host.systemd.actions(), ["restart kubelet.service"]);
    assert_eq!(
        ladder().started_at,
        Some(T0),
        "the start stays the first look"
    );
    assert_eq!(gauge("remediation_step"), Some(1.0));
}

#[test]
fn a_ladder_saved_before_its_act_never_repeats_it_after_a_restart() {
    let host = host(true);
    run(&host, T0);
    // tend restarted mid-step: the next reconcile, in a fresh instance,
    // reads the saved ladder and waits.
    run(&host, T0 + S);
    run(&host, T0 + 2 * S);
    assert_eq!(host.systemd.actions(), ["restart kubelet.service"]);
}

#[test]
fn past_the_last_step_it_is_degraded_and_acts_no_more() {
    let host = host(true);
    to_reboot(&host);
    let outcome = run(&host, T0 + 15 * M);
    assert_eq!(outcome.health, Health::Degraded, "{}", outcome.message);
    assert_eq!(host.metrics.gauge("remediation_exhausted", &[]), Some(1.0));
    assert_eq!(
        host.metrics.counter(
            "remediation_steps",
            &[("step", "reboot"), ("outcome", "exhausted")]
        ),
        1.0
    );
    assert!(
        outcome.message.contains("every step tried"),
        "{}",
        outcome.message
    );
    let actions = host.systemd.actions().len();
    run(&host, T0 + 30 * M);
    assert_eq!(host.systemd.actions().len(), actions);
    assert!(
        host.kube
            .events()
            .iter()
            .any(|e| e.reason == "RemediationExhausted")
    );
}

#[test]
fn a_config_without_conditions_or_steps_is_refused_with_the_fix() {
    let host = host(false);
    let ctx = Context::new("node-remediator", r#"{"conditions": [], "steps": []}"#);
    let err = reconcile_at(&ctx, &host, T0).unwrap_err();
    assert!(err.to_string().contains("conditions"), "{err}");
}

/// NodeHealthCheck's request (a `TendRemediation` named after the node, as
/// NHC makes it from the template), granted as examples/deploy shows.
fn nhc_request(host: &FakeHost, annotations: Value) {
    host.kube.put(
        json!({"apiVersion": medik8s::API_VERSION, "kind": medik8s::KIND,
        "metadata": {"name": "test-node", "namespace": "tend-system", "annotations": annotations},
        "spec": {}}),
    );
}

fn nhc_conditions(host: &FakeHost) -> Value {
    host.kube
        .object(&ObjectKey {
            api_version: medik8s::API_VERSION.into(),
            kind: medik8s::KIND.into(),
            namespace: Some("tend-system".into()),
            name: "test-node".into(),
        })
        .unwrap()["status"]["conditions"]
        .clone()
}

fn with_nhc(config: Value) -> Value {
    let mut config = config;
    config["medik8s"] = json!({"namespace": "tend-system"});
    config
}

fn nhc_host() -> FakeHost {
    let host = host(false);
    host.kube
        .add_kind(medik8s::API_VERSION, medik8s::KIND, "tendremediations", true)
        .grant(
        r#"[
          { resource = "nodes", verbs = ["get", "list", "patch"], names = ["$NODE"], fields = ["spec.unschedulable", "metadata.annotations[tend.dev/replace-requested]"] },
          { resource = "pods", verbs = ["get", "list"], field-selector = "spec.nodeName=$NODE" },
          { resource = "pods/eviction", verbs = ["create"], field-selector = "spec.nodeName=$NODE" },
          { group = "remediation.tend.dev", resource = "tendremediations", verbs = ["get", "list", "watch", "patch"], namespaces = ["tend-system"], names = ["$NODE"], fields = ["status.conditions"] },
        ]"#,
    );
    host
}

fn run_with(host: &FakeHost, config: &Value, now: u64) -> Outcome {
    let ctx = Context::new("node-remediator", &config.to_string());
    reconcile_at(&ctx, host, now).unwrap()
}

#[test]
fn a_node_health_check_request_is_a_problem_and_its_status_says_where_the_ladder_is() {
    let host = nhc_host();
    let config = with_nhc(config());
    // No request, no condition: nothing to do, nothing written.
    let idle = run_with(&host, &config, T0);
    assert!(
        idle.message.contains("no remediation needed"),
        "{}",
        idle.message
    );
    nhc_request(&host, json!({}));
    let outcome = run_with(&host, &config, T0 + S);
    assert!(
        outcome.message.contains("for NodeHealthCheck"),
        "{}",
        outcome.message
    );
    assert_eq!(host.systemd.actions(), ["restart kubelet.service"]);
    assert_eq!(nhc_conditions(&host)[0]["type"], "Processing");
    assert_eq!(nhc_conditions(&host)[0]["status"], "True");
    let patches = host.kube.patches().len();
    run_with(&host, &config, T0 + 2 * S);
    assert_eq!(
        host.kube.patches().len(),
        patches,
        "the same status is not written again"
    );
    // NHC moved on (escalating remediations): no further step.
    nhc_request(
        &host,
        json!({"remediation.medik8s.io/nhc-timed-out": "2026-11-29T00:00:00Z"}),
    );
    let outcome = run_with(&host, &config, T0 + 6 * M);
    assert!(
        outcome.message.contains("standing down"),
        "{}",
        outcome.message
    );
    assert_eq!(host.systemd.actions(), ["restart kubelet.service"]);
}

#[test]
fn an_exhausted_ladder_tells_node_health_check_to_escalate() {
    let host = nhc_host();
    let config = with_nhc(json!({
        "conditions": ["KernelDeadlock"],
        "steps": [{"action": "restart-unit", "unit": "kubelet.service"}],
        "verify-within-ms": 5 * M,
    }));
    nhc_request(&host, json!({}));
    run_with(&host, &config, T0);
    run_with(&host, &config, T0 + 6 * M);
    let succeeded = nhc_conditions(&host)
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Succeeded")
        .cloned()
        .unwrap();
    assert_eq!(succeeded["status"], "False", "{succeeded}");
    assert_eq!(succeeded["reason"], "RemediationExhausted");
}

/// The replace step drains, then asks; on recovery the request is withdrawn
/// (left, the next cordon by anyone would cost the node its instance).
#[test]
fn a_replacement_request_is_withdrawn_when_the_node_recovers() {
    let host = host(true);
    let config = json!({
        "conditions": ["KernelDeadlock"],
        "steps": [{"action": "replace", "drain-deadline-ms": 60000}],
        "settle-ms": 2 * M,
    });
    run_with(&host, &config, T0);
    let asked = |host: &FakeHost| node(host)["metadata"]["annotations"][REPLACE_ANNOTATION].clone();
    assert_eq!(asked(&host), "true");
    assert_eq!(node(&host)["spec"]["unschedulable"], true, "drained first");
    set_node(&host, false, true);
    // set_node rewrote the Node: the request is back on it, as it was.
    host.kube.put({
        let mut n = node(&host);
        n["metadata"]["annotations"] = json!({REPLACE_ANNOTATION: "true"});
        n
    });
    run_with(&host, &config, T0 + M);
    let outcome = run_with(&host, &config, T0 + 4 * M);
    assert!(
        outcome.message.contains("withdrew its replacement request"),
        "{}",
        outcome.message
    );
    assert!(asked(&host).is_null(), "{}", node(&host));
}

/// A first step held back, then the problem gone by itself: nothing is
/// under way, so nothing is overdue.
#[test]
fn a_held_step_whose_problem_clears_leaves_nothing_overdue() {
    let host = host(true);
    host.systemd
        .fail_with(Some(Error::BudgetExhausted(Reason::Budget.tag("spent"))));
    run(&host, T0);
    let overdue = |host: &FakeHost| {
        host.metrics
            .gauge("remediation_overdue_timestamp_seconds", &[])
    };
    assert!(overdue(&host).unwrap() > 0.0);
    host.systemd.fail_with(None);
    set_node(&host, false, false);
    run(&host, T0 + M);
    assert_eq!(overdue(&host), Some(0.0));
    assert!(host.systemd.actions().is_empty());
}

/// An uncordon by someone else during the drain holds the step for
/// `quiet-ms`: the ladder does not cordon and drain again at its next look.
#[test]
fn an_uncordon_by_someone_else_holds_the_step_for_the_quiet_time() {
    let host = host(true);
    let config = json!({
        "conditions": ["KernelDeadlock"],
        "steps": [{"action": "reboot", "drain-deadline-ms": 60000}],
        "quiet-ms": 30 * M,
        "boot-id-path": BOOT_ID,
    });
    host.kube.fail_call(
        "drain",
        Some(Error::BudgetExhausted(
            Reason::StaleState.tag("the Node was uncordoned"),
        )),
    );
    let held = run_with(&host, &config, T0);
    assert!(
        held.message
            .starts_with("[stale-state] step 1/1 (reboot) held"),
        "{}",
        held.message
    );
    host.kube.fail_call("drain", None);
    let again = run_with(&host, &config, T0 + M);
    assert!(
        again.message.contains("not taken again for"),
        "{}",
        again.message
    );
    assert!(host.systemd.actions().is_empty());
    run_with(&host, &config, T0 + 31 * M);
    assert_eq!(
        host.systemd.actions(),
        ["start reboot.target"],
        "after the quiet time"
    );
}
