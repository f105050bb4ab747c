//! Nova servers and Neutron ports, groups and rules as the APIs answer them,
//! and their mapping to the provider-neutral WIT records.

use crate::capabilities::cloud::backend::{
    Direction, EtherType, Instance, InstanceState, Protocol, Remote, Rule, SecurityGroup,
};
use crate::capabilities::cloud::grants::rule_spec;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;

#[derive(Debug, Deserialize)]
pub struct Server {
    pub id: String,
    #[serde(default)]
    pub name: String,
    pub status: String,
    #[serde(rename = "OS-EXT-STS:task_state")]
    pub task_state: Option<String>,
    #[serde(rename = "OS-EXT-AZ:availability_zone")]
    pub zone: Option<String>,
    pub created: String,
    #[serde(default)]
    pub addresses: BTreeMap<String, Vec<Address>>,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
pub struct Address {
    pub addr: String,
    #[serde(rename = "OS-EXT-IPS:type")]
    pub kind: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Port {
    pub id: String,
    #[serde(default)]
    pub device_id: String,
    #[serde(default)]
    pub security_groups: Vec<String>,
    pub revision_number: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub struct Group {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub security_group_rules: Vec<NeutronRule>,
}

#[derive(Debug, Deserialize)]
pub struct NeutronRule {
    pub direction: String,
    pub ethertype: String,
    pub protocol: Option<String>,
    pub port_range_min: Option<u16>,
    pub port_range_max: Option<u16>,
    pub remote_ip_prefix: Option<String>,
    pub remote_group_id: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
}

/// The WIT state of a Nova status and task (see the WIT enum's docs).
pub fn state(status: &str, task_state: Option<&str>) -> InstanceState {
    match (status, task_state) {
        (_, Some("deleting")) => InstanceState::Deleting,
        ("DELETED" | "SOFT_DELETED", _) => InstanceState::Terminated,
        (_, Some(task)) if task.starts_with("reboot") => InstanceState::Rebooting,
        ("BUILD", _) => InstanceState::Pending,
        ("ACTIVE", _) => InstanceState::Running,
        ("REBOOT" | "HARD_REBOOT", _) => InstanceState::Rebooting,
        ("SHUTOFF" | "SUSPENDED" | "PAUSED", _) => InstanceState::Stopped,
        ("ERROR", _) => InstanceState::Error,
        _ => InstanceState::Unknown,
    }
}

/// Milliseconds since the epoch of a Nova timestamp ("2026-11-25T10:00:00Z").
pub fn millis(text: &str) -> Option<i64> {
    let text = text
        .strip_suffix("+00:00")
        .map_or(text.to_string(), |t| format!("{t}Z"));
    let text = if text.ends_with('Z') {
        text
    } else {
        format!("{text}Z")
    };
    let at = humantime::parse_rfc3339(&text).ok()?;
    let since = at.duration_since(std::time::UNIX_EPOCH).ok()?;
    i64::try_from(since.as_millis()).ok()
}

/// The instance of `server`, in the groups every one of its ports is in. An unreadable
/// creation time is an error (never "created in 1970": reapers act on age).
pub fn instance(server: Server, ports: &[&Port]) -> Result<Instance, String> {
    let created_at_ms = millis(&server.created).ok_or_else(|| {
        format!(
            "server {} has an unreadable creation time {:?}",
            server.id, server.created
        )
    })?;
    let (mut private, mut public) = (Vec::new(), Vec::new());
    for address in server.addresses.into_values().flatten() {
        match address.kind.as_deref() {
            Some("floating") => public.push(address.addr),
            _ => private.push(address.addr),
        }
    }
    // A group only some ports are in leaves the others open: the server is in
    // the groups every port is in (add-to-group completes the rest).
    let mut groups: Vec<String> = Vec::new();
    let (first, rest) = ports.split_first().map_or((&[][..], &[][..]), |(f, r)| {
        (f.security_groups.as_slice(), r)
    });
    for group in first {
        if !groups.contains(group) && rest.iter().all(|p| p.security_groups.contains(group)) {
            groups.push(group.clone());
        }
    }
    Ok(Instance {
        state: state(&server.status, server.task_state.as_deref()),
        provider_id: format!("openstack:///{}", server.id),
        id: server.id,
        name: server.name,
        status: server.status,
        task_state: server.task_state,
        created_at_ms,
        zone: server.zone.filter(|z| !z.is_empty()),
        private_addresses: private,
        public_addresses: public,
        security_groups: groups,
        tags: server.metadata.into_iter().collect(),
    })
}

/// The protocol names Neutron accepts, with their IANA numbers.
const PROTOCOLS: &[(&str, u8)] = &[
    ("ah", 51),
    ("dccp", 33),
    ("egp", 8),
    ("esp", 50),
    ("gre", 47),
    ("igmp", 2),
    ("ipip", 4),
    ("ipv6-encap", 41),
    ("ipv6-frag", 44),
    ("ipv6-nonxt", 59),
    ("ipv6-opts", 60),
    ("ipv6-route", 43),
    ("ospf", 89),
    ("pgm", 113),
    ("rsvp", 46),
    ("sctp", 132),
    ("udplite", 136),
    ("vrrp", 112),
];

fn protocol(name: Option<&str>) -> Result<Protocol, String> {
    Ok(match name {
        None | Some("any") => Protocol::Any,
        Some("tcp") => Protocol::Tcp,
        Some("udp") => Protocol::Udp,
        Some("icmp") => Protocol::Icmp,
        Some("ipv6-icmp" | "icmpv6") => Protocol::Icmpv6,
        Some(other) => other
            .parse::<u8>()
            .ok()
            .or_else(|| PROTOCOLS.iter().find(|(n, _)| *n == other).map(|(_, n)| *n))
            .map(Protocol::Number)
            .ok_or_else(|| format!("unknown protocol {other:?}"))?,
    })
}

fn rule(r: NeutronRule) -> Result<Rule, String> {
    let ether_type = match r.ethertype.as_str() {
        "IPv4" => EtherType::Ipv4,
        "IPv6" => EtherType::Ipv6,
        other => return Err(format!("unknown ethertype {other:?}")),
    };
    let protocol = protocol(r.protocol.as_deref())?;
    let ports = match (r.port_range_min, r.port_range_max) {
        (Some(min), Some(max)) => Some((min, max)),
        (Some(kind), None) if matches!(protocol, Protocol::Icmp | Protocol::Icmpv6) => {
            Some((kind, 255))
        }
        (Some(port), None) => Some((port, port)),
        _ => None,
    };
    let remote = match (r.remote_group_id, r.remote_ip_prefix) {
        (Some(group), _) => Remote::Group(group),
        (None, Some(prefix)) => Remote::Cidr(prefix),
        (None, None) if ether_type == EtherType::Ipv4 => Remote::Cidr("0.0.0.0/0".into()),
        (None, None) => Remote::Cidr("::/0".into()),
    };
    Ok(Rule {
        direction: match r.direction.as_str() {
            "ingress" => Direction::Ingress,
            "egress" => Direction::Egress,
            other => return Err(format!("unknown direction {other:?}")),
        },
        ether_type,
        protocol,
        ports: ports.map(|(min, max)| crate::capabilities::cloud::PortRange { min, max }),
        remote,
        description: r.description.filter(|d| !d.is_empty()),
    })
}

pub fn group(g: Group) -> Result<SecurityGroup, String> {
    let rules = g
        .security_group_rules
        .into_iter()
        .map(rule)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("security group {}: {e}", g.id))?;
    Ok(SecurityGroup {
        id: g.id,
        name: g.name,
        description: g.description.unwrap_or_default(),
        rules,
    })
}

/// The body of POST security-group-rules: the rule in its normalized form
/// (tcp 1-65535 is every port, host bits cleared), so Neutron's duplicate
/// check sees what [`tend_rules::cloud::RuleSpec::same`] sees.
pub fn rule_request(group_id: &str, r: &Rule) -> Value {
    use tend_rules::cloud as rules;
    let s = rule_spec(r).normalized();
    let protocol = match s.protocol {
        rules::Protocol::Any => Value::Null,
        rules::Protocol::Tcp => json!("tcp"),
        rules::Protocol::Udp => json!("udp"),
        rules::Protocol::Icmp => json!("icmp"),
        rules::Protocol::Icmpv6 => json!("ipv6-icmp"),
        rules::Protocol::Number(n) => json!(n.to_string()),
    };
    let mut body = json!({
        "security_group_id": group_id,
        "direction": if s.direction == rules::Direction::Ingress { "ingress" } else { "egress" },
        "ethertype": if s.ether_type == rules::EtherType::Ipv4 { "IPv4" } else { "IPv6" },
        "protocol": protocol,
        "port_range_min": s.ports.map(|p| p.0),
        "port_range_max": s.ports.map(|p| p.1),
    });
    match s.remote {
        rules::Remote::Cidr(cidr) => body["remote_ip_prefix"] = json!(cidr),
        rules::Remote::Group(id) => body["remote_group_id"] = json!(id),
    }
    if let Some(d) = &r.description {
        body["description"] = json!(d);
    }
    json!({ "security_group_rule": body })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_follow_status_and_task() {
        for (status, task, expected) in [
            ("ACTIVE", None, InstanceState::Running),
            ("ACTIVE", Some("deleting"), InstanceState::Deleting),
            ("ERROR", Some("deleting"), InstanceState::Deleting),
            ("ACTIVE", Some("rebooting"), InstanceState::Rebooting),
            ("HARD_REBOOT", None, InstanceState::Rebooting),
            ("BUILD", Some("spawning"), InstanceState::Pending),
            ("SHUTOFF", None, InstanceState::Stopped),
            ("PAUSED", None, InstanceState::Stopped),
            ("SOFT_DELETED", None, InstanceState::Terminated),
            ("ERROR", None, InstanceState::Error),
            ("SHELVED_OFFLOADED", None, InstanceState::Unknown),
        ] {
            assert_eq!(state(status, task), expected, "{status} {task:?}");
        }
    }

    #[test]
    fn servers_become_instances_with_their_ports_groups() {
        let server: Server = serde_json::from_value(json!({
            "id": "8f7c2a1e-3b4d-4e5f-9a0b-1c2d3e4f5a6b", "name": "node-7", "status": "ACTIVE",
            "OS-EXT-STS:task_state": null, "OS-EXT-AZ:availability_zone": "nova",
            "created": "2026-11-25T10:00:00Z",
            "addresses": {"private": [
                {"addr": "10.0.0.5", "version": 4, "OS-EXT-IPS:type": "fixed"},
                {"addr": "172.24.4.9", "version": 4, "OS-EXT-IPS:type": "floating"}]},
            "metadata": {"kubernetes.io/cluster/a": "owned"},
            "security_groups": [{"name": "default"}]
        }))
        .unwrap();
        let port = |groups: &[&str]| Port {
            id: "p".into(),
            device_id: "8f7c2a1e-3b4d-4e5f-9a0b-1c2d3e4f5a6b".into(),
            security_groups: groups.iter().map(|g| g.to_string()).collect(),
            revision_number: Some(1),
        };
        let (a, b) = (port(&["g1", "g2"]), port(&["g2", "g3"]));
        let i = instance(server, &[&a, &b]).unwrap();
        assert_eq!(i.state, InstanceState::Running);
        assert_eq!(i.created_at_ms, 1_795_600_800_000);
        assert_eq!(
            (i.private_addresses, i.public_addresses),
            (vec!["10.0.0.5".to_string()], vec!["172.24.4.9".to_string()])
        );
        assert_eq!(i.security_groups, ["g2"], "the groups every port is in");
        assert_eq!(
            i.tags,
            [("kubernetes.io/cluster/a".to_string(), "owned".to_string())]
        );
        assert_eq!(
            i.provider_id,
            "openstack:///8f7c2a1e-3b4d-4e5f-9a0b-1c2d3e4f5a6b"
        );
        assert_eq!(i.zone.as_deref(), Some("nova"));
        let bad: Server =
            serde_json::from_value(json!({"id": "x", "status": "ACTIVE", "created": "yesterday"}))
                .unwrap();
        assert!(
            instance(bad, &[])
                .unwrap_err()
                .contains("unreadable creation time")
        );
    }

    #[test]
    fn neutron_rules_map_both_ways() {
        let g: Group = serde_json::from_value(json!({"id": "g", "name": "nodes", "security_group_rules": [
            {"direction": "egress", "ethertype": "IPv6", "protocol": null, "port_range_min": null,
             "port_range_max": null, "remote_ip_prefix": null, "remote_group_id": null, "description": ""},
            {"direction": "ingress", "ethertype": "IPv4", "protocol": "6", "port_range_min": 1,
             "port_range_max": 65535, "remote_ip_prefix": "10.244.0.0/16", "remote_group_id": null},
            {"direction": "ingress", "ethertype": "IPv4", "protocol": "vrrp", "port_range_min": null,
             "port_range_max": null, "remote_ip_prefix": null, "remote_group_id": "other"}]}))
        .unwrap();
        let g = group(g).unwrap();
        assert_eq!(g.rules[0].remote, Remote::Cidr("::/0".into()));
        assert_eq!(g.rules[1].protocol, Protocol::Number(6));
        assert_eq!(g.rules[2].protocol, Protocol::Number(112));
        let tcp_all = Rule {
            protocol: Protocol::Tcp,
            remote: Remote::Cidr("10.244.1.0/16".into()),
            ..g.rules[1].clone()
        };
        assert!(rule_spec(&tcp_all).same(&rule_spec(&g.rules[1])));
        let body = rule_request("g", &tcp_all);
        assert_eq!(
            body,
            json!({"security_group_rule": {"security_group_id": "g", "direction": "ingress",
                "ethertype": "IPv4", "protocol": "tcp", "port_range_min": null, "port_range_max": null,
                "remote_ip_prefix": "10.244.0.0/16"}})
        );
        let bad: Group = serde_json::from_value(json!({"id": "g", "security_group_rules": [
            {"direction": "ingress", "ethertype": "IPv4", "protocol": "carrier-pigeon"}]}))
        .unwrap();
        assert!(group(bad).unwrap_err().contains("unknown protocol"));
    }
}
