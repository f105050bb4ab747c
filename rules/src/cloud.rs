//! What a plugin's cloud grant allows, and what a security group rule is:
//! pure, so every rule is tested without a cloud.
//!
//! `cloud = { operations = ["list-instances", "delete-instance"], instances =
//! [{ tag = "kubernetes.io/cluster/prod", value = "owned" }], security-groups
//! = ["sg-0123456789abcdef0"] }`:
//! - each call needs its operation listed ([`CloudGrant::check_operation`]);
//! - instances are reached only through an ownership tag, key **and** value
//!   ([`CloudGrant::check_owner`] for a listing, [`CloudGrant::check_owned`]
//!   for one instance, by the tags the provider reports): a name prefix never
//!   makes an instance the plugin's;
//! - security groups only by granted ID ([`CloudGrant::check_group`]).
//!
//! Identifiers pass [`crate::ident::check`] first ([`check_instance_id`],
//! [`check_group_id`]); a rule passes [`RuleSpec::check`]. [`RuleSpec`] is
//! also what "the same rule" means ([`RuleSpec::normalized`]): direction,
//! ether type, protocol, the full port range and the remote.

use crate::Refusal;
use serde::{Deserialize, Deserializer, de::Error as _};

/// A cloud call, as a grant names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Operation {
    ListInstances,
    GetInstance,
    DeleteInstance,
    ListSecurityGroups,
    EnsureRule,
    AddToGroup,
}

impl Operation {
    pub const ALL: [Operation; 6] = [
        Operation::ListInstances,
        Operation::GetInstance,
        Operation::DeleteInstance,
        Operation::ListSecurityGroups,
        Operation::EnsureRule,
        Operation::AddToGroup,
    ];

    /// The operations that change something: budgets name them
    /// "cloud.delete-instance".
    pub const MUTATIONS: [Operation; 3] = [
        Operation::DeleteInstance,
        Operation::EnsureRule,
        Operation::AddToGroup,
    ];

    /// The name in grants, budgets and the journal: "delete-instance".
    pub fn name(self) -> &'static str {
        match self {
            Operation::ListInstances => "list-instances",
            Operation::GetInstance => "get-instance",
            Operation::DeleteInstance => "delete-instance",
            Operation::ListSecurityGroups => "list-security-groups",
            Operation::EnsureRule => "ensure-rule",
            Operation::AddToGroup => "add-to-group",
        }
    }
}

/// The longest tag key accepted (AWS allows 128, OpenStack metadata 255).
pub const MAX_TAG_KEY: usize = 255;
/// The longest tag value accepted (AWS allows 256, OpenStack metadata 255).
pub const MAX_TAG_VALUE: usize = 256;
/// The longest security group name or rule description accepted.
pub const MAX_NAME: usize = 255;

/// An ownership tag of a grant: `{ tag = "kubernetes.io/cluster/prod", value = "owned" }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ownership {
    pub tag: String,
    pub value: String,
}

impl<'de> Deserialize<'de> for Ownership {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            tag: String,
            value: String,
        }
        let raw = Raw::deserialize(d)?;
        check_tag(&raw.tag, &raw.value).map_err(|e| {
            D::Error::custom(format!(
                "{}: an ownership tag is a key and its value, for example {{ tag = \"kubernetes.io/cluster/prod\", value = \"owned\" }}",
                e.message()
            ))
        })?;
        Ok(Ownership {
            tag: raw.tag,
            value: raw.value,
        })
    }
}

/// A security group ID of a grant, of [`crate::ident::CLOUD_GROUP_ID`]'s shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupId(pub String);

impl<'de> Deserialize<'de> for GroupId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        check_group_id(&text).map_err(|e| D::Error::custom(e.message()))?;
        Ok(GroupId(text))
    }
}

/// `[plugins.<name>.grants] cloud`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct CloudGrant {
    #[serde(default)]
    pub operations: Vec<Operation>,
    /// The ownership tags whose instances the plugin may see and touch.
    #[serde(default)]
    pub instances: Vec<Ownership>,
    /// The security groups it may read, add rules to and add instances to.
    #[serde(default)]
    pub security_groups: Vec<GroupId>,
}

/// Is `id` an instance ID (before any request)?
pub fn check_instance_id(id: &str) -> Result<(), Refusal> {
    crate::ident::check("cloud instance id", id, &crate::ident::CLOUD_INSTANCE_ID)
}

/// Is `id` a security group ID (before any request)?
pub fn check_group_id(id: &str) -> Result<(), Refusal> {
    crate::ident::check("cloud security group id", id, &crate::ident::CLOUD_GROUP_ID)
}

/// Printable text of at most `max` bytes.
fn check_text(what: &str, text: &str, max: usize, empty: bool) -> Result<(), Refusal> {
    if (text.is_empty() && !empty) || text.len() > max || text.chars().any(char::is_control) {
        return Err(Refusal::Invalid(format!(
            "{what} {:?}: expected {}printable text of at most {max} bytes",
            crate::shown(text),
            if empty { "" } else { "non-empty " }
        )));
    }
    Ok(())
}

/// Is `key` = `value` a tag a listing can filter by?
pub fn check_tag(key: &str, value: &str) -> Result<(), Refusal> {
    check_text("cloud tag key", key, MAX_TAG_KEY, false)?;
    check_text("cloud tag value", value, MAX_TAG_VALUE, true)
}

/// Is `name` a security group name to look up?
pub fn check_group_name(name: &str) -> Result<(), Refusal> {
    check_text("cloud security group name", name, MAX_NAME, false)
}

impl CloudGrant {
    fn table(plugin: &str) -> String {
        format!("[plugins.{plugin}.grants] cloud")
    }

    /// Is `operation` granted (`what` names its target, for the message)?
    pub fn check_operation(
        &self,
        plugin: &str,
        operation: Operation,
        what: &str,
    ) -> Result<(), Refusal> {
        if self.operations.contains(&operation) {
            return Ok(());
        }
        Err(crate::operation_not_granted(
            "cloud",
            operation.name(),
            what,
            plugin,
        ))
    }

    /// May `plugin` list the instances tagged `key` = `value`?
    pub fn check_owner(&self, plugin: &str, key: &str, value: &str) -> Result<(), Refusal> {
        check_tag(key, value)?;
        self.check_operation(
            plugin,
            Operation::ListInstances,
            &format!("instances tagged {key}={value}"),
        )?;
        if self
            .instances
            .iter()
            .any(|o| o.tag == key && o.value == value)
        {
            return Ok(());
        }
        Err(Refusal::Denied(format!(
            "cloud list-instances of instances tagged {}={} is not granted: add {{ tag = {:?}, value = {:?} }} to instances in {}",
            crate::shown(key),
            crate::shown(value),
            crate::shown(key),
            crate::shown(value),
            Self::table(plugin)
        )))
    }

    /// May `plugin` perform `operation` on instance `id`, which carries `tags`
    /// (as the provider reports them)? One granted ownership tag, key and
    /// value, must be among them.
    pub fn check_owned<'a>(
        &self,
        plugin: &str,
        operation: Operation,
        id: &str,
        tags: impl IntoIterator<Item = (&'a str, &'a str)> + Clone,
    ) -> Result<(), Refusal> {
        self.check_operation(plugin, operation, &format!("instance {id}"))?;
        let owned = self.instances.iter().any(|o| {
            tags.clone()
                .into_iter()
                .any(|(k, v)| k == o.tag && v == o.value)
        });
        if owned {
            return Ok(());
        }
        let granted: Vec<String> = self
            .instances
            .iter()
            .map(|o| format!("{}={}", o.tag, o.value))
            .collect();
        Err(Refusal::Denied(format!(
            "cloud {} of instance {id}: it carries none of the ownership tags in instances of {} ({}): only instances tagged by a granted owner are the plugin's",
            operation.name(),
            Self::table(plugin),
            if granted.is_empty() {
                "none granted".to_string()
            } else {
                granted.join(", ")
            }
        )))
    }

    /// May `plugin` perform `operation` on security group `id`?
    pub fn check_group(&self, plugin: &str, operation: Operation, id: &str) -> Result<(), Refusal> {
        check_group_id(id)?;
        self.check_operation(plugin, operation, &format!("security group {id}"))?;
        if self.security_groups.iter().any(|g| g.0 == id) {
            return Ok(());
        }
        Err(Refusal::Denied(format!(
            "cloud {} of security group {id} is not granted: add {id:?} to security-groups in {}",
            operation.name(),
            Self::table(plugin)
        )))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    Ingress,
    Egress,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EtherType {
    Ipv4,
    Ipv6,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    Any,
    Tcp,
    Udp,
    Icmp,
    Icmpv6,
    Number(u8),
}

impl Protocol {
    /// The IANA protocol number's own name, when it has one here: 6 is tcp.
    fn canonical(self) -> Protocol {
        match self {
            Protocol::Number(6) => Protocol::Tcp,
            Protocol::Number(17) => Protocol::Udp,
            Protocol::Number(1) => Protocol::Icmp,
            Protocol::Number(58) => Protocol::Icmpv6,
            other => other,
        }
    }

    fn has_ports(self) -> bool {
        matches!(self, Protocol::Tcp | Protocol::Udp)
    }

    fn is_icmp(self) -> bool {
        matches!(self, Protocol::Icmp | Protocol::Icmpv6)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Remote {
    Cidr(String),
    Group(String),
}

/// A security group rule, provider-neutral. Descriptions never make two rules
/// different.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleSpec {
    pub direction: Direction,
    pub ether_type: EtherType,
    pub protocol: Protocol,
    /// min..=max ports (tcp, udp) or ICMP type and code; None: all of them.
    pub ports: Option<(u16, u16)>,
    pub remote: Remote,
}

impl RuleSpec {
    /// The one form equal rules share: protocol numbers by name, a tcp/udp
    /// range covering every port as None, a CIDR with its host bits cleared
    /// and lower case. A tcp/22 rule stays tcp/22: never "tcp".
    pub fn normalized(&self) -> RuleSpec {
        let protocol = self.protocol.canonical();
        let ports = match (protocol.has_ports(), self.ports) {
            (true, Some((0 | 1, 65535))) => None,
            (_, ports) => ports,
        };
        let remote = match &self.remote {
            Remote::Cidr(cidr) => Remote::Cidr(canonical_cidr(cidr).unwrap_or(cidr.to_lowercase())),
            Remote::Group(id) => Remote::Group(id.clone()),
        };
        RuleSpec {
            direction: self.direction,
            ether_type: self.ether_type,
            protocol,
            ports,
            remote,
        }
    }

    /// Whether `self` and `other` are the same rule.
    pub fn same(&self, other: &RuleSpec) -> bool {
        self.normalized() == other.normalized()
    }

    /// The rule in the words of the journal, the SDK fake's actions and
    /// plugin messages: "ingress ipv4 tcp 22-22 from 10.244.0.0/16",
    /// "egress ipv6 icmpv6 type 128 code 0 from group sg-1".
    pub fn describe(&self) -> String {
        let direction = match self.direction {
            Direction::Ingress => "ingress",
            Direction::Egress => "egress",
        };
        let ether = match self.ether_type {
            EtherType::Ipv4 => "ipv4",
            EtherType::Ipv6 => "ipv6",
        };
        let protocol = match self.protocol {
            Protocol::Any => "any".to_string(),
            Protocol::Tcp => "tcp".to_string(),
            Protocol::Udp => "udp".to_string(),
            Protocol::Icmp => "icmp".to_string(),
            Protocol::Icmpv6 => "icmpv6".to_string(),
            Protocol::Number(n) => format!("protocol {n}"),
        };
        let ports = match (self.protocol.is_icmp(), self.ports) {
            (_, None) => String::new(),
            (true, Some((kind, code))) => format!(" type {kind} code {code}"),
            (false, Some((min, max))) => format!(" {min}-{max}"),
        };
        let remote = match &self.remote {
            Remote::Cidr(cidr) => crate::shown(cidr).into_owned(),
            Remote::Group(id) => format!("group {}", crate::shown(id)),
        };
        format!("{direction} {ether} {protocol}{ports} from {remote}")
    }

    /// Is this a rule a provider can hold? Ports only for tcp, udp and ICMP
    /// (min <= max for tcp and udp; ICMP type and code up to 255), a CIDR of
    /// the rule's ether type, a group of its ID shape, a description of
    /// bounded printable text.
    pub fn check(&self, description: Option<&str>) -> Result<(), Refusal> {
        let invalid = |why: String| Err(Refusal::Invalid(format!("cloud rule: {why}")));
        let protocol = self.protocol.canonical();
        match (protocol, self.ports) {
            (_, None) => {}
            (p, Some((min, max))) if p.has_ports() => {
                if min > max {
                    return invalid(format!(
                        "the port range {min}-{max} is empty: expected min <= max, for example 22-22"
                    ));
                }
            }
            (p, Some((kind, code))) if p.is_icmp() => {
                if kind > 255 || code > 255 {
                    return invalid(format!(
                        "ICMP type {kind} and code {code}: expected both at most 255"
                    ));
                }
            }
            (_, Some(_)) => {
                return invalid(
                    "ports are only for tcp, udp and ICMP: leave them out for other protocols"
                        .into(),
                );
            }
        }
        match (self.ether_type, protocol) {
            (EtherType::Ipv4, Protocol::Icmpv6) => {
                return invalid("icmpv6 in an IPv4 rule: use icmp, or ether type ipv6".into());
            }
            (EtherType::Ipv6, Protocol::Icmp) => {
                return invalid("icmp in an IPv6 rule: use icmpv6, or ether type ipv4".into());
            }
            _ => {}
        }
        match &self.remote {
            Remote::Cidr(cidr) => match parse_cidr(cidr) {
                Some((ether, _)) if ether == self.ether_type => {}
                Some(_) => {
                    return invalid(format!(
                        "the CIDR {:?} is not of the rule's ether type ({:?})",
                        crate::shown(cidr),
                        self.ether_type
                    ));
                }
                None => {
                    return invalid(format!(
                        "{:?} is not a CIDR: expected for example \"10.244.0.0/16\" or \"fd00:10:244::/56\"",
                        crate::shown(cidr)
                    ));
                }
            },
            Remote::Group(id) => check_group_id(id)?,
        }
        if let Some(text) = description {
            check_text("cloud rule description", text, MAX_NAME, true)?;
        }
        Ok(())
    }
}

/// The address family and prefix length of `text` ("10.0.0.0/8").
fn parse_cidr(text: &str) -> Option<(EtherType, u8)> {
    let (address, prefix) = text.split_once('/')?;
    let prefix: u8 = prefix.parse().ok()?;
    match address.parse::<std::net::IpAddr>().ok()? {
        std::net::IpAddr::V4(_) if prefix <= 32 => Some((EtherType::Ipv4, prefix)),
        std::net::IpAddr::V6(_) if prefix <= 128 => Some((EtherType::Ipv6, prefix)),
        _ => None,
    }
}

/// `text` with its host bits cleared, as providers store it: "10.244.1.0/16"
/// is "10.244.0.0/16", "FD00::/8" is "fd00::/8".
fn canonical_cidr(text: &str) -> Option<String> {
    let (address, prefix) = text.split_once('/')?;
    let prefix: u32 = prefix.parse().ok()?;
    match address.parse::<std::net::IpAddr>().ok()? {
        std::net::IpAddr::V4(a) if prefix <= 32 => {
            let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
            let net = std::net::Ipv4Addr::from(u32::from(a) & mask);
            Some(format!("{net}/{prefix}"))
        }
        std::net::IpAddr::V6(a) if prefix <= 128 => {
            let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
            let net = std::net::Ipv6Addr::from(u128::from(a) & mask);
            Some(format!("{net}/{prefix}"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant() -> CloudGrant {
        serde_json::from_str(
            r#"{"operations": ["list-instances", "delete-instance", "ensure-rule"],
                "instances": [{"tag": "kubernetes.io/cluster/a", "value": "owned"}],
                "security-groups": ["sg-0123456789abcdef0"]}"#,
        )
        .unwrap()
    }

    #[test]
    fn operations_must_be_listed() {
        let err = grant()
            .check_operation("reaper", Operation::AddToGroup, "instance i-01234567")
            .unwrap_err();
        assert_eq!(err.kind(), "denied");
        assert!(
            err.message()
                .contains("add \"add-to-group\" to operations in [plugins.reaper.grants] cloud"),
            "{err}"
        );
    }

    #[test]
    fn listing_needs_the_owner_key_and_value() {
        let g = grant();
        assert!(
            g.check_owner("r", "kubernetes.io/cluster/a", "owned")
                .is_ok()
        );
        let err = g
            .check_owner("r", "kubernetes.io/cluster/a", "shared")
            .unwrap_err();
        assert!(
            err.message().contains(
                "add { tag = \"kubernetes.io/cluster/a\", value = \"shared\" } to instances"
            ),
            "{err}"
        );
        // Pool "ab" is not pool "a": no prefix ever matches.
        assert_eq!(
            g.check_owner("r", "kubernetes.io/cluster/ab", "owned")
                .unwrap_err()
                .kind(),
            "denied"
        );
        assert_eq!(
            g.check_owner("r", "k\nx", "owned").unwrap_err().kind(),
            "invalid"
        );
    }

    #[test]
    fn an_instance_is_the_plugins_only_by_a_granted_tag() {
        let g = grant();
        let owned = [("Name", "x"), ("kubernetes.io/cluster/a", "owned")];
        assert!(
            g.check_owned("r", Operation::DeleteInstance, "i-01234567", owned)
                .is_ok()
        );
        for tags in [
            vec![("kubernetes.io/cluster/ab", "owned")],
            vec![("kubernetes.io/cluster/a", "shared")],
            vec![("Name", "kubernetes.io/cluster/a")],
            vec![],
        ] {
            let err = g
                .check_owned("r", Operation::DeleteInstance, "i-01234567", tags.clone())
                .unwrap_err();
            assert_eq!(err.kind(), "denied", "{tags:?}");
            assert!(
                err.message().contains("kubernetes.io/cluster/a=owned"),
                "{err}"
            );
        }
        assert!(
            g.check_owned("r", Operation::AddToGroup, "i-01234567", owned)
                .unwrap_err()
                .message()
                .contains("\"add-to-group\"")
        );
    }

    #[test]
    fn groups_by_granted_id() {
        let g = grant();
        assert!(
            g.check_group("r", Operation::EnsureRule, "sg-0123456789abcdef0")
                .is_ok()
        );
        let err = g
            .check_group("r", Operation::EnsureRule, "sg-0123456789abcdef1")
            .unwrap_err();
        assert!(
            err.message()
                .contains("add \"sg-0123456789abcdef1\" to security-groups"),
            "{err}"
        );
        assert_eq!(
            g.check_group("r", Operation::EnsureRule, "sg-1/rules")
                .unwrap_err()
                .kind(),
            "invalid"
        );
    }

    #[test]
    fn a_grant_with_a_bad_group_or_owner_is_a_config_error() {
        let err = serde_json::from_str::<CloudGrant>(r#"{"security-groups": ["default"]}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("security group id \"default\""), "{err}");
        let err = serde_json::from_str::<CloudGrant>(r#"{"instances": [{"tag": ""}]}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("value"), "{err}");
    }

    fn rule(protocol: Protocol, ports: Option<(u16, u16)>, cidr: &str) -> RuleSpec {
        RuleSpec {
            direction: Direction::Ingress,
            ether_type: if cidr.contains(':') {
                EtherType::Ipv6
            } else {
                EtherType::Ipv4
            },
            protocol,
            ports,
            remote: Remote::Cidr(cidr.into()),
        }
    }

    #[test]
    fn equality_includes_the_full_port_range() {
        let all_tcp = rule(Protocol::Tcp, None, "10.244.0.0/16");
        assert!(all_tcp.same(&rule(Protocol::Tcp, Some((1, 65535)), "10.244.0.0/16")));
        assert!(all_tcp.same(&rule(
            Protocol::Number(6),
            Some((0, 65535)),
            "10.244.0.0/16"
        )));
        assert!(all_tcp.same(&rule(Protocol::Tcp, None, "10.244.3.7/16")));
        assert!(!all_tcp.same(&rule(Protocol::Tcp, Some((22, 22)), "10.244.0.0/16")));
        assert!(!all_tcp.same(&rule(Protocol::Udp, None, "10.244.0.0/16")));
        assert!(!all_tcp.same(&rule(Protocol::Tcp, None, "10.245.0.0/16")));
        let v6 = rule(Protocol::Icmpv6, None, "FD00:10:244::/56");
        assert!(v6.same(&rule(Protocol::Number(58), None, "fd00:10:244::/56")));
        let egress = RuleSpec {
            direction: Direction::Egress,
            ..all_tcp.clone()
        };
        assert!(!all_tcp.same(&egress));
    }

    #[test]
    fn a_rule_in_words() {
        assert_eq!(
            rule(Protocol::Tcp, Some((22, 22)), "10.244.0.0/16").describe(),
            "ingress ipv4 tcp 22-22 from 10.244.0.0/16"
        );
        let ping = RuleSpec {
            direction: Direction::Egress,
            remote: Remote::Group("sg-01234567".into()),
            ..rule(Protocol::Icmpv6, Some((128, 0)), "fd00::/8")
        };
        assert_eq!(
            ping.describe(),
            "egress ipv6 icmpv6 type 128 code 0 from group sg-01234567"
        );
    }

    #[test]
    fn malformed_rules_are_invalid() {
        for (bad, why) in [
            (rule(Protocol::Tcp, Some((23, 22)), "10.0.0.0/8"), "empty"),
            (rule(Protocol::Any, Some((1, 2)), "10.0.0.0/8"), "only for"),
            (rule(Protocol::Icmp, Some((256, 0)), "10.0.0.0/8"), "255"),
            (rule(Protocol::Icmp, None, "fd00::/8"), "icmpv6"),
            (rule(Protocol::Tcp, None, "10.0.0.0/33"), "not a CIDR"),
            (rule(Protocol::Tcp, None, "10.0.0.0"), "not a CIDR"),
            (
                RuleSpec {
                    ether_type: EtherType::Ipv6,
                    ..rule(Protocol::Tcp, None, "10.0.0.0/8")
                },
                "ether type",
            ),
            (
                RuleSpec {
                    remote: Remote::Group("sg-1/x".into()),
                    ..rule(Protocol::Tcp, None, "10.0.0.0/8")
                },
                "security group id",
            ),
        ] {
            let err = bad.check(None).unwrap_err();
            assert_eq!(err.kind(), "invalid");
            assert!(err.message().contains(why), "{why}: {err}");
        }
        assert!(
            rule(Protocol::Tcp, None, "10.0.0.0/8")
                .check(Some("bad\ndescription"))
                .is_err()
        );
        assert!(
            rule(Protocol::Icmp, Some((8, 0)), "0.0.0.0/0")
                .check(Some("ping"))
                .is_ok()
        );
    }
}
