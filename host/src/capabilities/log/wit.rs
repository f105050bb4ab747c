//! `tend:plugin/log` answered by the adapter.

use super::adapter::PluginLog;
use super::backend::Level;
use crate::wit::log;
use wasmtime::component::{HasSelf, Linker};

pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut PluginLog,
) -> wasmtime::Result<()> {
    log::add_to_linker::<T, HasSelf<PluginLog>>(linker, get)
}

impl log::Host for PluginLog {
    async fn log(&mut self, level: log::Level, message: String) {
        let _ = self.call.counted("log", "log", Ok(()));
        let level = match level {
            log::Level::Trace => Level::Trace,
            log::Level::Debug => Level::Debug,
            log::Level::Info => Level::Info,
            log::Level::Warn => Level::Warn,
            log::Level::Error => Level::Error,
        };
        PluginLog::log(self, level, &message).await;
    }
}
