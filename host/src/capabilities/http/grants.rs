//! Whether a URL matches one of the plugin's http grants: pure and tested.
//!
//! The URL is parsed first and its parts compared to the pattern's parts, so a
//! `*` in a pattern cannot match across the host, the port or user info.

use crate::capabilities::CapError;
use crate::config::UrlPattern;

pub fn check_url(
    grants: &[UrlPattern],
    plugin: &str,
    method: &str,
    url: &str,
) -> Result<(), CapError> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| CapError::Invalid(format!("{method} {url}: not a valid URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(CapError::Invalid(format!(
            "{method} {url}: only http and https URLs are supported"
        )));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(CapError::Invalid(format!(
            "{method} {url}: user info in URLs is not supported; send an Authorization header"
        )));
    }
    let host = parsed.host_str().unwrap_or_default().to_ascii_lowercase();
    let port = parsed.port_or_known_default().unwrap_or_default();
    let path = parsed.path();
    if grants
        .iter()
        .any(|g| matches(g, parsed.scheme(), &host, port, path))
    {
        return Ok(());
    }
    Err(CapError::Denied(format!(
        "{method} {url}: no http grant matches; add \"{}://{host}:{port}/*\" to [plugins.{plugin}.grants] http",
        parsed.scheme()
    )))
}

fn matches(pattern: &UrlPattern, scheme: &str, host: &str, port: u16, path: &str) -> bool {
    pattern.scheme == scheme
        && glob_match(&pattern.host, host)
        && pattern.port.is_none_or(|p| p == port)
        && glob_match(&pattern.path, path)
}

fn glob_match(pattern: &str, text: &str) -> bool {
    let options = glob::MatchOptions {
        case_sensitive: true,
        require_literal_separator: false,
        require_literal_leading_dot: false,
    };
    glob::Pattern::new(pattern).is_ok_and(|p| p.matches_with(text, options))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(patterns: &[&str]) -> Vec<UrlPattern> {
        patterns
            .iter()
            .map(|p| UrlPattern::parse(p).unwrap())
            .collect()
    }

    fn allowed(patterns: &[&str], url: &str) -> bool {
        check_url(&grants(patterns), "p", "GET", url).is_ok()
    }

    #[test]
    fn matches_scheme_host_port_and_path() {
        let loopback = ["http://127.0.0.1:*/*"];
        assert!(allowed(&loopback, "http://127.0.0.1:5000/v2/"));
        assert!(allowed(&loopback, "http://127.0.0.1/"));
        assert!(!allowed(&loopback, "https://127.0.0.1:5000/v2/"));
        assert!(!allowed(&loopback, "http://127.0.0.2:5000/v2/"));
        let kubelet = ["http://127.0.0.1:10248/healthz"];
        assert!(allowed(&kubelet, "http://127.0.0.1:10248/healthz"));
        assert!(!allowed(&kubelet, "http://127.0.0.1:10249/healthz"));
        assert!(!allowed(&kubelet, "http://127.0.0.1:10248/healthz/x"));
        assert!(allowed(
            &["https://registry.example.com"],
            "https://REGISTRY.example.com:443/v2/"
        ));
    }

    #[test]
    fn wildcards_cannot_cross_into_another_host() {
        let wildcard = ["http://*.example.com/*"];
        assert!(allowed(&wildcard, "http://cache.example.com/v2/"));
        assert!(!allowed(&wildcard, "http://evil.com/x.example.com/"));
        assert!(
            !allowed(&wildcard, "http://evil.com:80@cache.example.com/"),
            "user info refused"
        );
        assert!(!allowed(&wildcard, "http://cache.example.com.evil.com/"));
    }

    #[test]
    fn denial_names_the_pattern_to_add() {
        let err = check_url(&[], "mirror-gate", "GET", "http://127.0.0.1:5000/v2/").unwrap_err();
        assert_eq!(
            err,
            CapError::Denied(
                "GET http://127.0.0.1:5000/v2/: no http grant matches; add \"http://127.0.0.1:5000/*\" to [plugins.mirror-gate.grants] http".into()
            )
        );
        let err = check_url(&[], "p", "GET", "file:///etc/passwd").unwrap_err();
        assert!(matches!(err, CapError::Invalid(_)));
    }
}
