//! One module per WIT interface. Each has a small backend trait with a real
//! implementation and an in-memory fake, and an adapter that enforces the
//! plugin's grants and dry run before it touches the backend. Adapters are built
//! per reconcile ([`Capabilities::for_call`]) from backends shared by the host.

pub mod files;
pub mod http;
pub mod log;
pub mod state;

use crate::config::PluginConfig;
use serde::Serialize;
use std::sync::{Arc, Mutex};

/// The one error of every capability; the WIT `error` variant, case for case.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapError {
    #[error("denied: {0}")]
    Denied(String),
    #[error("not-found: {0}")]
    NotFound(String),
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("unavailable: {0}")]
    Unavailable(String),
    #[error("timeout: {0}")]
    Timeout(String),
    #[error("invalid: {0}")]
    Invalid(String),
    #[error("budget-exhausted: {0}")]
    BudgetExhausted(String),
    #[error("other: {0}")]
    Other(String),
}

impl CapError {
    /// The case name as in the WIT (`not-found`, ...): a metrics label.
    pub fn kind(&self) -> &'static str {
        match self {
            CapError::Denied(_) => "denied",
            CapError::NotFound(_) => "not-found",
            CapError::Conflict(_) => "conflict",
            CapError::Unavailable(_) => "unavailable",
            CapError::Timeout(_) => "timeout",
            CapError::Invalid(_) => "invalid",
            CapError::BudgetExhausted(_) => "budget-exhausted",
            CapError::Other(_) => "other",
        }
    }
}

/// A mutating call a plugin made: performed, or (in a dry run) only planned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mutation {
    /// "files", "http", ...
    pub capability: &'static str,
    /// "write", "remove", "POST", ...
    pub operation: String,
    /// The path or URL.
    pub target: String,
    /// What would change or changed, for humans ("new file, 120 bytes").
    pub detail: String,
    /// False in a dry run.
    pub performed: bool,
    /// "ok" or the error.
    pub result: String,
}

/// The mutations of one reconcile, in call order.
#[derive(Debug, Clone, Default)]
pub struct Mutations(Arc<Mutex<Vec<Mutation>>>);

impl Mutations {
    pub fn record(&self, mutation: Mutation) {
        self.0.lock().expect("mutations lock").push(mutation);
    }

    pub fn take(&self) -> Vec<Mutation> {
        std::mem::take(&mut *self.0.lock().expect("mutations lock"))
    }
}

/// The backends every plugin's adapters share: real ones in `tend`, fakes in tests.
#[derive(Clone)]
pub struct Backends {
    pub state: Arc<dyn state::StateBackend>,
    pub files: Arc<dyn files::FileBackend>,
    pub http: Arc<dyn http::HttpBackend>,
}

impl Backends {
    /// The real backends: state in `<state-dir>/state.redb`, the node's filesystem,
    /// and a real HTTP client.
    pub fn real(state_dir: &std::path::Path) -> anyhow::Result<Self> {
        Ok(Backends {
            state: Arc::new(state::RedbState::open(&state_dir.join("state.redb"))?),
            files: Arc::new(files::RealFiles),
            http: Arc::new(http::RealHttp::new()?),
        })
    }

    /// In-memory fakes of every backend.
    pub fn fake() -> (Self, FakeBackends) {
        let fakes = FakeBackends {
            state: Arc::new(state::MemoryState::default()),
            files: Arc::new(files::MemoryFiles::default()),
            http: Arc::new(http::ScriptedHttp::default()),
        };
        let backends = Backends {
            state: fakes.state.clone(),
            files: fakes.files.clone(),
            http: fakes.http.clone(),
        };
        (backends, fakes)
    }
}

/// Handles on the fakes behind [`Backends::fake`], to script and inspect them.
pub struct FakeBackends {
    pub state: Arc<state::MemoryState>,
    pub files: Arc<files::MemoryFiles>,
    pub http: Arc<http::ScriptedHttp>,
}

/// Facts about one reconcile that every adapter needs.
#[derive(Debug, Clone)]
pub struct CallInfo {
    pub plugin: String,
    pub dry_run: bool,
    pub mutations: Mutations,
}

/// The adapters handed to one reconcile of one plugin.
pub struct Capabilities {
    pub log: log::PluginLog,
    pub state: state::PluginState,
    pub files: files::PluginFiles,
    pub http: http::PluginHttp,
}

impl Capabilities {
    pub fn for_call(backends: &Backends, plugin: &PluginConfig, call: &CallInfo) -> Self {
        Capabilities {
            log: log::PluginLog::new(&call.plugin),
            state: state::PluginState::new(backends.state.clone(), call.clone()),
            files: files::PluginFiles::new(
                backends.files.clone(),
                plugin.grants.files.clone(),
                call.clone(),
            ),
            http: http::PluginHttp::new(
                backends.http.clone(),
                plugin.grants.http.clone(),
                call.clone(),
            ),
        }
    }
}
