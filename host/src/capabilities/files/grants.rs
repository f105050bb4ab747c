//! Which granted root covers a path: the pure rules live in `tend-rules`,
//! shared with the SDK's fakes so a plugin's unit tests get the host's exact
//! decisions; here they meet the host's error type.

use crate::capabilities::error::CapError;
pub use tend_rules::files::{FileGrant, Resolved};

/// Resolve `path` inside the plugin's grants; a write needs `write = true`.
/// Tend's own `/proc/<pid>` is never granted (its environment, memory and
/// file descriptors), whatever the grants say.
pub fn resolve(
    grants: &[FileGrant],
    plugin: &str,
    path: &str,
    write: bool,
) -> Result<Resolved, CapError> {
    let resolved = tend_rules::files::resolve(grants, plugin, path, write)?;
    if tend_rules::files::is_own_proc(&resolved.root.join(&resolved.rel), std::process::id()) {
        return Err(CapError::Denied(format!(
            "{path}: Tend's own /proc entries (its environment, memory, file descriptors) are never granted"
        )));
    }
    Ok(resolved)
}

/// A mutation of the granted root itself is refused: it is the operator's.
pub fn refuse_root(resolved: &Resolved, path: &str, what: &str) -> Result<(), CapError> {
    if resolved.rel.as_os_str().is_empty() {
        return Err(CapError::Invalid(format!(
            "{path} is a granted root {what}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_become_capability_errors() {
        let grants = [FileGrant {
            path: "/etc/containerd/certs.d".into(),
            write: true,
        }];
        let err = resolve(&grants, "p", "/var/x", false).unwrap_err();
        assert_eq!(err.kind(), "denied");
        let err = resolve(&grants, "p", "/etc/containerd/certs.d/../x", false).unwrap_err();
        assert_eq!(err.kind(), "invalid");
        let root = resolve(&grants, "p", "/etc/containerd/certs.d", true).unwrap();
        assert!(refuse_root(&root, "/etc/containerd/certs.d", "and cannot be removed").is_err());
    }
}
