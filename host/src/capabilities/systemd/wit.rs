//! `tend:plugin/systemd` answered by the adapter.

use super::adapter::PluginSystemd;
use super::backend::{JobKind, JobResult, UnitStatus};
use super::grants::Operation;
use crate::wit::tend::plugin::systemd;
use crate::wit::types;
use wasmtime::component::{HasSelf, Linker};

type WitResult<T> = Result<T, types::Error>;

pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut PluginSystemd,
) -> wasmtime::Result<()> {
    systemd::add_to_linker::<T, HasSelf<PluginSystemd>>(linker, get)
}

fn status(s: UnitStatus) -> systemd::UnitStatus {
    systemd::UnitStatus {
        name: s.name,
        load_state: s.load_state,
        active_state: s.active_state,
        sub_state: s.sub_state,
        unit_file_state: s.unit_file_state,
        fragment_path: s.fragment_path,
        drop_in_paths: s.drop_in_paths,
        need_daemon_reload: s.need_daemon_reload,
        active_enter_ms: s.active_enter_ms,
        n_restarts: s.n_restarts,
    }
}

fn job_result(r: JobResult) -> systemd::JobResult {
    match r {
        JobResult::Done => systemd::JobResult::Done,
        JobResult::Failed => systemd::JobResult::Failed,
        JobResult::Canceled => systemd::JobResult::Canceled,
        JobResult::Timeout => systemd::JobResult::Timeout,
        JobResult::Dependency => systemd::JobResult::Dependency,
        JobResult::Skipped => systemd::JobResult::Skipped,
    }
}

impl PluginSystemd {
    async fn counted_job(
        &mut self,
        name: &'static str,
        operation: Operation,
        kind: JobKind,
        unit: String,
    ) -> WitResult<systemd::JobResult> {
        let result = self.job(operation, kind, &unit).await;
        self.call.counted("systemd", name, result).map(job_result)
    }
}

impl systemd::Host for PluginSystemd {
    async fn status(&mut self, unit: String) -> WitResult<systemd::UnitStatus> {
        let result = PluginSystemd::status(self, &unit).await;
        self.call.counted("systemd", "status", result).map(status)
    }
    async fn list_units(&mut self, patterns: Vec<String>) -> WitResult<Vec<systemd::UnitStatus>> {
        let result = PluginSystemd::list_units(self, &patterns).await;
        let units = self.call.counted("systemd", "list-units", result)?;
        Ok(units.into_iter().map(status).collect())
    }
    async fn start(&mut self, unit: String) -> WitResult<systemd::JobResult> {
        self.counted_job("start", Operation::Start, JobKind::Start, unit)
            .await
    }
    async fn stop(&mut self, unit: String) -> WitResult<systemd::JobResult> {
        self.counted_job("stop", Operation::Stop, JobKind::Stop, unit)
            .await
    }
    async fn restart(&mut self, unit: String) -> WitResult<systemd::JobResult> {
        self.counted_job("restart", Operation::Restart, JobKind::Restart, unit)
            .await
    }
    async fn reload_or_restart(&mut self, unit: String) -> WitResult<systemd::JobResult> {
        self.counted_job(
            "reload-or-restart",
            Operation::ReloadOrRestart,
            JobKind::ReloadOrRestart,
            unit,
        )
        .await
    }
    async fn try_restart(&mut self, unit: String) -> WitResult<systemd::JobResult> {
        self.counted_job(
            "try-restart",
            Operation::TryRestart,
            JobKind::TryRestart,
            unit,
        )
        .await
    }
    async fn reset_failed(&mut self, unit: String) -> WitResult<()> {
        let result = PluginSystemd::reset_failed(self, &unit).await;
        self.call.counted("systemd", "reset-failed", result)
    }
    async fn enable(&mut self, units: Vec<String>) -> WitResult<()> {
        let result = self.unit_files(Operation::Enable, units).await;
        self.call.counted("systemd", "enable", result)
    }
    async fn disable(&mut self, units: Vec<String>) -> WitResult<()> {
        let result = self.unit_files(Operation::Disable, units).await;
        self.call.counted("systemd", "disable", result)
    }
    async fn daemon_reload(&mut self) -> WitResult<()> {
        let result = PluginSystemd::daemon_reload(self).await;
        self.call.counted("systemd", "daemon-reload", result)
    }
}
