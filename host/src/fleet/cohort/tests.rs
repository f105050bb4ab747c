use super::*;
use std::collections::BTreeSet;

/// `sizes` nodes in each of the groups named.
fn fleet(sizes: &[(&str, usize)]) -> Vec<Member> {
    sizes
        .iter()
        .flat_map(|(group, size)| {
            (0..*size).map(move |i| Member {
                uid: format!("uid-{group}-{i}"),
                group: group.to_string(),
            })
        })
        .collect()
}

fn reached<'a>(cuts: &Cuts, nodes: &'a [Member], revision: &str) -> BTreeSet<&'a str> {
    nodes
        .iter()
        .filter(|n| cuts.runs_candidate(&n.uid, &n.group, revision))
        .map(|n| n.uid.as_str())
        .collect()
}

#[test]
fn a_place_is_the_same_everywhere_and_another_revision_draws_another_line() {
    assert_eq!(
        place("uid-1", "r-0000000000000001"),
        place("uid-1", "r-0000000000000001")
    );
    assert_ne!(
        place("uid-1", "r-0000000000000001"),
        place("uid-1", "r-0000000000000002")
    );
    assert_ne!(
        place("uid-1", "r-0000000000000001"),
        place("uid-2", "r-0000000000000001")
    );
    // The same node is not every revision's canary.
    let nodes = fleet(&[("a/p", 50)]);
    let canaries: BTreeSet<String> = (0..20)
        .map(|i| {
            let revision = format!("r-{i:016x}");
            let cuts = Cuts::widen(&Cuts::default(), &nodes, &revision, Step::Nodes(1));
            let first = reached(&cuts, &nodes, &revision);
            assert_eq!(first.len(), 1, "{first:?}");
            first.into_iter().next().unwrap().to_string()
        })
        .collect();
    assert!(canaries.len() > 10, "{canaries:?}");
}

#[test]
fn steps_parse_as_nodes_or_shares_and_anything_else_says_what_is_expected() {
    assert_eq!(Step::parse("1"), Ok(Step::Nodes(1)));
    assert_eq!(Step::parse("2%"), Ok(Step::Share(0.02)));
    assert_eq!(Step::parse("100%"), Ok(Step::Share(1.0)));
    for bad in ["0", "0%", "-1", "150%", "x", "", "%", "1.5", "nan%", "inf%"] {
        let error = Step::parse(bad).unwrap_err();
        assert!(error.contains("a number of nodes"), "{bad}: {error}");
    }
    assert!(Step::Share(1.0).is_everyone());
    assert!(!Step::Nodes(1000).is_everyone());
}

#[test]
fn a_step_reaches_its_count_rounded_up_and_never_more_than_there_are() {
    assert_eq!(Step::Nodes(1).reach(0), 0);
    assert_eq!(Step::Nodes(1).reach(100), 1);
    assert_eq!(Step::Nodes(5).reach(3), 3);
    assert_eq!(Step::Share(0.02).reach(100), 2);
    assert_eq!(Step::Share(0.02).reach(10), 1);
    assert_eq!(Step::Share(0.25).reach(10), 3);
    assert_eq!(Step::Share(1.0).reach(7), 7);
}

#[test]
fn each_step_reaches_its_count_spread_over_the_groups_and_holds_the_last_ones_nodes() {
    let nodes = fleet(&[("a/gpu", 500), ("b/gpu", 300), ("c/cpu", 200)]);
    let revision = "r-00000000000000aa";
    let mut cuts = Cuts::default();
    let mut before = BTreeSet::new();
    for step in default_steps() {
        cuts = Cuts::widen(&cuts, &nodes, revision, step);
        let now = reached(&cuts, &nodes, revision);
        assert_eq!(now.len(), step.reach(nodes.len()), "{step:?}");
        assert_eq!(cuts.reached(&nodes, revision), now.len());
        assert!(now.is_superset(&before), "{step:?} dropped a node");
        if let Step::Share(share) = step {
            for (group, size) in [("a/gpu", 500.0), ("b/gpu", 300.0), ("c/cpu", 200.0)] {
                let in_group = now.iter().filter(|uid| uid.contains(group)).count() as f64;
                assert!(
                    (in_group - share * size).abs() <= 1.0,
                    "{step:?}: {in_group} of {group}'s {size}"
                );
            }
        }
        before = now;
    }
    assert_eq!(before.len(), nodes.len());
}

#[test]
fn a_cut_never_shrinks_when_nodes_leave_and_new_nodes_under_it_join() {
    let nodes = fleet(&[("a/p", 100)]);
    let revision = "r-00000000000000bb";
    let cuts = Cuts::widen(&Cuts::default(), &nodes, revision, Step::Share(0.10));
    let adopted = reached(&cuts, &nodes, revision);
    // Half the fleet goes away: the same step, widened again, keeps every
    // node that adopted the candidate.
    let fewer: Vec<Member> = nodes[50..].to_vec();
    let again = Cuts::widen(&cuts, &fewer, revision, Step::Share(0.10));
    for node in &nodes {
        if adopted.contains(node.uid.as_str()) {
            assert!(again.runs_candidate(&node.uid, &node.group, revision));
        }
    }
    // A group that had no cut runs nothing of the candidate.
    assert!(!again.runs_candidate("uid-a/p-1", "elsewhere/p", revision));
}

#[test]
fn cuts_travel_as_hex_text_and_anything_else_is_refused() {
    let mut cuts = Cuts::default();
    cuts.0.insert("a/p".into(), Cut(u64::MAX - 1));
    let text = serde_json::to_string(&cuts).unwrap();
    assert_eq!(text, r#"{"a/p":"fffffffffffffffe"}"#);
    assert_eq!(serde_json::from_str::<Cuts>(&text).unwrap(), cuts);
    for bad in [
        r#"{"a":"zz"}"#,
        r#"{"a":1}"#,
        r#"{"a":"+fffffffffffffff"}"#,
        r#"{"a":"0fffffffffffffffe"}"#,
    ] {
        assert!(serde_json::from_str::<Cuts>(bad).is_err(), "{bad}");
    }
}
