//! `tend:plugin/cloud`: the cloud provider's compute API (OpenStack or AWS
//! EC2), confined to the plugin's grant (operations, ownership tags, security
//! group IDs), every mutation through the gate, every request paced by the
//! plugin's and the host's request rate.

mod adapter;
#[cfg(feature = "aws")]
mod aws;
mod backend;
mod fake;
mod grants;
mod openstack;
mod real;

#[cfg(test)]
mod tests;
mod wit;

pub use adapter::{CloudSettings, Endpoint, PluginCloud, Provider};
pub use backend::{
    CloudBackend, CloudLimits, Direction, EtherType, Instance, InstanceState, OwnerTag, PortRange,
    Protocol, Remote, Rule, SecurityGroup,
};
pub use fake::FakeCloud;
pub use grants::{CloudGrant, Operation};

use crate::capabilities::call::Call;
use crate::capabilities::capability::{BackendEnv, Capability};
use crate::wit::cloud;
use std::sync::Arc;
use wasmtime::component::{HasSelf, Linker};

impl Capability for PluginCloud {
    const NAME: &'static str = "cloud";
    /// The names of `tend_rules::cloud::Operation::MUTATIONS` (a test keeps them equal).
    const MUTATIONS: &'static [&'static str] = &[
        Operation::DeleteInstance.name(),
        Operation::EnsureRule.name(),
        Operation::AddToGroup.name(),
    ];
    type Grant = CloudGrant;
    type Settings = CloudSettings;
    type Limits = CloudLimits;
    type Backend = dyn CloudBackend;
    type Fake = FakeCloud;

    fn describe_grant(grant: &CloudGrant) -> Vec<String> {
        if grant.operations.is_empty() {
            return vec![];
        }
        let operations: Vec<&str> = grant.operations.iter().map(|o| o.name()).collect();
        let owners: Vec<String> = grant
            .instances
            .iter()
            .map(|o| format!("{}={}", o.tag, o.value))
            .collect();
        let groups: Vec<&str> = grant.security_groups.iter().map(|g| g.0.as_str()).collect();
        let listed = |what: &str, items: &[&str]| {
            if items.is_empty() {
                String::new()
            } else {
                format!("; {what} {}", items.join(", "))
            }
        };
        let owners: Vec<&str> = owners.iter().map(String::as_str).collect();
        let remotes: Vec<String> = grant.remotes.iter().map(|c| c.to_string()).collect();
        let remotes: Vec<&str> = remotes.iter().map(String::as_str).collect();
        let ports: Vec<String> = grant.ports.iter().map(|p| p.to_string()).collect();
        let ports: Vec<&str> = ports.iter().map(String::as_str).collect();
        let protocols: Vec<String> = grant.protocols.iter().flatten().map(|p| p.name()).collect();
        let protocols: Vec<&str> = protocols.iter().map(String::as_str).collect();
        vec![format!(
            "operations: {}{}{}{}{}{}",
            operations.join(", "),
            listed("instances tagged", &owners),
            listed("security groups", &groups),
            listed("rules from", &remotes),
            listed("protocols", &protocols),
            listed("ports", &ports),
        )]
    }

    fn real(settings: &CloudSettings, _: &BackendEnv) -> anyhow::Result<Arc<dyn CloudBackend>> {
        match settings.provider {
            None => Ok(Arc::new(real::Unconfigured)),
            Some(Provider::OpenStack) => Ok(Arc::new(openstack::OpenStack::new(settings)?)),
            Some(Provider::Aws) => aws_backend(settings),
        }
    }

    fn fake() -> (Arc<dyn CloudBackend>, Arc<FakeCloud>) {
        let fake = Arc::new(FakeCloud::default());
        (fake.clone(), fake)
    }

    fn for_call(
        backend: &Arc<dyn CloudBackend>,
        grant: &CloudGrant,
        limits: &CloudLimits,
        call: &Arc<Call>,
    ) -> Self {
        PluginCloud {
            // Paced by this plugin's request rate and deadline.
            backend: backend.clone().for_plugin(call, *limits),
            grant: grant.clone(),
            call: call.clone(),
        }
    }

    fn add_to_linker<T: Send + 'static>(
        linker: &mut Linker<T>,
        get: fn(&mut T) -> &mut Self,
    ) -> wasmtime::Result<()> {
        cloud::add_to_linker::<T, HasSelf<Self>>(linker, get)
    }

    fn render_metrics(backend: &dyn CloudBackend, configured: &dyn Fn(&str) -> bool) -> String {
        backend.rate_metrics(configured)
    }
}

#[cfg(feature = "aws")]
fn aws_backend(settings: &CloudSettings) -> anyhow::Result<Arc<dyn CloudBackend>> {
    let pacer = real::Pacer::new(settings.qps, settings.burst);
    let endpoint = settings.endpoint.clone().map(|e| e.0);
    Ok(Arc::new(aws::AwsCloud::new(
        settings.region.clone(),
        endpoint,
        pacer,
    )?))
}

#[cfg(not(feature = "aws"))]
fn aws_backend(_: &CloudSettings) -> anyhow::Result<Arc<dyn CloudBackend>> {
    anyhow::bail!(
        "[host.cloud] provider = \"aws\": this tend was built without AWS support: build it with the cargo feature \"aws\""
    )
}

use crate::capabilities::CapError;

/// The WIT's functions, each on the adapter method that does it.
impl wit::Functions for PluginCloud {
    async fn list_instances(&self, owner: OwnerTag) -> Result<Vec<Instance>, CapError> {
        self.list_instances(&owner).await
    }
    async fn get_instance(&self, id: String) -> Result<Instance, CapError> {
        self.get_instance(&id).await
    }
    async fn delete_instance(&self, id: String) -> Result<(), CapError> {
        self.delete_instance(&id).await
    }
    async fn list_security_groups(&self, ids: Vec<String>) -> Result<Vec<SecurityGroup>, CapError> {
        self.list_security_groups(&ids).await
    }
    async fn find_security_group(&self, name: String) -> Result<String, CapError> {
        self.find_security_group(&name).await
    }
    async fn ensure_rule(&self, group_id: String, rule: Rule) -> Result<bool, CapError> {
        self.ensure_rule(&group_id, &rule).await
    }
    async fn add_to_group(&self, instance_id: String, group_id: String) -> Result<bool, CapError> {
        self.add_to_group(&instance_id, &group_id).await
    }
}
