//! `tend:plugin/log`: the plugin's log lines, through [`crate::Host::log`].

use std::cell::RefCell;

/// The WIT enum itself, ordered from `Trace` to `Error`.
pub use crate::bindings::tend::plugin::log::Level;

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
