//! `tend:plugin/systemd` answered by the adapter.

use super::adapter::PluginSystemd;
use super::backend::JobKind;
use super::grants::Operation;
use crate::capabilities::Capability;
use crate::wit::systemd;
use crate::wit::types;

type WitResult<T> = Result<T, types::Error>;

impl PluginSystemd {
    /// A job, counted under the operation that asks for it.
    async fn counted_job(&mut self, kind: JobKind, unit: String) -> WitResult<systemd::JobResult> {
        let operation = kind.operation();
        let result = self.job(operation, kind, &unit).await;
        self.call.counted(Self::NAME, operation.name(), result)
    }
}

impl systemd::Host for PluginSystemd {
    async fn status(&mut self, unit: String) -> WitResult<systemd::UnitStatus> {
        let result = PluginSystemd::status(self, &unit).await;
        self.call.counted(Self::NAME, "status", result)
    }
    async fn list_units(&mut self, patterns: Vec<String>) -> WitResult<Vec<systemd::UnitStatus>> {
        let result = PluginSystemd::list_units(self, &patterns).await;
        self.call.counted(Self::NAME, "list-units", result)
    }
    async fn start(&mut self, unit: String) -> WitResult<systemd::JobResult> {
        self.counted_job(JobKind::Start, unit).await
    }
    async fn stop(&mut self, unit: String) -> WitResult<systemd::JobResult> {
        self.counted_job(JobKind::Stop, unit).await
    }
    async fn restart(&mut self, unit: String) -> WitResult<systemd::JobResult> {
        self.counted_job(JobKind::Restart, unit).await
    }
    async fn reload_or_restart(&mut self, unit: String) -> WitResult<systemd::JobResult> {
        self.counted_job(JobKind::ReloadOrRestart, unit).await
    }
    async fn try_restart(&mut self, unit: String) -> WitResult<systemd::JobResult> {
        self.counted_job(JobKind::TryRestart, unit).await
    }
    async fn reset_failed(&mut self, unit: String) -> WitResult<()> {
        let result = PluginSystemd::reset_failed(self, &unit).await;
        self.call
            .counted(Self::NAME, Operation::ResetFailed.name(), result)
    }
    async fn enable(&mut self, units: Vec<String>) -> WitResult<()> {
        let result = self.unit_files(Operation::Enable, units).await;
        self.call
            .counted(Self::NAME, Operation::Enable.name(), result)
    }
    async fn disable(&mut self, units: Vec<String>) -> WitResult<()> {
        let result = self.unit_files(Operation::Disable, units).await;
        self.call
            .counted(Self::NAME, Operation::Disable.name(), result)
    }
    async fn daemon_reload(&mut self) -> WitResult<()> {
        let result = PluginSystemd::daemon_reload(self).await;
        self.call
            .counted(Self::NAME, Operation::DaemonReload.name(), result)
    }
}
