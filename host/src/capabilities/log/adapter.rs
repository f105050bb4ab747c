//! The `log` adapter of one reconcile: tags lines with the plugin's name,
//! makes them inert (a newline cannot forge a host log line), and keeps them
//! within the plugin's limits per reconcile and per minute.

use super::backend::{Level, LogBackend};
use super::grants::{LogCap, MinuteWindow, Spent};
use crate::capabilities::call::Call;
use crate::text::inert;
use crate::units::ByteSize;
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Instant;

/// `[plugins.<name>.limits] log-*`: lines and bytes per reconcile, and per
/// minute across reconciles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogLimits {
    #[serde(rename = "log-lines")]
    pub lines: u32,
    #[serde(rename = "log-bytes")]
    pub bytes: ByteSize,
    #[serde(rename = "log-lines-per-minute")]
    pub lines_per_minute: u32,
    #[serde(rename = "log-bytes-per-minute")]
    pub bytes_per_minute: ByteSize,
}

impl Default for LogLimits {
    fn default() -> Self {
        LogLimits {
            lines: 1000,
            bytes: ByteSize(64 << 10),
            lines_per_minute: 3000,
            bytes_per_minute: ByteSize(256 << 10),
        }
    }
}

/// Each plugin's current minute, across its reconciles (one entry per plugin
/// name the process has run).
static MINUTES: LazyLock<Mutex<HashMap<String, MinuteWindow<Instant>>>> =
    LazyLock::new(Mutex::default);

pub struct PluginLog {
    pub(super) backend: Arc<dyn LogBackend>,
    pub(super) limits: LogLimits,
    pub(super) call: Arc<Call>,
    pub(super) spent: Mutex<Spent>,
    pub(super) dropped: Mutex<usize>,
}

/// Spend one line of `len` bytes from `plugin`'s current minute.
fn admit_this_minute(plugin: &str, limits: &LogLimits, len: usize) -> bool {
    let per_minute = LogCap {
        lines: limits.lines_per_minute,
        bytes: limits.bytes_per_minute.0,
    };
    let now = Instant::now();
    let mut minutes = MINUTES.lock().unwrap();
    let minute = minutes
        .entry(plugin.to_string())
        .or_insert_with(|| MinuteWindow::new(now));
    minute.admit(now, per_minute, len)
}

/// Charge a line the host logs on `plugin`'s behalf (its outcome message, the
/// mutations it made) of `len` bytes of plugin text to the plugin's log budget
/// per minute: false when that is spent, and the host must leave the plugin's
/// text out of its line.
pub fn charge_host_line(plugin: &str, limits: &LogLimits, len: usize) -> bool {
    admit_this_minute(plugin, limits, len)
}

impl PluginLog {
    fn admit(&self, len: usize) -> bool {
        let limits = &self.limits;
        let per_reconcile = LogCap {
            lines: limits.lines,
            bytes: limits.bytes.0,
        };
        let mut spent = self.spent.lock().unwrap();
        let mut fits = *spent;
        if !fits.admit(per_reconcile, len) {
            return false;
        }
        if !admit_this_minute(&self.call.plugin, limits, len) {
            return false;
        }
        *spent = fits;
        true
    }

    /// Emit one line; false when it was dropped because a limit is reached.
    pub async fn log(&self, level: Level, message: &str) -> bool {
        if !self.admit(message.len()) {
            *self.dropped.lock().unwrap() += 1;
            return false;
        }
        self.backend
            .emit(&self.call.plugin, level, &inert(message))
            .await;
        true
    }

    /// Lines dropped so far in this reconcile.
    pub fn dropped(&self) -> usize {
        *self.dropped.lock().unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::testing::call;
    use crate::capabilities::{Capability, capability::AlwaysGranted};

    #[tokio::test]
    async fn lines_are_inert_and_bounded_per_reconcile_and_per_minute() {
        let limits = LogLimits {
            lines: 3,
            lines_per_minute: 5,
            ..LogLimits::default()
        };
        let (backend, fake) = PluginLog::fake();
        let first = PluginLog::for_call(&backend, &AlwaysGranted, &limits, &call("chatty", false));
        assert!(first.log(Level::Info, "a\nFORGED host line").await);
        for _ in 0..5 {
            first.log(Level::Info, "").await;
        }
        assert_eq!((fake.lines().len(), first.dropped()), (3, 3));
        assert_eq!(fake.lines()[0].2, "a\\nFORGED host line");
        // The next reconcile has its own 3 lines, but only 2 are left this minute.
        let second = PluginLog::for_call(&backend, &AlwaysGranted, &limits, &call("chatty", false));
        for _ in 0..3 {
            second.log(Level::Info, "x").await;
        }
        assert_eq!((fake.lines().len(), second.dropped()), (5, 1));
    }

    #[tokio::test]
    async fn what_the_host_logs_for_a_plugin_spends_its_minute() {
        let limits = LogLimits {
            bytes_per_minute: ByteSize(10 * 1024),
            ..LogLimits::default()
        };
        // Two 4 KiB outcome messages fit in 10 KiB, the third does not ...
        let kept = (0..3)
            .filter(|_| charge_host_line("outcomes", &limits, 4096))
            .count();
        assert_eq!(kept, 2);
        // ... and the plugin's own lines share the same minute.
        let (backend, fake) = PluginLog::fake();
        let log = PluginLog::for_call(&backend, &AlwaysGranted, &limits, &call("outcomes", false));
        assert!(!log.log(Level::Info, &"x".repeat(4096)).await);
        assert!(log.log(Level::Info, "short").await);
        assert_eq!(fake.lines().len(), 1);
    }
}
