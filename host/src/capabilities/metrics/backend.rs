//! Where plugin series live until `/metrics` renders them.

use crate::capabilities::error::CapError;
pub use tend_rules::metrics::Kind;

pub trait MetricsBackend: Send + Sync + 'static {
    /// Add to a counter or set a gauge of `plugin`; refused when it would be
    /// the plugin's series number [`tend_rules::metrics::MAX_SERIES`] + 1.
    fn record(
        &self,
        plugin: &str,
        kind: Kind,
        name: &str,
        labels: &[(String, String)],
        value: f64,
    ) -> Result<(), CapError>;
    /// The Prometheus text exposition of the series of plugins `keep` accepts
    /// (plugins no longer configured are dropped).
    fn render(&self, keep: &dyn Fn(&str) -> bool) -> String;
}
