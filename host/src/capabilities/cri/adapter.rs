//! The `cri` adapter of one reconcile: reads need the `read` grant, each
//! mutation its operation (pulls also an image pattern), and every mutation
//! passes the gate. A pull's own deadline must fit in the reconcile's.
//!
//! Sandboxes are named by their full id only (the runtime resolves prefixes);
//! a stop or removal first resolves the sandbox with PodSandboxStatus, so the
//! grant's `namespaces` and `states`, the budgets and the journal see the pod
//! (`kube-system/coredns-xyz (sandbox <id>)`), not what the plugin typed.

use super::backend::{
    Container, CriBackend, Image, PodSandbox, RuntimeVersion, SandboxFilter, SandboxState,
    SandboxStatus,
};
use super::grants::{
    CriGrant, Operation, check_id, check_operation, check_pull, check_read, check_sandbox,
};
use crate::capabilities::call::Call;
use crate::capabilities::capability::Capability;
use crate::capabilities::error::CapError;
use crate::capabilities::gate::{Intent, Performed};
use serde::{Deserialize, Deserializer, de::Error as _};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// `[host.cri]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CriSettings {
    /// "unix:///run/containerd/containerd.sock" (the default).
    pub endpoint: Option<UnixEndpoint>,
}

/// A `unix://` endpoint: the absolute path of the runtime's socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnixEndpoint(pub PathBuf);

impl<'de> Deserialize<'de> for UnixEndpoint {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        match text.strip_prefix("unix://") {
            Some(path) if path.starts_with('/') => Ok(UnixEndpoint(PathBuf::from(path))),
            _ => Err(D::Error::custom(format!(
                "invalid CRI endpoint {text:?}: expected unix:// and an absolute socket path, for example \"unix:///run/containerd/containerd.sock\""
            ))),
        }
    }
}

pub(super) const DEFAULT_SOCKET: &str = "/run/containerd/containerd.sock";

/// Time a plugin keeps, after its pull's deadline, to report before the reconcile's.
const PULL_MARGIN: Duration = Duration::from_secs(1);

pub struct PluginCri {
    pub(super) backend: Arc<dyn CriBackend>,
    pub(super) grant: CriGrant,
    pub(super) call: Arc<Call>,
}

impl PluginCri {
    fn read(&self, what: &str) -> Result<(), CapError> {
        check_read(&self.grant, &self.call.plugin, what)
    }

    pub async fn version(&self) -> Result<RuntimeVersion, CapError> {
        self.read("version")?;
        self.backend.version().await
    }

    pub async fn list_pod_sandboxes(
        &self,
        filter: &SandboxFilter,
    ) -> Result<Vec<PodSandbox>, CapError> {
        self.read("list-pod-sandboxes")?;
        tend_rules::cri::check_filter_labels(&filter.labels)?;
        if let Some(id) = &filter.id {
            check_id("sandbox id", id)?;
        }
        self.backend.list_pod_sandboxes(filter).await
    }

    pub async fn pod_sandbox_status(&self, id: &str) -> Result<SandboxStatus, CapError> {
        self.read("pod-sandbox-status")?;
        check_id("sandbox id", id)?;
        self.backend.pod_sandbox_status(id).await
    }

    pub async fn list_containers(
        &self,
        pod_sandbox_id: Option<&str>,
    ) -> Result<Vec<Container>, CapError> {
        self.read("list-containers")?;
        if let Some(id) = pod_sandbox_id {
            check_id("sandbox id", id)?;
        }
        self.backend.list_containers(pod_sandbox_id).await
    }

    pub async fn list_images(&self) -> Result<Vec<Image>, CapError> {
        self.read("list-images")?;
        self.backend.list_images().await
    }

    pub async fn image_status(&self, image: &str) -> Result<Option<Image>, CapError> {
        self.read("image-status")?;
        let full = tend_rules::cri::normalize_image(image)?;
        self.backend.image_status(&full).await
    }

    /// What the gate records of `operation` on `target`.
    fn intent(operation: Operation, target: String, detail: String) -> Intent {
        Intent {
            capability: Self::NAME,
            operation: operation.name(),
            target,
            detail,
            diff: None,
        }
    }

    /// The full id, the operation granted, then the sandbox resolved and held
    /// to the grant's namespaces and states: the gate's target names the pod.
    /// None when the sandbox does not exist.
    async fn resolve(&self, operation: Operation, id: &str) -> Result<Option<String>, CapError> {
        check_id("sandbox id", id)?;
        check_operation(&self.grant, &self.call.plugin, operation, id)?;
        let status = match self.backend.pod_sandbox_status(id).await {
            Ok(status) => status.sandbox,
            Err(CapError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        let sandbox = tend_rules::cri::SandboxRef {
            id,
            namespace: &status.namespace,
            pod_name: &status.pod_name,
            state: tend_rules::cri::SandboxState::of(status.state == SandboxState::Ready),
        };
        check_sandbox(&self.grant, &self.call.plugin, operation, &sandbox)?;
        Ok(Some(sandbox.target()))
    }

    /// Stop a sandbox; one the runtime does not have is `not-found`.
    pub async fn stop_pod_sandbox(&self, id: &str) -> Result<(), CapError> {
        let Some(target) = self.resolve(Operation::StopPodSandbox, id).await? else {
            return Err(CapError::NotFound(format!(
                "cri stop-pod-sandbox: no sandbox {id}"
            )));
        };
        let intent = Self::intent(Operation::StopPodSandbox, target, String::new());
        self.call
            .gate
            .mutate(intent, Ok(()), |permit| {
                self.backend.stop_pod_sandbox(permit, id)
            })
            .await
    }

    /// Remove a sandbox; removing one the runtime does not have succeeds and
    /// is no mutation (as a remove of an absent file).
    pub async fn remove_pod_sandbox(&self, id: &str) -> Result<(), CapError> {
        let Some(target) = self.resolve(Operation::RemovePodSandbox, id).await? else {
            return Ok(());
        };
        let intent = Self::intent(Operation::RemovePodSandbox, target, String::new());
        self.call
            .gate
            .mutate(intent, Ok(()), |permit| {
                self.backend.remove_pod_sandbox(permit, id)
            })
            .await
    }

    /// Pull `image` within `timeout`, which must leave [`PULL_MARGIN`] of the
    /// reconcile's deadline: a pull the reconcile would cut off is refused
    /// up front, naming the limit to raise.
    pub async fn pull_image(&self, image: &str, timeout: Duration) -> Result<String, CapError> {
        let full = check_pull(&self.grant, &self.call.plugin, image)?;
        let left = self.call.remaining().saturating_sub(PULL_MARGIN);
        if timeout.is_zero() || timeout > left {
            return Err(CapError::Invalid(format!(
                "cri pull-image of {full} with a timeout of {} does not fit in what is left of this reconcile's deadline ({}): raise [plugins.{}.limits] timeout above the pull's timeout",
                humantime::format_duration(timeout),
                humantime::format_duration(Duration::from_secs(left.as_secs())),
                self.call.plugin
            )));
        }
        let detail = format!("timeout {}", humantime::format_duration(timeout));
        let intent = Self::intent(Operation::PullImage, full.clone(), detail);
        let planned = Ok(PulledImage(full.clone()));
        let pulled = self.call.gate.mutate(intent, planned, |permit| async {
            let image_ref = self.backend.pull_image(permit, &full, timeout).await?;
            Ok(PulledImage(image_ref))
        });
        pulled.await.map(|PulledImage(image_ref)| image_ref)
    }
}

/// A pull's answer, the image reference the runtime resolved: the journal
/// records it ("ok sha256:...").
struct PulledImage(String);

impl Performed for PulledImage {
    fn journal_result(&self) -> String {
        format!("ok {}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::cri::FakeCri;
    use crate::capabilities::cri::SandboxState;
    use crate::capabilities::limits::Limits;
    use crate::capabilities::testing::call_with_limits;

    fn cri(grant: &str, dry_run: bool, timeout: Duration) -> (PluginCri, Arc<FakeCri>) {
        let (backend, fake) = PluginCri::fake();
        let grant: CriGrant = toml::from_str(grant).unwrap();
        let limits = Limits {
            timeout,
            ..Limits::default()
        };
        (
            PluginCri::for_call(
                &backend,
                &grant,
                &Default::default(),
                &call_with_limits("sweeper", dry_run, limits),
            ),
            fake,
        )
    }

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    const FULL: &str = "read = true\noperations = [\"stop-pod-sandbox\", \"remove-pod-sandbox\", \"pull-image\"]\nimages = [\"docker.io/library/*\"]";

    #[tokio::test]
    async fn reads_need_the_read_grant() {
        let (cri, fake) = cri(
            "operations = [\"pull-image\"]",
            false,
            Duration::from_secs(30),
        );
        fake.add_sandbox(A, "uid-1", 0, SandboxState::Ready);
        let err = cri
            .list_pod_sandboxes(&SandboxFilter::default())
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("set read = true in [plugins.sweeper.grants] cri"),
            "{err}"
        );
        let (cri, fake) = cri_full(false);
        fake.add_sandbox(A, "uid-1", 0, SandboxState::Ready);
        fake.add_sandbox(B, "uid-1", 1, SandboxState::NotReady);
        let ready = SandboxFilter {
            state: Some(SandboxState::Ready),
            ..SandboxFilter::default()
        };
        let listed = cri.list_pod_sandboxes(&ready).await.unwrap();
        assert_eq!(
            listed.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
            [A]
        );
    }

    fn cri_full(dry_run: bool) -> (PluginCri, Arc<FakeCri>) {
        cri(FULL, dry_run, Duration::from_secs(30))
    }

    #[tokio::test]
    async fn mutations_pass_the_gate_and_ungranted_ones_never_reach_the_runtime() {
        let (cri, fake) = cri(
            "read = true\noperations = [\"stop-pod-sandbox\"]",
            false,
            Duration::from_secs(30),
        );
        fake.add_sandbox(A, "uid-1", 0, SandboxState::Ready);
        cri.stop_pod_sandbox(A).await.unwrap();
        let err = cri.remove_pod_sandbox(A).await.unwrap_err();
        assert!(
            err.to_string()
                .contains("add \"remove-pod-sandbox\" to operations"),
            "{err}"
        );
        let err = cri
            .pull_image("busybox", Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), "denied");
        assert_eq!(fake.actions(), [format!("stop-pod-sandbox {A}")]);
        assert_eq!(
            cri.call.gate.mutations()[0].describe(),
            format!("did cri.stop-pod-sandbox default/pod-uid-1 (sandbox {A})")
        );
    }

    #[tokio::test]
    async fn a_dry_run_plans_removals_and_pulls() {
        let (cri, fake) = cri_full(true);
        fake.add_sandbox(A, "uid-1", 0, SandboxState::NotReady);
        cri.remove_pod_sandbox(A).await.unwrap();
        assert_eq!(
            cri.pull_image("busybox:1.36", Duration::from_secs(5))
                .await
                .unwrap(),
            "docker.io/library/busybox:1.36"
        );
        assert!(fake.actions().is_empty());
        let planned: Vec<String> = cri
            .call
            .gate
            .mutations()
            .iter()
            .map(|m| m.describe())
            .collect();
        assert_eq!(planned.len(), 2);
        assert!(cri.call.gate.mutations().iter().all(|m| m.dry_run));
    }

    #[tokio::test]
    async fn pulls_are_checked_against_images_in_their_full_form() {
        let (cri, fake) = cri_full(false);
        assert_eq!(
            cri.pull_image("busybox", Duration::from_secs(5))
                .await
                .unwrap(),
            "sha256:docker.io/library/busybox:latest"
        );
        let err = cri
            .pull_image("docker.io/evil/busybox", Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("add \"docker.io/evil/busybox:latest\""),
            "{err}"
        );
        let err = cri
            .pull_image("docker.io/library/../x", Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), "invalid");
        assert_eq!(
            fake.actions(),
            ["pull-image docker.io/library/busybox:latest"]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_pull_must_fit_the_reconcile_and_is_cut_at_its_own_deadline() {
        let (cri, fake) = cri(FULL, false, Duration::from_secs(30));
        let err = cri
            .pull_image("busybox", Duration::from_secs(60))
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("raise [plugins.sweeper.limits] timeout"),
            "{err}"
        );
        fake.pulls_take(Duration::from_secs(3600));
        let err = cri
            .pull_image("busybox", Duration::from_secs(10))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), "timeout");
        let journaled = &cri.call.gate.mutations()[0];
        assert!(
            journaled.result.starts_with("timeout"),
            "{}",
            journaled.result
        );
        assert!(fake.actions().is_empty());
    }

    #[tokio::test]
    async fn oversized_or_control_character_input_is_refused_before_the_runtime() {
        let (cri, fake) = cri_full(false);
        let err = cri.stop_pod_sandbox(&"x".repeat(300)).await.unwrap_err();
        assert_eq!(err.kind(), "invalid");
        let err = cri.pod_sandbox_status("a\nb").await.unwrap_err();
        assert_eq!(err.kind(), "invalid");
        let many = SandboxFilter {
            labels: (0..100).map(|i| (format!("k{i}"), "v".into())).collect(),
            ..SandboxFilter::default()
        };
        assert_eq!(
            cri.list_pod_sandboxes(&many).await.unwrap_err().kind(),
            "invalid"
        );
        assert!(fake.actions().is_empty());
    }

    #[tokio::test]
    async fn prefixes_of_ids_are_refused_before_the_runtime() {
        let (cri, fake) = cri_full(false);
        fake.add_sandbox(A, "uid-1", 0, SandboxState::Ready);
        for prefix in [&A[..10], &A[..12], &A[..63]] {
            let err = cri.stop_pod_sandbox(prefix).await.unwrap_err();
            assert_eq!(err.kind(), "invalid", "{err}");
            assert!(err.to_string().contains("expected the full id"), "{err}");
            assert_eq!(
                cri.pod_sandbox_status(prefix).await.unwrap_err().kind(),
                "invalid"
            );
            let filter = SandboxFilter {
                id: Some(prefix.to_string()),
                ..SandboxFilter::default()
            };
            assert_eq!(
                cri.list_pod_sandboxes(&filter).await.unwrap_err().kind(),
                "invalid"
            );
            assert_eq!(
                cri.list_containers(Some(prefix)).await.unwrap_err().kind(),
                "invalid"
            );
        }
        assert!(fake.actions().is_empty());
        assert!(cri.call.gate.mutations().is_empty());
    }

    #[tokio::test]
    async fn removals_are_held_to_the_grants_namespaces_and_states() {
        let grant = "operations = [\"remove-pod-sandbox\"]\nnamespaces = [\"default\"]\nstates = [\"notready\"]";
        let (cri, fake) = cri(grant, false, Duration::from_secs(30));
        let pod = |id: &str, namespace: &str, state| PodSandbox {
            id: id.into(),
            pod_name: "coredns-xyz".into(),
            namespace: namespace.into(),
            uid: "u".into(),
            attempt: 0,
            state,
            created_at_ns: 0,
            labels: vec![],
            annotations: vec![],
        };
        fake.add_pod(pod(A, "kube-system", SandboxState::NotReady));
        fake.add_pod(pod(B, "default", SandboxState::Ready));
        let err = cri.remove_pod_sandbox(A).await.unwrap_err();
        assert_eq!(err.kind(), "denied");
        assert!(
            err.to_string().contains(&format!(
                "cri remove-pod-sandbox of kube-system/coredns-xyz (sandbox {A}) is not granted: the sandbox is in namespace kube-system"
            )),
            "{err}"
        );
        assert!(
            err.to_string()
                .ends_with("add \"kube-system\" to namespaces in [plugins.sweeper.grants] cri"),
            "{err}"
        );
        let err = cri.remove_pod_sandbox(B).await.unwrap_err();
        assert!(err.to_string().contains("add \"ready\" to states"), "{err}");
        assert!(fake.actions().is_empty(), "nothing reached the runtime");
        assert!(
            cri.call.gate.mutations().is_empty(),
            "refused before the gate"
        );
        fake.add_pod(pod(&"c".repeat(64), "default", SandboxState::NotReady));
        cri.remove_pod_sandbox(&"c".repeat(64)).await.unwrap();
        cri.remove_pod_sandbox(&"d".repeat(64)).await.unwrap();
        assert_eq!(
            fake.actions(),
            [format!("remove-pod-sandbox {}", "c".repeat(64))],
            "an absent sandbox is no mutation"
        );
        assert_eq!(
            cri.call.gate.mutations()[0].describe(),
            format!(
                "did cri.remove-pod-sandbox default/coredns-xyz (sandbox {})",
                "c".repeat(64)
            )
        );
    }

    #[test]
    fn endpoints_are_unix_sockets_with_absolute_paths() {
        let ok: CriSettings = toml::from_str("endpoint = \"unix:///run/x.sock\"").unwrap();
        assert_eq!(ok.endpoint.unwrap().0, PathBuf::from("/run/x.sock"));
        for bad in ["tcp://127.0.0.1:1", "unix://run/x.sock", "/run/x.sock"] {
            let err = toml::from_str::<CriSettings>(&format!("endpoint = {bad:?}")).unwrap_err();
            assert!(err.to_string().contains("expected unix://"), "{err}");
        }
    }
}
