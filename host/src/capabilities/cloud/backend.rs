//! The cloud backend: instances and security groups of one provider account
//! (OpenStack or AWS EC2). Listings return every page or an error; mutations
//! require a [`Permit`]: only the mutation gate makes one, and it journals
//! their result. Grants are not checked here (the adapter did), but every
//! request of a backend bound to a plugin ([`CloudBackend::for_plugin`])
//! takes a slot of that plugin's request rate first.

use crate::capabilities::call::Call;
use crate::capabilities::error::CapError;
use crate::capabilities::gate::Permit;
use std::sync::Arc;
use std::time::Duration;

/// `[plugins.<name>.limits] cloud-*`: one plugin's API requests (every page
/// counts; a token bucket kept across reconciles, waited for as `kube-qps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CloudLimits {
    #[serde(rename = "cloud-qps")]
    pub qps: u32,
    /// Requests the bucket holds.
    #[serde(rename = "cloud-burst")]
    pub burst: u32,
}

impl Default for CloudLimits {
    fn default() -> Self {
        CloudLimits { qps: 5, burst: 10 }
    }
}

pub use crate::wit::cloud::{
    Direction, EtherType, Instance, InstanceState, OwnerTag, PortRange, Protocol, Remote, Rule,
    SecurityGroup,
};

/// How long one request may take before the call returns `timeout`.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The most pages a listing follows: past it the listing is an error (a
/// provider that never stops paging), never a partial list.
pub const MAX_PAGES: usize = 1000;

#[async_trait::async_trait]
pub trait CloudBackend: Send + Sync + 'static {
    /// "openstack" or "aws": for messages and the journal.
    fn provider(&self) -> &'static str;
    /// This backend with every request paced by `call`'s deadline and its
    /// plugin's request rate (`limits`).
    fn for_plugin(self: Arc<Self>, call: &Arc<Call>, limits: CloudLimits) -> Arc<dyn CloudBackend>;
    /// Every instance tagged `owner` (key and value), all pages, or an error.
    async fn list_instances(&self, owner: &OwnerTag) -> Result<Vec<Instance>, CapError>;
    /// One instance; None when it does not exist (or is long terminated).
    async fn get_instance(&self, id: &str) -> Result<Option<Instance>, CapError>;
    /// Delete (terminate) an instance; one already gone is success.
    async fn delete_instance(&self, permit: Permit, id: &str) -> Result<(), CapError>;
    /// The groups with these IDs, with their rules (absent IDs are left out).
    async fn list_security_groups(&self, ids: &[String]) -> Result<Vec<SecurityGroup>, CapError>;
    /// The groups named `name`, with their rules.
    async fn find_security_groups(&self, name: &str) -> Result<Vec<SecurityGroup>, CapError>;
    /// Create `rule` in `group_id`: true when created, false when the provider
    /// already had an equal rule (its duplicate answer is success).
    async fn ensure_rule(
        &self,
        permit: Permit,
        group_id: &str,
        rule: &Rule,
    ) -> Result<bool, CapError>;
    /// Make `instance` a member of `group_id`: each of its network interfaces
    /// (AWS: read again, each ENI's groups plus this one; OpenStack: each
    /// port, with the port's revision), every other group kept: true when
    /// one was added.
    async fn add_to_group(
        &self,
        permit: Permit,
        instance: &Instance,
        group_id: &str,
    ) -> Result<bool, CapError>;
    /// Requests sent so far (every page counts), for `/metrics` and benchmarks.
    fn requests(&self) -> u64;
    /// The request and request-rate series of the plugins `configured`
    /// accepts, whole families for `/metrics` (a real backend's
    /// [`super::real::Pacer::render`]).
    fn rate_metrics(&self, _configured: &dyn Fn(&str) -> bool) -> String {
        String::new()
    }
}
