//! What the followers counted, for `/metrics`: lines read and lost per
//! source, and each rule's matches kept or missed, so an operator can alert
//! on a source gone silent or a rule dropping matches.

use crate::exposition::{Exposition, Kind};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use tend_rules::logs::Source;

#[derive(Default)]
pub struct Counts {
    lines: [AtomicU64; 2],
    gaps: [AtomicU64; 2],
    /// (plugin, rule, "kept" | "missed"): bounded by the config's rules.
    matches: Mutex<BTreeMap<(String, String, &'static str), u64>>,
}

impl Counts {
    pub fn lines(&self, source: Source, lines: u64) {
        self.lines[source as usize].fetch_add(lines, Ordering::Relaxed);
    }

    pub fn gap(&self, source: Source, lines: u64) {
        self.gaps[source as usize].fetch_add(lines, Ordering::Relaxed);
    }

    pub fn matched(&self, plugin: &str, rule: &str, kept: bool) {
        let outcome = if kept { "kept" } else { "missed" };
        *self
            .matches
            .lock()
            .unwrap()
            .entry((plugin.to_string(), rule.to_string(), outcome))
            .or_default() += 1;
    }

    /// The families, with the matches of the plugins `configured` accepts.
    pub fn render(&self, configured: &dyn Fn(&str) -> bool) -> String {
        let families = Exposition::default();
        let per_source = |counts: &[AtomicU64; 2]| {
            Source::ALL.map(|s| {
                (
                    vec![s.name()],
                    counts[s as usize].load(Ordering::Relaxed) as f64,
                )
            })
        };
        families.family(
            Kind::Counter,
            "tend_logs_lines_total",
            "Log lines the host read to match watch rules, by source.",
            &["source"],
            per_source(&self.lines),
        );
        families.family(
            Kind::Counter,
            "tend_logs_lost_lines_total",
            "Log lines lost before the host read them (ring buffer overwritten, lines over the bound), by source.",
            &["source"],
            per_source(&self.gaps),
        );
        let matches = self.matches.lock().unwrap();
        families.family(
            Kind::Counter,
            "tend_logs_matches_total",
            "Watch rule matches, kept for the plugin or missed (over the rule's rate or bound).",
            &["plugin", "rule", "outcome"],
            matches
                .iter()
                .filter(|((plugin, _, _), _)| configured(plugin))
                .map(|((plugin, rule, outcome), n)| {
                    (vec![plugin.as_str(), rule.as_str(), *outcome], *n as f64)
                }),
        );
        families.text()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_gaps_and_matches_are_counted_for_configured_plugins_only() {
        let counts = Counts::default();
        counts.lines(Source::Kernel, 3);
        counts.gap(Source::Journal, 2);
        counts.matched("pd", "hung", true);
        counts.matched("pd", "hung", false);
        counts.matched("pd", "hung", false);
        counts.matched("gone", "x", true);
        let text = counts.render(&|p| p == "pd");
        for line in [
            "tend_logs_lines_total{source=\"kernel\"} 3",
            "tend_logs_lines_total{source=\"journal\"} 0",
            "tend_logs_lost_lines_total{source=\"journal\"} 2",
            "tend_logs_matches_total{outcome=\"kept\",plugin=\"pd\",rule=\"hung\"} 1",
            "tend_logs_matches_total{outcome=\"missed\",plugin=\"pd\",rule=\"hung\"} 2",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        assert!(!text.contains("gone"), "{text}");
    }
}
