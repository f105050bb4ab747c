//! The `metrics` adapter of one reconcile: checks each series' shape and
//! records it under the plugin's name.

use super::backend::{Kind, MetricsBackend};
use super::grants::check;
use crate::capabilities::call::Call;
use crate::capabilities::error::CapError;
use std::sync::Arc;

pub struct PluginMetrics {
    pub(super) backend: Arc<dyn MetricsBackend>,
    pub(super) call: Arc<Call>,
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
    use crate::capabilities::{Capability, capability::AlwaysGranted};

    #[test]
    fn plugins_record_under_their_own_name_and_counters_only_grow() {
        let (backend, store) = PluginMetrics::fake();
        let metrics = PluginMetrics::for_call(
            &backend,
            &AlwaysGranted,
            &Default::default(),
            &call("mirror-gate", false),
        );
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
