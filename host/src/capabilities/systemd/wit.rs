//! `tend:plugin/systemd` answered by the adapter.

use super::adapter::PluginSystemd;
use super::backend::JobKind;
use super::grants::Operation;
use crate::capabilities::Capability;
use crate::capabilities::tape::NO_ARGS;
use crate::wit::systemd;
use crate::wit::types;

type WitResult<T> = wasmtime::Result<Result<T, types::Error>>;

impl PluginSystemd {
    /// A job, answered under the operation that asks for it.
    async fn answered_job(&self, kind: JobKind, unit: String) -> WitResult<systemd::JobResult> {
        let operation = kind.operation();
        self.call
            .answer(Self::NAME, operation.name(), (unit,), |(unit,)| async move {
                self.job(operation, kind, &unit).await
            })
            .await
    }

    /// `enable` or `disable`.
    async fn answered_unit_files(&self, operation: Operation, units: Vec<String>) -> WitResult<()> {
        self.call
            .answer(Self::NAME, operation.name(), (units,), |(units,)| {
                self.unit_files(operation, units)
            })
            .await
    }
}

impl systemd::Host for PluginSystemd {
    async fn status(&mut self, unit: String) -> WitResult<systemd::UnitStatus> {
        let this = &*self;
        this.call
            .answer(Self::NAME, "status", (unit,), |(unit,)| async move {
                this.status(&unit).await
            })
            .await
    }
    async fn list_units(&mut self, patterns: Vec<String>) -> WitResult<Vec<systemd::UnitStatus>> {
        let this = &*self;
        this.call
            .answer(Self::NAME, "list-units", (patterns,), |(patterns,)| async move {
                this.list_units(&patterns).await
            })
            .await
    }
    async fn start(&mut self, unit: String) -> WitResult<systemd::JobResult> {
        self.answered_job(JobKind::Start, unit).await
    }
    async fn stop(&mut self, unit: String) -> WitResult<systemd::JobResult> {
        self.answered_job(JobKind::Stop, unit).await
    }
    async fn restart(&mut self, unit: String) -> WitResult<systemd::JobResult> {
        self.answered_job(JobKind::Restart, unit).await
    }
    async fn reload_or_restart(&mut self, unit: String) -> WitResult<systemd::JobResult> {
        self.answered_job(JobKind::ReloadOrRestart, unit).await
    }
    async fn try_restart(&mut self, unit: String) -> WitResult<systemd::JobResult> {
        self.answered_job(JobKind::TryRestart, unit).await
    }
    async fn reset_failed(&mut self, unit: String) -> WitResult<()> {
        let this = &*self;
        let operation = Operation::ResetFailed.name();
        this.call
            .answer(Self::NAME, operation, (unit,), |(unit,)| async move {
                this.reset_failed(&unit).await
            })
            .await
    }
    async fn enable(&mut self, units: Vec<String>) -> WitResult<()> {
        self.answered_unit_files(Operation::Enable, units).await
    }
    async fn disable(&mut self, units: Vec<String>) -> WitResult<()> {
        self.answered_unit_files(Operation::Disable, units).await
    }
    async fn daemon_reload(&mut self) -> WitResult<()> {
        let this = &*self;
        let operation = Operation::DaemonReload.name();
        this.call
            .answer(Self::NAME, operation, NO_ARGS, |_| this.daemon_reload())
            .await
    }
}
