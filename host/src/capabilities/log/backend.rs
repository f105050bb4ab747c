//! Where plugin log lines go: the host's tracing subscriber, or, in tests,
//! a capture.

use std::sync::Mutex;

pub use crate::wit::log::Level;

#[async_trait::async_trait]
pub trait LogBackend: Send + Sync + 'static {
    async fn emit(&self, plugin: &str, level: Level, message: &str);
}

/// Plugin log lines into the host's tracing subscriber.
pub struct TracingLog;

#[async_trait::async_trait]
impl LogBackend for TracingLog {
    async fn emit(&self, plugin: &str, level: Level, message: &str) {
        match level {
            Level::Trace => tracing::trace!(plugin, "{message}"),
            Level::Debug => tracing::debug!(plugin, "{message}"),
            Level::Info => tracing::info!(plugin, "{message}"),
            Level::Warn => tracing::warn!(plugin, "{message}"),
            Level::Error => tracing::error!(plugin, "{message}"),
        }
    }
}

/// Captured log lines, for tests.
#[derive(Default)]
pub struct FakeLog {
    lines: Mutex<Vec<(String, Level, String)>>,
}

impl FakeLog {
    /// (plugin, level, message) of every line emitted.
    pub fn lines(&self) -> Vec<(String, Level, String)> {
        self.lines.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl LogBackend for FakeLog {
    async fn emit(&self, plugin: &str, level: Level, message: &str) {
        let line = (plugin.to_string(), level, message.to_string());
        self.lines.lock().unwrap().push(line);
    }
}
