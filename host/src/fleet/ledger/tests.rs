use super::*;

fn rule(share: f64, min: u32) -> ClassRule {
    ClassRule {
        name: "runtime-restart".into(),
        operations: vec!["systemd.restart".into()],
        share,
        min,
        rate: None,
        ready_for: Duration::from_secs(60),
        conditions: vec!["KernelDeadlock".into()],
    }
}

fn node(name: &str, zone: &str) -> NodeFacts {
    NodeFacts {
        name: name.into(),
        zone: zone.into(),
        ready: true,
        ..NodeFacts::default()
    }
}

/// `count` Ready nodes n0.. spread over `zones` zones.
fn fleet(count: usize, zones: usize) -> View {
    View {
        nodes: (0..count)
            .map(|i| node(&format!("n{i}"), &format!("z{}", i % zones)))
            .collect(),
        ..View::default()
    }
}

fn holding(nodes: &[&str]) -> Ledger {
    Ledger {
        holders: nodes
            .iter()
            .map(|n| Holder {
                node: n.to_string(),
                ticket: format!("t-{n}"),
            })
            .collect(),
        grants: nodes.iter().map(|n| format!("t-{n}")).collect(),
        last: None,
    }
}

fn refusal(decision: Decision) -> String {
    match decision {
        Decision::Refuse(why) => why,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn the_share_is_rounded_up_and_never_under_the_floor() {
    assert_eq!(allowed(&rule(0.05, 1), 100), 5);
    assert_eq!(allowed(&rule(0.05, 1), 101), 6);
    assert_eq!(allowed(&rule(0.05, 1), 3), 1);
    assert_eq!(allowed(&rule(0.0, 0), 10), 0);
    assert_eq!(allowed(&rule(0.1, 3), 10), 3);
}

#[test]
fn a_grant_adds_the_holder_and_counts_it_for_the_rate() {
    let view = fleet(100, 1);
    let Decision::Grant(ledger) = decide(&rule(0.05, 1), &holding(&["n1"]), &view, "n2", "t2")
    else {
        panic!("expected a grant")
    };
    assert_eq!(ledger.holders.len(), 2);
    assert_eq!(ledger.holders[1].node, "n2");
    assert_eq!(ledger.grants, ["t-n1", "t2"]);
    assert_eq!(
        decide(&rule(0.05, 1), &ledger, &view, "n2", "t3"),
        Decision::Held
    );
}

#[test]
fn the_share_counts_holders_not_ready_cordoned_and_other_remediators() {
    let mut view = fleet(100, 1);
    view.nodes[10].ready = false;
    view.nodes[11].cordoned = true;
    view.others.insert("n12".into(), "kured".into());
    let ledger = holding(&["n1", "n2"]);
    let why = refusal(decide(&rule(0.05, 1), &ledger, &view, "n3", "t"));
    assert_eq!(
        why,
        "[budget] fleet budget runtime-restart: 5 of 100 nodes may be disrupted at once and 5 are: \
         n1 (holds a ticket), n10 (NotReady), n11 (cordoned), n12 (held by kured), n2 (holds a ticket); \
         a ticket frees when a holder settles"
    );
    // A remediator's claim on a Node that does not exist blocks nothing.
    view.others.insert("made-up".into(), "kured".into());
    let why = refusal(decide(&rule(0.05, 1), &ledger, &view, "n3", "t"));
    assert!(!why.contains("made-up"), "{why}");
    // One of them recovers: room for one.
    view.nodes[11].cordoned = false;
    assert!(matches!(
        decide(&rule(0.05, 1), &ledger, &view, "n3", "t"),
        Decision::Grant(_)
    ));
}

#[test]
fn a_node_that_is_down_itself_is_not_blocked_by_its_own_state() {
    let mut view = fleet(10, 1);
    view.nodes[3].ready = false;
    assert!(matches!(
        decide(&rule(0.0, 1), &Ledger::default(), &view, "n3", "t"),
        Decision::Grant(_)
    ));
    // ... but it blocks everyone else.
    refusal(decide(&rule(0.0, 1), &Ledger::default(), &view, "n4", "t"));
}

#[test]
fn each_zone_has_its_share_too() {
    // 3 zones of 10: the fleet allows 3 (10 %), each zone 1.
    let view = fleet(30, 3);
    let ledger = holding(&["n0"]); // zone z0
    let why = refusal(decide(&rule(0.1, 1), &ledger, &view, "n3", "t"));
    assert!(
        why.starts_with(
            "[budget] fleet budget runtime-restart: 1 of the 10 nodes in zone z0 may be disrupted at once and 1 are: n0 (holds a ticket)"
        ),
        "{why}"
    );
    // Another zone still has room.
    assert!(matches!(
        decide(&rule(0.1, 1), &ledger, &view, "n1", "t"),
        Decision::Grant(_)
    ));
}

#[test]
fn dead_holders_are_pruned_and_holders_without_a_node_still_count() {
    let view = View {
        dead: ["n1".to_string()].into(),
        ..fleet(10, 1)
    };
    let Decision::Grant(ledger) = decide(&rule(0.0, 1), &holding(&["n1"]), &view, "n2", "t") else {
        panic!("a dead holder's ticket frees")
    };
    assert_eq!(ledger.holders.len(), 1);
    // The pruned holder is the last: the next ticket waits for it to settle.
    assert_eq!(ledger.last.as_deref(), Some("n1"));
    // A holder whose Node was deleted mid-disruption still holds.
    let ledger = holding(&["gone"]);
    let why = refusal(decide(&rule(0.0, 1), &ledger, &fleet(10, 1), "n2", "t"));
    assert!(why.contains("gone (holds a ticket)"), "{why}");
}

#[test]
fn the_rate_refuses_once_max_grants_were_seen_within_its_period() {
    let rule = ClassRule {
        rate: Some((2, Duration::from_secs(600))),
        ..rule(1.0, 1)
    };
    let view = View {
        recent_grants: 2,
        ..fleet(10, 1)
    };
    let why = refusal(decide(&rule, &Ledger::default(), &view, "n1", "t"));
    assert_eq!(
        why,
        "[budget] fleet budget runtime-restart: its rate allows 2 tickets per 10m and 2 were granted within it"
    );
    let view = View {
        recent_grants: 1,
        ..fleet(10, 1)
    };
    assert!(matches!(
        decide(&rule, &Ledger::default(), &view, "n1", "t"),
        Decision::Grant(_)
    ));
}

#[test]
fn the_next_ticket_waits_for_the_last_holder_to_settle() {
    let mut view = fleet(10, 1);
    let ledger = Ledger {
        last: Some("n5".into()),
        ..Ledger::default()
    };
    view.nodes[5].conditions.insert("KernelDeadlock".into());
    let why = refusal(decide(&rule(1.0, 1), &ledger, &view, "n1", "t"));
    assert_eq!(
        why,
        "[health] fleet budget runtime-restart: the last node disrupted, n5, has KernelDeadlock; the next ticket waits until it settles"
    );
    // A condition the class does not watch does not hold it back.
    view.nodes[5].conditions = ["OtherThing".to_string()].into();
    assert!(matches!(
        decide(&rule(1.0, 1), &ledger, &view, "n1", "t"),
        Decision::Grant(_)
    ));
    // The last holder itself may go again.
    view.nodes[5].ready = false;
    assert!(matches!(
        decide(&rule(1.0, 1), &ledger, &view, "n5", "t"),
        Decision::Grant(_)
    ));
}

#[test]
fn an_unknown_node_and_a_full_ledger_are_refused() {
    let why = refusal(decide(
        &rule(1.0, 1),
        &Ledger::default(),
        &fleet(3, 1),
        "stranger",
        "t",
    ));
    assert!(why.contains("not among the cluster's Nodes"), "{why}");
    let full = Ledger {
        grants: (0..MAX_GRANTS).map(|i| i.to_string()).collect(),
        ..Ledger::default()
    };
    let why = refusal(decide(&rule(1.0, 1), &full, &fleet(3, 1), "n1", "t"));
    assert!(why.contains("remembers 512 recent grants"), "{why}");
}

#[test]
fn release_drops_the_holder_and_marks_it_last() {
    let ledger = holding(&["n1", "n2"]);
    let released = release(&ledger, "n1").unwrap();
    assert_eq!(released.holders.len(), 1);
    assert_eq!(released.last.as_deref(), Some("n1"));
    assert_eq!(released.grants, ledger.grants);
    assert_eq!(release(&released, "n1"), None);
}

#[test]
fn a_refusal_names_at_most_five_nodes() {
    let ledger = holding(&["n1", "n2", "n3", "n4", "n5", "n6", "n7"]);
    let why = refusal(decide(&rule(0.0, 7), &ledger, &fleet(10, 1), "n8", "t"));
    assert!(why.contains("n5 (holds a ticket), 2 more"), "{why}");
}

#[test]
fn the_ledger_round_trips_and_refuses_unknown_fields() {
    let ledger = holding(&["n1"]);
    let text = serde_json::to_string(&ledger).unwrap();
    assert_eq!(serde_json::from_str::<Ledger>(&text).unwrap(), ledger);
    assert!(serde_json::from_str::<Ledger>(r#"{"holders":[],"extra":1}"#).is_err());
}
