//! The grant rules of Tend, with no I/O: which files and URLs a plugin's grants
//! allow, and the operator-facing message when they do not.
//!
//! The host enforces these rules on every capability call, and the SDK's fakes
//! (`tend_sdk::testing`) apply the very same functions, so a plugin's unit tests
//! see exactly the allow/deny decisions and messages the real host gives.
//!
//! - [`files::resolve`]: the granted root covering an absolute path.
//! - [`files::is_own_proc`]: whether a path names Tend's own `/proc` entry.
//! - [`http::check_url`]: whether a request URL matches an http grant.
//! - [`systemd::SystemdGrant::check`]: whether a unit and an operation are granted.
//! - [`cri::CriGrant::check_pull`]: whether an image (written out in full) may be pulled.
//! - [`ident::check`]: whether an identifier a plugin puts into a URL path has its shape.
//! - [`cloud::CloudGrant`]: which cloud operations, owned instances and security
//!   groups are granted; [`cloud::RuleSpec`]: when two security group rules are the same.
//! - [`kube::check`]: whether a Kubernetes API call is granted (RBAC-like rules);
//!   [`drain`]: what cordon, evict and drain need and do, pure.
//! - Input bounds both sides enforce: [`systemd::check_names`],
//!   [`kube::check_size`], [`kube::check_event`], [`cri::check_filter_labels`],
//!   [`files::file_mode`].
//! - [`state::check_key`], [`state::check_value`]: the sizes of a plugin's state.
//! - [`reason`]: the named reason a refusal begins with (`[window] ...`).
//! - [`wit`]: every imported interface's functions, generated from `wit/`.
//! - [`Error`]: the one 8-case capability error (the WIT `error` variant) that
//!   host and SDK both use; a [`Refusal`] converts into it.
//!
//! The crate builds for `wasm32-wasip2` as well as natively.

pub mod cloud;
pub mod conditions;
pub mod cri;
pub mod drain;
mod error;
pub mod files;
pub mod http;
pub mod ident;
pub mod kube;
pub mod logs;
pub mod metrics;
pub mod reason;
pub mod state;
pub mod systemd;
pub mod text;
pub mod wit;

pub use error::Error;

/// Why a grant check refused a call: the two [`Error`] cases a pure rule can
/// give, and converts into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No grant allows it; the message names the grant to add or change.
    Denied(String),
    /// The request itself is malformed (relative path, `..`, not an http URL...).
    Invalid(String),
}

impl Refusal {
    /// The WIT case name: "denied" or "invalid".
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::Denied(_) => "denied",
            Refusal::Invalid(_) => "invalid",
        }
    }

    /// The operator-facing message, without the kind.
    pub fn message(&self) -> &str {
        match self {
            Refusal::Denied(m) | Refusal::Invalid(m) => m,
        }
    }
}

/// `denied: ...` / `invalid: ...`, as the host displays its errors.
impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind(), self.message())
    }
}

impl std::error::Error for Refusal {}

/// The refusal of an operation a capability grant does not list: "cri
/// remove-pod-sandbox of X is not granted: add \"remove-pod-sandbox\" to
/// operations in [plugins.P.grants] cri".
pub(crate) fn operation_not_granted(
    capability: &str,
    operation: &str,
    what: &str,
    plugin: &str,
) -> Refusal {
    Refusal::Denied(format!(
        "{capability} {operation} of {} is not granted: add \"{operation}\" to operations in [plugins.{plugin}.grants] {capability}",
        shown(what)
    ))
}

/// `text`, cut to its first 64 bytes (on a character boundary) and `…` when it
/// is longer than 80: refusals of oversized input must not echo all of it.
pub(crate) fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    if text.len() <= 80 {
        return text.into();
    }
    let mut end = 64;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end]).into()
}
