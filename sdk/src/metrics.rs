//! `tend:plugin/metrics`: counters and gauges the host exports on `/metrics`
//! as `tend_plugin_<name>{plugin="<plugin>", <labels>}`. Always granted and
//! bounded by the rules of [`tend_rules::metrics`]: names whose family the
//! host declares itself (`state`, `last_success_timestamp_seconds`, the
//! counter `load_errors`) are `invalid`.

use crate::{NotProvided, Result};
use std::cell::RefCell;
use std::collections::BTreeMap;
use tend_rules::metrics::{Kind, MAX_SERIES, check_series};

/// Numbers for operators' dashboards. A series is a name plus its label
/// values; a plugin has at most [`MAX_SERIES`] of them.
pub trait Metrics {
    /// Add `value` (not negative) to a counter; its exported name ends in `_total`.
    fn counter_add(&self, name: &str, labels: &[(&str, &str)], value: f64) -> Result<()>;
    /// Set a gauge to `value`.
    fn gauge_set(&self, name: &str, labels: &[(&str, &str)], value: f64) -> Result<()>;
}

impl Metrics for NotProvided {
    fn counter_add(&self, _: &str, _: &[(&str, &str)], _: f64) -> Result<()> {
        Err(NotProvided::denied("metrics"))
    }
    fn gauge_set(&self, _: &str, _: &[(&str, &str)], _: f64) -> Result<()> {
        Err(NotProvided::denied("metrics"))
    }
}

fn owned(labels: &[(&str, &str)]) -> Vec<(String, String)> {
    labels
        .iter()
        .map(|(label, value)| (label.to_string(), value.to_string()))
        .collect()
}

/// The wasm glue: the host's `metrics` import.
#[cfg(target_arch = "wasm32")]
pub(crate) mod wasm {
    use super::owned;
    use crate::Result;
    use crate::bindings::tend::plugin::metrics as wit;
    use crate::types::from_wit_error;

    pub(crate) struct WasmMetrics;

    impl crate::Metrics for WasmMetrics {
        fn counter_add(&self, name: &str, labels: &[(&str, &str)], value: f64) -> Result<()> {
            wit::counter_add(name, &owned(labels), value).map_err(from_wit_error)
        }
        fn gauge_set(&self, name: &str, labels: &[(&str, &str)], value: f64) -> Result<()> {
            wit::gauge_set(name, &owned(labels), value).map_err(from_wit_error)
        }
    }
}

/// A series: its kind, name and labels, sorted (label order does not make
/// another series; a counter and a gauge of one name are exported apart, the
/// counter with `_total`).
type Series = (Kind, String, Vec<(String, String)>);

fn series(kind: Kind, name: &str, labels: &[(&str, &str)]) -> Series {
    let mut labels = owned(labels);
    labels.sort();
    (kind, name.to_string(), labels)
}

/// The fake: the host's rules and messages ([`check_series`]: counters only
/// grow, `_total` names only for counters, no host family; at most
/// [`MAX_SERIES`] series),
/// and the values for tests to read back with [`FakeMetrics::counter`] and
/// [`FakeMetrics::gauge`].
pub struct FakeMetrics {
    plugin: String,
    values: RefCell<BTreeMap<Series, f64>>,
}

impl crate::fake::Fake for FakeMetrics {
    fn for_plugin(plugin: &str) -> Self {
        FakeMetrics::new(plugin)
    }
}

impl Default for FakeMetrics {
    /// For a plugin named "test".
    fn default() -> Self {
        FakeMetrics::new("test")
    }
}

impl FakeMetrics {
    /// No series yet; `plugin` is named in refusal messages.
    pub fn new(plugin: &str) -> Self {
        FakeMetrics {
            plugin: plugin.to_string(),
            values: RefCell::default(),
        }
    }

    /// A counter's value: 0 until something is added.
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.value(Kind::Counter, name, labels).unwrap_or(0.0)
    }

    /// A gauge's value, none until it is set (a gauge has no natural zero).
    pub fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.value(Kind::Gauge, name, labels)
    }

    fn value(&self, kind: Kind, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.values
            .borrow()
            .get(&series(kind, name, labels))
            .copied()
    }

    /// Check the call as the host does, then let `update` change the value.
    fn record(
        &self,
        kind: Kind,
        name: &str,
        labels: &[(&str, &str)],
        value: f64,
        update: impl FnOnce(&mut f64),
    ) -> Result<()> {
        check_series(kind, name, &owned(labels), value).map_err(crate::Error::from)?;
        let key = series(kind, name, labels);
        let mut values = self.values.borrow_mut();
        if !values.contains_key(&key) && values.len() >= MAX_SERIES {
            return Err(tend_rules::metrics::too_many_series(name, &self.plugin));
        }
        update(values.entry(key).or_insert(0.0));
        Ok(())
    }
}

impl Metrics for FakeMetrics {
    fn counter_add(&self, name: &str, labels: &[(&str, &str)], value: f64) -> Result<()> {
        self.record(Kind::Counter, name, labels, value, |total| *total += value)
    }
    fn gauge_set(&self, name: &str, labels: &[(&str, &str)], value: f64) -> Result<()> {
        self.record(Kind::Gauge, name, labels, value, |current| *current = value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn counters_add_up_and_gauges_keep_the_last_value() {
        let metrics = FakeMetrics::default();
        metrics
            .counter_add("withdrawn_seconds", &[("cache", "a")], 1.5)
            .unwrap();
        metrics
            .counter_add("withdrawn_seconds", &[("cache", "a")], 2.0)
            .unwrap();
        metrics
            .gauge_set("withdrawn", &[("cache", "a")], 1.0)
            .unwrap();
        metrics
            .gauge_set("withdrawn", &[("cache", "a")], 0.0)
            .unwrap();
        assert_eq!(metrics.counter("withdrawn_seconds", &[("cache", "a")]), 3.5);
        assert_eq!(metrics.counter("withdrawn_seconds", &[("cache", "b")]), 0.0);
        assert_eq!(metrics.gauge("withdrawn", &[("cache", "a")]), Some(0.0));
        assert_eq!(metrics.gauge("withdrawn", &[("cache", "b")]), None);
        assert_eq!(
            metrics.gauge("withdrawn_seconds", &[("cache", "a")]),
            None,
            "a counter is no gauge"
        );
    }

    #[test]
    fn label_order_does_not_make_another_series() {
        let metrics = FakeMetrics::default();
        metrics
            .counter_add("hits", &[("a", "1"), ("b", "2")], 1.0)
            .unwrap();
        metrics
            .counter_add("hits", &[("b", "2"), ("a", "1")], 1.0)
            .unwrap();
        assert_eq!(metrics.counter("hits", &[("a", "1"), ("b", "2")]), 2.0);
    }

    #[test]
    fn malformed_series_and_negative_increments_are_invalid() {
        let metrics = FakeMetrics::default();
        for result in [
            metrics.counter_add("Bad-Name", &[], 1.0),
            metrics.gauge_set("ok", &[("plugin", "x")], 1.0),
            metrics.gauge_set("ok", &[], f64::INFINITY),
            metrics.counter_add("ok", &[], -1.0),
            metrics.gauge_set("state", &[], 1.0),
            metrics.counter_add("load_errors", &[], 1.0),
        ] {
            assert_eq!(result.unwrap_err().kind(), "invalid");
        }
        assert_eq!(
            metrics.gauge_set("pulls_total", &[], 1.0),
            Err(Error::Invalid(
                "metric \"pulls_total\": `_total` names are for counters; drop the suffix".into()
            ))
        );
    }

    #[test]
    fn a_new_series_beyond_the_limit_is_refused_and_old_ones_still_count() {
        let metrics = FakeMetrics::new("mirror-gate");
        for i in 0..MAX_SERIES {
            metrics
                .gauge_set("up", &[("n", &i.to_string())], 1.0)
                .unwrap();
        }
        let err = metrics.gauge_set("up", &[("n", "new")], 1.0).unwrap_err();
        assert_eq!(err.kind(), "budget-exhausted");
        assert!(
            err.message()
                .contains("plugin mirror-gate already has 64 series"),
            "{err}"
        );
        metrics.gauge_set("up", &[("n", "0")], 0.0).unwrap();
        assert_eq!(metrics.gauge("up", &[("n", "0")]), Some(0.0));
        assert_eq!(metrics.gauge("up", &[("n", "new")]), None);
    }
}
