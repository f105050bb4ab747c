//! `tend:plugin/log`: plugin log lines into the host's log, tagged with the
//! plugin's name, bounded per reconcile so a chatty plugin cannot flood the node.
//!
//! Small enough for one face: this file holds the capability, `backend.rs`
//! the trait with its real and fake backends, `wit.rs` (generated) its WIT
//! binding.

mod adapter;
mod backend;
mod grants;
mod wit;

pub use adapter::{LogLimits, PluginLog, charge_host_line};
pub use backend::{FakeLog, Level, LogBackend, TracingLog};
pub use grants::LINE_COST;

use crate::capabilities::call::Call;
use crate::capabilities::capability::{AlwaysGranted, BackendEnv, Capability, NoSettings};
use crate::wit::log;
use std::sync::{Arc, Mutex};
use wasmtime::component::{HasSelf, Linker};

impl Capability for PluginLog {
    const NAME: &'static str = "log";
    const MUTATIONS: &'static [&'static str] = &[];
    type Grant = AlwaysGranted;
    type Settings = NoSettings;
    type Limits = LogLimits;
    type Backend = dyn LogBackend;
    type Fake = FakeLog;

    fn describe_grant(_: &AlwaysGranted) -> Vec<String> {
        vec!["always granted".into()]
    }

    fn real(_: &NoSettings, _: &BackendEnv) -> anyhow::Result<Arc<dyn LogBackend>> {
        Ok(Arc::new(TracingLog))
    }

    fn fake() -> (Arc<dyn LogBackend>, Arc<FakeLog>) {
        let fake = Arc::new(FakeLog::default());
        (fake.clone(), fake)
    }

    fn for_call(
        backend: &Arc<dyn LogBackend>,
        _: &AlwaysGranted,
        limits: &LogLimits,
        call: &Arc<Call>,
    ) -> Self {
        PluginLog {
            backend: backend.clone(),
            limits: *limits,
            call: call.clone(),
            spent: Mutex::default(),
            dropped: Mutex::default(),
        }
    }

    fn add_to_linker<T: Send + 'static>(
        linker: &mut Linker<T>,
        get: fn(&mut T) -> &mut Self,
    ) -> wasmtime::Result<()> {
        log::add_to_linker::<T, HasSelf<Self>>(linker, get)
    }
}

/// The WIT's functions, each on the adapter method that does it.
impl wit::Functions for PluginLog {
    async fn log(&self, level: Level, message: String) {
        self.log(level, &message).await;
    }
}
