//! The `log` adapter of one reconcile: tags lines with the plugin's name and
//! keeps them within the per-reconcile budget.

use super::backend::{Level, LogBackend};
use super::fake::FakeLog;
use super::grants::LogBudget;
use super::real::TracingLog;
use crate::capabilities::call::Call;
use crate::capabilities::capability::{AlwaysGranted, BackendEnv, Capability, NoSettings};
use std::sync::{Arc, Mutex};

pub struct PluginLog {
    backend: Arc<dyn LogBackend>,
    pub(super) call: Arc<Call>,
    budget: Mutex<LogBudget>,
}

impl Capability for PluginLog {
    const NAME: &'static str = "log";
    const MUTATIONS: &'static [&'static str] = &[];
    type Grant = AlwaysGranted;
    type Settings = NoSettings;
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

    fn for_call(backend: &Arc<dyn LogBackend>, _: &AlwaysGranted, call: &Arc<Call>) -> Self {
        PluginLog {
            backend: backend.clone(),
            call: call.clone(),
            budget: Mutex::default(),
        }
    }

    fn add_to_linker<T: Send + 'static>(
        linker: &mut wasmtime::component::Linker<T>,
        get: fn(&mut T) -> &mut Self,
    ) -> wasmtime::Result<()> {
        super::wit::add_to_linker(linker, get)
    }
}

impl PluginLog {
    /// Emit one line; false when it was dropped because the budget is used up.
    pub async fn log(&self, level: Level, message: &str) -> bool {
        if !self.budget.lock().unwrap().admit(message.len()) {
            return false;
        }
        self.backend.emit(&self.call.plugin, level, message).await;
        true
    }

    /// Lines dropped so far in this reconcile.
    pub fn dropped(&self) -> usize {
        self.budget.lock().unwrap().dropped()
    }
}
