//! `tend:plugin/cloud`: the cloud provider's compute API (OpenStack or AWS
//! EC2), provider-neutral, within the plugin's `cloud` grant: instances only
//! through a granted ownership tag, security groups only by granted ID.

use crate::{Error, NotProvided, Result};
use serde::{Deserialize, Deserializer};
use std::cell::RefCell;
use tend_rules::cloud::{
    CloudGrant, Operation, Ownership, RuleSpec, check_group_name, check_instance_id,
};

use crate::bindings::tend::plugin::cloud;

// The WIT rule as the rules crate sees it: `rule_spec`, written once in the
// rules crate for both bindings.
tend_rules::rule_spec_of!(cloud);

/// The WIT records themselves: the host answers with these very types.
pub use crate::bindings::tend::plugin::cloud::{
    Direction, EtherType, Instance, InstanceState, OwnerTag, PortRange, Protocol, Remote, Rule,
    SecurityGroup,
};

impl OwnerTag {
    pub fn new(key: &str, value: &str) -> Self {
        OwnerTag {
            key: key.to_string(),
            value: value.to_string(),
        }
    }
}

/// In a plugin's config as in its grant: `owner = { tag =
/// "kubernetes.io/cluster/prod", value = "owned" }`, checked by the host's
/// rules (a key and a value of bounded printable text).
impl<'de> Deserialize<'de> for OwnerTag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let owner = Ownership::deserialize(d)?;
        Ok(OwnerTag {
            key: owner.tag,
            value: owner.value,
        })
    }
}

impl Instance {
    /// An instance for tests and fakes: created at the epoch, no addresses,
    /// groups or tags; its provider ID as Kubernetes writes it
    /// ("aws:///us-east-1a/i-..." for an AWS ID, "openstack:///<uuid>"
    /// otherwise). Set other fields with `..Instance::new(...)`.
    pub fn new(id: &str, name: &str, state: InstanceState) -> Self {
        let (provider_id, zone) = match id.starts_with("i-") {
            true => (format!("aws:///us-east-1a/{id}"), "us-east-1a"),
            false => (format!("openstack:///{id}"), "nova"),
        };
        Instance {
            id: id.to_string(),
            name: name.to_string(),
            state,
            status: state.name().to_string(),
            task_state: None,
            created_at_ms: 0,
            zone: Some(zone.to_string()),
            private_addresses: vec![],
            public_addresses: vec![],
            security_groups: vec![],
            tags: vec![],
            provider_id,
        }
    }

    /// The value of tag `key`, if the instance carries it.
    pub fn tag(&self, key: &str) -> Option<&str> {
        let tag = self.tags.iter().find(|(k, _)| k == key);
        tag.map(|(_, v)| v.as_str())
    }

    /// Whether it carries `owner`, key **and** value.
    pub fn is_owned_by(&self, owner: &OwnerTag) -> bool {
        self.tag(&owner.key) == Some(owner.value.as_str())
    }

    /// This instance with tag `key` = `value` added (replacing its value).
    pub fn with_tag(mut self, key: &str, value: &str) -> Self {
        self.tags.retain(|(k, _)| k != key);
        self.tags.push((key.to_string(), value.to_string()));
        self
    }

    fn tag_pairs(&self) -> impl Iterator<Item = (&str, &str)> + Clone {
        self.tags.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

impl InstanceState {
    /// The WIT name: "running", "error", ...
    pub fn name(self) -> &'static str {
        match self {
            InstanceState::Pending => "pending",
            InstanceState::Running => "running",
            InstanceState::Rebooting => "rebooting",
            InstanceState::Stopped => "stopped",
            InstanceState::Deleting => "deleting",
            InstanceState::Terminated => "terminated",
            InstanceState::Error => "error",
            InstanceState::Unknown => "unknown",
        }
    }
}

impl SecurityGroup {
    /// A group with no rules, for tests and fakes.
    pub fn new(id: &str, name: &str) -> Self {
        SecurityGroup {
            id: id.to_string(),
            name: name.to_string(),
            description: String::new(),
            rules: vec![],
        }
    }
}

impl Rule {
    /// The rule as the host's rules see it (descriptions never matter).
    pub fn spec(&self) -> RuleSpec {
        rule_spec(self)
    }

    /// Whether `self` and `other` are the same rule, as the host decides
    /// ([`RuleSpec::same`]): the full port range counts, so tcp/22 is not
    /// "tcp"; the description does not.
    pub fn same(&self, other: &Rule) -> bool {
        self.spec().same(&other.spec())
    }

    /// "ingress ipv4 tcp 22-22 from 10.0.0.0/8": the rule in an action or a
    /// message, as the host journals it ([`RuleSpec::describe`]).
    pub fn describe(&self) -> String {
        self.spec().describe()
    }

    /// Is this a rule a provider can hold ([`RuleSpec::check`])?
    pub fn check(&self) -> Result<()> {
        (self.spec().check(self.description.as_deref())).map_err(Error::from)
    }
}

/// The cloud, within the plugin's grant (`[plugins.<name>.grants] cloud`):
/// each call needs its operation in `operations`; instances are reached only
/// through an ownership tag of `instances` (key and value, never a name
/// prefix), groups only by an ID of `security-groups`. Identifiers are
/// checked for their shape before any request; listings are complete or an
/// error. Mutations pass the host's mutation gate (dry run, budgets such as
/// `cloud.delete-instance`, journal).
pub trait Cloud {
    /// Every instance tagged `owner` (key and value), all pages, or an error.
    fn list_instances(&self, owner: &OwnerTag) -> Result<Vec<Instance>>;
    /// One owned instance: `not-found` when it does not exist or is
    /// terminated, `denied` when it carries no granted ownership tag.
    fn get_instance(&self, id: &str) -> Result<Instance>;
    /// Delete (AWS: terminate) an owned instance by ID. One already gone or
    /// already being deleted is success, and no second delete is sent.
    fn delete_instance(&self, id: &str) -> Result<()>;
    /// The granted groups with these IDs (every granted group when `ids` is
    /// empty), with their rules; IDs of groups that do not exist are left out.
    fn list_security_groups(&self, ids: &[&str]) -> Result<Vec<SecurityGroup>>;
    /// The ID of the one granted group named `name`: `not-found` when none
    /// is, `conflict` when several are (pin the group by ID instead). Needs
    /// "list-security-groups".
    fn find_security_group(&self, name: &str) -> Result<String>;
    /// Add `rule` to group `group_id` unless the same rule ([`Rule::same`])
    /// is there: true when added, false when it already was.
    fn ensure_rule(&self, group_id: &str, rule: &Rule) -> Result<bool>;
    /// Make owned instance `instance_id` a member of group `group_id`: true
    /// when added, false when it already was a member.
    fn add_to_group(&self, instance_id: &str, group_id: &str) -> Result<bool>;
}

impl Cloud for NotProvided {
    fn list_instances(&self, _: &OwnerTag) -> Result<Vec<Instance>> {
        Err(NotProvided::denied("cloud"))
    }
    fn get_instance(&self, _: &str) -> Result<Instance> {
        Err(NotProvided::denied("cloud"))
    }
    fn delete_instance(&self, _: &str) -> Result<()> {
        Err(NotProvided::denied("cloud"))
    }
    fn list_security_groups(&self, _: &[&str]) -> Result<Vec<SecurityGroup>> {
        Err(NotProvided::denied("cloud"))
    }
    fn find_security_group(&self, _: &str) -> Result<String> {
        Err(NotProvided::denied("cloud"))
    }
    fn ensure_rule(&self, _: &str, _: &Rule) -> Result<bool> {
        Err(NotProvided::denied("cloud"))
    }
    fn add_to_group(&self, _: &str, _: &str) -> Result<bool> {
        Err(NotProvided::denied("cloud"))
    }
}

/// The wasm glue: the host's `cloud` import.
#[cfg(target_arch = "wasm32")]
pub(crate) mod wasm {
    use super::*;
    use crate::bindings::tend::plugin::cloud as wit;
    use crate::types::from_wit_error;

    pub(crate) struct WasmCloud;

    impl Cloud for WasmCloud {
        fn list_instances(&self, owner: &OwnerTag) -> Result<Vec<Instance>> {
            wit::list_instances(owner).map_err(from_wit_error)
        }
        fn get_instance(&self, id: &str) -> Result<Instance> {
            wit::get_instance(id).map_err(from_wit_error)
        }
        fn delete_instance(&self, id: &str) -> Result<()> {
            wit::delete_instance(id).map_err(from_wit_error)
        }
        fn list_security_groups(&self, ids: &[&str]) -> Result<Vec<SecurityGroup>> {
            let ids: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
            wit::list_security_groups(&ids).map_err(from_wit_error)
        }
        fn find_security_group(&self, name: &str) -> Result<String> {
            wit::find_security_group(name).map_err(from_wit_error)
        }
        fn ensure_rule(&self, group_id: &str, rule: &Rule) -> Result<bool> {
            wit::ensure_rule(group_id, rule).map_err(from_wit_error)
        }
        fn add_to_group(&self, instance_id: &str, group_id: &str) -> Result<bool> {
            wit::add_to_group(instance_id, group_id).map_err(from_wit_error)
        }
    }
}

/// The calls [`FakeCloud::fail_call`] can make fail: the WIT function names.
pub const CALLS: [&str; 7] = tend_rules::wit::cloud::FUNCTIONS;

/// The fake: a provider account behind the host's grant rules and messages
/// (nothing granted until [`FakeCloud::grant`]).
///
/// - Instances and groups are seeded with [`FakeCloud::put_instance`] and
///   [`FakeCloud::put_group`]; listings return every instance carrying the
///   owner tag, terminated ones included (AWS lists them for an hour).
/// - A delete turns the instance to `deleting` (as AWS `shutting-down`); it
///   stays listed until [`FakeCloud::remove_instance`], as the provider
///   finishing it would. Deleting one already deleting, terminated or gone
///   succeeds and sends nothing.
/// - Every mutation sent is recorded ([`FakeCloud::actions`]:
///   "delete-instance i-...", "ensure-rule sg-... ingress ipv4 tcp from
///   10.244.0.0/16", "add-to-group i-... sg-..."); calls answered false
///   (a duplicate rule, a member already) send nothing.
/// - Failures are injected with [`FakeCloud::fail_with`] and
///   [`FakeCloud::fail_call`] (`budget-exhausted` on "delete-instance" is
///   what a spent host budget answers), after the grant checks, as on the
///   host.
///
/// Like every fake it performs mutations whatever the context's dry-run
/// flag: the host, not the plugin, turns them into a plan.
pub struct FakeCloud {
    plugin: String,
    grant: RefCell<CloudGrant>,
    instances: RefCell<Vec<Instance>>,
    groups: RefCell<Vec<SecurityGroup>>,
    actions: RefCell<Vec<String>>,
    failures: crate::fake::ScriptedFailures,
}

impl crate::fake::Fake for FakeCloud {
    fn for_plugin(plugin: &str) -> Self {
        FakeCloud::new(plugin)
    }
}

impl Default for FakeCloud {
    /// For a plugin named "test".
    fn default() -> Self {
        FakeCloud::new("test")
    }
}

impl FakeCloud {
    pub fn new(plugin: &str) -> Self {
        FakeCloud {
            plugin: plugin.to_string(),
            grant: RefCell::default(),
            instances: RefCell::default(),
            groups: RefCell::default(),
            actions: RefCell::default(),
            failures: crate::fake::ScriptedFailures::new("FakeCloud", &CALLS),
        }
    }

    /// Add to the grant what `grant` grants, written as in the host config:
    /// `grant(r#"{ operations = ["list-instances"], instances = [{ tag =
    /// "kubernetes.io/cluster/demo", value = "owned" }] }"#)`. Panics on a
    /// grant the host would reject: a test setup error.
    pub fn grant(&self, grant: &str) -> &Self {
        #[derive(Deserialize)]
        struct Grants {
            cloud: CloudGrant,
        }
        let parsed: Grants = toml::from_str(&format!("cloud = {grant}"))
            .unwrap_or_else(|e| panic!("FakeCloud::grant: {e} in {grant}"));
        self.extend_grant(&parsed.cloud)
    }

    /// Add what `grant` grants (a grant already parsed, as the conformance
    /// table holds them).
    pub fn extend_grant(&self, grant: &CloudGrant) -> &Self {
        self.grant.borrow_mut().extend(grant);
        self
    }

    /// Store `instance` as is (no grant check, nothing recorded), replacing
    /// one with the same ID.
    pub fn put_instance(&self, instance: Instance) -> &Self {
        let mut instances = self.instances.borrow_mut();
        instances.retain(|i| i.id != instance.id);
        instances.push(instance);
        self
    }

    /// Take an instance away, as the provider finishing its deletion would;
    /// returns it.
    pub fn remove_instance(&self, id: &str) -> Option<Instance> {
        let mut instances = self.instances.borrow_mut();
        let at = instances.iter().position(|i| i.id == id)?;
        Some(instances.remove(at))
    }

    /// The instance stored under `id` now, if any.
    pub fn instance(&self, id: &str) -> Option<Instance> {
        self.instances.borrow().iter().find(|i| i.id == id).cloned()
    }

    /// Store `group` as is, replacing one with the same ID.
    pub fn put_group(&self, group: SecurityGroup) -> &Self {
        let mut groups = self.groups.borrow_mut();
        groups.retain(|g| g.id != group.id);
        groups.push(group);
        self
    }

    /// Take a group away, as an operator deleting it would; returns it.
    pub fn remove_group(&self, id: &str) -> Option<SecurityGroup> {
        let mut groups = self.groups.borrow_mut();
        let at = groups.iter().position(|g| g.id == id)?;
        Some(groups.remove(at))
    }

    /// The group stored under `id` now, if any.
    pub fn group(&self, id: &str) -> Option<SecurityGroup> {
        self.groups.borrow().iter().find(|g| g.id == id).cloned()
    }

    /// Every call fails with `error` (say, `unavailable`: the provider's API
    /// is down) until cleared with None. Grant checks come first.
    pub fn fail_with(&self, error: Option<Error>) -> &Self {
        self.failures.fail_with(error);
        self
    }

    /// The call named `call` as in the WIT ("list-instances",
    /// "delete-instance", ...) fails with `error` until cleared with None.
    pub fn fail_call(&self, call: &str, error: Option<Error>) -> &Self {
        self.failures.fail_call(call, error);
        self
    }

    /// Every mutation sent, in order: "delete-instance i-...",
    /// "ensure-rule sg-... ingress ipv4 tcp from 10.244.0.0/16",
    /// "add-to-group i-... sg-...".
    pub fn actions(&self) -> Vec<String> {
        self.actions.borrow().clone()
    }

    fn record(&self, action: String) {
        self.actions.borrow_mut().push(action);
    }

    /// The instance `id` for `operation`, as the host resolves it: its
    /// shape, the operation, then (when it exists) its ownership tags.
    fn owned(&self, operation: Operation, id: &str) -> Result<Option<Instance>> {
        check_instance_id(id).map_err(Error::from)?;
        let grant = self.grant.borrow();
        let what = format!("instance {id}");
        (grant.check_operation(&self.plugin, operation, &what)).map_err(Error::from)?;
        self.failures.check(operation.name())?;
        let Some(instance) = self.instance(id) else {
            return Ok(None);
        };
        (grant.check_owned(&self.plugin, operation, id, instance.tag_pairs()))
            .map_err(Error::from)?;
        Ok(Some(instance))
    }

    /// The group `id` for `operation`: its shape and its grant.
    fn granted_group(&self, operation: Operation, id: &str) -> Result<()> {
        (self.grant.borrow())
            .check_group(&self.plugin, operation, id)
            .map_err(Error::from)
    }

    fn not_found(call: &str, what: &str) -> Error {
        Error::NotFound(format!("cloud {call}: no {what}"))
    }
}

impl Cloud for FakeCloud {
    fn list_instances(&self, owner: &OwnerTag) -> Result<Vec<Instance>> {
        (self.grant.borrow())
            .check_owner(&self.plugin, &owner.key, &owner.value)
            .map_err(Error::from)?;
        self.failures.check("list-instances")?;
        let instances = self.instances.borrow();
        Ok(instances
            .iter()
            .filter(|i| i.is_owned_by(owner))
            .cloned()
            .collect())
    }

    fn get_instance(&self, id: &str) -> Result<Instance> {
        match self.owned(Operation::GetInstance, id)? {
            Some(i) if i.state != InstanceState::Terminated => Ok(i),
            _ => Err(Self::not_found("get-instance", &format!("instance {id}"))),
        }
    }

    fn delete_instance(&self, id: &str) -> Result<()> {
        let Some(instance) = self.owned(Operation::DeleteInstance, id)? else {
            return Ok(());
        };
        if matches!(
            instance.state,
            InstanceState::Deleting | InstanceState::Terminated
        ) {
            return Ok(());
        }
        self.record(format!("delete-instance {id}"));
        self.put_instance(Instance {
            state: InstanceState::Deleting,
            status: InstanceState::Deleting.name().to_string(),
            ..instance
        });
        Ok(())
    }

    fn list_security_groups(&self, ids: &[&str]) -> Result<Vec<SecurityGroup>> {
        let grant = self.grant.borrow();
        for id in ids {
            (grant.check_group(&self.plugin, Operation::ListSecurityGroups, id))
                .map_err(Error::from)?;
        }
        let what = "security groups";
        (grant.check_operation(&self.plugin, Operation::ListSecurityGroups, what))
            .map_err(Error::from)?;
        self.failures.check("list-security-groups")?;
        let granted = |g: &&SecurityGroup| grant.security_groups.iter().any(|s| s.0 == g.id);
        let asked = |g: &&SecurityGroup| ids.is_empty() || ids.contains(&g.id.as_str());
        let groups = self.groups.borrow();
        Ok(groups
            .iter()
            .filter(granted)
            .filter(asked)
            .cloned()
            .collect())
    }

    fn find_security_group(&self, name: &str) -> Result<String> {
        check_group_name(name).map_err(Error::from)?;
        let grant = self.grant.borrow();
        let what = format!("security group named {name}");
        (grant.check_operation(&self.plugin, Operation::ListSecurityGroups, &what))
            .map_err(Error::from)?;
        self.failures.check("find-security-group")?;
        let groups = self.groups.borrow();
        let named: Vec<&str> = groups
            .iter()
            .filter(|g| g.name == name && grant.security_groups.iter().any(|s| s.0 == g.id))
            .map(|g| g.id.as_str())
            .collect();
        match named[..] {
            [id] => Ok(id.to_string()),
            [] => Err(Error::NotFound(format!(
                "cloud find-security-group: no granted security group is named {name:?}: add the group's ID to security-groups in [plugins.{}.grants] cloud",
                self.plugin
            ))),
            _ => Err(Error::Conflict(format!(
                "cloud find-security-group: several granted security groups are named {name:?} ({}): pin the group by its ID",
                named.join(", ")
            ))),
        }
    }

    fn ensure_rule(&self, group_id: &str, rule: &Rule) -> Result<bool> {
        self.granted_group(Operation::EnsureRule, group_id)?;
        rule.check()?;
        (self.grant.borrow())
            .check_rule(&self.plugin, group_id, &rule.spec())
            .map_err(Error::from)?;
        self.failures.check("ensure-rule")?;
        let mut groups = self.groups.borrow_mut();
        let Some(group) = groups.iter_mut().find(|g| g.id == group_id) else {
            return Err(Self::not_found(
                "ensure-rule",
                &format!("security group {group_id}"),
            ));
        };
        if group.rules.iter().any(|r| r.same(rule)) {
            return Ok(false);
        }
        group.rules.push(rule.clone());
        drop(groups);
        self.record(format!("ensure-rule {group_id} {}", rule.describe()));
        Ok(true)
    }

    fn add_to_group(&self, instance_id: &str, group_id: &str) -> Result<bool> {
        check_instance_id(instance_id).map_err(Error::from)?;
        self.granted_group(Operation::AddToGroup, group_id)?;
        let Some(instance) = self.owned(Operation::AddToGroup, instance_id)? else {
            return Err(Self::not_found(
                "add-to-group",
                &format!("instance {instance_id}"),
            ));
        };
        if self.group(group_id).is_none() {
            return Err(Self::not_found(
                "add-to-group",
                &format!("security group {group_id}"),
            ));
        }
        if instance.security_groups.iter().any(|g| g == group_id) {
            return Ok(false);
        }
        self.record(format!("add-to-group {instance_id} {group_id}"));
        let mut security_groups = instance.security_groups.clone();
        security_groups.push(group_id.to_string());
        self.put_instance(Instance {
            security_groups,
            ..instance
        });
        Ok(true)
    }
}

#[cfg(test)]
mod tests;
