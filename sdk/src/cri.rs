//! `tend:plugin/cri`: the node's container runtime over CRI (pod sandboxes,
//! containers, images), within the plugin's `cri` grant.

use crate::{Error, NotProvided, Result};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::time::Duration;
use tend_rules::cri::{CriGrant, Operation, SandboxRef, check_id, normalize_image};

/// The WIT records themselves: the host answers with these very types.
pub use crate::bindings::tend::plugin::cri::{
    Container, ContainerState, Image, PodSandbox, RuntimeVersion, SandboxFilter, SandboxState,
    SandboxStatus,
};

impl PodSandbox {
    /// A sandbox of pod `uid`, named "pod-<uid>" in namespace "default",
    /// created at the epoch, labelled with its uid as the kubelet does: for
    /// tests and fakes (set other fields with `..PodSandbox::new(...)`).
    pub fn new(id: &str, uid: &str, attempt: u32, state: SandboxState) -> Self {
        PodSandbox {
            id: id.to_string(),
            pod_name: format!("pod-{uid}"),
            namespace: "default".to_string(),
            uid: uid.to_string(),
            attempt,
            state,
            created_at_ns: 0,
            labels: vec![("io.kubernetes.pod.uid".to_string(), uid.to_string())],
            annotations: vec![],
        }
    }
}

impl SandboxFilter {
    /// Whether `sandbox` passes every set field, as the runtime decides.
    pub fn matches(&self, sandbox: &PodSandbox) -> bool {
        self.id.as_ref().is_none_or(|id| *id == sandbox.id)
            && self.state.is_none_or(|s| s == sandbox.state)
            && self.labels.iter().all(|l| sandbox.labels.contains(l))
    }
}

/// The container runtime, within the plugin's grant: reads need `read = true`,
/// each mutation its operation, and a pull an `images` pattern covering the
/// image written out in full ("busybox" is "docker.io/library/busybox:latest").
/// Sandboxes are named by their full 64-hex id, as listed (a prefix is
/// `invalid`); a stop or removal must also fit the grant's `namespaces` and
/// `states`.
pub trait Cri {
    fn version(&self) -> Result<RuntimeVersion>;
    fn list_pod_sandboxes(&self, filter: &SandboxFilter) -> Result<Vec<PodSandbox>>;
    fn pod_sandbox_status(&self, id: &str) -> Result<SandboxStatus>;
    /// Stop a sandbox (its containers and network); stopping a stopped one
    /// succeeds, an absent one is `not-found`.
    fn stop_pod_sandbox(&self, id: &str) -> Result<()>;
    /// Remove a sandbox and its containers; removing an absent one succeeds
    /// (and is no mutation).
    fn remove_pod_sandbox(&self, id: &str) -> Result<()>;
    /// Containers, all or those of one sandbox.
    fn list_containers(&self, pod_sandbox_id: Option<&str>) -> Result<Vec<Container>>;
    fn list_images(&self) -> Result<Vec<Image>>;
    /// The image as the runtime knows it, or none when it is not present.
    fn image_status(&self, image: &str) -> Result<Option<Image>>;
    /// Pull `image` within `timeout` (the runtime cancels it then: `timeout`)
    /// and return its image reference. `timeout` must fit in what is left of
    /// the reconcile's deadline, else `invalid`: raise `[plugins.<name>.limits]
    /// timeout` for long pulls.
    fn pull_image(&self, image: &str, timeout: Duration) -> Result<String>;
}

impl Cri for NotProvided {
    fn version(&self) -> Result<RuntimeVersion> {
        Err(NotProvided::denied("cri"))
    }
    fn list_pod_sandboxes(&self, _: &SandboxFilter) -> Result<Vec<PodSandbox>> {
        Err(NotProvided::denied("cri"))
    }
    fn pod_sandbox_status(&self, _: &str) -> Result<SandboxStatus> {
        Err(NotProvided::denied("cri"))
    }
    fn stop_pod_sandbox(&self, _: &str) -> Result<()> {
        Err(NotProvided::denied("cri"))
    }
    fn remove_pod_sandbox(&self, _: &str) -> Result<()> {
        Err(NotProvided::denied("cri"))
    }
    fn list_containers(&self, _: Option<&str>) -> Result<Vec<Container>> {
        Err(NotProvided::denied("cri"))
    }
    fn list_images(&self) -> Result<Vec<Image>> {
        Err(NotProvided::denied("cri"))
    }
    fn image_status(&self, _: &str) -> Result<Option<Image>> {
        Err(NotProvided::denied("cri"))
    }
    fn pull_image(&self, _: &str, _: Duration) -> Result<String> {
        Err(NotProvided::denied("cri"))
    }
}

/// The wasm glue: the host's `cri` import.
#[cfg(target_arch = "wasm32")]
pub(crate) mod wasm {
    use super::*;
    use crate::bindings::tend::plugin::cri as wit;
    use crate::types::from_wit_error;

    pub(crate) struct WasmCri;

    impl Cri for WasmCri {
        fn version(&self) -> Result<RuntimeVersion> {
            wit::version().map_err(from_wit_error)
        }
        fn list_pod_sandboxes(&self, filter: &SandboxFilter) -> Result<Vec<PodSandbox>> {
            wit::list_pod_sandboxes(filter).map_err(from_wit_error)
        }
        fn pod_sandbox_status(&self, id: &str) -> Result<SandboxStatus> {
            wit::pod_sandbox_status(id).map_err(from_wit_error)
        }
        fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
            wit::stop_pod_sandbox(id).map_err(from_wit_error)
        }
        fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
            wit::remove_pod_sandbox(id).map_err(from_wit_error)
        }
        fn list_containers(&self, pod_sandbox_id: Option<&str>) -> Result<Vec<Container>> {
            wit::list_containers(pod_sandbox_id).map_err(from_wit_error)
        }
        fn list_images(&self) -> Result<Vec<Image>> {
            wit::list_images().map_err(from_wit_error)
        }
        fn image_status(&self, reference: &str) -> Result<Option<Image>> {
            wit::image_status(reference).map_err(from_wit_error)
        }
        fn pull_image(&self, reference: &str, timeout: Duration) -> Result<String> {
            // Past u32 milliseconds (49 days) no reconcile deadline fits anyway.
            let timeout_ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
            wit::pull_image(reference, timeout_ms).map_err(from_wit_error)
        }
    }
}

/// The calls [`FakeCri::fail_call`] can make fail: the WIT function names.
pub const CALLS: [&str; 9] = tend_rules::wit::cri::FUNCTIONS;

/// Time the host keeps, after a pull's deadline, for the plugin to report.
const PULL_MARGIN: Duration = Duration::from_secs(1);

/// The fake: a scripted runtime behind the host's grant rules and messages
/// (nothing granted until [`FakeCri::grant_read`], [`FakeCri::grant_operations`]
/// and [`FakeCri::grant_images`]), recording every mutation the runtime was
/// asked for ("remove-pod-sandbox abc", "pull-image docker.io/library/busybox:1.36"),
/// with injectable failures and slow pulls. The runtime is containerd v1.7.13
/// until [`FakeCri::set_version`].
pub struct FakeCri {
    plugin: String,
    grant: RefCell<CriGrant>,
    version: RefCell<RuntimeVersion>,
    sandboxes: RefCell<Vec<SandboxStatus>>,
    containers: RefCell<Vec<Container>>,
    images: RefCell<Vec<Image>>,
    actions: RefCell<Vec<String>>,
    failures: crate::fake::ScriptedFailures,
    pull_failures: RefCell<BTreeMap<String, Error>>,
    pull_durations: RefCell<BTreeMap<String, Duration>>,
    time_left: Cell<Option<Duration>>,
}

impl crate::fake::Fake for FakeCri {
    fn for_plugin(plugin: &str) -> Self {
        FakeCri::new(plugin)
    }
}

impl Default for FakeCri {
    /// For a plugin named "test".
    fn default() -> Self {
        FakeCri::new("test")
    }
}

impl FakeCri {
    pub fn new(plugin: &str) -> Self {
        FakeCri {
            plugin: plugin.to_string(),
            grant: RefCell::default(),
            version: RefCell::new(RuntimeVersion {
                runtime_name: "containerd".into(),
                runtime_version: "v1.7.13".into(),
                runtime_api_version: "v1".into(),
            }),
            sandboxes: RefCell::default(),
            containers: RefCell::default(),
            images: RefCell::default(),
            actions: RefCell::default(),
            failures: crate::fake::ScriptedFailures::new("FakeCri", &CALLS),
            pull_failures: RefCell::default(),
            pull_durations: RefCell::default(),
            time_left: Cell::new(None),
        }
    }

    /// Grant version, listings and status (`read = true`).
    pub fn grant_read(&self) -> &Self {
        self.grant.borrow_mut().read = true;
        self
    }

    /// Grant mutating operations ("stop-pod-sandbox", "remove-pod-sandbox",
    /// "pull-image"), as `operations = [...]` would.
    pub fn grant_operations(&self, operations: &[&str]) -> &Self {
        let operations: Vec<Operation> = serde_json::from_value(serde_json::json!(operations))
            .unwrap_or_else(|e| panic!("FakeCri::grant_operations: {e}"));
        self.grant.borrow_mut().operations.extend(operations);
        self
    }

    /// Hold stops and removals to sandboxes in `namespaces`, as
    /// `namespaces = [...]` would.
    pub fn grant_namespaces(&self, namespaces: &[&str]) -> &Self {
        let namespaces = namespaces.iter().map(|n| n.to_string());
        self.grant.borrow_mut().namespaces.extend(namespaces);
        self
    }

    /// Hold stops and removals to sandboxes in `states` ("ready",
    /// "notready"), as `states = [...]` would.
    pub fn grant_states(&self, states: &[&str]) -> &Self {
        let grant: CriGrant = serde_json::from_value(serde_json::json!({ "states": states }))
            .unwrap_or_else(|e| panic!("FakeCri::grant_states: {e}"));
        self.grant.borrow_mut().states.extend(grant.states);
        self
    }

    /// Grant pulls of images matching `patterns` ("docker.io/library/*"), as
    /// `images = [...]` would.
    pub fn grant_images(&self, patterns: &[&str]) -> &Self {
        let grant: CriGrant = serde_json::from_value(serde_json::json!({ "images": patterns }))
            .unwrap_or_else(|e| panic!("FakeCri::grant_images: {e}"));
        self.grant.borrow_mut().images.extend(grant.images);
        self
    }

    /// Add what `grant` grants (a grant already parsed, as the conformance
    /// table and the other languages' fakes hold them).
    pub fn extend_grant(&self, grant: &CriGrant) -> &Self {
        let mut current = self.grant.borrow_mut();
        current.read |= grant.read;
        current.operations.extend(grant.operations.iter().copied());
        current.images.extend(grant.images.iter().cloned());
        current.namespaces.extend(grant.namespaces.iter().cloned());
        current.states.extend(grant.states.iter().copied());
        self
    }

    /// The runtime reports itself as `name` `version` ("containerd", "1.6.20").
    pub fn set_version(&self, name: &str, version: &str) -> &Self {
        *self.version.borrow_mut() = RuntimeVersion {
            runtime_name: name.into(),
            runtime_version: version.into(),
            runtime_api_version: "v1".into(),
        };
        self
    }

    /// A sandbox of pod `uid` (see [`PodSandbox::new`]).
    pub fn add_sandbox(&self, id: &str, uid: &str, attempt: u32, state: SandboxState) -> &Self {
        self.put_sandbox(PodSandbox::new(id, uid, attempt, state))
    }

    /// A sandbox without a pod IP, replacing one with the same id.
    pub fn put_sandbox(&self, sandbox: PodSandbox) -> &Self {
        self.put_sandbox_status(SandboxStatus {
            sandbox,
            ip: None,
            additional_ips: vec![],
        })
    }

    /// A sandbox with its status (IPs), replacing one with the same id.
    pub fn put_sandbox_status(&self, status: SandboxStatus) -> &Self {
        let mut sandboxes = self.sandboxes.borrow_mut();
        sandboxes.retain(|s| s.sandbox.id != status.sandbox.id);
        sandboxes.push(status);
        self
    }

    pub fn add_container(&self, container: Container) -> &Self {
        self.containers.borrow_mut().push(container);
        self
    }

    /// An image present in the runtime, tagged with `reference` written out
    /// in full (panics on an invalid reference: a test setup error).
    pub fn add_image(&self, reference: &str) -> &Self {
        let full = normalize_image(reference).unwrap_or_else(|e| panic!("FakeCri::add_image: {e}"));
        self.images.borrow_mut().push(Image {
            id: format!("sha256:{full}"),
            repo_tags: vec![full],
            ..Image::default()
        });
        self
    }

    /// Every call fails with `error` (say, `unavailable`: the runtime is
    /// down) until cleared with None.
    pub fn fail_with(&self, error: Option<Error>) -> &Self {
        self.failures.fail_with(error);
        self
    }

    /// The call named `call` as in the WIT ("list-pod-sandboxes", "version",
    /// ...) fails with `error` until cleared with None.
    pub fn fail_call(&self, call: &str, error: Option<Error>) -> &Self {
        self.failures.fail_call(call, error);
        self
    }

    /// Pulls of `image` fail with `error` (say, `unavailable` from the
    /// registry) until cleared with None.
    pub fn fail_pull(&self, image: &str, error: Option<Error>) -> &Self {
        let full = normalize_image(image).unwrap_or_else(|e| panic!("FakeCri::fail_pull: {e}"));
        let mut failures = self.pull_failures.borrow_mut();
        match error {
            Some(error) => failures.insert(full, error),
            None => failures.remove(&full),
        };
        self
    }

    /// A pull of `image` takes this long: with a shorter timeout it ends in
    /// `timeout` (a stalled registry). Pulls take no time by default.
    pub fn pull_takes(&self, image: &str, duration: Duration) -> &Self {
        let full = normalize_image(image).unwrap_or_else(|e| panic!("FakeCri::pull_takes: {e}"));
        self.pull_durations.borrow_mut().insert(full, duration);
        self
    }

    /// What is left of the reconcile's deadline: as on the host, a pull whose
    /// timeout does not fit (leaving one second) is refused with `invalid`,
    /// and each pull spends the time it takes. Unbounded by default.
    pub fn set_time_left(&self, left: Option<Duration>) -> &Self {
        self.time_left.set(left);
        self
    }

    /// Every mutation the runtime was asked for, in order:
    /// "remove-pod-sandbox abc", "pull-image docker.io/library/busybox:1.36".
    pub fn actions(&self) -> Vec<String> {
        self.actions.borrow().clone()
    }

    /// The ids of the sandboxes the runtime has now.
    pub fn sandbox_ids(&self) -> Vec<String> {
        let sandboxes = self.sandboxes.borrow();
        sandboxes.iter().map(|s| s.sandbox.id.clone()).collect()
    }

    /// A scripted failure of `call`, if any.
    fn failing(&self, call: &str) -> Result<()> {
        self.failures.check(call)
    }

    fn read(&self, call: &str) -> Result<()> {
        self.grant
            .borrow()
            .check_read(&self.plugin, call)
            .map_err(crate::Error::from)?;
        self.failing(call)
    }

    /// As the host: the full id, the operation, the sandbox resolved and
    /// held to the grant's namespaces and states; then the scripted failure,
    /// then the action is recorded. False when the sandbox does not exist
    /// (nothing is recorded).
    fn mutate(&self, operation: Operation, id: &str) -> Result<bool> {
        check_id("sandbox id", id).map_err(crate::Error::from)?;
        let grant = self.grant.borrow();
        (grant.check_operation(&self.plugin, operation, id)).map_err(crate::Error::from)?;
        let sandboxes = self.sandboxes.borrow();
        let Some(found) = sandboxes.iter().find(|s| s.sandbox.id == id) else {
            return Ok(false);
        };
        let sandbox = SandboxRef {
            id,
            namespace: &found.sandbox.namespace,
            pod_name: &found.sandbox.pod_name,
            state: tend_rules::cri::SandboxState::of(found.sandbox.state == SandboxState::Ready),
        };
        (grant.check_sandbox(&self.plugin, operation, &sandbox)).map_err(crate::Error::from)?;
        self.failing(operation.name())?;
        self.actions
            .borrow_mut()
            .push(format!("{} {id}", operation.name()));
        Ok(true)
    }

    fn find_image(&self, full: &str) -> Option<Image> {
        let images = self.images.borrow();
        let tagged = |i: &&Image| {
            i.id == full || i.repo_tags.iter().chain(&i.repo_digests).any(|t| t == full)
        };
        images.iter().find(tagged).cloned()
    }
}

impl Cri for FakeCri {
    fn version(&self) -> Result<RuntimeVersion> {
        self.read("version")?;
        Ok(self.version.borrow().clone())
    }
    fn list_pod_sandboxes(&self, filter: &SandboxFilter) -> Result<Vec<PodSandbox>> {
        self.read("list-pod-sandboxes")?;
        tend_rules::cri::check_filter_labels(&filter.labels).map_err(crate::Error::from)?;
        if let Some(id) = &filter.id {
            check_id("sandbox id", id).map_err(crate::Error::from)?;
        }
        let sandboxes = self.sandboxes.borrow();
        Ok(sandboxes
            .iter()
            .map(|s| &s.sandbox)
            .filter(|s| filter.matches(s))
            .cloned()
            .collect())
    }
    fn pod_sandbox_status(&self, id: &str) -> Result<SandboxStatus> {
        self.read("pod-sandbox-status")?;
        check_id("sandbox id", id).map_err(crate::Error::from)?;
        let sandboxes = self.sandboxes.borrow();
        let found = sandboxes.iter().find(|s| s.sandbox.id == id).cloned();
        found.ok_or_else(|| Error::NotFound(format!("cri pod-sandbox-status: no sandbox {id}")))
    }
    /// As on the host, an absent sandbox is `not-found`.
    fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        if !self.mutate(Operation::StopPodSandbox, id)? {
            return Err(Error::NotFound(format!(
                "cri stop-pod-sandbox: no sandbox {id}"
            )));
        }
        let mut sandboxes = self.sandboxes.borrow_mut();
        for s in sandboxes.iter_mut().filter(|s| s.sandbox.id == id) {
            s.sandbox.state = SandboxState::NotReady;
        }
        Ok(())
    }
    fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        if !self.mutate(Operation::RemovePodSandbox, id)? {
            return Ok(());
        }
        self.sandboxes.borrow_mut().retain(|s| s.sandbox.id != id);
        self.containers
            .borrow_mut()
            .retain(|c| c.pod_sandbox_id != id);
        Ok(())
    }
    fn list_containers(&self, pod_sandbox_id: Option<&str>) -> Result<Vec<Container>> {
        self.read("list-containers")?;
        if let Some(id) = pod_sandbox_id {
            check_id("sandbox id", id).map_err(crate::Error::from)?;
        }
        let containers = self.containers.borrow();
        Ok(containers
            .iter()
            .filter(|c| pod_sandbox_id.is_none_or(|id| c.pod_sandbox_id == id))
            .cloned()
            .collect())
    }
    fn list_images(&self) -> Result<Vec<Image>> {
        self.read("list-images")?;
        Ok(self.images.borrow().clone())
    }
    fn image_status(&self, image: &str) -> Result<Option<Image>> {
        self.read("image-status")?;
        let full = normalize_image(image).map_err(crate::Error::from)?;
        Ok(self.find_image(&full))
    }
    fn pull_image(&self, image: &str, timeout: Duration) -> Result<String> {
        let full = (self.grant.borrow())
            .check_pull(&self.plugin, image)
            .map_err(crate::Error::from)?;
        let left = self.time_left.get().map(|l| l.saturating_sub(PULL_MARGIN));
        if timeout.is_zero() || left.is_some_and(|left| timeout > left) {
            return Err(Error::Invalid(format!(
                "cri pull-image of {full} with a timeout of {timeout:?} does not fit in what is left of this reconcile's deadline ({left:?}): raise [plugins.{}.limits] timeout above the pull's timeout",
                self.plugin
            )));
        }
        self.failing("pull-image")?;
        self.actions.borrow_mut().push(format!("pull-image {full}"));
        let takes = self
            .pull_durations
            .borrow()
            .get(&full)
            .copied()
            .unwrap_or_default();
        let spent = takes.min(timeout);
        if let Some(left) = self.time_left.get() {
            self.time_left.set(Some(left.saturating_sub(spent)));
        }
        if takes > timeout {
            return Err(Error::Timeout(format!(
                "cri pull-image did not finish within {timeout:?}"
            )));
        }
        if let Some(error) = self.pull_failures.borrow().get(&full) {
            return Err(error.clone());
        }
        if self.find_image(&full).is_none() {
            self.add_image(&full);
        }
        Ok(format!("sha256:{full}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    /// The generated records keep the defaults the SDK promised (set by the
    /// bindings' options, `rust_opts` in sdk/c/bindgen): a container of
    /// unknown state.
    #[test]
    fn a_default_container_is_in_the_unknown_state() {
        assert_eq!(Container::default().state, ContainerState::Unknown);
    }
    const GONE: &str = "0000000000000000000000000000000000000000000000000000000000000000";

    fn unavailable() -> Error {
        Error::Unavailable("the container runtime did not answer".into())
    }

    #[test]
    fn nothing_is_granted_until_granted_with_the_hosts_messages() {
        let cri = FakeCri::new("sweeper");
        cri.add_sandbox(A, "uid-1", 0, SandboxState::Ready);
        assert_eq!(
            cri.list_pod_sandboxes(&SandboxFilter::default()),
            Err(Error::Denied(
                "cri list-pod-sandboxes is not granted: set read = true in [plugins.sweeper.grants] cri".into()
            ))
        );
        let err = cri.remove_pod_sandbox(A).unwrap_err();
        assert_eq!(
            err.message(),
            format!(
                "cri remove-pod-sandbox of {A} is not granted: add \"remove-pod-sandbox\" to operations in [plugins.sweeper.grants] cri"
            )
        );
        cri.grant_operations(&["pull-image"]);
        let err = cri
            .pull_image("quay.io/x/y:1", Duration::from_secs(60))
            .unwrap_err();
        assert!(
            err.message()
                .starts_with("no cri images pattern covers quay.io/x/y:1"),
            "{err}"
        );
        assert_eq!(
            cri.pull_image("a b", Duration::from_secs(1))
                .unwrap_err()
                .kind(),
            "invalid"
        );
        assert_eq!(cri.actions(), Vec::<String>::new());
    }

    #[test]
    fn listings_filter_and_removals_of_absent_sandboxes_succeed() {
        let cri = FakeCri::default();
        cri.grant_read()
            .grant_operations(&["remove-pod-sandbox", "stop-pod-sandbox"]);
        cri.add_sandbox(A, "uid-1", 0, SandboxState::NotReady)
            .add_sandbox(B, "uid-1", 1, SandboxState::Ready)
            .add_container(Container {
                id: "c".into(),
                pod_sandbox_id: A.into(),
                ..Container::default()
            });
        let ready = SandboxFilter {
            state: Some(SandboxState::Ready),
            ..SandboxFilter::default()
        };
        let listed = cri.list_pod_sandboxes(&ready).unwrap();
        assert_eq!(
            listed.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
            [B]
        );
        assert_eq!(cri.list_containers(Some(A)).unwrap().len(), 1);
        cri.remove_pod_sandbox(A).unwrap();
        cri.remove_pod_sandbox(GONE).unwrap();
        assert_eq!(cri.list_containers(None).unwrap(), []);
        cri.stop_pod_sandbox(B).unwrap();
        assert_eq!(
            cri.pod_sandbox_status(B).unwrap().sandbox.state,
            SandboxState::NotReady
        );
        assert_eq!(cri.stop_pod_sandbox(GONE).unwrap_err().kind(), "not-found");
        assert_eq!(cri.pod_sandbox_status(A).unwrap_err().kind(), "not-found");
        assert_eq!(cri.sandbox_ids(), [B]);
        assert_eq!(
            cri.actions(),
            [
                format!("remove-pod-sandbox {A}"),
                format!("stop-pod-sandbox {B}")
            ],
            "absent sandboxes are no mutation"
        );
    }

    #[test]
    fn prefixes_are_invalid_and_removals_keep_to_namespaces_and_states() {
        let cri = FakeCri::new("sweeper");
        cri.grant_read()
            .grant_operations(&["remove-pod-sandbox", "stop-pod-sandbox"])
            .grant_namespaces(&["default"])
            .grant_states(&["notready"]);
        cri.add_sandbox(A, "uid-1", 0, SandboxState::Ready)
            .put_sandbox(PodSandbox {
                namespace: "kube-system".into(),
                ..PodSandbox::new(B, "uid-2", 0, SandboxState::NotReady)
            });
        for prefix in [&A[..10], &A[..12]] {
            assert_eq!(cri.stop_pod_sandbox(prefix).unwrap_err().kind(), "invalid");
            assert_eq!(
                cri.pod_sandbox_status(prefix).unwrap_err().kind(),
                "invalid"
            );
        }
        let err = cri.remove_pod_sandbox(A).unwrap_err();
        assert!(
            err.message().ends_with(
                "the sandbox is READY, outside states = [\"notready\"]: add \"ready\" to states in [plugins.sweeper.grants] cri"
            ),
            "{err}"
        );
        let err = cri.remove_pod_sandbox(B).unwrap_err();
        assert!(
            err.message()
                .ends_with("add \"kube-system\" to namespaces in [plugins.sweeper.grants] cri"),
            "{err}"
        );
        assert_eq!(cri.sandbox_ids(), [A, B]);
        assert_eq!(cri.actions(), Vec::<String>::new());
    }

    #[test]
    fn calls_fail_as_scripted() {
        let cri = FakeCri::default();
        cri.grant_read();
        cri.fail_call("list-pod-sandboxes", Some(unavailable()));
        assert_eq!(
            cri.list_pod_sandboxes(&SandboxFilter::default())
                .unwrap_err()
                .kind(),
            "unavailable"
        );
        assert_eq!(cri.version().unwrap().runtime_version, "v1.7.13");
        cri.fail_call("list-pod-sandboxes", None)
            .fail_with(Some(unavailable()));
        assert_eq!(cri.version().unwrap_err().kind(), "unavailable");
        cri.fail_with(None).set_version("containerd", "1.6.20");
        assert_eq!(cri.version().unwrap().runtime_version, "1.6.20");
    }

    #[test]
    #[should_panic(expected = "no call \"list-sandboxes\"")]
    fn failing_an_unknown_call_is_a_test_setup_error() {
        FakeCri::default().fail_call("list-sandboxes", Some(unavailable()));
    }

    #[test]
    fn pulls_add_images_fail_or_time_out_as_scripted() {
        let cri = FakeCri::default();
        cri.grant_read()
            .grant_operations(&["pull-image"])
            .grant_images(&["docker.io/library/*"]);
        assert_eq!(cri.image_status("busybox:1.36").unwrap(), None);
        let reference = cri
            .pull_image("busybox:1.36", Duration::from_secs(60))
            .unwrap();
        assert_eq!(reference, "sha256:docker.io/library/busybox:1.36");
        let present = cri.image_status("docker.io/library/busybox:1.36").unwrap();
        assert_eq!(
            present.unwrap().repo_tags,
            ["docker.io/library/busybox:1.36"]
        );

        cri.fail_pull("nginx", Some(unavailable()));
        assert_eq!(
            cri.pull_image("nginx", Duration::from_secs(60))
                .unwrap_err()
                .kind(),
            "unavailable"
        );
        cri.fail_pull("nginx", None)
            .pull_takes("nginx", Duration::from_secs(120));
        let err = cri
            .pull_image("nginx", Duration::from_secs(60))
            .unwrap_err();
        assert_eq!(
            err,
            Error::Timeout("cri pull-image did not finish within 60s".into())
        );
        assert_eq!(cri.image_status("nginx").unwrap(), None);
        cri.pull_image("nginx", Duration::from_secs(180)).unwrap();
        assert!(cri.image_status("nginx").unwrap().is_some());
        assert_eq!(cri.actions().len(), 4);
    }

    #[test]
    fn a_pull_must_fit_in_what_is_left_of_the_deadline() {
        let cri = FakeCri::new("pull-guard");
        cri.grant_operations(&["pull-image"])
            .grant_images(&["docker.io/library/*"])
            .pull_takes("busybox", Duration::from_secs(40))
            .set_time_left(Some(Duration::from_secs(61)));
        cri.pull_image("busybox", Duration::from_secs(60)).unwrap();
        let err = cri
            .pull_image("nginx", Duration::from_secs(60))
            .unwrap_err();
        assert_eq!(err.kind(), "invalid");
        assert!(
            err.message()
                .ends_with("raise [plugins.pull-guard.limits] timeout above the pull's timeout"),
            "{err}"
        );
        assert_eq!(
            cri.pull_image("nginx", Duration::ZERO).unwrap_err().kind(),
            "invalid"
        );
        assert_eq!(
            cri.actions(),
            ["pull-image docker.io/library/busybox:latest"]
        );
    }
}
