//! Prometheus metrics (text format on `/metrics`).

use super::table::{Lifecycle, PluginTable};
use prometheus::{
    GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
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

/// A host family: its name, help text and label names.
struct Family {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
}

const RECONCILES: Family = Family {
    name: "tend_reconciles_total",
    help: "Reconciles by plugin and result (ok, error, trap, deadline, memory).",
    labels: &["plugin", "result"],
};
const CAPABILITY_CALLS: Family = Family {
    name: "tend_capability_calls_total",
    help: "Capability calls by plugin, capability, operation and result (ok or the error case).",
    labels: &["plugin", "capability", "operation", "result"],
};
const MUTATIONS: Family = Family {
    name: "tend_mutations_total",
    help: "Mutations through the gate by plugin, capability, operation and result (ok, error, planned, refused, interrupted).",
    labels: &["plugin", "capability", "operation", "result"],
};
const TRAPS: Family = Family {
    name: "tend_traps_total",
    help: "Reconciles stopped by the host, by cause (trap, deadline, memory).",
    labels: &["plugin", "cause"],
};
const LOAD_ERRORS: Family = Family {
    name: "tend_plugin_load_errors_total",
    help: "Component files that failed to compile or validate.",
    labels: &["plugin"],
};
const BUDGET_REFUSALS: Family = Family {
    name: "tend_budget_refusals_total",
    help: "Mutations a host budget refused, by plugin.",
    labels: &["plugin"],
};
const COMPILE_CACHE: Family = Family {
    name: "tend_compile_cache_total",
    help: "Component loads by compile-cache result: hit, precompiled (a build made ahead of time), miss (compiled, also where wasmtime refused a precompiled build), corrupt (an entry or precompiled build that failed its checksum or is not Tend's alone; compiled).",
    labels: &["result"],
};
const RELOADS: Family = Family {
    name: "tend_reloads_total",
    help: "Hot reloads by kind (plugin, config) and result (ok, error).",
    labels: &["kind", "result"],
};
const RECONCILE_SECONDS: Family = Family {
    name: "tend_reconcile_duration_seconds",
    help: "Wall time of one reconcile, instantiation included.",
    labels: &["plugin"],
};
/// From 100 µs (a cached no-op) to 30 s (a slow peer).
const RECONCILE_BUCKETS: [f64; 17] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];
const LAST_SUCCESS: Family = Family {
    name: "tend_plugin_last_success_timestamp_seconds",
    help: "Unix time of the last successful reconcile.",
    labels: &["plugin"],
};
const PLUGIN_STATE: Family = Family {
    name: "tend_plugin_state",
    help: "1 for the plugin's current lifecycle state, 0 for the others.",
    labels: &["plugin", "state"],
};
const CONSECUTIVE_FAILURES: Family = Family {
    name: "tend_plugin_consecutive_failures",
    help: "Failed reconciles in a row (0 after a success).",
    labels: &["plugin"],
};
const INTERVAL: Family = Family {
    name: "tend_plugin_interval_seconds",
    help: "The plugin's configured interval (enabled plugins that have one).",
    labels: &["plugin"],
};
const PLUGINS_LOADED: Family = Family {
    name: "tend_plugins_loaded",
    help: "Plugins with a loaded component.",
    labels: &[],
};
const READY: Family = Family {
    name: "tend_ready",
    help: "1 when /readyz answers 200: the last config change applied and every enabled plugin runs the file the config names.",
    labels: &[],
};
const CONFIG_REJECTED: Family = Family {
    name: "tend_config_rejected",
    help: "1 while the last config change was rejected (the last good config keeps running).",
    labels: &[],
};
const START_TIME: Family = Family {
    name: "tend_start_time_seconds",
    help: "Unix time this tend process started (what a plugin that never succeeded is measured from).",
    labels: &[],
};
const LEADER: Family = Family {
    name: "tend_leader",
    help: "1 while this host holds the [host.leader-election] Lease (only with leader election).",
    labels: &[],
};

impl Family {
    fn opts(&self) -> Opts {
        Opts::new(self.name, self.help)
    }

    fn counters(&self, registry: &Registry) -> IntCounterVec {
        register(
            registry,
            IntCounterVec::new(self.opts(), self.labels).unwrap(),
        )
    }

    fn int_gauges(&self, registry: &Registry) -> IntGaugeVec {
        register(
            registry,
            IntGaugeVec::new(self.opts(), self.labels).unwrap(),
        )
    }

    /// Fractional gauges: a sub-second interval must not read as 0.
    fn gauges(&self, registry: &Registry) -> GaugeVec {
        register(registry, GaugeVec::new(self.opts(), self.labels).unwrap())
    }

    fn histograms(&self, registry: &Registry, buckets: &[f64]) -> HistogramVec {
        let opts = HistogramOpts::new(self.name, self.help).buckets(buckets.to_vec());
        register(registry, HistogramVec::new(opts, self.labels).unwrap())
    }

    /// The one gauge of a family without labels.
    fn gauge(&self, registry: &Registry) -> IntGauge {
        debug_assert!(self.labels.is_empty(), "{} has labels", self.name);
        register(registry, IntGauge::with_opts(self.opts()).unwrap())
    }
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

/// `tend_start_time_seconds`, set once: what a plugin that never succeeded
/// is measured from.
fn register_start_time(registry: &Registry) {
    let start = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    START_TIME
        .gauge(registry)
        .set(start.map_or(0, |d| d.as_secs() as i64));
}

impl Metrics {
    pub fn new() -> Self {
        let r = Registry::new();
        register_start_time(&r);
        Metrics {
            reconciles: RECONCILES.counters(&r),
            reconcile_seconds: RECONCILE_SECONDS.histograms(&r, &RECONCILE_BUCKETS),
            capability_calls: CAPABILITY_CALLS.counters(&r),
            mutations: MUTATIONS.counters(&r),
            traps: TRAPS.counters(&r),
            load_errors: LOAD_ERRORS.counters(&r),
            last_success: LAST_SUCCESS.int_gauges(&r),
            budget_refusals: BUDGET_REFUSALS.counters(&r),
            plugin_state: PLUGIN_STATE.int_gauges(&r),
            consecutive_failures: CONSECUTIVE_FAILURES.int_gauges(&r),
            interval: INTERVAL.gauges(&r),
            plugins_loaded: PLUGINS_LOADED.gauge(&r),
            ready: READY.gauge(&r),
            config_rejected: CONFIG_REJECTED.gauge(&r),
            leader: LEADER.gauge(&r),
            compile_cache: COMPILE_CACHE.counters(&r),
            reloads: RELOADS.counters(&r),
            registry: r,
        }
    }

    /// The text exposition, with the per-plugin gauges refreshed from `table`
    /// and the host's from `host`. Every configured plugin's series of the
    /// families alerts read are present from the start (zero), so an alert on
    /// a rate or an absence sees them.
    pub fn render(&self, table: &PluginTable, host: &HostGauges) -> String {
        self.refresh_plugin_series(table);
        self.refresh_host_gauges(table, host);
        let mut families = self.registry.gather();
        if host.leading.is_none() {
            families.retain(|f| f.name() != "tend_leader");
        }
        crate::exposition::encode(&families)
    }

    /// The per-plugin gauges from `table`, and a zero series of the counters
    /// alerts read for every configured plugin.
    fn refresh_plugin_series(&self, table: &PluginTable) {
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
    }

    fn refresh_host_gauges(&self, table: &PluginTable, host: &HostGauges) {
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

    pub(super) fn table() -> PluginTable {
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

#[cfg(test)]
mod family_tests {
    use super::*;
    use crate::exposition::declared;

    /// One series in every labelled family, so the exposition declares each.
    fn touch_every_family(m: &Metrics) {
        let four = ["p", "kube", "get", "ok"];
        m.reconciles.with_label_values(&["p", "ok"]).inc();
        m.reconcile_seconds.with_label_values(&["p"]).observe(0.1);
        m.capability_calls.with_label_values(&four).inc();
        m.mutations.with_label_values(&four).inc();
        m.traps.with_label_values(&["p", "trap"]).inc();
        m.load_errors.with_label_values(&["p"]).inc();
        m.last_success.with_label_values(&["p"]).set(1);
        m.budget_refusals.with_label_values(&["p"]).inc();
        m.compile_cache.with_label_values(&["hit"]).inc();
        m.reloads.with_label_values(&["plugin", "ok"]).inc();
    }

    #[test]
    fn every_host_family_keeps_its_name_type_and_help() {
        let metrics = Metrics::new();
        touch_every_family(&metrics);
        let host = HostGauges {
            ready: true,
            config_rejected: false,
            leading: Some(true),
        };
        let text = metrics.render(&render_tests::table(), &host);
        let family = |name: &str, kind: &str, help: &str| (name.into(), kind.into(), help.into());
        assert_eq!(
            declared(&text),
            [
                family(
                    "tend_budget_refusals_total",
                    "counter",
                    "Mutations a host budget refused, by plugin."
                ),
                family(
                    "tend_capability_calls_total",
                    "counter",
                    "Capability calls by plugin, capability, operation and result (ok or the error case)."
                ),
                family(
                    "tend_compile_cache_total",
                    "counter",
                    "Component loads by compile-cache result: hit, precompiled (a build made ahead of time), miss (compiled, also where wasmtime refused a precompiled build), corrupt (an entry or precompiled build that failed its checksum or is not Tend's alone; compiled)."
                ),
                family(
                    "tend_config_rejected",
                    "gauge",
                    "1 while the last config change was rejected (the last good config keeps running)."
                ),
                family(
                    "tend_leader",
                    "gauge",
                    "1 while this host holds the [host.leader-election] Lease (only with leader election)."
                ),
                family(
                    "tend_mutations_total",
                    "counter",
                    "Mutations through the gate by plugin, capability, operation and result (ok, error, planned, refused, interrupted)."
                ),
                family(
                    "tend_plugin_consecutive_failures",
                    "gauge",
                    "Failed reconciles in a row (0 after a success)."
                ),
                family(
                    "tend_plugin_interval_seconds",
                    "gauge",
                    "The plugin's configured interval (enabled plugins that have one)."
                ),
                family(
                    "tend_plugin_last_success_timestamp_seconds",
                    "gauge",
                    "Unix time of the last successful reconcile."
                ),
                family(
                    "tend_plugin_load_errors_total",
                    "counter",
                    "Component files that failed to compile or validate."
                ),
                family(
                    "tend_plugin_state",
                    "gauge",
                    "1 for the plugin's current lifecycle state, 0 for the others."
                ),
                family(
                    "tend_plugins_loaded",
                    "gauge",
                    "Plugins with a loaded component."
                ),
                family(
                    "tend_ready",
                    "gauge",
                    "1 when /readyz answers 200: the last config change applied and every enabled plugin runs the file the config names."
                ),
                family(
                    "tend_reconcile_duration_seconds",
                    "histogram",
                    "Wall time of one reconcile, instantiation included."
                ),
                family(
                    "tend_reconciles_total",
                    "counter",
                    "Reconciles by plugin and result (ok, error, trap, deadline, memory)."
                ),
                family(
                    "tend_reloads_total",
                    "counter",
                    "Hot reloads by kind (plugin, config) and result (ok, error)."
                ),
                family(
                    "tend_start_time_seconds",
                    "gauge",
                    "Unix time this tend process started (what a plugin that never succeeded is measured from)."
                ),
                family(
                    "tend_traps_total",
                    "counter",
                    "Reconciles stopped by the host, by cause (trap, deadline, memory)."
                ),
            ]
        );
        for line in [
            "tend_capability_calls_total{capability=\"kube\",operation=\"get\",plugin=\"p\",result=\"ok\"} 1",
            "tend_reconcile_duration_seconds_bucket{plugin=\"p\",le=\"0.0001\"} 0",
            "tend_reconcile_duration_seconds_bucket{plugin=\"p\",le=\"30\"} 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from:\n{text}"
            );
        }
    }
}
