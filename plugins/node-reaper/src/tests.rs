//! node-reaper against the SDK's fakes: instances in FakeCloud, Nodes in
//! FakeKube, and the time each pass runs at.

use super::*;
use serde_json::json;
use tend_sdk::testing::FakeHost;
use tend_sdk::{InstanceState, REPLACE_ANNOTATION, State, Trigger};

const T0: u64 = 1_700_000_000_000;
const MIN: u64 = 60_000;
const STUCK: &str = "i-0000000000000000a";
const HEALTHY: &str = "i-0000000000000000b";
const ENFORCE: &str = r#"{"owner": {"tag": "kubernetes.io/cluster/demo", "value": "owned"},
    "mode": "enforce", "confirm-after": "1m"}"#;

/// The grants of the module doc; a Node for HEALTHY, none for STUCK.
fn host() -> FakeHost {
    let host = FakeHost::named("node-reaper");
    host.cloud.grant(
        r#"{ operations = ["list-instances", "delete-instance"], instances = [{ tag = "kubernetes.io/cluster/demo", value = "owned" }] }"#,
    );
    host.kube
        .grant(r#"{ resource = "nodes", verbs = ["get", "list", "watch"] }"#);
    for (id, name) in [(STUCK, "stuck-1"), (HEALTHY, "healthy-1")] {
        host.cloud.put_instance(
            Instance {
                created_at_ms: T0 as i64,
                ..Instance::new(id, name, InstanceState::Running)
            }
            .with_tag("kubernetes.io/cluster/demo", "owned"),
        );
    }
    host.kube.put(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "healthy-1"},
        "spec": {"providerID": format!("aws:///us-east-1a/{HEALTHY}")},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }));
    host
}

fn context(config: &str, trigger: &str) -> Context {
    Context {
        triggers: vec![Trigger::new(trigger)],
        ..Context::new("node-reaper", config)
    }
}

fn pass(host: &FakeHost, config: &str, trigger: &str, now: u64) -> Outcome {
    run(&context(config, trigger), host, now).unwrap()
}

/// A startup pass, then passes until STUCK is confirmed: the last outcome.
fn until_confirmed(host: &FakeHost, config: &str) -> Outcome {
    pass(host, config, "startup", T0);
    // Both were created at T0: STUCK times out 20m later.
    pass(host, config, "interval", T0 + 21 * MIN);
    pass(host, config, "interval", T0 + 22 * MIN)
}

fn memory(host: &FakeHost) -> Memory {
    let state: &dyn State = &host.state;
    state.get_json(MEMORY).unwrap().unwrap_or_default()
}

#[test]
fn enforce_deletes_a_confirmed_candidate_once_and_waits_for_it() {
    let host = host();
    let first = pass(&host, ENFORCE, "startup", T0);
    assert_eq!(first.health, Health::Healthy, "{}", first.message);
    assert_eq!(
        first.requeue_after_ms,
        Some(20 * MIN),
        "when STUCK times out"
    );
    let outcome = until_confirmed(&host, ENFORCE);
    assert_eq!(host.cloud.actions(), [format!("delete-instance {STUCK}")]);
    assert!(
        outcome.message.contains(&format!("deleted {STUCK}")),
        "{}",
        outcome.message
    );
    assert!(
        outcome
            .message
            .starts_with("enforce mode: 2 instance(s), 1 Node(s)")
    );
    assert_eq!(memory(&host).in_flight[""].id, STUCK);
    assert_eq!(
        host.metrics
            .counter("deletions", &[("reason", "registration_timeout")]),
        1.0
    );
    assert_eq!(
        host.metrics.gauge("instances", &[("state", "registered")]),
        Some(1.0)
    );
    let logs = host.log_lines();
    assert!(
        logs.iter()
            .any(|(_, l)| l.contains(STUCK) && l.contains("deleted")),
        "{logs:?}"
    );
    // Deleting: not sent again; gone: the pool is free.
    pass(&host, ENFORCE, "interval", T0 + 23 * MIN);
    host.cloud.remove_instance(STUCK);
    let after = pass(&host, ENFORCE, "kube", T0 + 24 * MIN);
    assert_eq!(host.cloud.actions().len(), 1);
    assert!(memory(&host).in_flight.is_empty());
    assert_eq!(after.health, Health::Healthy, "{}", after.message);
}

#[test]
fn report_mode_deletes_nothing_and_says_what_it_would() {
    let host = host();
    let config = r#"{"owner": {"tag": "kubernetes.io/cluster/demo", "value": "owned"}, "confirm-after": "1m"}"#;
    let outcome = until_confirmed(&host, config);
    assert!(host.cloud.actions().is_empty());
    assert!(
        outcome.message.starts_with("report mode"),
        "{}",
        outcome.message
    );
    assert!(
        outcome.message.contains(&format!("would delete {STUCK}")),
        "{}",
        outcome.message
    );
    assert!(memory(&host).in_flight.is_empty());
}

const LEASE: &str = r#"{ group = "coordination.k8s.io", resource = "leases", verbs = ["get"], namespaces = ["tend-system"], names = ["tend-cluster"] }"#;
const REPORT_WITH_EVENTS: &str = r#"{"owner": {"tag": "kubernetes.io/cluster/demo", "value": "owned"},
    "events-about": {"api-version": "coordination.k8s.io/v1", "kind": "Lease", "namespace": "tend-system", "name": "tend-cluster"}}"#;

#[test]
fn a_report_names_every_candidate_of_a_pool_and_sends_an_event_about_each() {
    let host = host();
    host.kube.grant(LEASE);
    const ALSO: &str = "i-0000000000000000c";
    host.cloud.put_instance(
        Instance {
            created_at_ms: T0 as i64,
            ..Instance::new(ALSO, "stuck-2", InstanceState::Running)
        }
        .with_tag("kubernetes.io/cluster/demo", "owned"),
    );
    let outcome = until_confirmed(&host, REPORT_WITH_EVENTS);
    assert!(host.cloud.actions().is_empty());
    for id in [STUCK, ALSO] {
        assert!(
            outcome
                .message
                .contains(&format!("{id} (registration_timeout)")),
            "{}",
            outcome.message
        );
    }
    assert!(
        !outcome.message.contains("in flight"),
        "{}",
        outcome.message
    );
    let events = host.kube.events();
    let lease = ObjectKey::namespaced(
        "coordination.k8s.io/v1",
        "Lease",
        "tend-system",
        "tend-cluster",
    );
    let about: Vec<(&ObjectKey, &str)> = (events.iter())
        .map(|e| (&e.regarding, e.reason.as_str()))
        .collect();
    assert_eq!(about, [(&lease, "InstanceWouldDelete"); 2], "{events:?}");
    for id in [STUCK, ALSO] {
        assert!(events.iter().any(|e| e.message.contains(id)), "{events:?}");
    }
}

#[test]
fn without_the_grant_on_events_about_the_event_is_logged_not_the_pass() {
    let host = host();
    let outcome = until_confirmed(&host, REPORT_WITH_EVENTS);
    assert!(host.kube.events().is_empty());
    assert_ne!(outcome.health, Health::Degraded, "{}", outcome.message);
    let logs = host.log_lines();
    assert!(
        (logs.iter())
            .any(|(_, l)| l
                .contains("event InstanceWouldDelete about Lease tend-system/tend-cluster: ")),
        "{logs:?}"
    );
}

#[test]
fn a_plan_on_a_fresh_state_names_each_candidate_and_when_it_would_go() {
    let host = host();
    let ctx = Context {
        dry_run: true,
        ..context(ENFORCE, "manual")
    };
    let outcome = run(&ctx, &host, T0 + 21 * MIN).unwrap();
    assert!(
        outcome.message.contains(&format!(
            "waiting: {STUCK} (no Node yet: a candidate in 20m if none appears, then confirmed by a pass 1m later)"
        )),
        "{}",
        outcome.message
    );
}

#[test]
fn a_dry_run_says_would_delete() {
    let host = host();
    pass(&host, ENFORCE, "startup", T0);
    pass(&host, ENFORCE, "interval", T0 + 21 * MIN);
    let ctx = Context {
        dry_run: true,
        ..context(ENFORCE, "manual")
    };
    let outcome = run(&ctx, &host, T0 + 22 * MIN).unwrap();
    assert!(
        outcome.message.contains(&format!("would delete {STUCK}")),
        "{}",
        outcome.message
    );
    // The host's gate deleted nothing: nothing counted, nothing in flight.
    let labels = [("reason", "registration_timeout")];
    assert_eq!(host.metrics.counter("deletions", &labels), 0.0);
    assert!(memory(&host).in_flight.is_empty());
}

#[test]
fn a_spent_budget_stops_the_deletions_and_is_reported() {
    let host = host();
    host.cloud.fail_call(
        "delete-instance",
        Some(Error::BudgetExhausted(
            "budget instance-deletions: 5 per 1h spent".into(),
        )),
    );
    let outcome = until_confirmed(&host, ENFORCE);
    assert_eq!(outcome.health, Health::Degraded);
    assert!(
        outcome.message.contains("skipped: 1 budget"),
        "{}",
        outcome.message
    );
    assert!(
        outcome
            .message
            .contains("deletions stopped by the host budget: budget instance-deletions"),
        "{}",
        outcome.message
    );
    assert!(memory(&host).in_flight.is_empty());
}

#[test]
fn a_failing_node_listing_deletes_nothing() {
    let host = host();
    pass(&host, ENFORCE, "startup", T0);
    pass(&host, ENFORCE, "interval", T0 + 21 * MIN);
    host.kube.fail_call(
        "list",
        Some(Error::Unavailable(
            "the watch of nodes is not synced".into(),
        )),
    );
    let outcome = pass(&host, ENFORCE, "interval", T0 + 22 * MIN);
    assert_eq!(outcome.health, Health::Degraded);
    assert_eq!(Reason::of(&outcome.message), Some(Reason::Breaker));
    assert!(
        outcome
            .message
            .contains("node_listing: listing Nodes failed: the watch of nodes is not synced"),
        "{}",
        outcome.message
    );
    assert!(host.cloud.actions().is_empty());
    assert_eq!(
        host.metrics
            .gauge("breaker_open", &[("breaker", "node_listing")]),
        Some(1.0)
    );
    assert_eq!(memory(&host).api_down_since_ms, Some(T0 + 22 * MIN));
}

/// HEALTHY's Node, annotated as node-remediator's last step does, cordoned
/// as given.
fn ask_replacement(host: &FakeHost, cordoned: bool) {
    host.kube.put(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "healthy-1", "annotations": {REPLACE_ANNOTATION: "true"}},
        "spec": {"providerID": format!("aws:///us-east-1a/{HEALTHY}"), "unschedulable": cordoned},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }));
}

#[test]
fn a_replace_request_deletes_the_instance_of_a_cordoned_node_once_confirmed() {
    const REPLACING: &str = r#"{"owner": {"tag": "kubernetes.io/cluster/demo", "value": "owned"},
        "mode": "enforce", "replace-requests": true, "max-deletions-per-pass": 2}"#;
    let host = host();
    ask_replacement(&host, false);
    pass(&host, REPLACING, "startup", T0);
    let held = pass(&host, REPLACING, "interval", T0 + 2 * MIN);
    assert!(
        host.cloud.actions().is_empty(),
        "a schedulable Node keeps its instance"
    );
    assert!(
        held.message.contains(&format!(
            "{HEALTHY} (replace_requested: its Node asks to be replaced but is schedulable"
        )),
        "{}",
        held.message
    );
    ask_replacement(&host, true);
    pass(&host, REPLACING, "interval", T0 + 3 * MIN);
    let outcome = pass(&host, REPLACING, "interval", T0 + 4 * MIN);
    assert_eq!(host.cloud.actions(), [format!("delete-instance {HEALTHY}")]);
    assert!(
        outcome
            .message
            .contains(&format!("deleted {HEALTHY} (replace_requested)")),
        "{}",
        outcome.message
    );
    assert_eq!(
        host.metrics
            .counter("deletions", &[("reason", "replace_requested")]),
        1.0
    );
}

#[test]
fn a_replace_request_is_ignored_unless_configured() {
    let host = host();
    ask_replacement(&host, true);
    pass(&host, ENFORCE, "startup", T0);
    pass(&host, ENFORCE, "interval", T0 + 2 * MIN);
    pass(&host, ENFORCE, "interval", T0 + 4 * MIN);
    assert!(host.cloud.actions().is_empty());
}

#[test]
fn a_failing_cloud_listing_deletes_nothing() {
    let host = host();
    host.cloud.fail_call(
        "list-instances",
        Some(Error::Unavailable("EC2 is down".into())),
    );
    let outcome = pass(&host, ENFORCE, "interval", T0);
    assert_eq!(outcome.health, Health::Degraded);
    assert!(outcome.message.contains("EC2 is down"));
}

#[test]
fn bad_config_names_the_key() {
    let host = host();
    for (config, key) in [
        ("{}", "owner"),
        (
            r#"{"owner": {"tag": "k", "value": "v"}, "max-fraction": 2.0}"#,
            "max-fraction",
        ),
        (
            r#"{"owner": {"tag": "k", "value": "v"}, "pools": {"gpu": {"registration-timeout": "45m"}}}"#,
            "pools",
        ),
        (
            r#"{"owner": {"tag": "k", "value": "v"}, "mode": "delete"}"#,
            "mode",
        ),
        (
            r#"{"owner": {"tag": "k", "value": "v"}, "confirm-after": "59s"}"#,
            "confirm-after",
        ),
    ] {
        let err = run(&context(config, "manual"), &host, T0).unwrap_err();
        assert_eq!(err.kind(), "invalid", "{config}");
        assert!(err.message().contains(key), "{config}: {err}");
    }
}

/// Hole 4: `confirm-after` has a floor of a minute, refused (not clamped)
/// with the field and the floor named.
#[test]
fn confirm_after_below_a_minute_is_refused() {
    let host = host();
    let config = r#"{"owner": {"tag": "k", "value": "v"}, "confirm-after": "1s"}"#;
    let err = run(&context(config, "manual"), &host, T0).unwrap_err();
    assert_eq!(err.kind(), "invalid");
    assert!(
        err.message().contains("confirm-after") && err.message().contains("at least 1m"),
        "{err}"
    );
    let config = r#"{"owner": {"tag": "k", "value": "v"}, "confirm-after": "1m"}"#;
    assert!(run(&context(config, "manual"), &host, T0).is_ok());
}
