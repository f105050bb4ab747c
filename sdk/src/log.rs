//! `tend:plugin/log`: the plugin's log lines, through [`crate::Host::log`].

use std::cell::RefCell;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

/// The wasm glue: one line to the host's log.
#[cfg(target_arch = "wasm32")]
pub(crate) fn wasm_log(level: Level, message: &str) {
    use crate::bindings::tend::plugin::log;
    let level = match level {
        Level::Trace => log::Level::Trace,
        Level::Debug => log::Level::Debug,
        Level::Info => log::Level::Info,
        Level::Warn => log::Level::Warn,
        Level::Error => log::Level::Error,
    };
    log::log(level, message);
}

/// The fake: every line logged, for [`crate::testing::FakeHost::logs`].
#[derive(Default)]
pub(crate) struct FakeLog {
    lines: RefCell<Vec<(Level, String)>>,
}

impl FakeLog {
    pub(crate) fn log(&self, level: Level, message: &str) {
        self.lines.borrow_mut().push((level, message.to_string()));
    }

    pub(crate) fn lines(&self) -> Vec<(Level, String)> {
        self.lines.borrow().clone()
    }
}
