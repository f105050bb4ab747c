//! An in-memory cloud for tests: scripted instances and security groups, the
//! provider's semantics (a delete leaves the instance "deleting", a duplicate
//! rule is `false`), recorded actions, injectable failures, a provider that
//! ignores filters, and requests paced and counted as a real backend's.

use super::backend::{
    CloudBackend, CloudLimits, Instance, InstanceState, OwnerTag, Rule, SecurityGroup,
};
use super::grants::{Operation, describe_rule, rule_spec};
use super::real::{Paced, Pacer};
use crate::capabilities::call::Call;
use crate::capabilities::error::CapError;
use crate::capabilities::fakes::FakeLedger;
use crate::capabilities::gate::Permit;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

struct Account {
    instances: Mutex<Vec<Instance>>,
    groups: Mutex<Vec<SecurityGroup>>,
    ledger: FakeLedger,
    ignores_filters: AtomicBool,
    /// No host-wide bound: only the plugins' own rates pace the fake.
    pacer: Pacer,
}

impl Default for Account {
    fn default() -> Self {
        Account {
            instances: Mutex::default(),
            groups: Mutex::default(),
            ledger: FakeLedger::default(),
            ignores_filters: AtomicBool::default(),
            pacer: Pacer::new(u32::MAX, u32::MAX),
        }
    }
}

/// The fake account, as the host (tests script it) or as one plugin's view
/// (its requests paced by that plugin's rate).
#[derive(Default)]
pub struct FakeCloud {
    account: Arc<Account>,
    paced: Option<Paced>,
}

impl FakeCloud {
    /// A running instance with these tags, created at 0, with no addresses or groups.
    pub fn instance(id: &str, name: &str, tags: &[(&str, &str)]) -> Instance {
        Instance {
            id: id.into(),
            name: name.into(),
            state: InstanceState::Running,
            status: "ACTIVE".into(),
            task_state: None,
            created_at_ms: 0,
            zone: None,
            private_addresses: vec![],
            public_addresses: vec![],
            security_groups: vec![],
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            provider_id: format!("fake:///{id}"),
        }
    }

    pub fn add_instance(&self, instance: Instance) {
        self.account.instances.lock().unwrap().push(instance);
    }

    pub fn add_group(&self, id: &str, name: &str, rules: Vec<Rule>) {
        self.account.groups.lock().unwrap().push(SecurityGroup {
            id: id.into(),
            name: name.into(),
            description: String::new(),
            rules,
        });
    }

    /// The instances as the provider has them now.
    /// Instance `id` now carries `tags` (it moved to another owner).
    pub fn retag(&self, id: &str, tags: &[(&str, &str)]) {
        let mut instances = self.account.instances.lock().unwrap();
        for instance in instances.iter_mut().filter(|i| i.id == id) {
            instance.tags = FakeCloud::instance(id, "", tags).tags;
        }
    }

    pub fn instances(&self) -> Vec<Instance> {
        self.account.instances.lock().unwrap().clone()
    }

    pub fn groups(&self) -> Vec<SecurityGroup> {
        self.account.groups.lock().unwrap().clone()
    }

    /// Every mutation request received: "delete-instance i-0abc",
    /// "ensure-rule sg-0abc ingress ipv4 tcp 22-22 from 10.0.0.0/8",
    /// "add-to-group i-0abc sg-0abc".
    pub fn actions(&self) -> Vec<String> {
        self.account.ledger.actions()
    }

    /// Fail every call with `error` until cleared.
    pub fn fail_with(&self, error: Option<CapError>) {
        self.account.ledger.fail_with(error);
    }

    /// Answer listings with everything, whatever the filter (a provider that
    /// ignores one).
    pub fn ignore_filters(&self, ignore: bool) {
        self.account
            .ignores_filters
            .store(ignore, Ordering::Relaxed);
    }

    /// Requests received (every call is one request here).
    pub fn requests(&self) -> u64 {
        self.account.pacer.requests()
    }

    async fn request(&self, operation: Operation) -> Result<(), CapError> {
        self.account
            .pacer
            .slot(self.paced.as_ref(), operation.name())
            .await?;
        self.account.ledger.check()
    }

    fn filtered(&self) -> bool {
        !self.account.ignores_filters.load(Ordering::Relaxed)
    }
}

#[async_trait::async_trait]
impl CloudBackend for FakeCloud {
    fn provider(&self) -> &'static str {
        "fake"
    }

    fn for_plugin(self: Arc<Self>, call: &Arc<Call>, limits: CloudLimits) -> Arc<dyn CloudBackend> {
        Arc::new(FakeCloud {
            account: self.account.clone(),
            paced: Some(Paced {
                call: call.clone(),
                limits,
            }),
        })
    }

    async fn list_instances(&self, owner: &OwnerTag) -> Result<Vec<Instance>, CapError> {
        self.request(Operation::ListInstances).await?;
        let tagged = |i: &&Instance| {
            i.tags
                .iter()
                .any(|(k, v)| *k == owner.key && *v == owner.value)
        };
        let instances = self.account.instances.lock().unwrap();
        Ok(instances
            .iter()
            .filter(|i| !self.filtered() || tagged(i))
            .cloned()
            .collect())
    }

    async fn get_instance(&self, id: &str) -> Result<Option<Instance>, CapError> {
        self.request(Operation::GetInstance).await?;
        let instances = self.account.instances.lock().unwrap();
        Ok(instances.iter().find(|i| i.id == id).cloned())
    }

    async fn delete_instance(&self, _: Permit, id: &str) -> Result<(), CapError> {
        self.request(Operation::DeleteInstance).await?;
        self.account
            .ledger
            .record(Operation::DeleteInstance.name(), id);
        let mut instances = self.account.instances.lock().unwrap();
        for instance in instances.iter_mut().filter(|i| i.id == id) {
            instance.state = InstanceState::Deleting;
            instance.task_state = Some("deleting".into());
        }
        Ok(())
    }

    async fn list_security_groups(&self, ids: &[String]) -> Result<Vec<SecurityGroup>, CapError> {
        self.request(Operation::ListSecurityGroups).await?;
        let groups = self.account.groups.lock().unwrap();
        Ok(groups
            .iter()
            .filter(|g| !self.filtered() || ids.contains(&g.id))
            .cloned()
            .collect())
    }

    async fn find_security_groups(&self, name: &str) -> Result<Vec<SecurityGroup>, CapError> {
        self.request(Operation::ListSecurityGroups).await?;
        let groups = self.account.groups.lock().unwrap();
        Ok(groups
            .iter()
            .filter(|g| !self.filtered() || g.name == name)
            .cloned()
            .collect())
    }

    async fn ensure_rule(&self, _: Permit, group_id: &str, rule: &Rule) -> Result<bool, CapError> {
        self.request(Operation::EnsureRule).await?;
        self.account.ledger.record(
            Operation::EnsureRule.name(),
            &format!("{group_id} {}", describe_rule(rule)),
        );
        let mut groups = self.account.groups.lock().unwrap();
        let group = groups
            .iter_mut()
            .find(|g| g.id == group_id)
            .ok_or_else(|| CapError::NotFound(format!("cloud: no security group {group_id}")))?;
        if group
            .rules
            .iter()
            .any(|r| rule_spec(r).same(&rule_spec(rule)))
        {
            return Ok(false);
        }
        group.rules.push(rule.clone());
        Ok(true)
    }

    async fn add_to_group(
        &self,
        _: Permit,
        instance: &Instance,
        group_id: &str,
    ) -> Result<bool, CapError> {
        self.request(Operation::AddToGroup).await?;
        self.account.ledger.record(
            Operation::AddToGroup.name(),
            &format!("{} {group_id}", instance.id),
        );
        if !self
            .account
            .groups
            .lock()
            .unwrap()
            .iter()
            .any(|g| g.id == group_id)
        {
            return Err(CapError::NotFound(format!(
                "cloud: no security group {group_id}"
            )));
        }
        let mut instances = self.account.instances.lock().unwrap();
        let found = instances
            .iter_mut()
            .find(|i| i.id == instance.id)
            .ok_or_else(|| CapError::NotFound(format!("cloud: no instance {}", instance.id)))?;
        if found.security_groups.iter().any(|g| g == group_id) {
            return Ok(false);
        }
        found.security_groups.push(group_id.to_string());
        Ok(true)
    }

    fn requests(&self) -> u64 {
        self.account.pacer.requests()
    }

    fn rate_metrics(&self, configured: &dyn Fn(&str) -> bool) -> String {
        self.account.pacer.render(self.provider(), configured)
    }
}
