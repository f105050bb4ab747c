//! The decisions on their own: state, probe result and time in, decision and
//! verdict out, no host.

use super::*;
use crate::Probe;

const UNIT: &str = "kubelet.service";
const T0: u64 = 1_700_000_000_000;

/// fail-after 60 s, backoff 30 s, at most 3 restarts in 10 min.
fn check() -> Check {
    Check {
        unit: UNIT.into(),
        probe: Probe::Active,
        fail_after_ms: 60_000,
        backoff_ms: 30_000,
        max_restarts: 3,
        window_ms: 600_000,
    }
}

fn fail() -> Probed {
    Probed::Fail("active-state failed".into())
}

fn failing_since(ms: u64) -> UnitState {
    UnitState {
        failing_since_ms: Some(ms),
        ..Default::default()
    }
}

#[test]
fn a_first_failure_waits_for_fail_after_and_starts_its_clock() {
    let mut state = UnitState::default();
    let decision = judge(&mut state, &check(), T0, fail());
    let Decision::Report(report) = decision else {
        panic!("{decision:?}")
    };
    assert_eq!(
        report,
        Report::Waiting {
            reason: "active-state failed".into(),
            failing_for: 0,
            left: 60_000
        }
    );
    assert_eq!(state.failing_since_ms, Some(T0));
    let verdict = report.verdict(&check());
    assert_eq!(verdict.health, Health::Progressing);
    assert_eq!(verdict.requeue_ms, Some(60_000));
    assert_eq!(
        report.log(&check()),
        None,
        "waiting is not worth a log line"
    );
}

#[test]
fn failing_for_fail_after_decides_a_restart_and_leaves_recording_it_to_the_restart() {
    let mut state = failing_since(T0);
    let decision = judge(&mut state, &check(), T0 + 60_000, fail());
    assert_eq!(
        decision,
        Decision::Restart {
            reason: "active-state failed".into(),
            failing_for: 60_000
        }
    );
    assert_eq!(
        state,
        failing_since(T0),
        "nothing recorded before it is made"
    );

    state.restarted_at(&check(), T0 + 60_000);
    assert_eq!(state.restarts_ms, [T0 + 60_000]);
    assert_eq!(state.backoff_until_ms, Some(T0 + 90_000));
    assert_eq!(state.failing_since_ms, None);
}

#[test]
fn a_restart_beyond_max_restarts_is_refused_as_flapping_once() {
    let mut state = UnitState {
        restarts_ms: vec![T0 - 3000, T0 - 2000, T0 - 1000],
        ..failing_since(T0 - 60_000)
    };
    let decision = judge(&mut state, &check(), T0, fail());
    let flapped = Flapped {
        at_ms: T0,
        restarts_needed: 4,
    };
    let Decision::Report(report) = decision else {
        panic!("{decision:?}")
    };
    assert_eq!(
        report,
        Report::Flapping {
            reason: "active-state failed".into(),
            flapped: flapped.clone()
        }
    );
    assert_eq!(state.flapped, Some(flapped));
    let verdict = report.verdict(&check());
    assert_eq!(verdict.health, Health::Degraded);
    assert_eq!(
        report.log(&check()),
        Some((Level::Warn, verdict.message.clone())),
        "flapping is logged when noticed"
    );

    let again = judge(&mut state, &check(), T0 + 60_000, fail());
    let Decision::Report(report) = again else {
        panic!("{again:?}")
    };
    assert!(matches!(report, Report::StillFlapped { .. }), "{report:?}");
    assert_eq!(
        report.log(&check()),
        None,
        "and not on every reconcile after"
    );
    assert_eq!(report.verdict(&check()).message, verdict.message);
}

#[test]
fn passing_again_clears_failure_and_flapping_and_is_logged_once() {
    let mut state = UnitState {
        flapped: Some(Flapped {
            at_ms: T0,
            restarts_needed: 4,
        }),
        ..failing_since(T0)
    };
    let decision = judge(&mut state, &check(), T0 + 1, Probed::Pass);
    assert_eq!(
        decision,
        Decision::Report(Report::Healthy { recovered: true })
    );
    assert_eq!(state, UnitState::default());
    let Decision::Report(report) = judge(&mut state, &check(), T0 + 2, Probed::Pass) else {
        panic!()
    };
    assert_eq!(report, Report::Healthy { recovered: false });
    assert_eq!(report.log(&check()), None);
    assert_eq!(report.verdict(&check()).message, "kubelet.service healthy");
}

#[test]
fn a_probe_that_cannot_be_made_counts_nothing() {
    let mut state = failing_since(T0);
    let why = "cannot read its status: unavailable: no bus";
    let decision = judge(
        &mut state,
        &check(),
        T0 + 600_000,
        Probed::Error(why.into()),
    );
    assert_eq!(decision, Decision::Report(Report::CannotProbe(why.into())));
    assert_eq!(state, failing_since(T0), "not restarted, nothing changed");
}

#[test]
fn a_unit_in_transition_is_neither_failing_nor_forgiven() {
    let starting = || Probed::InTransition("active-state activating (start)".into());
    // Started by someone (unit-applier, an operator): no failing clock starts.
    let mut state = UnitState::default();
    let decision = judge(&mut state, &check(), T0 + 600_000, starting());
    let Decision::Report(report) = decision else {
        panic!("{decision:?}")
    };
    assert_eq!(state, UnitState::default());
    let verdict = report.verdict(&check());
    assert_eq!(verdict.health, Health::Progressing);
    assert_eq!(verdict.requeue_ms, Some(10_000));
    assert_eq!(
        verdict.message,
        "kubelet.service in transition (active-state activating (start)): systemd finishes its job first"
    );
    // Failing before it: the clock goes on, and a failure after restarts.
    let mut state = failing_since(T0);
    judge(&mut state, &check(), T0 + 30_000, starting());
    assert_eq!(state, failing_since(T0));
    let decision = judge(&mut state, &check(), T0 + 60_000, fail());
    assert!(matches!(decision, Decision::Restart { .. }), "{decision:?}");
}

#[test]
fn a_backoff_holds_judgement_back_bounded_by_backoff_ms() {
    let mut state = UnitState {
        backoff_until_ms: Some(T0 + 30_000),
        ..Default::default()
    };
    let wait = |left| Some(Decision::Report(Report::BackingOff { left }));
    assert_eq!(backing_off(&mut state, &check(), T0 + 10_000), wait(20_000));
    assert_eq!(
        backing_off(&mut state, &check(), T0 - 3_600_000),
        wait(30_000),
        "a clock jumped back never stretches it"
    );
    assert_eq!(backing_off(&mut state, &check(), T0 + 30_000), None);
    assert_eq!(state.backoff_until_ms, None, "over: forgotten");
}

#[test]
fn restarts_outside_the_window_are_forgotten() {
    let mut state = UnitState {
        restarts_ms: vec![T0 - 600_000, T0 - 599_999, T0],
        ..Default::default()
    };
    state.forget_old_restarts(&check(), T0);
    assert_eq!(state.restarts_ms, [T0 - 599_999, T0]);
}

#[test]
fn a_restart_reads_by_its_result() {
    let check = check();
    let restarted =
        |dry_run, result| restarted(&check, dry_run, "active-state failed", 60_000, &result);

    let (level, done) = restarted(false, Ok(JobResult::Done));
    assert_eq!(level, Level::Warn);
    assert_eq!(
        done.message,
        "restarted kubelet.service after failing for 1m (active-state failed); backing off for 30s"
    );
    assert_eq!(
        (done.health, done.requeue_ms),
        (Health::Progressing, Some(30_000))
    );

    let (_, planned) = restarted(true, Ok(JobResult::Done));
    assert!(
        planned.message.starts_with("would restart kubelet.service"),
        "{}",
        planned.message
    );

    let (_, timeout) = restarted(false, Ok(JobResult::Timeout));
    assert!(
        timeout
            .message
            .starts_with("restart of kubelet.service ended timeout after")
    );
    assert_eq!(
        timeout.requeue_ms,
        Some(30_000),
        "a restart was made: backed off"
    );

    let denied = Err(Error::Denied("grant systemd restart".into()));
    let (level, failed) = restarted(false, denied);
    assert_eq!(level, Level::Error);
    assert_eq!((failed.health, failed.requeue_ms), (Health::Degraded, None));
    assert!(
        failed
            .message
            .contains("needs a restart after failing for 1m"),
        "{}",
        failed.message
    );
}
