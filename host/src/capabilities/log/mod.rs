//! `tend:plugin/log`: plugin log lines into the host's log, tagged with the
//! plugin's name, bounded per reconcile so a chatty plugin cannot flood the node.

mod adapter;
mod backend;
mod fake;
mod grants;
mod real;
mod wit;

pub use adapter::{PluginLog, charge_host_line};
pub use backend::{Level, LogBackend};
pub use fake::FakeLog;
pub use grants::LINE_COST;
pub use real::TracingLog;
