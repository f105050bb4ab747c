//! What a plugin's `conditions` grant lets it report on its own Node: pure,
//! so every rule is tested without an API server.
//!
//! ```toml
//! [plugins.problem-detector.grants]
//! conditions = [
//!   "KernelDeadlock",
//!   { condition = "ReadonlyFilesystem", taint-on = { effect = "NoSchedule" } },
//! ]
//! ```
//!
//! A condition type is CamelCase (it is also the name of the taint tied to
//! it, `tend.dev/<type>`). The kubelet's own types are never granted, and no
//! two plugins are granted the same type (checked when the config is read,
//! [`owners`]), so every condition Tend writes has exactly one owner.

use crate::Refusal;
use serde::{Deserialize, Deserializer, de::Error as _};

/// Every function of the WIT `conditions` interface, by its WIT name.
pub const CALLS: [&str; 3] = crate::wit::conditions::FUNCTIONS;

/// What a budget may name: "conditions.set", "conditions.clear".
pub const MUTATIONS: &[&str] = &["set", "clear"];

/// The kubelet's condition types (and the node lifecycle controller's): never a plugin's.
pub const KUBELET_TYPES: [&str; 5] = [
    "Ready",
    "MemoryPressure",
    "DiskPressure",
    "PIDPressure",
    "NetworkUnavailable",
];

/// The longest condition type and reason, and message, in bytes.
pub const MAX_TYPE: usize = 63;
pub const MAX_REASON: usize = 128;
pub const MAX_MESSAGE: usize = 1024;
/// The longest TTL a report may ask for: a week.
pub const MAX_TTL_SECONDS: u32 = 7 * 24 * 3600;
/// The most condition types one grant names.
pub const MAX_CONDITIONS: usize = 32;
/// The prefix of the key of a taint tied to a condition.
pub const TAINT_PREFIX: &str = "tend.dev/";
/// The reason a condition is cleared with when its TTL passes.
pub const EXPIRED: &str = "Expired";

/// `[A-Za-z][A-Za-z0-9]*`: a condition type or a reason, as Kubernetes writes them.
fn camel(text: &str) -> bool {
    text.starts_with(|c: char| c.is_ascii_alphabetic())
        && text.chars().all(|c| c.is_ascii_alphanumeric())
}

/// `condition` is a valid condition type, else `invalid` saying the shape.
pub fn check_type(condition: &str) -> Result<(), Refusal> {
    if condition.len() > MAX_TYPE || !camel(condition) {
        return Err(Refusal::Invalid(format!(
            "condition type {:?}: expected CamelCase letters and digits, at most {MAX_TYPE} bytes, for example \"KernelDeadlock\"",
            crate::shown(condition)
        )));
    }
    Ok(())
}

/// The effect of a taint tied to a condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, serde::Serialize)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    pub fn name(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

/// `taint-on = { effect = "NoSchedule" }`: while the condition is True, the
/// Node carries the taint `tend.dev/<type>` with this effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaintOn {
    pub effect: TaintEffect,
}

/// One condition type a plugin may report, and the taint tied to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    pub condition: String,
    pub taint_on: Option<TaintOn>,
}

impl Granted {
    /// The key of the taint tied to this condition.
    pub fn taint_key(&self) -> String {
        taint_key(&self.condition)
    }
}

pub fn taint_key(condition: &str) -> String {
    format!("{TAINT_PREFIX}{condition}")
}

impl<'de> Deserialize<'de> for Granted {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Type(String),
            Table(Table),
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields, rename_all = "kebab-case")]
        struct Table {
            condition: String,
            taint_on: Option<TaintOn>,
        }
        let granted = match Written::deserialize(d).map_err(|_| {
            D::Error::custom(
                "expected a condition type (\"KernelDeadlock\") or a table { condition = \"KernelDeadlock\", taint-on = { effect = \"NoSchedule\" } } (effect: NoSchedule, PreferNoSchedule or NoExecute)",
            )
        })? {
            Written::Type(condition) => Granted {
                condition,
                taint_on: None,
            },
            Written::Table(t) => Granted {
                condition: t.condition,
                taint_on: t.taint_on,
            },
        };
        check_type(&granted.condition).map_err(|r| D::Error::custom(r.message()))?;
        if KUBELET_TYPES.contains(&granted.condition.as_str()) {
            return Err(D::Error::custom(format!(
                "condition {:?} is the kubelet's: a plugin may report its own condition types only, never {}",
                granted.condition,
                KUBELET_TYPES.join(", ")
            )));
        }
        Ok(granted)
    }
}

/// `[plugins.<name>.grants] conditions`: the types the plugin owns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConditionsGrant(pub Vec<Granted>);

impl<'de> Deserialize<'de> for ConditionsGrant {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let granted = Vec::<Granted>::deserialize(d)?;
        if granted.len() > MAX_CONDITIONS {
            return Err(D::Error::custom(format!(
                "at most {MAX_CONDITIONS} condition types a plugin, not {}",
                granted.len()
            )));
        }
        for (at, g) in granted.iter().enumerate() {
            if granted[..at].iter().any(|o| o.condition == g.condition) {
                return Err(D::Error::custom(format!(
                    "condition {:?} is named twice",
                    g.condition
                )));
            }
        }
        Ok(ConditionsGrant(granted))
    }
}

impl ConditionsGrant {
    pub fn get(&self, condition: &str) -> Option<&Granted> {
        self.0.iter().find(|g| g.condition == condition)
    }
}

/// No two plugins own one condition type: `plugins` is every configured
/// plugin with its grant; the error names both.
pub fn owners<'a>(
    plugins: impl IntoIterator<Item = (&'a str, &'a ConditionsGrant)>,
) -> Result<(), String> {
    let mut seen: Vec<(&str, &str)> = vec![];
    for (plugin, grant) in plugins {
        for g in &grant.0 {
            if let Some((owner, _)) = seen.iter().find(|(_, c)| *c == g.condition) {
                return Err(format!(
                    "condition {:?} is granted to both {owner:?} and {plugin:?}: a condition type has one owner, grant it to one plugin",
                    g.condition
                ));
            }
            seen.push((plugin, &g.condition));
        }
    }
    Ok(())
}

/// Could any plugin report `condition`: its shape, and never the
/// kubelet's. The host also holds a book read back from disk to this, so
/// nothing but a reportable type is ever written or removed on the Node.
pub fn check_reportable(condition: &str) -> Result<(), Refusal> {
    check_type(condition)?;
    if KUBELET_TYPES.contains(&condition) {
        return Err(Refusal::Denied(format!(
            "condition {condition:?} is the kubelet's: no plugin may set it"
        )));
    }
    Ok(())
}

/// May a plugin with `grant` report `condition`? The type's shape first,
/// then the grant; the refusal names the grant to add.
pub fn check_condition<'g>(
    grant: &'g ConditionsGrant,
    condition: &str,
) -> Result<&'g Granted, Refusal> {
    check_reportable(condition)?;
    grant.get(condition).ok_or_else(|| {
        Refusal::Denied(format!(
            "condition {condition:?} is not granted: add it to [plugins.<name>.grants] conditions (a condition type has one owner)"
        ))
    })
}

/// A reason and message as a report may carry them.
pub fn check_note(reason: &str, message: &str) -> Result<(), Refusal> {
    if reason.len() > MAX_REASON || !camel(reason) {
        return Err(Refusal::Invalid(format!(
            "condition reason {:?}: expected CamelCase letters and digits, at most {MAX_REASON} bytes, for example \"TaskHung\"",
            crate::shown(reason)
        )));
    }
    if message.len() > MAX_MESSAGE {
        return Err(Refusal::Invalid(format!(
            "condition message: at most {MAX_MESSAGE} bytes, not {}",
            message.len()
        )));
    }
    Ok(())
}

/// A report's TTL: from 1 s to [`MAX_TTL_SECONDS`].
pub fn check_ttl(ttl_seconds: Option<u32>) -> Result<(), Refusal> {
    match ttl_seconds {
        Some(ttl) if ttl == 0 || ttl > MAX_TTL_SECONDS => Err(Refusal::Invalid(format!(
            "condition ttl-seconds {ttl}: expected 1 to {MAX_TTL_SECONDS} (a week), or none to hold until cleared"
        ))),
        _ => Ok(()),
    }
}

/// `list` needs a grant: a plugin granted no condition type holds none.
pub fn check_list(grant: &ConditionsGrant) -> Result<(), Refusal> {
    if grant.0.is_empty() {
        return Err(Refusal::Denied(
            "no condition types are granted, so none is held: add conditions = [\"<Type>\"] to [plugins.<name>.grants]".to_string(),
        ));
    }
    Ok(())
}

/// The message of a condition its TTL cleared (reason [`EXPIRED`]), saying
/// what it reported before: host and SDK fakes say it alike. At most
/// [`MAX_MESSAGE`] bytes, cut at a character boundary.
pub fn expired_message(ttl_seconds: u32, reason: &str, message: &str) -> String {
    let mut text = format!("not reported again within {ttl_seconds}s: was {reason}: {message}");
    text.truncate(text.floor_char_boundary(MAX_MESSAGE));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(text: &str) -> Result<ConditionsGrant, String> {
        #[derive(Deserialize)]
        struct Grants {
            conditions: ConditionsGrant,
        }
        toml::from_str::<Grants>(text)
            .map(|g| g.conditions)
            .map_err(|e| e.message().to_string())
    }

    #[test]
    fn a_grant_names_types_or_tables_with_a_taint() {
        let g = grant(
            r#"conditions = ["KernelDeadlock", { condition = "ReadonlyFilesystem", taint-on = { effect = "NoSchedule" } }]"#,
        )
        .unwrap();
        assert_eq!(g.0[0].taint_on, None);
        assert_eq!(
            g.0[1].taint_on,
            Some(TaintOn {
                effect: TaintEffect::NoSchedule
            })
        );
        assert_eq!(g.0[1].taint_key(), "tend.dev/ReadonlyFilesystem");
    }

    #[test]
    fn the_kubelets_types_bad_shapes_twins_and_bad_effects_are_refused() {
        assert!(
            grant(r#"conditions = ["Ready"]"#)
                .unwrap_err()
                .contains("kubelet")
        );
        assert!(grant(r#"conditions = ["MemoryPressure"]"#).is_err());
        assert!(
            grant(r#"conditions = ["kernel-deadlock"]"#)
                .unwrap_err()
                .contains("CamelCase")
        );
        assert!(grant(r#"conditions = ["A/B"]"#).is_err());
        assert!(grant(&format!(r#"conditions = ["{}"]"#, "A".repeat(64))).is_err());
        assert!(
            grant(r#"conditions = ["A", "A"]"#)
                .unwrap_err()
                .contains("twice")
        );
        let bad = grant(r#"conditions = [{ condition = "A", taint-on = { effect = "Evict" } }]"#)
            .unwrap_err();
        assert!(bad.contains("NoSchedule"), "{bad}");
        assert!(grant(r#"conditions = [{ condition = "A", taint = "x" }]"#).is_err());
    }

    #[test]
    fn a_type_has_one_owner() {
        let a = grant(r#"conditions = ["KernelDeadlock"]"#).unwrap();
        let b = grant(r#"conditions = ["KernelDeadlock"]"#).unwrap();
        let c = grant(r#"conditions = ["Other"]"#).unwrap();
        assert!(owners([("a", &a), ("c", &c)]).is_ok());
        let both = owners([("a", &a), ("b", &b)]).unwrap_err();
        assert!(both.contains("\"a\"") && both.contains("\"b\""), "{both}");
    }

    #[test]
    fn no_shape_escapes_into_a_kubelet_type_or_past_the_bounds() {
        for kubelet in KUBELET_TYPES {
            assert_eq!(check_reportable(kubelet).unwrap_err().kind(), "denied");
        }
        let long = "A".repeat(MAX_TYPE + 1);
        for shape in [
            "Ready ",
            " Ready",
            "Re\u{0430}dy",
            "Ready\u{200b}",
            "Ready\n",
            "Ready\u{0}",
            "Ready/status",
            long.as_str(),
            "",
        ] {
            assert_eq!(
                check_reportable(shape).unwrap_err().kind(),
                "invalid",
                "{shape:?}"
            );
        }
        assert!(check_reportable(&"A".repeat(MAX_TYPE)).is_ok());
        assert_eq!(
            check_note("Task\u{0}Hung", "").unwrap_err().kind(),
            "invalid"
        );
        assert!(check_note("A", &"\u{1F600}".repeat(MAX_MESSAGE / 4)).is_ok());
        assert!(check_note("A", &format!("x{}", "\u{1F600}".repeat(MAX_MESSAGE / 4))).is_err());
    }

    #[test]
    fn a_report_needs_its_type_granted_and_a_bounded_note() {
        let g = grant(r#"conditions = ["KernelDeadlock"]"#).unwrap();
        assert!(check_condition(&g, "KernelDeadlock").is_ok());
        let denied = check_condition(&g, "ReadonlyFilesystem").unwrap_err();
        assert_eq!(denied.kind(), "denied");
        assert!(denied.message().contains("grants] conditions"));
        assert_eq!(check_condition(&g, "Ready").unwrap_err().kind(), "denied");
        assert_eq!(check_condition(&g, "../x").unwrap_err().kind(), "invalid");
        assert!(check_note("TaskHung", "task blocked").is_ok());
        assert_eq!(check_note("task hung", "").unwrap_err().kind(), "invalid");
        assert_eq!(check_note("", "").unwrap_err().kind(), "invalid");
        assert!(check_note("A", &"x".repeat(MAX_MESSAGE + 1)).is_err());
        assert!(check_ttl(None).is_ok() && check_ttl(Some(60)).is_ok());
        assert!(check_ttl(Some(0)).is_err() && check_ttl(Some(MAX_TTL_SECONDS + 1)).is_err());
    }

    #[test]
    fn listing_needs_a_grant() {
        let denied = check_list(&ConditionsGrant::default()).unwrap_err();
        assert_eq!(denied.kind(), "denied");
        assert!(denied.message().contains("grants]"), "{denied:?}");
        let g = grant(r#"conditions = ["KernelDeadlock"]"#).unwrap();
        assert!(check_list(&g).is_ok());
    }

    #[test]
    fn an_expired_message_says_what_was_reported_within_the_bound() {
        assert_eq!(
            expired_message(60, "TaskHung", "task blocked"),
            "not reported again within 60s: was TaskHung: task blocked"
        );
        let long = expired_message(MAX_TTL_SECONDS, "A", &"é".repeat(MAX_MESSAGE));
        assert!(long.len() <= MAX_MESSAGE && long.len() > MAX_MESSAGE - 2);
        assert!(long.starts_with("not reported again within 604800s: was A: é"));
    }
}
