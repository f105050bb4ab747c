//! `tend:plugin/cri` answered by the adapter.

use super::adapter::PluginCri;
use super::grants::Operation;
use crate::capabilities::Capability;
use crate::wit::cri;
use crate::wit::types;
use std::time::Duration;

type WitResult<T> = Result<T, types::Error>;

impl cri::Host for PluginCri {
    async fn version(&mut self) -> WitResult<cri::RuntimeVersion> {
        let result = PluginCri::version(self).await;
        self.call.counted(Self::NAME, "version", result)
    }
    async fn list_pod_sandboxes(
        &mut self,
        filter: cri::SandboxFilter,
    ) -> WitResult<Vec<cri::PodSandbox>> {
        let result = PluginCri::list_pod_sandboxes(self, &filter).await;
        self.call.counted(Self::NAME, "list-pod-sandboxes", result)
    }
    async fn pod_sandbox_status(&mut self, id: String) -> WitResult<cri::SandboxStatus> {
        let result = PluginCri::pod_sandbox_status(self, &id).await;
        self.call.counted(Self::NAME, "pod-sandbox-status", result)
    }
    async fn stop_pod_sandbox(&mut self, id: String) -> WitResult<()> {
        let result = PluginCri::stop_pod_sandbox(self, &id).await;
        self.call
            .counted(Self::NAME, Operation::StopPodSandbox.name(), result)
    }
    async fn remove_pod_sandbox(&mut self, id: String) -> WitResult<()> {
        let result = PluginCri::remove_pod_sandbox(self, &id).await;
        self.call
            .counted(Self::NAME, Operation::RemovePodSandbox.name(), result)
    }
    async fn list_containers(
        &mut self,
        pod_sandbox_id: Option<String>,
    ) -> WitResult<Vec<cri::Container>> {
        let result = PluginCri::list_containers(self, pod_sandbox_id.as_deref()).await;
        self.call.counted(Self::NAME, "list-containers", result)
    }
    async fn list_images(&mut self) -> WitResult<Vec<cri::Image>> {
        let result = PluginCri::list_images(self).await;
        self.call.counted(Self::NAME, "list-images", result)
    }
    async fn image_status(&mut self, name: String) -> WitResult<Option<cri::Image>> {
        let result = PluginCri::image_status(self, &name).await;
        self.call.counted(Self::NAME, "image-status", result)
    }
    async fn pull_image(&mut self, name: String, timeout_ms: u32) -> WitResult<String> {
        let result =
            PluginCri::pull_image(self, &name, Duration::from_millis(timeout_ms.into())).await;
        self.call
            .counted(Self::NAME, Operation::PullImage.name(), result)
    }
}
