//! An in-memory container runtime for tests: scripted sandboxes, containers
//! and images, recorded actions, injectable failures and slow pulls.

use super::backend::{
    Container, CriBackend, Image, PodSandbox, RuntimeVersion, SandboxFilter, SandboxState,
    SandboxStatus,
};
use super::grants::Operation;
use crate::capabilities::error::CapError;
use crate::capabilities::fakes::FakeLedger;
use crate::capabilities::gate::Permit;
use std::sync::Mutex;
use std::time::Duration;

#[derive(Default)]
pub struct FakeCri {
    version: Mutex<Option<RuntimeVersion>>,
    sandboxes: Mutex<Vec<PodSandbox>>,
    containers: Mutex<Vec<Container>>,
    images: Mutex<Vec<Image>>,
    ledger: FakeLedger,
    pull_takes: Mutex<Duration>,
}

impl FakeCri {
    pub fn set_version(&self, name: &str, version: &str) {
        *self.version.lock().unwrap() = Some(RuntimeVersion {
            runtime_name: name.into(),
            runtime_version: version.into(),
            runtime_api_version: "v1".into(),
        });
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
            repo_digests: vec![],
            size_bytes: 0,
        });
    }

    /// Every mutation performed: "remove-pod-sandbox abc", "pull-image docker.io/library/x:1".
    pub fn actions(&self) -> Vec<String> {
        self.ledger.actions()
    }

    /// Fail every call with `error` (say, `unavailable`: the socket is gone) until cleared.
    pub fn fail_with(&self, error: Option<CapError>) {
        self.ledger.fail_with(error);
    }

    /// Pulls take this long (a stalled registry).
    pub fn pulls_take(&self, duration: Duration) {
        *self.pull_takes.lock().unwrap() = duration;
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
        self.ledger.check()?;
        let set = self.version.lock().unwrap().clone();
        // Until a test sets one: a runtime that names itself nothing.
        Ok(set.unwrap_or_else(|| RuntimeVersion {
            runtime_name: String::new(),
            runtime_version: String::new(),
            runtime_api_version: String::new(),
        }))
    }

    async fn list_pod_sandboxes(
        &self,
        filter: &SandboxFilter,
    ) -> Result<Vec<PodSandbox>, CapError> {
        self.ledger.check()?;
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
        self.ledger.check()?;
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

    async fn stop_pod_sandbox(&self, _: Permit, id: &str) -> Result<(), CapError> {
        self.ledger
            .act(Operation::StopPodSandbox.name(), id)
            .map(|()| {
                for s in self
                    .sandboxes
                    .lock()
                    .unwrap()
                    .iter_mut()
                    .filter(|s| s.id == id)
                {
                    s.state = SandboxState::NotReady;
                }
            })
    }

    async fn remove_pod_sandbox(&self, _: Permit, id: &str) -> Result<(), CapError> {
        self.ledger
            .act(Operation::RemovePodSandbox.name(), id)
            .map(|()| self.sandboxes.lock().unwrap().retain(|s| s.id != id))
    }

    async fn list_containers(
        &self,
        pod_sandbox_id: Option<&str>,
    ) -> Result<Vec<Container>, CapError> {
        self.ledger.check()?;
        let containers = self.containers.lock().unwrap();
        Ok(containers
            .iter()
            .filter(|c| pod_sandbox_id.is_none_or(|id| c.pod_sandbox_id == id))
            .cloned()
            .collect())
    }

    async fn list_images(&self) -> Result<Vec<Image>, CapError> {
        self.ledger.check()?;
        Ok(self.images.lock().unwrap().clone())
    }

    async fn image_status(&self, image: &str) -> Result<Option<Image>, CapError> {
        self.ledger.check()?;
        Ok(self.find_image(image))
    }

    async fn pull_image(
        &self,
        _: Permit,
        image: &str,
        timeout: Duration,
    ) -> Result<String, CapError> {
        let takes = *self.pull_takes.lock().unwrap();
        if takes > timeout {
            tokio::time::sleep(timeout).await;
            Err(CapError::Timeout(format!(
                "cri pull-image did not finish within {timeout:?}"
            )))
        } else {
            tokio::time::sleep(takes).await;
            self.ledger
                .act(Operation::PullImage.name(), image)
                .map(|()| {
                    self.add_image(image);
                    format!("sha256:{image}")
                })
        }
    }
}
