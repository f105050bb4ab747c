//! Property tests of the URL and path matchers: bounded (512 cases each) so
//! they run in a few seconds in every `cargo test`.

use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Component;
use tend_rules::Refusal;
use tend_rules::files::{FileGrant, resolve};
use tend_rules::http::{HostPattern, UrlPattern, check_url};

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn pattern(text: &str) -> UrlPattern {
    UrlPattern::parse(text).unwrap_or_else(|e| panic!("{e}"))
}

/// A DNS name of one to four labels, some of them all digits or hex-like, so
/// that names resembling addresses are tried too.
fn dns_name() -> impl Strategy<Value = String> {
    let label = prop_oneof![
        "[a-z][a-z0-9-]{0,8}",
        "[0-9]{1,3}[a-z]",
        "[a-f]{1,4}",
        "xn--[a-z0-9]{1,6}",
    ];
    (prop::collection::vec(label, 0..3), "[a-z]{1,6}").prop_map(|(labels, tld)| {
        let mut name = labels.join(".");
        if !name.is_empty() {
            name.push('.');
        }
        name + &tld
    })
}

/// An IP literal as it may appear in a URL: dotted, decimal, hex, or IPv6 in
/// any of its spellings.
fn ip_url_host() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u32>().prop_map(|a| Ipv4Addr::from_bits(a).to_string()),
        any::<u32>().prop_map(|a| a.to_string()),
        any::<u32>().prop_map(|a| format!("{a:#x}")),
        any::<u128>().prop_map(|a| format!("[{}]", Ipv6Addr::from_bits(a))),
        any::<u32>().prop_map(|a| format!("[::ffff:{}]", Ipv4Addr::from_bits(a))),
        Just("[::1]".to_string()),
        Just("127.0.0.1".to_string()),
    ]
}

/// An IP pattern host: an address or a CIDR range, of either family.
fn ip_pattern() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u32>().prop_map(|a| format!("http://{}:*/*", Ipv4Addr::from_bits(a))),
        any::<u128>().prop_map(|a| format!("http://[{}]:*/*", Ipv6Addr::from_bits(a))),
        (any::<u32>(), 0u8..=32).prop_map(|(a, p)| {
            let a = if p == 0 {
                0
            } else {
                a & (u32::MAX << (32 - u32::from(p)))
            };
            format!("http://{}/{p}:*/*", Ipv4Addr::from_bits(a))
        }),
        (any::<u128>(), 0u8..=128).prop_map(|(a, p)| {
            let a = if p == 0 {
                0
            } else {
                a & (u128::MAX << (128 - u32::from(p)))
            };
            format!("http://[{}]/{p}:*/*", Ipv6Addr::from_bits(a))
        }),
    ]
}

/// URL-ish strings with the characters that matter to parsers.
fn urlish() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "(https?|ftp|file)?(:|://)?[a-z0-9.:@\\[\\]%*/\\\\?#-]{0,40}",
        "https?://[a-z0-9.:@\\[\\]%]{0,20}(:[0-9*]{0,6})?(/[a-z0-9.%/\\\\*-]{0,20})?",
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn an_ip_pattern_never_matches_a_dns_name(ip in ip_pattern(), name in dns_name(), port in 1u16..) {
        let grants = [pattern(&ip)];
        let url = format!("http://{name}:{port}/x");
        let Ok(parsed) = url::Url::parse(&url) else { return Ok(()) };
        if let Some(url::Host::Domain(_)) = parsed.host() {
            prop_assert!(check_url(&grants, "p", "GET", &url).is_err(), "{ip} matched {url}");
        }
    }

    #[test]
    fn a_dns_pattern_never_matches_an_ip_literal(name in dns_name(), wild in any::<bool>(), host in ip_url_host()) {
        let text = if wild { format!("http://*.{name}:*/*") } else { format!("http://{name}:*/*") };
        let Ok(grant) = UrlPattern::parse(&text) else { return Ok(()) };
        prop_assume!(matches!(grant.host_pattern, HostPattern::Name(_) | HostPattern::AnyLabelOf(_)));
        let url = format!("http://{host}/");
        prop_assert!(check_url(&[grant], "p", "GET", &url).is_err(), "{text} matched {url}");
    }

    #[test]
    fn a_wildcard_matches_exactly_one_label_under_its_suffix(host in "[a-zA-Z0-9.*-]{0,12}(\\.example\\.com|example\\.com|\\.example\\.com\\.evil|)") {
        let grants = [pattern("http://*.example.com/*")];
        let url = format!("http://{host}/");
        if check_url(&grants, "p", "GET", &url).is_ok() {
            let parsed = url::Url::parse(&url).unwrap();
            let matched = parsed.host_str().unwrap();
            let label = matched.strip_suffix(".example.com");
            prop_assert!(label.is_some_and(|l| !l.is_empty() && !l.contains('.')), "{url} matched as {matched}");
        }
    }

    #[test]
    fn a_wildcard_matches_any_single_label(label in "[a-z0-9][a-z0-9-]{0,20}") {
        let grants = [pattern("http://*.example.com/*")];
        let url = format!("http://{label}.example.com/v2/");
        // "xn--" starts an A-label, which must be valid punycode to be a host name at all.
        prop_assume!(url::Url::parse(&url).is_ok());
        prop_assert!(check_url(&grants, "p", "GET", &url).is_ok(), "{url}");
    }

    #[test]
    fn a_resolved_path_stays_inside_a_granted_root(
        path in prop_oneof![
            any::<String>(),
            "(/|//|\\.|\\.\\.|etc|ssl|proc|self|data|x|\\\\|%2f|\u{0}){0,12}",
            "/(etc|proc|data)(/(ssl|self|thread-self|x|\\.|\\.\\.|)){0,6}",
        ],
        write in any::<bool>(),
    ) {
        let grants = [
            FileGrant::new("/etc", true).unwrap(),
            FileGrant::new("/etc/ssl", false).unwrap(),
            FileGrant::new("/proc", false).unwrap(),
            FileGrant::new("/data/", true).unwrap(),
        ];
        match resolve(&grants, "p", &path, write) {
            Ok(resolved) => {
                let grant = grants.iter().find(|g| g.path == resolved.root);
                prop_assert!(grant.is_some(), "{path:?} resolved to {:?}", resolved.root);
                prop_assert!(!write || grant.unwrap().write, "{path:?} written under a read-only grant");
                prop_assert!(resolved.rel.is_relative(), "{path:?}: {:?}", resolved.rel);
                let full = resolved.root.join(&resolved.rel);
                prop_assert!(full.starts_with(&resolved.root), "{path:?}: {full:?}");
                prop_assert!(!full.components().any(|c| c == Component::ParentDir), "{path:?}: {full:?}");
                prop_assert!(!full.starts_with("/proc/self") && !full.starts_with("/proc/thread-self"), "{path:?}");
                // The innermost covering grant was chosen.
                let deeper = grants.iter().any(|g| {
                    full.starts_with(&g.path)
                        && g.path.components().count() > resolved.root.components().count()
                });
                prop_assert!(!deeper, "{path:?} resolved to an outer root {:?}", resolved.root);
            }
            Err(Refusal::Denied(message) | Refusal::Invalid(message)) => {
                prop_assert!(!message.is_empty());
            }
        }
    }

    #[test]
    fn no_url_panics_the_matcher(url in urlish(), method in "[A-Z]{1,7}") {
        let grants = [
            pattern("http://127.0.0.1:*/*"),
            pattern("https://[fd00::]/64:*/v2/*"),
            pattern("http://*.example.com/*"),
            pattern("http://registry.example.com:5000/v2/*/manifests/*"),
        ];
        let _ = check_url(&grants, "p", &method, &url);
        let _ = check_url(&[], "p", &method, &url);
    }

    #[test]
    fn no_pattern_text_panics_the_parser(text in urlish()) {
        let _ = UrlPattern::parse(&text);
        let _ = UrlPattern::parse(&format!("http://{text}"));
    }
}

proptest! {
    #![proptest_config(config())]

    /// No text with a URL separator, query, fragment, escape or control
    /// character ever passes as a Kubernetes name, namespace or kind.
    #[test]
    fn no_path_escape_passes_the_identifier_check(
        head in "[a-z0-9.-]{0,20}",
        bad in prop_oneof![Just('/'), Just('?'), Just('#'), Just('%'), Just('\\'), (0u8..0x20).prop_map(char::from), Just('\u{7f}')],
        tail in "[a-z0-9.-]{0,20}",
    ) {
        use tend_rules::ident::{KUBE_KIND, KUBE_NAME, KUBE_NAMESPACE, check};
        let text = format!("{head}{bad}{tail}");
        for shape in [&KUBE_NAME, &KUBE_NAMESPACE, &KUBE_KIND] {
            let refused = check("x", &text, shape);
            prop_assert!(matches!(refused, Err(Refusal::Invalid(_))), "{text:?} passed");
        }
        prop_assert!(tend_rules::kube::check_key("v1", "Pod", Some("default"), Some(&text)).is_err());
    }
}
