//! The fake against the host's rules: shapes first, ownership by tag (key
//! and value), duplicates answered false, failures as scripted.

use super::*;

const OWNED: &str = "i-0123456789abcdef0";
const FOREIGN: &str = "i-0123456789abcdef1";
const GONE: &str = "i-0123456789abcdef2";
const GROUP: &str = "sg-0123456789abcdef0";
const OTHER_GROUP: &str = "sg-0123456789abcdef1";
const CLUSTER: &str = "kubernetes.io/cluster/a";

fn cloud() -> FakeCloud {
    let cloud = FakeCloud::new("reaper");
    cloud.grant(
        r#"{ operations = ["list-instances", "get-instance", "delete-instance",
             "list-security-groups", "ensure-rule", "add-to-group"],
             instances = [{ tag = "kubernetes.io/cluster/a", value = "owned" }],
             security-groups = ["sg-0123456789abcdef0"],
             remotes = ["10.244.0.0/16"], ports = ["1-65535"] }"#,
    );
    cloud
        .put_instance(
            Instance::new(OWNED, "a-1", InstanceState::Running).with_tag(CLUSTER, "owned"),
        )
        // Pool "ab" is not pool "a".
        .put_instance(
            Instance::new(FOREIGN, "ab-1", InstanceState::Running)
                .with_tag("kubernetes.io/cluster/ab", "owned"),
        )
        .put_group(SecurityGroup::new(GROUP, "nodes"))
        .put_group(SecurityGroup::new(OTHER_GROUP, "nodes"));
    cloud
}

fn tcp(ports: Option<(u16, u16)>) -> Rule {
    Rule {
        direction: Direction::Ingress,
        ether_type: EtherType::Ipv4,
        protocol: Protocol::Tcp,
        ports: ports.map(|(min, max)| PortRange { min, max }),
        remote: Remote::Cidr("10.244.0.0/16".into()),
        description: None,
    }
}

fn owner(value: &str) -> OwnerTag {
    OwnerTag::new(CLUSTER, value)
}

#[test]
fn listings_need_the_owner_tag_key_and_value() {
    let cloud = cloud();
    let listed = cloud.list_instances(&owner("owned")).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, OWNED);
    let err = cloud.list_instances(&owner("shared")).unwrap_err();
    assert_eq!(
        err.message(),
        "cloud list-instances of instances tagged kubernetes.io/cluster/a=shared is not granted: add { tag = \"kubernetes.io/cluster/a\", value = \"shared\" } to instances in [plugins.reaper.grants] cloud"
    );
    let err = cloud
        .list_instances(&OwnerTag::new("kubernetes.io/cluster/ab", "owned"))
        .unwrap_err();
    assert_eq!(err.kind(), "denied");
    let err = cloud
        .list_instances(&OwnerTag::new("", "owned"))
        .unwrap_err();
    assert_eq!(err.kind(), "invalid");
}

#[test]
fn nothing_is_granted_until_granted() {
    let cloud = FakeCloud::new("guard");
    cloud.put_instance(
        Instance::new(OWNED, "a-1", InstanceState::Running).with_tag(CLUSTER, "owned"),
    );
    let err = cloud.delete_instance(OWNED).unwrap_err();
    assert_eq!(
        err.message(),
        format!(
            "cloud delete-instance of instance {OWNED} is not granted: add \"delete-instance\" to operations in [plugins.guard.grants] cloud"
        )
    );
    assert_eq!(
        cloud.list_security_groups(&[]).unwrap_err().kind(),
        "denied"
    );
    assert_eq!(cloud.actions(), Vec::<String>::new());
}

#[test]
fn shapes_are_checked_before_anything_else() {
    let cloud = FakeCloud::new("guard");
    cloud.fail_with(Some(Error::Unavailable("down".into())));
    for bad in ["i-1/../x", "", "web-1"] {
        assert_eq!(
            cloud.delete_instance(bad).unwrap_err().kind(),
            "invalid",
            "{bad:?}"
        );
        assert_eq!(
            cloud.get_instance(bad).unwrap_err().kind(),
            "invalid",
            "{bad:?}"
        );
    }
    assert_eq!(
        cloud.ensure_rule("default", &tcp(None)).unwrap_err().kind(),
        "invalid"
    );
    assert_eq!(
        cloud.add_to_group(OWNED, "sg-1/x").unwrap_err().kind(),
        "invalid"
    );
    assert_eq!(
        cloud.find_security_group("a\nb").unwrap_err().kind(),
        "invalid"
    );
}

#[test]
fn instances_of_other_owners_are_denied_by_id() {
    let cloud = cloud();
    assert_eq!(cloud.get_instance(OWNED).unwrap().name, "a-1");
    let err = cloud.get_instance(FOREIGN).unwrap_err();
    assert_eq!(err.kind(), "denied");
    assert!(
        err.message().contains("kubernetes.io/cluster/a=owned"),
        "{err}"
    );
    assert_eq!(cloud.delete_instance(FOREIGN).unwrap_err().kind(), "denied");
    assert_eq!(
        cloud.add_to_group(FOREIGN, GROUP).unwrap_err().kind(),
        "denied"
    );
    assert_eq!(cloud.get_instance(GONE).unwrap_err().kind(), "not-found");
    assert_eq!(cloud.actions(), Vec::<String>::new());
}

#[test]
fn a_delete_is_sent_once_and_gone_is_success() {
    let cloud = cloud();
    cloud.delete_instance(OWNED).unwrap();
    assert_eq!(
        cloud.instance(OWNED).unwrap().state,
        InstanceState::Deleting
    );
    // Already deleting: success, nothing sent again.
    cloud.delete_instance(OWNED).unwrap();
    cloud.remove_instance(OWNED);
    cloud.delete_instance(OWNED).unwrap();
    cloud.delete_instance(GONE).unwrap();
    cloud.put_instance(
        Instance::new(GONE, "a-2", InstanceState::Terminated).with_tag(CLUSTER, "owned"),
    );
    cloud.delete_instance(GONE).unwrap();
    assert_eq!(cloud.get_instance(GONE).unwrap_err().kind(), "not-found");
    assert_eq!(cloud.actions(), [format!("delete-instance {OWNED}")]);
}

#[test]
fn a_rule_outside_the_granted_remotes_is_denied_and_sends_nothing() {
    let cloud = cloud();
    let world = Rule {
        remote: Remote::Cidr("0.0.0.0/0".into()),
        ..tcp(None)
    };
    let err = cloud.ensure_rule(GROUP, &world).unwrap_err();
    assert_eq!(err.kind(), "denied");
    assert!(
        err.message().contains("add \"0.0.0.0/0\" to remotes"),
        "{err}"
    );
    let from_other = Rule {
        remote: Remote::Group(OTHER_GROUP.into()),
        ..tcp(Some((22, 22)))
    };
    assert_eq!(
        cloud.ensure_rule(GROUP, &from_other).unwrap_err().kind(),
        "denied"
    );
    assert!(cloud.actions().is_empty());
    assert!(cloud.group(GROUP).unwrap().rules.is_empty());
}

#[test]
fn rules_are_the_same_only_with_the_full_port_range() {
    let cloud = cloud();
    assert!(cloud.ensure_rule(GROUP, &tcp(Some((22, 22)))).unwrap());
    // tcp/22 is not "tcp": the full range is added.
    assert!(cloud.ensure_rule(GROUP, &tcp(None)).unwrap());
    // Every port written out is the same rule as no ports.
    assert!(!cloud.ensure_rule(GROUP, &tcp(Some((1, 65535)))).unwrap());
    let described = Rule {
        description: Some("pods".into()),
        ..tcp(None)
    };
    assert!(!cloud.ensure_rule(GROUP, &described).unwrap());
    assert_eq!(cloud.group(GROUP).unwrap().rules.len(), 2);
    assert_eq!(
        cloud.actions(),
        [
            format!("ensure-rule {GROUP} ingress ipv4 tcp 22-22 from 10.244.0.0/16"),
            format!("ensure-rule {GROUP} ingress ipv4 tcp from 10.244.0.0/16"),
        ]
    );
    let err = cloud.ensure_rule(OTHER_GROUP, &tcp(None)).unwrap_err();
    assert!(
        err.message()
            .contains(&format!("add {OTHER_GROUP:?} to security-groups")),
        "{err}"
    );
    let bad = Rule {
        ether_type: EtherType::Ipv6,
        ..tcp(None)
    };
    assert_eq!(
        cloud.ensure_rule(GROUP, &bad).unwrap_err().kind(),
        "invalid"
    );
}

#[test]
fn membership_is_added_once() {
    let cloud = cloud();
    assert!(cloud.add_to_group(OWNED, GROUP).unwrap());
    assert!(!cloud.add_to_group(OWNED, GROUP).unwrap());
    assert_eq!(cloud.instance(OWNED).unwrap().security_groups, [GROUP]);
    assert_eq!(
        cloud.add_to_group(GONE, GROUP).unwrap_err().kind(),
        "not-found"
    );
    assert_eq!(cloud.actions(), [format!("add-to-group {OWNED} {GROUP}")]);
}

#[test]
fn groups_are_listed_and_found_among_the_granted_ones() {
    let cloud = cloud();
    let all = cloud.list_security_groups(&[]).unwrap();
    assert_eq!(
        all.iter().map(|g| g.id.as_str()).collect::<Vec<_>>(),
        [GROUP]
    );
    assert_eq!(cloud.list_security_groups(&[GROUP]).unwrap().len(), 1);
    assert_eq!(
        cloud
            .list_security_groups(&[OTHER_GROUP])
            .unwrap_err()
            .kind(),
        "denied"
    );
    // Only one of the two groups named "nodes" is granted.
    assert_eq!(cloud.find_security_group("nodes").unwrap(), GROUP);
    cloud.grant(r#"{ security-groups = ["sg-0123456789abcdef1"] }"#);
    let err = cloud.find_security_group("nodes").unwrap_err();
    assert_eq!(err.kind(), "conflict");
    assert!(err.message().ends_with("pin the group by its ID"), "{err}");
    assert_eq!(
        cloud.find_security_group("web").unwrap_err().kind(),
        "not-found"
    );
}

#[test]
fn calls_fail_as_scripted_after_the_grant_checks() {
    let cloud = cloud();
    cloud.fail_call(
        "delete-instance",
        Some(Error::BudgetExhausted("cloud.delete-instance".into())),
    );
    assert_eq!(
        cloud.delete_instance(OWNED).unwrap_err().kind(),
        "budget-exhausted"
    );
    assert_eq!(
        cloud.delete_instance(FOREIGN).unwrap_err().kind(),
        "budget-exhausted"
    );
    cloud.fail_call("delete-instance", None);
    cloud.fail_with(Some(Error::Unavailable("the API is down".into())));
    assert_eq!(
        cloud.list_instances(&owner("owned")).unwrap_err().kind(),
        "unavailable"
    );
    assert_eq!(
        cloud.list_instances(&owner("shared")).unwrap_err().kind(),
        "denied"
    );
    cloud.fail_with(None);
    assert_eq!(cloud.list_instances(&owner("owned")).unwrap().len(), 1);
    assert_eq!(cloud.actions(), Vec::<String>::new());
}

#[test]
#[should_panic(expected = "no call \"delete\"")]
fn failing_an_unknown_call_is_a_test_setup_error() {
    FakeCloud::default().fail_call("delete", None);
}

#[test]
fn owner_tags_in_plugin_config_are_written_as_in_grants() {
    let owner: OwnerTag =
        serde_json::from_str(r#"{"tag": "kubernetes.io/cluster/a", "value": "owned"}"#).unwrap();
    assert_eq!(owner, OwnerTag::new(CLUSTER, "owned"));
    assert!(serde_json::from_str::<OwnerTag>(r#"{"key": "k", "value": "v"}"#).is_err());
    let instance = Instance::new(OWNED, "a-1", InstanceState::Running).with_tag(CLUSTER, "owned");
    assert!(instance.is_owned_by(&owner));
    assert!(!instance.is_owned_by(&OwnerTag::new(CLUSTER, "shared")));
    assert_eq!(instance.tag(CLUSTER), Some("owned"));
    assert_eq!(instance.provider_id, format!("aws:///us-east-1a/{OWNED}"));
}
