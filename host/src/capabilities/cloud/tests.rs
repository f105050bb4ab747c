//! The adapter against the fake: grants, shapes before requests, ownership,
//! the gate (dry run, budgets), provider quirks and the request rate.

use super::*;
use crate::capabilities::gate::BudgetRule;
use crate::capabilities::limits::Limits;
use crate::capabilities::testing::{call, call_journaled, call_with_limits};
use std::time::Duration;

const A1: &str = "i-0000000000000000a";
const A2: &str = "i-0000000000000001a";
const AB1: &str = "i-00000000000000a0b";
const SG: &str = "sg-0123456789abcdef0";
const SG_OTHER: &str = "sg-0fedcba9876543210";
const POOL_A: (&str, &str) = ("kubernetes.io/cluster/a", "owned");
const POOL_AB: (&str, &str) = ("kubernetes.io/cluster/ab", "owned");

const FULL: &str = r#"operations = ["list-instances", "get-instance", "delete-instance", "list-security-groups", "ensure-rule", "add-to-group"]
instances = [{ tag = "kubernetes.io/cluster/a", value = "owned" }]
security-groups = ["sg-0123456789abcdef0"]
remotes = ["10.0.0.0/8"]
ports = ["1-65535"]"#;

fn scripted() -> (Arc<dyn CloudBackend>, Arc<FakeCloud>) {
    let (backend, fake) = PluginCloud::fake();
    fake.add_instance(FakeCloud::instance(A1, "node-1", &[POOL_A]));
    fake.add_instance(FakeCloud::instance(
        A2,
        "node-2",
        &[POOL_A, ("role", "worker")],
    ));
    fake.add_instance(FakeCloud::instance(AB1, "other-1", &[POOL_AB]));
    fake.add_group(SG, "nodes", vec![]);
    fake.add_group(SG_OTHER, "nodes-other", vec![]);
    (backend, fake)
}

fn cloud_for(grant: &str, call: &Arc<Call>) -> (PluginCloud, Arc<FakeCloud>) {
    let (backend, fake) = scripted();
    let grant: CloudGrant = toml::from_str(grant).unwrap();
    (
        PluginCloud::for_call(&backend, &grant, &Default::default(), call),
        fake,
    )
}

fn cloud(grant: &str, dry_run: bool) -> (PluginCloud, Arc<FakeCloud>) {
    cloud_for(grant, &call("reaper", dry_run))
}

fn owner((key, value): (&str, &str)) -> OwnerTag {
    OwnerTag {
        key: key.into(),
        value: value.into(),
    }
}

fn ids(instances: &[Instance]) -> Vec<&str> {
    instances.iter().map(|i| i.id.as_str()).collect()
}

fn ssh_from(cidr: &str) -> Rule {
    Rule {
        direction: Direction::Ingress,
        ether_type: EtherType::Ipv4,
        protocol: Protocol::Tcp,
        ports: Some(PortRange { min: 22, max: 22 }),
        remote: Remote::Cidr(cidr.into()),
        description: Some("ssh from the bastion".into()),
    }
}

#[test]
fn budgetable_operations_are_the_rules_mutations() {
    let names: Vec<&str> = Operation::MUTATIONS.iter().map(|o| o.name()).collect();
    assert_eq!(PluginCloud::MUTATIONS, names.as_slice());
}

#[tokio::test]
async fn every_refusal_names_the_grant_and_sends_nothing() {
    let (cloud, fake) = cloud("", false);
    let table = "[plugins.reaper.grants] cloud";
    let errors = [
        cloud.list_instances(&owner(POOL_A)).await.unwrap_err(),
        cloud.get_instance(A1).await.unwrap_err(),
        cloud.delete_instance(A1).await.unwrap_err(),
        cloud.list_security_groups(&[]).await.unwrap_err(),
        cloud.list_security_groups(&[SG.into()]).await.unwrap_err(),
        cloud.find_security_group("nodes").await.unwrap_err(),
        cloud
            .ensure_rule(SG, &ssh_from("10.0.0.0/8"))
            .await
            .unwrap_err(),
        cloud.add_to_group(A1, SG).await.unwrap_err(),
    ];
    for err in errors {
        assert_eq!(err.kind(), "denied", "{err}");
        assert!(err.to_string().contains(table), "{err}");
    }
    let (cloud, _) = cloud_for(
        "operations = [\"list-instances\", \"ensure-rule\"]",
        &call("reaper", false),
    );
    let err = cloud.list_instances(&owner(POOL_A)).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("add { tag = \"kubernetes.io/cluster/a\", value = \"owned\" } to instances"),
        "{err}"
    );
    let err = cloud
        .ensure_rule(SG, &ssh_from("10.0.0.0/8"))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("add {SG:?} to security-groups")),
        "{err}"
    );
    assert_eq!(fake.requests(), 0);
    assert!(fake.actions().is_empty());
}

#[tokio::test]
async fn hostile_identifiers_are_invalid_before_any_request() {
    let (cloud, fake) = cloud(FULL, false);
    let uuid_action = "8f7c2a1e-3b4d-4e5f-9a0b-1c2d3e4f5a6b/action";
    for id in [
        "i-1/../x",
        "../servers",
        uuid_action,
        "",
        "i-0000000000000000A",
    ] {
        assert_eq!(
            cloud.get_instance(id).await.unwrap_err().kind(),
            "invalid",
            "{id}"
        );
        assert_eq!(
            cloud.delete_instance(id).await.unwrap_err().kind(),
            "invalid"
        );
        assert_eq!(
            cloud.add_to_group(id, SG).await.unwrap_err().kind(),
            "invalid"
        );
    }
    for group in ["sg-1?x=", "../security-groups", uuid_action] {
        let err = cloud.list_security_groups(&[SG.into(), group.into()]).await;
        assert_eq!(err.unwrap_err().kind(), "invalid", "{group}");
        let err = cloud.ensure_rule(group, &ssh_from("10.0.0.0/8")).await;
        assert_eq!(err.unwrap_err().kind(), "invalid");
        assert_eq!(
            cloud.add_to_group(A1, group).await.unwrap_err().kind(),
            "invalid"
        );
    }
    let mut hostile_rule = ssh_from("10.0.0.0/8");
    hostile_rule.remote = Remote::Group("sg-1/../x".into());
    assert_eq!(
        cloud
            .ensure_rule(SG, &hostile_rule)
            .await
            .unwrap_err()
            .kind(),
        "invalid"
    );
    let bad_tag = OwnerTag {
        key: "kubernetes.io/cluster/a\n".into(),
        value: "owned".into(),
    };
    assert_eq!(
        cloud.list_instances(&bad_tag).await.unwrap_err().kind(),
        "invalid"
    );
    assert_eq!(
        cloud.find_security_group("").await.unwrap_err().kind(),
        "invalid"
    );
    // Even without the grant, the shape is what the plugin hears about.
    let (ungranted, _) = cloud_for("", &call("reaper", false));
    assert_eq!(
        ungranted
            .delete_instance("i-1/../x")
            .await
            .unwrap_err()
            .kind(),
        "invalid"
    );
    assert_eq!(fake.requests(), 0);
}

#[tokio::test]
async fn instances_outside_the_ownership_tag_are_denied() {
    let (cloud, fake) = cloud(FULL, false);
    for err in [
        cloud.get_instance(AB1).await.unwrap_err(),
        cloud.delete_instance(AB1).await.unwrap_err(),
        cloud.add_to_group(AB1, SG).await.unwrap_err(),
    ] {
        assert_eq!(err.kind(), "denied", "{err}");
        assert!(
            err.to_string()
                .contains("[plugins.reaper.grants] cloud (kubernetes.io/cluster/a=owned)"),
            "{err}"
        );
    }
    assert!(fake.actions().is_empty());
    assert!(cloud.call.gate.mutations().is_empty());
}

#[tokio::test]
async fn pools_a_and_ab_never_see_each_other_even_when_the_provider_ignores_the_filter() {
    let (cloud, fake) = cloud(FULL, false);
    let listed = cloud.list_instances(&owner(POOL_A)).await.unwrap();
    assert_eq!(ids(&listed), [A1, A2]);
    fake.ignore_filters(true);
    let listed = cloud.list_instances(&owner(POOL_A)).await.unwrap();
    assert_eq!(
        ids(&listed),
        [A1, A2],
        "an ignored filter does not widen the grant"
    );
    let err = cloud.list_instances(&owner(POOL_AB)).await.unwrap_err();
    assert_eq!(err.kind(), "denied");
    let err = cloud
        .list_instances(&owner(("kubernetes.io/cluster/a", "shared")))
        .await;
    assert_eq!(
        err.unwrap_err().kind(),
        "denied",
        "the value is part of the tag"
    );
}

/// Issue 25, hole 5: a listing saw the instance owned; it moved to another
/// owner before the delete. Each mutation fetches it again and checks its
/// owner just before acting.
#[tokio::test]
async fn a_mutation_checks_the_owner_on_a_fresh_read_not_the_listing() {
    let (cloud, fake) = cloud(FULL, false);
    cloud.list_instances(&owner(POOL_A)).await.unwrap();
    fake.retag(A1, &[("pool", "b")]);
    fake.retag(A2, &[("pool", "b")]);
    let err = cloud.delete_instance(A1).await.unwrap_err();
    assert_eq!(err.kind(), "denied", "{err}");
    let err = cloud.add_to_group(A2, SG).await.unwrap_err();
    assert_eq!(err.kind(), "denied", "{err}");
    assert!(fake.actions().is_empty(), "{:?}", fake.actions());
    assert!(cloud.call.gate.mutations().is_empty());
    assert_eq!(
        fake.requests(),
        3,
        "one list, then one get before each mutation"
    );
}

#[tokio::test]
async fn mutations_are_journaled_by_instance_and_a_second_delete_sends_nothing() {
    let (cloud, fake) = cloud(FULL, false);
    cloud.delete_instance(A1).await.unwrap();
    assert!(cloud.add_to_group(A2, SG).await.unwrap());
    // The second delete in the same reconcile finds it deleting: nothing sent.
    cloud.delete_instance(A1).await.unwrap();
    assert!(!cloud.add_to_group(A2, SG).await.unwrap());
    assert_eq!(
        fake.actions(),
        [
            format!("delete-instance {A1}"),
            format!("add-to-group {A2} {SG}")
        ]
    );
    let described: Vec<String> = cloud
        .call
        .gate
        .mutations()
        .iter()
        .map(|m| m.describe())
        .collect();
    assert_eq!(
        described,
        [
            format!("did cloud.delete-instance {A1} (name node-1)"),
            format!("did cloud.add-to-group {A2} (name node-2) to {SG}")
        ]
    );
}

#[tokio::test]
async fn deleting_an_instance_already_gone_or_deleting_sends_nothing() {
    let (cloud, fake) = cloud(FULL, false);
    let mut deleting = FakeCloud::instance("i-0000000000000002a", "node-3", &[POOL_A]);
    deleting.state = InstanceState::Deleting;
    fake.add_instance(deleting);
    let mut terminated = FakeCloud::instance("i-0000000000000003a", "node-4", &[POOL_A]);
    terminated.state = InstanceState::Terminated;
    fake.add_instance(terminated);
    cloud.delete_instance("i-0000000000000002a").await.unwrap();
    cloud.delete_instance("i-0000000000000003a").await.unwrap();
    cloud.delete_instance("i-0000000000000009a").await.unwrap();
    assert!(fake.actions().is_empty());
    assert!(cloud.call.gate.mutations().is_empty(), "nothing journaled");
    let err = cloud.get_instance("i-0000000000000003a").await.unwrap_err();
    assert_eq!(err.kind(), "not-found", "a terminated instance is gone");
}

#[tokio::test]
async fn a_dry_run_plans_every_mutation_and_sends_none() {
    let (cloud, fake) = cloud(FULL, true);
    cloud.delete_instance(A1).await.unwrap();
    assert!(
        cloud
            .ensure_rule(SG, &ssh_from("10.0.0.0/8"))
            .await
            .unwrap()
    );
    assert!(cloud.add_to_group(A2, SG).await.unwrap());
    assert!(fake.actions().is_empty());
    assert_eq!(fake.instances()[0].state, InstanceState::Running);
    let mutations = cloud.call.gate.mutations();
    assert_eq!(mutations.len(), 3);
    assert!(mutations.iter().all(|m| m.dry_run));
    assert_eq!(
        mutations[1].target,
        format!("{SG} ingress ipv4 tcp 22-22 from 10.0.0.0/8")
    );
    assert_eq!(mutations[1].detail, "description \"ssh from the bastion\"");
}

#[tokio::test]
async fn budgets_bound_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let rule = BudgetRule {
        name: "x".into(),
        operations: vec!["cloud.delete-instance".into()],
        max: 1,
        per: Duration::from_secs(600),
        min_interval_per_target: Duration::ZERO,
    };
    let call = call_journaled("reaper", false, dir.path(), vec![rule]);
    let (cloud, fake) = cloud_for(FULL, &call);
    cloud.delete_instance(A1).await.unwrap();
    let err = cloud.delete_instance(A2).await.unwrap_err();
    assert_eq!(err.kind(), "budget-exhausted", "{err}");
    assert_eq!(fake.actions(), [format!("delete-instance {A1}")]);
}

#[tokio::test]
async fn rules_are_ensured_once() {
    let (cloud, fake) = cloud(FULL, false);
    let all_tcp = Rule {
        ports: Some(PortRange { min: 1, max: 65535 }),
        description: None,
        ..ssh_from("10.244.0.0/16")
    };
    assert!(cloud.ensure_rule(SG, &all_tcp).await.unwrap());
    let same = Rule {
        ports: None,
        ..all_tcp.clone()
    };
    assert!(
        !cloud.ensure_rule(SG, &same).await.unwrap(),
        "the provider's duplicate is success"
    );
    assert_eq!(fake.groups()[0].rules.len(), 1);
    assert_eq!(
        cloud.call.gate.mutations()[0].target,
        format!("{SG} ingress ipv4 tcp 1-65535 from 10.244.0.0/16")
    );
    let mut backwards = ssh_from("10.0.0.0/8");
    backwards.ports = Some(PortRange { min: 22, max: 1 });
    assert_eq!(
        cloud.ensure_rule(SG, &backwards).await.unwrap_err().kind(),
        "invalid"
    );
}

#[tokio::test]
async fn groups_are_listed_and_found_only_among_the_granted() {
    let (granted, fake) = cloud(FULL, false);
    fake.ignore_filters(true);
    let all = granted.list_security_groups(&[]).await.unwrap();
    assert_eq!(all.iter().map(|g| g.id.as_str()).collect::<Vec<_>>(), [SG]);
    let err = granted
        .list_security_groups(&[SG_OTHER.into()])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "denied");
    assert_eq!(granted.find_security_group("nodes").await.unwrap(), SG);
    let err = granted
        .find_security_group("nodes-other")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "not-found");
    assert!(
        err.to_string()
            .contains("add the group's ID to security-groups in [plugins.reaper.grants] cloud"),
        "{err}"
    );
    // No oracle: an ungranted group of that name is never named, and its
    // existence changes nothing in the answer.
    assert!(!err.to_string().contains(SG_OTHER), "{err}");
    let absent = granted.find_security_group("nobody").await.unwrap_err();
    assert_eq!(absent.kind(), "not-found");
    assert_eq!(
        absent.to_string().replace("\"nobody\"", "NAME"),
        err.to_string().replace("\"nodes-other\"", "NAME")
    );
    let grant = FULL.replace(
        &format!("security-groups = [{SG:?}]"),
        &format!("security-groups = [{SG:?}, \"sg-0000000000000000f\"]"),
    );
    let (both, fake) = cloud(&grant, false);
    fake.add_group("sg-0000000000000000f", "nodes", vec![]);
    let err = both.find_security_group("nodes").await.unwrap_err();
    assert_eq!(err.kind(), "conflict");
    assert!(err.to_string().contains("pin the group by its ID"), "{err}");
}

#[tokio::test]
async fn an_instance_already_in_the_group_is_no_mutation() {
    let (cloud, fake) = cloud(FULL, false);
    let mut member = FakeCloud::instance("i-0000000000000004a", "node-5", &[POOL_A]);
    member.security_groups = vec![SG.into()];
    fake.add_instance(member);
    assert!(!cloud.add_to_group("i-0000000000000004a", SG).await.unwrap());
    assert!(cloud.call.gate.mutations().is_empty());
    let err = cloud
        .add_to_group("i-0000000000000009a", SG)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "not-found");
}

#[tokio::test(start_paused = true)]
async fn requests_wait_for_the_plugins_rate_within_the_deadline() {
    let (backend, fake) = scripted();
    let grant: CloudGrant = toml::from_str(FULL).unwrap();
    let limits = |timeout| Limits {
        timeout,
        ..Limits::default()
    };
    let rate = CloudLimits { qps: 1, burst: 2 };
    let patient = call_with_limits("reaper", false, limits(Duration::from_secs(30)));
    let cloud = PluginCloud::for_call(&backend, &grant, &rate, &patient);
    let start = tokio::time::Instant::now();
    for _ in 0..4 {
        cloud.get_instance(A1).await.unwrap();
    }
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(2),
        "a burst of 2, then 1 a second"
    );
    // The next reconcile shares the bucket, and its deadline is too short to wait.
    let hurried = call_with_limits("reaper", false, limits(Duration::from_millis(500)));
    let cloud = PluginCloud::for_call(&backend, &grant, &rate, &hurried);
    let err = cloud.get_instance(A1).await.unwrap_err();
    assert_eq!(err.kind(), "timeout");
    assert!(
        err.to_string()
            .contains("raise [plugins.reaper.limits] cloud-qps (now 1)"),
        "{err}"
    );
    assert_eq!(fake.requests(), 4);
    let metrics = PluginCloud::render_metrics(&*backend, &|p| p == "reaper");
    assert!(
        metrics.contains("tend_cloud_rate_refused_total{plugin=\"reaper\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn listings_spend_the_read_allowance() {
    let (backend, fake) = scripted();
    // 11 MB of tag values, as a hostile or careless account could hold.
    for n in 0..11 {
        let big = "v".repeat(1 << 20);
        let id = format!("i-{n:016x}c");
        let tags = [POOL_A, ("blob", big.as_str())];
        fake.add_instance(FakeCloud::instance(&id, "fat", &tags));
    }
    let grant: CloudGrant = toml::from_str(FULL).unwrap();
    let limits = Limits {
        read_per_reconcile: crate::units::ByteSize(4 << 20),
        ..Limits::default()
    };
    let call = call_with_limits("reaper", false, limits);
    let cloud = PluginCloud::for_call(&backend, &grant, &Default::default(), &call);
    let err = cloud.list_instances(&owner(POOL_A)).await.unwrap_err();
    assert_eq!(err.kind(), "budget-exhausted", "{err}");
    assert!(
        err.to_string().contains("cloud list-instances")
            && err.to_string().contains("read-per-reconcile"),
        "{err}"
    );
    // What was read stays spent: a small get after it is refused too.
    let err = cloud.get_instance(A1).await.unwrap_err();
    assert_eq!(err.kind(), "budget-exhausted", "{err}");
}
