//! Whether a URL matches one of the plugin's http grants: pure and tested.
//!
//! The URL is parsed first (WHATWG rules, the `url` crate) and its parts
//! compared to the pattern's parts, so a `*` in a pattern cannot match across
//! the host, the port or user info. Hosts are never matched as text: an IP
//! pattern compares addresses, a DNS pattern compares names, and the two never
//! meet.

/// The most requests one `send-all` carries: each is a connection the host
/// holds open at once.
pub const MAX_SEND_ALL: usize = 32;

/// Whether one `send-all` may carry `count` requests. The host refuses a
/// longer call whole, answering each of its requests `invalid` with this
/// message (nothing is sent); the fakes answer the same.
pub fn check_send_all(count: usize) -> Result<(), String> {
    if count > MAX_SEND_ALL {
        return Err(format!(
            "send-all takes at most {MAX_SEND_ALL} requests, got {count}: split the call"
        ));
    }
    Ok(())
}

use crate::{Refusal, shown};
use serde::{Deserialize, Deserializer, de::Error as _};
use std::fmt;
use std::net::IpAddr;
use url::Host;

/// The longest URL a plugin may send, in bytes; longer ones are `invalid`.
pub const MAX_URL_LEN: usize = 8192;

/// A URL pattern of an http grant: `scheme://host[:port][/path]`.
///
/// - **scheme**: `http` or `https`.
/// - **host**, one of:
///   - an IP address: IPv4 in dotted-decimal form (`127.0.0.1`) or IPv6 in
///     brackets (`[fd00::a]`). It matches only a URL whose host is that very
///     address written as an IP literal (however the URL spells it: WHATWG
///     parsing reads `http://2130706433/` as `127.0.0.1`), never a DNS name.
///     Brackets hold an IPv6 address; they are not character classes.
///   - a CIDR range: an IP address followed by `/<prefix>` and then a port,
///     as in `http://10.0.0.0/8:*/*` or `http://[fd00::]/64:443/*`. It
///     matches IP-literal URL hosts of the same family in that range (an
///     IPv4-mapped IPv6 address is IPv6 and never matches an IPv4 range). The
///     port is required after a CIDR, so `/8` cannot be mistaken for a path;
///     the address must have no bits set past the prefix.
///   - a DNS name (`registry.example.com`): matches that name only,
///     case-insensitively and exactly, never an IP-literal host.
///   - `*.` and a DNS name (`*.example.com`): matches a name of exactly one
///     more label (`cache.example.com`, not `a.b.example.com`, not
///     `example.com` itself, not `evil-example.com`). `*` anywhere else in a
///     host is a parse error: use a CIDR for a range of addresses.
/// - **port**: a number, `*` for any port, or omitted for the scheme's
///   default (80, 443).
/// - **path**: omitted means `/*`; otherwise it starts with `/` and `*`
///   matches any characters, `/` included (`/v2/*` matches `/v2/a/b`). Every
///   other character is literal, matched against the URL's path as parsed
///   (percent-encoded, dot segments resolved); the query is not matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlPattern {
    /// The pattern as written in the config.
    pub text: String,
    pub scheme: String,
    /// The host part, normalized: `127.0.0.1`, `[fd00::a]`, `10.0.0.0/8`,
    /// `registry.example.com`, `*.example.com`.
    pub host: String,
    /// How the host is matched.
    pub host_pattern: HostPattern,
    /// None matches any port.
    pub port: Option<u16>,
    pub path: String,
}

/// The host part of a [`UrlPattern`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// Exactly this address, written as an IP literal in the URL.
    Ip(IpAddr),
    /// An IP-literal URL host of the same family whose first `prefix` bits are
    /// those of `network`.
    Cidr { network: IpAddr, prefix: u8 },
    /// Exactly this DNS name (lower case, in its ASCII form).
    Name(String),
    /// `*.suffix`: a DNS name of one label followed by `.suffix`.
    AnyLabelOf(String),
}

impl HostPattern {
    /// Whether the host of a parsed URL matches.
    pub fn matches(&self, host: &Host<&str>) -> bool {
        match (self, host) {
            (HostPattern::Ip(IpAddr::V4(a)), Host::Ipv4(b)) => a == b,
            (HostPattern::Ip(IpAddr::V6(a)), Host::Ipv6(b)) => a == b,
            (HostPattern::Cidr { network, prefix }, Host::Ipv4(b)) => match network {
                IpAddr::V4(n) => same_prefix(
                    u128::from(n.to_bits()),
                    u128::from(b.to_bits()),
                    32,
                    *prefix,
                ),
                IpAddr::V6(_) => false,
            },
            (HostPattern::Cidr { network, prefix }, Host::Ipv6(b)) => match network {
                IpAddr::V6(n) => same_prefix(n.to_bits(), b.to_bits(), 128, *prefix),
                IpAddr::V4(_) => false,
            },
            (HostPattern::Name(name), Host::Domain(domain)) => domain.eq_ignore_ascii_case(name),
            (HostPattern::AnyLabelOf(suffix), Host::Domain(domain)) => {
                let domain = domain.to_ascii_lowercase();
                domain
                    .strip_suffix(suffix.as_str())
                    .and_then(|rest| rest.strip_suffix('.'))
                    .is_some_and(|label| !label.is_empty() && !label.contains(['.', '*']))
            }
            _ => false,
        }
    }
}

/// Whether the first `prefix` of `width` bits of `a` and `b` are equal.
fn same_prefix(a: u128, b: u128, width: u32, prefix: u8) -> bool {
    let prefix = u32::from(prefix);
    prefix == 0 || (a ^ b) >> (width - prefix.min(width)) == 0
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Ip(IpAddr::V4(a)) => write!(f, "{a}"),
            HostPattern::Ip(IpAddr::V6(a)) => write!(f, "[{a}]"),
            HostPattern::Cidr {
                network: IpAddr::V4(a),
                prefix,
            } => write!(f, "{a}/{prefix}"),
            HostPattern::Cidr {
                network: IpAddr::V6(a),
                prefix,
            } => write!(f, "[{a}]/{prefix}"),
            HostPattern::Name(name) => f.write_str(name),
            HostPattern::AnyLabelOf(suffix) => write!(f, "*.{suffix}"),
        }
    }
}

const EXPECTED: &str = "expected scheme://host[:port][/path], for example \"http://127.0.0.1:*/*\"";
const STAR: &str = "`*` in a host is allowed only as the whole leftmost label of a DNS name, as in \"http://*.example.com/*\"; for a range of IP addresses write a CIDR, as in \"http://10.0.0.0/8:*/*\"";

impl UrlPattern {
    /// Parse a pattern as written in `[plugins.NAME.grants] http`; the error
    /// says what is wrong and how to write it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("invalid URL pattern {text:?}: {why}");
        let (scheme, rest) = text.split_once("://").ok_or_else(|| bad(EXPECTED))?;
        let scheme = scheme.to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "http" => 80,
            "https" => 443,
            _ => return Err(bad("scheme must be http or https")),
        };
        // The host ends at the port or the path; an IPv6 address at its `]`.
        let host_end = if rest.starts_with('[') {
            rest.find(']').map(|i| i + 1).ok_or_else(|| {
                bad("an unclosed `[`: brackets hold an IPv6 address, as in \"http://[fd00::a]:*/*\"")
            })?
        } else {
            rest.find([':', '/']).unwrap_or(rest.len())
        };
        let (host_text, mut rest) = rest.split_at(host_end);
        let mut host_pattern = host(host_text).map_err(|why| bad(&why))?;
        if let HostPattern::Ip(network) = host_pattern
            && let Some((prefix, after)) = cidr_prefix(rest)
        {
            let prefix = prefix.map_err(|why| bad(&why))?;
            host_pattern = cidr(network, prefix).map_err(|why| bad(&why))?;
            rest = after;
        }
        let port_end = rest.find('/').unwrap_or(rest.len());
        let (port, path) = rest.split_at(port_end);
        let port = match port {
            "" => Some(default_port),
            ":*" => None,
            _ => {
                let digits = port.strip_prefix(':').ok_or_else(|| bad(EXPECTED))?;
                Some(
                    digits
                        .parse::<u16>()
                        .map_err(|_| bad(&format!("port {digits:?} is not a number or *")))?,
                )
            }
        };
        let path = if path.is_empty() {
            "/*".to_string()
        } else {
            path_pattern(path).map_err(|why| bad(&why))?
        };
        Ok(UrlPattern {
            text: text.to_string(),
            scheme,
            host: host_pattern.to_string(),
            host_pattern,
            port,
            path,
        })
    }

    /// Whether this pattern allows the parsed URL.
    fn matches(&self, url: &url::Url, host: &Host<&str>, port: u16) -> bool {
        self.scheme == url.scheme()
            && self.host_pattern.matches(host)
            && self.port.is_none_or(|p| p == port)
            && wildcard(&self.path, url.path())
    }
}

/// The host of a pattern, without a CIDR prefix.
fn host(text: &str) -> Result<HostPattern, String> {
    if text.is_empty() {
        return Err(EXPECTED.to_string());
    }
    if let Some(inner) = text.strip_prefix('[') {
        let inner = inner.strip_suffix(']').unwrap_or(inner);
        return inner
            .parse()
            .map(|a| HostPattern::Ip(IpAddr::V6(a)))
            .map_err(|_| {
                format!(
                    "{text} is not an IPv6 address: brackets hold an IPv6 address, as in [fd00::a]; they are not character classes"
                )
            });
    }
    if text.contains('*') {
        let suffix = text
            .strip_prefix("*.")
            .filter(|s| !s.contains('*'))
            .ok_or_else(|| STAR.to_string())?;
        return match dns_or_ip(suffix)? {
            HostPattern::Name(suffix) => Ok(HostPattern::AnyLabelOf(suffix)),
            _ => Err(format!(
                "{text}: {suffix} is an IP address, not a DNS name; {STAR}"
            )),
        };
    }
    dns_or_ip(text)
}

/// A DNS name, or an IPv4 address in dotted-decimal form.
fn dns_or_ip(text: &str) -> Result<HostPattern, String> {
    if text.contains(['%', '@', '?', '#', '\\', '[', ']']) {
        return Err(EXPECTED.to_string());
    }
    match Host::parse(text) {
        Ok(Host::Ipv4(a)) if a.to_string() == text => Ok(HostPattern::Ip(IpAddr::V4(a))),
        Ok(Host::Ipv4(a)) => Err(format!(
            "{text} is the IPv4 address {a}: write IPv4 addresses in dotted-decimal form"
        )),
        Ok(Host::Ipv6(a)) => Err(format!("write the IPv6 address in brackets: [{a}]")),
        Ok(Host::Domain(name)) => Ok(HostPattern::Name(name.to_ascii_lowercase())),
        Err(e) => Err(format!("{text:?} is not a host name ({e}); {EXPECTED}")),
    }
}

/// After an IP address, `/<prefix>:` starts a CIDR: the prefix (or why it is
/// wrong) and what follows it (the port). `/<digits>` alone is a CIDR missing
/// its port; anything else is a path.
fn cidr_prefix(rest: &str) -> Option<(Result<u8, String>, &str)> {
    let after_slash = rest.strip_prefix('/')?;
    let digits_end = after_slash
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(after_slash.len());
    let (digits, after) = after_slash.split_at(digits_end);
    if digits.is_empty() {
        return None;
    }
    if after.is_empty() {
        let why = "a CIDR range needs a port after it, as in \"http://10.0.0.0/8:*/*\" (any port) or \"http://10.0.0.0/8:80/*\"";
        return Some((Err(why.to_string()), after));
    }
    if !after.starts_with(':') {
        return None;
    }
    let prefix = digits
        .parse::<u8>()
        .map_err(|_| format!("CIDR prefix /{digits} is too long"));
    Some((prefix, after))
}

fn cidr(network: IpAddr, prefix: u8) -> Result<HostPattern, String> {
    let (bits, width) = match network {
        IpAddr::V4(a) => (u128::from(a.to_bits()), 32),
        IpAddr::V6(a) => (a.to_bits(), 128),
    };
    if u32::from(prefix) > width {
        return Err(format!(
            "CIDR prefix /{prefix} is longer than the {width} bits of the address"
        ));
    }
    let host_bits = if u32::from(prefix) == width {
        0
    } else {
        bits & (u128::MAX >> (128 - width + u32::from(prefix)))
    };
    if host_bits != 0 {
        let start = match network {
            IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::from_bits((bits ^ host_bits) as u32)),
            IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::from_bits(bits ^ host_bits)),
        };
        let range = HostPattern::Cidr {
            network: start,
            prefix,
        };
        return Err(format!(
            "the address has bits set past the /{prefix} prefix; the range is written {range}"
        ));
    }
    Ok(HostPattern::Cidr { network, prefix })
}

/// The path of a pattern, percent-encoded as a request's path would be.
fn path_pattern(path: &str) -> Result<String, String> {
    if path.contains(['?', '#']) {
        return Err(
            "a path pattern cannot hold a query or fragment: the query is not matched, so drop it"
                .into(),
        );
    }
    if path.contains('\\') || has_encoded_separator(path) {
        return Err(
            "a path pattern separates segments with a plain `/` only (no `\\`, %2F or %5C)".into(),
        );
    }
    let dots = |s: &str| {
        let s = s.to_ascii_lowercase().replace("%2e", ".");
        s == "." || s == ".."
    };
    if path.split('/').any(dots) {
        return Err(
            "`.` and `..` segments are not allowed in a path pattern; name the path directly"
                .into(),
        );
    }
    let parsed = url::Url::parse(&format!("http://h{path}")).map_err(|e| e.to_string())?;
    Ok(parsed.path().to_string())
}

/// `%2f` or `%5c` in any case: a separator a server may decode.
fn has_encoded_separator(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    lower.contains("%2f") || lower.contains("%5c")
}

/// `*` matches any characters, everything else itself: linear in practice,
/// at worst the product of the lengths, never exponential.
fn wildcard(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

impl<'de> Deserialize<'de> for UrlPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        UrlPattern::parse(&text).map_err(D::Error::custom)
    }
}

/// Ok when `url` matches one of `grants`; `method` (upper case, as the host
/// sends it) and `plugin` only shape the message. No grant at all denies.
/// Refused as invalid whatever the grants: URLs longer than [`MAX_URL_LEN`],
/// other schemes than http and https, user info, and an encoded separator
/// (`%2F`, `%5C`) in the path.
pub fn check_url(
    grants: &[UrlPattern],
    plugin: &str,
    method: &str,
    url: &str,
) -> Result<(), Refusal> {
    if url.len() > MAX_URL_LEN {
        return Err(Refusal::Invalid(format!(
            "{method} {}: the URL is {} bytes, over the limit of {MAX_URL_LEN}; send a shorter URL (put data in the body)",
            shown(url),
            url.len()
        )));
    }
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
    if has_encoded_separator(parsed.path()) {
        return Err(Refusal::Invalid(format!(
            "{method} {url}: an encoded `/` or `\\` (%2F, %5C) in the path is refused, since a server that decodes it would leave the granted path; send plain `/` separators"
        )));
    }
    let Some(host) = parsed.host() else {
        return Err(Refusal::Invalid(format!(
            "{method} {url}: the URL has no host"
        )));
    };
    let port = parsed.port_or_known_default().unwrap_or_default();
    if grants.iter().any(|g| g.matches(&parsed, &host, port)) {
        return Ok(());
    }
    Err(Refusal::Denied(format!(
        "{method} {url}: no http grant matches; add \"{}://{host}:{port}/*\" to [plugins.{plugin}.grants] http",
        parsed.scheme()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_all_takes_at_most_max_send_all_requests() {
        assert_eq!(check_send_all(0), Ok(()));
        assert_eq!(check_send_all(MAX_SEND_ALL), Ok(()));
        assert_eq!(
            check_send_all(MAX_SEND_ALL + 1),
            Err("send-all takes at most 32 requests, got 33: split the call".into())
        );
    }

    fn grants(patterns: &[&str]) -> Vec<UrlPattern> {
        patterns
            .iter()
            .map(|p| UrlPattern::parse(p).unwrap())
            .collect()
    }

    fn allowed(patterns: &[&str], url: &str) -> bool {
        check_url(&grants(patterns), "p", "GET", url).is_ok()
    }

    fn parse_error(pattern: &str) -> String {
        UrlPattern::parse(pattern).unwrap_err()
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
        assert!(allowed(&kubelet, "http://127.0.0.1:10248/healthz?verbose"));
        assert!(!allowed(&kubelet, "http://127.0.0.1:10249/healthz"));
        assert!(!allowed(&kubelet, "http://127.0.0.1:10248/healthz/x"));
        assert!(allowed(
            &["https://registry.example.com"],
            "https://REGISTRY.example.com:443/v2/"
        ));
    }

    #[test]
    fn an_ip_pattern_matches_only_that_address_as_an_ip_literal() {
        let v6 = ["http://[fd00::a]:18080/*"];
        assert!(allowed(&v6, "http://[fd00::a]:18080/x"));
        assert!(allowed(&v6, "http://[FD00:0::A]:18080/x"));
        assert!(
            !allowed(&v6, "http://a:18080/x"),
            "a DNS name is not an IPv6 address"
        );
        assert!(!allowed(&v6, "http://d:18080/x"));
        assert!(!allowed(&v6, "http://[fd00::b]:18080/x"));
        let v4 = ["http://127.0.0.1:*/*"];
        assert!(!allowed(&v4, "http://127.0.0.1.nip.io/"));
        assert!(!allowed(&v4, "http://[::ffff:127.0.0.1]/"));
        // WHATWG reads these as 127.0.0.1: they are the address they denote.
        assert!(allowed(&v4, "http://2130706433/"));
        assert!(allowed(&v4, "http://0x7f.1/"));
    }

    #[test]
    fn ip_globs_are_config_errors_not_patterns() {
        for pattern in [
            "http://127.0.0.*:18080/*",
            "http://127.*.0.1/",
            "http://*/",
            "http://a*.example.com/",
            "http://*.*.example.com/",
            "http://*.10.0.0.1/",
        ] {
            let err = parse_error(pattern);
            assert!(
                err.contains("`*` in a host is allowed only") || err.contains("not a DNS name"),
                "{pattern}: {err}"
            );
            assert!(err.contains("CIDR"), "{pattern}: {err}");
        }
        for pattern in [
            "http://[fd00::a-f]/",
            "http://[abc]:80/",
            "http://[fd00::a/",
        ] {
            let err = parse_error(pattern);
            assert!(
                err.contains("brackets hold an IPv6 address"),
                "{pattern}: {err}"
            );
        }
        assert!(parse_error("http://0x7f.1/").contains("dotted-decimal"));
        assert!(parse_error("http://fd00::a/").contains("not a number"));
    }

    #[test]
    fn cidr_ranges_match_addresses_of_their_family_in_range() {
        let ten = ["http://10.0.0.0/8:*/*"];
        assert!(allowed(&ten, "http://10.1.2.3/"));
        assert!(allowed(&ten, "http://10.255.255.255:8080/v2/"));
        assert!(!allowed(&ten, "http://11.0.0.1/"));
        assert!(!allowed(&ten, "http://10.evil.com/"));
        assert!(!allowed(&ten, "http://[::ffff:10.0.0.1]/"));
        let ula = ["http://[fd00::]/64:443/*"];
        assert!(allowed(&ula, "http://[fd00::1234]:443/"));
        assert!(!allowed(&ula, "http://[fd00:0:0:1::1]:443/"));
        assert!(!allowed(&ula, "http://[fd00::1]:80/"));
        assert!(allowed(&["http://0.0.0.0/0:*/*"], "http://192.168.1.1/"));
        assert!(!allowed(&["http://0.0.0.0/0:*/*"], "http://[::1]/"));
        assert!(allowed(&["http://10.0.0.1/32:*/*"], "http://10.0.0.1/"));
        assert!(!allowed(&["http://10.0.0.1/32:*/*"], "http://10.0.0.2/"));
        let p = UrlPattern::parse("http://[fd00::]/64:*").unwrap();
        assert_eq!(
            (p.host.as_str(), p.port, p.path.as_str()),
            ("[fd00::]/64", None, "/*")
        );
        assert!(parse_error("http://10.0.0.1/8:*/*").contains("the range is written 10.0.0.0/8"));
        assert!(parse_error("http://10.0.0.0/33:*/*").contains("longer than the 32 bits"));
        assert!(parse_error("http://[::]/129:*/*").contains("longer than the 128 bits"));
        assert!(parse_error("http://10.0.0.0/8").contains("needs a port"));
        // An IP host followed by a path that is not `/<digits>:` keeps its path.
        let p = UrlPattern::parse("http://10.0.0.1/8/x").unwrap();
        assert_eq!((p.host.as_str(), p.path.as_str()), ("10.0.0.1", "/8/x"));
    }

    #[test]
    fn wildcards_cover_exactly_one_leftmost_label() {
        let wildcard = ["http://*.example.com/*"];
        assert!(allowed(&wildcard, "http://cache.example.com/v2/"));
        assert!(allowed(&wildcard, "http://CACHE.Example.COM/v2/"));
        assert!(!allowed(&wildcard, "http://a.b.example.com/"));
        assert!(!allowed(&wildcard, "http://example.com/"));
        assert!(!allowed(&wildcard, "http://evil-example.com/"));
        assert!(!allowed(&wildcard, "http://.example.com/"));
        assert!(!allowed(&wildcard, "http://*.example.com/"));
        assert!(!allowed(&wildcard, "http://evil.com/x.example.com/"));
        assert!(
            !allowed(&wildcard, "http://evil.com:80@cache.example.com/"),
            "user info refused"
        );
        assert!(!allowed(&wildcard, "http://cache.example.com.evil.com/"));
        assert!(!allowed(
            &["http://example.com/*"],
            "http://cache.example.com/"
        ));
    }

    #[test]
    fn encoded_separators_in_the_path_are_invalid() {
        let v2 = ["http://127.0.0.1:5000/v2/*"];
        for url in [
            "http://127.0.0.1:5000/v2/..%2fsecret",
            "http://127.0.0.1:5000/v2/..%2Fsecret",
            "http://127.0.0.1:5000/v2/..%5csecret",
            "http://127.0.0.1:5000/v2/%5C",
        ] {
            let err = check_url(&grants(&v2), "p", "GET", url).unwrap_err();
            let Refusal::Invalid(message) = err else {
                panic!("{url}: {err}")
            };
            assert!(message.contains("encoded `/` or `\\`"), "{message}");
        }
        // Encoded separators in the query are data, not path.
        assert!(allowed(&v2, "http://127.0.0.1:5000/v2/x?next=%2F"));
        // Backslashes and dot segments are resolved before matching.
        assert!(!allowed(&v2, "http://127.0.0.1:5000/v2/..\\secret"));
        assert!(!allowed(&v2, "http://127.0.0.1:5000/v2/%2e%2e/secret"));
    }

    #[test]
    fn overlong_urls_are_invalid_and_not_echoed() {
        let url = format!("http://127.0.0.1/{}", "a".repeat(MAX_URL_LEN));
        let err = check_url(&grants(&["http://127.0.0.1:*/*"]), "p", "GET", &url).unwrap_err();
        let Refusal::Invalid(message) = err else {
            panic!("{err}")
        };
        assert!(message.contains("over the limit of 8192"), "{message}");
        assert!(message.len() < 300, "{message}");
        let url = format!("http://127.0.0.1/{}", "a".repeat(MAX_URL_LEN - 17));
        assert_eq!(url.len(), MAX_URL_LEN);
        assert!(allowed(&["http://127.0.0.1:*/*"], &url));
    }

    #[test]
    fn path_stars_match_any_characters_and_nothing_else_is_special() {
        assert!(wildcard("/v2/*", "/v2/a/b"));
        assert!(wildcard("/v2/*/manifests/*", "/v2/a/b/manifests/latest"));
        assert!(!wildcard("/v2/*/manifests/*", "/v2/a/b/blobs/x"));
        assert!(wildcard("*", ""));
        assert!(!wildcard("/x", "/x/"));
        assert!(wildcard("/[ab]", "/[ab]"), "brackets are literal");
        assert!(!wildcard("/[ab]", "/a"));
        assert!(!allowed(&["http://h/[ab]"], "http://h/a"));
        assert!(
            allowed(&["http://h/a b"], "http://h/a%20b"),
            "the pattern is encoded like a request"
        );
        for bad in [
            "http://h/a?b",
            "http://h/a#b",
            "http://h/a%2Fb",
            "http://h/a\\b",
            "http://h/a/../b",
            "http://h/%2e%2E/b",
        ] {
            assert!(UrlPattern::parse(bad).is_err(), "{bad}");
        }
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
        let err = check_url(&[], "p", "GET", "http://2130706433/").unwrap_err();
        assert!(
            err.message().contains("add \"http://127.0.0.1:80/*\""),
            "{err}"
        );
        let err = check_url(&[], "p", "GET", "http://[fd00::a]:18080/").unwrap_err();
        assert!(
            err.message().contains("add \"http://[fd00::a]:18080/*\""),
            "{err}"
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
        assert_eq!(
            p.host_pattern,
            HostPattern::Name("cache.example.com".into())
        );
        let p = UrlPattern::parse("http://127.0.0.1:*/*").unwrap();
        assert_eq!(
            p.host_pattern,
            HostPattern::Ip("127.0.0.1".parse().unwrap())
        );
        assert_eq!(UrlPattern::parse("http://h:*/x").unwrap().port, None);
        assert_eq!(
            UrlPattern::parse("http://*.Example.com")
                .unwrap()
                .host_pattern,
            HostPattern::AnyLabelOf("example.com".into())
        );
        for bad in [
            "ftp://h/",
            "h/x",
            "http://u@h/",
            "http://h:port/",
            "http://",
            "http://:80/",
            "http://h:/",
            "http://h%41/",
            "http://[::1]x/",
        ] {
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
