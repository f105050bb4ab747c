//! What the group must hold, with no I/O: the rules for the pod CIDRs and the
//! operator's extra rules, the ones missing from the group, the pod CIDRs
//! kubeadm recorded, and the instances outside the group.

use serde::Deserialize;
use tend_sdk::{Direction, EtherType, Instance, InstanceState, PortRange, Protocol, Remote, Rule};

/// The description of the rules this plugin creates.
pub const DESCRIPTION: &str = "tend secgroup-guard: pod network";

/// The family of `cidr` ("10.244.0.0/16", "fd00:10:244::/56"), if it is one.
pub fn ether_type_of(cidr: &str) -> Option<EtherType> {
    let (address, prefix) = cidr.split_once('/')?;
    let prefix: u8 = prefix.parse().ok()?;
    match address.parse::<std::net::IpAddr>().ok()? {
        std::net::IpAddr::V4(_) if prefix <= 32 => Some(EtherType::Ipv4),
        std::net::IpAddr::V6(_) if prefix <= 128 => Some(EtherType::Ipv6),
        _ => None,
    }
}

/// For each pod CIDR: tcp, udp and icmp (icmpv6 for IPv6), every port, in
/// from the pods and, with `egress`, out to them.
pub fn pod_rules(cidrs: &[String], egress: bool) -> Vec<Rule> {
    let directions: &[Direction] = match egress {
        true => &[Direction::Ingress, Direction::Egress],
        false => &[Direction::Ingress],
    };
    let mut rules = Vec::new();
    for cidr in cidrs {
        let Some(ether_type) = ether_type_of(cidr) else {
            continue;
        };
        let icmp = match ether_type {
            EtherType::Ipv4 => Protocol::Icmp,
            EtherType::Ipv6 => Protocol::Icmpv6,
        };
        for &direction in directions {
            for protocol in [Protocol::Tcp, Protocol::Udp, icmp] {
                rules.push(Rule {
                    direction,
                    ether_type,
                    protocol,
                    ports: None,
                    remote: Remote::Cidr(cidr.clone()),
                    description: Some(DESCRIPTION.into()),
                });
            }
        }
    }
    rules
}

/// The rules of `desired` the group has no same rule for (the full port
/// range counts: a tcp/22 rule is not "tcp").
pub fn missing<'a>(desired: &'a [Rule], present: &[Rule]) -> Vec<&'a Rule> {
    (desired.iter())
        .filter(|want| !present.iter().any(|have| have.same(want)))
        .collect()
}

/// Running instances that are not members of `group_id`.
pub fn outside<'a>(instances: &'a [Instance], group_id: &str) -> Vec<&'a Instance> {
    (instances.iter())
        .filter(|i| i.state == InstanceState::Running)
        .filter(|i| !i.security_groups.iter().any(|g| g == group_id))
        .collect()
}

/// The pod CIDRs of kubeadm's `ClusterConfiguration` (YAML text):
/// `networking.podSubnet`, comma-separated when dual-stack.
pub fn kubeadm_pod_cidrs(cluster_configuration: &str) -> Vec<String> {
    let mut in_networking = false;
    for line in cluster_configuration.lines() {
        if !line.starts_with(' ') && !line.trim().is_empty() {
            in_networking = line.trim_end() == "networking:";
            continue;
        }
        let Some(value) = (line.trim())
            .strip_prefix("podSubnet:")
            .filter(|_| in_networking)
        else {
            continue;
        };
        let value = value.trim().trim_matches(|c| c == '"' || c == '\'');
        return value
            .split(',')
            .map(|cidr| cidr.trim().to_string())
            .filter(|cidr| !cidr.is_empty())
            .collect();
    }
    vec![]
}

/// An operator's extra rule: `{ protocol = "tcp", ports = "30000-32767",
/// cidr = "10.0.0.0/8" }`; `direction` defaults to "ingress", `ports` to
/// every port; `group` (a security group ID) instead of `cidr` needs
/// `ether-type` ("ipv4", the default, or "ipv6").
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ExtraRule {
    #[serde(default)]
    direction: DirectionName,
    protocol: String,
    ports: Option<String>,
    cidr: Option<String>,
    group: Option<String>,
    ether_type: Option<EtherTypeName>,
    description: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum DirectionName {
    #[default]
    Ingress,
    Egress,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum EtherTypeName {
    Ipv4,
    Ipv6,
}

impl ExtraRule {
    /// The rule it declares, checked as the host checks rules.
    pub fn rule(&self) -> Result<Rule, String> {
        let protocol = match self.protocol.as_str() {
            "any" => Protocol::Any,
            "tcp" => Protocol::Tcp,
            "udp" => Protocol::Udp,
            "icmp" => Protocol::Icmp,
            "icmpv6" => Protocol::Icmpv6,
            number => Protocol::Number(number.parse().map_err(|_| {
                format!(
                    "protocol {number:?}: expected tcp, udp, icmp, icmpv6, any or a protocol number"
                )
            })?),
        };
        let ports = match &self.ports {
            None => None,
            Some(text) => Some(parse_ports(text)?),
        };
        let (remote, ether_type) = match (&self.cidr, &self.group) {
            (Some(cidr), None) => {
                let family = ether_type_of(cidr).ok_or_else(|| {
                    format!("cidr {cidr:?}: expected a CIDR such as \"10.0.0.0/8\"")
                })?;
                (Remote::Cidr(cidr.clone()), family)
            }
            (None, Some(group)) => {
                let family = match self.ether_type {
                    Some(EtherTypeName::Ipv6) => EtherType::Ipv6,
                    _ => EtherType::Ipv4,
                };
                (Remote::Group(group.clone()), family)
            }
            _ => return Err("set exactly one of cidr and group".into()),
        };
        let rule = Rule {
            direction: match self.direction {
                DirectionName::Ingress => Direction::Ingress,
                DirectionName::Egress => Direction::Egress,
            },
            ether_type,
            protocol,
            ports,
            remote,
            description: self.description.clone().or(Some(DESCRIPTION.into())),
        };
        rule.check().map_err(|e| e.message().to_string())?;
        Ok(rule)
    }
}

/// "22" or "30000-32767".
fn parse_ports(text: &str) -> Result<PortRange, String> {
    let port = |p: &str| {
        (p.trim().parse::<u16>()).map_err(|_| {
            format!("ports {text:?}: expected a port or a range such as \"30000-32767\"")
        })
    };
    let (min, max) = match text.split_once('-') {
        Some((min, max)) => (port(min)?, port(max)?),
        None => (port(text)?, port(text)?),
    };
    Ok(PortRange { min, max })
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn pod_cidrs_of_both_families_get_tcp_udp_and_their_icmp() {
        let cidrs = ["10.244.0.0/16".to_string(), "fd00:10:244::/56".to_string()];
        let rules = pod_rules(&cidrs, false);
        let described: Vec<String> = rules.iter().map(Rule::describe).collect();
        assert_eq!(
            described,
            [
                "ingress ipv4 tcp from 10.244.0.0/16",
                "ingress ipv4 udp from 10.244.0.0/16",
                "ingress ipv4 icmp from 10.244.0.0/16",
                "ingress ipv6 tcp from fd00:10:244::/56",
                "ingress ipv6 udp from fd00:10:244::/56",
                "ingress ipv6 icmpv6 from fd00:10:244::/56",
            ]
        );
        assert!(rules.iter().all(|r| r.check().is_ok()));
        assert_eq!(pod_rules(&cidrs, true).len(), 12);
    }

    #[test]
    fn a_port_limited_rule_does_not_count_as_every_port() {
        let desired = [tcp(None)];
        assert_eq!(missing(&desired, &[tcp(Some((22, 22)))]).len(), 1);
        assert!(missing(&desired, &[tcp(Some((1, 65535)))]).is_empty());
        let other = Rule {
            remote: Remote::Cidr("10.244.7.0/16".into()),
            ..tcp(None)
        };
        assert!(
            missing(&desired, &[other]).is_empty(),
            "host bits do not matter"
        );
    }

    #[test]
    fn running_instances_outside_the_group_need_adding() {
        let member = Instance {
            security_groups: vec!["sg-0123456789abcdef0".into()],
            ..Instance::new("i-0000000000000000a", "a", InstanceState::Running)
        };
        let outsider = Instance::new("i-0000000000000000b", "b", InstanceState::Running);
        let stopped = Instance::new("i-0000000000000000c", "c", InstanceState::Stopped);
        let instances = [member, outsider, stopped];
        let outside = outside(&instances, "sg-0123456789abcdef0");
        assert_eq!(outside.len(), 1);
        assert_eq!(outside[0].name, "b");
    }

    #[test]
    fn kubeadm_pod_subnets_are_read_from_networking() {
        let config = "apiServer:\n  podSubnet: 1.2.3.0/24\napiVersion: kubeadm.k8s.io/v1beta3\nnetworking:\n  dnsDomain: cluster.local\n  podSubnet: 10.244.0.0/16,fd00:10:244::/56\n  serviceSubnet: 10.96.0.0/12\n";
        assert_eq!(
            kubeadm_pod_cidrs(config),
            ["10.244.0.0/16", "fd00:10:244::/56"]
        );
        assert_eq!(
            kubeadm_pod_cidrs("networking:\n  podSubnet: \"10.1.0.0/16\"\n"),
            ["10.1.0.0/16"]
        );
        assert!(kubeadm_pod_cidrs("networking:\n  dnsDomain: x\n").is_empty());
    }

    #[test]
    fn extra_rules_are_parsed_and_checked() {
        let parse = |json: &str| serde_json::from_str::<ExtraRule>(json).unwrap().rule();
        let rule =
            parse(r#"{"protocol": "tcp", "ports": "30000-32767", "cidr": "0.0.0.0/0"}"#).unwrap();
        assert_eq!(
            rule.describe(),
            "ingress ipv4 tcp 30000-32767 from 0.0.0.0/0"
        );
        let rule =
            parse(r#"{"direction": "egress", "protocol": "4", "group": "sg-0123456789abcdef0"}"#)
                .unwrap();
        assert_eq!(
            rule.describe(),
            "egress ipv4 protocol 4 from group sg-0123456789abcdef0"
        );
        for (bad, why) in [
            (
                r#"{"protocol": "tcp", "ports": "23-22", "cidr": "10.0.0.0/8"}"#,
                "empty",
            ),
            (
                r#"{"protocol": "sctp", "cidr": "10.0.0.0/8"}"#,
                "protocol number",
            ),
            (r#"{"protocol": "tcp"}"#, "exactly one"),
            (
                r#"{"protocol": "tcp", "ports": "x", "cidr": "10.0.0.0/8"}"#,
                "expected a port",
            ),
            (r#"{"protocol": "icmp", "cidr": "fd00::/8"}"#, "icmpv6"),
        ] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }
}
