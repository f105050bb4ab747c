//! CRI v1 over the runtime's unix socket (tonic). The channel is made on first
//! use and reconnects by itself, so a runtime that restarts (pull-guard
//! restarts containerd) is reached again on the next call.

use super::backend::{
    Container, ContainerState, CriBackend, Image, PodSandbox, READ_TIMEOUT, RuntimeVersion,
    SANDBOX_TIMEOUT, SandboxFilter, SandboxState, SandboxStatus,
};
use crate::capabilities::error::CapError;
use crate::capabilities::gate::Permit;
use hyper_util::rt::TokioIo;
use k8s_cri::v1 as cri;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::OnceCell;
use tonic::transport::{Channel, Endpoint, Uri};

/// How long connecting to the socket may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

pub struct RealCri {
    socket: PathBuf,
    channel: OnceCell<Channel>,
}

impl RealCri {
    pub fn new(socket: PathBuf) -> Self {
        RealCri {
            socket,
            channel: OnceCell::new(),
        }
    }

    async fn channel(&self) -> Channel {
        self.channel
            .get_or_init(|| async {
                let socket = self.socket.clone();
                // The URI is required by tonic and ignored by the connector.
                Endpoint::from_static("http://cri.invalid")
                    .connect_timeout(CONNECT_TIMEOUT)
                    .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
                        let socket = socket.clone();
                        async move {
                            Ok::<_, std::io::Error>(TokioIo::new(
                                tokio::net::UnixStream::connect(socket).await?,
                            ))
                        }
                    }))
            })
            .await
            .clone()
    }

    async fn runtime(&self) -> RuntimeServiceClient<Channel> {
        RuntimeServiceClient::new(self.channel().await)
    }

    async fn images(&self) -> ImageServiceClient<Channel> {
        ImageServiceClient::new(self.channel().await)
    }

    /// The runtime's status as the error case a plugin acts on.
    fn error(&self, what: &str, status: tonic::Status) -> CapError {
        use tonic::Code;
        let message = format!("cri {what}: {}", status.message());
        match status.code() {
            Code::NotFound => CapError::NotFound(message),
            Code::Unavailable => CapError::Unavailable(format!(
                "the container runtime at unix://{} did not answer ({}): is it running, and is [host.cri] endpoint right?",
                self.socket.display(),
                status.message()
            )),
            Code::DeadlineExceeded | Code::Cancelled => CapError::Timeout(message),
            Code::InvalidArgument => CapError::Invalid(message),
            Code::AlreadyExists | Code::FailedPrecondition | Code::Aborted => {
                CapError::Conflict(message)
            }
            _ => CapError::Other(message),
        }
    }
}

/// `request` with a deadline the runtime sees (grpc-timeout). [`within`]
/// enforces it, a moment earlier, so the error says which deadline passed
/// (tonic's own would read "Timeout expired"); the dropped call cancels the
/// work in the runtime.
fn timed<T>(message: T, timeout: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(timeout + Duration::from_millis(500));
    request
}

async fn within<T>(
    timeout: Duration,
    what: &str,
    call: impl std::future::Future<Output = Result<T, CapError>>,
) -> Result<T, CapError> {
    tokio::time::timeout(timeout, call)
        .await
        .unwrap_or_else(|_| {
            Err(CapError::Timeout(format!(
                "cri {what} did not finish within {}",
                humantime::format_duration(timeout)
            )))
        })
}

fn pairs(map: HashMap<String, String>) -> Vec<(String, String)> {
    let mut pairs: Vec<_> = map.into_iter().collect();
    pairs.sort();
    pairs
}

fn state(state: i32) -> SandboxState {
    if state == cri::PodSandboxState::SandboxReady as i32 {
        SandboxState::Ready
    } else {
        SandboxState::NotReady
    }
}

fn sandbox(s: cri::PodSandbox) -> PodSandbox {
    let metadata = s.metadata.unwrap_or_default();
    PodSandbox {
        id: s.id,
        pod_name: metadata.name,
        namespace: metadata.namespace,
        uid: metadata.uid,
        attempt: metadata.attempt,
        state: state(s.state),
        created_at_ns: s.created_at,
        labels: pairs(s.labels),
        annotations: pairs(s.annotations),
    }
}

fn container(c: cri::Container) -> Container {
    let metadata = c.metadata.unwrap_or_default();
    Container {
        id: c.id,
        pod_sandbox_id: c.pod_sandbox_id,
        name: metadata.name,
        attempt: metadata.attempt,
        image: c.image.map(|i| i.image).unwrap_or_default(),
        image_ref: c.image_ref,
        state: match cri::ContainerState::try_from(c.state) {
            Ok(cri::ContainerState::ContainerCreated) => ContainerState::Created,
            Ok(cri::ContainerState::ContainerRunning) => ContainerState::Running,
            Ok(cri::ContainerState::ContainerExited) => ContainerState::Exited,
            _ => ContainerState::Unknown,
        },
        created_at_ns: c.created_at,
        labels: pairs(c.labels),
        annotations: pairs(c.annotations),
    }
}

fn image(i: cri::Image) -> Image {
    Image {
        id: i.id,
        repo_tags: i.repo_tags,
        repo_digests: i.repo_digests,
        size_bytes: i.size,
    }
}

fn image_spec(image: &str) -> Option<cri::ImageSpec> {
    Some(cri::ImageSpec {
        image: image.to_string(),
        ..Default::default()
    })
}

#[async_trait::async_trait]
impl CriBackend for RealCri {
    async fn version(&self) -> Result<RuntimeVersion, CapError> {
        let mut runtime = self.runtime().await;
        let request = timed(
            cri::VersionRequest {
                version: "v1".into(),
            },
            READ_TIMEOUT,
        );
        let v = within(READ_TIMEOUT, "version", async {
            runtime
                .version(request)
                .await
                .map_err(|s| self.error("version", s))
        })
        .await?
        .into_inner();
        Ok(RuntimeVersion {
            runtime_name: v.runtime_name,
            runtime_version: v.runtime_version,
            runtime_api_version: v.runtime_api_version,
        })
    }

    async fn list_pod_sandboxes(
        &self,
        filter: &SandboxFilter,
    ) -> Result<Vec<PodSandbox>, CapError> {
        let mut runtime = self.runtime().await;
        let filter = cri::PodSandboxFilter {
            id: filter.id.clone().unwrap_or_default(),
            state: filter.state.map(|s| cri::PodSandboxStateValue {
                state: match s {
                    SandboxState::Ready => cri::PodSandboxState::SandboxReady,
                    SandboxState::NotReady => cri::PodSandboxState::SandboxNotready,
                } as i32,
            }),
            label_selector: filter.labels.iter().cloned().collect(),
        };
        let request = timed(
            cri::ListPodSandboxRequest {
                filter: Some(filter),
            },
            READ_TIMEOUT,
        );
        let items = within(READ_TIMEOUT, "list-pod-sandboxes", async {
            runtime
                .list_pod_sandbox(request)
                .await
                .map_err(|s| self.error("list-pod-sandboxes", s))
        })
        .await?
        .into_inner()
        .items;
        Ok(items.into_iter().map(sandbox).collect())
    }

    async fn pod_sandbox_status(&self, id: &str) -> Result<SandboxStatus, CapError> {
        let mut runtime = self.runtime().await;
        let request = timed(
            cri::PodSandboxStatusRequest {
                pod_sandbox_id: id.to_string(),
                verbose: false,
            },
            READ_TIMEOUT,
        );
        let response = within(READ_TIMEOUT, "pod-sandbox-status", async {
            runtime
                .pod_sandbox_status(request)
                .await
                .map_err(|s| self.error("pod-sandbox-status", s))
        })
        .await?
        .into_inner();
        let status = response.status.ok_or_else(|| {
            CapError::NotFound(format!("cri pod-sandbox-status: no sandbox {id}"))
        })?;
        let network = status.network.unwrap_or_default();
        Ok(SandboxStatus {
            sandbox: sandbox(cri::PodSandbox {
                id: status.id,
                metadata: status.metadata,
                state: status.state,
                created_at: status.created_at,
                labels: status.labels,
                annotations: status.annotations,
                runtime_handler: status.runtime_handler,
            }),
            ip: Some(network.ip).filter(|ip| !ip.is_empty()),
            additional_ips: network.additional_ips.into_iter().map(|ip| ip.ip).collect(),
        })
    }

    async fn stop_pod_sandbox(&self, _: Permit, id: &str) -> Result<(), CapError> {
        let mut runtime = self.runtime().await;
        let request = timed(
            cri::StopPodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            },
            SANDBOX_TIMEOUT,
        );
        within(SANDBOX_TIMEOUT, "stop-pod-sandbox", async {
            runtime
                .stop_pod_sandbox(request)
                .await
                .map(drop)
                .map_err(|s| self.error("stop-pod-sandbox", s))
        })
        .await
    }

    async fn remove_pod_sandbox(&self, _: Permit, id: &str) -> Result<(), CapError> {
        let mut runtime = self.runtime().await;
        let request = timed(
            cri::RemovePodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            },
            SANDBOX_TIMEOUT,
        );
        within(SANDBOX_TIMEOUT, "remove-pod-sandbox", async {
            runtime
                .remove_pod_sandbox(request)
                .await
                .map(drop)
                .map_err(|s| self.error("remove-pod-sandbox", s))
        })
        .await
    }

    async fn list_containers(
        &self,
        pod_sandbox_id: Option<&str>,
    ) -> Result<Vec<Container>, CapError> {
        let mut runtime = self.runtime().await;
        let filter = cri::ContainerFilter {
            pod_sandbox_id: pod_sandbox_id.unwrap_or_default().to_string(),
            ..Default::default()
        };
        let request = timed(
            cri::ListContainersRequest {
                filter: Some(filter),
            },
            READ_TIMEOUT,
        );
        let containers = within(READ_TIMEOUT, "list-containers", async {
            runtime
                .list_containers(request)
                .await
                .map_err(|s| self.error("list-containers", s))
        })
        .await?
        .into_inner()
        .containers;
        Ok(containers.into_iter().map(container).collect())
    }

    async fn list_images(&self) -> Result<Vec<Image>, CapError> {
        let mut images = self.images().await;
        let request = timed(cri::ListImagesRequest { filter: None }, READ_TIMEOUT);
        let list = within(READ_TIMEOUT, "list-images", async {
            images
                .list_images(request)
                .await
                .map_err(|s| self.error("list-images", s))
        })
        .await?
        .into_inner()
        .images;
        Ok(list.into_iter().map(image).collect())
    }

    async fn image_status(&self, name: &str) -> Result<Option<Image>, CapError> {
        let mut images = self.images().await;
        let request = timed(
            cri::ImageStatusRequest {
                image: image_spec(name),
                verbose: false,
            },
            READ_TIMEOUT,
        );
        let response = within(READ_TIMEOUT, "image-status", async {
            images
                .image_status(request)
                .await
                .map_err(|s| self.error("image-status", s))
        })
        .await?
        .into_inner();
        Ok(response.image.map(image))
    }

    async fn pull_image(
        &self,
        _: Permit,
        name: &str,
        timeout: Duration,
    ) -> Result<String, CapError> {
        let mut images = self.images().await;
        let request = timed(
            cri::PullImageRequest {
                image: image_spec(name),
                auth: None,
                sandbox_config: None,
            },
            timeout,
        );
        within(timeout, "pull-image", async {
            images
                .pull_image(request)
                .await
                .map(|r| r.into_inner().image_ref)
                .map_err(|s| self.error("pull-image", s))
        })
        .await
    }
}
