//! Whether a URL matches one of the plugin's http grants: the pure rules live
//! in `tend-rules`, shared with the SDK's fakes; here they meet the host's
//! error type.

use crate::capabilities::error::CapError;
pub use tend_rules::http::UrlPattern;

pub fn check_url(
    grants: &[UrlPattern],
    plugin: &str,
    method: &str,
    url: &str,
) -> Result<(), CapError> {
    Ok(tend_rules::http::check_url(grants, plugin, method, url)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_become_capability_errors() {
        let grants = [UrlPattern::parse("http://127.0.0.1:*/*").unwrap()];
        assert!(check_url(&grants, "p", "GET", "http://127.0.0.1:5000/v2/").is_ok());
        let err = check_url(&grants, "p", "GET", "http://10.0.0.1/").unwrap_err();
        assert_eq!(err.kind(), "denied");
        let err = check_url(&grants, "p", "GET", "file:///etc/passwd").unwrap_err();
        assert_eq!(err.kind(), "invalid");
    }
}
