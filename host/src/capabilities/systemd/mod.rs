//! `tend:plugin/systemd`: units over D-Bus, confined to the plugin's granted
//! unit patterns and operations, every mutation through the gate.

mod adapter;
mod backend;
mod fake;
mod grants;
mod real;
mod source;
mod wit;

pub use adapter::{PluginSystemd, SystemdSettings};
pub use backend::{JOB_TIMEOUT, JobKind, JobResult, SystemdBackend, UnitChange, UnitStatus};
pub use fake::FakeSystemd;
pub use grants::{Operation, SystemdGrant, UnitPattern, wildcard_match};
pub use real::RealSystemd;
pub use source::UNIT_TRIGGER;

use crate::capabilities::call::Call;
use crate::capabilities::capability::{BackendEnv, Capability, NoLimits};
use crate::capabilities::watch::Watch;
use crate::wit::systemd;
use source::UnitSource;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use wasmtime::component::{HasSelf, Linker};

impl Capability for PluginSystemd {
    const NAME: &'static str = "systemd";
    const MUTATIONS: &'static [&'static str] = tend_rules::systemd::MUTATIONS;
    type Grant = SystemdGrant;
    type Settings = SystemdSettings;
    type Limits = NoLimits;
    type Backend = dyn SystemdBackend;
    type Fake = FakeSystemd;

    /// `watch = true` reconciles the plugin on its units' changes.
    fn host_uses(grant: &SystemdGrant) -> bool {
        grant.watch
    }

    fn describe_grant(grant: &SystemdGrant) -> Vec<String> {
        if grant.units.is_empty() {
            return vec![];
        }
        let units: Vec<&str> = grant.units.iter().map(|u| u.0.as_str()).collect();
        let operations: Vec<&str> = grant.operations.iter().map(|o| o.name()).collect();
        vec![format!(
            "units {} (operations: {}{})",
            units.join(", "),
            if operations.is_empty() {
                "none".to_string()
            } else {
                operations.join(", ")
            },
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

    fn for_call(
        backend: &Arc<dyn SystemdBackend>,
        grant: &SystemdGrant,
        _: &NoLimits,
        call: &Arc<Call>,
    ) -> Self {
        PluginSystemd {
            backend: backend.clone(),
            grant: grant.clone(),
            call: call.clone(),
            reloaded: AtomicBool::new(false),
        }
    }

    fn add_to_linker<T: Send + 'static>(
        linker: &mut Linker<T>,
        get: fn(&mut T) -> &mut Self,
    ) -> wasmtime::Result<()> {
        systemd::add_to_linker::<T, HasSelf<Self>>(linker, get)
    }

    fn watch(backend: &Arc<dyn SystemdBackend>) -> Option<Box<dyn Watch<SystemdGrant>>> {
        Some(Box::new(UnitSource::new(backend.clone())))
    }
}

use crate::capabilities::CapError;

/// The WIT's functions, each on the adapter method that does it.
impl wit::Functions for PluginSystemd {
    async fn status(&self, unit: String) -> Result<UnitStatus, CapError> {
        self.status(&unit).await
    }
    async fn list_units(&self, patterns: Vec<String>) -> Result<Vec<UnitStatus>, CapError> {
        self.list_units(&patterns).await
    }
    async fn start(&self, unit: String) -> Result<JobResult, CapError> {
        self.job(Operation::Start, JobKind::Start, &unit).await
    }
    async fn stop(&self, unit: String) -> Result<JobResult, CapError> {
        self.job(Operation::Stop, JobKind::Stop, &unit).await
    }
    async fn restart(&self, unit: String) -> Result<JobResult, CapError> {
        self.job(Operation::Restart, JobKind::Restart, &unit).await
    }
    async fn reload_or_restart(&self, unit: String) -> Result<JobResult, CapError> {
        self.job(Operation::ReloadOrRestart, JobKind::ReloadOrRestart, &unit)
            .await
    }
    async fn try_restart(&self, unit: String) -> Result<JobResult, CapError> {
        self.job(Operation::TryRestart, JobKind::TryRestart, &unit)
            .await
    }
    async fn reset_failed(&self, unit: String) -> Result<(), CapError> {
        self.reset_failed(&unit).await
    }
    async fn enable(&self, units: Vec<String>) -> Result<(), CapError> {
        self.unit_files(Operation::Enable, units).await
    }
    async fn disable(&self, units: Vec<String>) -> Result<(), CapError> {
        self.unit_files(Operation::Disable, units).await
    }
    async fn daemon_reload(&self) -> Result<(), CapError> {
        self.daemon_reload().await
    }
}
