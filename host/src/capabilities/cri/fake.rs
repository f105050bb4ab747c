//! An in-memory container runtime for tests: scripted sandboxes, containers
//! and images, recorded actions, injectable failures and slow pulls.

use super::backend::{
    Container, CriBackend, Image, PodSandbox, RuntimeVersion, SandboxFilter, SandboxState,
    SandboxStatus,
};
use crate::capabilities::error::CapError;
use crate::capabilities::gate::Permit;
use std::sync::Mutex;
use std::time::Duration;

#[derive(Default)]
pub struct FakeCri {
    version: Mutex<RuntimeVersion>,
    sandboxes: Mutex<Vec<PodSandbox>>,
    containers: Mutex<Vec<Container>>,
    images: Mutex<Vec<Image>>,
    actions: Mutex<Vec<String>>,
    failure: Mutex<Option<CapError>>,
    pull_takes: Mutex<Duration>,
}

impl FakeCri {
    pub fn set_version(&self, name: &str, version: &str) {
        *self.version.lock().unwrap() = RuntimeVersion {
            runtime_name: name.into(),
            runtime_version: version.into(),
            runtime_api_version: "v1".into(),
        };
    }

    /// A sandbox of pod `uid` (named after it, in "default").
    pub fn add_sandbox(&self, id: &str, uid: &str, attempt: u32, state: SandboxState) {
        self.sandboxes.lock().unwrap().push(PodSandbox {
            id: id.into(),
            pod_name: format!("pod-{uid}"),
            namespace: "default".into(),
            uid: uid.into(),
            attempt,
            state,
            created_at_ns: 0,
            labels: vec![("io.kubernetes.pod.uid".into(), uid.into())],
            annotations: vec![],
        });
    }

    /// A sandbox as given (any namespace, name and state).
    pub fn add_pod(&self, sandbox: PodSandbox) {
        self.sandboxes.lock().unwrap().push(sandbox);
    }

    pub fn add_container(&self, container: Container) {
        self.containers.lock().unwrap().push(container);
    }

    pub fn add_image(&self, reference: &str) {
        self.images.lock().unwrap().push(Image {
            id: format!("sha256:{reference}"),
            repo_tags: vec![reference.into()],
            ..Image::default()
        });
    }

    /// Every mutation performed: "RemovePodSandbox abc", "PullImage docker.io/library/x:1".
    pub fn actions(&self) -> Vec<String> {
        self.actions.lock().unwrap().clone()
    }

    /// Fail every call with `error` (say, `unavailable`: the socket is gone) until cleared.
    pub fn fail_with(&self, error: Option<CapError>) {
        *self.failure.lock().unwrap() = error;
    }

    /// Pulls take this long (a stalled registry).
    pub fn pulls_take(&self, duration: Duration) {
        *self.pull_takes.lock().unwrap() = duration;
    }

    fn check(&self) -> Result<(), CapError> {
        match self.failure.lock().unwrap().clone() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    fn act(&self, action: String) -> Result<(), CapError> {
        self.check()?;
        self.actions.lock().unwrap().push(action);
        Ok(())
    }

    fn find_image(&self, reference: &str) -> Option<Image> {
        let images = self.images.lock().unwrap();
        images
            .iter()
            .find(|i| i.id == reference || i.repo_tags.iter().any(|t| t == reference))
            .cloned()
    }
}

#[async_trait::async_trait]
impl CriBackend for FakeCri {
    async fn version(&self) -> Result<RuntimeVersion, CapError> {
        self.check()?;
        Ok(self.version.lock().unwrap().clone())
    }

    async fn list_pod_sandboxes(
        &self,
        filter: &SandboxFilter,
    ) -> Result<Vec<PodSandbox>, CapError> {
        self.check()?;
        Ok(self
            .sandboxes
            .lock()
            .unwrap()
            .iter()
            .filter(|s| filter.matches(s))
            .cloned()
            .collect())
    }

    async fn pod_sandbox_status(&self, id: &str) -> Result<SandboxStatus, CapError> {
        self.check()?;
        let sandboxes = self.sandboxes.lock().unwrap();
        let sandbox = sandboxes.iter().find(|s| s.id == id).ok_or_else(|| {
            CapError::NotFound(format!("cri pod-sandbox-status: no sandbox {id}"))
        })?;
        Ok(SandboxStatus {
            sandbox: sandbox.clone(),
            ip: None,
            additional_ips: vec![],
        })
    }

    async fn stop_pod_sandbox(&self, permit: Permit, id: &str) -> Result<(), CapError> {
        let result = self.act(format!("StopPodSandbox {id}")).map(|()| {
            for s in self
                .sandboxes
                .lock()
                .unwrap()
                .iter_mut()
                .filter(|s| s.id == id)
            {
                s.state = SandboxState::NotReady;
            }
        });
        permit.finish_with(&result);
        result
    }

    async fn remove_pod_sandbox(&self, permit: Permit, id: &str) -> Result<(), CapError> {
        let result = self
            .act(format!("RemovePodSandbox {id}"))
            .map(|()| self.sandboxes.lock().unwrap().retain(|s| s.id != id));
        permit.finish_with(&result);
        result
    }

    async fn list_containers(
        &self,
        pod_sandbox_id: Option<&str>,
    ) -> Result<Vec<Container>, CapError> {
        self.check()?;
        let containers = self.containers.lock().unwrap();
        Ok(containers
            .iter()
            .filter(|c| pod_sandbox_id.is_none_or(|id| c.pod_sandbox_id == id))
            .cloned()
            .collect())
    }

    async fn list_images(&self) -> Result<Vec<Image>, CapError> {
        self.check()?;
        Ok(self.images.lock().unwrap().clone())
    }

    async fn image_status(&self, image: &str) -> Result<Option<Image>, CapError> {
        self.check()?;
        Ok(self.find_image(image))
    }

    async fn pull_image(
        &self,
        permit: Permit,
        image: &str,
        timeout: Duration,
    ) -> Result<String, CapError> {
        let takes = *self.pull_takes.lock().unwrap();
        let result = if takes > timeout {
            tokio::time::sleep(timeout).await;
            Err(CapError::Timeout(format!(
                "cri pull-image did not finish within {timeout:?}"
            )))
        } else {
            tokio::time::sleep(takes).await;
            self.act(format!("PullImage {image}")).map(|()| {
                self.add_image(image);
                format!("sha256:{image}")
            })
        };
        permit.finish_with(&result);
        result
    }
}
