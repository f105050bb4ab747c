use super::*;

const CANDIDATE: &str = "r-00000000000000c1";
const STABLE: &str = "r-00000000000000a1";
const MINUTE: Duration = Duration::from_secs(60);

fn sample(revision: &str, runs: u64, errors: u64) -> Sample {
    Sample {
        process: "p1".into(),
        revision: revision.into(),
        counters: Counters {
            runs,
            errors,
            ..Counters::default()
        },
        ready: true,
    }
}

/// Nine stable nodes that ran `stable` (runs, errors) in the window, and
/// n0 on the candidate from `start` to `now`.
fn nodes(start: Sample, now: Sample, stable: (u64, u64)) -> [BTreeMap<String, Sample>; 2] {
    let mut before = BTreeMap::from([("n0".to_string(), start)]);
    let mut after = BTreeMap::from([("n0".to_string(), now)]);
    for i in 1..10 {
        before.insert(format!("n{i}"), sample(STABLE, 100, 1));
        after.insert(
            format!("n{i}"),
            sample(STABLE, 100 + stable.0, 1 + stable.1),
        );
    }
    [before, after]
}

fn judged(nodes: &[BTreeMap<String, Sample>; 2], baked: Duration, before: Option<f64>) -> Verdict {
    judge(
        &Rules::default(),
        &Window {
            candidate: CANDIDATE,
            stable: STABLE,
            start: &nodes[0],
            counted_from: &nodes[0],
            now: &nodes[1],
            baked,
            baseline_before: before,
        },
    )
}

#[test]
fn a_candidate_that_keeps_failing_is_aborted_before_its_bake_ends() {
    let n = nodes(sample(CANDIDATE, 0, 0), sample(CANDIDATE, 4, 4), (4, 0));
    let Verdict::Abort(why) = judged(&n, MINUTE, Some(0.0)) else {
        panic!("{:?}", judged(&n, MINUTE, Some(0.0)));
    };
    assert!(why.contains("4 of 4 runs failed on 1 nodes"), "{why}");
    assert!(why.contains("0 of 36 runs failed on 9 nodes"), "{why}");
}

#[test]
fn failures_under_the_minimum_count_are_not_a_rate_yet() {
    let n = nodes(sample(CANDIDATE, 0, 0), sample(CANDIDATE, 2, 2), (4, 0));
    assert!(matches!(judged(&n, MINUTE, Some(0.0)), Verdict::Hold(_)));
}

#[test]
fn failures_shared_with_the_stable_nodes_pause_and_revert_nothing() {
    let n = nodes(sample(CANDIDATE, 0, 0), sample(CANDIDATE, 10, 5), (10, 5));
    let Verdict::Pause(why) = judged(&n, 20 * MINUTE, Some(0.01)) else {
        panic!("{:?}", judged(&n, 20 * MINUTE, Some(0.01)));
    };
    assert!(why.contains("the stable nodes degrade as well"), "{why}");
    // A baseline that always failed this much is no degradation.
    assert_eq!(judged(&n, 20 * MINUTE, Some(0.5)), Verdict::Promote);
}

#[test]
fn a_restart_or_a_node_turning_not_ready_under_the_candidate_aborts() {
    let mut restarted = sample(CANDIDATE, 1, 0);
    restarted.process = "p2".into();
    let n = nodes(sample(CANDIDATE, 0, 0), restarted, (4, 0));
    assert!(
        matches!(judged(&n, MINUTE, None), Verdict::Abort(why) if why.contains("tend restarted on n0"))
    );

    let mut down = sample(CANDIDATE, 1, 0);
    down.ready = false;
    let n = nodes(sample(CANDIDATE, 0, 0), down.clone(), (4, 0));
    assert!(
        matches!(judged(&n, MINUTE, None), Verdict::Abort(why) if why.contains("n0 turned NotReady"))
    );

    // NotReady before the candidate came: not its doing.
    let mut was_down = sample(STABLE, 0, 0);
    was_down.ready = false;
    let n = nodes(was_down, down, (4, 0));
    assert!(matches!(judged(&n, MINUTE, None), Verdict::Hold(_)));

    // A stable node's restart is no verdict on the candidate.
    let mut n = nodes(sample(CANDIDATE, 0, 0), sample(CANDIDATE, 1, 0), (4, 0));
    n[1].get_mut("n5").unwrap().process = "p9".into();
    assert!(matches!(judged(&n, MINUTE, None), Verdict::Hold(_)));
}

#[test]
fn a_step_holds_while_it_bakes_and_without_runs_then_is_promoted() {
    let n = nodes(sample(STABLE, 0, 0), sample(STABLE, 0, 0), (4, 0));
    assert_eq!(
        judged(&n, 20 * MINUTE, None),
        Verdict::Hold("no node reports running the candidate yet".into())
    );
    let n = nodes(sample(CANDIDATE, 0, 0), sample(CANDIDATE, 12, 0), (12, 0));
    assert_eq!(
        judged(&n, 3 * MINUTE, None),
        Verdict::Hold("baking: 3m of 10m".into())
    );
    assert_eq!(judged(&n, 10 * MINUTE, None), Verdict::Promote);
}

#[test]
fn too_few_runs_hold_then_pause_after_the_patience() {
    let n = nodes(sample(CANDIDATE, 0, 0), sample(CANDIDATE, 3, 0), (3, 0));
    assert!(
        matches!(judged(&n, 10 * MINUTE, None), Verdict::Hold(why) if why.contains("3 candidate runs"))
    );
    let Verdict::Pause(why) = judged(&n, 30 * MINUTE, None) else {
        panic!()
    };
    assert!(why.contains("tend rollout resume"), "{why}");
}

#[test]
fn only_what_happened_in_the_window_counts() {
    // n0 failed before the window; none since. It adopted nothing new.
    let n = nodes(
        sample(CANDIDATE, 50, 40),
        sample(CANDIDATE, 62, 40),
        (12, 0),
    );
    assert_eq!(judged(&n, 10 * MINUTE, None), Verdict::Promote);
    // n0 adopted the candidate within the window: all its counts are new.
    let n = nodes(sample(STABLE, 50, 0), sample(CANDIDATE, 5, 5), (12, 0));
    assert!(matches!(judged(&n, MINUTE, None), Verdict::Abort(_)));
    let (candidate, stable) = sides(&Window {
        candidate: CANDIDATE,
        stable: STABLE,
        start: &n[0],
        counted_from: &n[0],
        now: &n[1],
        baked: MINUTE,
        baseline_before: None,
    });
    assert_eq!(
        (candidate.nodes, candidate.runs, candidate.failures),
        (1, 5, 5)
    );
    assert_eq!((stable.nodes, stable.runs, stable.failures), (9, 108, 0));
}
