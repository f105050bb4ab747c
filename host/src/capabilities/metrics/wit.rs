//! `tend:plugin/metrics` answered by the adapter.

use super::adapter::PluginMetrics;
use super::backend::Kind;
use crate::wit::tend::plugin::metrics;
use crate::wit::types;
use wasmtime::component::{HasSelf, Linker};

pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut PluginMetrics,
) -> wasmtime::Result<()> {
    metrics::add_to_linker::<T, HasSelf<PluginMetrics>>(linker, get)
}

impl metrics::Host for PluginMetrics {
    async fn counter_add(
        &mut self,
        name: String,
        labels: Vec<(String, String)>,
        value: f64,
    ) -> Result<(), types::Error> {
        let result = self.record(Kind::Counter, &name, &labels, value);
        self.call.counted("metrics", "counter-add", result)
    }
    async fn gauge_set(
        &mut self,
        name: String,
        labels: Vec<(String, String)>,
        value: f64,
    ) -> Result<(), types::Error> {
        let result = self.record(Kind::Gauge, &name, &labels, value);
        self.call.counted("metrics", "gauge-set", result)
    }
}
