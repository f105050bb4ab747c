//! What a plugin's logs grant lets it read: the pure rules live in
//! `tend-rules` (shared with the SDK's fake); here they meet the host's
//! error type.

use crate::capabilities::error::CapError;
pub use tend_rules::logs::{Filter, LineFacts, LogsGrant, Source};

/// May `plugin` read `source` through `filter`?
pub fn check_read(
    grant: &LogsGrant,
    plugin: &str,
    source: Source,
    filter: &Filter,
) -> Result<(), CapError> {
    Ok(grant.check_read(plugin, source, filter)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_become_capability_errors() {
        let grant: LogsGrant = toml::from_str("kernel = true").unwrap();
        assert!(check_read(&grant, "p", Source::Kernel, &Filter::default()).is_ok());
        let err = check_read(&grant, "p", Source::Journal, &Filter::default()).unwrap_err();
        assert_eq!(err.kind(), "denied");
    }
}
