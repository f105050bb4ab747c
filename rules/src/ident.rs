//! Identifiers a plugin hands over that become parts of a URL path: one
//! validator, so no name can carry a `/`, `?`, `#`, `%` or `\` into a request
//! and address another object, a subresource or a query parameter.
//!
//! A [`Shape`] is what one kind of identifier looks like (a Kubernetes object
//! name, a namespace, an API group...); [`check`] refuses, with one message
//! form, anything that is not of its shape. Every capability that puts a
//! plugin's identifier into a URL (Kubernetes, CRI, cloud instance and
//! security-group IDs) adds its shapes here and calls [`check`] before
//! its grant check.

use crate::Refusal;

/// What one kind of identifier looks like.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// The shape in words, for messages: "a DNS-1123 subdomain (...)".
    pub description: &'static str,
    /// A valid example, for messages.
    pub example: &'static str,
    /// The longest valid identifier, in bytes.
    pub max: usize,
    /// Whether the empty string is valid (the core API group is "").
    pub empty: bool,
    /// The shape itself, called only on text already free of path separators,
    /// escapes and control characters, within `max`.
    pub valid: fn(&str) -> bool,
}

fn alnum_lower(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`: one DNS-1123 label (length checked apart).
fn dns_label(text: &str) -> bool {
    !text.is_empty()
        && text.chars().all(|c| alnum_lower(c) || c == '-')
        && text.starts_with(alnum_lower)
        && text.ends_with(alnum_lower)
}

/// Labels of at most 63 bytes joined by dots.
fn dns_subdomain(text: &str) -> bool {
    text.split('.')
        .all(|label| label.len() <= 63 && dns_label(label))
}

/// A DNS-1035 label: a DNS-1123 label starting with a letter.
fn dns1035_label(text: &str) -> bool {
    dns_label(text) && text.starts_with(|c: char| c.is_ascii_lowercase())
}

/// A Kubernetes object name, as the API server validates most kinds' names.
pub const KUBE_NAME: Shape = Shape {
    description: "a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 bytes)",
    example: "node-1",
    max: 253,
    empty: false,
    valid: dns_subdomain,
};

/// A Kubernetes namespace.
pub const KUBE_NAMESPACE: Shape = Shape {
    description: "a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63 bytes)",
    example: "kube-system",
    max: 63,
    empty: false,
    valid: dns_label,
};

/// A Kubernetes API group: "" for the core group, else a DNS subdomain.
pub const KUBE_GROUP: Shape = Shape {
    description: "an API group: empty for the core group, else a DNS-1123 subdomain",
    example: "coordination.k8s.io",
    max: 253,
    empty: true,
    valid: dns_subdomain,
};

/// A Kubernetes API version: "v1", "v1beta1" (a DNS-1035 label).
pub const KUBE_VERSION: Shape = Shape {
    description: "an API version (a lower-case letter, then lower-case letters, digits and '-', at most 63 bytes)",
    example: "v1",
    max: 63,
    empty: false,
    valid: dns1035_label,
};

/// A Kubernetes kind: "Node", "ConfigMap".
pub const KUBE_KIND: Shape = Shape {
    description: "a kind (a letter, then letters and digits, at most 63 bytes)",
    example: "ConfigMap",
    max: 63,
    empty: false,
    valid: |text| {
        text.starts_with(|c: char| c.is_ascii_alphabetic())
            && text.chars().all(|c| c.is_ascii_alphanumeric())
    },
};

/// A Kubernetes resource as RBAC and URLs write it: plural, lower case.
pub const KUBE_PLURAL: Shape = Shape {
    description: "a plural lower-case resource (a DNS-1035 label, at most 63 bytes)",
    example: "configmaps",
    max: 63,
    empty: false,
    valid: dns1035_label,
};

/// A CRI sandbox or container id: all 64 lower-case hexadecimal digits. The
/// runtime resolves any unique prefix of an id (containerd does), so a prefix
/// would name a sandbox the grant, budgets and journal never saw.
pub const CRI_ID: Shape = Shape {
    description: "the full id as the runtime lists it (64 lower-case hexadecimal digits; a prefix is refused, since the runtime would resolve it to whatever sandbox it names)",
    example: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    max: 64,
    empty: false,
    valid: |text| text.len() == 64 && text.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')),
};

fn hex(text: &str) -> bool {
    text.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'))
}

/// "8-4-4-4-12" lower- or upper-case hexadecimal digits.
fn uuid(text: &str) -> bool {
    let parts: Vec<&str> = text.split('-').collect();
    parts.iter().map(|p| p.len()).eq([8, 4, 4, 4, 12])
        && parts
            .iter()
            .all(|p| p.chars().all(|c| c.is_ascii_hexdigit()))
}

/// `prefix` then 8 or 17 lower-case hexadecimal digits (an AWS resource ID).
fn aws_id(text: &str, prefix: &str) -> bool {
    text.strip_prefix(prefix)
        .is_some_and(|rest| matches!(rest.len(), 8 | 17) && hex(rest))
}

/// A cloud instance: an AWS instance ID or an OpenStack server UUID.
pub const CLOUD_INSTANCE_ID: Shape = Shape {
    description: "an instance ID: an AWS instance ID (\"i-\" and 8 or 17 lower-case hexadecimal digits) or an OpenStack server UUID",
    example: "i-0123456789abcdef0",
    max: 36,
    empty: false,
    valid: |text| aws_id(text, "i-") || uuid(text),
};

/// A cloud security group: an AWS group ID or an OpenStack (Neutron) UUID.
pub const CLOUD_GROUP_ID: Shape = Shape {
    description: "a security group ID: an AWS group ID (\"sg-\" and 8 or 17 lower-case hexadecimal digits) or an OpenStack security group UUID",
    example: "sg-0123456789abcdef0",
    max: 36,
    empty: false,
    valid: |text| aws_id(text, "sg-") || uuid(text),
};

/// A `logs` watch rule's name: the trigger's subject and a key of the host's
/// match store.
pub const WATCH_RULE: Shape = Shape {
    description: "a DNS-1123 label (lower-case letters, digits and '-', at most 63 bytes)",
    example: "task-hung",
    max: 63,
    empty: false,
    valid: dns_label,
};
/// A `logs` cursor a plugin hands back (the host's kernel cursor, or
/// journald's): it becomes an argument of `journalctl --after-cursor`.
pub const LOG_CURSOR: Shape = Shape {
    description: "a logs cursor (the `cursor` of an entry or page, handed back unchanged)",
    example: "k1;b=0f5e3c7d9a0b4c1d8e2f3a4b5c6d7e8f;s=42",
    max: 256,
    empty: false,
    valid: |text| {
        !text.starts_with('-')
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, ';' | '='))
    },
};

/// Whether `text` could leave its place in a URL path whatever the shape:
/// a separator, query, fragment, escape or control character, or a dot
/// segment.
fn escapes(text: &str) -> bool {
    text == "."
        || text == ".."
        || text
            .chars()
            .any(|c| matches!(c, '/' | '?' | '#' | '%' | '\\') || c.is_control())
}

/// `what` (for example "kube name") is `text`, of `shape`; else `invalid`,
/// saying which shape is expected.
pub fn check(what: &str, text: &str, shape: &Shape) -> Result<(), Refusal> {
    let ok = if text.is_empty() {
        shape.empty
    } else {
        text.len() <= shape.max && !escapes(text) && (shape.valid)(text)
    };
    if ok {
        return Ok(());
    }
    Err(Refusal::Invalid(format!(
        "{what} {:?}: expected {}, for example {:?}",
        crate::shown(text),
        shape.description,
        shape.example
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str, shape: &Shape) -> bool {
        check("x", text, shape).is_ok()
    }

    #[test]
    fn names_are_dns_subdomains_and_never_path_parts() {
        let longest = vec!["a".repeat(62); 4].join(".") + ".a";
        assert_eq!(longest.len(), 253);
        for good in ["node-1", "a", "web-0.example", "0abc", &longest] {
            assert!(ok(good, &KUBE_NAME), "{good}");
        }
        for bad in [
            "",
            "web/status",
            "kube-system/secrets/x?x=",
            "x?fieldManager=a&force=true",
            "x#frag",
            "x%2fstatus",
            "a\\b",
            ".",
            "..",
            "Node-1",
            "-a",
            "a-",
            "a..b",
            "a\nb",
            "a\u{7f}",
            "é",
            &format!("{longest}c"),
            &format!("{}.b", "a".repeat(64)),
        ] {
            assert!(!ok(bad, &KUBE_NAME), "{bad:?}");
        }
    }

    #[test]
    fn namespaces_are_labels() {
        assert!(ok("kube-system", &KUBE_NAMESPACE));
        for bad in ["a.b", "", &"a".repeat(64), "kube-system/secrets/x"] {
            assert!(!ok(bad, &KUBE_NAMESPACE), "{bad:?}");
        }
    }

    #[test]
    fn groups_versions_kinds_and_plurals() {
        assert!(ok("", &KUBE_GROUP));
        assert!(ok("coordination.k8s.io", &KUBE_GROUP));
        assert!(!ok("apps/v1", &KUBE_GROUP));
        for good in ["v1", "v1beta1", "v2alpha1"] {
            assert!(ok(good, &KUBE_VERSION), "{good}");
        }
        for bad in ["", "1", "V1", "v1/x", "v1?"] {
            assert!(!ok(bad, &KUBE_VERSION), "{bad:?}");
        }
        assert!(ok("ConfigMap", &KUBE_KIND));
        for bad in ["", "Config-Map", "Pod/status", "1Pod"] {
            assert!(!ok(bad, &KUBE_KIND), "{bad:?}");
        }
        assert!(ok("configmaps", &KUBE_PLURAL));
        assert!(!ok("pods/eviction", &KUBE_PLURAL));
    }

    #[test]
    fn cri_ids_are_whole() {
        assert!(ok(CRI_ID.example, &CRI_ID));
        for bad in [
            "",
            &CRI_ID.example[..12],
            &CRI_ID.example[..63],
            &CRI_ID.example.to_uppercase(),
            &format!("{}0", CRI_ID.example),
            &format!("{}g", &CRI_ID.example[..63]),
        ] {
            assert!(!ok(bad, &CRI_ID), "{bad:?}");
        }
    }

    #[test]
    fn cloud_ids_are_aws_ids_or_uuids() {
        for good in [
            "i-0123456789abcdef0",
            "i-01234567",
            "8f7c2a1e-3b4d-4e5f-9a0b-1c2d3e4f5a6b",
        ] {
            assert!(ok(good, &CLOUD_INSTANCE_ID), "{good}");
        }
        for bad in [
            "",
            "i-",
            "i-0123456789abcdef",
            "i-0123456789ABCDEF0",
            "sg-0123456789abcdef0",
            "i-01234567/../x",
            "8f7c2a1e-3b4d-4e5f-9a0b-1c2d3e4f5a6b/action",
            "8f7c2a1e-3b4d-4e5f-9a0b-1c2d3e4f5a6b?all_tenants=1",
            "8f7c2a1e3b4d4e5f9a0b1c2d3e4f5a6b",
            "../servers",
        ] {
            assert!(!ok(bad, &CLOUD_INSTANCE_ID), "{bad:?}");
        }
        assert!(ok("sg-0123456789abcdef0", &CLOUD_GROUP_ID));
        assert!(ok("8f7c2a1e-3b4d-4e5f-9a0b-1c2d3e4f5a6b", &CLOUD_GROUP_ID));
        assert!(!ok("i-0123456789abcdef0", &CLOUD_GROUP_ID));
        assert!(!ok("sg-1234/rules", &CLOUD_GROUP_ID));
    }

    #[test]
    fn the_message_says_what_is_expected() {
        let err = check("kube name", "web/status", &KUBE_NAME).unwrap_err();
        assert_eq!(err.kind(), "invalid");
        assert_eq!(
            err.message(),
            "kube name \"web/status\": expected a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 bytes), for example \"node-1\""
        );
        let long = check("kube name", &"a/".repeat(200), &KUBE_NAME).unwrap_err();
        assert!(
            long.message().len() < 300,
            "oversized input is not echoed whole"
        );
    }
}
