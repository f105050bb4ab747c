//! Families whose values are counted elsewhere (the kube bounds), built at
//! each scrape through the same `prometheus` crate as the daemon's own
//! families, so every family on `/metrics` is typed, escaped and encoded one
//! way.

use prometheus::proto::MetricFamily;
use prometheus::{CounterVec, Encoder, GaugeVec, Opts, Registry, TextEncoder};

/// A family's Prometheus type.
#[derive(Clone, Copy)]
pub enum Kind {
    Counter,
    Gauge,
}

/// The families of one scrape, each registered once with its samples.
#[derive(Default)]
pub struct Exposition {
    registry: Registry,
}

impl Exposition {
    /// A family with one sample per row: its label values (in `labels`'
    /// order) and its value. A family without rows is left out, as the
    /// registry leaves out a labelled family nothing was recorded in.
    pub fn family<'a>(
        &self,
        kind: Kind,
        name: &str,
        help: &str,
        labels: &[&str],
        rows: impl IntoIterator<Item = (Vec<&'a str>, f64)>,
    ) {
        let opts = Opts::new(name, help);
        match kind {
            Kind::Counter => {
                let family = CounterVec::new(opts, labels).expect("a valid family");
                for (values, value) in rows {
                    family.with_label_values(&values).inc_by(value);
                }
                self.register(family);
            }
            Kind::Gauge => {
                let family = GaugeVec::new(opts, labels).expect("a valid family");
                for (values, value) in rows {
                    family.with_label_values(&values).set(value);
                }
                self.register(family);
            }
        }
    }

    /// A family of one sample without labels.
    pub fn scalar(&self, kind: Kind, name: &str, help: &str, value: f64) {
        self.family(kind, name, help, &[], [(Vec::new(), value)]);
    }

    fn register(&self, family: impl prometheus::core::Collector + 'static) {
        self.registry
            .register(Box::new(family))
            .expect("family names are unique");
    }

    /// The families in the text format.
    pub fn text(&self) -> String {
        encode(&self.registry.gather())
    }
}

/// `families` in the Prometheus text format.
pub fn encode(families: &[MetricFamily]) -> String {
    let mut out = Vec::new();
    TextEncoder::new()
        .encode(families, &mut out)
        .expect("text encoding cannot fail");
    String::from_utf8(out).expect("metrics are UTF-8")
}

/// The (name, type, help) of every family `text` declares, in order: what a
/// test compares to keep names, types and help texts as alerts read them.
#[cfg(test)]
pub fn declared(text: &str) -> Vec<(String, String, String)> {
    let mut help = std::collections::BTreeMap::new();
    let mut families = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help.insert(name.to_string(), text.to_string());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE names a type");
            let help = help.get(name).cloned().unwrap_or_default();
            families.push((name.to_string(), kind.to_string(), help));
        }
    }
    families
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_typed_labelled_and_escaped() {
        let families = Exposition::default();
        families.family(
            Kind::Counter,
            "t_total",
            "Counted.",
            &["plugin", "bound"],
            [(vec!["a\"b", "caches"], 3.0)],
        );
        families.scalar(Kind::Gauge, "t_bytes", "Held.", 2.5);
        families.family(Kind::Gauge, "t_empty", "None.", &["plugin"], []);
        let text = families.text();
        assert_eq!(
            declared(&text),
            [
                ("t_bytes".into(), "gauge".into(), "Held.".into()),
                ("t_total".into(), "counter".into(), "Counted.".into()),
            ]
        );
        assert!(text.lines().any(|l| l == "t_bytes 2.5"), "{text}");
        assert!(
            text.lines()
                .any(|l| l == "t_total{bound=\"caches\",plugin=\"a\\\"b\"} 3"),
            "{text}"
        );
    }
}
