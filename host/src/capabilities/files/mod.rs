//! `tend:plugin/files`: files on the node by absolute path, confined to the
//! plugin's granted roots (cap-std), written atomically, mutated only through
//! the mutation gate.

mod adapter;
mod backend;
mod fake;
mod grants;
mod real;
mod wit;

pub use adapter::PluginFiles;
pub use backend::{DirEntry, FileBackend, FileKind, Metadata};
pub use fake::FakeFiles;
pub use grants::{FileGrant, Resolved, resolve};
pub use real::RealFiles;
