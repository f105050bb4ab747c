//! The shape of a plugin's metric series: names and labels a plugin may use,
//! checked the same way by the host and the SDK's fake. Always granted, so the
//! only refusals are `invalid` (a malformed name or label) and the per-plugin
//! series limit, which the host enforces.

use crate::Refusal;

/// At most this many series per plugin (name plus label values).
pub const MAX_SERIES: usize = 64;
pub const MAX_NAME: usize = 64;
pub const MAX_LABELS: usize = 4;
pub const MAX_LABEL_VALUE: usize = 128;

fn is_identifier(text: &str) -> bool {
    let mut chars = text.chars();
    matches!(chars.next(), Some('a'..='z'))
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
        && text.len() <= MAX_NAME
}

/// Whether `name` and `labels` make a valid series: `[a-z][a-z0-9_]*` names
/// (not "plugin", which the host sets), distinct label names, printable values.
pub fn check_series(name: &str, labels: &[(String, String)], value: f64) -> Result<(), Refusal> {
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
    if !value.is_finite() {
        return invalid("the value must be a finite number".into());
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
                check_series(name, &l, v).unwrap_err().kind(),
                "invalid",
                "{name} {l:?}"
            );
        }
        assert!(check_series(&"a".repeat(65), &[], 1.0).is_err());
    }
}
