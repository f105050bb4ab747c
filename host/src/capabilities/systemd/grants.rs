//! Which units and operations a plugin's systemd grant allows: the pure rules
//! live in `tend-rules` (shared with the SDK's fake); here they meet the
//! host's error type.

use crate::capabilities::error::CapError;
pub use tend_rules::systemd::{Operation, SystemdGrant, UnitPattern, wildcard_match};

/// May `plugin` see `unit`, and perform `operation` on it?
pub fn check(
    grant: &SystemdGrant,
    plugin: &str,
    unit: &str,
    operation: Option<Operation>,
) -> Result<(), CapError> {
    Ok(grant.check(plugin, unit, operation)?)
}

/// May `plugin` perform `operation` (on `what`, for the message)?
pub fn check_operation(
    grant: &SystemdGrant,
    plugin: &str,
    what: &str,
    operation: Option<Operation>,
) -> Result<(), CapError> {
    Ok(grant.check_operation(plugin, what, operation)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_become_capability_errors() {
        let grant: SystemdGrant = toml::from_str("units = [\"tend-*.service\"]").unwrap();
        assert!(check(&grant, "p", "tend-a.service", None).is_ok());
        assert_eq!(
            check(&grant, "p", "kubelet.service", None)
                .unwrap_err()
                .kind(),
            "denied"
        );
        assert_eq!(
            check(&grant, "p", "a/b", None).unwrap_err().kind(),
            "invalid"
        );
    }
}
