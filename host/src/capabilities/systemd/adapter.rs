//! The `systemd` adapter of one reconcile: every unit is checked against the
//! plugin's grant (patterns and operations); every mutation passes the gate.

use super::backend::{JobKind, JobResult, SystemdBackend, UnitStatus};
use super::fake::FakeSystemd;
use super::grants::{Operation, SystemdGrant, check, check_operation, wildcard_match};
use super::real::RealSystemd;
use crate::capabilities::call::Call;
use crate::capabilities::capability::{BackendEnv, Capability};
use crate::capabilities::error::CapError;
use crate::capabilities::gate::{Admission, Intent, Permit};
use serde::Deserialize;
use std::sync::Arc;

/// `[host.systemd]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SystemdSettings {
    /// A D-Bus address ("unix:path=/run/dbus/system_bus_socket"); the system bus when absent.
    pub bus: Option<String>,
}

pub struct PluginSystemd {
    backend: Arc<dyn SystemdBackend>,
    grant: SystemdGrant,
    pub(super) call: Arc<Call>,
}

/// Unit names or patterns one call may pass: matching is host CPU time that
/// the plugin's deadline cannot interrupt, so it is bounded.
const MAX_NAMES: usize = 256;

fn bounded(what: &str, names: &[impl AsRef<str>]) -> Result<(), CapError> {
    if names.len() > MAX_NAMES || names.iter().any(|n| n.as_ref().len() > 256) {
        return Err(CapError::Invalid(format!(
            "{what}: at most {MAX_NAMES} names of at most 256 bytes per call; split the call"
        )));
    }
    Ok(())
}

const MUTATIONS: [&str; 9] = [
    "start",
    "stop",
    "restart",
    "reload-or-restart",
    "try-restart",
    "reset-failed",
    "enable",
    "disable",
    "daemon-reload",
];

impl Capability for PluginSystemd {
    const NAME: &'static str = "systemd";
    const MUTATIONS: &'static [&'static str] = &MUTATIONS;
    type Grant = SystemdGrant;
    type Settings = SystemdSettings;
    type Backend = dyn SystemdBackend;
    type Fake = FakeSystemd;

    fn describe_grant(grant: &SystemdGrant) -> Vec<String> {
        if grant.units.is_empty() {
            return vec![];
        }
        let units: Vec<&str> = grant.units.iter().map(|u| u.0.as_str()).collect();
        let operations: Vec<&str> = grant.operations.iter().map(|o| o.name()).collect();
        vec![format!(
            "units {} (operations: {}{})",
            units.join(", "),
            if operations.is_empty() { "none".to_string() } else { operations.join(", ") },
            if grant.watch { "; watched" } else { "" }
        )]
    }

    fn real(settings: &SystemdSettings, _: &BackendEnv) -> anyhow::Result<Arc<dyn SystemdBackend>> {
        Ok(Arc::new(RealSystemd::new(settings.bus.clone())))
    }

    fn fake() -> (Arc<dyn SystemdBackend>, Arc<FakeSystemd>) {
        let fake = Arc::new(FakeSystemd::default());
        (fake.clone(), fake)
    }

    fn for_call(backend: &Arc<dyn SystemdBackend>, grant: &SystemdGrant, call: &Arc<Call>) -> Self {
        PluginSystemd {
            backend: backend.clone(),
            grant: grant.clone(),
            call: call.clone(),
        }
    }

    fn add_to_linker<T: Send + 'static>(
        linker: &mut wasmtime::component::Linker<T>,
        get: fn(&mut T) -> &mut Self,
    ) -> wasmtime::Result<()> {
        super::wit::add_to_linker(linker, get)
    }
}

impl PluginSystemd {
    pub async fn status(&self, unit: &str) -> Result<UnitStatus, CapError> {
        check(&self.grant, &self.call.plugin, unit, None)?;
        self.backend.status(unit).await
    }

    pub async fn list_units(&self, patterns: &[String]) -> Result<Vec<UnitStatus>, CapError> {
        bounded("list-units", patterns)?;
        let units = self.backend.list_units().await?;
        Ok(units
            .into_iter()
            .filter(|u| patterns.iter().any(|p| wildcard_match(p, &u.name)) && self.grant.covers(&u.name))
            .collect())
    }

    /// Pass a mutation of `target` through the gate; None in a dry run.
    async fn admit(&self, operation: Operation, target: String) -> Result<Option<Permit>, CapError> {
        let intent = Intent {
            capability: "systemd",
            operation: operation.name(),
            target,
            detail: String::new(),
            diff: None,
        };
        Ok(match self.call.gate.admit(intent).await? {
            Admission::Planned => None,
            Admission::Go(permit) => Some(permit),
        })
    }

    pub async fn job(&self, operation: Operation, kind: JobKind, unit: &str) -> Result<JobResult, CapError> {
        check(&self.grant, &self.call.plugin, unit, Some(operation))?;
        match self.admit(operation, unit.to_string()).await? {
            None => Ok(JobResult::Done),
            Some(permit) => self.backend.job(permit, kind, unit).await,
        }
    }

    pub async fn reset_failed(&self, unit: &str) -> Result<(), CapError> {
        check(&self.grant, &self.call.plugin, unit, Some(Operation::ResetFailed))?;
        match self.admit(Operation::ResetFailed, unit.to_string()).await? {
            None => Ok(()),
            Some(permit) => self.backend.reset_failed(permit, unit).await,
        }
    }

    pub async fn unit_files(&self, operation: Operation, units: Vec<String>) -> Result<(), CapError> {
        bounded(operation.name(), &units)?;
        for unit in &units {
            check(&self.grant, &self.call.plugin, unit, Some(operation))?;
        }
        match self.admit(operation, units.join(" ")).await? {
            None => Ok(()),
            Some(permit) if operation == Operation::Enable => self.backend.enable(permit, &units).await,
            Some(permit) => self.backend.disable(permit, &units).await,
        }
    }

    pub async fn daemon_reload(&self) -> Result<(), CapError> {
        check_operation(&self.grant, &self.call.plugin, "the unit files", Some(Operation::DaemonReload))?;
        match self.admit(Operation::DaemonReload, "systemd".to_string()).await? {
            None => Ok(()),
            Some(permit) => self.backend.daemon_reload(permit).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::testing::call;

    fn systemd(operations: &[&str], dry_run: bool) -> (PluginSystemd, Arc<FakeSystemd>) {
        let (backend, fake) = PluginSystemd::fake();
        let grant: SystemdGrant = toml::from_str(&format!(
            "units = [\"tend-*.service\"]\noperations = [{}]",
            operations.iter().map(|o| format!("\"{o}\"")).collect::<Vec<_>>().join(", ")
        ))
        .unwrap();
        (PluginSystemd::for_call(&backend, &grant, &call("doctor", dry_run)), fake)
    }

    #[tokio::test]
    async fn granted_restarts_reach_systemd_through_the_gate() {
        let (systemd, fake) = systemd(&["restart"], false);
        let result = systemd.job(Operation::Restart, JobKind::Restart, "tend-a.service").await.unwrap();
        assert_eq!(result, JobResult::Done);
        assert_eq!(fake.actions(), ["RestartUnit tend-a.service"]);
        assert_eq!(systemd.call.gate.mutations()[0].describe(), "did systemd.restart tend-a.service");
    }

    #[tokio::test]
    async fn ungranted_units_and_operations_are_denied_before_systemd() {
        let (systemd, fake) = systemd(&["restart"], false);
        let err = systemd.job(Operation::Stop, JobKind::Stop, "tend-a.service").await.unwrap_err();
        assert!(err.to_string().contains("add \"stop\" to operations"), "{err}");
        let err = systemd.job(Operation::Restart, JobKind::Restart, "kubelet.service").await.unwrap_err();
        assert!(err.to_string().contains("add \"kubelet.service\" to units"), "{err}");
        let err = systemd.daemon_reload().await.unwrap_err();
        assert!(err.to_string().contains("add \"daemon-reload\" to operations"), "{err}");
        assert!(fake.actions().is_empty());
    }

    #[tokio::test]
    async fn a_dry_run_plans_and_a_failed_job_says_how() {
        let (dry, fake) = systemd(&["restart"], true);
        assert_eq!(dry.job(Operation::Restart, JobKind::Restart, "tend-a.service").await.unwrap(), JobResult::Done);
        assert!(fake.actions().is_empty());
        assert!(dry.call.gate.mutations()[0].dry_run);
        let (real, fake) = systemd(&["restart"], false);
        fake.job_result("tend-a.service", JobResult::Failed);
        assert_eq!(real.job(Operation::Restart, JobKind::Restart, "tend-a.service").await.unwrap(), JobResult::Failed);
        assert_eq!(real.call.gate.mutations()[0].result, "job failed");
    }

    #[tokio::test]
    async fn a_flood_of_patterns_or_units_is_refused_before_any_matching() {
        let (systemd, fake) = systemd(&["enable"], false);
        let many: Vec<String> = (0..1000).map(|i| format!("tend-{i}.service")).collect();
        let err = systemd.list_units(&many).await.unwrap_err();
        assert_eq!(err.kind(), "invalid");
        let err = systemd.unit_files(Operation::Enable, many).await.unwrap_err();
        assert!(err.to_string().contains("split the call"), "{err}");
        assert!(fake.actions().is_empty());
    }

    #[tokio::test]
    async fn listing_shows_only_granted_units() {
        let (systemd, fake) = systemd(&[], false);
        fake.set_unit("tend-a.service", "active");
        fake.set_unit("kubelet.service", "active");
        let listed = systemd.list_units(&["*".to_string()]).await.unwrap();
        let names: Vec<&str> = listed.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(names, ["tend-a.service"]);
    }
}
