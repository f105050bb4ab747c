//! Whether a URL matches one of the plugin's http grants: pure and tested.
//!
//! The URL is parsed first and its parts compared to the pattern's parts, so a
//! `*` in a pattern cannot match across the host, the port or user info.

use crate::Refusal;
use serde::{Deserialize, Deserializer, de::Error as _};

/// A URL pattern of an http grant: `scheme://host[:port][/path]`, where `*` in
/// the host matches within the host only, a port of `*` matches any port, an
/// omitted port means the scheme's default, and `*` in the path matches any
/// characters. Matching is done on the parsed URL's parts, so a wildcard can
/// never let `user@`, another host or another port slip through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlPattern {
    pub text: String,
    pub scheme: String,
    pub host: String,
    /// None matches any port.
    pub port: Option<u16>,
    pub path: String,
}

impl UrlPattern {
    pub fn parse(text: &str) -> Result<Self, String> {
        let expected = "expected scheme://host[:port][/path], for example \"http://127.0.0.1:*/*\"";
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| format!("invalid URL pattern {text:?}: {expected}"))?;
        let scheme = scheme.to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "http" => 80,
            "https" => 443,
            _ => {
                return Err(format!(
                    "invalid URL pattern {text:?}: scheme must be http or https"
                ));
            }
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/*".to_string()),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, "*")) => (host, None),
            Some((host, port)) => (
                host,
                Some(port.parse::<u16>().map_err(|_| {
                    format!("invalid URL pattern {text:?}: port {port:?} is not a number or *")
                })?),
            ),
            None => (authority, Some(default_port)),
        };
        if host.is_empty() || host.contains(['@', '/', '?', '#']) {
            return Err(format!("invalid URL pattern {text:?}: {expected}"));
        }
        Ok(UrlPattern {
            text: text.to_string(),
            scheme,
            host: host.to_ascii_lowercase(),
            port,
            path,
        })
    }
}

impl<'de> Deserialize<'de> for UrlPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        UrlPattern::parse(&text).map_err(D::Error::custom)
    }
}

/// Ok when `url` matches one of `grants`; `method` (upper case, as the host
/// sends it) and `plugin` only shape the message. No grant at all denies.
pub fn check_url(
    grants: &[UrlPattern],
    plugin: &str,
    method: &str,
    url: &str,
) -> Result<(), Refusal> {
    let parsed = url::Url::parse(url)
        .map_err(|e| Refusal::Invalid(format!("{method} {url}: not a valid URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(Refusal::Invalid(format!(
            "{method} {url}: only http and https URLs are supported"
        )));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(Refusal::Invalid(format!(
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
    Err(Refusal::Denied(format!(
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
            Refusal::Denied(
                "GET http://127.0.0.1:5000/v2/: no http grant matches; add \"http://127.0.0.1:5000/*\" to [plugins.mirror-gate.grants] http".into()
            )
        );
        let err = check_url(&[], "p", "GET", "file:///etc/passwd").unwrap_err();
        assert!(matches!(err, Refusal::Invalid(_)));
    }

    #[test]
    fn patterns_parse_and_deserialize_with_the_same_rules() {
        let p = UrlPattern::parse("HTTP://Cache.Example.com").unwrap();
        assert_eq!(
            (p.scheme.as_str(), p.host.as_str(), p.port, p.path.as_str()),
            ("http", "cache.example.com", Some(80), "/*")
        );
        assert_eq!(UrlPattern::parse("http://h:*/x").unwrap().port, None);
        for bad in ["ftp://h/", "h/x", "http://u@h/", "http://h:port/"] {
            assert!(UrlPattern::parse(bad).is_err(), "{bad}");
        }
        let p: UrlPattern = serde_json::from_str("\"https://h:8443/v2/*\"").unwrap();
        assert_eq!(p.port, Some(8443));
        let err = serde_json::from_str::<UrlPattern>("\"ftp://h/\"").unwrap_err();
        assert!(
            err.to_string().contains("scheme must be http or https"),
            "{err}"
        );
    }
}
