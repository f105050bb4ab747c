//! `tend:plugin/systemd`: units over D-Bus, confined to the plugin's granted
//! unit patterns and operations, every mutation through the gate.

mod adapter;
mod backend;
mod fake;
mod grants;
mod real;
mod wit;

pub use adapter::{PluginSystemd, SystemdSettings};
pub use backend::{JOB_TIMEOUT, JobKind, JobResult, SystemdBackend, UnitChange, UnitStatus};
pub use fake::FakeSystemd;
pub use grants::{Operation, SystemdGrant, UnitPattern, wildcard_match};
pub use real::RealSystemd;
