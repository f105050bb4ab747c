//! Which units and operations a plugin's systemd grant allows: pure, so every
//! rule is tested without a bus.
//!
//! `systemd = { units = ["kubelet.service", "tend-*.service"], operations =
//! ["restart", "daemon-reload"], watch = true }`: reads (status, list) need a
//! unit pattern; each mutating operation must also be listed.
//!
//! Enabling or disabling a unit file makes or removes links its `[Install]`
//! section chooses (`WantedBy=`, `Alias=`, `Also=`): [`SystemdGrant::check_links`]
//! holds every link systemd reports (or would remove) to the grant too, by the
//! unit each link names.

pub mod install;

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
        MUTATIONS[self as usize]
    }
}

/// Every function of the WIT `systemd` interface, by its WIT name: the two
/// reads, then each [`Operation`] in [`Operation::ALL`]'s order.
pub const CALLS: [&str; 11] = crate::wit::systemd::FUNCTIONS;

/// The mutating functions: the names of [`Operation::ALL`].
pub const MUTATIONS: &[&str] = CALLS.split_at(2).1;

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

/// The unit a link made or removed by enable or disable names: the link's
/// file name ("/etc/systemd/system/multi-user.target.wants/kubelet.service"
/// names kubelet.service, an `Alias=` link its alias).
pub fn linked_unit(link: &str) -> &str {
    link.rsplit('/').next().unwrap_or(link)
}

/// The unit a dependency link attaches to, and how strongly: a link in
/// "/etc/systemd/system/kubelet.service.requires/" makes kubelet.service
/// require the linked unit (`RequiredBy=` in its `[Install]`), so stopping
/// the linked unit stops kubelet. None for an `Alias=` link.
pub fn link_owner(link: &str) -> Option<(&str, &'static str)> {
    let dir = link.rsplit('/').nth(1)?;
    [".wants", ".requires", ".upholds"]
        .into_iter()
        .find_map(|kind| dir.strip_suffix(kind).map(|owner| (owner, kind)))
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

    /// May `plugin`'s `operation` (enable or disable) of `units` make or
    /// remove `links` (paths, as systemd reports them)? Each link's unit
    /// ([`linked_unit`]) must be covered by the grant; the refusal names the
    /// first one that is not, and the grant to add.
    pub fn check_links<'a>(
        &self,
        plugin: &str,
        operation: Operation,
        units: &[String],
        links: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), Refusal> {
        let verb = if operation == Operation::Disable {
            "remove"
        } else {
            "link"
        };
        let units = crate::shown(&units.join(" ")).into_owned();
        let refuse = |link: &str, why: String, add: &str| {
            Refusal::Denied(format!(
                "systemd {} of {units} would {verb} {link}, {why}: add \"{}\" to units in [plugins.{plugin}.grants] systemd",
                operation.name(),
                crate::shown(add),
            ))
        };
        for link in links {
            let unit = linked_unit(link);
            // A dependency of a unit the grant does not cover ties that unit
            // to this one: `RequiredBy=kubelet.service` makes a granted stop
            // stop kubelet too. Only a target may merely want a granted unit
            // (`WantedBy=multi-user.target`, the ordinary install).
            if let Some((owner, kind)) = link_owner(link)
                && !self.covers(owner)
                && !(kind == ".wants" && owner.ends_with(".target"))
            {
                let by = match kind {
                    ".wants" => "Wanted",
                    ".requires" => "Required",
                    _ => "Upheld",
                };
                return Err(refuse(
                    link,
                    format!(
                        "a dependency of {} ({by}By= in the [Install] section), which no systemd grant covers (only targets may want a granted unit)",
                        crate::shown(owner)
                    ),
                    owner,
                ));
            }
            if !self.covers(unit) {
                return Err(refuse(
                    link,
                    format!(
                        "unit {}, which no systemd grant covers (the [Install] section names it: WantedBy=, Alias= or Also=)",
                        crate::shown(unit)
                    ),
                    unit,
                ));
            }
        }
        Ok(())
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

/// Unit names or patterns one call may pass: matching them is host CPU time
/// the plugin's deadline cannot interrupt, so it is bounded.
pub const MAX_NAMES: usize = 256;
/// Bytes of each name or pattern (systemd's own unit names stop at 255).
pub const MAX_NAME_LEN: usize = 256;

/// The bound on the names of one call (`list-units`, `enable`, `disable`),
/// checked before any grant: `what` names the call.
pub fn check_names(what: &str, names: &[impl AsRef<str>]) -> Result<(), Refusal> {
    if names.len() > MAX_NAMES || names.iter().any(|n| n.as_ref().len() > MAX_NAME_LEN) {
        return Err(Refusal::Invalid(format!(
            "{what}: at most {MAX_NAMES} names of at most {MAX_NAME_LEN} bytes per call; split the call"
        )));
    }
    Ok(())
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
    fn each_operation_is_named_as_grants_spell_it() {
        for operation in Operation::ALL {
            let parsed: Operation =
                serde_json::from_value(serde_json::json!(operation.name())).unwrap();
            assert_eq!(parsed, operation);
        }
        assert_eq!(MUTATIONS.len(), Operation::ALL.len());
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
    fn every_link_of_an_enable_or_disable_names_a_granted_unit() {
        let g = grant(&["tend-*.service", "peer.target"], &[Operation::Enable]);
        let units = vec!["tend-a.service".to_string()];
        let own = "/etc/systemd/system/peer.target.wants/tend-a.service";
        assert_eq!(linked_unit(own), "tend-a.service");
        assert!(g.check_links("p", Operation::Enable, &units, [own]).is_ok());
        let err = g
            .check_links(
                "p",
                Operation::Enable,
                &units,
                [own, "/etc/systemd/system/kubelet.service"],
            )
            .unwrap_err();
        assert_eq!(err.kind(), "denied");
        assert_eq!(
            err.message(),
            "systemd enable of tend-a.service would link /etc/systemd/system/kubelet.service, unit kubelet.service, which no systemd grant covers (the [Install] section names it: WantedBy=, Alias= or Also=): add \"kubelet.service\" to units in [plugins.p.grants] systemd"
        );
        let err = g
            .check_links(
                "p",
                Operation::Disable,
                &units,
                ["/etc/systemd/system/peer.target.wants/victim.service"],
            )
            .unwrap_err();
        assert!(err.message().contains("would remove /etc/systemd/system/peer.target.wants/victim.service, unit victim.service"), "{err}");
    }

    #[test]
    fn a_granted_unit_cannot_become_a_dependency_of_an_ungranted_one() {
        let g = grant(&["tend-*.service"], &[Operation::Enable]);
        let units = vec!["tend-a.service".to_string()];
        let ordinary = "/etc/systemd/system/multi-user.target.wants/tend-a.service";
        assert_eq!(link_owner(ordinary), Some(("multi-user.target", ".wants")));
        assert!(
            g.check_links("p", Operation::Enable, &units, [ordinary])
                .is_ok()
        );
        let sibling = "/etc/systemd/system/tend-b.service.requires/tend-a.service";
        assert!(
            g.check_links("p", Operation::Enable, &units, [sibling])
                .is_ok()
        );
        for link in [
            "/etc/systemd/system/kubelet.service.requires/tend-a.service",
            "/etc/systemd/system/kubelet.service.upholds/tend-a.service",
            "/etc/systemd/system/kubelet.service.wants/tend-a.service",
            "/etc/systemd/system/kubelet.socket.requires/tend-a.service",
        ] {
            let err = g
                .check_links("p", Operation::Enable, &units, [link])
                .unwrap_err();
            assert_eq!(err.kind(), "denied", "{link}");
            assert!(err.message().contains("a dependency of kubelet."), "{err}");
        }
        let err = g
            .check_links(
                "p",
                Operation::Disable,
                &units,
                ["/etc/systemd/system/kubelet.service.requires/tend-a.service"],
            )
            .unwrap_err();
        assert!(
            err.message()
                .starts_with("systemd disable of tend-a.service would remove"),
            "{err}"
        );
        assert_eq!(link_owner("/etc/systemd/system/tend-alias.service"), None);
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

    #[test]
    fn names_per_call_are_bounded_in_count_and_length() {
        let long = "a".repeat(MAX_NAME_LEN);
        assert!(check_names("enable", &vec![long.as_str(); MAX_NAMES]).is_ok());
        let err = check_names("enable", &vec!["a"; MAX_NAMES + 1]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid: enable: at most 256 names of at most 256 bytes per call; split the call"
        );
        assert!(check_names("list-units", &[format!("{long}x")]).is_err());
    }
}
