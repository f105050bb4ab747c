//! Every rule of the decision, on instances and Nodes built in memory.

use super::*;

const CLUSTER: &str = "kubernetes.io/cluster/a";
const T0: u64 = 1_700_000_000_000;
const MIN: u64 = 60_000;

fn policy() -> Policy {
    Policy::new(OwnerTag::new(CLUSTER, "owned"))
}

/// The policy without the churn guard, for tests of the other breakers.
fn without_churn() -> Policy {
    Policy {
        churn_min_failures: 100,
        ..policy()
    }
}

/// Instance number `n`: "i-000000000000000n0" named "node-n", 10.0.0.n,
/// created at `created`.
fn instance(n: u32, state: InstanceState, created: u64) -> Instance {
    Instance {
        created_at_ms: created as i64,
        private_addresses: vec![format!("10.0.0.{n}")],
        ..Instance::new(&format!("i-{n:017x}"), &format!("node-{n}"), state)
    }
    .with_tag(CLUSTER, "owned")
}

fn running(n: u32) -> Instance {
    instance(n, InstanceState::Running, T0)
}

fn node(name: &str, provider_id: &str, ip: &str) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        instance_id: crate::nodes::instance_id_of(provider_id).map(str::to_string),
        internal_ips: vec![ip.into()]
            .into_iter()
            .filter(|i: &String| !i.is_empty())
            .collect(),
        ready: true,
        replace_requested: false,
        cordoned: false,
    }
}

/// A Node registered for instance `n` by its provider ID only.
fn node_of(n: u32) -> NodeInfo {
    node(
        &format!("other-{n}"),
        &format!("aws:///us-east-1a/i-{n:017x}"),
        "",
    )
}

fn pass(now: u64) -> Pass {
    Pass {
        now_ms: now,
        first: false,
    }
}

fn run(
    p: &Policy,
    memory: &Memory,
    instances: &[Instance],
    nodes: &[NodeInfo],
    now: u64,
) -> Decision {
    decide(p, memory, instances, Nodes::Listed(nodes), pass(now))
}

/// Two passes a confirm-after apart, starting at `now`: the second's decision.
fn confirmed(
    p: &Policy,
    memory: &Memory,
    instances: &[Instance],
    nodes: &[NodeInfo],
    now: u64,
) -> Decision {
    let first = run(p, memory, instances, nodes, now);
    run(p, &first.memory, instances, nodes, now + p.confirm_after_ms)
}

fn actions(d: &Decision) -> Vec<Action> {
    d.verdicts.iter().map(|v| v.action.clone()).collect()
}

fn healthy_since(ms: u64) -> Memory {
    Memory {
        api_healthy_since_ms: Some(ms),
        ..Memory::default()
    }
}

/// Memory of a pass at T0 (their creation) that saw `instances` without a
/// Node: their clocks run from T0.
fn watched(instances: &[Instance]) -> Memory {
    Memory {
        absent_since: instances.iter().map(|i| (i.id.clone(), T0)).collect(),
        ..healthy_since(0)
    }
}

fn kinds(d: &Decision) -> Vec<BreakerKind> {
    d.breakers.iter().map(|b| b.kind).collect()
}

const DELETE_TIMEOUT: Action = Action::Delete {
    why: Why::RegistrationTimeout,
};

#[test]
fn a_young_unregistered_instance_is_kept() {
    let d = run(
        &policy(),
        &watched(&[running(1)]),
        &[running(1)],
        &[node_of(9)],
        T0 + 19 * MIN,
    );
    assert_eq!(
        actions(&d),
        [Action::Young {
            why: Why::RegistrationTimeout,
            left_ms: MIN
        }]
    );
    assert_eq!(d.counts.unregistered, 1);
    assert_eq!(d.next_due_in_ms, Some(MIN));
}

#[test]
fn matched_by_every_provider_id_form_by_name_or_by_ip_is_kept() {
    let uuid = "8f7c2a1e-3b4d-4e5f-9a0b-1c2d3e4f5a6b";
    let openstack = Instance::new(uuid, "os-1", InstanceState::Running).with_tag(CLUSTER, "owned");
    let aws = running(1);
    let id = &aws.id;
    for (instance, node, by) in [
        (
            &aws,
            node("x", &format!("aws:///us-east-1a/{id}"), ""),
            MatchedBy::ProviderId,
        ),
        (
            &aws,
            node("x", &format!("aws:///{id}"), ""),
            MatchedBy::ProviderId,
        ),
        (
            &openstack,
            node("x", &format!("openstack:///{uuid}"), ""),
            MatchedBy::ProviderId,
        ),
        (
            &openstack,
            node("x", &format!("openstack:///RegionOne/{uuid}"), ""),
            MatchedBy::ProviderId,
        ),
        (&aws, node("node-1", "", ""), MatchedBy::Name),
        (
            &aws,
            node("ip-10-0-0-1", "kind://x", "10.0.0.1"),
            MatchedBy::InternalIp,
        ),
    ] {
        let d = run(
            &policy(),
            &watched(std::slice::from_ref(instance)),
            std::slice::from_ref(instance),
            &[node],
            T0 + 60 * MIN,
        );
        assert_eq!(actions(&d), [Action::Registered(by)]);
        assert!(d.memory.ever_matched.contains(&instance.id));
    }
}

#[test]
fn a_long_unregistered_instance_is_deleted_once_confirmed() {
    let now = T0 + 21 * MIN;
    let nodes = [node_of(9)];
    let first = run(
        &policy(),
        &watched(&[running(1)]),
        &[running(1)],
        &nodes,
        now,
    );
    assert_eq!(
        actions(&first),
        [Action::Candidate {
            why: Why::RegistrationTimeout,
            skip: Skip::Unconfirmed { left_ms: MIN }
        }]
    );
    assert_eq!(first.counts.long_unregistered, 1);
    // Too soon: still unconfirmed.
    let soon = run(
        &policy(),
        &first.memory,
        &[running(1)],
        &nodes,
        now + MIN / 2,
    );
    assert!(matches!(
        actions(&soon)[0],
        Action::Candidate {
            skip: Skip::Unconfirmed { .. },
            ..
        }
    ));
    let later = run(&policy(), &soon.memory, &[running(1)], &nodes, now + MIN);
    assert_eq!(actions(&later), [DELETE_TIMEOUT]);
}

/// Hole 10c: a former Node missing from a listing (then back) is no
/// candidate: its grace counts from the first pass that missed it.
#[test]
fn a_node_missing_for_one_pass_never_makes_a_candidate() {
    let lost = |left_ms| Action::Young {
        why: Why::NodeLost,
        left_ms,
    };
    let nodes = [node_of(1)];
    let matched = run(
        &policy(),
        &healthy_since(0),
        &[running(1)],
        &nodes,
        T0 + 30 * MIN,
    );
    let missing = run(
        &policy(),
        &matched.memory,
        &[running(1)],
        &[node_of(9)],
        T0 + 31 * MIN,
    );
    assert_eq!(actions(&missing), [lost(20 * MIN)]);
    let back = run(
        &policy(),
        &missing.memory,
        &[running(1)],
        &nodes,
        T0 + 32 * MIN,
    );
    assert_eq!(actions(&back), [Action::Registered(MatchedBy::ProviderId)]);
    assert!(back.memory.absent_since.is_empty() && back.memory.candidates.is_empty());
    // Missing again later: a grace of its own, not the old absence's.
    let again = run(
        &policy(),
        &back.memory,
        &[running(1)],
        &[node_of(9)],
        T0 + 50 * MIN,
    );
    assert_eq!(actions(&again), [lost(20 * MIN)]);
}

/// Hole 10c: a former Node whose Node stays gone is a candidate after the
/// lost-node grace, and confirmed like any.
#[test]
fn a_lost_node_is_deleted_after_its_grace() {
    let p = Policy {
        lost_node_grace_ms: Some(5 * MIN),
        ..policy()
    };
    let matched = run(
        &p,
        &healthy_since(0),
        &[running(1)],
        &[node_of(1)],
        T0 + 30 * MIN,
    );
    let nodes = [node_of(9)];
    let lost = run(&p, &matched.memory, &[running(1)], &nodes, T0 + 31 * MIN);
    assert_eq!(
        actions(&lost),
        [Action::Young {
            why: Why::NodeLost,
            left_ms: 5 * MIN
        }]
    );
    let d = confirmed(&p, &lost.memory, &[running(1)], &nodes, T0 + 36 * MIN);
    assert_eq!(actions(&d), [Action::Delete { why: Why::NodeLost }]);
    assert_eq!(d.counts.long_unregistered, 1);
    assert!(
        d.memory.launches[""][0].registered,
        "a launch that registered is no failed one for the churn guard"
    );
}

#[test]
fn the_first_pass_after_start_or_leader_change_never_deletes() {
    let now = T0 + 30 * MIN;
    let nodes = [node_of(9)];
    let errored = [instance(1, InstanceState::Error, T0)];
    let seen = run(&policy(), &healthy_since(0), &errored, &nodes, T0);
    let confirmed = confirmed(&policy(), &seen.memory, &errored, &nodes, now);
    let delete = Action::Delete { why: Why::Errored };
    assert_eq!(actions(&confirmed), std::slice::from_ref(&delete));
    // A stale candidate from before: the first pass forgets it.
    let first = decide(
        &policy(),
        &confirmed.memory,
        &errored,
        Nodes::Listed(&nodes),
        Pass {
            now_ms: now + 10 * MIN,
            first: true,
        },
    );
    assert_eq!(
        actions(&first),
        [Action::Candidate {
            why: Why::Errored,
            skip: Skip::FirstPass
        }]
    );
    assert_eq!(first.memory.candidates[&errored[0].id], now + 10 * MIN);
    let second = run(&policy(), &first.memory, &errored, &nodes, now + 11 * MIN);
    assert_eq!(actions(&second), [delete]);
}

#[test]
fn confirm_after_is_configurable() {
    let p = Policy {
        confirm_after_ms: 5 * MIN,
        ..policy()
    };
    let d = confirmed(
        &p,
        &watched(&[running(1)]),
        &[running(1)],
        &[node_of(9)],
        T0 + 21 * MIN,
    );
    assert_eq!(actions(&d), [DELETE_TIMEOUT]);
}

/// Hole 4: an instance first seen after the first pass, its creation an
/// hour old by the cloud's clock (behind ours), counts from when a pass
/// first saw it: it is young for its whole registration timeout.
#[test]
fn a_cloud_clock_an_hour_behind_never_shortens_the_timeout() {
    let behind = instance(1, InstanceState::Running, T0 - 60 * MIN);
    let nodes = [node_of(9)];
    let running = std::slice::from_ref(&behind);
    let seen = run(&policy(), &healthy_since(0), running, &nodes, T0);
    let young = |left_ms| Action::Young {
        why: Why::RegistrationTimeout,
        left_ms,
    };
    assert_eq!(actions(&seen), [young(20 * MIN)]);
    assert_eq!(seen.memory.absent_since[&behind.id], T0);
    let soon = run(&policy(), &seen.memory, running, &nodes, T0 + 3_000);
    assert_eq!(actions(&soon), [young(20 * MIN - 3_000)]);
    let due = run(&policy(), &soon.memory, running, &nodes, T0 + 20 * MIN);
    assert!(matches!(
        actions(&due)[0],
        Action::Candidate {
            skip: Skip::Unconfirmed { .. },
            ..
        }
    ));
    let confirmed = run(&policy(), &due.memory, running, &nodes, T0 + 21 * MIN);
    assert_eq!(actions(&confirmed), [DELETE_TIMEOUT]);
}

/// Hole 4: the cloud's clock ahead of ours (a creation in our future): the
/// later of the creation and the first sighting counts.
#[test]
fn a_cloud_clock_ahead_counts_from_the_creation() {
    let ahead = [instance(1, InstanceState::Running, T0 + 60 * MIN)];
    let d = run(&policy(), &healthy_since(0), &ahead, &[node_of(9)], T0);
    assert_eq!(
        actions(&d),
        [Action::Young {
            why: Why::RegistrationTimeout,
            left_ms: 80 * MIN
        }]
    );
}

/// Hole 4: a first pass after a start or a leader change trusts no clock
/// from before it (another replica may have seen a Node meanwhile): every
/// clock starts there, and the pass deletes nothing.
#[test]
fn a_first_pass_starts_every_clock_anew() {
    let nodes = [node_of(9)];
    let before = confirmed(
        &policy(),
        &watched(&[running(1)]),
        &[running(1)],
        &nodes,
        T0 + 30 * MIN,
    );
    assert_eq!(actions(&before), [DELETE_TIMEOUT]);
    let leading = Pass {
        now_ms: T0 + 90 * MIN,
        first: true,
    };
    let first = decide(
        &policy(),
        &before.memory,
        &[running(1)],
        Nodes::Listed(&nodes),
        leading,
    );
    assert_eq!(
        actions(&first),
        [Action::Young {
            why: Why::RegistrationTimeout,
            left_ms: 20 * MIN
        }]
    );
    assert_eq!(first.memory.absent_since[&running(1).id], T0 + 90 * MIN);
    assert!(first.memory.candidates.is_empty());
}

/// Hole 4: the clocks are pruned (an instance no longer listed, or with a
/// Node now) and bounded: beyond MAX_ABSENT an instance's clock is not kept,
/// so it waits, and the decision says how many wait so.
#[test]
fn absence_clocks_are_pruned_and_bounded() {
    let nodes = [node_of(1)];
    let seen = run(
        &policy(),
        &watched(&[running(2)]),
        &[running(1), running(2), running(3)],
        &nodes,
        T0,
    );
    assert_eq!(seen.memory.absent_since.len(), 2, "{:?}", seen.memory);
    let later = run(&policy(), &seen.memory, &[running(3)], &nodes, T0 + MIN);
    let ids: Vec<&String> = later.memory.absent_since.keys().collect();
    assert_eq!(ids, [&running(3).id]);

    let many: Vec<Instance> = (1..=MAX_ABSENT as u32 + 2).map(running).collect();
    let first = run(&policy(), &healthy_since(0), &many, &nodes, T0);
    assert_eq!(first.memory.absent_since.len(), MAX_ABSENT);
    assert_eq!(first.untracked, 1, "one has a Node, one does not fit");
    let untracked = &many[MAX_ABSENT + 1];
    assert!(!first.memory.absent_since.contains_key(&untracked.id));
    let late = run(&policy(), &first.memory, &many, &nodes, T0 + 30 * MIN);
    let verdict = late.verdicts.iter().find(|v| v.index == MAX_ABSENT + 1);
    assert_eq!(
        verdict.map(|v| v.action.clone()),
        Some(Action::Young {
            why: Why::RegistrationTimeout,
            left_ms: 20 * MIN
        }),
        "a clock not kept starts again each pass"
    );
    assert_eq!(late.counts.long_unregistered, MAX_ABSENT);
}

#[test]
fn outage_time_never_counts() {
    let nodes = [node_of(9)];
    // The Node listing fails from T0 + 5m to T0 + 30m.
    let down = decide(
        &policy(),
        &watched(&[running(1)]),
        &[running(1)],
        Nodes::Failed("unavailable"),
        pass(T0 + 5 * MIN),
    );
    assert_eq!(kinds(&down), [BreakerKind::NodeListing]);
    assert!(down.verdicts.is_empty());
    assert_eq!(down.memory.api_down_since_ms, Some(T0 + 5 * MIN));
    let still = decide(
        &policy(),
        &down.memory,
        &[running(1)],
        Nodes::Failed("unavailable"),
        pass(T0 + 20 * MIN),
    );
    assert_eq!(still.memory.api_down_since_ms, Some(T0 + 5 * MIN));
    let back = run(
        &policy(),
        &still.memory,
        &[running(1)],
        &nodes,
        T0 + 30 * MIN,
    );
    assert_eq!(back.memory.api_healthy_since_ms, Some(T0 + 30 * MIN));
    assert_eq!(back.memory.api_down_since_ms, None);
    // Created at T0, but its 20 minutes count from T0 + 30m.
    assert_eq!(
        actions(&back),
        [Action::Young {
            why: Why::RegistrationTimeout,
            left_ms: 20 * MIN
        }]
    );
    let steady = run(
        &policy(),
        &back.memory,
        &[running(1)],
        &nodes,
        T0 + 40 * MIN,
    );
    assert_eq!(steady.memory.api_healthy_since_ms, Some(T0 + 30 * MIN));
}

#[test]
fn a_pool_has_its_own_registration_timeout() {
    let p = Policy {
        pool_tag: Some("pool".into()),
        pool_timeouts_ms: [("gpu".to_string(), 45 * MIN)].into(),
        ..policy()
    };
    let gpu = running(1).with_tag("pool", "gpu");
    let cpu = running(2).with_tag("pool", "cpu");
    let instances = [gpu, cpu];
    let d = run(
        &p,
        &watched(&instances),
        &instances,
        &[node_of(9)],
        T0 + 30 * MIN,
    );
    assert_eq!(d.verdicts[0].pool, "gpu");
    assert_eq!(
        d.verdicts[0].action,
        Action::Young {
            why: Why::RegistrationTimeout,
            left_ms: 15 * MIN
        }
    );
    assert!(matches!(d.verdicts[1].action, Action::Candidate { .. }));
}

#[test]
fn errored_never_registered_is_deleted_after_the_grace() {
    let errored = instance(1, InstanceState::Error, T0);
    let nodes = [node_of(9)];
    let seen = run(
        &policy(),
        &watched(std::slice::from_ref(&errored)),
        std::slice::from_ref(&errored),
        &nodes,
        T0 + MIN,
    );
    assert_eq!(
        actions(&seen),
        [Action::Young {
            why: Why::Errored,
            left_ms: 5 * MIN
        }]
    );
    assert_eq!(seen.counts.error, 1);
    let due = confirmed(&policy(), &seen.memory, &[errored], &nodes, T0 + 6 * MIN);
    assert_eq!(actions(&due), [Action::Delete { why: Why::Errored }]);
}

#[test]
fn errored_once_registered_is_reported_unless_delete_errored_is_all() {
    let nodes = [node_of(9)];
    let registered = run(
        &policy(),
        &watched(&[running(1)]),
        &[running(1)],
        &[node_of(1)],
        T0,
    );
    let errored = [instance(1, InstanceState::Error, T0)];
    // In error for a while already.
    let mut memory = registered.memory.clone();
    (memory.errored_since).insert(errored[0].id.clone(), T0);
    let d = confirmed(&policy(), &memory, &errored, &nodes, T0 + 10 * MIN);
    assert_eq!(actions(&d), [Action::ErroredOnceRegistered]);
    assert!(
        d.memory.ever_matched.contains(&errored[0].id),
        "remembered while listed"
    );
    let all = Policy {
        delete_errored_all: true,
        ..policy()
    };
    let d = confirmed(&all, &memory, &errored, &nodes, T0 + 10 * MIN);
    assert_eq!(actions(&d), [Action::Delete { why: Why::Errored }]);
}

#[test]
fn instances_deleting_stopped_rebooting_terminated_or_unknown_are_skipped() {
    use InstanceState::*;
    for state in [Deleting, Terminated, Rebooting, Stopped, Unknown] {
        let d = confirmed(
            &policy(),
            &watched(&[instance(1, state, T0)]),
            &[instance(1, state, T0)],
            &[node_of(9)],
            T0 + 60 * MIN,
        );
        assert_eq!(actions(&d), [Action::Skipped(state)]);
    }
}

#[test]
fn only_instances_of_the_cluster_are_judged_never_by_name() {
    // Pool "ab"'s instance, named like pool "a"'s.
    let foreign = Instance::new("i-0000000000000000f", "a-node-1", InstanceState::Running)
        .with_tag("kubernetes.io/cluster/ab", "owned");
    let instances = [foreign, running(1)];
    let d = confirmed(
        &policy(),
        &watched(&instances),
        &instances,
        &[node_of(9)],
        T0 + 60 * MIN,
    );
    assert_eq!(d.verdicts.len(), 1);
    assert_eq!(d.verdicts[0].index, 1);
}

#[test]
fn a_protected_candidate_is_never_deleted() {
    let protected = running(1).with_tag("tend.dev/protect", "");
    let d = confirmed(
        &policy(),
        &watched(std::slice::from_ref(&protected)),
        &[protected],
        &[node_of(9)],
        T0 + 60 * MIN,
    );
    assert_eq!(
        actions(&d),
        [Action::Candidate {
            why: Why::RegistrationTimeout,
            skip: Skip::Protected
        }]
    );
}

#[test]
fn an_empty_node_listing_opens_a_breaker() {
    let d = confirmed(
        &policy(),
        &watched(&[running(1)]),
        &[running(1)],
        &[],
        T0 + 60 * MIN,
    );
    assert_eq!(kinds(&d), [BreakerKind::NoNodes]);
    assert_eq!(
        actions(&d),
        [Action::Candidate {
            why: Why::RegistrationTimeout,
            skip: Skip::Breaker(BreakerKind::NoNodes)
        }]
    );
}

/// `registered` instances with Nodes and `stuck` long-unregistered ones.
fn cluster(registered: u32, stuck: u32) -> (Vec<Instance>, Vec<NodeInfo>) {
    let instances = (1..=registered + stuck).map(running).collect();
    let nodes = (1..=registered).map(node_of).collect();
    (instances, nodes)
}

#[test]
fn too_many_candidates_latch_the_fraction_breaker_until_reset() {
    let (instances, nodes) = cluster(4, 5);
    let p = without_churn();
    let d = confirmed(&p, &watched(&instances), &instances, &nodes, T0 + 60 * MIN);
    assert_eq!(kinds(&d), [BreakerKind::MaxFraction]);
    assert!(
        d.verdicts
            .iter()
            .all(|v| !matches!(v.action, Action::Delete { .. }))
    );
    // Latched: the candidates gone, still open.
    let (fewer, _) = cluster(4, 1);
    let still = confirmed(&p, &d.memory, &fewer, &nodes, T0 + 70 * MIN);
    assert_eq!(kinds(&still), [BreakerKind::MaxFraction]);
    let reset = Policy {
        breaker_reset: "2024-05-01".into(),
        ..without_churn()
    };
    let cleared = confirmed(&reset, &still.memory, &fewer, &nodes, T0 + 80 * MIN);
    assert!(cleared.breakers.is_empty());
    assert_eq!(actions(&cleared)[4], DELETE_TIMEOUT);
}

#[test]
fn at_or_below_the_floor_the_fraction_breaker_does_not_trip() {
    // 3 of 4 is over half, but 3 is min-breaker-candidates.
    let (instances, nodes) = cluster(1, 3);
    let d = confirmed(
        &without_churn(),
        &watched(&instances),
        &instances,
        &nodes,
        T0 + 60 * MIN,
    );
    assert!(d.breakers.is_empty(), "{:?}", d.breakers);
}

#[test]
fn unready_nodes_stop_deletions_but_unregistered_instances_never_count() {
    let (instances, mut nodes) = cluster(4, 1);
    nodes[0].ready = false;
    nodes[1].ready = false;
    // 2 of 4 Nodes NotReady is not over half; the unregistered one is no Node.
    let d = confirmed(
        &policy(),
        &watched(&instances),
        &instances,
        &nodes,
        T0 + 60 * MIN,
    );
    assert!(d.breakers.is_empty());
    assert_eq!(actions(&d)[4], DELETE_TIMEOUT);
    nodes[2].ready = false;
    let d = confirmed(
        &policy(),
        &watched(&instances),
        &instances,
        &nodes,
        T0 + 60 * MIN,
    );
    assert_eq!(kinds(&d), [BreakerKind::NotReady]);
    assert!(d.breakers[0].detail.starts_with("3 of 4 Node(s)"));
}

#[test]
fn the_churn_guard_latches_in_a_pool_where_most_launches_failed() {
    let p = Policy {
        pool_tag: Some("pool".into()),
        max_fraction: 1.0,
        ..policy()
    };
    let pooled =
        |n, pool| instance(n, InstanceState::Running, T0 + u64::from(n)).with_tag("pool", pool);
    // Pool "a": 2 registered, 3 never did; pool "b": one never did.
    let instances = [
        pooled(1, "a"),
        pooled(2, "a"),
        pooled(3, "a"),
        pooled(4, "a"),
        pooled(5, "a"),
        pooled(6, "b"),
    ];
    let nodes = [node_of(1), node_of(2)];
    let d = confirmed(&p, &watched(&instances), &instances, &nodes, T0 + 60 * MIN);
    assert_eq!(kinds(&d), [BreakerKind::Churn]);
    assert!(
        d.breakers[0]
            .detail
            .contains("3 of the 5 most recent launches in pool a")
    );
    for v in &d.verdicts[2..5] {
        assert!(matches!(
            v.action,
            Action::Candidate {
                skip: Skip::Breaker(BreakerKind::Churn),
                ..
            }
        ));
    }
    assert_eq!(d.verdicts[5].action, DELETE_TIMEOUT, "pool b is not pool a");
    assert!(d.memory.latched.contains_key("churn:a"));
}

#[test]
fn one_deletion_in_flight_per_pool_and_a_cap_per_pass() {
    let p = Policy {
        pool_tag: Some("pool".into()),
        max_deletions_per_pass: 2,
        max_fraction: 1.0,
        churn_min_failures: 100,
        ..policy()
    };
    let pooled =
        |n, pool| instance(n, InstanceState::Running, T0 + u64::from(n)).with_tag("pool", pool);
    let (mut instances, nodes) = (vec![], (10..20).map(node_of).collect::<Vec<_>>());
    instances.extend((10..20).map(|n| pooled(n, "x")));
    instances.extend([
        pooled(1, "a"),
        pooled(2, "a"),
        pooled(3, "b"),
        pooled(4, "c"),
    ]);
    let d = confirmed(&p, &watched(&instances), &instances, &nodes, T0 + 60 * MIN);
    let of = |n: usize| d.verdicts[10 + n].action.clone();
    assert_eq!(of(0), DELETE_TIMEOUT);
    let victim = instances[10].id.clone();
    assert_eq!(
        of(1),
        Action::Candidate {
            why: Why::RegistrationTimeout,
            skip: Skip::InFlight(victim.clone())
        }
    );
    assert_eq!(of(2), DELETE_TIMEOUT);
    assert_eq!(
        of(3),
        Action::Candidate {
            why: Why::RegistrationTimeout,
            skip: Skip::Cap
        }
    );
    // Pool a's victim is still listed (deleting): a's next one waits.
    let mut memory = d.memory.clone();
    memory.in_flight.insert(
        "a".into(),
        InFlight {
            id: victim.clone(),
            since_ms: T0,
        },
    );
    instances[10].state = InstanceState::Deleting;
    let next = run(&p, &memory, &instances, &nodes, T0 + 62 * MIN);
    assert_eq!(
        next.verdicts[10].action,
        Action::Skipped(InstanceState::Deleting)
    );
    assert_eq!(
        next.verdicts[11].action,
        Action::Candidate {
            why: Why::RegistrationTimeout,
            skip: Skip::InFlight(victim)
        }
    );
    // Gone from the listing: the pool is free again.
    instances.remove(10);
    let free = run(&p, &next.memory, &instances, &nodes, T0 + 63 * MIN);
    assert!(free.memory.in_flight.is_empty());
    assert_eq!(free.verdicts[10].action, DELETE_TIMEOUT);
}

#[test]
fn a_report_lists_every_confirmed_candidate_past_the_pace_but_not_past_a_breaker() {
    let p = Policy {
        pool_tag: Some("pool".into()),
        max_fraction: 1.0,
        churn_min_failures: 100,
        report_only: true,
        ..policy()
    };
    let pooled =
        |n, pool| instance(n, InstanceState::Running, T0 + u64::from(n)).with_tag("pool", pool);
    let nodes: Vec<NodeInfo> = (10..20).map(node_of).collect();
    let mut instances: Vec<Instance> = (10..20).map(|n| pooled(n, "x")).collect();
    instances.extend([pooled(1, "a"), pooled(2, "a"), pooled(3, "b")]);
    // A deletion of an earlier enforcing pass still in flight holds nothing.
    let mut memory = watched(&instances);
    memory.in_flight.insert(
        "a".into(),
        InFlight {
            id: "i-gone".into(),
            since_ms: T0,
        },
    );
    let d = confirmed(&p, &memory, &instances, &nodes, T0 + 60 * MIN);
    assert_eq!(actions(&d)[10..], [DELETE_TIMEOUT; 3], "{:?}", d.verdicts);
    // Breakers hold a report as they would hold the deletions.
    let unready: Vec<NodeInfo> = nodes
        .iter()
        .map(|n| NodeInfo {
            ready: false,
            ..n.clone()
        })
        .collect();
    let held = confirmed(&p, &memory, &instances, &unready, T0 + 60 * MIN);
    assert!(
        (actions(&held)[10..].iter()).all(|a| matches!(
            a,
            Action::Candidate {
                skip: Skip::Breaker(_),
                ..
            }
        )),
        "{:?}",
        held.verdicts
    );
}

#[test]
fn ten_thousand_instances_and_nodes_are_each_judged() {
    // Its time is measured by `cargo bench -p node-reaper` (docs/benchmarks.md).
    let (instances, nodes) = cluster(10_000, 0);
    let mut all = instances;
    all.extend((10_001..10_010).map(running));
    let d = run(&policy(), &watched(&all), &all, &nodes, T0 + 60 * MIN);
    assert_eq!(d.counts.registered, 10_000);
    assert_eq!(d.counts.long_unregistered, 9);
}

/// Hole 10d: an instance the listing names twice counts once for
/// max-fraction (twice, 2 of 3 would trip and latch it), and the listing
/// that contradicts itself deletes nothing that pass; listed once again,
/// the candidate goes.
#[test]
fn an_instance_listed_twice_counts_once_and_holds_that_pass() {
    let p = Policy {
        min_breaker_candidates: 1,
        ..without_churn()
    };
    let listing = [running(1), running(2), running(2)];
    let nodes = [node_of(1)];
    let d = confirmed(&p, &watched(&listing[..2]), &listing, &nodes, T0 + 60 * MIN);
    assert_eq!((d.instances, d.verdicts.len()), (2, 2));
    assert_eq!(kinds(&d), [BreakerKind::DuplicateListing]);
    assert!(
        (d.breakers[0].detail).contains(&format!(
            "names 1 instance(s) more than once ({})",
            running(2).id
        )),
        "{}",
        d.breakers[0].detail
    );
    assert_eq!(
        d.verdicts[1].action,
        Action::Candidate {
            why: Why::RegistrationTimeout,
            skip: Skip::Breaker(BreakerKind::DuplicateListing)
        }
    );
    assert!(d.memory.latched.is_empty(), "{:?}", d.memory.latched);
    let once = run(&p, &d.memory, &listing[..2], &nodes, T0 + 62 * MIN);
    assert!(once.breakers.is_empty(), "{:?}", once.breakers);
    assert_eq!(actions(&once)[1], DELETE_TIMEOUT);
}

#[test]
fn the_fraction_breaker_latches_over_both_its_fraction_and_its_minimum_and_stays() {
    let p = policy(); // max-fraction 0.5, min-breaker-candidates 3
    let mut next = Memory::default();
    // 3 of 4 is over the fraction but not over the minimum.
    latch_fraction(&p, &mut next, 3, 4, 10);
    assert!(next.latched.is_empty());
    // 4 of 10 is over the minimum but not over the fraction.
    latch_fraction(&p, &mut next, 4, 10, 10);
    assert!(next.latched.is_empty());
    latch_fraction(&p, &mut next, 4, 6, 10);
    assert_eq!(next.latched[MAX_FRACTION].since_ms, 10);
    // Latched: a later pass does not move its time.
    latch_fraction(&p, &mut next, 5, 6, 20);
    assert_eq!(next.latched[MAX_FRACTION].since_ms, 10);
}

#[test]
fn a_pool_latches_churn_when_most_of_its_recent_launches_never_registered() {
    let p = policy();
    let launch = |id: &str, registered| Launch {
        id: id.into(),
        created_at_ms: 0,
        registered,
    };
    let mut next = Memory::default();
    let failing: Vec<Launch> = (0..p.churn_min_failures)
        .map(|n| launch(&format!("i-{n}"), false))
        .collect();
    next.launches.insert("a".into(), failing);
    let mut mixed: Vec<Launch> = (0..p.churn_min_failures)
        .map(|n| launch(&format!("j-{n}"), false))
        .collect();
    mixed.extend((0..p.churn_min_failures).map(|n| launch(&format!("k-{n}"), true)));
    next.launches.insert("b".into(), mixed);
    latch_churn(&p, &mut next, 7);
    assert!(next.latched.contains_key(&churn_key("a")));
    assert!(
        !next.latched.contains_key(&churn_key("b")),
        "half is not most"
    );
}

/// A Node asking to be replaced: its instance by its provider ID (and its
/// name or address agreeing), when cordoned, confirmed, within the
/// breakers; never one matched otherwise, nor one two Nodes name.
#[test]
fn a_replace_request_names_its_instance_by_provider_id_and_waits_for_the_cordon() {
    let p = Policy {
        replace_requests: true,
        max_deletions_per_pass: 5,
        ..without_churn()
    };
    let instances: Vec<Instance> = (1..=6).map(running).collect();
    // Named by its provider ID, its address agreeing.
    let own = |n: u32| {
        node(
            &format!("other-{n}"),
            &format!("aws:///us-east-1a/i-{n:017x}"),
            &format!("10.0.0.{n}"),
        )
    };
    let asking = |node: NodeInfo, cordoned| NodeInfo {
        replace_requested: true,
        cordoned,
        ..node
    };
    let nodes = [
        asking(own(1), true),
        asking(own(2), false),
        // Matched by its name and address only: not the instance it names.
        asking(node("node-3", "", "10.0.0.3"), true),
        node_of(4),
        // A provider ID alone (no name or address of the instance's).
        asking(node_of(5), true),
        // Two Nodes naming instance 6: the one asking may be lying.
        asking(own(6), true),
        node("node-6", &format!("aws:///us-east-1a/i-{:017x}", 6), ""),
    ];
    let first = run(&p, &Memory::default(), &instances, &nodes, T0);
    assert!(
        matches!(
            actions(&first)[0],
            Action::Candidate {
                why: Why::ReplaceRequested,
                skip: Skip::Unconfirmed { .. }
            }
        ),
        "{:?}",
        first.verdicts
    );
    let d = confirmed(&p, &Memory::default(), &instances, &nodes, T0);
    assert_eq!(
        actions(&d),
        [
            Action::Delete {
                why: Why::ReplaceRequested
            },
            Action::Candidate {
                why: Why::ReplaceRequested,
                skip: Skip::NotCordoned
            },
            Action::Registered(MatchedBy::Name),
            Action::Registered(MatchedBy::ProviderId),
            Action::Registered(MatchedBy::ProviderId),
            Action::Registered(MatchedBy::ProviderId),
        ]
    );
    assert_eq!(d.counts.registered, 6, "asking Nodes are Nodes still");
    let off = Policy {
        replace_requests: false,
        ..p
    };
    let d = confirmed(&off, &Memory::default(), &instances, &nodes, T0);
    assert!(
        actions(&d)
            .iter()
            .all(|a| matches!(a, Action::Registered(_))),
        "{:?}",
        d.verdicts
    );
}

#[test]
fn in_str_order_is_strs_order() {
    let words = [
        "",
        "i",
        "i-0000000000000000",
        "i-00000000000000000",
        "i-0000000000000000a",
        "i-000000000000000a0",
        "i-1",
        "i-0000000",
        "i-00000000",
        "i-000000000",
        "i-0000001",
        "\u{7f}",
        "é",
        "\u{10ffff}",
        "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
    ];
    for a in words {
        for b in words {
            assert_eq!(in_str_order(a, b), a.cmp(b), "{a:?} against {b:?}");
        }
    }
}

/// The next memory (matched IDs, each pool's newest launches) is the same
/// however the cloud orders its listing.
#[test]
fn the_memory_is_the_same_whatever_the_listing_order() {
    let p = without_churn();
    // 40 registered, created a second apart in pairs (ties broken by ID),
    // and 10 never registered.
    let created = |n: u32| T0 + u64::from(n / 2) * 1_000;
    let all: Vec<Instance> = (1..=50)
        .map(|n| instance(n, InstanceState::Running, created(n)))
        .collect();
    let nodes: Vec<NodeInfo> = (1..=40).map(node_of).collect();
    let now = T0 + 60 * MIN;
    let sorted = run(&p, &watched(&all), &all, &nodes, now).memory;
    let mut reversed = all.clone();
    reversed.reverse();
    let mut scrambled = all.clone();
    scrambled.sort_by_key(|i| i.id.bytes().rev().collect::<Vec<_>>());
    for listing in [reversed, scrambled] {
        assert_eq!(
            run(&p, &watched(&all), &listing, &nodes, now).memory,
            sorted
        );
    }
    let newest: Vec<(&str, bool)> = (sorted.launches[""].iter())
        .map(|l| (l.id.as_str(), l.registered))
        .collect();
    let id = |n: u32| all[n as usize - 1].id.as_str();
    assert_eq!(
        newest,
        (45..=50).rev().map(|n| (id(n), false)).collect::<Vec<_>>(),
        "the window's newest six, newest first"
    );
    assert_eq!(sorted.ever_matched.len(), 40);
}

/// A pass's own observation of an instance replaces the remembered one;
/// remembered launches newer than anything listed stay in the window.
#[test]
fn each_pools_newest_launches_are_kept_with_this_passs_observation_of_each() {
    let p = without_churn();
    let listed = [running(1), running(2)];
    let remembered = |id: &str, created: u64, registered| Launch {
        id: id.into(),
        created_at_ms: created as i64,
        registered,
    };
    let memory = Memory {
        launches: BTreeMap::from([(
            String::new(),
            vec![
                remembered("i-gone", T0 + MIN, false),
                remembered(&listed[0].id, T0, false),
            ],
        )]),
        ..watched(&listed)
    };
    let d = run(
        &p,
        &memory,
        &listed,
        &[node_of(1), node_of(2)],
        T0 + 60 * MIN,
    );
    let kept: Vec<(&str, bool)> = (d.memory.launches[""].iter())
        .map(|l| (l.id.as_str(), l.registered))
        .collect();
    assert_eq!(
        kept,
        [
            ("i-gone", false),
            (listed[1].id.as_str(), true),
            (listed[0].id.as_str(), true)
        ]
    );
}

/// The memory's matched IDs read back as the same set whatever order the
/// stored list has (it is written sorted; a hand-edited one need not be).
#[test]
fn matched_ids_read_back_as_one_set_in_any_stored_order() {
    let memory: Memory =
        serde_json::from_str(r#"{"ever-matched": ["i-b", "i-a", "i-b", "i-c"]}"#).unwrap();
    let ids: Vec<&str> = memory.ever_matched.iter().map(String::as_str).collect();
    assert_eq!(ids, ["i-a", "i-b", "i-c"]);
    let again: Memory = serde_json::from_str(&serde_json::to_string(&memory).unwrap()).unwrap();
    assert_eq!(again, memory);
}
