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

    /// The WIT function it is.
    pub const fn function(self) -> crate::wit::cloud::Function {
        use crate::wit::cloud::Function;
        match self {
            Operation::ListInstances => Function::ListInstances,
            Operation::GetInstance => Function::GetInstance,
            Operation::DeleteInstance => Function::DeleteInstance,
            Operation::ListSecurityGroups => Function::ListSecurityGroups,
            Operation::EnsureRule => Function::EnsureRule,
            Operation::AddToGroup => Function::AddToGroup,
        }
    }

    /// The name in grants, budgets and the journal: "delete-instance".
    pub const fn name(self) -> &'static str {
        self.function().name()
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
    /// The security groups it may read, add rules to and add instances to
    /// (and name as a rule's remote group).
    #[serde(default)]
    pub security_groups: Vec<GroupId>,
    /// The CIDRs a rule's remote may lie in (none: no CIDR rule at all).
    /// "0.0.0.0/0" and "::/0" only when named here.
    #[serde(default)]
    pub remotes: Vec<Cidr>,
    /// The protocols a rule may name; None: tcp, udp, icmp and icmpv6
    /// ("any" and protocol numbers only when listed).
    #[serde(default)]
    pub protocols: Option<Vec<Protocol>>,
    /// The port ranges a tcp or udp rule's range must lie in (none: no tcp
    /// or udp rule; every port only with "1-65535").
    #[serde(default)]
    pub ports: Vec<Ports>,
}

/// The protocols a grant without `protocols` allows.
pub const DEFAULT_PROTOCOLS: [Protocol; 4] = [
    Protocol::Tcp,
    Protocol::Udp,
    Protocol::Icmp,
    Protocol::Icmpv6,
];

/// A CIDR of a grant: "10.244.0.0/16", "fd00:10:244::/56", host bits clear.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub address: std::net::IpAddr,
    pub prefix: u8,
}

impl Cidr {
    /// `text` as a CIDR (host bits may be set: a rule's remote is compared
    /// by its network).
    pub fn parse(text: &str) -> Option<Cidr> {
        let (address, prefix) = text.split_once('/')?;
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) || prefix.len() > 3 {
            return None;
        }
        let prefix: u8 = prefix.parse().ok()?;
        let address: std::net::IpAddr = address.parse().ok()?;
        let bits = if address.is_ipv4() { 32 } else { 128 };
        (prefix <= bits).then(|| Cidr { address, prefix }.network())
    }

    /// The same prefix with the host bits cleared.
    fn network(self) -> Cidr {
        let address = match self.address {
            std::net::IpAddr::V4(a) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                std::net::Ipv4Addr::from(u32::from(a) & mask).into()
            }
            std::net::IpAddr::V6(a) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                std::net::Ipv6Addr::from(u128::from(a) & mask).into()
            }
        };
        Cidr { address, ..self }
    }

    /// Whether every address of `inner` is one of this CIDR's (same family).
    pub fn contains(&self, inner: &Cidr) -> bool {
        self.address.is_ipv4() == inner.address.is_ipv4()
            && inner.prefix >= self.prefix
            && Cidr {
                prefix: self.prefix,
                ..*inner
            }
            .network()
                == *self
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix)
    }
}

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let Some(cidr) = Cidr::parse(&text) else {
            return Err(D::Error::custom(format!(
                "{:?} is not a CIDR: expected for example \"10.244.0.0/16\" or \"fd00:10:244::/56\"",
                crate::shown(&text)
            )));
        };
        let given = text.split_once('/').and_then(|(a, _)| a.parse().ok());
        if given != Some(cidr.address) {
            return Err(D::Error::custom(format!(
                "the CIDR {:?} has host bits set: write its network, \"{cidr}\"",
                crate::shown(&text)
            )));
        }
        Ok(cidr)
    }
}

/// A port range of a grant: "22", "30000-32767", or a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    pub min: u16,
    pub max: u16,
}

impl Ports {
    fn parse(text: &str) -> Option<Ports> {
        let (min, max) = text.split_once('-').unwrap_or((text, text));
        let ports = Ports {
            min: min.trim().parse().ok()?,
            max: max.trim().parse().ok()?,
        };
        (ports.min <= ports.max).then_some(ports)
    }
}

impl std::fmt::Display for Ports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.min, self.max)
    }
}

impl<'de> Deserialize<'de> for Ports {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u16),
            Text(String),
        }
        let text = match Raw::deserialize(d)? {
            Raw::Number(n) => n.to_string(),
            Raw::Text(text) => text,
        };
        Ports::parse(&text).ok_or_else(|| {
            D::Error::custom(format!(
                "{:?} is not a port range: expected \"22\" or \"30000-32767\" (min <= max, at most 65535), \"1-65535\" for every port",
                crate::shown(&text)
            ))
        })
    }
}

impl<'de> Deserialize<'de> for Protocol {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u8),
            Text(String),
        }
        let protocol = match Raw::deserialize(d)? {
            Raw::Number(n) => Protocol::Number(n),
            Raw::Text(text) => match text.as_str() {
                "any" => Protocol::Any,
                "tcp" => Protocol::Tcp,
                "udp" => Protocol::Udp,
                "icmp" => Protocol::Icmp,
                "icmpv6" => Protocol::Icmpv6,
                other => {
                    return Err(D::Error::custom(format!(
                        "unknown protocol {:?}: expected \"tcp\", \"udp\", \"icmp\", \"icmpv6\", \"any\" or a protocol number (0-255)",
                        crate::shown(other)
                    )));
                }
            },
        };
        Ok(protocol.canonical())
    }
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

impl CloudGrant {
    /// This grant with `other`'s added (the SDK fakes' repeated grants): an
    /// absent `protocols` counts as [`DEFAULT_PROTOCOLS`].
    pub fn extend(&mut self, other: &CloudGrant) {
        self.operations.extend(other.operations.iter().copied());
        self.instances.extend(other.instances.iter().cloned());
        self.security_groups
            .extend(other.security_groups.iter().cloned());
        self.remotes.extend(other.remotes.iter().copied());
        self.ports.extend(other.ports.iter().copied());
        if let Some(more) = &other.protocols {
            let mut protocols = self.granted_protocols().to_vec();
            protocols.extend(more.iter().copied());
            self.protocols = Some(protocols);
        }
    }

    fn granted_protocols(&self) -> &[Protocol] {
        self.protocols.as_deref().unwrap_or(&DEFAULT_PROTOCOLS)
    }

    /// May `plugin` add `rule` to `group_id`? A rule is part of the grant:
    /// its remote CIDR inside one of `remotes` (a remote group among
    /// `security-groups`), its protocol among `protocols`, a tcp or udp
    /// rule's ports inside one of `ports`. "0.0.0.0/0", "::/0", "any"
    /// protocol and every port pass only when a grant names them. The rule
    /// passed [`RuleSpec::check`] first.
    pub fn check_rule(&self, plugin: &str, group_id: &str, rule: &RuleSpec) -> Result<(), Refusal> {
        let rule = rule.normalized();
        let denied = |why: String, fix: String| {
            Err(Refusal::Denied(format!(
                "cloud ensure-rule of {} into security group {group_id}: {why}: {fix} in {}",
                rule.describe(),
                Self::table(plugin)
            )))
        };
        let listed = |items: Vec<String>| match items.is_empty() {
            true => "none granted".to_string(),
            false => items.join(", "),
        };
        match &rule.remote {
            Remote::Cidr(text) => {
                let cidr = Cidr::parse(text);
                if !cidr.is_some_and(|c| self.remotes.iter().any(|r| r.contains(&c))) {
                    let granted = listed(self.remotes.iter().map(Cidr::to_string).collect());
                    return denied(
                        format!(
                            "the remote {} lies inside none of remotes ({granted})",
                            crate::shown(text)
                        ),
                        format!(
                            "narrow the rule, or add {:?} to remotes",
                            crate::shown(text)
                        ),
                    );
                }
            }
            Remote::Group(id) => {
                if !self.security_groups.iter().any(|g| &g.0 == id) {
                    return denied(
                        format!("the remote group {} is not granted", crate::shown(id)),
                        format!("add {:?} to security-groups", crate::shown(id)),
                    );
                }
            }
        }
        if !self.granted_protocols().contains(&rule.protocol) {
            let granted = listed(self.granted_protocols().iter().map(|p| p.name()).collect());
            let name = rule.protocol.name();
            return denied(
                format!("protocol {name} is not among protocols ({granted})"),
                format!("add {name:?} to protocols"),
            );
        }
        if rule.protocol.has_ports() {
            let (min, max) = rule.ports.unwrap_or((1, 65535));
            if !self.ports.iter().any(|p| p.min <= min && max <= p.max) {
                let granted = listed(self.ports.iter().map(Ports::to_string).collect());
                return denied(
                    format!("ports {min}-{max} lie inside none of ports ({granted})"),
                    format!("narrow the rule, or add \"{min}-{max}\" to ports"),
                );
            }
        }
        Ok(())
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
    /// The name in grants and rule descriptions: "tcp", "any", "47".
    pub fn name(self) -> String {
        match self {
            Protocol::Any => "any".into(),
            Protocol::Tcp => "tcp".into(),
            Protocol::Udp => "udp".into(),
            Protocol::Icmp => "icmp".into(),
            Protocol::Icmpv6 => "icmpv6".into(),
            Protocol::Number(n) => n.to_string(),
        }
    }

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

/// The one conversion of the WIT `rule` record to a [`RuleSpec`]. The host's
/// binding (wasmtime's bindgen) and the SDK's (wit-bindgen) are different
/// Rust types of the same record, and this crate depends on neither, so the
/// conversion is written once here and expanded beside each binding:
/// `rule_spec_of!(cloud)`, with `cloud` the binding's module of the
/// interface in scope, defines `fn rule_spec(rule: &cloud::Rule) -> RuleSpec`.
#[macro_export]
macro_rules! rule_spec_of {
    ($wit:ident) => {
        /// The WIT rule as the rules crate sees it (what "the same rule"
        /// compares; the description never counts).
        pub(crate) fn rule_spec(rule: &$wit::Rule) -> $crate::cloud::RuleSpec {
            use $crate::cloud as rules;
            rules::RuleSpec {
                direction: match rule.direction {
                    $wit::Direction::Ingress => rules::Direction::Ingress,
                    $wit::Direction::Egress => rules::Direction::Egress,
                },
                ether_type: match rule.ether_type {
                    $wit::EtherType::Ipv4 => rules::EtherType::Ipv4,
                    $wit::EtherType::Ipv6 => rules::EtherType::Ipv6,
                },
                protocol: match rule.protocol {
                    $wit::Protocol::Any => rules::Protocol::Any,
                    $wit::Protocol::Tcp => rules::Protocol::Tcp,
                    $wit::Protocol::Udp => rules::Protocol::Udp,
                    $wit::Protocol::Icmp => rules::Protocol::Icmp,
                    $wit::Protocol::Icmpv6 => rules::Protocol::Icmpv6,
                    $wit::Protocol::Number(n) => rules::Protocol::Number(n),
                },
                ports: rule.ports.map(|p| (p.min, p.max)),
                remote: match &rule.remote {
                    $wit::Remote::Cidr(cidr) => rules::Remote::Cidr(cidr.clone()),
                    $wit::Remote::Group(id) => rules::Remote::Group(id.clone()),
                },
            }
        }
    };
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

    /// What both bindings generate for the WIT's `rule` (same names, same
    /// shapes), for the one conversion; only some cases are built.
    #[allow(dead_code)]
    mod cloud {
        pub enum Direction {
            Ingress,
            Egress,
        }
        pub enum EtherType {
            Ipv4,
            Ipv6,
        }
        pub enum Protocol {
            Any,
            Tcp,
            Udp,
            Icmp,
            Icmpv6,
            Number(u8),
        }
        #[derive(Clone, Copy)]
        pub struct PortRange {
            pub min: u16,
            pub max: u16,
        }
        pub enum Remote {
            Cidr(String),
            Group(String),
        }
        pub struct Rule {
            pub direction: Direction,
            pub ether_type: EtherType,
            pub protocol: Protocol,
            pub ports: Option<PortRange>,
            pub remote: Remote,
        }
    }
    crate::rule_spec_of!(cloud);

    #[test]
    fn the_wit_rule_converts_field_by_field() {
        let rule = cloud::Rule {
            direction: cloud::Direction::Ingress,
            ether_type: cloud::EtherType::Ipv6,
            protocol: cloud::Protocol::Number(132),
            ports: Some(cloud::PortRange { min: 1, max: 2 }),
            remote: cloud::Remote::Group("sg-1".into()),
        };
        assert_eq!(
            rule_spec(&rule),
            RuleSpec {
                direction: Direction::Ingress,
                ether_type: EtherType::Ipv6,
                protocol: Protocol::Number(132),
                ports: Some((1, 2)),
                remote: Remote::Group("sg-1".into()),
            }
        );
    }

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

    fn pod_grant(extra: &str) -> CloudGrant {
        toml::from_str(&format!(
            "security-groups = [\"sg-0123456789abcdef0\", \"sg-0123456789abcdef1\"]\nremotes = [\"10.244.0.0/16\", \"fd00:10:244::/56\"]\n{extra}"
        ))
        .unwrap()
    }

    fn denied(grant: &CloudGrant, rule: &RuleSpec) -> String {
        let err = grant
            .check_rule("guard", "sg-0123456789abcdef0", rule)
            .unwrap_err();
        assert_eq!(err.kind(), "denied", "{err}");
        assert!(
            err.message().ends_with("in [plugins.guard.grants] cloud"),
            "{err}"
        );
        err.message().to_string()
    }

    #[test]
    fn cidrs_contain_by_network_and_family() {
        let c = |t: &str| Cidr::parse(t).unwrap();
        assert!(c("10.244.0.0/16").contains(&c("10.244.3.0/24")));
        assert!(c("10.244.0.0/16").contains(&c("10.244.0.0/16")));
        assert!(c("10.244.0.0/16").contains(&c("10.244.9.9/32")));
        assert!(!c("10.244.0.0/16").contains(&c("10.0.0.0/8")));
        assert!(!c("10.244.0.0/16").contains(&c("10.245.0.0/24")));
        assert!(!c("10.244.0.0/16").contains(&c("0.0.0.0/0")));
        assert!(c("0.0.0.0/0").contains(&c("0.0.0.0/0")));
        assert!(
            !c("0.0.0.0/0").contains(&c("::/0")),
            "IPv4 never holds IPv6"
        );
        assert!(c("fd00:10:244::/56").contains(&c("fd00:10:244:ff::/64")));
        assert!(!c("fd00:10:244::/56").contains(&c("fd00:10:245::/64")));
        assert!(!c("fd00:10:244::/56").contains(&c("::/0")));
        assert!(!c("::ffff:0:0/96").contains(&c("10.0.0.0/8")));
        assert_eq!(c("10.244.1.7/16").to_string(), "10.244.0.0/16");
        for bad in ["10.0.0.0/33", "10.0.0.0", "10.0.0.0/+8", "x/8", "::/129"] {
            assert_eq!(Cidr::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn rule_remotes_must_lie_inside_a_granted_cidr() {
        let g = pod_grant("ports = [\"1-65535\"]");
        let ok = |r: &RuleSpec| g.check_rule("guard", "sg-0123456789abcdef0", r);
        assert!(ok(&rule(Protocol::Tcp, None, "10.244.0.0/16")).is_ok());
        assert!(ok(&rule(Protocol::Tcp, Some((22, 22)), "10.244.7.0/24")).is_ok());
        assert!(ok(&rule(Protocol::Udp, None, "fd00:10:244:1::/64")).is_ok());
        let wider = denied(&g, &rule(Protocol::Tcp, None, "10.0.0.0/8"));
        assert!(
            wider.contains("the remote 10.0.0.0/8 lies inside none of remotes (10.244.0.0/16, fd00:10:244::/56)"),
            "{wider}"
        );
        assert!(wider.contains("add \"10.0.0.0/8\" to remotes"), "{wider}");
        for world in ["0.0.0.0/0", "::/0", "0.0.0.0/1", "fd00::/8"] {
            denied(&g, &rule(Protocol::Tcp, None, world));
        }
        let none = CloudGrant {
            remotes: vec![],
            ..g.clone()
        };
        let err = denied(&none, &rule(Protocol::Tcp, None, "10.244.0.0/16"));
        assert!(err.contains("(none granted)"), "{err}");
        let world: CloudGrant =
            toml::from_str("remotes = [\"0.0.0.0/0\", \"::/0\"]\nprotocols = [\"any\"]").unwrap();
        let any_from_anywhere = rule(Protocol::Any, None, "0.0.0.0/0");
        assert!(
            world
                .check_rule("p", "sg-0123456789abcdef0", &any_from_anywhere)
                .is_ok()
        );
        assert!(
            world
                .check_rule(
                    "p",
                    "sg-0123456789abcdef0",
                    &rule(Protocol::Any, None, "::/0")
                )
                .is_ok()
        );
    }

    #[test]
    fn remote_groups_only_among_the_granted() {
        let g = pod_grant("");
        let from = |id: &str| RuleSpec {
            remote: Remote::Group(id.into()),
            ..rule(Protocol::Icmp, None, "10.244.0.0/16")
        };
        assert!(
            g.check_rule(
                "guard",
                "sg-0123456789abcdef0",
                &from("sg-0123456789abcdef1")
            )
            .is_ok()
        );
        let err = denied(&g, &from("sg-0fedcba987654321f"));
        assert!(
            err.contains("the remote group sg-0fedcba987654321f is not granted: add \"sg-0fedcba987654321f\" to security-groups"),
            "{err}"
        );
    }

    #[test]
    fn protocols_default_to_the_named_four_and_any_needs_naming() {
        let g = pod_grant("ports = [\"1-65535\"]");
        for p in [
            Protocol::Tcp,
            Protocol::Udp,
            Protocol::Icmp,
            Protocol::Number(6),
        ] {
            assert!(
                g.check_rule(
                    "guard",
                    "sg-0123456789abcdef0",
                    &rule(p, None, "10.244.0.0/16")
                )
                .is_ok()
            );
        }
        let err = denied(&g, &rule(Protocol::Any, None, "10.244.0.0/16"));
        assert!(
            err.contains("protocol any is not among protocols (tcp, udp, icmp, icmpv6): add \"any\" to protocols"),
            "{err}"
        );
        denied(&g, &rule(Protocol::Number(47), None, "10.244.0.0/16"));
        let tcp_only = pod_grant("protocols = [\"tcp\"]\nports = [22]");
        let err = denied(
            &tcp_only,
            &rule(Protocol::Udp, Some((22, 22)), "10.244.0.0/16"),
        );
        assert!(err.contains("(tcp)"), "{err}");
        let gre = pod_grant("protocols = [47, \"any\"]");
        for p in [Protocol::Number(47), Protocol::Any] {
            assert!(
                gre.check_rule("g", "sg-0123456789abcdef0", &rule(p, None, "10.244.0.0/16"))
                    .is_ok()
            );
        }
    }

    #[test]
    fn tcp_and_udp_ports_lie_inside_a_granted_range() {
        let g = pod_grant("ports = [22, \"30000-32767\"]");
        let ok = |r: &RuleSpec| g.check_rule("guard", "sg-0123456789abcdef0", r).is_ok();
        assert!(ok(&rule(Protocol::Tcp, Some((22, 22)), "10.244.0.0/16")));
        assert!(ok(&rule(
            Protocol::Udp,
            Some((30000, 30100)),
            "10.244.0.0/16"
        )));
        assert!(
            ok(&rule(Protocol::Icmp, Some((8, 0)), "10.244.0.0/16")),
            "ICMP has no ports"
        );
        let err = denied(&g, &rule(Protocol::Tcp, Some((22, 23)), "10.244.0.0/16"));
        assert!(
            err.contains("ports 22-23 lie inside none of ports (22-22, 30000-32767): narrow the rule, or add \"22-23\" to ports"),
            "{err}"
        );
        let every = denied(&g, &rule(Protocol::Tcp, None, "10.244.0.0/16"));
        assert!(every.contains("ports 1-65535"), "{every}");
        denied(
            &pod_grant(""),
            &rule(Protocol::Tcp, Some((22, 22)), "10.244.0.0/16"),
        );
    }

    #[test]
    fn bad_remotes_ports_and_protocols_are_config_errors() {
        for (grant, why) in [
            ("remotes = [\"10.244.0.0/33\"]", "is not a CIDR"),
            (
                "remotes = [\"10.244.1.0/16\"]",
                "host bits set: write its network, \"10.244.0.0/16\"",
            ),
            ("ports = [\"23-22\"]", "is not a port range"),
            ("ports = [\"70000\"]", "is not a port range"),
            ("protocols = [\"sctp\"]", "unknown protocol \"sctp\""),
        ] {
            let err = toml::from_str::<CloudGrant>(grant).unwrap_err().to_string();
            assert!(err.contains(why), "{grant}: {err}");
            assert!(err.contains("line 1"), "{grant}: {err}");
        }
    }

    #[test]
    fn extending_a_grant_keeps_the_default_protocols() {
        let mut g = pod_grant("");
        g.extend(&toml::from_str("protocols = [\"any\"]\nremotes = [\"0.0.0.0/0\"]").unwrap());
        assert_eq!(
            g.protocols.as_deref(),
            Some(
                &[
                    Protocol::Tcp,
                    Protocol::Udp,
                    Protocol::Icmp,
                    Protocol::Icmpv6,
                    Protocol::Any
                ][..]
            )
        );
        assert_eq!(g.remotes.len(), 3);
    }
}
