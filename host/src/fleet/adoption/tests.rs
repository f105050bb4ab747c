use super::*;
use crate::fleet::cohort::{Cuts, Step};

const A: &str = "r-000000000000000a";
const B: &str = "r-000000000000000b";
const C: &str = "r-000000000000000c";

fn me() -> Member {
    Member {
        uid: "uid-1".into(),
        group: "zone/pool".into(),
    }
}

/// A rollout of `revision` over `stable`, this node in its step or not.
fn rollout(revision: &str, stable: &str, state: State, in_step: bool) -> Rollout {
    let cuts = match in_step {
        true => Cuts::widen(&Cuts::default(), &[me()], revision, Step::Nodes(1)),
        false => Cuts::default(),
    };
    Rollout {
        revision: revision.into(),
        stable: stable.into(),
        step: 0,
        state,
        reason: String::new(),
        cuts,
        failed: match state {
            State::Failed => vec![revision.into()],
            _ => vec![],
        },
        attempt: 1,
    }
}

fn holding<'a>(adopted: &'a str, desired: Option<&'a str>) -> Holding<'a> {
    Holding {
        adopted,
        stable: Some(A),
        desired,
        reduces_risk: false,
        reverted: None,
    }
}

#[test]
fn a_change_waits_for_this_nodes_step_and_without_a_rollout_nothing_moves() {
    let node = holding(A, Some(B));
    assert_eq!(choose(&node, None, Some(&me())), None, "no leader, no API");
    assert_eq!(
        choose(&node, Some(&rollout(B, A, State::Rolling, true)), None),
        None,
        "its Node unread"
    );
    assert_eq!(
        choose(
            &node,
            Some(&rollout(B, A, State::Rolling, false)),
            Some(&me())
        ),
        None
    );
    let in_step = rollout(B, A, State::Rolling, true);
    assert_eq!(choose(&node, Some(&in_step), Some(&me())), Some(B.into()));
    assert_eq!(
        choose(&holding(B, None), Some(&in_step), Some(&me())),
        None,
        "adopted already"
    );
    let done = rollout(B, B, State::Done, false);
    assert_eq!(choose(&node, Some(&done), Some(&me())), Some(B.into()));
}

#[test]
fn a_node_runs_only_what_it_holds_whatever_the_rollout_names() {
    // The rollout's candidate is C; this node's config asks for B.
    let node = holding(A, Some(B));
    assert_eq!(
        choose(
            &node,
            Some(&rollout(C, A, State::Rolling, true)),
            Some(&me())
        ),
        None
    );
    // Nor a stable revision it never held.
    let mut stranger = holding(B, None);
    stranger.stable = None;
    assert_eq!(
        choose(
            &stranger,
            Some(&rollout(B, C, State::Failed, false)),
            Some(&me())
        ),
        None
    );
}

#[test]
fn an_abort_sends_the_candidate_back_to_the_stable_revision() {
    let node = holding(B, None);
    let failed = rollout(B, A, State::Failed, true);
    assert_eq!(choose(&node, Some(&failed), Some(&me())), Some(A.into()));
    // Paused: the candidate's nodes keep it.
    let paused = rollout(B, A, State::Paused, true);
    assert_eq!(choose(&node, Some(&paused), Some(&me())), None);
}

#[test]
fn a_change_that_only_reduces_risk_runs_at_once() {
    let mut node = holding(A, Some(B));
    node.reduces_risk = true;
    assert_eq!(choose(&node, None, None), Some(B.into()));
}

#[test]
fn a_node_reverts_a_failing_candidate_on_its_own_and_does_not_take_it_again_unasked() {
    let node = holding(B, None);
    let traps = |traps, timeouts| Counters {
        runs: 10,
        traps,
        timeouts,
        ..Counters::default()
    };
    assert!(!should_revert(&node, &traps(1, 1)));
    assert!(should_revert(&node, &traps(3, 0)));
    assert!(should_revert(&node, &traps(1, 2)), "timeouts count too");
    assert!(
        !should_revert(&holding(A, None), &traps(9, 9)),
        "the stable revision has nothing to fall back to"
    );
    let mut reverted = holding(A, Some(B));
    reverted.reverted = Some((B, 1));
    let rolling = rollout(B, A, State::Rolling, true);
    assert_eq!(choose(&reverted, Some(&rolling), Some(&me())), None);
    assert!(!acknowledged((B, 1), &rolling));
    assert!(acknowledged((B, 1), &rollout(B, A, State::Failed, false)));
    assert!(acknowledged((B, 1), &rollout(C, A, State::Rolling, false)));
    // A retry is a later attempt: this node's old revert is not its.
    let retried = Rollout {
        attempt: 2,
        ..rolling.clone()
    };
    assert!(acknowledged((B, 1), &retried));
    // It became stable meanwhile: the node keeps what it fell back to.
    assert!(!acknowledged((B, 1), &rollout(B, B, State::Done, false)));
    // Nor does a change that only reduces risk run again once given up.
    let mut fewer = holding(A, Some(B));
    fewer.reduces_risk = true;
    fewer.reverted = Some((B, 1));
    assert_eq!(choose(&fewer, None, None), None);
    fewer.reverted = None;
    assert_eq!(
        choose(&fewer, Some(&rollout(B, A, State::Failed, false)), None),
        None,
        "failed"
    );
}

#[test]
fn only_disabling_or_removing_plugins_reduces_risk() {
    let parse =
        |text: &str| Config::parse(std::path::Path::new("/etc/tend/tend.toml"), text).unwrap();
    let host = "[host]\nplugins-dir = \"p\"\nstate-dir = \"s\"\n";
    let two = parse(&format!(
        "{host}[plugins.a]\nfile = \"a.wasm\"\n[plugins.b]\nfile = \"b.wasm\"\n"
    ));
    let components = BTreeMap::from([
        ("a".to_string(), "sha256:1".to_string()),
        ("b".into(), "sha256:2".into()),
    ]);
    let one = parse(&format!(
        "{host}[plugins.a]\nfile = \"a.wasm\"\n[plugins.b]\nfile = \"b.wasm\"\nenabled = false\n"
    ));
    assert!(reduces_risk((&two, &components), (&one, &components)));
    let removed = parse(&format!("{host}[plugins.a]\nfile = \"a.wasm\"\n"));
    assert!(reduces_risk((&two, &components), (&removed, &components)));
    // The same plugins: nothing reduced.
    assert!(!reduces_risk((&two, &components), (&two, &components)));
    // One disabled, but the other's component changed.
    let mut changed = components.clone();
    changed.insert("a".into(), "sha256:9".into());
    assert!(!reduces_risk((&two, &components), (&one, &changed)));
    // One disabled, but the other's settings changed.
    let tuned = parse(&format!(
        "{host}[plugins.a]\nfile = \"a.wasm\"\ninterval = \"5s\"\n"
    ));
    assert!(!reduces_risk((&two, &components), (&tuned, &components)));
    // The host changed.
    let dry = parse(
        "[host]\nplugins-dir = \"p\"\nstate-dir = \"s\"\ndry-run = true\n[plugins.a]\nfile = \"a.wasm\"\n",
    );
    assert!(!reduces_risk((&two, &components), (&dry, &components)));
}
