//! `tend:plugin/systemd`: units on the node, within the unit patterns and
//! operations granted to the plugin.

use crate::{Error, NotProvided, Result};
use std::cell::RefCell;
use std::collections::BTreeMap;
use tend_rules::systemd::{Operation, SystemdGrant, wildcard_match};

/// The WIT records themselves: the host answers with these very types.
pub use crate::bindings::tend::plugin::systemd::{JobResult, UnitStatus};

/// systemd, within the plugin's grant. Job calls wait for the job to finish.
pub trait Systemd {
    fn status(&self, unit: &str) -> Result<UnitStatus>;
    fn list_units(&self, patterns: &[&str]) -> Result<Vec<UnitStatus>>;
    fn start(&self, unit: &str) -> Result<JobResult>;
    fn stop(&self, unit: &str) -> Result<JobResult>;
    fn restart(&self, unit: &str) -> Result<JobResult>;
    fn reload_or_restart(&self, unit: &str) -> Result<JobResult>;
    fn try_restart(&self, unit: &str) -> Result<JobResult>;
    fn reset_failed(&self, unit: &str) -> Result<()>;
    /// Enable unit files (never forced: an existing link is not replaced).
    /// Every link systemd makes, by its `[Install]` section (`WantedBy=`,
    /// `Alias=`, `Also=`), must name a granted unit: otherwise the host rolls
    /// the enable back and answers `denied`, naming the unit to grant.
    fn enable(&self, units: &[&str]) -> Result<()>;
    /// Disable unit files; refused (`denied`) before anything is removed when
    /// it would remove a link naming an ungranted unit (`Also=`).
    fn disable(&self, units: &[&str]) -> Result<()>;
    /// Reload systemd's unit files: at most once per reconcile (a second is
    /// `budget-exhausted`), so write every unit file first.
    fn daemon_reload(&self) -> Result<()>;
}

impl Systemd for NotProvided {
    fn status(&self, _: &str) -> Result<UnitStatus> {
        Err(NotProvided::denied("systemd"))
    }
    fn list_units(&self, _: &[&str]) -> Result<Vec<UnitStatus>> {
        Err(NotProvided::denied("systemd"))
    }
    fn start(&self, _: &str) -> Result<JobResult> {
        Err(NotProvided::denied("systemd"))
    }
    fn stop(&self, _: &str) -> Result<JobResult> {
        Err(NotProvided::denied("systemd"))
    }
    fn restart(&self, _: &str) -> Result<JobResult> {
        Err(NotProvided::denied("systemd"))
    }
    fn reload_or_restart(&self, _: &str) -> Result<JobResult> {
        Err(NotProvided::denied("systemd"))
    }
    fn try_restart(&self, _: &str) -> Result<JobResult> {
        Err(NotProvided::denied("systemd"))
    }
    fn reset_failed(&self, _: &str) -> Result<()> {
        Err(NotProvided::denied("systemd"))
    }
    fn enable(&self, _: &[&str]) -> Result<()> {
        Err(NotProvided::denied("systemd"))
    }
    fn disable(&self, _: &[&str]) -> Result<()> {
        Err(NotProvided::denied("systemd"))
    }
    fn daemon_reload(&self) -> Result<()> {
        Err(NotProvided::denied("systemd"))
    }
}

/// The wasm glue: the host's `systemd` import.
#[cfg(target_arch = "wasm32")]
pub(crate) mod wasm {
    use super::{JobResult, UnitStatus};
    use crate::Result;
    use crate::bindings::tend::plugin::systemd as wit;
    use crate::types::from_wit_error;

    pub(crate) struct WasmSystemd;

    fn owned(units: &[&str]) -> Vec<String> {
        units.iter().map(|u| u.to_string()).collect()
    }

    impl crate::Systemd for WasmSystemd {
        fn status(&self, unit: &str) -> Result<UnitStatus> {
            wit::status(unit).map_err(from_wit_error)
        }
        fn list_units(&self, patterns: &[&str]) -> Result<Vec<UnitStatus>> {
            wit::list_units(&owned(patterns)).map_err(from_wit_error)
        }
        fn start(&self, unit: &str) -> Result<JobResult> {
            wit::start(unit).map_err(from_wit_error)
        }
        fn stop(&self, unit: &str) -> Result<JobResult> {
            wit::stop(unit).map_err(from_wit_error)
        }
        fn restart(&self, unit: &str) -> Result<JobResult> {
            wit::restart(unit).map_err(from_wit_error)
        }
        fn reload_or_restart(&self, unit: &str) -> Result<JobResult> {
            wit::reload_or_restart(unit).map_err(from_wit_error)
        }
        fn try_restart(&self, unit: &str) -> Result<JobResult> {
            wit::try_restart(unit).map_err(from_wit_error)
        }
        fn reset_failed(&self, unit: &str) -> Result<()> {
            wit::reset_failed(unit).map_err(from_wit_error)
        }
        fn enable(&self, units: &[&str]) -> Result<()> {
            wit::enable(&owned(units)).map_err(from_wit_error)
        }
        fn disable(&self, units: &[&str]) -> Result<()> {
            wit::disable(&owned(units)).map_err(from_wit_error)
        }
        fn daemon_reload(&self) -> Result<()> {
            wit::daemon_reload().map_err(from_wit_error)
        }
    }
}

/// The fake: scripted units behind the host's grant rules (nothing granted
/// until [`FakeSystemd::grant`]), recorded actions ("restart kubelet.service",
/// "daemon-reload"), scripted job results and failures.
pub struct FakeSystemd {
    plugin: String,
    grant: RefCell<SystemdGrant>,
    units: RefCell<BTreeMap<String, UnitStatus>>,
    actions: RefCell<Vec<String>>,
    job_results: RefCell<BTreeMap<String, JobResult>>,
    failure: RefCell<Option<Error>>,
}

impl crate::fake::Fake for FakeSystemd {
    fn for_plugin(plugin: &str) -> Self {
        FakeSystemd::new(plugin)
    }
}

impl Default for FakeSystemd {
    /// For a plugin named "test".
    fn default() -> Self {
        FakeSystemd::new("test")
    }
}

impl FakeSystemd {
    pub fn new(plugin: &str) -> Self {
        FakeSystemd {
            plugin: plugin.to_string(),
            grant: RefCell::default(),
            units: RefCell::default(),
            actions: RefCell::default(),
            job_results: RefCell::default(),
            failure: RefCell::default(),
        }
    }

    /// Grant units matching `patterns` and `operations` ("restart",
    /// "daemon-reload", ...), as `[plugins.NAME.grants] systemd` would.
    pub fn grant(&self, patterns: &[&str], operations: &[&str]) -> &Self {
        let text = serde_json::json!({ "units": patterns, "operations": operations });
        let grant: SystemdGrant =
            serde_json::from_value(text).unwrap_or_else(|e| panic!("FakeSystemd::grant: {e}"));
        self.extend_grant(&grant)
    }

    /// Add what `grant` grants (a grant already parsed, as the conformance
    /// table and the other languages' fakes hold them).
    pub fn extend_grant(&self, grant: &SystemdGrant) -> &Self {
        let mut current = self.grant.borrow_mut();
        current.units.extend(grant.units.iter().cloned());
        current.operations.extend(grant.operations.iter().copied());
        self
    }

    /// Put `unit` in `active_state` (loaded), keeping its other fields.
    pub fn set_unit(&self, unit: &str, active_state: &str) -> &Self {
        let mut units = self.units.borrow_mut();
        let status = units.entry(unit.to_string()).or_insert_with(|| UnitStatus {
            name: unit.to_string(),
            load_state: "loaded".into(),
            ..UnitStatus::default()
        });
        status.active_state = active_state.to_string();
        self
    }

    /// Replace a unit's whole status.
    pub fn put_unit(&self, status: UnitStatus) -> &Self {
        self.units.borrow_mut().insert(status.name.clone(), status);
        self
    }

    /// Jobs on `unit` end with `result` from now on.
    pub fn job_result(&self, unit: &str, result: JobResult) -> &Self {
        self.job_results
            .borrow_mut()
            .insert(unit.to_string(), result);
        self
    }

    /// Every call fails with `error` (say, `unavailable`) until cleared with None.
    pub fn fail_with(&self, error: Option<Error>) -> &Self {
        *self.failure.borrow_mut() = error;
        self
    }

    /// Every mutation performed, in order: "restart kubelet.service", "daemon-reload".
    pub fn actions(&self) -> Vec<String> {
        self.actions.borrow().clone()
    }

    fn check(&self, unit: &str, operation: Option<Operation>) -> Result<()> {
        if let Some(error) = self.failure.borrow().clone() {
            return Err(error);
        }
        self.grant
            .borrow()
            .check(&self.plugin, unit, operation)
            .map_err(crate::Error::from)
    }

    fn job(&self, operation: Operation, unit: &str) -> Result<JobResult> {
        self.check(unit, Some(operation))?;
        self.actions
            .borrow_mut()
            .push(format!("{} {unit}", operation.name()));
        let result = self
            .job_results
            .borrow()
            .get(unit)
            .copied()
            .unwrap_or(JobResult::Done);
        // A started unit is active; a stopped one inactive (unless a job failed).
        if result == JobResult::Done {
            let state = if operation == Operation::Stop {
                "inactive"
            } else {
                "active"
            };
            self.set_unit(unit, state);
        }
        Ok(result)
    }

    fn unit_files(&self, operation: Operation, units: &[&str]) -> Result<()> {
        tend_rules::systemd::check_names(operation.name(), units).map_err(crate::Error::from)?;
        for unit in units {
            self.check(unit, Some(operation))?;
        }
        self.actions
            .borrow_mut()
            .push(format!("{} {}", operation.name(), units.join(" ")));
        let state = if operation == Operation::Enable {
            "enabled"
        } else {
            "disabled"
        };
        for unit in units {
            if let Some(status) = self.units.borrow_mut().get_mut(*unit) {
                status.unit_file_state = state.to_string();
            }
        }
        Ok(())
    }
}

impl Systemd for FakeSystemd {
    fn status(&self, unit: &str) -> Result<UnitStatus> {
        self.check(unit, None)?;
        Ok(self
            .units
            .borrow()
            .get(unit)
            .cloned()
            .unwrap_or(UnitStatus {
                name: unit.to_string(),
                load_state: "not-found".into(),
                active_state: "inactive".into(),
                sub_state: "dead".into(),
                ..UnitStatus::default()
            }))
    }
    fn list_units(&self, patterns: &[&str]) -> Result<Vec<UnitStatus>> {
        tend_rules::systemd::check_names("list-units", patterns).map_err(crate::Error::from)?;
        if let Some(error) = self.failure.borrow().clone() {
            return Err(error);
        }
        let grant = self.grant.borrow();
        Ok(self
            .units
            .borrow()
            .values()
            .filter(|u| {
                patterns.iter().any(|p| wildcard_match(p, &u.name)) && grant.covers(&u.name)
            })
            .cloned()
            .collect())
    }
    fn start(&self, unit: &str) -> Result<JobResult> {
        self.job(Operation::Start, unit)
    }
    fn stop(&self, unit: &str) -> Result<JobResult> {
        self.job(Operation::Stop, unit)
    }
    fn restart(&self, unit: &str) -> Result<JobResult> {
        self.job(Operation::Restart, unit)
    }
    fn reload_or_restart(&self, unit: &str) -> Result<JobResult> {
        self.job(Operation::ReloadOrRestart, unit)
    }
    fn try_restart(&self, unit: &str) -> Result<JobResult> {
        self.job(Operation::TryRestart, unit)
    }
    fn reset_failed(&self, unit: &str) -> Result<()> {
        self.check(unit, Some(Operation::ResetFailed))?;
        self.actions
            .borrow_mut()
            .push(format!("reset-failed {unit}"));
        Ok(())
    }
    fn enable(&self, units: &[&str]) -> Result<()> {
        self.unit_files(Operation::Enable, units)
    }
    fn disable(&self, units: &[&str]) -> Result<()> {
        self.unit_files(Operation::Disable, units)
    }
    fn daemon_reload(&self) -> Result<()> {
        if let Some(error) = self.failure.borrow().clone() {
            return Err(error);
        }
        self.grant
            .borrow()
            .check_operation(
                &self.plugin,
                "the unit files",
                Some(Operation::DaemonReload),
            )
            .map_err(crate::Error::from)?;
        self.actions.borrow_mut().push("daemon-reload".to_string());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ungranted_units_and_operations_are_denied_like_the_host() {
        let systemd = FakeSystemd::new("doctor");
        let err = systemd.restart("kubelet.service").unwrap_err();
        assert_eq!(
            err,
            Error::Denied("no systemd grant covers unit kubelet.service: add \"kubelet.service\" to units in [plugins.doctor.grants] systemd".into())
        );
        systemd.grant(&["kubelet.service"], &["restart"]);
        assert_eq!(systemd.restart("kubelet.service").unwrap(), JobResult::Done);
        assert_eq!(
            systemd.stop("kubelet.service").unwrap_err().kind(),
            "denied"
        );
        assert_eq!(systemd.daemon_reload().unwrap_err().kind(), "denied");
        assert_eq!(systemd.actions(), ["restart kubelet.service"]);
        assert_eq!(
            systemd.status("kubelet.service").unwrap().active_state,
            "active"
        );
    }

    #[test]
    fn jobs_can_fail_and_the_bus_can_go_away() {
        let systemd = FakeSystemd::default();
        systemd
            .grant(&["a.service"], &["start"])
            .job_result("a.service", JobResult::Failed);
        assert_eq!(systemd.start("a.service").unwrap(), JobResult::Failed);
        systemd.fail_with(Some(Error::Unavailable("bus gone".into())));
        assert_eq!(
            systemd.status("a.service").unwrap_err().kind(),
            "unavailable"
        );
    }
}
