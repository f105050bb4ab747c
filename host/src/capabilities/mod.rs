//! The capabilities a plugin can be granted, one folder each: `mod.rs` (its
//! face: the [`Capability`] impl, with its hooks), `backend.rs` (the trait),
//! `real.rs`, `fake.rs` (records actions and injects failures through the
//! shared [`fakes::FakeLedger`]), `grants.rs` (the host's side of the pure
//! rules), `adapter.rs` (the per-call adapter: grants, dry run, limits, the
//! gate) and `wit.rs` (the WIT binding). A small capability keeps fewer
//! (`log`: face and binding in `mod.rs`, the backends in `backend.rs`).
//! Every mutating call passes the one [`gate`]. The registration list
//! ([`registry`]) generates everything that has one entry per capability.

pub mod call;
pub mod capability;
pub mod error;
pub mod fakes;
pub mod gate;
pub mod limits;
pub mod rate;
pub mod registry;
mod services;
pub mod tape;
pub mod watch;

/// One module per registered capability, declared from the registration list.
macro_rules! declare_capability_modules {
    ($($name:ident: $cap:ty,)*) => { $( pub mod $name; )* };
}
registry::capability_list!(declare_capability_modules);

#[cfg(test)]
mod conformance;
#[cfg(test)]
pub mod testing;

pub use call::{Call, CallCount};
pub use capability::{BackendEnv, Capability};
pub use error::CapError;
pub use gate::Mutation;
pub use registry::{
    Backends, Capabilities, CapabilityWatch, Fakes, Grants, HasCapabilities, Settings,
};
pub use services::Services;
