//! The `cloud` adapter of one reconcile. Every call checks identifiers for
//! their shape first (before the grant, before any request), then the grant,
//! then asks the backend. Instances are the plugin's only through a granted
//! ownership tag, key and value, as the provider reports it: a listing keeps
//! only instances that carry it (a provider ignoring the filter cannot widen
//! the grant), and one instance is fetched, its ownership checked again, just
//! before anything is done to it. Every mutation passes the
//! gate, its target naming the instance or group and the rule.

use super::backend::{CloudBackend, Instance, InstanceState, OwnerTag, Rule, SecurityGroup};
use super::grants::{
    CloudGrant, Operation, check_group, check_group_id, check_group_name, check_instance_id,
    check_operation, check_owned, check_owner, check_rule, check_rule_granted, describe_rule,
};
use crate::capabilities::call::Call;
use crate::capabilities::capability::Capability;
use crate::capabilities::error::CapError;
use crate::capabilities::gate::Intent;
use crate::text::{cut, inert};
use serde::{Deserialize, Deserializer, de::Error as _};
use std::sync::Arc;

/// `[host.cloud]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CloudSettings {
    /// Whose API: without one every call is `unavailable`.
    pub provider: Option<Provider>,
    /// OpenStack: the clouds.yaml entry (else `OS_CLOUD`, else the `OS_*`
    /// variables).
    pub cloud: Option<String>,
    /// The region (else the provider's environment: `OS_REGION_NAME`, `AWS_REGION`).
    pub region: Option<String>,
    /// Override, for tests: the EC2 endpoint (AWS) or the Keystone auth URL
    /// (OpenStack).
    pub endpoint: Option<Endpoint>,
    /// Requests a second of all plugins together (each plugin also has its
    /// own `cloud-qps`).
    pub qps: u32,
    pub burst: u32,
}

impl Default for CloudSettings {
    fn default() -> Self {
        CloudSettings {
            provider: None,
            cloud: None,
            region: None,
            endpoint: None,
            qps: 10,
            burst: 20,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    OpenStack,
    Aws,
}

impl<'de> Deserialize<'de> for Provider {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        match text.as_str() {
            "openstack" => Ok(Provider::OpenStack),
            "aws" => Ok(Provider::Aws),
            _ => Err(D::Error::custom(format!(
                "unknown cloud provider {:?}: expected \"openstack\" or \"aws\"",
                inert(&text)
            ))),
        }
    }
}

/// An http(s) URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint(pub String);

impl<'de> Deserialize<'de> for Endpoint {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        match reqwest::Url::parse(&text) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => {
                Ok(Endpoint(text))
            }
            _ => Err(D::Error::custom(format!(
                "invalid cloud endpoint {:?}: expected an http:// or https:// URL, for example \"https://keystone.example.com:5000/v3\"",
                inert(&text)
            ))),
        }
    }
}

/// The most bytes of a provider's instance name a journal target shows.
const SHOWN_NAME: usize = 128;

pub struct PluginCloud {
    pub(super) backend: Arc<dyn CloudBackend>,
    pub(super) grant: CloudGrant,
    pub(super) call: Arc<Call>,
}

impl PluginCloud {
    fn plugin(&self) -> &str {
        &self.call.plugin
    }

    /// Every instance tagged `owner` that really carries it.
    pub async fn list_instances(&self, owner: &OwnerTag) -> Result<Vec<Instance>, CapError> {
        check_owner(&self.grant, self.plugin(), &owner.key, &owner.value)?;
        let mut instances = self.backend.list_instances(owner).await?;
        instances.retain(|i| {
            i.tags
                .iter()
                .any(|(k, v)| *k == owner.key && *v == owner.value)
        });
        self.spend_read("cloud list-instances", &instances)?;
        Ok(instances)
    }

    /// Instance `id` for `operation`: its shape, the operation granted, the
    /// instance fetched now, then its ownership. Fetched even when this
    /// reconcile listed it: a mutation acts on the owner the provider reports
    /// just before it, never on one a listing saw up to a reconcile ago (the
    /// instance may have moved to another cluster since). None when the
    /// provider does not have it.
    async fn owned(&self, operation: Operation, id: &str) -> Result<Option<Instance>, CapError> {
        check_instance_id(id)?;
        check_operation(
            &self.grant,
            self.plugin(),
            operation,
            &format!("instance {id}"),
        )?;
        let Some(instance) = self.backend.get_instance(id).await? else {
            return Ok(None);
        };
        check_owned(&self.grant, self.plugin(), operation, id, &instance.tags)?;
        Ok(Some(instance))
    }

    pub async fn get_instance(&self, id: &str) -> Result<Instance, CapError> {
        match self.owned(Operation::GetInstance, id).await? {
            Some(i) if i.state != InstanceState::Terminated => {
                self.spend_read("cloud get-instance", &i)?;
                Ok(i)
            }
            _ => Err(CapError::NotFound(format!(
                "cloud get-instance: no instance {id}"
            ))),
        }
    }

    /// Delete instance `id`; one already gone, deleting or terminated is
    /// success, with no request and no mutation.
    pub async fn delete_instance(&self, id: &str) -> Result<(), CapError> {
        let Some(instance) = self.owned(Operation::DeleteInstance, id).await? else {
            return Ok(());
        };
        if matches!(
            instance.state,
            InstanceState::Deleting | InstanceState::Terminated
        ) {
            return Ok(());
        }
        let intent = self.intent(Operation::DeleteInstance, target(&instance), String::new());
        self.call
            .gate
            .mutate(intent, Ok(()), |permit| {
                self.backend.delete_instance(permit, id)
            })
            .await?;
        Ok(())
    }

    /// The granted groups among `ids` (every granted group when empty).
    pub async fn list_security_groups(
        &self,
        ids: &[String],
    ) -> Result<Vec<SecurityGroup>, CapError> {
        for id in ids {
            check_group_id(id)?;
        }
        let operation = Operation::ListSecurityGroups;
        let wanted: Vec<String> = if ids.is_empty() {
            check_operation(
                &self.grant,
                self.plugin(),
                operation,
                "every granted security group",
            )?;
            self.grant
                .security_groups
                .iter()
                .map(|g| g.0.clone())
                .collect()
        } else {
            for id in ids {
                check_group(&self.grant, self.plugin(), operation, id)?;
            }
            ids.to_vec()
        };
        if wanted.is_empty() {
            return Ok(vec![]);
        }
        let mut groups = self.backend.list_security_groups(&wanted).await?;
        groups.retain(|g| wanted.contains(&g.id));
        self.spend_read("cloud list-security-groups", &groups)?;
        Ok(groups)
    }

    /// The ID of the one granted group named `name`.
    pub async fn find_security_group(&self, name: &str) -> Result<String, CapError> {
        check_group_name(name)?;
        let operation = Operation::ListSecurityGroups;
        let what = format!("security groups named {name:?}");
        check_operation(&self.grant, self.plugin(), operation, &what)?;
        let groups = self.backend.find_security_groups(name).await?;
        self.spend_read("cloud find-security-group", &groups)?;
        let granted: Vec<&str> = groups
            .iter()
            .filter(|g| g.name == name && self.grant.security_groups.iter().any(|s| s.0 == g.id))
            .map(|g| g.id.as_str())
            .collect();
        match granted.as_slice() {
            [id] => Ok(id.to_string()),
            // One answer whether ungranted groups bear the name or not: the
            // message must not tell a plugin of groups outside its grant.
            [] => Err(CapError::NotFound(format!(
                "cloud find-security-group: no granted security group is named {name:?}: add the group's ID to security-groups in [plugins.{}.grants] cloud",
                self.plugin()
            ))),
            several => Err(CapError::Conflict(format!(
                "cloud find-security-group: {} granted security groups are named {name:?} ({}): pin the group by its ID instead of its name",
                several.len(),
                shown_ids(several)
            ))),
        }
    }

    /// Add `rule` to `group_id` unless the provider has an equal one.
    pub async fn ensure_rule(&self, group_id: &str, rule: &Rule) -> Result<bool, CapError> {
        check_group_id(group_id)?;
        check_rule(rule)?;
        check_group(&self.grant, self.plugin(), Operation::EnsureRule, group_id)?;
        check_rule_granted(&self.grant, self.plugin(), group_id, rule)?;
        let detail = rule
            .description
            .as_deref()
            .map(|d| format!("description {:?}", inert(d)))
            .unwrap_or_default();
        let target = format!("{group_id} {}", describe_rule(rule));
        let intent = self.intent(Operation::EnsureRule, target, detail);
        self.call
            .gate
            .mutate(intent, Ok(true), |permit| {
                self.backend.ensure_rule(permit, group_id, rule)
            })
            .await
    }

    /// Make instance `instance_id` a member of `group_id`: false when it
    /// already is (no mutation).
    pub async fn add_to_group(&self, instance_id: &str, group_id: &str) -> Result<bool, CapError> {
        check_instance_id(instance_id)?;
        check_group_id(group_id)?;
        check_group(&self.grant, self.plugin(), Operation::AddToGroup, group_id)?;
        let Some(instance) = self.owned(Operation::AddToGroup, instance_id).await? else {
            return Err(CapError::NotFound(format!(
                "cloud add-to-group: no instance {instance_id}"
            )));
        };
        if instance.security_groups.iter().any(|g| g == group_id) {
            return Ok(false);
        }
        let target = format!("{} to {group_id}", target(&instance));
        let intent = self.intent(Operation::AddToGroup, target, String::new());
        self.call
            .gate
            .mutate(intent, Ok(true), |permit| {
                self.backend.add_to_group(permit, &instance, group_id)
            })
            .await
    }

    /// Spend the size of `answer` (as JSON) of the reconcile's read
    /// allowance, as kube's reads do: a provider's listing of 11 MB of tags
    /// cannot pass a 4 MiB `read-per-reconcile`.
    fn spend_read(&self, what: &str, answer: &impl serde::Serialize) -> Result<(), CapError> {
        self.call.spend_read(what, json_size(answer))
    }

    fn intent(&self, operation: Operation, target: String, detail: String) -> Intent {
        Intent {
            capability: Self::NAME,
            operation: operation.name(),
            target,
            detail,
            diff: None,
        }
    }
}

/// The bytes of `value` as JSON, counted without holding them.
fn json_size(value: &impl serde::Serialize) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value).expect("a cloud answer serializes");
    count.0
}

/// "i-0abc (name node-7)": the provider's name bounded and inert.
fn target(instance: &Instance) -> String {
    let name = cut(inert(&instance.name).into_owned(), SHOWN_NAME);
    format!("{} (name {name})", instance.id)
}

/// Provider IDs in a message (they did not pass our shape checks: inert).
fn shown_ids(ids: &[&str]) -> String {
    ids.iter()
        .map(|id| inert(id).into_owned())
        .collect::<Vec<_>>()
        .join(", ")
}
