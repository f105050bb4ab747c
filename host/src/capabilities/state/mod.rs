//! `tend:plugin/state`: each plugin's own persistent key-value store. It is
//! the plugin's memory, not the node: writes do not pass the mutation gate,
//! and in a dry run they land in an overlay the same reconcile reads back.

mod adapter;
mod backend;
mod fake;
mod grants;
mod real;
mod wit;

pub use adapter::PluginState;
pub use backend::{Quota, StateBackend};
pub use fake::FakeState;
pub use grants::{MAX_KEY, MAX_VALUE};
pub use real::RedbState;
