//! Which units and operations a plugin's systemd grant allows: pure, so every
//! rule is tested without a bus.
//!
//! `systemd = { units = ["kubelet.service", "tend-*.service"], operations =
//! ["restart", "daemon-reload"], watch = true }`: reads (status, list) need a
//! unit pattern; each mutating operation must also be listed.

use crate::Refusal;
use serde::{Deserialize, Deserializer, de::Error as _};

/// A mutating systemd operation, as a grant and a budget name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Operation {
    Start,
    Stop,
    Restart,
    ReloadOrRestart,
    TryRestart,
    ResetFailed,
    Enable,
    Disable,
    DaemonReload,
}

impl Operation {
    pub const ALL: [Operation; 9] = [
        Operation::Start,
        Operation::Stop,
        Operation::Restart,
        Operation::ReloadOrRestart,
        Operation::TryRestart,
        Operation::ResetFailed,
        Operation::Enable,
        Operation::Disable,
        Operation::DaemonReload,
    ];

    /// The name in grants, budgets and the journal: "reload-or-restart".
    pub fn name(self) -> &'static str {
        match self {
            Operation::Start => "start",
            Operation::Stop => "stop",
            Operation::Restart => "restart",
            Operation::ReloadOrRestart => "reload-or-restart",
            Operation::TryRestart => "try-restart",
            Operation::ResetFailed => "reset-failed",
            Operation::Enable => "enable",
            Operation::Disable => "disable",
            Operation::DaemonReload => "daemon-reload",
        }
    }
}

/// A unit name pattern: unit-name characters and `*` (any run of them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitPattern(pub String);

impl<'de> Deserialize<'de> for UnitPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if text.is_empty() || !text.chars().all(|c| c == '*' || is_unit_char(c)) {
            return Err(D::Error::custom(format!(
                "invalid unit pattern {text:?}: expected a unit name with `*` wildcards, for example \"tend-*.service\""
            )));
        }
        Ok(UnitPattern(text))
    }
}

fn is_unit_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, ':' | '_' | '.' | '\\' | '@' | '-')
}

/// `[plugins.<name>.grants] systemd`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SystemdGrant {
    #[serde(default)]
    pub units: Vec<UnitPattern>,
    #[serde(default)]
    pub operations: Vec<Operation>,
    /// Reconcile the plugin when one of its granted units changes active state.
    #[serde(default)]
    pub watch: bool,
}

/// Whether `pattern` (with `*` for any run of characters) matches all of `text`.
pub fn wildcard_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // Iterative matching with one backtrack point: linear in practice, never exponential.
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && p[pi] != '*' && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

impl SystemdGrant {
    pub fn covers(&self, unit: &str) -> bool {
        self.units.iter().any(|p| wildcard_match(&p.0, unit))
    }

    /// May `plugin` see `unit`, and perform `operation` on it?
    pub fn check(
        &self,
        plugin: &str,
        unit: &str,
        operation: Option<Operation>,
    ) -> Result<(), Refusal> {
        if unit.is_empty() || unit.len() > 256 || !unit.chars().all(is_unit_char) {
            return Err(Refusal::Invalid(format!(
                "{unit:?} is not a unit name: expected for example \"kubelet.service\""
            )));
        }
        let table = format!("[plugins.{plugin}.grants] systemd");
        if !self.covers(unit) {
            return Err(Refusal::Denied(format!(
                "no systemd grant covers unit {unit}: add \"{unit}\" to units in {table}"
            )));
        }
        self.check_operation(plugin, unit, operation)
    }

    /// May `plugin` perform `operation` (on `what`, for the message)?
    pub fn check_operation(
        &self,
        plugin: &str,
        what: &str,
        operation: Option<Operation>,
    ) -> Result<(), Refusal> {
        match operation {
            Some(op) if !self.operations.contains(&op) => Err(Refusal::Denied(format!(
                "systemd {} of {what} is not granted: add \"{}\" to operations in [plugins.{plugin}.grants] systemd",
                op.name(),
                op.name()
            ))),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(units: &[&str], operations: &[Operation]) -> SystemdGrant {
        SystemdGrant {
            units: units.iter().map(|u| UnitPattern(u.to_string())).collect(),
            operations: operations.to_vec(),
            watch: false,
        }
    }

    #[test]
    fn wildcards_match_runs_of_characters_and_nothing_more() {
        assert!(wildcard_match("tend-*.service", "tend-a.service"));
        assert!(wildcard_match("tend-*.service", "tend-.service"));
        assert!(!wildcard_match("tend-*.service", "tend-a.socket"));
        assert!(!wildcard_match("kubelet.service", "kubelet.service.d"));
        assert!(wildcard_match("*", "anything.service"));
        assert!(wildcard_match("a*b*c", "aXbYbZc"));
        assert!(!wildcard_match("a*b*c", "aXbYbZ"));
    }

    #[test]
    fn units_need_a_pattern_and_mutations_their_operation() {
        let g = grant(
            &["kubelet.service", "tend-*.service"],
            &[Operation::Restart],
        );
        assert!(g.check("p", "kubelet.service", None).is_ok());
        assert!(
            g.check("p", "kubelet.service", Some(Operation::Restart))
                .is_ok()
        );
        let err = g
            .check("p", "kubelet.service", Some(Operation::Stop))
            .unwrap_err();
        assert_eq!(
            err.message(),
            "systemd stop of kubelet.service is not granted: add \"stop\" to operations in [plugins.p.grants] systemd"
        );
        let err = g.check("p", "containerd.service", None).unwrap_err();
        assert!(
            err.message()
                .contains("add \"containerd.service\" to units"),
            "{err:?}"
        );
        let err = g.check("p", "../../etc/passwd", None).unwrap_err();
        assert_eq!(err.kind(), "invalid");
        assert!(
            SystemdGrant::default()
                .check("p", "kubelet.service", None)
                .is_err(),
            "deny by default"
        );
    }

    #[test]
    fn grants_parse_strictly() {
        let ok: SystemdGrant = serde_json::from_str(
            r#"{"units": ["a-*.service"], "operations": ["daemon-reload"], "watch": true}"#,
        )
        .unwrap();
        assert_eq!(ok.operations, [Operation::DaemonReload]);
        assert!(serde_json::from_str::<SystemdGrant>(r#"{"units": ["a b"]}"#).is_err());
        let err = serde_json::from_str::<SystemdGrant>(r#"{"operations": ["reboot"]}"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("daemon-reload"),
            "lists the known operations: {err}"
        );
    }
}
