//! Captured log lines, for tests.

use super::backend::{Level, LogBackend};
use std::sync::Mutex;

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
