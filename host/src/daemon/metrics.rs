//! Prometheus metrics (text format on `/metrics`).

use super::table::{Lifecycle, PluginTable};
use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
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
    pub budget_refusals: IntCounterVec,
    plugin_state: IntGaugeVec,
    consecutive_failures: IntGaugeVec,
    /// Seconds, fractional: a sub-second interval must not read as 0 (an alert
    /// multiplies it).
    interval: GaugeVec,
    plugins_loaded: IntGauge,
    ready: IntGauge,
    config_rejected: IntGauge,
    leader: IntGauge,
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
        let budget_refusals = counter(
            "tend_budget_refusals_total",
            "Mutations a host budget refused, by plugin.",
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
        let plugin_gauge = |name: &str, help: &str| {
            register(
                &registry,
                IntGaugeVec::new(Opts::new(name, help), &["plugin"]).unwrap(),
            )
        };
        let consecutive_failures = plugin_gauge(
            "tend_plugin_consecutive_failures",
            "Failed reconciles in a row (0 after a success).",
        );
        let interval = register(
            &registry,
            GaugeVec::new(
                Opts::new(
                    "tend_plugin_interval_seconds",
                    "The plugin's configured interval (enabled plugins that have one).",
                ),
                &["plugin"],
            )
            .unwrap(),
        );
        let gauge =
            |name: &str, help: &str| register(&registry, IntGauge::new(name, help).unwrap());
        let plugins_loaded = gauge("tend_plugins_loaded", "Plugins with a loaded component.");
        let ready = gauge(
            "tend_ready",
            "1 when /readyz answers 200: the last config change applied and every enabled plugin runs the file the config names.",
        );
        let config_rejected = gauge(
            "tend_config_rejected",
            "1 while the last config change was rejected (the last good config keeps running).",
        );
        let start_time = gauge(
            "tend_start_time_seconds",
            "Unix time this tend process started (what a plugin that never succeeded is measured from).",
        );
        start_time.set(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64),
        );
        let leader = gauge(
            "tend_leader",
            "1 while this host holds the [host.leader-election] Lease (only with leader election).",
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
            budget_refusals,
            plugin_state,
            consecutive_failures,
            interval,
            plugins_loaded,
            ready,
            config_rejected,
            leader,
            compile_cache,
            reloads,
        }
    }

    /// The text exposition, with the per-plugin gauges refreshed from `table`
    /// and the host's from `host`. Every configured plugin's series of the
    /// families alerts read are present from the start (zero), so an alert on
    /// a rate or an absence sees them.
    pub fn render(&self, table: &PluginTable, host: &HostGauges) -> String {
        self.plugin_state.reset();
        self.consecutive_failures.reset();
        self.interval.reset();
        for (name, entry) in &table.plugins {
            let name = name.as_str();
            for state in Lifecycle::ALL {
                self.plugin_state
                    .with_label_values(&[name, state.name()])
                    .set(i64::from(entry.state == state));
            }
            self.consecutive_failures
                .with_label_values(&[name])
                .set(i64::from(entry.failures));
            if let (true, Some(every)) = (entry.config.enabled, entry.config.interval) {
                self.interval
                    .with_label_values(&[name])
                    .set(every.as_secs_f64());
            }
            for result in RECONCILE_RESULTS {
                self.reconciles.with_label_values(&[name, result]);
            }
            self.load_errors.with_label_values(&[name]);
            self.budget_refusals.with_label_values(&[name]);
        }
        self.ready.set(i64::from(host.ready));
        self.config_rejected.set(i64::from(host.config_rejected));
        self.leader.set(i64::from(host.leading.unwrap_or(false)));
        self.plugins_loaded.set(
            table
                .plugins
                .values()
                .filter(|e| e.compiled.is_some())
                .count() as i64,
        );
        let mut families = self.registry.gather();
        if host.leading.is_none() {
            families.retain(|f| f.name() != "tend_leader");
        }
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&families, &mut out)
            .expect("text encoding cannot fail");
        String::from_utf8(out).expect("metrics are UTF-8")
    }
}

/// The `result` labels of `tend_reconciles_total`.
pub const RECONCILE_RESULTS: [&str; 5] = ["ok", "error", "trap", "deadline", "memory"];

/// The host's own state for `/metrics`.
pub struct HostGauges {
    pub ready: bool,
    pub config_rejected: bool,
    /// Whether this host leads; None without `[host.leader-election]`.
    pub leading: Option<bool>,
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
            metrics.consecutive_failures.desc(),
            metrics.interval.desc(),
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

#[cfg(test)]
mod render_tests {
    use super::*;
    use crate::daemon::table::PluginEntry;

    fn table() -> PluginTable {
        let text = "[host]\nplugins-dir = '/p'\nstate-dir = '/s'\n[plugins.a]\ninterval = '30s'\n[plugins.b]\nenabled = false\ninterval = '1m'\n";
        let config = crate::config::Config::parse(std::path::Path::new("/t.toml"), text).unwrap();
        let mut table = PluginTable::default();
        for (name, plugin) in &config.plugins {
            table
                .plugins
                .insert(name.clone(), PluginEntry::new(plugin.clone()));
        }
        table.plugins.get_mut("a").unwrap().failures = 3;
        table
    }

    #[test]
    fn the_families_alerts_read_are_present_from_the_start() {
        let metrics = Metrics::new();
        let host = HostGauges {
            ready: false,
            config_rejected: true,
            leading: None,
        };
        let text = metrics.render(&table(), &host);
        for line in [
            "tend_reconciles_total{plugin=\"a\",result=\"error\"} 0",
            "tend_plugin_load_errors_total{plugin=\"b\"} 0",
            "tend_budget_refusals_total{plugin=\"a\"} 0",
            "tend_plugin_consecutive_failures{plugin=\"a\"} 3",
            "tend_plugin_interval_seconds{plugin=\"a\"} 30",
            "tend_ready 0",
            "tend_config_rejected 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from:\n{text}"
            );
        }
        // Disabled plugins have no interval; hosts without an election no leader gauge.
        assert!(
            !text.contains("tend_plugin_interval_seconds{plugin=\"b\"}"),
            "{text}"
        );
        assert!(!text.contains("tend_leader"), "{text}");
        let host = HostGauges {
            ready: true,
            config_rejected: false,
            leading: Some(false),
        };
        let text = metrics.render(&table(), &host);
        assert!(text.lines().any(|l| l == "tend_leader 0"), "{text}");
        assert!(text.lines().any(|l| l == "tend_ready 1"), "{text}");
    }
}
