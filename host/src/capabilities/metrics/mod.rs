//! `tend:plugin/metrics`: a plugin's own counters and gauges on `/metrics`,
//! bounded in number and shape per plugin.

mod adapter;
mod backend;
mod fake;
mod grants;
mod real;
mod wit;

pub use adapter::PluginMetrics;
pub use backend::{Kind, MetricsBackend};
pub use fake::FakeMetrics;
pub use real::SeriesStore;
