//! A real containerd with its CRI plugin (tests/peers/containerd.sh), talked
//! to over CRI v1.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::{free_port, is_root, workspace_root};

/// The CRI v1 API (k8s-cri), for calls the [`ContainerdPeer`] helpers do not cover.
pub use k8s_cri::v1 as cri;

/// A CRI pod sandbox as `ListPodSandbox` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CriSandbox {
    pub id: String,
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub attempt: u32,
    pub state: SandboxState,
}

/// `SANDBOX_READY` or `SANDBOX_NOTREADY`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SandboxState {
    Ready,
    NotReady,
}

/// A real containerd 1.6 with its CRI plugin (tests/peers/containerd.sh) on a
/// private socket, a real registry holding `exp/big:v1` and `library/pause:3.9`,
/// and a proxy in front of that registry whose blob downloads never finish. Talks
/// CRI v1 with tonic over the unix socket. Stopped by PID on drop (sandboxes
/// removed over CRI first); dropping it fails if any of its processes, mounts
/// or cgroups remain. Needs root.
pub struct ContainerdPeer {
    dir: tempfile::TempDir,
    endpoint: String,
    registry_port: u16,
    stall_port: u16,
    certs_dir: PathBuf,
    cgroup_parent: String,
    runtime: tokio::runtime::Runtime,
    channel: tonic::transport::Channel,
}

impl ContainerdPeer {
    /// The sandbox image, imported at start (never pulled).
    pub const PAUSE_IMAGE: &'static str = "localhost/tend/pause:v1";
    /// A static busybox, entrypoint /bin/sh, imported at start.
    pub const BUSYBOX_IMAGE: &'static str = "localhost/tend/busybox:v1";

    /// Start a peer in a new temporary directory, on free ports, with its CRI
    /// `registry.config_path` in that directory (`certs.d`).
    pub fn start() -> ContainerdPeer {
        Self::start_with(None)
    }

    /// Start a peer whose CRI `registry.config_path` is `certs_dir` (which a
    /// test, or mirror-gate, manages). The peer writes hosts.toml there only for
    /// its own registry and proxy (`127.0.0.1:PORT`), never for docker.io.
    pub fn start_with_certs_dir(certs_dir: &Path) -> ContainerdPeer {
        Self::start_with(Some(certs_dir))
    }

    fn start_with(certs_dir: Option<&Path>) -> ContainerdPeer {
        assert!(
            is_root(),
            "the containerd peer needs root (runc, mounts, cgroups, iptables): run the \
             end-to-end tests as root, as CI does"
        );
        let dir = tempfile::tempdir().unwrap();
        let certs_dir = certs_dir.map_or_else(|| dir.path().join("certs.d"), Path::to_path_buf);
        let (registry_port, stall_port) = loop {
            let (a, b) = (free_port(), free_port());
            if a != b {
                break (a, b);
            }
        };
        let output = Command::new(workspace_root().join("tests/peers/containerd.sh"))
            .arg("start")
            .arg(dir.path())
            .args([registry_port.to_string(), stall_port.to_string()])
            .env("CERTS_DIR", &certs_dir)
            // Built images are kept across peers (and runs): about 1.5 s a start.
            .env(
                "IMAGE_CACHE",
                workspace_root().join("target/cri-peer-images"),
            )
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(output.status.success(), "the containerd peer did not start");
        let endpoint = String::from_utf8(output.stdout).unwrap().trim().to_string();
        let socket = PathBuf::from(endpoint.strip_prefix("unix://").unwrap());
        let cgroup_parent = std::fs::read_to_string(dir.path().join("cgroup-parent"))
            .unwrap()
            .trim()
            .to_string();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let channel = runtime
            .block_on(async {
                // tonic needs a URI; the connector ignores it and dials the socket.
                tonic::transport::Endpoint::try_from("http://[::]:50051")
                    .unwrap()
                    .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
                        let socket = socket.clone();
                        async move {
                            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                                tokio::net::UnixStream::connect(socket).await?,
                            ))
                        }
                    }))
                    .await
            })
            .unwrap();
        ContainerdPeer {
            dir,
            endpoint,
            registry_port,
            stall_port,
            certs_dir,
            cgroup_parent,
            runtime,
            channel,
        }
    }

    /// The CRI endpoint as a kubelet names it: `unix://DIR/containerd.sock`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The CRI socket's path.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("containerd.sock")
    }

    /// The peer's directory (config.toml, *.log, state).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CRI's `registry.config_path`.
    pub fn certs_dir(&self) -> &Path {
        &self.certs_dir
    }

    /// `127.0.0.1:PORT` of the registry (plain HTTP; `exp/big:v1`, `library/pause:3.9`).
    pub fn registry(&self) -> String {
        format!("127.0.0.1:{}", self.registry_port)
    }

    /// `http://127.0.0.1:PORT` of the registry: a cache endpoint for mirror-gate.
    pub fn registry_endpoint(&self) -> String {
        format!("http://{}", self.registry())
    }

    pub fn registry_port(&self) -> u16 {
        self.registry_port
    }

    /// `127.0.0.1:PORT` of the stalling proxy in front of the registry: manifests
    /// come through, blobs of 10 kB or more never finish.
    pub fn stall_proxy(&self) -> String {
        format!("127.0.0.1:{}", self.stall_port)
    }

    pub fn stall_port(&self) -> u16 {
        self.stall_port
    }

    /// `127.0.0.1:PORT/exp/big:v1` from the registry: a real 4 MB pull.
    pub fn big_image(&self) -> String {
        format!("{}/exp/big:v1", self.registry())
    }

    /// The same image through the stalling proxy: its pull hangs, as long as the
    /// image's blobs are not in containerd's store (see [`Self::remove_image`]).
    pub fn stalled_big_image(&self) -> String {
        format!("{}/exp/big:v1", self.stall_proxy())
    }

    /// What the registry logged so far: its access log shows every request,
    /// with containerd's `?ns=docker.io` on requests for a mirrored docker.io.
    pub fn registry_log(&self) -> String {
        self.read_log("registry.log")
    }

    /// What the stalling proxy logged so far (every request; `stall ...` when it
    /// starts holding a blob, `client went away` when the client gave up).
    pub fn stall_proxy_log(&self) -> String {
        self.read_log("proxy.log")
    }

    /// What containerd logged so far.
    pub fn containerd_log(&self) -> String {
        self.read_log("containerd.log")
    }

    fn read_log(&self, name: &str) -> String {
        let bytes = std::fs::read(self.dir.path().join(name)).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Run `f` on the peer's runtime: for CRI calls the helpers do not cover.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.runtime.block_on(f)
    }

    /// A CRI RuntimeService client (use it inside [`Self::block_on`]).
    pub fn runtime_client(
        &self,
    ) -> cri::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel> {
        cri::runtime_service_client::RuntimeServiceClient::new(self.channel.clone())
    }

    /// A CRI ImageService client (use it inside [`Self::block_on`]).
    pub fn image_client(
        &self,
    ) -> cri::image_service_client::ImageServiceClient<tonic::transport::Channel> {
        cri::image_service_client::ImageServiceClient::new(self.channel.clone())
    }

    /// A request with a deadline (sent as grpc-timeout: containerd cancels the
    /// call's work when it passes).
    fn request<T>(message: T, timeout: Duration) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(timeout);
        request
    }

    /// Run `call` with a client-side deadline too (`timeout` plus a grace).
    fn call<T>(
        &self,
        timeout: Duration,
        call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, tonic::Status> {
        self.block_on(async {
            match tokio::time::timeout(timeout + Duration::from_secs(5), call).await {
                Ok(result) => result.map(tonic::Response::into_inner),
                Err(_) => Err(tonic::Status::deadline_exceeded(format!(
                    "no answer within {timeout:?}"
                ))),
            }
        })
    }

    /// The sandbox config of a hostNetwork pod (the kubelet's labels, an empty
    /// hostname as hostNetwork needs, the peer's cgroup parent).
    pub fn sandbox_config(
        &self,
        name: &str,
        namespace: &str,
        uid: &str,
        attempt: u32,
    ) -> cri::PodSandboxConfig {
        let labels = [
            ("io.kubernetes.pod.name", name),
            ("io.kubernetes.pod.namespace", namespace),
            ("io.kubernetes.pod.uid", uid),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: name.into(),
                uid: uid.into(),
                namespace: namespace.into(),
                attempt,
            }),
            labels,
            linux: Some(cri::LinuxPodSandboxConfig {
                // Under the peer's own cgroup, which stop removes.
                cgroup_parent: format!("/{}", self.cgroup_parent),
                security_context: Some(cri::LinuxSandboxSecurityContext {
                    namespace_options: Some(cri::NamespaceOption {
                        network: cri::NamespaceMode::Node as i32,
                        pid: cri::NamespaceMode::Pod as i32,
                        ipc: cri::NamespaceMode::Pod as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// RunPodSandbox of a hostNetwork pod; returns the sandbox id once it is ready.
    pub fn run_sandbox(&self, name: &str, namespace: &str, uid: &str, attempt: u32) -> String {
        let config = self.sandbox_config(name, namespace, uid, attempt);
        let timeout = Duration::from_secs(60);
        let mut client = self.runtime_client();
        let request = cri::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: String::new(),
        };
        self.call(
            timeout,
            client.run_pod_sandbox(Self::request(request, timeout)),
        )
        .unwrap_or_else(|e| panic!("RunPodSandbox {namespace}/{name} attempt {attempt}: {e}"))
        .pod_sandbox_id
    }

    /// StopPodSandbox: its processes end, it lists as NOTREADY.
    pub fn stop_sandbox(&self, id: &str) {
        let timeout = Duration::from_secs(60);
        let mut client = self.runtime_client();
        let request = cri::StopPodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        self.call(
            timeout,
            client.stop_pod_sandbox(Self::request(request, timeout)),
        )
        .unwrap_or_else(|e| panic!("StopPodSandbox {id}: {e}"));
    }

    /// RemovePodSandbox (stops it first if it runs).
    pub fn remove_sandbox(&self, id: &str) {
        let timeout = Duration::from_secs(60);
        let mut client = self.runtime_client();
        let request = cri::RemovePodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        self.call(
            timeout,
            client.remove_pod_sandbox(Self::request(request, timeout)),
        )
        .unwrap_or_else(|e| panic!("RemovePodSandbox {id}: {e}"));
    }

    /// Every pod sandbox, as ListPodSandbox reports it (oldest first).
    pub fn sandboxes(&self) -> Vec<CriSandbox> {
        let timeout = Duration::from_secs(30);
        let mut client = self.runtime_client();
        let request = cri::ListPodSandboxRequest { filter: None };
        let mut items = self
            .call(
                timeout,
                client.list_pod_sandbox(Self::request(request, timeout)),
            )
            .unwrap_or_else(|e| panic!("ListPodSandbox: {e}"))
            .items;
        items.sort_by_key(|s| s.created_at);
        items
            .into_iter()
            .map(|s| {
                let metadata = s.metadata.unwrap_or_default();
                CriSandbox {
                    id: s.id,
                    name: metadata.name,
                    namespace: metadata.namespace,
                    uid: metadata.uid,
                    attempt: metadata.attempt,
                    state: match s.state == cri::PodSandboxState::SandboxReady as i32 {
                        true => SandboxState::Ready,
                        false => SandboxState::NotReady,
                    },
                }
            })
            .collect()
    }

    /// PullImage with a 2-minute deadline; the image's ref (its id) or the CRI's error.
    pub fn pull(&self, image: &str) -> Result<String, tonic::Status> {
        self.pull_within(image, Duration::from_secs(120))
    }

    /// PullImage that gives up after `timeout` (containerd 1.6 has no pull
    /// progress deadline of its own: a stalled pull waits for the client's).
    pub fn pull_within(&self, image: &str, timeout: Duration) -> Result<String, tonic::Status> {
        let mut client = self.image_client();
        let request = cri::PullImageRequest {
            image: Some(Self::image_spec(image)),
            ..Default::default()
        };
        self.call(timeout, client.pull_image(Self::request(request, timeout)))
            .map(|r| r.image_ref)
    }

    /// Whether ImageStatus knows `image` (by name or id).
    pub fn image_present(&self, image: &str) -> bool {
        let timeout = Duration::from_secs(30);
        let mut client = self.image_client();
        let request = cri::ImageStatusRequest {
            image: Some(Self::image_spec(image)),
            verbose: false,
        };
        self.call(
            timeout,
            client.image_status(Self::request(request, timeout)),
        )
        .unwrap_or_else(|e| panic!("ImageStatus {image}: {e}"))
        .image
        .is_some()
    }

    /// RemoveImage (containerd then deletes its content at once).
    pub fn remove_image(&self, image: &str) {
        let timeout = Duration::from_secs(30);
        let mut client = self.image_client();
        let request = cri::RemoveImageRequest {
            image: Some(Self::image_spec(image)),
        };
        self.call(
            timeout,
            client.remove_image(Self::request(request, timeout)),
        )
        .unwrap_or_else(|e| panic!("RemoveImage {image}: {e}"));
    }

    fn image_spec(image: &str) -> cri::ImageSpec {
        cri::ImageSpec {
            image: image.into(),
            ..Default::default()
        }
    }

    /// `ctr -a SOCKET ARGS...`: containerd's own client (not CRI), for
    /// containers outside any pod (`ctr run`); bounded by `timeout`.
    pub fn ctr(&self, timeout: Duration, args: &[&str]) -> std::process::Output {
        Command::new("timeout")
            .arg(timeout.as_secs().to_string())
            .arg("ctr")
            .arg("-a")
            .arg(self.socket())
            .args(args)
            .output()
            .unwrap()
    }

    /// `ctr -a SOCKET ARGS...` not run yet: for a `ctr run` that outlives
    /// the call (a daemon in a container), spawned and waited on by the test.
    pub fn ctr_command(&self, args: &[&str]) -> Command {
        let mut ctr = Command::new("ctr");
        ctr.arg("-a").arg(self.socket()).args(args);
        ctr
    }

    /// The cgroup path a `ctr run` container NAME must be given (`--cgroup`),
    /// below the peer's cgroup parent, so the peer's stop finds what it left.
    pub fn cgroup_for(&self, name: &str) -> String {
        format!("/{}/{name}", self.cgroup_parent)
    }

    /// The peer's processes, mounts and cgroups as the host sees them; usable
    /// after the peer is dropped.
    pub fn processes(&self) -> CriPeerProcesses {
        CriPeerProcesses {
            dir: self.dir.path().canonicalize().unwrap(),
            cgroup_parent: self.cgroup_parent.clone(),
        }
    }
}

impl Drop for ContainerdPeer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.containerd_log();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!(
                "--- containerd peer log (last lines) ---\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        super::stop_with_script("containerd.sh", self.dir.path());
    }
}

/// Finds a containerd peer's leftovers on the host: processes whose command
/// line names its directory (containerd, its shims, the registry, the proxy) or
/// that live in its cgroups (what the shims run), mounts under its directory,
/// its cgroup directories.
#[derive(Clone, Debug)]
pub struct CriPeerProcesses {
    dir: PathBuf,
    cgroup_parent: String,
}

impl CriPeerProcesses {
    /// "PID: command line" of each living process of the peer.
    pub fn list(&self) -> Vec<String> {
        let (exact, below) = (
            format!("/{}", self.cgroup_parent),
            format!("/{}/", self.cgroup_parent),
        );
        // Every hierarchy: "ID:CONTROLLERS:PATH" (v1) and "0::PATH" (v2).
        crate::process::peer_processes(&self.dir, |cgroup| {
            cgroup.lines().any(|l| {
                let path = l.splitn(3, ':').nth(2).unwrap_or_default();
                path == exact || path.starts_with(&below)
            })
        })
    }

    /// Mount points at or under the peer's directory.
    pub fn mounts(&self) -> Vec<String> {
        let dir = self.dir.to_string_lossy().into_owned();
        let dir_slash = format!("{dir}/");
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| *m == dir || m.starts_with(&dir_slash))
            .map(str::to_string)
            .collect()
    }

    /// The peer's cgroup directories that still exist (in any hierarchy).
    pub fn cgroups(&self) -> Vec<PathBuf> {
        let mut roots = vec![PathBuf::from("/sys/fs/cgroup")];
        if let Ok(entries) = std::fs::read_dir("/sys/fs/cgroup") {
            roots.extend(entries.flatten().map(|e| e.path()));
        }
        roots
            .into_iter()
            .map(|r| r.join(&self.cgroup_parent))
            .filter(|p| p.is_dir())
            .collect()
    }
}
