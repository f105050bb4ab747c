//! `{"mode": "cloud-calls", "calls": [{"op": OP, ...}, ...]}`: each cloud call
//! in turn, going on after an error; healthy, the outcome naming each result
//! ("delete-instance i-x: ok", "get-instance ../x: invalid: ..."), so a test
//! can see what the host refused and count at the peer what it sent.
//!
//! Ops: `list-instances` (`tag`, `value`: the instance IDs listed), `get-instance`
//! and `delete-instance` (`id`), `list-security-groups` (`ids`), `find-security-group`
//! (`name`), `add-to-group` (`id`, `group`), `ensure-rule` (`group`, and an
//! ingress rule of `protocol`, "tcp" by default or "any", from `cidr` or from
//! security group `from-group`, over `ports` "min-max" or all ports).

use serde::Deserialize;
use tend_sdk::{Direction, EtherType, Host, OwnerTag, PortRange, Protocol, Remote, Rule};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloudCall {
    op: String,
    #[serde(default)]
    id: String,
    #[serde(default)]
    ids: Vec<String>,
    #[serde(default)]
    group: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    tag: String,
    #[serde(default)]
    value: String,
    #[serde(default)]
    cidr: String,
    #[serde(default)]
    ports: Option<String>,
    #[serde(default)]
    protocol: Option<String>,
    #[serde(default, rename = "from-group")]
    from_group: Option<String>,
}

impl CloudCall {
    fn rule(&self) -> Rule {
        let ports = self.ports.as_deref().and_then(|p| {
            let (min, max) = p.split_once('-').unwrap_or((p, p));
            Some(PortRange {
                min: min.parse().ok()?,
                max: max.parse().ok()?,
            })
        });
        Rule {
            direction: Direction::Ingress,
            ether_type: if self.cidr.contains(':') {
                EtherType::Ipv6
            } else {
                EtherType::Ipv4
            },
            protocol: match self.protocol.as_deref() {
                Some("any") => Protocol::Any,
                _ => Protocol::Tcp,
            },
            ports,
            remote: match &self.from_group {
                Some(group) => Remote::Group(group.clone()),
                None => Remote::Cidr(self.cidr.clone()),
            },
            description: None,
        }
    }

    /// "op target: result".
    fn run(&self, host: &dyn Host) -> String {
        let cloud = host.cloud();
        let result = match self.op.as_str() {
            "list-instances" => cloud
                .list_instances(&OwnerTag::new(&self.tag, &self.value))
                .map(|list| {
                    let ids: Vec<&str> = list.iter().map(|i| i.id.as_str()).collect();
                    format!("[{}]", ids.join(","))
                }),
            "get-instance" => cloud.get_instance(&self.id).map(|i| i.name),
            "delete-instance" => cloud.delete_instance(&self.id).map(|()| "ok".into()),
            "list-security-groups" => {
                let ids: Vec<&str> = self.ids.iter().map(String::as_str).collect();
                cloud
                    .list_security_groups(&ids)
                    .map(|groups| format!("{} groups", groups.len()))
            }
            "find-security-group" => cloud.find_security_group(&self.name),
            "add-to-group" => cloud
                .add_to_group(&self.id, &self.group)
                .map(|added| added.to_string()),
            "ensure-rule" => cloud
                .ensure_rule(&self.group, &self.rule())
                .map(|added| added.to_string()),
            other => return format!("{other}: unknown op"),
        };
        let target = [&self.id, &self.group, &self.name, &self.tag]
            .into_iter()
            .find(|t| !t.is_empty())
            .map_or("", String::as_str);
        match result {
            Ok(text) => format!("{} {target}: {text}", self.op),
            Err(e) => format!("{} {target}: {e}", self.op),
        }
    }
}

/// Every call's result, "; "-separated.
pub fn run_all(host: &dyn Host, calls: &[CloudCall]) -> String {
    let results: Vec<String> = calls.iter().map(|c| c.run(host)).collect();
    results.join("; ")
}
