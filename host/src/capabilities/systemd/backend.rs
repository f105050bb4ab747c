//! The systemd backend: unit status and jobs over D-Bus. Mutations require a
//! [`Permit`]: only the mutation gate makes one, and it journals their result.

use super::grants::Operation;
use crate::capabilities::error::CapError;
use crate::capabilities::gate::{Performed, Permit};
use std::time::Duration;

pub use crate::wit::systemd::{JobResult, UnitStatus};

/// How long a job may run before the call returns `timeout` (the job goes on).
pub const JOB_TIMEOUT: Duration = Duration::from_secs(60);

/// A unit as ListUnits reports it: its name and three states, nothing of
/// its unit file (the same shape the fake gives).
pub fn listed_unit(
    name: impl Into<String>,
    load_state: impl Into<String>,
    active_state: impl Into<String>,
    sub_state: impl Into<String>,
) -> UnitStatus {
    UnitStatus {
        name: name.into(),
        load_state: load_state.into(),
        active_state: active_state.into(),
        sub_state: sub_state.into(),
        unit_file_state: String::new(),
        fragment_path: None,
        drop_in_paths: Vec::new(),
        need_daemon_reload: false,
        active_enter_ms: None,
        n_restarts: None,
    }
}

/// A job-based operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobKind {
    Start,
    Stop,
    Restart,
    ReloadOrRestart,
    TryRestart,
}

impl JobKind {
    /// The D-Bus method of `org.freedesktop.systemd1.Manager`.
    pub fn method(self) -> &'static str {
        match self {
            JobKind::Start => "StartUnit",
            JobKind::Stop => "StopUnit",
            JobKind::Restart => "RestartUnit",
            JobKind::ReloadOrRestart => "ReloadOrRestartUnit",
            JobKind::TryRestart => "TryRestartUnit",
        }
    }

    /// The operation that asks for this job, as grants and budgets name it.
    pub fn operation(self) -> Operation {
        match self {
            JobKind::Start => Operation::Start,
            JobKind::Stop => Operation::Stop,
            JobKind::Restart => Operation::Restart,
            JobKind::ReloadOrRestart => Operation::ReloadOrRestart,
            JobKind::TryRestart => Operation::TryRestart,
        }
    }
}

/// How a job ended (systemd's JobRemoved result), in its D-Bus spelling.
impl JobResult {
    pub fn parse(text: &str) -> Option<JobResult> {
        Some(match text {
            "done" => JobResult::Done,
            "failed" => JobResult::Failed,
            "canceled" => JobResult::Canceled,
            "timeout" => JobResult::Timeout,
            "dependency" => JobResult::Dependency,
            "skipped" => JobResult::Skipped,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            JobResult::Done => "done",
            JobResult::Failed => "failed",
            JobResult::Canceled => "canceled",
            JobResult::Timeout => "timeout",
            JobResult::Dependency => "dependency",
            JobResult::Skipped => "skipped",
        }
    }
}

/// One change systemd reports for EnableUnitFiles or DisableUnitFiles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitFileChange {
    /// "symlink", "unlink", or a note ("is-mask", "auxiliary unit", ...).
    pub kind: String,
    /// The link made or removed.
    pub path: String,
    /// Where a new link points.
    pub destination: String,
}

impl UnitFileChange {
    /// The link, when the change made or removed one.
    pub fn link(&self) -> Option<&str> {
        matches!(self.kind.as_str(), "symlink" | "unlink").then_some(self.path.as_str())
    }
}

/// A unit whose active state changed (from PropertiesChanged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitChange {
    pub unit: String,
    pub active_state: String,
}

#[async_trait::async_trait]
pub trait SystemdBackend: Send + Sync + 'static {
    /// Loads the unit if it is not loaded yet (as LoadUnit would, not GetUnit).
    async fn status(&self, unit: &str) -> Result<UnitStatus, CapError>;
    /// Every loaded unit (the adapter filters by pattern and grant).
    async fn list_units(&self) -> Result<Vec<UnitStatus>, CapError>;
    /// Queue the job and wait (at most [`JOB_TIMEOUT`]) for its JobRemoved.
    async fn job(&self, permit: Permit, kind: JobKind, unit: &str) -> Result<JobResult, CapError>;
    async fn reset_failed(&self, permit: Permit, unit: &str) -> Result<(), CapError>;
    /// The links a disable of `unit` would remove now (GetUnitFileLinks:
    /// systemd's own dry run of DisableUnitFiles, `Also=` units included).
    async fn unit_file_links(&self, unit: &str) -> Result<Vec<String>, CapError>;
    /// The text of `unit`'s unit file, the one the manager loaded (its
    /// FragmentPath; a template's for an instance): what the adapter plans
    /// an enable from. `not-found` when the manager has none.
    async fn unit_file(&self, unit: &str) -> Result<String, CapError>;
    /// EnableUnitFiles without force (an existing link is never replaced):
    /// the changes made. The adapter holds them to the grant, under the
    /// gate's permit.
    async fn enable(&self, units: &[String]) -> Result<Vec<UnitFileChange>, CapError>;
    /// DisableUnitFiles: the changes made.
    async fn disable(&self, units: &[String]) -> Result<Vec<UnitFileChange>, CapError>;
    async fn daemon_reload(&self, permit: Permit) -> Result<(), CapError>;
    /// Unit active-state changes, for the unit trigger source; ends when the
    /// bus goes away (subscribe again to reconnect).
    async fn changes(&self) -> Result<tokio::sync::mpsc::Receiver<UnitChange>, CapError>;
}

/// A job is "ok" in the journal when it is done, else it says how it ended.
impl Performed for JobResult {
    fn journal_result(&self) -> String {
        match self {
            JobResult::Done => "ok".to_string(),
            other => format!("job {}", other.name()),
        }
    }
}
