//! The capabilities a plugin can be granted, one folder each with the same
//! files: `backend.rs` (the trait), `real.rs`, `fake.rs` (records actions,
//! injects failures), `grants.rs` (the pure rules), `adapter.rs` (the per-call
//! adapter: grants, dry run, limits, the gate) and `wit.rs` (the WIT binding).
//! Every mutating call passes the one [`gate`]. The registration list
//! ([`registry`]) generates everything that has one entry per capability.

pub mod call;
pub mod capability;
pub mod error;
pub mod gate;
pub mod limits;
pub mod registry;
mod services;

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
pub use capability::{BackendEnv, Capability, HasCapabilities};
pub use error::CapError;
pub use gate::Mutation;
pub use registry::{Backends, Capabilities, Fakes, Grants, Settings};
pub use services::Services;
