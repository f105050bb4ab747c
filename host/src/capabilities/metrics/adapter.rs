//! The `metrics` adapter of one reconcile: checks each series' shape and
//! records it under the plugin's name.

use super::backend::{Kind, MetricsBackend};
use super::fake::FakeMetrics;
use super::grants::check;
use super::real::SeriesStore;
use crate::capabilities::call::Call;
use crate::capabilities::capability::{AlwaysGranted, BackendEnv, Capability, NoSettings};
use crate::capabilities::error::CapError;
use std::sync::Arc;

pub struct PluginMetrics {
    backend: Arc<dyn MetricsBackend>,
    pub(super) call: Arc<Call>,
}

impl Capability for PluginMetrics {
    const NAME: &'static str = "metrics";
    const MUTATIONS: &'static [&'static str] = &[];
    type Grant = AlwaysGranted;
    type Settings = NoSettings;
    type Backend = dyn MetricsBackend;
    type Fake = FakeMetrics;

    fn describe_grant(_: &AlwaysGranted) -> Vec<String> {
        vec!["always granted".into()]
    }

    fn real(_: &NoSettings, _: &BackendEnv) -> anyhow::Result<Arc<dyn MetricsBackend>> {
        Ok(Arc::new(SeriesStore::default()))
    }

    fn fake() -> (Arc<dyn MetricsBackend>, Arc<FakeMetrics>) {
        let fake = Arc::new(FakeMetrics::default());
        (fake.clone(), fake)
    }

    fn for_call(backend: &Arc<dyn MetricsBackend>, _: &AlwaysGranted, call: &Arc<Call>) -> Self {
        PluginMetrics {
            backend: backend.clone(),
            call: call.clone(),
        }
    }

    fn add_to_linker<T: Send + 'static>(
        linker: &mut wasmtime::component::Linker<T>,
        get: fn(&mut T) -> &mut Self,
    ) -> wasmtime::Result<()> {
        super::wit::add_to_linker(linker, get)
    }
}

impl PluginMetrics {
    pub fn record(
        &self,
        kind: Kind,
        name: &str,
        labels: &[(String, String)],
        value: f64,
    ) -> Result<(), CapError> {
        check(kind, name, labels, value)?;
        self.backend
            .record(&self.call.plugin, kind, name, labels, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::testing::call;

    #[test]
    fn plugins_record_under_their_own_name_and_counters_only_grow() {
        let (backend, store) = PluginMetrics::fake();
        let metrics =
            PluginMetrics::for_call(&backend, &AlwaysGranted, &call("mirror-gate", false));
        metrics.record(Kind::Counter, "pulls", &[], 2.0).unwrap();
        assert_eq!(
            metrics
                .record(Kind::Counter, "pulls", &[], -1.0)
                .unwrap_err()
                .kind(),
            "invalid"
        );
        assert_eq!(
            metrics
                .record(Kind::Gauge, "pulls_total", &[], 1.0)
                .unwrap_err()
                .kind(),
            "invalid"
        );
        let spoof = vec![("plugin".to_string(), "other".to_string())];
        assert_eq!(
            metrics
                .record(Kind::Gauge, "up", &spoof, 1.0)
                .unwrap_err()
                .kind(),
            "invalid"
        );
        for host_family in ["state", "last_success_timestamp_seconds"] {
            assert_eq!(
                metrics
                    .record(Kind::Gauge, host_family, &[], 1.0)
                    .unwrap_err()
                    .kind(),
                "invalid"
            );
        }
        assert_eq!(
            metrics
                .record(Kind::Counter, "load_errors", &[], 1.0)
                .unwrap_err()
                .kind(),
            "invalid"
        );
        assert!(
            store
                .render(&|_| true)
                .contains("tend_plugin_pulls_total{plugin=\"mirror-gate\"} 2\n")
        );
    }
}
