//! secgroup-guard: keep every cluster instance in the cluster's security
//! group, and the group open to the pod network.
//!
//! Instances launched by hand, by an old launch template or by a tool that
//! forgot the group cannot reach the pods of other nodes (or are not reached
//! by them): cross-node pod traffic fails in ways that look like a CNI bug.
//! And a group edited by hand may have lost the rules for the pod CIDR, or
//! kept only a tcp/22 rule that looks like "tcp" in a console. Each pass:
//!
//! - the group is pinned by ID (`group-id`), or `group-name` is resolved once
//!   (find-security-group among the granted groups; an ambiguous name is
//!   refused: pin the ID) and the ID remembered in `state` (resolved again
//!   when that group is gone: deleted, or no longer granted);
//! - the group must hold, for each pod CIDR (`pod-cidrs`, IPv4 and IPv6, or
//!   when not set kubeadm's `networking.podSubnet` from the ConfigMap
//!   kube-system/kubeadm-config), ingress rules for tcp, udp and icmp (icmpv6
//!   for IPv6) on every port, egress ones too with `egress = true`, plus the
//!   `extra-rules`. Rule equality is the host's (`RuleSpec::same`): the full
//!   port range counts, the description does not;
//! - every running instance carrying the cluster's ownership tag (`owner`,
//!   as node-reaper's) must be a member.
//!
//! Safety: it is additive only: it never removes a rule or a membership
//! (not even its own). It lists first and calls ensure-rule and add-to-group
//! only for what is missing, so a pass with nothing to do makes no mutating
//! call. A denied call or a spent host budget stops the pass's mutations; the
//! outcome says what was added, what is missing and why.
//!
//! ```toml
//! [plugins.secgroup-guard]
//! scope = "cluster"
//! interval = "5m"
//! [plugins.secgroup-guard.grants]
//! # rules are part of the grant: the pod CIDRs (and the extra rules' CIDRs
//! # and groups), every tcp/udp port
//! cloud = { operations = ["list-instances", "list-security-groups", "ensure-rule", "add-to-group"], instances = [{ tag = "kubernetes.io/cluster/demo", value = "owned" }], security-groups = ["sg-0123456789abcdef0", "sg-0123456789abcdef1"], remotes = ["10.244.0.0/16", "fd00:10:244::/56", "10.0.0.0/8"], protocols = ["tcp", "udp", "icmp", "icmpv6", "any"], ports = ["1-65535"] }
//! # only without pod-cidrs: kubeadm's record of the pod subnet
//! kube = [{ resource = "configmaps", verbs = ["get"], namespaces = ["kube-system"], names = ["kubeadm-config"] }]
//! [plugins.secgroup-guard.config]
//! owner = { tag = "kubernetes.io/cluster/demo", value = "owned" }
//! group-id = "sg-0123456789abcdef0"     # or group-name = "demo-nodes"
//! pod-cidrs = ["10.244.0.0/16", "fd00:10:244::/56"]   # default: kubeadm-config
//! egress = false
//! extra-rules = [
//!   { protocol = "tcp", ports = "30000-32767", cidr = "10.0.0.0/8", description = "node ports" },
//!   { protocol = "any", group = "sg-0123456789abcdef1" },
//! ]
//! ```

pub mod desired;

use desired::ExtraRule;
use serde::{Deserialize, Serialize};
use tend_sdk::{
    Context, Error, Host, ObjectKey, Outcome, OwnerTag, Plugin, PluginInfo, Result, Rule,
    SecurityGroup,
};

/// State key of the group resolved from `group-name`.
const RESOLVED: &str = "group";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Config {
    owner: OwnerTag,
    group_id: Option<String>,
    group_name: Option<String>,
    pod_cidrs: Option<Vec<String>>,
    #[serde(default)]
    egress: bool,
    #[serde(default)]
    extra_rules: Vec<ExtraRule>,
}

/// `group-name` as resolved, so a pass resolves it only once.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Resolved {
    name: String,
    id: String,
}

impl Config {
    /// The config and its extra rules, checked; an `invalid` error names the
    /// key that is wrong.
    fn load(ctx: &Context) -> Result<(Config, Vec<Rule>)> {
        let config: Config = ctx.config()?;
        if config.group_id.is_some() == config.group_name.is_some() {
            return Err(ctx.invalid_config(
                "group-id",
                "set exactly one of group-id (\"sg-...\", a Neutron UUID) and group-name",
            ));
        }
        if let Some(cidrs) = &config.pod_cidrs {
            let bad = cidrs.iter().find(|c| desired::ether_type_of(c).is_none());
            if cidrs.is_empty() || bad.is_some() {
                return Err(ctx.invalid_config(
                    "pod-cidrs",
                    &format!(
                        "expected CIDRs such as [\"10.244.0.0/16\", \"fd00:10:244::/56\"], got {cidrs:?}"
                    ),
                ));
            }
        }
        let extra = (config.extra_rules.iter().enumerate())
            .map(|(i, rule)| {
                rule.rule()
                    .map_err(|why| ctx.invalid_config(&format!("extra-rules[{i}]"), &why))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((config, extra))
    }
}

pub struct SecgroupGuard;

impl Plugin for SecgroupGuard {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "secgroup-guard",
            env!("CARGO_PKG_VERSION"),
            "keeps every cluster instance in the cluster's security group and the group open to the pod CIDRs",
        )
    }

    fn reconcile(ctx: &Context, host: &dyn Host) -> Result<Outcome> {
        let (config, extra) = Config::load(ctx)?;
        let unchanged = |e: Error| Ok(Outcome::degraded(format!("changed nothing: {e}")));
        let mut group_id = match resolve_group(host, &config, true) {
            Ok(id) => id,
            Err(e) => return unchanged(e),
        };
        let cidrs = match pod_cidrs(host, &config) {
            Ok(cidrs) => cidrs,
            Err(e) => return unchanged(e),
        };
        let mut wanted = desired::pod_rules(&cidrs, config.egress);
        wanted.extend(extra);
        let cloud = host.cloud();
        let mut listed = cloud.list_security_groups(&[&group_id]);
        if config.group_name.is_some() && gone(&listed) {
            // The remembered group was deleted (or its grant removed): the
            // name may now be another group's, made anew with another ID.
            group_id = match resolve_group(host, &config, false) {
                Ok(id) => id,
                Err(e) => return unchanged(e),
            };
            listed = cloud.list_security_groups(&[&group_id]);
        }
        let Some(group) = listed?.into_iter().next() else {
            return Ok(Outcome::degraded(format!(
                "changed nothing: security group {group_id} does not exist: fix group-id (or group-name)"
            )));
        };
        let instances = cloud.list_instances(&config.owner)?;
        let mut pass = Pass::default();
        for rule in desired::missing(&wanted, &group.rules) {
            let what = format!("rule {}", rule.describe());
            pass.mutate(&what, || cloud.ensure_rule(&group_id, rule));
        }
        for instance in desired::outside(&instances, &group_id) {
            let what = format!("instance {} ({})", instance.id, instance.name);
            pass.mutate(&what, || cloud.add_to_group(&instance.id, &group_id));
        }
        Ok(pass.outcome(&group_id, wanted.len(), instances.len(), ctx.dry_run))
    }
}

/// The group's ID: pinned, or resolved once from its name and remembered
/// (`remembered`: the remembered resolution may answer).
fn resolve_group(host: &dyn Host, config: &Config, remembered: bool) -> Result<String> {
    if let Some(id) = &config.group_id {
        return Ok(id.clone());
    }
    let name = config.group_name.as_deref().unwrap_or_default();
    let state = host.state();
    if remembered
        && let Some(resolved) = state.get_json::<Resolved>(RESOLVED)?
        && resolved.name == name
    {
        return Ok(resolved.id);
    }
    let id = host
        .cloud()
        .find_security_group(name)
        .map_err(|e| match e {
            Error::Conflict(m) => Error::Conflict(format!("{m} (set group-id in the config)")),
            e => e,
        })?;
    let resolved = Resolved {
        name: name.to_string(),
        id: id.clone(),
    };
    state.set_json(RESOLVED, &resolved)?;
    Ok(id)
}

/// Whether a listing of one group says it is gone: not there, or no longer
/// granted.
fn gone(listed: &Result<Vec<SecurityGroup>>) -> bool {
    match listed {
        Ok(groups) => groups.is_empty(),
        Err(e) => matches!(e, Error::Denied(_)),
    }
}

/// The configured pod CIDRs, or kubeadm's.
fn pod_cidrs(host: &dyn Host, config: &Config) -> Result<Vec<String>> {
    if let Some(cidrs) = &config.pod_cidrs {
        return Ok(cidrs.clone());
    }
    let key = ObjectKey::namespaced("v1", "ConfigMap", "kube-system", "kubeadm-config");
    let map = host.kube().get(&key)?;
    let text = map["data"]["ClusterConfiguration"]
        .as_str()
        .unwrap_or_default();
    let cidrs = desired::kubeadm_pod_cidrs(text);
    let bad = cidrs.iter().find(|c| desired::ether_type_of(c).is_none());
    if cidrs.is_empty() || bad.is_some() {
        return Err(Error::Invalid(format!(
            "kube-system/kubeadm-config names no pod CIDR in networking.podSubnet ({cidrs:?}): set pod-cidrs in the config"
        )));
    }
    Ok(cidrs)
}

/// What the pass added and what it could not.
#[derive(Default)]
struct Pass {
    added: Vec<String>,
    failed: Vec<String>,
    /// Mutations not tried after a denial or a spent budget.
    untried: usize,
    stopped: bool,
}

impl Pass {
    fn mutate(&mut self, what: &str, call: impl FnOnce() -> Result<bool>) {
        if self.stopped {
            self.untried += 1;
            return;
        }
        match call() {
            Ok(true) => self.added.push(what.to_string()),
            Ok(false) => {}
            Err(e) => {
                self.stopped = matches!(e, Error::Denied(_) | Error::BudgetExhausted(_));
                self.failed.push(format!("{what}: {e}"));
            }
        }
    }

    fn outcome(self, group_id: &str, rules: usize, instances: usize, dry_run: bool) -> Outcome {
        let mut message =
            format!("group {group_id}: {rules} rule(s) wanted, {instances} instance(s)");
        if !self.added.is_empty() {
            let verb = if dry_run { "would add" } else { "added" };
            message += &format!("; {verb} {}", shown(&self.added));
        }
        if self.failed.is_empty() {
            return Outcome::healthy(message);
        }
        message += &format!("; failed: {}", shown(&self.failed));
        if self.untried > 0 {
            message += &format!(" ({} more not tried)", self.untried);
        }
        Outcome::degraded(message)
    }
}

/// The first 10 items, then how many more.
fn shown(items: &[String]) -> String {
    let mut text = items[..items.len().min(10)].join(", ");
    if items.len() > 10 {
        text += &format!(" and {} more", items.len() - 10);
    }
    text
}

tend_sdk::export_plugin!(SecgroupGuard, uses: [cloud, kube, state]);

#[cfg(test)]
mod tests;
