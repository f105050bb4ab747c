//! The files backend: operations inside one granted root. `rel` is relative
//! and free of `..`; the backend must still keep symlinks from leading out of
//! `root`, and read only regular files (a FIFO, socket or device is refused,
//! and no open may block). Mutations require a [`Permit`] (only the mutation
//! gate makes one); one that goes on after the reconcile that asked was cut
//! off carries it along ([`Permit::travels_with`]) to journal its own result.

use crate::capabilities::error::CapError;
use crate::capabilities::gate::Permit;
use std::path::Path;

pub use crate::wit::files::{DirEntry, FileKind, Metadata};

#[async_trait::async_trait]
pub trait FileBackend: Send + Sync + 'static {
    /// The content of a regular file; longer than `max` bytes is `invalid`.
    async fn read(&self, root: &Path, rel: &Path, max: u64) -> Result<Vec<u8>, CapError>;
    /// Atomically replace the file (creating parents); true when content or mode changed.
    async fn write(
        &self,
        permit: Permit,
        root: &Path,
        rel: &Path,
        contents: Vec<u8>,
        mode: u32,
    ) -> Result<bool, CapError>;
    /// Remove a file, symlink or empty directory; true when it existed.
    async fn remove(&self, permit: Permit, root: &Path, rel: &Path) -> Result<bool, CapError>;
    async fn list(&self, root: &Path, rel: &Path) -> Result<Vec<DirEntry>, CapError>;
    /// Does not follow a final symlink.
    async fn metadata(&self, root: &Path, rel: &Path) -> Result<Option<Metadata>, CapError>;
}
