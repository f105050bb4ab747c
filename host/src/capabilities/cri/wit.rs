//! `tend:plugin/cri` answered by the adapter.

use super::adapter::PluginCri;
use super::grants::Operation;
use crate::capabilities::Capability;
use crate::capabilities::tape::NO_ARGS;
use crate::wit::cri;
use crate::wit::types;
use std::time::Duration;

type WitResult<T> = wasmtime::Result<Result<T, types::Error>>;

impl cri::Host for PluginCri {
    async fn version(&mut self) -> WitResult<cri::RuntimeVersion> {
        let this = &*self;
        this.call
            .answer(Self::NAME, "version", NO_ARGS, |_| this.version())
            .await
    }
    async fn list_pod_sandboxes(
        &mut self,
        filter: cri::SandboxFilter,
    ) -> WitResult<Vec<cri::PodSandbox>> {
        let this = &*self;
        this.call
            .answer(Self::NAME, "list-pod-sandboxes", (filter,), |(filter,)| async move {
                this.list_pod_sandboxes(&filter).await
            })
            .await
    }
    async fn pod_sandbox_status(&mut self, id: String) -> WitResult<cri::SandboxStatus> {
        let this = &*self;
        this.call
            .answer(Self::NAME, "pod-sandbox-status", (id,), |(id,)| async move {
                this.pod_sandbox_status(&id).await
            })
            .await
    }
    async fn stop_pod_sandbox(&mut self, id: String) -> WitResult<()> {
        let this = &*self;
        let operation = Operation::StopPodSandbox.name();
        this.call
            .answer(Self::NAME, operation, (id,), |(id,)| async move {
                this.stop_pod_sandbox(&id).await
            })
            .await
    }
    async fn remove_pod_sandbox(&mut self, id: String) -> WitResult<()> {
        let this = &*self;
        let operation = Operation::RemovePodSandbox.name();
        this.call
            .answer(Self::NAME, operation, (id,), |(id,)| async move {
                this.remove_pod_sandbox(&id).await
            })
            .await
    }
    async fn list_containers(
        &mut self,
        pod_sandbox_id: Option<String>,
    ) -> WitResult<Vec<cri::Container>> {
        let this = &*self;
        this.call
            .answer(Self::NAME, "list-containers", (pod_sandbox_id,), |(id,)| async move {
                this.list_containers(id.as_deref()).await
            })
            .await
    }
    async fn list_images(&mut self) -> WitResult<Vec<cri::Image>> {
        let this = &*self;
        this.call
            .answer(Self::NAME, "list-images", NO_ARGS, |_| this.list_images())
            .await
    }
    async fn image_status(&mut self, name: String) -> WitResult<Option<cri::Image>> {
        let this = &*self;
        this.call
            .answer(Self::NAME, "image-status", (name,), |(name,)| async move {
                this.image_status(&name).await
            })
            .await
    }
    async fn pull_image(&mut self, name: String, timeout_ms: u32) -> WitResult<String> {
        let this = &*self;
        let operation = Operation::PullImage.name();
        this.call
            .answer(Self::NAME, operation, (name, timeout_ms), |(name, ms)| async move {
                this.pull_image(&name, Duration::from_millis(ms.into())).await
            })
            .await
    }
}
