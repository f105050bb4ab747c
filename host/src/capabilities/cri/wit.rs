//! `tend:plugin/cri` answered by the adapter.

use super::adapter::PluginCri;
use super::backend::{
    Container, ContainerState, Image, PodSandbox, RuntimeVersion, SandboxFilter, SandboxState,
    SandboxStatus,
};
use crate::wit::tend::plugin::cri;
use crate::wit::types;
use std::time::Duration;
use wasmtime::component::{HasSelf, Linker};

type WitResult<T> = Result<T, types::Error>;

pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut PluginCri,
) -> wasmtime::Result<()> {
    cri::add_to_linker::<T, HasSelf<PluginCri>>(linker, get)
}

fn to_state(state: SandboxState) -> cri::SandboxState {
    match state {
        SandboxState::Ready => cri::SandboxState::Ready,
        SandboxState::NotReady => cri::SandboxState::NotReady,
    }
}

fn sandbox(s: PodSandbox) -> cri::PodSandbox {
    cri::PodSandbox {
        id: s.id,
        pod_name: s.pod_name,
        namespace: s.namespace,
        uid: s.uid,
        attempt: s.attempt,
        state: to_state(s.state),
        created_at_ns: s.created_at_ns,
        labels: s.labels,
        annotations: s.annotations,
    }
}

fn sandbox_status(s: SandboxStatus) -> cri::SandboxStatus {
    cri::SandboxStatus {
        sandbox: sandbox(s.sandbox),
        ip: s.ip,
        additional_ips: s.additional_ips,
    }
}

fn container(c: Container) -> cri::Container {
    cri::Container {
        id: c.id,
        pod_sandbox_id: c.pod_sandbox_id,
        name: c.name,
        attempt: c.attempt,
        image: c.image,
        image_ref: c.image_ref,
        state: match c.state {
            ContainerState::Created => cri::ContainerState::Created,
            ContainerState::Running => cri::ContainerState::Running,
            ContainerState::Exited => cri::ContainerState::Exited,
            ContainerState::Unknown => cri::ContainerState::Unknown,
        },
        created_at_ns: c.created_at_ns,
        labels: c.labels,
        annotations: c.annotations,
    }
}

fn image(i: Image) -> cri::Image {
    cri::Image {
        id: i.id,
        repo_tags: i.repo_tags,
        repo_digests: i.repo_digests,
        size_bytes: i.size_bytes,
    }
}

fn version(v: RuntimeVersion) -> cri::RuntimeVersion {
    cri::RuntimeVersion {
        runtime_name: v.runtime_name,
        runtime_version: v.runtime_version,
        runtime_api_version: v.runtime_api_version,
    }
}

impl cri::Host for PluginCri {
    async fn version(&mut self) -> WitResult<cri::RuntimeVersion> {
        let result = PluginCri::version(self).await;
        self.call.counted("cri", "version", result).map(version)
    }
    async fn list_pod_sandboxes(
        &mut self,
        filter: cri::SandboxFilter,
    ) -> WitResult<Vec<cri::PodSandbox>> {
        let filter = SandboxFilter {
            id: filter.id,
            state: filter.state.map(|s| match s {
                cri::SandboxState::Ready => SandboxState::Ready,
                cri::SandboxState::NotReady => SandboxState::NotReady,
            }),
            labels: filter.labels,
        };
        let result = PluginCri::list_pod_sandboxes(self, &filter).await;
        let sandboxes = self.call.counted("cri", "list-pod-sandboxes", result)?;
        Ok(sandboxes.into_iter().map(sandbox).collect())
    }
    async fn pod_sandbox_status(&mut self, id: String) -> WitResult<cri::SandboxStatus> {
        let result = PluginCri::pod_sandbox_status(self, &id).await;
        self.call
            .counted("cri", "pod-sandbox-status", result)
            .map(sandbox_status)
    }
    async fn stop_pod_sandbox(&mut self, id: String) -> WitResult<()> {
        let result = PluginCri::stop_pod_sandbox(self, &id).await;
        self.call.counted("cri", "stop-pod-sandbox", result)
    }
    async fn remove_pod_sandbox(&mut self, id: String) -> WitResult<()> {
        let result = PluginCri::remove_pod_sandbox(self, &id).await;
        self.call.counted("cri", "remove-pod-sandbox", result)
    }
    async fn list_containers(
        &mut self,
        pod_sandbox_id: Option<String>,
    ) -> WitResult<Vec<cri::Container>> {
        let result = PluginCri::list_containers(self, pod_sandbox_id.as_deref()).await;
        let containers = self.call.counted("cri", "list-containers", result)?;
        Ok(containers.into_iter().map(container).collect())
    }
    async fn list_images(&mut self) -> WitResult<Vec<cri::Image>> {
        let result = PluginCri::list_images(self).await;
        let images = self.call.counted("cri", "list-images", result)?;
        Ok(images.into_iter().map(image).collect())
    }
    async fn image_status(&mut self, name: String) -> WitResult<Option<cri::Image>> {
        let result = PluginCri::image_status(self, &name).await;
        self.call
            .counted("cri", "image-status", result)
            .map(|i| i.map(image))
    }
    async fn pull_image(&mut self, name: String, timeout_ms: u32) -> WitResult<String> {
        let result =
            PluginCri::pull_image(self, &name, Duration::from_millis(timeout_ms.into())).await;
        self.call.counted("cri", "pull-image", result)
    }
}
