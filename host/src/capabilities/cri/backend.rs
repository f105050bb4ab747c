//! The CRI backend: sandboxes, containers and images of the node's runtime.
//! Mutations consume a [`Permit`] from the mutation gate and finish it with
//! their result.

use crate::capabilities::error::CapError;
use crate::capabilities::gate::Permit;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxState {
    Ready,
    NotReady,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSandbox {
    pub id: String,
    pub pod_name: String,
    pub namespace: String,
    pub uid: String,
    pub attempt: u32,
    pub state: SandboxState,
    pub created_at_ns: i64,
    pub labels: Vec<(String, String)>,
    pub annotations: Vec<(String, String)>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxFilter {
    pub id: Option<String>,
    pub state: Option<SandboxState>,
    pub labels: Vec<(String, String)>,
}

impl SandboxFilter {
    /// Whether `sandbox` passes every set field (what the runtime applies too).
    pub fn matches(&self, sandbox: &PodSandbox) -> bool {
        self.id.as_ref().is_none_or(|id| *id == sandbox.id)
            && self.state.is_none_or(|s| s == sandbox.state)
            && self.labels.iter().all(|l| sandbox.labels.contains(l))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxStatus {
    pub sandbox: PodSandbox,
    pub ip: Option<String>,
    pub additional_ips: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerState {
    Created,
    Running,
    Exited,
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    pub id: String,
    pub pod_sandbox_id: String,
    pub name: String,
    pub attempt: u32,
    pub image: String,
    pub image_ref: String,
    pub state: ContainerState,
    pub created_at_ns: i64,
    pub labels: Vec<(String, String)>,
    pub annotations: Vec<(String, String)>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Image {
    pub id: String,
    pub repo_tags: Vec<String>,
    pub repo_digests: Vec<String>,
    pub size_bytes: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeVersion {
    pub runtime_name: String,
    pub runtime_version: String,
    pub runtime_api_version: String,
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
