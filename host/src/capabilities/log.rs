//! `tend:plugin/log`: plugin log lines into the host's tracing, tagged with the
//! plugin name, bounded per reconcile so a chatty plugin cannot flood the node.

use std::sync::Mutex;

/// Bytes of log text one reconcile may emit; the rest is dropped and counted.
pub const MAX_LOG_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

pub struct PluginLog {
    plugin: String,
    budget: Mutex<LogBudget>,
}

#[derive(Default)]
struct LogBudget {
    used: usize,
    dropped: usize,
}

impl PluginLog {
    pub fn new(plugin: &str) -> Self {
        PluginLog {
            plugin: plugin.to_string(),
            budget: Mutex::default(),
        }
    }

    /// Emit one line; false when it was dropped because the budget is used up.
    pub fn log(&self, level: Level, message: &str) -> bool {
        {
            let mut budget = self.budget.lock().unwrap();
            if budget.used + message.len() > MAX_LOG_BYTES {
                budget.dropped += 1;
                return false;
            }
            budget.used += message.len();
        }
        let plugin = self.plugin.as_str();
        match level {
            Level::Trace => tracing::trace!(plugin, "{message}"),
            Level::Debug => tracing::debug!(plugin, "{message}"),
            Level::Info => tracing::info!(plugin, "{message}"),
            Level::Warn => tracing::warn!(plugin, "{message}"),
            Level::Error => tracing::error!(plugin, "{message}"),
        }
        true
    }

    /// Lines dropped so far in this reconcile.
    pub fn dropped(&self) -> usize {
        self.budget.lock().unwrap().dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_beyond_the_budget_is_dropped_and_counted() {
        let log = PluginLog::new("p");
        let line = "x".repeat(1024);
        let kept = (0..100).filter(|_| log.log(Level::Info, &line)).count();
        assert_eq!(kept, MAX_LOG_BYTES / 1024);
        assert_eq!(log.dropped(), 100 - kept);
    }
}
