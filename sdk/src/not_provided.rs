//! [`NotProvided`]: below the capability modules, which each implement their
//! trait for it, and the [`crate::Host`] whose accessors default to it.

use crate::Error;

/// A capability the [`crate::Host`] does not provide: it implements every capability
/// trait, and every call returns [`Error::Denied`]. The default of each
/// [`crate::Host`] accessor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NotProvided;

impl NotProvided {
    /// The error of every call to `capability`.
    pub(crate) fn denied(capability: &str) -> Error {
        Error::Denied(format!(
            "{capability} is not provided by this host: its Host implementation does not override Host::{capability}"
        ))
    }
}
