//! What a plugin's CRI grant allows: pure, so every rule is tested without a
//! runtime.
//!
//! `cri = { read = true, operations = ["remove-pod-sandbox", "pull-image"],
//! images = ["docker.io/library/*"] }`: `read` allows version, listings and
//! status; each mutating operation must be listed; `pull-image` also needs the
//! image, written out in full by [`normalize_image`], to match an `images`
//! pattern, where `*` matches within one path component (it never crosses `/`).
//!
//! Sandboxes are named by their full id only ([`check_id`]: the runtime would
//! resolve a prefix to whatever sandbox it names); the host then resolves the
//! sandbox, and [`CriGrant::check_sandbox`] holds a stop or removal to the
//! grant's `namespaces` and `states` (`states = ["notready"]`: "remove
//! orphans" never means "remove anything").

use crate::Refusal;
use serde::{Deserialize, Deserializer, de::Error as _};

/// A mutating CRI operation, as a grant and a budget name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Operation {
    StopPodSandbox,
    RemovePodSandbox,
    PullImage,
}

impl Operation {
    pub const ALL: [Operation; 3] = [
        Operation::StopPodSandbox,
        Operation::RemovePodSandbox,
        Operation::PullImage,
    ];

    /// The WIT function it is.
    pub const fn function(self) -> crate::wit::cri::Function {
        use crate::wit::cri::Function;
        match self {
            Operation::StopPodSandbox => Function::StopPodSandbox,
            Operation::RemovePodSandbox => Function::RemovePodSandbox,
            Operation::PullImage => Function::PullImage,
        }
    }

    /// The name in grants, budgets and the journal: "remove-pod-sandbox".
    pub const fn name(self) -> &'static str {
        self.function().name()
    }
}

/// The state of a pod sandbox, as a grant's `states` names it ("notready",
/// where the WIT's `sandbox-state` says "not-ready": the grant's word, kept
/// for existing configs). Both bindings' WIT state becomes one of these
/// through [`SandboxState::of`], the one conversion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxState {
    Ready,
    NotReady,
}

impl SandboxState {
    /// The state of a sandbox that is `ready` or not.
    pub fn of(ready: bool) -> Self {
        if ready {
            SandboxState::Ready
        } else {
            SandboxState::NotReady
        }
    }

    /// "ready" or "notready", as in grants.
    pub fn name(self) -> &'static str {
        match self {
            SandboxState::Ready => "ready",
            SandboxState::NotReady => "notready",
        }
    }
}

/// A sandbox a stop or removal is about, as the runtime reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxRef<'a> {
    /// The full id.
    pub id: &'a str,
    pub namespace: &'a str,
    pub pod_name: &'a str,
    pub state: SandboxState,
}

impl SandboxRef<'_> {
    /// "kube-system/coredns-xyz (sandbox <full id>)": the journal's target,
    /// so budgets and the journal see the pod, not only an id.
    pub fn target(&self) -> String {
        format!(
            "{}/{} (sandbox {})",
            crate::shown(self.namespace),
            crate::shown(self.pod_name),
            self.id
        )
    }
}

/// `what` ("sandbox id", "container id") is a full CRI id; else `invalid`.
pub fn check_id(what: &str, id: &str) -> Result<(), Refusal> {
    crate::ident::check(&format!("cri {what}"), id, &crate::ident::CRI_ID)
}

/// The longest image reference accepted.
pub const MAX_IMAGE_REFERENCE: usize = 512;

/// An image pattern: a full reference ("docker.io/library/nginx:1.25") where
/// `*` stands for any run of characters other than `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImagePattern(pub String);

impl<'de> Deserialize<'de> for ImagePattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let plain = text.replace('*', "x");
        match normalize_image(&plain) {
            Ok(full) if full == plain || full == format!("{plain}:latest") => {
                Ok(ImagePattern(text))
            }
            _ => Err(D::Error::custom(format!(
                "invalid image pattern {text:?}: expected a full reference with `*` wildcards, for example \"docker.io/library/*\" or \"registry.k8s.io/pause:*\""
            ))),
        }
    }
}

impl ImagePattern {
    /// Whether the pattern matches all of the full reference `image`.
    pub fn matches(&self, image: &str) -> bool {
        let (p, t) = (self.0.as_bytes(), image.as_bytes());
        // One backtrack point, and `*` never crosses `/`: linear, never exponential.
        let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
        while ti < t.len() {
            if pi < p.len() && p[pi] != b'*' && p[pi] == t[ti] {
                pi += 1;
                ti += 1;
            } else if pi < p.len() && p[pi] == b'*' {
                star = Some(pi);
                mark = ti;
                pi += 1;
            } else if let Some(s) = star.filter(|_| t[mark] != b'/') {
                pi = s + 1;
                mark += 1;
                ti = mark;
            } else {
                return false;
            }
        }
        p[pi..].iter().all(|&c| c == b'*')
    }
}

/// `[plugins.<name>.grants] cri`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CriGrant {
    /// Version, listings and status.
    #[serde(default)]
    pub read: bool,
    #[serde(default)]
    pub operations: Vec<Operation>,
    /// What `pull-image` may pull.
    #[serde(default)]
    pub images: Vec<ImagePattern>,
    /// Namespaces whose sandboxes may be stopped or removed; all when empty.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// States a sandbox may be in to be stopped or removed; any when empty.
    #[serde(default)]
    pub states: Vec<SandboxState>,
}

/// The reference as the runtime resolves it: "nginx" is
/// "docker.io/library/nginx:latest", "quay.io/x/y" is "quay.io/x/y:latest".
/// Grants are checked against this form, so a short name cannot slip past a
/// pattern, and this form is what is pulled.
pub fn normalize_image(image: &str) -> Result<String, Refusal> {
    let invalid = || {
        Refusal::Invalid(format!(
            "{:?} is not an image reference: expected for example \"docker.io/library/busybox:1.36\"",
            crate::shown(image)
        ))
    };
    let allowed =
        |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/' | ':' | '@');
    if image.is_empty() || image.len() > MAX_IMAGE_REFERENCE || !image.chars().all(allowed) {
        return Err(invalid());
    }
    let (name, digest) = match image.split_once('@') {
        Some((name, digest)) if digest.starts_with("sha256:") && digest.len() == 71 => {
            (name, Some(digest))
        }
        Some(_) => return Err(invalid()),
        None => (image, None),
    };
    // A tag is the part after the last ':' when it has no '/' (else it is a port).
    let (repository, tag) = match name.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => (repo, Some(tag)),
        _ => (name, None),
    };
    let components: Vec<&str> = repository.split('/').collect();
    if components
        .iter()
        .any(|c| c.is_empty() || c.starts_with('.') || c.contains(".."))
        || tag == Some("")
    {
        return Err(invalid());
    }
    let has_registry = components.len() > 1
        && (components[0].contains(['.', ':']) || components[0] == "localhost");
    let repository = match (has_registry, components.len()) {
        (true, _) => repository.to_string(),
        (false, 1) => format!("docker.io/library/{repository}"),
        (false, _) => format!("docker.io/{repository}"),
    };
    if repository
        .split('/')
        .skip(1)
        .any(|c| c.chars().any(|ch| ch.is_ascii_uppercase() || ch == ':'))
    {
        return Err(invalid());
    }
    Ok(match (tag, digest) {
        (_, Some(digest)) => format!(
            "{repository}{}@{digest}",
            tag.map(|t| format!(":{t}")).unwrap_or_default()
        ),
        (Some(tag), None) => format!("{repository}:{tag}"),
        (None, None) => format!("{repository}:latest"),
    })
}

impl CriGrant {
    fn table(plugin: &str) -> String {
        format!("[plugins.{plugin}.grants] cri")
    }

    /// May `plugin` read from the runtime (`what`, for the message)?
    pub fn check_read(&self, plugin: &str, what: &str) -> Result<(), Refusal> {
        if self.read {
            return Ok(());
        }
        Err(Refusal::Denied(format!(
            "cri {what} is not granted: set read = true in {}",
            Self::table(plugin)
        )))
    }

    /// May `plugin` perform `operation` (on `what`, for the message)?
    pub fn check_operation(
        &self,
        plugin: &str,
        operation: Operation,
        what: &str,
    ) -> Result<(), Refusal> {
        if self.operations.contains(&operation) {
            return Ok(());
        }
        Err(crate::operation_not_granted(
            "cri",
            operation.name(),
            what,
            plugin,
        ))
    }

    /// May `plugin` perform `operation` (stop or remove) on `sandbox`, as
    /// resolved by the runtime: the operation, then the grant's `namespaces`
    /// and `states`.
    pub fn check_sandbox(
        &self,
        plugin: &str,
        operation: Operation,
        sandbox: &SandboxRef<'_>,
    ) -> Result<(), Refusal> {
        self.check_operation(plugin, operation, &sandbox.target())?;
        let refused = |key: &str, value: &str, what: String| {
            Err(Refusal::Denied(format!(
                "cri {} of {} is not granted: the sandbox is {what}, outside {key} = {:?}: add \"{value}\" to {key} in {}",
                operation.name(),
                sandbox.target(),
                match key {
                    "namespaces" => self.namespaces.clone(),
                    _ => self.states.iter().map(|s| s.name().to_string()).collect(),
                },
                Self::table(plugin)
            )))
        };
        if !self.namespaces.is_empty() && !self.namespaces.iter().any(|n| n == sandbox.namespace) {
            let namespace = crate::shown(sandbox.namespace);
            return refused(
                "namespaces",
                &namespace,
                format!("in namespace {namespace}"),
            );
        }
        if !self.states.is_empty() && !self.states.contains(&sandbox.state) {
            let state = sandbox.state.name();
            return refused("states", state, state.to_uppercase());
        }
        Ok(())
    }

    /// May `plugin` pull `image`? Returns the full reference to pull.
    pub fn check_pull(&self, plugin: &str, image: &str) -> Result<String, Refusal> {
        let full = normalize_image(image)?;
        self.check_operation(plugin, Operation::PullImage, &full)?;
        if self.images.iter().any(|p| p.matches(&full)) {
            return Ok(full);
        }
        Err(Refusal::Denied(format!(
            "no cri images pattern covers {full}: add \"{full}\" (or a pattern such as \"{}\") to images in {}",
            pattern_for(&full),
            Self::table(plugin)
        )))
    }
}

/// The image's repository with any tag: "docker.io/library/nginx:*".
fn pattern_for(full: &str) -> String {
    let name = full.split('@').next().unwrap_or(full);
    match name.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => format!("{repo}:*"),
        _ => format!("{name}:*"),
    }
}

/// Labels one sandbox listing may filter on, and the longest label key or
/// value: what a plugin sends the runtime is bounded like everything else.
pub const MAX_FILTER_LABELS: usize = 64;
pub const MAX_LABEL_TEXT: usize = 256;

/// The labels of a `list-pod-sandboxes` filter: at most
/// [`MAX_FILTER_LABELS`], keys (and values, when set) 1 to
/// [`MAX_LABEL_TEXT`] bytes without control characters.
pub fn check_filter_labels(labels: &[(String, String)]) -> Result<(), Refusal> {
    if labels.len() > MAX_FILTER_LABELS {
        return Err(Refusal::Invalid(format!(
            "cri list-pod-sandboxes: at most {MAX_FILTER_LABELS} labels in a filter; filter on fewer and match the rest in the plugin"
        )));
    }
    let text = |what: &str, text: &str| {
        if text.is_empty() || text.len() > MAX_LABEL_TEXT || text.chars().any(char::is_control) {
            let start: String = text.chars().take(64).collect();
            return Err(Refusal::Invalid(format!(
                "cri {what}: expected 1 to {MAX_LABEL_TEXT} bytes without control characters, got {start:?}"
            )));
        }
        Ok(())
    };
    for (key, value) in labels {
        text("label", key)?;
        if !value.is_empty() {
            text("label value", value)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> ImagePattern {
        serde_json::from_str(&format!("{text:?}")).unwrap()
    }

    #[test]
    fn short_names_are_written_out_as_the_runtime_resolves_them() {
        for (short, full) in [
            ("busybox", "docker.io/library/busybox:latest"),
            ("busybox:1.36", "docker.io/library/busybox:1.36"),
            ("bitnami/redis", "docker.io/bitnami/redis:latest"),
            ("127.0.0.1:5000/exp/big:v1", "127.0.0.1:5000/exp/big:v1"),
            ("localhost/exp/pause:v1", "localhost/exp/pause:v1"),
            ("127.0.0.1:5000/exp/big", "127.0.0.1:5000/exp/big:latest"),
        ] {
            assert_eq!(normalize_image(short).unwrap(), full);
        }
        let digest = format!("quay.io/a/b@sha256:{}", "0".repeat(64));
        assert_eq!(normalize_image(&digest).unwrap(), digest);
        for bad in [
            "",
            "a b",
            "../x",
            "docker.io/../x",
            "x:",
            "docker.io/Library/x",
            "x@md5:1",
            "a//b",
        ] {
            assert_eq!(normalize_image(bad).unwrap_err().kind(), "invalid", "{bad}");
        }
        assert!(
            normalize_image(&"a".repeat(600))
                .unwrap_err()
                .message()
                .contains('…')
        );
    }

    #[test]
    fn stars_stay_within_one_path_component() {
        let p = pattern("docker.io/library/*");
        assert!(p.matches("docker.io/library/nginx:1.25"));
        assert!(!p.matches("docker.io/library/evil/nginx:1"));
        assert!(!p.matches("docker.io/libraryx/nginx:1"));
        assert!(pattern("registry.k8s.io/pause:*").matches("registry.k8s.io/pause:3.9"));
        assert!(!pattern("registry.k8s.io/pause:*").matches("registry.k8s.io/pause:3.9/x"));
        assert!(pattern("127.0.0.1:*/exp/*").matches("127.0.0.1:5000/exp/big:v1"));
    }

    #[test]
    fn patterns_must_be_written_out() {
        for bad in ["nginx", "library/*", "docker.io/library/*@", "a b/*"] {
            assert!(
                serde_json::from_str::<ImagePattern>(&format!("{bad:?}")).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn reads_operations_and_images_are_each_granted() {
        let grant = CriGrant {
            read: false,
            operations: vec![Operation::PullImage],
            images: vec![pattern("docker.io/library/*")],
            ..CriGrant::default()
        };
        let err = grant.check_read("p", "list-pod-sandboxes").unwrap_err();
        assert_eq!(
            err.message(),
            "cri list-pod-sandboxes is not granted: set read = true in [plugins.p.grants] cri"
        );
        let err = grant
            .check_operation("p", Operation::RemovePodSandbox, "abc")
            .unwrap_err();
        assert!(
            err.message()
                .contains("add \"remove-pod-sandbox\" to operations"),
            "{err}"
        );
        assert_eq!(
            grant.check_pull("p", "busybox").unwrap(),
            "docker.io/library/busybox:latest"
        );
        let err = grant.check_pull("p", "quay.io/evil/x:1").unwrap_err();
        assert_eq!(
            err.message(),
            "no cri images pattern covers quay.io/evil/x:1: add \"quay.io/evil/x:1\" (or a pattern such as \"quay.io/evil/x:*\") to images in [plugins.p.grants] cri"
        );
        assert!(
            CriGrant::default().check_pull("p", "busybox").is_err(),
            "deny by default"
        );
    }

    const ID: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn sandbox_ids_are_full_ids() {
        assert!(check_id("sandbox id", ID).is_ok());
        let err = check_id("sandbox id", &ID[..12]).unwrap_err();
        assert_eq!(err.kind(), "invalid");
        assert!(
            err.message()
                .starts_with("cri sandbox id \"9f86d081884c\": expected the full id"),
            "{err}"
        );
    }

    #[test]
    fn stops_and_removals_are_held_to_namespaces_and_states() {
        let grant: CriGrant = serde_json::from_str(
            r#"{"operations": ["remove-pod-sandbox"], "namespaces": ["default"], "states": ["notready"]}"#,
        )
        .unwrap();
        let sandbox = |namespace, state| SandboxRef {
            id: ID,
            namespace,
            pod_name: "web-0",
            state,
        };
        let orphan = sandbox("default", SandboxState::NotReady);
        assert_eq!(orphan.target(), format!("default/web-0 (sandbox {ID})"));
        assert!(
            grant
                .check_sandbox("p", Operation::RemovePodSandbox, &orphan)
                .is_ok()
        );
        let err = grant
            .check_sandbox(
                "p",
                Operation::RemovePodSandbox,
                &sandbox("kube-system", SandboxState::NotReady),
            )
            .unwrap_err();
        assert_eq!(
            err.message(),
            format!(
                "cri remove-pod-sandbox of kube-system/web-0 (sandbox {ID}) is not granted: the sandbox is in namespace kube-system, outside namespaces = [\"default\"]: add \"kube-system\" to namespaces in [plugins.p.grants] cri"
            )
        );
        let err = grant
            .check_sandbox(
                "p",
                Operation::RemovePodSandbox,
                &sandbox("default", SandboxState::Ready),
            )
            .unwrap_err();
        assert!(
            err.message()
                .ends_with("the sandbox is READY, outside states = [\"notready\"]: add \"ready\" to states in [plugins.p.grants] cri"),
            "{err}"
        );
        let err = grant
            .check_sandbox("p", Operation::StopPodSandbox, &orphan)
            .unwrap_err();
        assert!(
            err.message()
                .contains("add \"stop-pod-sandbox\" to operations"),
            "{err}"
        );
        let unscoped: CriGrant =
            serde_json::from_str(r#"{"operations": ["stop-pod-sandbox"]}"#).unwrap();
        assert!(
            unscoped
                .check_sandbox(
                    "p",
                    Operation::StopPodSandbox,
                    &sandbox("kube-system", SandboxState::Ready)
                )
                .is_ok(),
            "no namespaces or states: any"
        );
        assert!(serde_json::from_str::<CriGrant>(r#"{"states": ["stopped"]}"#).is_err());
    }

    #[test]
    fn filter_labels_are_bounded() {
        let label = |k: &str, v: &str| (k.to_string(), v.to_string());
        assert!(check_filter_labels(&vec![label("k", ""); MAX_FILTER_LABELS]).is_ok());
        assert!(check_filter_labels(&vec![label("k", "v"); MAX_FILTER_LABELS + 1]).is_err());
        assert!(check_filter_labels(&[label(&"k".repeat(MAX_LABEL_TEXT), "v")]).is_ok());
        let err = check_filter_labels(&[label("k", &"v".repeat(MAX_LABEL_TEXT + 1))]).unwrap_err();
        assert!(
            err.message()
                .starts_with("cri label value: expected 1 to 256 bytes"),
            "{err}"
        );
        let err = check_filter_labels(&[label("a\nb", "")]).unwrap_err();
        assert_eq!(
            err.message(),
            "cri label: expected 1 to 256 bytes without control characters, got \"a\\nb\""
        );
        assert!(check_filter_labels(&[label("", "v")]).is_err());
    }
}
