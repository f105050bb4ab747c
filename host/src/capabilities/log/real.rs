//! Plugin log lines into the host's tracing subscriber.

use super::backend::{Level, LogBackend};

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
