//! The fleet member against the fake store, on tokio's paused clock.

use super::ledger::{ClassRule, NodeFacts};
use super::store::FakeStore;
use super::window::Windows;
use super::*;

const LIVENESS: Duration = Duration::from_secs(60);

fn settings(share: f64, rate: Option<(u32, Duration)>) -> FleetSettings {
    FleetSettings {
        namespace: "tend-system".into(),
        liveness: LIVENESS,
        renew_every: Duration::from_secs(15),
        retry_every: Duration::from_secs(10),
        publish_every: Duration::from_secs(30),
        kured: None,
        medik8s: false,
        rollout: None,
        prometheus: None,
        classes: vec![Class {
            rule: ClassRule {
                name: "runtime-restart".into(),
                operations: vec!["systemd.restart".into()],
                share,
                min: 1,
                rate,
                ready_for: Duration::from_secs(30),
                conditions: vec!["KernelDeadlock".into()],
            },
            windows: Arc::new(Windows::parse(&[], &[]).unwrap()),
            alerts: vec![],
        }],
    }
}

fn store(nodes: usize) -> Arc<FakeStore> {
    let store = FakeStore::default();
    store.state.lock().unwrap().nodes = (0..nodes)
        .map(|i| NodeFacts {
            name: format!("n{i}"),
            ready: true,
            ..NodeFacts::default()
        })
        .collect();
    Arc::new(store)
}

fn member(store: &Arc<FakeStore>, node: &str, settings: FleetSettings) -> Arc<Fleet> {
    Arc::new(Fleet::new(node.into(), settings, store.clone()))
}

fn holders(store: &FakeStore) -> Vec<String> {
    let state = store.state.lock().unwrap();
    state
        .ledgers
        .get("runtime-restart")
        .map(|(l, _)| l.holders.iter().map(|h| h.node.clone()).collect())
        .unwrap_or_default()
}

const OP: &str = "systemd.restart";

#[tokio::test(start_paused = true)]
async fn an_operation_outside_every_class_needs_no_ticket_and_asks_nothing() {
    let store = store(10);
    let fleet = member(&store, "n0", settings(0.0, None));
    fleet.admit("files.write", false).await.unwrap();
    assert_eq!(store.state.lock().unwrap().requests, 0);
}

#[tokio::test(start_paused = true)]
async fn one_ticket_at_a_time_then_the_holder_settles_and_gives_it_back() {
    let store = store(10);
    let a = member(&store, "n1", settings(0.0, None));
    let b = member(&store, "n2", settings(0.0, None));
    a.admit(OP, false).await.unwrap();
    // Held: admitted again without a new grant.
    a.admit(OP, false).await.unwrap();
    assert_eq!(holders(&store), ["n1"]);
    let refused = b.admit(OP, false).await.unwrap_err();
    assert_eq!(refused.kind(), "budget-exhausted");
    assert!(
        refused.message().contains("n1 (holds a ticket)"),
        "{refused}"
    );
    assert!(b.status().classes[0].note.starts_with("refused: "));
    // Asked again at once, the refusal is answered from memory: a plugin
    // calling in a loop costs the API server nothing until retry-every.
    let asked = store.state.lock().unwrap().requests;
    b.admit(OP, false).await.unwrap_err();
    assert_eq!(store.state.lock().unwrap().requests, asked);
    tokio::spawn(a.clone().run());
    // Ready for ready-for (30 s) after the last act: given back, not before.
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(holders(&store), ["n1"]);
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert!(holders(&store).is_empty());
    assert_eq!(a.status().classes[0].note, "released: the node settled");
    b.admit(OP, false).await.unwrap();
    assert_eq!(holders(&store), ["n2"]);
}

#[tokio::test(start_paused = true)]
async fn a_node_that_is_not_settled_keeps_its_ticket() {
    let store = store(10);
    let a = member(&store, "n1", settings(0.0, None));
    a.admit(OP, false).await.unwrap();
    store.state.lock().unwrap().nodes[1]
        .conditions
        .insert("KernelDeadlock".into());
    tokio::spawn(a.clone().run());
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(holders(&store), ["n1"]);
    store.state.lock().unwrap().nodes[1].conditions.clear();
    tokio::time::sleep(Duration::from_secs(40)).await;
    assert!(holders(&store).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_dead_holder_is_pruned_only_after_the_liveness_window() {
    let store = store(10);
    let dead = member(&store, "n1", settings(0.0, None));
    dead.admit(OP, false).await.unwrap();
    // n1's tend dies: its Lease stands still from here.
    let b = member(&store, "n2", settings(0.0, None));
    b.admit(OP, false).await.unwrap_err();
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_secs(11)).await;
        let refused = b.admit(OP, false).await.unwrap_err();
        assert!(
            refused.message().contains("n1 (holds a ticket)"),
            "{refused}"
        );
    }
    // 55 s so far; past 60 s from b's first look it is dead.
    tokio::time::sleep(Duration::from_secs(11)).await;
    b.admit(OP, false).await.unwrap();
    assert_eq!(holders(&store), ["n2"]);
}

#[tokio::test(start_paused = true)]
async fn a_live_holder_renewing_its_lease_is_never_pruned() {
    let store = store(10);
    let a = member(&store, "n1", settings(0.0, None));
    a.admit(OP, false).await.unwrap();
    store.state.lock().unwrap().nodes[1].ready = false;
    tokio::spawn(a.clone().run());
    let b = member(&store, "n2", settings(0.0, None));
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_secs(11)).await;
        b.admit(OP, false).await.unwrap_err();
    }
    assert_eq!(holders(&store), ["n1"]);
}

#[tokio::test(start_paused = true)]
async fn without_the_api_server_there_is_no_ticket_and_a_holder_stops_acting() {
    let store = store(10);
    let a = member(&store, "n1", settings(0.5, None));
    store.state.lock().unwrap().down = true;
    let refused = a.admit(OP, false).await.unwrap_err();
    assert_eq!(refused.kind(), "unavailable");
    assert!(refused.message().contains("fail closed"), "{refused}");
    store.state.lock().unwrap().down = false;
    // The refusal is remembered for retry-every: no request until then.
    a.admit(OP, false).await.unwrap_err();
    tokio::time::sleep(Duration::from_secs(10)).await;
    a.admit(OP, false).await.unwrap();
    // Cut off: still its ticket, but after half the liveness window it no
    // longer acts under it (others may prune it after the whole window).
    store.state.lock().unwrap().down = true;
    tokio::time::sleep(LIVENESS / 2).await;
    let refused = a.admit(OP, false).await.unwrap_err();
    assert!(
        refused.message().contains("proves it is alive"),
        "{refused}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_rate_counts_grants_from_when_this_host_saw_them() {
    let store = store(10);
    let rate = Some((1, Duration::from_secs(600)));
    let a = member(&store, "n1", settings(1.0, rate));
    let b = member(&store, "n2", settings(1.0, rate));
    a.admit(OP, false).await.unwrap();
    let refused = b.admit(OP, false).await.unwrap_err();
    assert!(
        refused.message().contains("rate allows 1 tickets per 10m"),
        "{refused}"
    );
    tokio::time::sleep(Duration::from_secs(599)).await;
    b.admit(OP, false).await.unwrap_err();
    tokio::time::sleep(Duration::from_secs(11)).await;
    b.admit(OP, false).await.unwrap();
    // b forgot the grant it had seen for a whole period.
    let state = store.state.lock().unwrap();
    assert_eq!(state.ledgers["runtime-restart"].0.grants.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_dry_run_writes_nothing_and_a_restart_finds_its_ticket() {
    let store = store(10);
    let a = member(&store, "n1", settings(0.0, None));
    a.admit(OP, true).await.unwrap();
    assert!(holders(&store).is_empty());
    a.admit(OP, false).await.unwrap();
    let again = member(&store, "n1", settings(0.0, None));
    tokio::spawn(again.clone().run());
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(again.status().classes[0].holding);
}

#[tokio::test(start_paused = true)]
async fn many_members_racing_never_pass_the_share() {
    let store = store(100);
    let members: Vec<_> = (0..50)
        .map(|i| member(&store, &format!("n{i}"), settings(0.05, None)))
        .collect();
    let tasks: Vec<_> = members
        .iter()
        .map(|m| {
            let m = m.clone();
            tokio::spawn(async move { m.admit(OP, false).await.is_ok() })
        })
        .collect();
    let mut granted = 0;
    for task in tasks {
        granted += task.await.unwrap() as usize;
    }
    assert_eq!(granted, 5);
    assert_eq!(holders(&store).len(), 5);
}

/// The fake's published report of `node`, parsed.
fn published(store: &FakeStore, node: &str) -> Option<revision::Report> {
    let state = store.state.lock().unwrap();
    state
        .reports
        .get(node)
        .map(|text| revision::Report::parse(text).expect("a report tend reads back"))
}

#[tokio::test(start_paused = true)]
async fn renewals_publish_the_revision_at_once_and_new_counters_at_most_every_publish_every() {
    let store = store(3);
    let running = Arc::new(revision::Running::default());
    let fleet = Arc::new(
        Fleet::new("n0".into(), settings(0.0, None), store.clone()).publishing(running.clone()),
    );
    tokio::spawn(fleet.clone().run());
    // Renewals every 15 s; nothing to publish while plugins load.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(store.state.lock().unwrap().leases.contains_key("n0"));
    assert_eq!(published(&store, "n0"), None);
    running.set(Some("r-000000000000000a".into()));
    tokio::time::sleep(Duration::from_secs(15)).await;
    let first = published(&store, "n0").expect("published with the next renewal");
    assert_eq!(first.revision, "r-000000000000000a");
    assert_eq!(first.counters.runs, 0);
    // Counted now, but the last report is only 15 s old: not yet.
    running.count(
        running.revision().as_deref(),
        revision::Ended::Trap,
        0,
        0,
        0,
    );
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(published(&store, "n0").unwrap().counters.runs, 0);
    tokio::time::sleep(Duration::from_secs(15)).await;
    let second = published(&store, "n0").unwrap();
    assert_eq!((second.counters.runs, second.counters.traps), (1, 1));
    // A new revision goes out with the very next renewal.
    running.set(Some("r-000000000000000b".into()));
    tokio::time::sleep(Duration::from_secs(15)).await;
    let third = published(&store, "n0").unwrap();
    assert_eq!(third.revision, "r-000000000000000b");
    assert_eq!(third.process, first.process);
    // Removed or overwritten by someone: put back with the next renewal.
    store.state.lock().unwrap().reports.remove("n0");
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(published(&store, "n0"), Some(third));
    // No revision (a plugin in its first load again): none shown.
    running.set(None);
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(published(&store, "n0"), None);
}

#[tokio::test(start_paused = true)]
async fn a_one_shot_runs_renewals_leave_the_daemons_report() {
    let store = store(3);
    store
        .state
        .lock()
        .unwrap()
        .reports
        .insert("n0".into(), "the daemon's".into());
    let one_shot = member(&store, "n0", settings(0.0, None));
    one_shot.admit(OP, false).await.unwrap();
    let state = store.state.lock().unwrap();
    assert!(
        state.leases.contains_key("n0"),
        "renewed to prove it is alive"
    );
    assert_eq!(state.reports["n0"], "the daemon's");
}

#[tokio::test(start_paused = true)]
async fn a_ticket_taken_between_renewals_is_given_back_without_waiting_for_the_next() {
    let store = store(10);
    let mut quick = settings(0.0, None);
    quick.classes[0].rule.ready_for = Duration::from_secs(1);
    let a = member(&store, "n1", quick);
    tokio::spawn(a.clone().run());
    // Renewed at once; the next renewal is 15 s away.
    tokio::time::sleep(Duration::from_secs(1)).await;
    a.admit(OP, false).await.unwrap();
    assert_eq!(holders(&store), ["n1"]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        holders(&store).is_empty(),
        "given back once settled for ready-for (1 s), not at the next renewal"
    );
}

#[tokio::test(start_paused = true)]
async fn a_node_that_gave_its_ticket_back_lets_the_waiting_nodes_go_first() {
    let store = store(10);
    let a = member(&store, "n1", settings(0.0, None));
    let b = member(&store, "n2", settings(0.0, None));
    a.admit(OP, false).await.unwrap();
    b.admit(OP, false).await.unwrap_err();
    tokio::spawn(a.clone().run());
    wait_for_release(&store).await;
    // b still waits out its retry-every; a, free to ask at once, would take
    // the ticket ahead of it every time.
    let turn = a.admit(OP, false).await.unwrap_err();
    assert_eq!(turn.kind(), "budget-exhausted");
    assert!(
        turn.message().contains("lets the nodes waiting go first"),
        "{turn}"
    );
    assert!(holders(&store).is_empty());
    tokio::time::sleep(Duration::from_secs(10)).await;
    b.admit(OP, false).await.unwrap();
    assert_eq!(holders(&store), ["n2"]);
}

async fn wait_for_release(store: &FakeStore) {
    for _ in 0..600 {
        if holders(store).is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the ticket was never given back");
}
