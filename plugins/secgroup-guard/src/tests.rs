//! secgroup-guard against the SDK's fakes.

use super::*;
use serde_json::json;
use tend_sdk::testing::FakeHost;
use tend_sdk::{Health, Instance, InstanceState, SecurityGroup};

const GROUP: &str = "sg-0123456789abcdef0";
const OUTSIDER: &str = "i-0000000000000000a";
const MEMBER: &str = "i-0000000000000000b";
const CONFIG: &str = r#"{"owner": {"tag": "kubernetes.io/cluster/demo", "value": "owned"},
    "group-id": "sg-0123456789abcdef0", "pod-cidrs": ["10.244.0.0/16"]}"#;

fn host() -> FakeHost {
    let host = FakeHost::named("secgroup-guard");
    host.cloud.grant(
        r#"{ operations = ["list-instances", "list-security-groups", "ensure-rule", "add-to-group"],
             instances = [{ tag = "kubernetes.io/cluster/demo", value = "owned" }],
             security-groups = ["sg-0123456789abcdef0"],
             remotes = ["10.244.0.0/16", "fd00:10:244::/56"], ports = ["1-65535"] }"#,
    );
    host.kube.grant(
        r#"{ resource = "configmaps", verbs = ["get"], namespaces = ["kube-system"], names = ["kubeadm-config"] }"#,
    );
    let owned = |id, name, state| {
        Instance::new(id, name, state).with_tag("kubernetes.io/cluster/demo", "owned")
    };
    host.cloud
        .put_instance(owned(OUTSIDER, "a", InstanceState::Running))
        .put_instance(Instance {
            security_groups: vec![GROUP.into()],
            ..owned(MEMBER, "b", InstanceState::Running)
        })
        .put_instance(owned("i-0000000000000000c", "c", InstanceState::Stopped))
        .put_group(SecurityGroup::new(GROUP, "demo-nodes"));
    host
}

fn reconcile(host: &FakeHost, config: &str) -> Outcome {
    SecgroupGuard::reconcile(&Context::new("secgroup-guard", config), host).unwrap()
}

#[test]
fn adds_what_is_missing_and_a_second_pass_changes_nothing() {
    let host = host();
    // A tcp/22 rule is not "tcp": the full rule is still added.
    let mut group = SecurityGroup::new(GROUP, "demo-nodes");
    group.rules.push(Rule {
        ports: Some(tend_sdk::PortRange { min: 22, max: 22 }),
        ..desired::pod_rules(&["10.244.0.0/16".into()], false)[0].clone()
    });
    host.cloud.put_group(group);
    let outcome = reconcile(&host, CONFIG);
    assert_eq!(outcome.health, Health::Healthy, "{}", outcome.message);
    assert_eq!(
        host.cloud.actions(),
        [
            format!("ensure-rule {GROUP} ingress ipv4 tcp from 10.244.0.0/16"),
            format!("ensure-rule {GROUP} ingress ipv4 udp from 10.244.0.0/16"),
            format!("ensure-rule {GROUP} ingress ipv4 icmp from 10.244.0.0/16"),
            format!("add-to-group {OUTSIDER} {GROUP}"),
        ]
    );
    assert_eq!(
        host.cloud.group(GROUP).unwrap().rules.len(),
        4,
        "nothing removed"
    );
    let again = reconcile(&host, CONFIG);
    assert_eq!(
        host.cloud.actions().len(),
        4,
        "no mutating call: {}",
        again.message
    );
    assert_eq!(
        again.message,
        format!("group {GROUP}: 3 rule(s) wanted, 3 instance(s)")
    );
}

#[test]
fn pod_cidrs_come_from_kubeadm_when_not_configured() {
    let host = host();
    host.kube.put(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "kubeadm-config", "namespace": "kube-system"},
        "data": {"ClusterConfiguration": "networking:\n  podSubnet: 10.244.0.0/16,fd00:10:244::/56\n"}
    }));
    let config = r#"{"owner": {"tag": "kubernetes.io/cluster/demo", "value": "owned"},
        "group-id": "sg-0123456789abcdef0", "egress": true}"#;
    reconcile(&host, config);
    let actions = host.cloud.actions();
    assert_eq!(actions.len(), 13, "{actions:?}");
    assert!(actions.contains(&format!(
        "ensure-rule {GROUP} egress ipv6 icmpv6 from fd00:10:244::/56"
    )));
}

#[test]
fn a_group_name_is_resolved_once_and_an_ambiguous_one_refused() {
    let host = host();
    let config = r#"{"owner": {"tag": "kubernetes.io/cluster/demo", "value": "owned"},
        "group-name": "demo-nodes", "pod-cidrs": ["10.244.0.0/16"]}"#;
    reconcile(&host, config);
    assert_eq!(host.cloud.actions().len(), 4);
    // Resolved and remembered: a failing lookup no longer matters.
    host.cloud.fail_call(
        "find-security-group",
        Some(Error::Unavailable("down".into())),
    );
    assert_eq!(reconcile(&host, config).health, Health::Healthy);

    let host = self::host();
    host.cloud
        .grant(r#"{ security-groups = ["sg-0123456789abcdef1"] }"#);
    host.cloud
        .put_group(SecurityGroup::new("sg-0123456789abcdef1", "demo-nodes"));
    let outcome = reconcile(&host, config);
    assert_eq!(outcome.health, Health::Degraded);
    assert!(
        outcome.message.contains("set group-id in the config"),
        "{}",
        outcome.message
    );
    assert!(host.cloud.actions().is_empty());
}

#[test]
fn a_remembered_group_that_is_gone_is_resolved_again() {
    let host = host();
    let config = r#"{"owner": {"tag": "kubernetes.io/cluster/demo", "value": "owned"},
        "group-name": "demo-nodes", "pod-cidrs": ["10.244.0.0/16"]}"#;
    reconcile(&host, config);
    // Deleted and made anew under the same name: another ID.
    const REMADE: &str = "sg-0123456789abcdef1";
    host.cloud.remove_group(GROUP);
    host.cloud
        .grant(r#"{ security-groups = ["sg-0123456789abcdef1"] }"#)
        .put_group(SecurityGroup::new(REMADE, "demo-nodes"));
    let outcome = reconcile(&host, config);
    assert_eq!(outcome.health, Health::Healthy, "{}", outcome.message);
    assert!(
        outcome.message.starts_with(&format!("group {REMADE}:")),
        "{}",
        outcome.message
    );
    assert!(
        (host.cloud.actions().iter()).any(|a| a.starts_with(&format!("ensure-rule {REMADE} "))),
        "{:?}",
        host.cloud.actions()
    );
}

#[test]
fn a_spent_budget_stops_the_pass_and_is_reported() {
    let host = host();
    host.cloud.fail_call(
        "ensure-rule",
        Some(Error::BudgetExhausted("budget group-changes spent".into())),
    );
    let outcome = reconcile(&host, CONFIG);
    assert_eq!(outcome.health, Health::Degraded);
    assert!(
        outcome.message.contains("budget group-changes spent"),
        "{}",
        outcome.message
    );
    assert!(
        outcome.message.ends_with("(3 more not tried)"),
        "{}",
        outcome.message
    );
    assert!(host.cloud.actions().is_empty());
}

#[test]
fn a_dry_run_says_would_add() {
    let host = host();
    let ctx = Context {
        dry_run: true,
        ..Context::new("secgroup-guard", CONFIG)
    };
    let outcome = SecgroupGuard::reconcile(&ctx, &host).unwrap();
    assert!(
        outcome.message.contains("would add rule ingress ipv4 tcp"),
        "{}",
        outcome.message
    );
}

#[test]
fn bad_config_names_the_key() {
    let host = host();
    for (config, key) in [
        (r#"{"owner": {"tag": "k", "value": "v"}}"#, "group-id"),
        (
            r#"{"owner": {"tag": "k", "value": "v"}, "group-id": "sg-0123456789abcdef0", "pod-cidrs": ["10.0.0.0"]}"#,
            "pod-cidrs",
        ),
        (
            r#"{"owner": {"tag": "k", "value": "v"}, "group-id": "sg-0123456789abcdef0", "extra-rules": [{"protocol": "tcp"}]}"#,
            "extra-rules[0]",
        ),
    ] {
        let ctx = Context::new("secgroup-guard", config);
        let err = SecgroupGuard::reconcile(&ctx, &host).unwrap_err();
        assert_eq!(err.kind(), "invalid", "{config}");
        assert!(err.message().contains(key), "{config}: {err}");
    }
}
