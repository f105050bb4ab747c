//! An in-memory systemd for tests: scripted unit states, recorded actions,
//! injectable job failures, a change feed, and unit-file links made by enable
//! as each unit's scripted `[Install]` section says.

use super::backend::{
    JobKind, JobResult, SystemdBackend, UnitChange, UnitFileChange, UnitStatus, listed_unit,
};
use super::grants::Operation;
use crate::capabilities::error::CapError;
use crate::capabilities::fakes::FakeLedger;
use crate::capabilities::gate::Permit;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

/// Where the fake's enable links live.
const CONFIG: &str = "/etc/systemd/system";

#[derive(Default)]
pub struct FakeSystemd {
    units: Mutex<BTreeMap<String, UnitStatus>>,
    ledger: FakeLedger,
    job_results: Mutex<BTreeMap<String, JobResult>>,
    watchers: Mutex<Vec<tokio::sync::mpsc::Sender<UnitChange>>>,
    /// The links enabling each unit makes, when scripted.
    installs: Mutex<BTreeMap<String, Vec<String>>>,
    /// Links present now.
    links: Mutex<BTreeSet<String>>,
    /// Each unit's file, when scripted.
    files: Mutex<BTreeMap<String, String>>,
}

impl FakeSystemd {
    /// Put a unit in `active_state`; watchers see the change.
    pub fn set_unit(&self, unit: &str, active_state: &str) {
        let status = listed_unit(unit, "loaded", active_state, "");
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

    /// Enabling `unit` makes `links` (file names under /etc/systemd/system:
    /// "multi-user.target.wants/tend-a.service", "alias.service"), as its
    /// `[Install]` section would; by default the unit's own link in
    /// multi-user.target.wants.
    pub fn install(&self, unit: &str, links: &[&str]) {
        let links = links.iter().map(|l| format!("{CONFIG}/{l}")).collect();
        self.installs
            .lock()
            .unwrap()
            .insert(unit.to_string(), links);
    }

    /// `unit`'s unit file says `text`; unscripted, it says
    /// `WantedBy=multi-user.target`, whatever [`FakeSystemd::install`] makes
    /// the enable do (a file changed between the plan and the enable).
    pub fn unit_file(&self, unit: &str, text: &str) {
        self.files
            .lock()
            .unwrap()
            .insert(unit.to_string(), text.to_string());
    }

    /// A link that exists already (made by someone else).
    pub fn add_link(&self, link: &str) {
        self.links
            .lock()
            .unwrap()
            .insert(format!("{CONFIG}/{link}"));
    }

    /// The links present, as paths.
    pub fn links(&self) -> Vec<String> {
        self.links.lock().unwrap().iter().cloned().collect()
    }

    fn install_links(&self, unit: &str) -> Vec<String> {
        let installs = self.installs.lock().unwrap();
        installs
            .get(unit)
            .cloned()
            .unwrap_or_else(|| vec![format!("{CONFIG}/multi-user.target.wants/{unit}")])
    }

    /// Every mutation performed, as "restart kubelet.service", "daemon-reload".
    pub fn actions(&self) -> Vec<String> {
        self.ledger.actions()
    }

    /// Jobs on `unit` end with `result` from now on.
    pub fn job_result(&self, unit: &str, result: JobResult) {
        self.job_results
            .lock()
            .unwrap()
            .insert(unit.to_string(), result);
    }

    /// Fail every call with `error` (say, `unavailable`: the bus is gone) until cleared.
    pub fn fail_with(&self, error: Option<CapError>) {
        self.ledger.fail_with(error);
    }
}

#[async_trait::async_trait]
impl SystemdBackend for FakeSystemd {
    async fn status(&self, unit: &str) -> Result<UnitStatus, CapError> {
        self.ledger.check()?;
        Ok(self
            .units
            .lock()
            .unwrap()
            .get(unit)
            .cloned()
            .unwrap_or_else(|| listed_unit(unit, "not-found", "inactive", "dead")))
    }

    async fn list_units(&self) -> Result<Vec<UnitStatus>, CapError> {
        self.ledger.check()?;
        Ok(self.units.lock().unwrap().values().cloned().collect())
    }

    async fn job(&self, _: Permit, kind: JobKind, unit: &str) -> Result<JobResult, CapError> {
        self.ledger.act(kind.operation().name(), unit).map(|()| {
            let scripted = self.job_results.lock().unwrap().get(unit).copied();
            scripted.unwrap_or(JobResult::Done)
        })
    }

    async fn reset_failed(&self, _: Permit, unit: &str) -> Result<(), CapError> {
        self.ledger.act(Operation::ResetFailed.name(), unit)
    }

    async fn unit_file_links(&self, unit: &str) -> Result<Vec<String>, CapError> {
        self.ledger.check()?;
        let links = self.links.lock().unwrap();
        Ok(self
            .install_links(unit)
            .into_iter()
            .filter(|l| links.contains(l))
            .collect())
    }

    async fn unit_file(&self, unit: &str) -> Result<String, CapError> {
        self.ledger.check()?;
        let files = self.files.lock().unwrap();
        Ok(files
            .get(unit)
            .cloned()
            .unwrap_or_else(|| "[Install]\nWantedBy=multi-user.target\n".to_string()))
    }

    /// Like systemd without force: the links not there yet are made; one that
    /// exists already is left alone (a real conflict is systemd's error).
    async fn enable(&self, units: &[String]) -> Result<Vec<UnitFileChange>, CapError> {
        self.ledger
            .act(Operation::Enable.name(), &units.join(" "))?;
        let mut links = self.links.lock().unwrap();
        let mut changes = vec![];
        for unit in units {
            for link in self.install_links(unit) {
                if links.insert(link.clone()) {
                    changes.push(UnitFileChange {
                        kind: "symlink".into(),
                        path: link,
                        destination: format!("/lib/systemd/system/{unit}"),
                    });
                }
            }
        }
        Ok(changes)
    }

    async fn disable(&self, units: &[String]) -> Result<Vec<UnitFileChange>, CapError> {
        self.ledger
            .act(Operation::Disable.name(), &units.join(" "))?;
        let mut links = self.links.lock().unwrap();
        let mut changes = vec![];
        for unit in units {
            for link in self.install_links(unit) {
                if links.remove(&link) {
                    changes.push(UnitFileChange {
                        kind: "unlink".into(),
                        path: link,
                        destination: String::new(),
                    });
                }
            }
        }
        Ok(changes)
    }

    async fn daemon_reload(&self, _: Permit) -> Result<(), CapError> {
        self.ledger.act(Operation::DaemonReload.name(), "")
    }

    async fn changes(&self) -> Result<tokio::sync::mpsc::Receiver<UnitChange>, CapError> {
        self.ledger.check()?;
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        self.watchers.lock().unwrap().push(tx);
        Ok(rx)
    }
}
