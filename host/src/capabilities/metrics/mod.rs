//! `tend:plugin/metrics`: a plugin's own counters and gauges on `/metrics`,
//! bounded in number and shape per plugin.

//!
//! This file holds the capability; `wit.rs` (generated) its WIT binding. The series store is
//! in memory already, so tests use it as the fake and read it back through
//! its rendering.

mod adapter;
mod backend;
mod grants;
mod real;
mod wit;

pub use adapter::PluginMetrics;
pub use backend::{Kind, MetricsBackend};
pub use real::SeriesStore;

use crate::capabilities::call::Call;
use crate::capabilities::capability::{
    AlwaysGranted, BackendEnv, Capability, NoLimits, NoSettings,
};
use crate::wit::tend::plugin::metrics;
use std::sync::Arc;
use wasmtime::component::{HasSelf, Linker};

impl Capability for PluginMetrics {
    const NAME: &'static str = "metrics";
    const MUTATIONS: &'static [&'static str] = &[];
    type Grant = AlwaysGranted;
    type Settings = NoSettings;
    type Limits = NoLimits;
    type Backend = dyn MetricsBackend;
    type Fake = SeriesStore;

    fn describe_grant(_: &AlwaysGranted) -> Vec<String> {
        vec!["always granted".into()]
    }

    fn real(_: &NoSettings, _: &BackendEnv) -> anyhow::Result<Arc<dyn MetricsBackend>> {
        Ok(Arc::new(SeriesStore::default()))
    }

    fn fake() -> (Arc<dyn MetricsBackend>, Arc<SeriesStore>) {
        let fake = Arc::new(SeriesStore::default());
        (fake.clone(), fake)
    }

    fn for_call(
        backend: &Arc<dyn MetricsBackend>,
        _: &AlwaysGranted,
        _: &NoLimits,
        call: &Arc<Call>,
    ) -> Self {
        PluginMetrics {
            backend: backend.clone(),
            call: call.clone(),
        }
    }

    fn add_to_linker<T: Send + 'static>(
        linker: &mut Linker<T>,
        get: fn(&mut T) -> &mut Self,
    ) -> wasmtime::Result<()> {
        metrics::add_to_linker::<T, HasSelf<Self>>(linker, get)
    }

    /// The series plugins recorded, of plugins still configured.
    fn render_metrics(backend: &dyn MetricsBackend, configured: &dyn Fn(&str) -> bool) -> String {
        backend.render(configured)
    }
}

use crate::capabilities::CapError;

/// The WIT's functions, each on the adapter method that does it.
impl wit::Functions for PluginMetrics {
    async fn counter_add(
        &self,
        name: String,
        labels: Vec<(String, String)>,
        value: f64,
    ) -> Result<(), CapError> {
        self.record(Kind::Counter, &name, &labels, value)
    }
    async fn gauge_set(
        &self,
        name: String,
        labels: Vec<(String, String)>,
        value: f64,
    ) -> Result<(), CapError> {
        self.record(Kind::Gauge, &name, &labels, value)
    }
}
