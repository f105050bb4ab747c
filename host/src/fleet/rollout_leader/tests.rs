use super::*;
use crate::fleet::cohort::default_steps;
use crate::fleet::revision::Counters;
use crate::fleet::rollout::Command;
use crate::fleet::store::FakeStore;
use std::time::Duration;

const A: &str = "r-000000000000000a";
const B: &str = "r-000000000000000b";
const POLL: Duration = Duration::from_secs(60);

/// A fleet of `n` nodes in 3 zones, each running what the rollout says for
/// it, with its tend counting runs (and failures, by revision) between polls.
struct Fleet {
    store: FakeStore,
    leader: RolloutLeader,
    start: Instant,
    minute: u32,
    nodes: Vec<Node>,
    /// Failed runs in ten, by revision, for every node running it.
    failing: BTreeMap<&'static str, u64>,
    /// Nodes that run no tend (a control-plane node, one the DaemonSet skips).
    silent: Vec<NodeFacts>,
}

struct Node {
    facts: NodeFacts,
    runs: String,
    counters: Counters,
    /// What its config asks for.
    desired: String,
    process: String,
    /// A candidate it reverted on its own.
    reverted: Option<String>,
}

impl Fleet {
    fn new(n: usize) -> Fleet {
        let nodes = (0..n)
            .map(|i| Node {
                facts: NodeFacts {
                    name: format!("node-{i}"),
                    uid: format!("uid-{i}"),
                    zone: format!("zone-{}", i % 3),
                    ready: true,
                    ..NodeFacts::default()
                },
                runs: A.into(),
                counters: Counters::default(),
                desired: A.into(),
                process: "00000000000000aa".into(),
                reverted: None,
            })
            .collect();
        Fleet {
            store: FakeStore::default(),
            leader: RolloutLeader::new(Rules::default(), default_steps()),
            start: Instant::now(),
            minute: 0,
            nodes,
            failing: BTreeMap::new(),
            silent: vec![],
        }
    }

    /// The config of every node asks for `revision` from now on.
    fn apply(&mut self, revision: &str) {
        for node in &mut self.nodes {
            node.desired = revision.into();
        }
    }

    fn rollout(&self) -> Option<Rollout> {
        let state = self.store.state.lock().unwrap();
        state
            .rollout
            .as_ref()
            .and_then(|(text, _, _)| Rollout::parse(text))
    }

    fn running(&self, revision: &str) -> usize {
        self.nodes.iter().filter(|n| n.runs == revision).count()
    }

    /// A minute passes: each node follows the rollout (as the node side
    /// does), runs ten reconciles and publishes; then the leader polls.
    async fn minute(&mut self) -> Polled {
        self.tick().await.unwrap()
    }

    async fn tick(&mut self) -> Result<Polled, CapError> {
        self.publish();
        self.minute += 1;
        let now = self.start + POLL * self.minute;
        self.leader.poll(&self.store, now).await
    }

    /// Each node follows the rollout and publishes its report.
    fn publish(&mut self) {
        let rollout = self.rollout();
        let mut state = self.store.state.lock().unwrap();
        state.nodes = self.nodes.iter().map(|n| n.facts.clone()).collect();
        state.nodes.extend(self.silent.iter().cloned());
        for node in &mut self.nodes {
            if let Some(rollout) = &rollout {
                let group = format!("{}/{}", node.facts.zone, node.facts.pool);
                let runs = rollout.runs(&node.facts.uid, &group);
                if runs != node.runs && (runs == node.desired || runs == rollout.stable) {
                    node.runs = runs.to_string();
                    node.counters = Counters::default();
                }
            }
            let failed = self.failing.get(node.runs.as_str()).copied().unwrap_or(0);
            node.counters.runs += 10;
            node.counters.errors += failed;
            let report = Report {
                revision: node.runs.clone(),
                process: node.process.clone(),
                counters: node.counters,
                desired: (node.desired != node.runs).then(|| node.desired.clone()),
                reduces_risk: false,
                reverted: node.reverted.clone(),
            };
            state.leases.insert(node.facts.name.clone(), 1);
            state.reports.insert(
                node.facts.name.clone(),
                serde_json::to_string(&report).unwrap(),
            );
        }
    }

    /// B starts rolling out on a quiet fleet, and its first step's node holds
    /// back (its config still asks for A) for two minutes: its index, for
    /// the caller to let it switch.
    async fn late_switch(&mut self) -> usize {
        for _ in 0..12 {
            self.minute().await;
        }
        self.apply(B);
        let rolling = self.minute().await.rollout.unwrap();
        assert_eq!((rolling.state, rolling.step), (State::Rolling, 0));
        let slow = self
            .nodes
            .iter()
            .position(|n| {
                let group = format!("{}/{}", n.facts.zone, n.facts.pool);
                rolling.runs(&n.facts.uid, &group) == B
            })
            .unwrap();
        self.nodes[slow].desired = A.into();
        for _ in 0..2 {
            self.minute().await;
        }
        assert_eq!(self.running(B), 0);
        slow
    }

    /// Minutes pass until the rollout is in `state`, at most `limit` of them.
    async fn until(&mut self, state: State, limit: u32) -> Rollout {
        for _ in 0..limit {
            if let Some(rollout) = self.minute().await.rollout
                && rollout.state == state
            {
                return rollout;
            }
        }
        panic!("not {state:?} within {limit} minutes: {:?}", self.rollout());
    }

    /// An order left on the Lease and not consumed yet.
    fn pending_order(&self) -> Option<String> {
        let state = self.store.state.lock().unwrap();
        state
            .rollout
            .as_ref()
            .and_then(|(_, order, _)| order.clone())
    }

    /// An operator resumes `revision`: the step bakes again on what happens
    /// from now, so it neither pauses again on the old failures nor on the
    /// old window's age.
    async fn resume_and_roll(&mut self, revision: &str) {
        self.command(Command::Resume, revision);
        for _ in 0..5 {
            assert_eq!(self.minute().await.rollout.unwrap().state, State::Rolling);
        }
    }

    fn command(&self, command: Command, revision: &str) {
        let order = serde_json::to_string(&Order {
            command,
            revision: revision.into(),
        })
        .unwrap();
        let mut state = self.store.state.lock().unwrap();
        state.rollout.as_mut().unwrap().1 = Some(order);
    }
}

#[tokio::test]
async fn nothing_is_published_before_a_node_reports_and_the_first_revision_is_adopted() {
    let mut fleet = Fleet::new(0);
    let polled = fleet
        .leader
        .poll(&fleet.store, Instant::now())
        .await
        .unwrap();
    assert_eq!(
        polled,
        Polled {
            rollout: None,
            wrote: false
        }
    );
    assert!(fleet.rollout().is_none());

    let mut fleet = Fleet::new(10);
    let first = fleet.minute().await;
    assert!(first.wrote);
    let rollout = first.rollout.unwrap();
    assert_eq!((rollout.state, rollout.stable.as_str()), (State::Done, A));
    // Nothing changed: nothing is written.
    assert!(!fleet.minute().await.wrote);
}

#[tokio::test]
async fn a_good_revision_widens_step_by_step_to_every_node_and_never_shrinks() {
    let mut fleet = Fleet::new(100);
    fleet.minute().await;
    fleet.apply(B);
    let started = fleet.minute().await.rollout.unwrap();
    assert_eq!((started.state, started.step), (State::Rolling, 0));
    fleet.minute().await;
    assert_eq!(fleet.running(B), 1, "one node first");
    let mut adopted = 0;
    for _ in 0..120 {
        let rollout = fleet.minute().await.rollout.unwrap();
        assert!(fleet.running(B) >= adopted, "the adopted set never shrinks");
        adopted = fleet.running(B);
        if rollout.state == State::Done {
            break;
        }
    }
    let done = fleet.rollout().unwrap();
    assert_eq!((done.state, done.stable.as_str()), (State::Done, B));
    fleet.minute().await;
    assert_eq!(fleet.running(B), 100);
}

#[tokio::test]
async fn a_failing_candidate_is_aborted_within_its_first_bake_and_stays_failed_until_retried() {
    let mut fleet = Fleet::new(30);
    fleet.failing.insert(B, 5);
    fleet.minute().await;
    fleet.apply(B);
    let failed = fleet.until(State::Failed, 10).await;
    assert_eq!(failed.failed, vec![B.to_string()]);
    assert!(
        failed.reason.contains("fails more than the stable nodes"),
        "{}",
        failed.reason
    );
    fleet.minute().await;
    assert_eq!(fleet.running(B), 0, "every candidate reverted");
    for _ in 0..5 {
        assert_eq!(fleet.minute().await.rollout.unwrap().state, State::Failed);
    }
    // A retry for another revision is not this one's.
    fleet.command(Command::Retry, A);
    assert_eq!(fleet.minute().await.rollout.unwrap().state, State::Failed);
    assert_eq!(
        fleet
            .store
            .state
            .lock()
            .unwrap()
            .rollout
            .as_ref()
            .unwrap()
            .1,
        None,
        "consumed"
    );
    fleet.failing.clear();
    fleet.command(Command::Retry, B);
    let retried = fleet.minute().await.rollout.unwrap();
    assert_eq!((retried.state, retried.step), (State::Rolling, 0));
}

#[tokio::test]
async fn failures_the_stable_nodes_share_pause_the_rollout_and_revert_nothing() {
    let mut fleet = Fleet::new(30);
    // The quiet fleet is seen for over a bake first: the baseline.
    for _ in 0..12 {
        fleet.minute().await;
    }
    fleet.failing.insert(A, 3);
    fleet.failing.insert(B, 3);
    fleet.apply(B);
    let paused = fleet.until(State::Paused, 15).await;
    assert!(
        paused.reason.contains("stable nodes degrade as well"),
        "{}",
        paused.reason
    );
    assert!(paused.failed.is_empty());
    fleet.minute().await;
    assert_eq!(
        fleet.running(B),
        1,
        "the candidate keeps running where it ran"
    );
    fleet.failing.clear();
    fleet.resume_and_roll(B).await;
}

/// A failure both sides share from just after the candidate's node switched,
/// a poll after the step began (stop 48's e2e race): counted from the same
/// moment on both sides, it pauses. Counted on the stable nodes from the
/// step's start, diluted by their runs before it, it once made the candidate
/// look worse, and aborted it.
#[tokio::test]
async fn a_failure_shared_from_just_after_a_late_switch_pauses_and_blames_no_one() {
    let mut fleet = Fleet::new(30);
    let slow = fleet.late_switch().await;
    fleet.nodes[slow].desired = B.into();
    fleet.failing.insert(A, 10);
    fleet.failing.insert(B, 10);
    let paused = fleet.until(State::Paused, 15).await;
    assert!(
        paused.reason.contains("stable nodes degrade as well") && paused.failed.is_empty(),
        "{paused:?}"
    );
}

/// A node first seen on the candidate already broken (its tend restarted,
/// or NotReady) aborts, though the failure counts start again at its
/// switch: what it is judged against is the step's start.
#[tokio::test]
async fn a_node_first_seen_on_the_candidate_restarted_or_not_ready_aborts() {
    let restart: fn(&mut Node) = |node| node.process = "00000000000000bb".into();
    let not_ready: fn(&mut Node) = |node| node.facts.ready = false;
    for (what, breaks) in [("tend restarted", restart), ("turned NotReady", not_ready)] {
        let mut fleet = Fleet::new(30);
        let slow = fleet.late_switch().await;
        fleet.nodes[slow].desired = B.into();
        breaks(&mut fleet.nodes[slow]);
        let failed = fleet.until(State::Failed, 2).await;
        assert!(failed.reason.contains(what), "{what}: {failed:?}");
    }
}

#[tokio::test]
async fn an_operator_pauses_and_resumes_and_each_order_is_consumed_once() {
    let mut fleet = Fleet::new(10);
    fleet.minute().await;
    fleet.apply(B);
    fleet.minute().await;
    fleet.command(Command::Pause, B);
    let paused = fleet.minute().await;
    assert!(paused.wrote);
    assert_eq!(paused.rollout.unwrap().state, State::Paused);
    assert_eq!(fleet.pending_order(), None);
    for _ in 0..20 {
        assert_eq!(fleet.minute().await.rollout.unwrap().state, State::Paused);
    }
    fleet.resume_and_roll(B).await;
}

#[tokio::test]
async fn a_lease_that_is_not_a_rollout_stops_the_leader_and_is_left_as_it_is() {
    let mut fleet = Fleet::new(10);
    let planted = ("{\"revision\": 1}".to_string(), None, 7);
    fleet.store.state.lock().unwrap().rollout = Some(planted.clone());
    let refused = fleet.tick().await.unwrap_err();
    assert!(
        refused.message().contains("holds no rollout Tend wrote"),
        "{refused}"
    );
    assert_eq!(fleet.store.state.lock().unwrap().rollout, Some(planted));
}

#[tokio::test]
async fn only_a_majority_of_the_nodes_makes_a_revision_desired() {
    let mut fleet = Fleet::new(10);
    fleet.minute().await;
    for node in fleet.nodes.iter_mut().take(5) {
        node.desired = B.into();
    }
    let half = fleet.minute().await.rollout.unwrap();
    assert_eq!((half.state, half.revision.as_str()), (State::Done, A));
    fleet.nodes[5].desired = B.into();
    assert_eq!(fleet.minute().await.rollout.unwrap().revision, B);
}

#[tokio::test]
async fn a_write_another_leader_got_in_first_is_a_conflict_and_the_next_poll_decides_again() {
    let mut fleet = Fleet::new(10);
    fleet.minute().await;
    fleet.apply(B);
    fleet.store.state.lock().unwrap().interloper = true;
    let lost = fleet.tick().await.unwrap_err();
    assert!(matches!(lost, CapError::Conflict(_)), "{lost:?}");
    assert_eq!(
        fleet.rollout().unwrap().state,
        State::Done,
        "nothing written"
    );
    assert_eq!(fleet.minute().await.rollout.unwrap().state, State::Rolling);
    assert_eq!(fleet.rollout().unwrap().state, State::Rolling);
}

#[tokio::test]
async fn a_node_that_reverted_the_candidate_on_its_own_aborts_the_rollout() {
    let mut fleet = Fleet::new(30);
    fleet.minute().await;
    fleet.apply(B);
    fleet.minute().await;
    assert_eq!(fleet.minute().await.rollout.unwrap().state, State::Rolling);
    let node = fleet.nodes.iter_mut().find(|n| n.runs == B).unwrap();
    node.runs = A.into();
    node.reverted = Some(B.into());
    let failed = fleet.minute().await.rollout.unwrap();
    assert_eq!(failed.state, State::Failed);
    assert!(
        failed.reason.contains("reverted it on its own"),
        "{}",
        failed.reason
    );
}

#[tokio::test]
async fn a_deleted_lease_starts_over_from_what_most_nodes_run_not_from_the_candidate() {
    let mut fleet = Fleet::new(30);
    fleet.minute().await;
    fleet.apply(B);
    fleet.minute().await;
    assert_eq!(fleet.minute().await.rollout.unwrap().state, State::Rolling);
    fleet.store.state.lock().unwrap().rollout = None;
    let again = fleet.minute().await.rollout.unwrap();
    assert_eq!(
        (again.state, again.stable.as_str()),
        (State::Done, A),
        "{again:?}"
    );
    let restarted = fleet.minute().await.rollout.unwrap();
    assert_eq!(
        (restarted.state, restarted.step, restarted.revision.as_str()),
        (State::Rolling, 0, B)
    );
    fleet.minute().await;
    assert_eq!(fleet.running(B), 1, "B from its first step again");
}

#[tokio::test]
async fn steps_count_the_nodes_running_tend_and_a_lease_without_a_node_has_no_vote() {
    let mut fleet = Fleet::new(10);
    // Ninety Nodes that run no tend: a step of one node is one of the ten.
    fleet.silent = (0..90)
        .map(|i| NodeFacts {
            name: format!("silent-{i}"),
            uid: format!("silent-uid-{i}"),
            ready: true,
            ..NodeFacts::default()
        })
        .collect();
    fleet.minute().await;
    fleet.apply(B);
    fleet.minute().await;
    fleet.minute().await;
    assert_eq!(fleet.running(B), 1);
    // Twenty Leases with no Node behind them ask for another revision.
    {
        let mut state = fleet.store.state.lock().unwrap();
        for i in 0..20 {
            let ghost = format!("ghost-{i}");
            let report = Report {
                revision: A.into(),
                process: "00".into(),
                counters: Counters::default(),
                desired: Some("r-00000000000000ff".into()),
                reduces_risk: true,
                reverted: None,
            };
            state.leases.insert(ghost.clone(), 1);
            state
                .reports
                .insert(ghost, serde_json::to_string(&report).unwrap());
        }
    }
    let rollout = fleet.minute().await.rollout.unwrap();
    assert_eq!(
        (rollout.revision.as_str(), rollout.state),
        (B, State::Rolling)
    );
}
