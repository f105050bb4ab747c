//! The CRI backend: sandboxes, containers and images of the node's runtime.
//! Mutations require a [`Permit`]: only the mutation gate makes one, and it
//! journals their result.

use crate::capabilities::error::CapError;
use crate::capabilities::gate::Permit;
use std::time::Duration;

pub use crate::wit::cri::{
    Container, ContainerState, Image, PodSandbox, RuntimeVersion, SandboxFilter, SandboxState,
    SandboxStatus,
};

/// The empty filter passes every sandbox (the generated record has no
/// `Default` of its own).
impl Default for SandboxFilter {
    fn default() -> Self {
        SandboxFilter {
            id: None,
            state: None,
            labels: Vec::new(),
        }
    }
}

impl SandboxFilter {
    /// Whether `sandbox` passes every set field (what the runtime applies too).
    pub fn matches(&self, sandbox: &PodSandbox) -> bool {
        self.id.as_ref().is_none_or(|id| *id == sandbox.id)
            && self.state.is_none_or(|s| s == sandbox.state)
            && self.labels.iter().all(|l| sandbox.labels.contains(l))
    }
}

/// How long a read may take before the call returns `timeout`.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long stopping or removing a sandbox may take (its containers stop first).
pub const SANDBOX_TIMEOUT: Duration = Duration::from_secs(60);

#[async_trait::async_trait]
pub trait CriBackend: Send + Sync + 'static {
    async fn version(&self) -> Result<RuntimeVersion, CapError>;
    async fn list_pod_sandboxes(&self, filter: &SandboxFilter)
    -> Result<Vec<PodSandbox>, CapError>;
    async fn pod_sandbox_status(&self, id: &str) -> Result<SandboxStatus, CapError>;
    async fn stop_pod_sandbox(&self, permit: Permit, id: &str) -> Result<(), CapError>;
    async fn remove_pod_sandbox(&self, permit: Permit, id: &str) -> Result<(), CapError>;
    async fn list_containers(
        &self,
        pod_sandbox_id: Option<&str>,
    ) -> Result<Vec<Container>, CapError>;
    async fn list_images(&self) -> Result<Vec<Image>, CapError>;
    async fn image_status(&self, image: &str) -> Result<Option<Image>, CapError>;
    /// Pull `image` (a full reference); `timeout` bounds the whole pull, and
    /// dropping the call cancels it in the runtime.
    async fn pull_image(
        &self,
        permit: Permit,
        image: &str,
        timeout: Duration,
    ) -> Result<String, CapError>;
}
