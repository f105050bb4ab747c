//! The series of every plugin, in memory, rendered in the Prometheus text
//! format under `tend_plugin_<name>` with the plugin as a label (the family
//! names of `tend_rules::metrics::family`, which never name a host family).

use super::backend::{Kind, MetricsBackend};
use crate::capabilities::error::CapError;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use tend_rules::metrics::{MAX_SERIES, family};

type SeriesKey = (Kind, String, Vec<(String, String)>);

#[derive(Default)]
pub struct SeriesStore {
    plugins: Mutex<BTreeMap<String, BTreeMap<SeriesKey, f64>>>,
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl MetricsBackend for SeriesStore {
    fn record(
        &self,
        plugin: &str,
        kind: Kind,
        name: &str,
        labels: &[(String, String)],
        value: f64,
    ) -> Result<(), CapError> {
        let mut plugins = self.plugins.lock().unwrap();
        let series = plugins.entry(plugin.to_string()).or_default();
        let mut sorted = labels.to_vec();
        sorted.sort();
        let key = (kind, name.to_string(), sorted);
        if !series.contains_key(&key) && series.len() >= MAX_SERIES {
            return Err(tend_rules::metrics::too_many_series(name, plugin));
        }
        let slot = series.entry(key).or_insert(0.0);
        match kind {
            Kind::Counter => *slot += value,
            Kind::Gauge => *slot = value,
        }
        Ok(())
    }

    fn render(&self, keep: &dyn Fn(&str) -> bool) -> String {
        // One family (HELP, TYPE, samples) per exported name, across plugins.
        let mut families: BTreeMap<(String, Kind), Vec<String>> = BTreeMap::new();
        for (plugin, series) in self.plugins.lock().unwrap().iter().filter(|(p, _)| keep(p)) {
            for ((kind, name, labels), value) in series {
                let mut sample = format!("{}{{plugin=\"{}\"", family(*kind, name), escape(plugin));
                for (label, text) in labels {
                    let _ = write!(sample, ",{label}=\"{}\"", escape(text));
                }
                let _ = write!(sample, "}} {value}");
                families
                    .entry((family(*kind, name), *kind))
                    .or_default()
                    .push(sample);
            }
        }
        let mut out = String::new();
        for ((name, kind), samples) in families {
            let kind = match kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
            };
            let _ = writeln!(
                out,
                "# HELP {name} Recorded by plugins through tend:plugin/metrics.\n# TYPE {name} {kind}"
            );
            for sample in samples {
                let _ = writeln!(out, "{sample}");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn series_render_per_family_with_the_plugin_label() {
        let store = SeriesStore::default();
        let cache = labels(&[("cache", "http://a:5000\"x")]);
        store
            .record(
                "mirror-gate",
                Kind::Counter,
                "withdrawn_seconds",
                &cache,
                1.5,
            )
            .unwrap();
        store
            .record(
                "mirror-gate",
                Kind::Counter,
                "withdrawn_seconds",
                &cache,
                2.0,
            )
            .unwrap();
        store
            .record("mirror-gate", Kind::Gauge, "withdrawn", &cache, 1.0)
            .unwrap();
        store
            .record("gone", Kind::Gauge, "withdrawn", &[], 1.0)
            .unwrap();
        let text = store.render(&|p| p != "gone");
        assert!(
            text.contains("# TYPE tend_plugin_withdrawn_seconds_total counter\n"),
            "{text}"
        );
        assert!(text.contains("tend_plugin_withdrawn_seconds_total{plugin=\"mirror-gate\",cache=\"http://a:5000\\\"x\"} 3.5\n"), "{text}");
        assert!(
            text.contains(
                "tend_plugin_withdrawn{plugin=\"mirror-gate\",cache=\"http://a:5000\\\"x\"} 1\n"
            ),
            "{text}"
        );
        assert!(!text.contains("gone"), "{text}");
    }

    #[test]
    fn a_plugin_cannot_grow_past_its_series_limit() {
        let store = SeriesStore::default();
        for i in 0..MAX_SERIES {
            store
                .record(
                    "flood",
                    Kind::Gauge,
                    "g",
                    &labels(&[("i", &i.to_string())]),
                    1.0,
                )
                .unwrap();
        }
        let err = store
            .record("flood", Kind::Gauge, "g", &labels(&[("i", "new")]), 1.0)
            .unwrap_err();
        assert_eq!(err.kind(), "budget-exhausted");
        store
            .record("flood", Kind::Gauge, "g", &labels(&[("i", "0")]), 2.0)
            .unwrap();
        store.record("other", Kind::Gauge, "g", &[], 1.0).unwrap();
    }
}
