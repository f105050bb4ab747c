//! [`NotProvided`]: below the capability modules, which each implement their
//! trait for it, and the [`crate::Host`] whose accessors default to it.

use crate::Error;

/// A capability the [`crate::Host`] does not provide: it implements every capability
/// trait, and every call returns [`Error::Denied`]. The default of each
/// [`crate::Host`] accessor, and in the wasm build what a capability the
/// plugin did not declare (`export_plugin!`'s `uses:`) is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NotProvided;

impl NotProvided {
    /// The error of every call to `capability`.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn denied(capability: &str) -> Error {
        Error::Denied(format!(
            "{capability} is not provided by this host: its Host implementation does not override Host::{capability}"
        ))
    }

    /// The error of every call to `capability`: in the wasm build, one the
    /// plugin did not declare in `export_plugin!`'s `uses:` list.
    #[cfg(target_arch = "wasm32")]
    pub(crate) fn denied(capability: &str) -> Error {
        Error::Denied(format!(
            "{capability} is not among the capabilities this plugin declares: add {capability} to the uses list of its tend_sdk::export_plugin! (its component imports only those)"
        ))
    }
}
