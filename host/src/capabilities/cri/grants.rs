//! What a plugin's CRI grant allows: the pure rules live in `tend-rules`
//! (shared with the SDK's fake); here they meet the host's error type.

use crate::capabilities::error::CapError;
use tend_rules::cri::SandboxRef;
pub use tend_rules::cri::{CriGrant, Operation};

/// Is `id` a full sandbox or container id (`what`, for the message)?
pub fn check_id(what: &str, id: &str) -> Result<(), CapError> {
    Ok(tend_rules::cri::check_id(what, id)?)
}

/// May `plugin` stop or remove the resolved `sandbox`?
pub fn check_sandbox(
    grant: &CriGrant,
    plugin: &str,
    operation: Operation,
    sandbox: &SandboxRef<'_>,
) -> Result<(), CapError> {
    Ok(grant.check_sandbox(plugin, operation, sandbox)?)
}

/// May `plugin` read (`what`, for the message)?
pub fn check_read(grant: &CriGrant, plugin: &str, what: &str) -> Result<(), CapError> {
    Ok(grant.check_read(plugin, what)?)
}

/// May `plugin` perform `operation` on sandbox `id`?
pub fn check_operation(
    grant: &CriGrant,
    plugin: &str,
    operation: Operation,
    id: &str,
) -> Result<(), CapError> {
    Ok(grant.check_operation(plugin, operation, id)?)
}

/// May `plugin` pull `image`? The full reference to pull.
pub fn check_pull(grant: &CriGrant, plugin: &str, image: &str) -> Result<String, CapError> {
    Ok(grant.check_pull(plugin, image)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_become_capability_errors() {
        let grant: CriGrant = toml::from_str(
            "read = true\noperations = [\"pull-image\"]\nimages = [\"docker.io/library/*\"]",
        )
        .unwrap();
        assert!(check_read(&grant, "p", "version").is_ok());
        assert_eq!(
            check_operation(&grant, "p", Operation::StopPodSandbox, "abc")
                .unwrap_err()
                .kind(),
            "denied"
        );
        assert_eq!(
            check_pull(&grant, "p", "busybox").unwrap(),
            "docker.io/library/busybox:latest"
        );
        assert_eq!(
            check_pull(&grant, "p", "a b").unwrap_err().kind(),
            "invalid"
        );
    }
}
