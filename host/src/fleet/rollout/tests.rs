use super::*;
use crate::fleet::cohort::default_steps;
use std::collections::BTreeSet;

const A: &str = "r-000000000000000a";
const B: &str = "r-000000000000000b";
const C: &str = "r-000000000000000c";

fn nodes() -> Vec<Member> {
    (0..100)
        .map(|i| Member {
            uid: format!("uid-{i}"),
            group: format!("zone-{}/pool", i % 3),
        })
        .collect()
}

/// One poll: the config asks for `desired`, maybe an operator's command.
fn poll(
    current: Option<&Rollout>,
    desired: &str,
    command: Option<Command>,
    verdict: Verdict,
) -> Rollout {
    seen(current, Some(desired), false, command, verdict).unwrap()
}

fn seen(
    current: Option<&Rollout>,
    desired: Option<&str>,
    reduces_risk: bool,
    command: Option<Command>,
    verdict: Verdict,
) -> Option<Rollout> {
    let nodes = nodes();
    let steps = default_steps();
    let seen = Seen {
        desired,
        running: None,
        reduces_risk,
        nodes: &nodes,
        steps: &steps,
        command,
    };
    advance(current, &seen, || verdict)
}

fn running(rollout: &Rollout, revision: &str) -> BTreeSet<String> {
    nodes()
        .iter()
        .filter(|n| rollout.runs(&n.uid, &n.group) == revision)
        .map(|n| n.uid.clone())
        .collect()
}

fn rolling_b() -> Rollout {
    let stable = poll(None, A, None, Verdict::Promote);
    poll(Some(&stable), B, None, Verdict::Hold("never asked".into()))
}

#[test]
fn the_first_leader_adopts_what_the_nodes_ask_for_and_nothing_without_them() {
    let first = poll(None, A, None, Verdict::Abort("never asked".into()));
    assert_eq!(
        (first.revision.as_str(), first.stable.as_str(), first.state),
        (A, A, State::Done)
    );
    assert_eq!(running(&first, A).len(), 100);
    let never = || Verdict::Abort("never asked".into());
    assert_eq!(seen(None, None, false, None, never()), None);
    assert_eq!(seen(Some(&first), None, false, None, never()), Some(first));
}

#[test]
fn a_new_revision_starts_on_one_node_and_widens_step_by_step_to_every_node() {
    let mut rollout = rolling_b();
    assert_eq!((rollout.state, rollout.step), (State::Rolling, 0));
    let mut adopted = running(&rollout, B);
    assert_eq!(adopted.len(), 1);
    assert_eq!(running(&rollout, A).len(), 99);
    for (step, reach) in [(1, 2), (2, 10), (3, 25), (4, 50), (5, 100)] {
        let held = poll(Some(&rollout), B, None, Verdict::Hold("baking".into()));
        assert_eq!((held.step, held.reason.as_str()), (step - 1, "baking"));
        rollout = poll(Some(&held), B, None, Verdict::Promote);
        assert_eq!(rollout.step, step);
        let now = running(&rollout, B);
        assert_eq!(now.len(), reach, "step {step}");
        assert!(
            now.is_superset(&adopted),
            "the adopted set shrank at step {step}"
        );
        adopted = now;
    }
    let done = poll(Some(&rollout), B, None, Verdict::Promote);
    assert_eq!((done.state, done.stable.as_str()), (State::Done, B));
    assert_eq!(running(&done, B).len(), 100);
    // Done stays done: no verdict is asked any more.
    assert_eq!(
        poll(Some(&done), B, None, Verdict::Abort("never".into())),
        done
    );
}

#[test]
fn an_abort_reverts_every_node_and_the_revision_stays_failed_until_retried() {
    let rollout = rolling_b();
    let failed = poll(
        Some(&rollout),
        B,
        None,
        Verdict::Abort("3 of 3 runs failed".into()),
    );
    assert_eq!(failed.state, State::Failed);
    assert!(
        failed
            .reason
            .contains("aborted at step 1: 3 of 3 runs failed"),
        "{}",
        failed.reason
    );
    assert_eq!(running(&failed, A).len(), 100);
    assert_eq!(failed.failed, [B]);
    // The config still asks for it: it stays failed, no verdict asked.
    let again = poll(Some(&failed), B, None, Verdict::Promote);
    assert_eq!(again, failed);
    // Another revision, then B once more: still refused.
    let c = poll(Some(&failed), C, None, Verdict::Hold("-".into()));
    assert_eq!(
        (c.revision.as_str(), c.state, c.failed.as_slice()),
        (C, State::Rolling, [B.to_string()].as_slice())
    );
    let b_again = poll(Some(&c), B, None, Verdict::Promote);
    assert_eq!((b_again.revision.as_str(), b_again.state), (A, State::Done));
    assert!(
        b_again.reason.contains("tend rollout retry"),
        "{}",
        b_again.reason
    );
    // A retry starts it over from the first step.
    let retried = poll(Some(&failed), B, Some(Command::Retry), Verdict::Promote);
    assert_eq!((retried.state, retried.step), (State::Rolling, 0));
    assert!(retried.failed.is_empty());
    assert_eq!(running(&retried, B).len(), 1);
}

#[test]
fn a_pause_keeps_what_runs_until_resumed() {
    let rollout = rolling_b();
    let canary = running(&rollout, B);
    let paused = poll(
        Some(&rollout),
        B,
        None,
        Verdict::Pause("the stable nodes degrade as well".into()),
    );
    assert_eq!(paused.state, State::Paused);
    assert_eq!(running(&paused, B), canary);
    // Paused: no verdict widens it.
    assert_eq!(poll(Some(&paused), B, None, Verdict::Promote), paused);
    let resumed = poll(Some(&paused), B, Some(Command::Resume), Verdict::Promote);
    assert_eq!((resumed.state, resumed.step), (State::Rolling, 0));
    let by_hand = poll(Some(&resumed), B, Some(Command::Pause), Verdict::Promote);
    assert_eq!(by_hand.state, State::Paused);
    assert!(by_hand.reason.contains("operator"));
}

#[test]
fn a_newer_revision_supersedes_the_candidate_and_a_reverted_config_ends_it() {
    let b = poll(Some(&rolling_b()), B, None, Verdict::Promote);
    assert_eq!(running(&b, B).len(), 2);
    let c = poll(Some(&b), C, None, Verdict::Promote);
    assert_eq!((c.revision.as_str(), c.stable.as_str(), c.step), (C, A, 0));
    assert!(running(&c, B).is_empty());
    assert_eq!(running(&c, C).len(), 1);
    let back = poll(Some(&c), A, None, Verdict::Promote);
    assert_eq!((back.revision.as_str(), back.state), (A, State::Done));
    assert_eq!(running(&back, A).len(), 100);
}

#[test]
fn a_change_that_only_reduces_risk_is_stable_at_once() {
    let stable = poll(None, A, None, Verdict::Promote);
    let now = seen(
        Some(&stable),
        Some(B),
        true,
        None,
        Verdict::Abort("never".into()),
    )
    .unwrap();
    assert_eq!((now.stable.as_str(), now.state), (B, State::Done));
    assert_eq!(running(&now, B).len(), 100);
}

#[test]
fn only_a_bounded_well_formed_rollout_is_read() {
    let rollout = rolling_b();
    let text = serde_json::to_string(&rollout).unwrap();
    assert_eq!(Rollout::parse(&text), Some(rollout.clone()));
    let mut huge = rollout.clone();
    huge.reason = "x".repeat(MAX_ROLLOUT_BYTES);
    let mut bad_revision = rollout.clone();
    bad_revision.stable = "../etc".into();
    let mut many_failed = rollout.clone();
    many_failed.failed = (0..17).map(|i| format!("r-{i:016x}")).collect();
    let mut long_reason = rollout.clone();
    long_reason.reason = "y".repeat(2000);
    for bad in [huge, bad_revision, many_failed, long_reason] {
        assert_eq!(Rollout::parse(&serde_json::to_string(&bad).unwrap()), None);
    }
    // A newer tend's field is ignored (a fleet mid-upgrade runs both).
    let newer = text.replacen('{', r#"{"canary-group":"x","#, 1);
    assert_eq!(Rollout::parse(&newer), Some(rollout.clone()));
    assert_eq!(Rollout::parse("not json"), None);
}

#[test]
fn failed_revisions_are_remembered_up_to_a_bound_newest_last() {
    let mut rollout = poll(None, A, None, Verdict::Promote);
    for i in 0..20u64 {
        let candidate = format!("r-{:016x}", 0x100 + i);
        let rolling = poll(Some(&rollout), &candidate, None, Verdict::Promote);
        rollout = poll(
            Some(&rolling),
            &candidate,
            None,
            Verdict::Abort("bad".into()),
        );
    }
    assert_eq!(rollout.failed.len(), FAILED_KEPT);
    assert_eq!(
        rollout.failed.last().unwrap(),
        &format!("r-{:016x}", 0x100 + 19)
    );
    assert!(Rollout::parse(&serde_json::to_string(&rollout).unwrap()).is_some());
}
