//! Why a reconcile runs: the trigger kinds, as named constants. Every kind is
//! documented in `wit/types.wit`; plugins ignore kinds they do not know.

/// Once, when the plugin is first scheduled.
pub const STARTUP: &str = "startup";
/// Its `interval` passed.
pub const INTERVAL: &str = "interval";
/// It asked to run again (`requeue-after` in its outcome).
pub const REQUEUE: &str = "requeue";
/// A file under one of its `watch` paths changed; the subject is the path.
pub const FILE: &str = "file";
/// An object it watches (a kube grant with the `watch` verb) was added,
/// changed or deleted; the subject is "<resource>/<namespace>/<name>" (no
/// namespace part for cluster-scoped objects; the kube capability's trigger
/// source sends it).
pub use crate::capabilities::kube::KUBE_TRIGGER as KUBE;
/// One of its granted, watched units changed active state; the subject is
/// the unit (the systemd capability's trigger source sends it).
pub use crate::capabilities::systemd::UNIT_TRIGGER as UNIT;
/// This host started leading (holds the cluster's Lease): cluster-scope plugins run.
pub const LEADER: &str = "leader";
/// A new version of its component was swapped in.
pub const RELOAD: &str = "reload";
/// Its settings changed in the config.
pub const CONFIG: &str = "config";
/// An operator asked (`tend reconcile`, `tend plan`).
pub const MANUAL: &str = "manual";

/// Why a reconcile runs: the WIT's `trigger` with what the scheduler needs
/// of it (ordered and hashed to coalesce pending triggers, serialized into
/// the journal), handed to the plugin through the one conversion below.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Trigger {
    pub kind: String,
    pub subject: Option<String>,
}

impl From<&Trigger> for crate::wit::types::Trigger {
    fn from(trigger: &Trigger) -> Self {
        crate::wit::types::Trigger {
            kind: trigger.kind.clone(),
            subject: trigger.subject.clone(),
        }
    }
}

impl Trigger {
    pub fn new(kind: &str) -> Self {
        Trigger {
            kind: kind.to_string(),
            subject: None,
        }
    }

    pub fn with_subject(kind: &str, subject: String) -> Self {
        Trigger {
            kind: kind.to_string(),
            subject: Some(subject),
        }
    }
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.subject {
            Some(subject) => write!(f, "{}:{subject}", self.kind),
            None => f.write_str(&self.kind),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trigger_reaches_the_plugin_as_the_wits_record() {
        let unit =
            crate::wit::types::Trigger::from(&Trigger::with_subject(UNIT, "a.service".into()));
        assert_eq!(
            (unit.kind.as_str(), unit.subject.as_deref()),
            (UNIT, Some("a.service"))
        );
        let manual = crate::wit::types::Trigger::from(&Trigger::new(MANUAL));
        assert_eq!((manual.kind.as_str(), manual.subject), (MANUAL, None));
    }
}
