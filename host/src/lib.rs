//! The Tend host: runs each plugin (a WebAssembly component) in a sandbox with
//! only the capabilities its operator granted.
//!
//! - [`config`]: the operator's TOML, parsed strictly.
//! - [`runtime`]: the wasmtime engine, compiling and caching components (compiled
//!   once) and running one reconcile in a fresh instance (per call).
//! - [`capabilities`]: one module per WIT interface; grants, dry run and limits
//!   are enforced there before a backend is touched.
//! - [`scheduler`]: triggers, coalescing and backoff per plugin.
//! - [`fleet`]: disruption budgets shared by every node, on Leases.
//! - [`daemon`]: `tend run`: hot reload, lifecycle, metrics and status.
//! - [`journal`]: the durable record of every mutation.
//! - [`replay`]: recordings of one reconcile, replayed against a plugin.
//! - [`oci`]: plugins pulled from OCI registries, cosign-verified.
//! - [`cli`]: the `tend` commands, the node agent's.
//! - [`author`]: the `tend-author` commands (new, plugins push, plugins keygen),
//!   a second binary the node's image leaves out.

pub mod atomic;
pub mod author;
pub mod capabilities;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod digest;
pub mod exposition;
pub mod fleet;
pub mod fs_watch;
pub mod journal;
pub mod oci;
pub mod peer;
pub mod replay;
pub mod runtime;
pub mod scheduler;
pub mod schema;
pub mod text;
pub mod tls;
pub mod units;
pub mod untrusted;
pub mod wit;
