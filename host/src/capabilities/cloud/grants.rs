//! What a plugin's cloud grant allows: the pure rules live in `tend-rules`
//! (shared with the SDK's fake); here they meet the host's error type and the
//! WIT's rule record.

use super::backend::Rule;
use crate::capabilities::error::CapError;
use crate::wit::cloud;
use tend_rules::cloud as rules;
pub use tend_rules::cloud::{CloudGrant, Operation};

/// Is `id` an instance ID (before any request)?
pub fn check_instance_id(id: &str) -> Result<(), CapError> {
    Ok(rules::check_instance_id(id)?)
}

/// Is `id` a security group ID (before any request)?
pub fn check_group_id(id: &str) -> Result<(), CapError> {
    Ok(rules::check_group_id(id)?)
}

/// Is `name` a security group name to look up?
pub fn check_group_name(name: &str) -> Result<(), CapError> {
    Ok(rules::check_group_name(name)?)
}

/// May `plugin` perform `operation` (on `what`, for the message)?
pub fn check_operation(
    grant: &CloudGrant,
    plugin: &str,
    operation: Operation,
    what: &str,
) -> Result<(), CapError> {
    Ok(grant.check_operation(plugin, operation, what)?)
}

/// May `plugin` list the instances tagged `key` = `value`?
pub fn check_owner(
    grant: &CloudGrant,
    plugin: &str,
    key: &str,
    value: &str,
) -> Result<(), CapError> {
    Ok(grant.check_owner(plugin, key, value)?)
}

/// May `plugin` perform `operation` on instance `id`, which carries `tags`?
pub fn check_owned(
    grant: &CloudGrant,
    plugin: &str,
    operation: Operation,
    id: &str,
    tags: &[(String, String)],
) -> Result<(), CapError> {
    let pairs = tags.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    Ok(grant.check_owned(plugin, operation, id, pairs)?)
}

/// May `plugin` perform `operation` on security group `id`?
pub fn check_group(
    grant: &CloudGrant,
    plugin: &str,
    operation: Operation,
    id: &str,
) -> Result<(), CapError> {
    Ok(grant.check_group(plugin, operation, id)?)
}

/// Is `rule` a rule a provider can hold?
pub fn check_rule(rule: &Rule) -> Result<(), CapError> {
    Ok(rule_spec(rule).check(rule.description.as_deref())?)
}

/// May `plugin` add `rule` to `group_id`: its remote, protocol and ports
/// within the grant ([`CloudGrant::check_rule`])?
pub fn check_rule_granted(
    grant: &CloudGrant,
    plugin: &str,
    group_id: &str,
    rule: &Rule,
) -> Result<(), CapError> {
    Ok(grant.check_rule(plugin, group_id, &rule_spec(rule))?)
}

// The WIT rule as the rules crate sees it: `rule_spec`, written once in the
// rules crate for both bindings.
tend_rules::rule_spec_of!(cloud);

/// A rule in the words of the journal ([`tend_rules::cloud::RuleSpec::describe`]).
pub fn describe_rule(rule: &Rule) -> String {
    rule_spec(rule).describe()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::cloud::{Direction, EtherType, PortRange, Protocol, Remote};

    fn rule(protocol: Protocol, ports: Option<(u16, u16)>, remote: Remote) -> Rule {
        Rule {
            direction: Direction::Ingress,
            ether_type: EtherType::Ipv4,
            protocol,
            ports: ports.map(|(min, max)| PortRange { min, max }),
            remote,
            description: None,
        }
    }

    #[test]
    fn refusals_become_capability_errors() {
        let grant: CloudGrant = toml::from_str(
            "operations = [\"ensure-rule\"]\nsecurity-groups = [\"sg-0123456789abcdef0\"]",
        )
        .unwrap();
        assert!(check_group(&grant, "p", Operation::EnsureRule, "sg-0123456789abcdef0").is_ok());
        let err = check_group(&grant, "p", Operation::AddToGroup, "sg-0123456789abcdef0");
        assert_eq!(err.unwrap_err().kind(), "denied");
        assert_eq!(check_instance_id("i-1/../x").unwrap_err().kind(), "invalid");
        let tcp_all = rule(
            Protocol::Tcp,
            Some((1, 65535)),
            Remote::Cidr("10.244.0.0/16".into()),
        );
        assert!(check_rule(&tcp_all).is_ok());
        let backwards = rule(
            Protocol::Tcp,
            Some((22, 1)),
            Remote::Cidr("10.0.0.0/8".into()),
        );
        assert_eq!(check_rule(&backwards).unwrap_err().kind(), "invalid");
    }

    #[test]
    fn rules_are_described_as_given() {
        let tcp_all = rule(
            Protocol::Tcp,
            Some((1, 65535)),
            Remote::Cidr("10.244.0.0/16".into()),
        );
        assert_eq!(
            describe_rule(&tcp_all),
            "ingress ipv4 tcp 1-65535 from 10.244.0.0/16"
        );
        let ping = rule(
            Protocol::Icmp,
            Some((8, 0)),
            Remote::Group("sg-0123456789abcdef0".into()),
        );
        assert_eq!(
            describe_rule(&ping),
            "ingress ipv4 icmp type 8 code 0 from group sg-0123456789abcdef0"
        );
        assert_eq!(
            describe_rule(&rule(
                Protocol::Number(47),
                None,
                Remote::Cidr("0.0.0.0/0".into())
            )),
            "ingress ipv4 protocol 47 from 0.0.0.0/0"
        );
    }
}
