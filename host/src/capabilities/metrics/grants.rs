//! Metrics are always granted; what a plugin may record is the shape of a
//! series (`tend-rules`, shared with the SDK's fake) and how many it has.

use crate::capabilities::error::CapError;
use tend_rules::metrics::{Kind, check_series};

/// Is this a series a plugin may record?
pub fn check(
    kind: Kind,
    name: &str,
    labels: &[(String, String)],
    value: f64,
) -> Result<(), CapError> {
    Ok(check_series(kind, name, labels, value)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_series_are_invalid() {
        assert!(check(Kind::Gauge, "up", &[], 1.0).is_ok());
        assert_eq!(
            check(Kind::Gauge, "Up", &[], 1.0).unwrap_err().kind(),
            "invalid"
        );
        assert_eq!(
            check(Kind::Gauge, "state", &[], 1.0).unwrap_err().kind(),
            "invalid"
        );
    }
}
