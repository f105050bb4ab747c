//! Prometheus metrics (text format on `/metrics`).

use super::table::{Lifecycle, PluginTable};
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

pub struct Metrics {
    registry: Registry,
    pub reconciles: IntCounterVec,
    pub reconcile_seconds: HistogramVec,
    pub capability_calls: IntCounterVec,
    pub mutations: IntCounterVec,
    pub traps: IntCounterVec,
    pub load_errors: IntCounterVec,
    pub last_success: IntGaugeVec,
    plugin_state: IntGaugeVec,
    plugins_loaded: IntGauge,
    pub compile_cache: IntCounterVec,
    pub reloads: IntCounterVec,
}

/// Register a host family. Plugin families share the `tend_plugin_` prefix,
/// so every host family under it must be one plugins are refused
/// (`tend_rules::metrics::HOST_FAMILIES`), or `/metrics` could declare it
/// twice and Prometheus would reject the whole scrape.
fn register<T: prometheus::core::Collector + Clone + 'static>(registry: &Registry, metric: T) -> T {
    for desc in metric.desc() {
        let name = desc.fq_name.as_str();
        assert!(
            !name.starts_with("tend_plugin_") || tend_rules::metrics::HOST_FAMILIES.contains(&name),
            "host family {name} is under the plugins' prefix: add it to tend_rules::metrics::HOST_FAMILIES"
        );
    }
    registry
        .register(Box::new(metric.clone()))
        .expect("metric names are unique");
    metric
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let counter = |name: &str, help: &str, labels: &[&str]| {
            register(
                &registry,
                IntCounterVec::new(Opts::new(name, help), labels).unwrap(),
            )
        };
        let reconciles = counter(
            "tend_reconciles_total",
            "Reconciles by plugin and result (ok, error, trap, deadline, memory).",
            &["plugin", "result"],
        );
        let capability_calls = counter(
            "tend_capability_calls_total",
            "Capability calls by plugin, capability, operation and result (ok or the error case).",
            &["plugin", "capability", "operation", "result"],
        );
        let mutations = counter(
            "tend_mutations_total",
            "Mutations through the gate by plugin, capability, operation and result (ok, error, planned, refused, interrupted).",
            &["plugin", "capability", "operation", "result"],
        );
        let traps = counter(
            "tend_traps_total",
            "Reconciles stopped by the host, by cause (trap, deadline, memory).",
            &["plugin", "cause"],
        );
        let load_errors = counter(
            "tend_plugin_load_errors_total",
            "Component files that failed to compile or validate.",
            &["plugin"],
        );
        let compile_cache = counter(
            "tend_compile_cache_total",
            "Component loads by compile-cache result (hit, miss, corrupt).",
            &["result"],
        );
        let reloads = counter(
            "tend_reloads_total",
            "Hot reloads by kind (plugin, config) and result (ok, error).",
            &["kind", "result"],
        );
        let reconcile_seconds = register(
            &registry,
            HistogramVec::new(
                HistogramOpts::new(
                    "tend_reconcile_duration_seconds",
                    "Wall time of one reconcile, instantiation included.",
                )
                .buckets(vec![
                    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                    0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                ]),
                &["plugin"],
            )
            .unwrap(),
        );
        let last_success = register(
            &registry,
            IntGaugeVec::new(
                Opts::new(
                    "tend_plugin_last_success_timestamp_seconds",
                    "Unix time of the last successful reconcile.",
                ),
                &["plugin"],
            )
            .unwrap(),
        );
        let plugin_state = register(
            &registry,
            IntGaugeVec::new(
                Opts::new(
                    "tend_plugin_state",
                    "1 for the plugin's current lifecycle state, 0 for the others.",
                ),
                &["plugin", "state"],
            )
            .unwrap(),
        );
        let plugins_loaded = register(
            &registry,
            IntGauge::new("tend_plugins_loaded", "Plugins with a loaded component.").unwrap(),
        );
        Metrics {
            registry,
            reconciles,
            reconcile_seconds,
            capability_calls,
            mutations,
            traps,
            load_errors,
            last_success,
            plugin_state,
            plugins_loaded,
            compile_cache,
            reloads,
        }
    }

    /// The text exposition, with the per-plugin gauges refreshed from `table`.
    pub fn render(&self, table: &PluginTable) -> String {
        self.plugin_state.reset();
        for (name, entry) in &table.plugins {
            for state in Lifecycle::ALL {
                self.plugin_state
                    .with_label_values(&[name.as_str(), state.name()])
                    .set(i64::from(entry.state == state));
            }
        }
        self.plugins_loaded.set(
            table
                .plugins
                .values()
                .filter(|e| e.compiled.is_some())
                .count() as i64,
        );
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding cannot fail");
        String::from_utf8(out).expect("metrics are UTF-8")
    }
}

/// The `result` label of `tend_mutations_total`.
pub fn mutation_result(mutation: &crate::capabilities::Mutation) -> &'static str {
    let result = mutation.result.as_str();
    if result.starts_with("budget-exhausted") {
        "refused"
    } else if mutation.dry_run {
        "planned"
    } else if result == crate::journal::INTERRUPTED {
        "interrupted"
    } else if result == "ok" || result.starts_with("ok ") {
        "ok"
    } else {
        "error"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::core::Collector;

    #[test]
    fn every_reserved_family_is_one_the_host_declares() {
        let metrics = Metrics::new();
        let declared: Vec<String> = [
            metrics.plugin_state.desc(),
            metrics.last_success.desc(),
            metrics.load_errors.desc(),
        ]
        .into_iter()
        .flatten()
        .map(|d| d.fq_name.clone())
        .collect();
        let mut reserved = tend_rules::metrics::HOST_FAMILIES
            .map(String::from)
            .to_vec();
        reserved.sort();
        let mut declared = declared;
        declared.sort();
        assert_eq!(declared, reserved);
    }
}
