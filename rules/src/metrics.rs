//! The shape of a plugin's metric series: names and labels a plugin may use,
//! checked the same way by the host and the SDK's fake. Always granted, so the
//! only refusals are `invalid` (a malformed name or label) and the per-plugin
//! series limit, which the host enforces.
//!
//! A plugin's series are exported as the family [`family`] names,
//! `tend_plugin_<name>` (gauges) or `tend_plugin_<name>_total` (counters). The
//! host declares families under the same prefix (`tend_plugin_state`, ...), and
//! a family declared twice makes Prometheus reject the whole scrape, so a name
//! whose family would be one of [`HOST_FAMILIES`] is refused, as are the
//! suffixes histograms and summaries own (`_bucket`, `_count`, `_sum`).

use crate::Refusal;

/// At most this many series per plugin (name plus label values).
pub const MAX_SERIES: usize = 64;
pub const MAX_NAME: usize = 64;
pub const MAX_LABELS: usize = 4;
pub const MAX_LABEL_VALUE: usize = 128;

/// What a series is: a counter only grows and is exported with `_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Counter,
    Gauge,
}

/// The host's own families that plugin families could be mistaken for: every
/// family the host declares under `tend_plugin_` (a host test checks this
/// list against its registry, so a new host family cannot be forgotten).
pub const HOST_FAMILIES: [&str; 5] = [
    "tend_plugin_state",
    "tend_plugin_last_success_timestamp_seconds",
    "tend_plugin_load_errors_total",
    "tend_plugin_consecutive_failures",
    "tend_plugin_interval_seconds",
];

/// Name endings that belong to histogram and summary series.
const RESERVED_SUFFIXES: [&str; 3] = ["_bucket", "_count", "_sum"];

/// The family a series of `kind` named `name` is exported as.
pub fn family(kind: Kind, name: &str) -> String {
    match kind {
        Kind::Counter => format!("tend_plugin_{name}_total"),
        Kind::Gauge => format!("tend_plugin_{name}"),
    }
}

fn is_identifier(text: &str) -> bool {
    let mut chars = text.chars();
    matches!(chars.next(), Some('a'..='z'))
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
        && text.len() <= MAX_NAME
}

/// The refusal of a new series beyond [`MAX_SERIES`] (host and SDK fake alike).
pub fn too_many_series(name: &str, plugin: &str) -> crate::Error {
    crate::Error::BudgetExhausted(crate::reason::Reason::Limit.tag(&format!(
        "metric {name}: plugin {plugin} already has {MAX_SERIES} series, the most a plugin may have: use labels with few values (a cache, not a request id)"
    )))
}

/// Whether `name` and `labels` make a valid series of `kind`: a
/// `[a-z][a-z0-9_]*` name whose family is not the host's and that ends in
/// none of `_total` (gauges; counters get it), `_bucket`, `_count`, `_sum`;
/// label names of the same shape (not "plugin", which the host sets),
/// distinct; printable values; a finite value, not negative for a counter.
pub fn check_series(
    kind: Kind,
    name: &str,
    labels: &[(String, String)],
    value: f64,
) -> Result<(), Refusal> {
    let invalid = |why: String| {
        Err(Refusal::Invalid(format!(
            "metric {:?}: {why}",
            crate::shown(name)
        )))
    };
    if !is_identifier(name) {
        return invalid(format!(
            "a name is [a-z][a-z0-9_]*, at most {MAX_NAME} bytes"
        ));
    }
    if let Some(suffix) = RESERVED_SUFFIXES.iter().find(|s| name.ends_with(*s)) {
        return invalid(format!(
            "`{suffix}` names are for histograms and summaries; choose another suffix"
        ));
    }
    if kind == Kind::Gauge && name.ends_with("_total") {
        return invalid("`_total` names are for counters; drop the suffix".into());
    }
    let exported = family(kind, name);
    if HOST_FAMILIES.contains(&exported.as_str()) {
        return invalid(format!(
            "it would be exported as {exported}, a family of the host itself; choose another name"
        ));
    }
    if !value.is_finite() {
        return invalid("the value must be a finite number".into());
    }
    if kind == Kind::Counter && value < 0.0 {
        return invalid("a counter only grows; use a gauge".into());
    }
    if labels.len() > MAX_LABELS {
        return invalid(format!("at most {MAX_LABELS} labels"));
    }
    for (i, (label, text)) in labels.iter().enumerate() {
        if !is_identifier(label) || label == "plugin" {
            return invalid(format!(
                "label {:?}: a label name is [a-z][a-z0-9_]* and not \"plugin\"",
                crate::shown(label)
            ));
        }
        if labels[..i].iter().any(|(other, _)| other == label) {
            return invalid(format!("label {label:?} is given twice"));
        }
        if text.len() > MAX_LABEL_VALUE || text.chars().any(char::is_control) {
            return invalid(format!(
                "label {label:?}: a value is at most {MAX_LABEL_VALUE} bytes without control characters"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn names_labels_and_values_are_checked() {
        assert!(
            check_series(
                Kind::Counter,
                "cache_withdrawn_seconds",
                &labels(&[("cache", "http://a:5000")]),
                1.5
            )
            .is_ok()
        );
        for (name, l, v) in [
            ("Bad", labels(&[]), 1.0),
            ("a-b", labels(&[]), 1.0),
            ("ok", labels(&[("plugin", "x")]), 1.0),
            ("ok", labels(&[("a", "1"), ("a", "2")]), 1.0),
            ("ok", labels(&[("a", "line\nbreak")]), 1.0),
            (
                "ok",
                labels(&[("a", "1"), ("b", "1"), ("c", "1"), ("d", "1"), ("e", "1")]),
                1.0,
            ),
            ("ok", labels(&[]), f64::NAN),
        ] {
            assert_eq!(
                check_series(Kind::Gauge, name, &l, v).unwrap_err().kind(),
                "invalid",
                "{name} {l:?}"
            );
        }
        assert!(check_series(Kind::Gauge, &"a".repeat(65), &[], 1.0).is_err());
    }

    #[test]
    fn names_of_host_families_and_other_kinds_suffixes_are_refused() {
        for (kind, name) in [
            (Kind::Gauge, "state"),
            (Kind::Gauge, "last_success_timestamp_seconds"),
            (Kind::Counter, "load_errors"),
            (Kind::Gauge, "load_errors_total"),
            (Kind::Gauge, "x_bucket"),
            (Kind::Counter, "x_count"),
            (Kind::Gauge, "x_sum"),
        ] {
            let err = check_series(kind, name, &[], 1.0).unwrap_err();
            assert_eq!(err.kind(), "invalid", "{name}");
        }
        let err = check_series(Kind::Gauge, "state", &[], 1.0).unwrap_err();
        assert_eq!(
            err.message(),
            "metric \"state\": it would be exported as tend_plugin_state, a family of the host itself; choose another name"
        );
        let err = check_series(Kind::Counter, "pulls", &[], -1.0).unwrap_err();
        assert_eq!(
            err.message(),
            "metric \"pulls\": a counter only grows; use a gauge"
        );
        assert!(check_series(Kind::Counter, "state", &[], 1.0).is_ok());
        assert!(check_series(Kind::Gauge, "load_errors", &[], 1.0).is_ok());
        assert_eq!(family(Kind::Counter, "pulls"), "tend_plugin_pulls_total");
        assert_eq!(family(Kind::Gauge, "up"), "tend_plugin_up");
    }
}
