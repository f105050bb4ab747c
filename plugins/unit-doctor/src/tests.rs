//! unit-doctor's logic against the SDK's in-memory fakes and a clock the tests set.

use super::*;
use doctor::UnitState;
use std::cell::Cell;
use tend_sdk::testing::FakeHost;
use tend_sdk::{JobResult, Level, State, Trigger};

const KUBELET: &str = "kubelet.service";
const HEALTHZ: &str = "http://127.0.0.1:10248/healthz";

/// A clock that only moves when told.
struct TestClock(Cell<u64>);

impl TestClock {
    fn at(ms: u64) -> Self {
        TestClock(Cell::new(ms))
    }
    fn set(&self, ms: u64) {
        self.0.set(ms);
    }
}

impl Clock for TestClock {
    fn now_ms(&self) -> u64 {
        self.0.get()
    }
}

/// An arbitrary wall-clock start, so nothing depends on time zero.
const T0: u64 = 1_700_000_000_000;

fn context(checks: &str) -> Context {
    Context::new("unit-doctor", &format!(r#"{{"checks": [{checks}]}}"#))
}

fn active_check(extra: &str) -> String {
    format!(r#"{{"unit": "{KUBELET}", "probe": "active"{extra}}}"#)
}

fn http_check(extra: &str) -> String {
    format!(r#"{{"unit": "{KUBELET}", "probe": {{"http": {{"url": "{HEALTHZ}"}}}}{extra}}}"#)
}

/// A host granting status and restart of the kubelet, with the kubelet active.
fn host() -> FakeHost {
    let host = FakeHost::named("unit-doctor");
    host.systemd.grant(&[KUBELET], &["restart"]);
    host.systemd.set_unit(KUBELET, "active");
    host
}

fn run(ctx: &Context, host: &FakeHost, clock: &TestClock) -> Outcome {
    reconcile_with(ctx, host, clock).unwrap()
}

fn restarts(host: &FakeHost) -> usize {
    host.systemd
        .actions()
        .iter()
        .filter(|a| *a == &format!("restart {KUBELET}"))
        .count()
}

fn stored(host: &FakeHost) -> UnitState {
    let state: &dyn State = &host.state;
    state
        .get_json(&format!("unit/{KUBELET}"))
        .unwrap()
        .unwrap_or_default()
}

fn secs(s: u64) -> Option<u64> {
    Some(s * 1000)
}

#[test]
fn a_healthy_unit_gets_no_action_and_no_requeue() {
    let host = host();
    let clock = TestClock::at(T0);
    let outcome = run(&context(&active_check("")), &host, &clock);
    assert_eq!(outcome.health, Health::Healthy);
    assert_eq!(outcome.message, "healthy: kubelet.service");
    assert_eq!(outcome.requeue_after_ms, None);
    assert!(host.systemd.actions().is_empty());
    assert!(
        host.state.list_keys("").unwrap().is_empty(),
        "nothing to remember about a healthy unit"
    );
}

#[test]
fn a_unit_systemd_is_starting_waits_but_a_crash_loops_wait_is_failing() {
    let host = host();
    host.systemd.set_unit(KUBELET, "activating");
    let status = |sub: &str| tend_sdk::UnitStatus {
        sub_state: sub.into(),
        ..tend_sdk::Host::systemd(&host).status(KUBELET).unwrap()
    };
    host.systemd.put_unit(status("start"));
    let clock = TestClock::at(T0);
    let ctx = context(&active_check(""));
    let outcome = run(&ctx, &host, &clock);
    assert_eq!(outcome.health, Health::Progressing);
    assert!(
        outcome.message.contains("in transition"),
        "{}",
        outcome.message
    );
    assert_eq!(stored(&host).failing_since_ms, None);

    host.systemd.put_unit(status("auto-restart"));
    let outcome = run(&ctx, &host, &clock);
    assert_eq!(
        outcome.message,
        "kubelet.service failing (active-state activating (auto-restart)); restart in 1m"
    );
    assert_eq!(stored(&host).failing_since_ms, Some(T0));
}

#[test]
fn failing_for_less_than_fail_after_waits_and_requeues_when_it_would_elapse() {
    let host = host();
    host.systemd.set_unit(KUBELET, "failed");
    let clock = TestClock::at(T0);
    let ctx = context(&active_check(""));
    let outcome = run(&ctx, &host, &clock);
    assert_eq!(outcome.health, Health::Progressing);
    assert_eq!(outcome.requeue_after_ms, secs(60));
    assert_eq!(
        outcome.message,
        "kubelet.service failing (active-state failed); restart in 1m"
    );
    assert_eq!(stored(&host).failing_since_ms, Some(T0));

    clock.set(T0 + 20_000);
    let outcome = run(&ctx, &host, &clock);
    assert_eq!(outcome.health, Health::Progressing);
    assert_eq!(outcome.requeue_after_ms, secs(40), "{}", outcome.message);
    assert!(host.systemd.actions().is_empty());

    // Passing once resets the clock of continuous failure.
    host.systemd.set_unit(KUBELET, "active");
    clock.set(T0 + 30_000);
    assert_eq!(run(&ctx, &host, &clock).health, Health::Healthy);
    assert_eq!(stored(&host).failing_since_ms, None);
    host.systemd.set_unit(KUBELET, "failed");
    clock.set(T0 + 70_000);
    let outcome = run(&ctx, &host, &clock);
    assert_eq!(outcome.requeue_after_ms, secs(60));
    assert!(host.systemd.actions().is_empty());
}

#[test]
fn failing_past_fail_after_restarts_once_then_backs_off() {
    let host = host();
    host.systemd.set_unit(KUBELET, "failed");
    let clock = TestClock::at(T0);
    let ctx = context(&active_check(""));
    run(&ctx, &host, &clock);

    clock.set(T0 + 60_000);
    let outcome = run(&ctx, &host, &clock);
    assert_eq!(host.systemd.actions(), ["restart kubelet.service"]);
    assert_eq!(outcome.health, Health::Progressing);
    assert_eq!(
        outcome.message,
        "restarted kubelet.service after failing for 1m (active-state failed); backing off for 30s"
    );
    assert_eq!(outcome.requeue_after_ms, secs(30));
    let state = stored(&host);
    assert_eq!(state.restarts_ms, [T0 + 60_000]);
    assert_eq!(state.backoff_until_ms, Some(T0 + 90_000));
    assert_eq!(state.failing_since_ms, None);

    // It fails again at once: not judged during the backoff.
    host.systemd.set_unit(KUBELET, "failed");
    for at in [60_001, 75_000, 89_999] {
        clock.set(T0 + at);
        let outcome = run(&ctx, &host, &clock);
        assert_eq!(outcome.health, Health::Progressing);
        assert_eq!(outcome.requeue_after_ms, Some(90_000 - at));
        assert!(
            outcome.message.contains("backing off"),
            "{}",
            outcome.message
        );
    }
    assert_eq!(restarts(&host), 1, "no second restart during the backoff");

    // After it, continuous failure is counted afresh.
    clock.set(T0 + 90_000);
    let outcome = run(&ctx, &host, &clock);
    assert_eq!(outcome.requeue_after_ms, secs(60), "{}", outcome.message);
    assert_eq!(restarts(&host), 1);
    clock.set(T0 + 150_000);
    run(&ctx, &host, &clock);
    assert_eq!(restarts(&host), 2);
}

#[test]
fn a_flapping_unit_is_not_restarted_beyond_max_restarts_in_the_window() {
    let host = host();
    let clock = TestClock::at(T0);
    let ctx = context(&active_check(r#", "fail-after-ms": 0, "backoff-ms": 1000"#));
    // It goes down after every restart: three restarts, one a minute.
    for minute in 0..3 {
        clock.set(T0 + minute * 60_000);
        host.systemd.set_unit(KUBELET, "failed");
        let outcome = run(&ctx, &host, &clock);
        assert_eq!(outcome.health, Health::Progressing, "{}", outcome.message);
    }
    assert_eq!(restarts(&host), 3);

    clock.set(T0 + 180_000);
    host.systemd.set_unit(KUBELET, "failed");
    let outcome = run(&ctx, &host, &clock);
    assert_eq!(
        restarts(&host),
        3,
        "a fourth restart in the window is refused"
    );
    assert_eq!(outcome.health, Health::Degraded);
    assert_eq!(
        outcome.message,
        "kubelet.service flapped: 4 restarts needed in 10m (max-restarts 3); not restarting; check the unit (last failure: active-state failed)"
    );
    assert_eq!(outcome.requeue_after_ms, None);
    assert!(
        host.log_lines()
            .iter()
            .any(|(level, line)| *level == Level::Warn && line.contains("flapped")),
        "{:?}",
        host.log_lines()
    );

    // Still failing, even once the restarts left the window: no restart.
    for at in [181_000, 900_000] {
        clock.set(T0 + at);
        let outcome = run(&ctx, &host, &clock);
        assert_eq!(outcome.health, Health::Degraded);
        assert!(outcome.message.contains("flapped: 4 restarts needed"));
    }
    assert_eq!(restarts(&host), 3);

    // Healthy again (the operator fixed it): restarts resume when needed.
    host.systemd.set_unit(KUBELET, "active");
    clock.set(T0 + 901_000);
    assert_eq!(run(&ctx, &host, &clock).health, Health::Healthy);
    assert_eq!(stored(&host).flapped, None);
    host.systemd.set_unit(KUBELET, "failed");
    clock.set(T0 + 902_000);
    run(&ctx, &host, &clock);
    assert_eq!(restarts(&host), 4);
}

#[test]
fn restarts_spread_beyond_the_window_are_not_flapping() {
    let host = host();
    let clock = TestClock::at(T0);
    let ctx = context(&active_check(
        r#", "fail-after-ms": 0, "max-restarts": 1, "window-ms": 60000"#,
    ));
    for at in [0, 60_000, 120_000] {
        clock.set(T0 + at);
        host.systemd.set_unit(KUBELET, "failed");
        let outcome = run(&ctx, &host, &clock);
        assert_eq!(outcome.health, Health::Progressing, "{}", outcome.message);
    }
    assert_eq!(restarts(&host), 3);
    assert_eq!(
        stored(&host).restarts_ms,
        [T0 + 120_000],
        "old restarts pruned"
    );
}

#[test]
fn a_unit_trigger_with_fail_after_zero_restarts_in_that_reconcile() {
    let host = host();
    let clock = TestClock::at(T0);
    let mut ctx = context(&active_check(r#", "fail-after-ms": 0"#));
    ctx.triggers = vec![Trigger {
        kind: "unit".into(),
        subject: Some(KUBELET.into()),
    }];
    host.systemd.set_unit(KUBELET, "failed");
    let outcome = run(&ctx, &host, &clock);
    assert_eq!(host.systemd.actions(), ["restart kubelet.service"]);
    assert_eq!(outcome.health, Health::Progressing);
    assert_eq!(outcome.requeue_after_ms, secs(30));
    // The restart's own state changes trigger it again: it backs off.
    let outcome = run(&ctx, &host, &clock);
    assert_eq!(restarts(&host), 1);
    assert!(
        outcome.message.contains("backing off"),
        "{}",
        outcome.message
    );
}

#[test]
fn a_unit_trigger_on_a_failed_unit_counts_for_an_http_check() {
    let host = host();
    host.http.grant("http://127.0.0.1:*/*");
    host.http.status(HEALTHZ, 200);
    host.systemd.set_unit(KUBELET, "failed");
    let clock = TestClock::at(T0);
    let mut ctx = context(&http_check(r#", "fail-after-ms": 0"#));
    // Without the trigger the endpoint decides...
    assert_eq!(run(&ctx, &host, &clock).health, Health::Healthy);
    // ...with it, the failed state counts.
    ctx.triggers.push(Trigger {
        kind: "unit".into(),
        subject: Some(KUBELET.into()),
    });
    let outcome = run(&ctx, &host, &clock);
    assert_eq!(host.systemd.actions(), ["restart kubelet.service"]);
    assert!(
        outcome.message.contains("(active-state failed)"),
        "{}",
        outcome.message
    );
}

#[test]
fn http_probe_decides_by_status_and_restarts_after_fail_after() {
    let host = host();
    host.http.grant("http://127.0.0.1:*/*");
    host.http.status(HEALTHZ, 200);
    let clock = TestClock::at(T0);
    let ctx = context(&http_check(r#", "fail-after-ms": 10000"#));
    assert_eq!(run(&ctx, &host, &clock).health, Health::Healthy);
    let sent = host.http.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].url, HEALTHZ);
    assert_eq!(sent[0].method, "GET");
    assert_eq!(sent[0].timeout_ms, Some(2000));

    host.http.status(HEALTHZ, 503);
    let outcome = run(&ctx, &host, &clock);
    assert_eq!(outcome.health, Health::Progressing);
    assert_eq!(
        outcome.message,
        "kubelet.service failing (GET http://127.0.0.1:10248/healthz answered 503); restart in 10s"
    );
    assert_eq!(outcome.requeue_after_ms, secs(10));

    // Connection refused is a failure too.
    host.http.respond(
        "GET",
        HEALTHZ,
        Err(Error::Unavailable("connection refused".into())),
    );
    clock.set(T0 + 10_000);
    let outcome = run(&ctx, &host, &clock);
    assert_eq!(host.systemd.actions(), ["restart kubelet.service"]);
    assert!(
        outcome.message.contains("connection refused"),
        "{}",
        outcome.message
    );
}

#[test]
fn expected_statuses_and_timeout_are_configurable() {
    let host = host();
    host.http.grant("http://127.0.0.1:*/*");
    host.http.status(HEALTHZ, 204);
    let clock = TestClock::at(T0);
    let check = format!(
        r#"{{"unit": "{KUBELET}", "probe": {{"http": {{"url": "{HEALTHZ}", "expect-status": [200, 204], "timeout-ms": 500}}}}}}"#
    );
    assert_eq!(run(&context(&check), &host, &clock).health, Health::Healthy);
    assert_eq!(host.http.sent()[0].timeout_ms, Some(500));
}

#[test]
fn an_ungranted_http_probe_is_degraded_and_never_restarts() {
    let host = host();
    let clock = TestClock::at(T0);
    let ctx = context(&http_check(r#", "fail-after-ms": 0"#));
    let outcome = run(&ctx, &host, &clock);
    assert_eq!(outcome.health, Health::Degraded);
    assert_eq!(
        outcome.message,
        "kubelet.service: cannot probe: denied: GET http://127.0.0.1:10248/healthz: no http grant matches; add \"http://127.0.0.1:10248/*\" to [plugins.unit-doctor.grants] http"
    );
    assert!(host.systemd.actions().is_empty());
}

#[test]
fn an_unavailable_systemd_is_degraded_with_its_message() {
    let host = host();
    host.systemd
        .fail_with(Some(Error::Unavailable("system bus went away".into())));
    let clock = TestClock::at(T0);
    let outcome = run(&context(&active_check("")), &host, &clock);
    assert_eq!(outcome.health, Health::Degraded);
    assert_eq!(
        outcome.message,
        "kubelet.service: cannot read its status: unavailable: system bus went away"
    );
    assert_eq!(outcome.requeue_after_ms, None);
    assert!(host.systemd.actions().is_empty());

    // Back: judged normally, nothing counted in between.
    host.systemd.fail_with(None);
    assert_eq!(
        run(&context(&active_check("")), &host, &clock).health,
        Health::Healthy
    );
}

#[test]
fn an_ungranted_restart_surfaces_the_denial_and_counts_nothing() {
    let host = FakeHost::named("unit-doctor");
    host.systemd.grant(&[KUBELET], &[]);
    host.systemd.set_unit(KUBELET, "failed");
    let clock = TestClock::at(T0);
    let ctx = context(&active_check(r#", "fail-after-ms": 0"#));
    let outcome = run(&ctx, &host, &clock);
    assert_eq!(outcome.health, Health::Degraded);
    assert_eq!(
        outcome.message,
        "kubelet.service needs a restart after failing (active-state failed), but it failed: denied: systemd restart of kubelet.service is not granted: add \"restart\" to operations in [plugins.unit-doctor.grants] systemd"
    );
    assert!(host.systemd.actions().is_empty());
    let state = stored(&host);
    assert_eq!(state.restarts_ms, Vec::<u64>::new());
    assert_eq!(state.backoff_until_ms, None);
    assert_eq!(state.failing_since_ms, Some(T0), "still failing since T0");

    // Granted later: restarted on the next reconcile, no backoff to wait out.
    host.systemd.grant(&[KUBELET], &["restart"]);
    clock.set(T0 + 5_000);
    run(&ctx, &host, &clock);
    assert_eq!(host.systemd.actions(), ["restart kubelet.service"]);
}

#[test]
fn an_unknown_unit_is_degraded_not_restarted() {
    let host = FakeHost::named("unit-doctor");
    host.systemd.grant(&["*.service"], &["restart"]);
    let clock = TestClock::at(T0);
    let outcome = run(
        &context(&active_check(r#", "fail-after-ms": 0"#)),
        &host,
        &clock,
    );
    assert_eq!(outcome.health, Health::Degraded);
    assert!(outcome.message.contains("not-found"), "{}", outcome.message);
    assert!(host.systemd.actions().is_empty());
}

#[test]
fn a_failed_restart_job_is_counted_and_backed_off() {
    let host = host();
    host.systemd.set_unit(KUBELET, "failed");
    host.systemd.job_result(KUBELET, JobResult::Failed);
    let clock = TestClock::at(T0);
    let outcome = run(
        &context(&active_check(r#", "fail-after-ms": 0"#)),
        &host,
        &clock,
    );
    assert_eq!(outcome.health, Health::Progressing);
    assert_eq!(
        outcome.message,
        "restart of kubelet.service ended failed after failing (active-state failed); backing off for 30s"
    );
    assert_eq!(stored(&host).restarts_ms, [T0]);
}

#[test]
fn checks_are_summarized_worst_first_with_the_earliest_requeue() {
    let host = FakeHost::named("unit-doctor");
    host.systemd.grant(&["*.service"], &["restart"]);
    host.systemd.set_unit("a.service", "active");
    host.systemd.set_unit("b.service", "failed");
    host.systemd.set_unit("c.service", "failed");
    let clock = TestClock::at(T0);
    let ctx = context(
        r#"{"unit": "a.service", "probe": "active"},
           {"unit": "b.service", "probe": "active", "fail-after-ms": 90000},
           {"unit": "c.service", "probe": "active", "fail-after-ms": 45000}"#,
    );
    let outcome = run(&ctx, &host, &clock);
    assert_eq!(outcome.health, Health::Progressing);
    assert_eq!(outcome.requeue_after_ms, secs(45));
    assert_eq!(
        outcome.message,
        "b.service failing (active-state failed); restart in 1m30s; c.service failing (active-state failed); restart in 45s; healthy: a.service"
    );
}

#[test]
fn state_of_units_no_longer_checked_is_forgotten() {
    let host = host();
    host.systemd.set_unit(KUBELET, "failed");
    let clock = TestClock::at(T0);
    run(&context(&active_check("")), &host, &clock);
    assert_eq!(host.state.list_keys("").unwrap(), ["unit/kubelet.service"]);
    let outcome = run(&context(""), &host, &clock);
    assert_eq!(outcome.health, Health::Healthy);
    assert_eq!(outcome.message, "no checks configured");
    assert!(host.state.list_keys("").unwrap().is_empty());
}

#[test]
fn unreadable_state_is_replaced() {
    let host = host();
    host.state.set("unit/kubelet.service", b"not json").unwrap();
    let clock = TestClock::at(T0);
    host.systemd.set_unit(KUBELET, "failed");
    let outcome = run(&context(&active_check("")), &host, &clock);
    assert_eq!(outcome.health, Health::Progressing);
    assert_eq!(stored(&host).failing_since_ms, Some(T0));
}

#[test]
fn a_backwards_clock_never_stretches_a_backoff() {
    let host = host();
    host.systemd.set_unit(KUBELET, "failed");
    let clock = TestClock::at(T0);
    let ctx = context(&active_check(r#", "fail-after-ms": 0"#));
    run(&ctx, &host, &clock);
    clock.set(T0 - 3_600_000);
    let outcome = run(&ctx, &host, &clock);
    assert_eq!(outcome.requeue_after_ms, secs(30));
}

#[test]
fn config_is_validated_and_errors_name_the_problem() {
    let host = host();
    let clock = TestClock::at(T0);
    let invalid = |checks: &str| {
        let err = reconcile_with(&context(checks), &host, &clock).unwrap_err();
        assert_eq!(err.kind(), "invalid", "{err}");
        err.message().to_string()
    };
    assert!(
        invalid(r#"{"unit": "a.service", "probe": "active", "fail-after": 5}"#)
            .contains("fail-after")
    );
    assert!(invalid(r#"{"unit": "a.service", "probe": "running"}"#).contains("running"));
    assert!(invalid(r#"{"unit": "a.service"}"#).contains("probe"));
    assert!(
        invalid(r#"{"unit": "a.service", "probe": {"http": {"url": "x", "expect": [200]}}}"#)
            .contains("expect")
    );
    assert!(
        invalid(r#"{"unit": "a.service", "probe": {"http": {"url": "ftp://x/"}}}"#)
            .contains("http://")
    );
    assert!(
        invalid(
            r#"{"unit": "a.service", "probe": "active"}, {"unit": "a.service", "probe": "active"}"#
        )
        .contains("checked twice")
    );
    assert!(
        invalid(r#"{"unit": "a.service", "probe": "active", "max-restarts": 0}"#)
            .contains("max-restarts")
    );
    assert!(invalid(r#"{"unit": "", "probe": "active"}"#).contains("unit name"));
    let err = reconcile_with(
        &Context::new("unit-doctor", r#"{"checks": [], "interval": "30s"}"#),
        &host,
        &clock,
    )
    .unwrap_err();
    assert!(err.message().contains("interval"), "{err}");
}

#[test]
fn durations_read_like_an_operator_writes_them() {
    assert_eq!(human(0), "0ms");
    assert_eq!(human(999), "999ms");
    assert_eq!(human(30_000), "30s");
    assert_eq!(human(90_000), "1m30s");
    assert_eq!(human(600_000), "10m");
    assert_eq!(human(3_660_000), "1h1m");
}

#[test]
fn the_system_clock_reads_wall_time() {
    assert!(SystemClock.now_ms() > T0);
}
