//! `tend:plugin/cri`: the node's container runtime over CRI v1, confined to
//! the plugin's grant (reads, each mutating operation, pullable images), every
//! mutation through the gate.

mod adapter;
mod backend;
mod fake;
mod grants;
mod real;
mod wit;

pub use adapter::{CriSettings, PluginCri};
pub use backend::{
    Container, ContainerState, CriBackend, Image, PodSandbox, RuntimeVersion, SandboxFilter,
    SandboxState, SandboxStatus,
};
pub use fake::FakeCri;
pub use grants::{CriGrant, Operation};
pub use real::RealCri;

use crate::capabilities::call::Call;
use crate::capabilities::capability::{BackendEnv, Capability, NoLimits};
use crate::wit::cri;
use adapter::DEFAULT_SOCKET;
use std::path::PathBuf;
use std::sync::Arc;
use wasmtime::component::{HasSelf, Linker};

impl Capability for PluginCri {
    const NAME: &'static str = "cri";
    const MUTATIONS: &'static [&'static str] = &[
        Operation::StopPodSandbox.name(),
        Operation::RemovePodSandbox.name(),
        Operation::PullImage.name(),
    ];
    type Grant = CriGrant;
    type Settings = CriSettings;
    type Limits = NoLimits;
    type Backend = dyn CriBackend;
    type Fake = FakeCri;

    fn describe_grant(grant: &CriGrant) -> Vec<String> {
        if !grant.read && grant.operations.is_empty() {
            return vec![];
        }
        let operations: Vec<&str> = grant.operations.iter().map(|o| o.name()).collect();
        let images: Vec<&str> = grant.images.iter().map(|p| p.0.as_str()).collect();
        let states: Vec<&str> = grant.states.iter().map(|s| s.name()).collect();
        let listed = |what: &str, items: &[&str]| {
            if items.is_empty() {
                String::new()
            } else {
                format!("; {what} {}", items.join(", "))
            }
        };
        let namespaces: Vec<&str> = grant.namespaces.iter().map(String::as_str).collect();
        vec![format!(
            "{}operations: {}{}{}{}",
            if grant.read { "read; " } else { "" },
            if operations.is_empty() {
                "none".to_string()
            } else {
                operations.join(", ")
            },
            listed("images", &images),
            listed("sandboxes in namespaces", &namespaces),
            listed("sandboxes in states", &states),
        )]
    }

    fn real(settings: &CriSettings, _: &BackendEnv) -> anyhow::Result<Arc<dyn CriBackend>> {
        let socket = settings
            .endpoint
            .clone()
            .map_or_else(|| PathBuf::from(DEFAULT_SOCKET), |e| e.0);
        Ok(Arc::new(RealCri::new(socket)))
    }

    fn fake() -> (Arc<dyn CriBackend>, Arc<FakeCri>) {
        let fake = Arc::new(FakeCri::default());
        (fake.clone(), fake)
    }

    fn for_call(
        backend: &Arc<dyn CriBackend>,
        grant: &CriGrant,
        _: &NoLimits,
        call: &Arc<Call>,
    ) -> Self {
        PluginCri {
            backend: backend.clone(),
            grant: grant.clone(),
            call: call.clone(),
        }
    }

    fn add_to_linker<T: Send + 'static>(
        linker: &mut Linker<T>,
        get: fn(&mut T) -> &mut Self,
    ) -> wasmtime::Result<()> {
        cri::add_to_linker::<T, HasSelf<Self>>(linker, get)
    }
}

use crate::capabilities::CapError;
use std::time::Duration;

/// The WIT's functions, each on the adapter method that does it.
impl wit::Functions for PluginCri {
    async fn version(&self) -> Result<RuntimeVersion, CapError> {
        self.version().await
    }
    async fn list_pod_sandboxes(&self, filter: SandboxFilter) -> Result<Vec<PodSandbox>, CapError> {
        self.list_pod_sandboxes(&filter).await
    }
    async fn pod_sandbox_status(&self, id: String) -> Result<SandboxStatus, CapError> {
        self.pod_sandbox_status(&id).await
    }
    async fn stop_pod_sandbox(&self, id: String) -> Result<(), CapError> {
        self.stop_pod_sandbox(&id).await
    }
    async fn remove_pod_sandbox(&self, id: String) -> Result<(), CapError> {
        self.remove_pod_sandbox(&id).await
    }
    async fn list_containers(
        &self,
        pod_sandbox_id: Option<String>,
    ) -> Result<Vec<Container>, CapError> {
        self.list_containers(pod_sandbox_id.as_deref()).await
    }
    async fn list_images(&self) -> Result<Vec<Image>, CapError> {
        self.list_images().await
    }
    async fn image_status(&self, image: String) -> Result<Option<Image>, CapError> {
        self.image_status(&image).await
    }
    async fn pull_image(&self, image: String, timeout_ms: u32) -> Result<String, CapError> {
        self.pull_image(&image, Duration::from_millis(timeout_ms.into()))
            .await
    }
}
