//! An in-memory systemd for tests: scripted unit states, recorded actions,
//! injectable job failures, and a change feed.

use super::backend::{JobKind, JobResult, SystemdBackend, UnitChange, UnitStatus, job_outcome};
use crate::capabilities::error::CapError;
use crate::capabilities::gate::Permit;
use std::collections::BTreeMap;
use std::sync::Mutex;

#[derive(Default)]
pub struct FakeSystemd {
    units: Mutex<BTreeMap<String, UnitStatus>>,
    actions: Mutex<Vec<String>>,
    job_results: Mutex<BTreeMap<String, JobResult>>,
    failure: Mutex<Option<CapError>>,
    watchers: Mutex<Vec<tokio::sync::mpsc::Sender<UnitChange>>>,
}

impl FakeSystemd {
    /// Put a unit in `active_state`; watchers see the change.
    pub fn set_unit(&self, unit: &str, active_state: &str) {
        let status = UnitStatus {
            name: unit.to_string(),
            load_state: "loaded".into(),
            active_state: active_state.into(),
            sub_state: String::new(),
            ..UnitStatus::default()
        };
        self.units.lock().unwrap().insert(unit.to_string(), status);
        let change = UnitChange {
            unit: unit.to_string(),
            active_state: active_state.to_string(),
        };
        self.watchers
            .lock()
            .unwrap()
            .retain(|w| w.try_send(change.clone()).is_ok());
    }

    /// Every mutation performed, as "restart kubelet.service", "daemon-reload".
    pub fn actions(&self) -> Vec<String> {
        self.actions.lock().unwrap().clone()
    }

    /// Jobs on `unit` end with `result` from now on.
    pub fn job_result(&self, unit: &str, result: JobResult) {
        self.job_results.lock().unwrap().insert(unit.to_string(), result);
    }

    /// Fail every call with `error` (say, `unavailable`: the bus is gone) until cleared.
    pub fn fail_with(&self, error: Option<CapError>) {
        *self.failure.lock().unwrap() = error;
    }

    fn check(&self) -> Result<(), CapError> {
        match self.failure.lock().unwrap().clone() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    fn act(&self, action: String) -> Result<(), CapError> {
        self.check()?;
        self.actions.lock().unwrap().push(action);
        Ok(())
    }
}

#[async_trait::async_trait]
impl SystemdBackend for FakeSystemd {
    async fn status(&self, unit: &str) -> Result<UnitStatus, CapError> {
        self.check()?;
        Ok(self.units.lock().unwrap().get(unit).cloned().unwrap_or(UnitStatus {
            name: unit.to_string(),
            load_state: "not-found".into(),
            active_state: "inactive".into(),
            sub_state: "dead".into(),
            ..UnitStatus::default()
        }))
    }

    async fn list_units(&self) -> Result<Vec<UnitStatus>, CapError> {
        self.check()?;
        Ok(self.units.lock().unwrap().values().cloned().collect())
    }

    async fn job(&self, permit: Permit, kind: JobKind, unit: &str) -> Result<JobResult, CapError> {
        let result = self.act(format!("{} {unit}", kind.method())).map(|()| {
            let scripted = self.job_results.lock().unwrap().get(unit).copied();
            scripted.unwrap_or(JobResult::Done)
        });
        permit.finish(job_outcome(&result));
        result
    }

    async fn reset_failed(&self, permit: Permit, unit: &str) -> Result<(), CapError> {
        let result = self.act(format!("ResetFailedUnit {unit}"));
        permit.finish_with(&result);
        result
    }

    async fn enable(&self, permit: Permit, units: &[String]) -> Result<(), CapError> {
        let result = self.act(format!("EnableUnitFiles {}", units.join(" ")));
        permit.finish_with(&result);
        result
    }

    async fn disable(&self, permit: Permit, units: &[String]) -> Result<(), CapError> {
        let result = self.act(format!("DisableUnitFiles {}", units.join(" ")));
        permit.finish_with(&result);
        result
    }

    async fn daemon_reload(&self, permit: Permit) -> Result<(), CapError> {
        let result = self.act("Reload".to_string());
        permit.finish_with(&result);
        result
    }

    async fn changes(&self) -> Result<tokio::sync::mpsc::Receiver<UnitChange>, CapError> {
        self.check()?;
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        self.watchers.lock().unwrap().push(tx);
        Ok(rx)
    }
}
