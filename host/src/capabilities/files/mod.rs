//! `tend:plugin/files`: files on the node by absolute path, confined to the
//! plugin's granted roots.

mod grants;
mod memory;
mod real;

pub use grants::{Resolved, resolve};
pub use memory::MemoryFiles;
pub use real::RealFiles;

use super::{CallInfo, CapError, Mutation};
use crate::config::FileGrant;
use std::path::Path;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    File,
    Directory,
    Symlink,
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    pub kind: FileKind,
    pub size: u64,
    pub mode: u32,
    pub modified_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    pub kind: FileKind,
}

/// File operations inside one root. `rel` is relative and free of `..`; the
/// backend must still keep symlinks from leading out of `root`.
pub trait FileBackend: Send + Sync + 'static {
    fn read(&self, root: &Path, rel: &Path) -> Result<Vec<u8>, CapError>;
    /// Atomically replace the file (creating parents); true when content or mode changed.
    fn write(&self, root: &Path, rel: &Path, contents: &[u8], mode: u32) -> Result<bool, CapError>;
    /// Remove a file, symlink or empty directory; true when it existed.
    fn remove(&self, root: &Path, rel: &Path) -> Result<bool, CapError>;
    fn list(&self, root: &Path, rel: &Path) -> Result<Vec<DirEntry>, CapError>;
    /// Does not follow a final symlink.
    fn metadata(&self, root: &Path, rel: &Path) -> Result<Option<Metadata>, CapError>;
}

const DEFAULT_MODE: u32 = 0o644;

/// The `files` capability of one reconcile.
pub struct PluginFiles {
    backend: Arc<dyn FileBackend>,
    grants: Vec<FileGrant>,
    call: CallInfo,
}

impl PluginFiles {
    pub fn new(backend: Arc<dyn FileBackend>, grants: Vec<FileGrant>, call: CallInfo) -> Self {
        PluginFiles {
            backend,
            grants,
            call,
        }
    }

    fn resolve(&self, path: &str, write: bool) -> Result<Resolved, CapError> {
        resolve(&self.grants, &self.call.plugin, path, write)
    }

    /// Run a blocking backend operation off the async executor.
    async fn blocking<T: Send + 'static>(
        &self,
        op: impl FnOnce(&dyn FileBackend) -> Result<T, CapError> + Send + 'static,
    ) -> Result<T, CapError> {
        let backend = self.backend.clone();
        tokio::task::spawn_blocking(move || op(backend.as_ref()))
            .await
            .map_err(|e| CapError::Other(format!("file operation failed: {e}")))?
    }

    pub async fn read(&self, path: String) -> Result<Vec<u8>, CapError> {
        let r = self.resolve(&path, false)?;
        self.blocking(move |b| b.read(&r.root, &r.rel)).await
    }

    pub async fn write(
        &self,
        path: String,
        contents: Vec<u8>,
        mode: Option<u32>,
    ) -> Result<bool, CapError> {
        let r = self.resolve(&path, true)?;
        if r.rel.as_os_str().is_empty() {
            return Err(CapError::Invalid(format!(
                "{path} is a granted root directory, not a file"
            )));
        }
        let mode = mode.unwrap_or(DEFAULT_MODE) & 0o7777;
        let size = contents.len();
        if self.call.dry_run {
            let (root, rel) = (r.root.clone(), r.rel.clone());
            let before = self.blocking(move |b| current_file(b, &root, &rel)).await?;
            let changed = before.as_ref() != Some(&(contents, mode));
            if changed {
                let detail = match before {
                    None => format!("new file, {size} bytes, mode {mode:o}"),
                    Some(_) => format!("replace content, {size} bytes, mode {mode:o}"),
                };
                self.record("write", &path, detail, false, "ok".into());
            }
            return Ok(changed);
        }
        let result = self
            .blocking(move |b| b.write(&r.root, &r.rel, &contents, mode))
            .await;
        if !matches!(result, Ok(false)) {
            let detail = format!("{size} bytes, mode {mode:o}");
            self.record("write", &path, detail, true, outcome(&result));
        }
        result
    }

    pub async fn remove(&self, path: String) -> Result<bool, CapError> {
        let r = self.resolve(&path, true)?;
        if r.rel.as_os_str().is_empty() {
            return Err(CapError::Invalid(format!(
                "{path} is a granted root and cannot be removed"
            )));
        }
        if self.call.dry_run {
            let exists = self
                .blocking(move |b| b.metadata(&r.root, &r.rel))
                .await?
                .is_some();
            if exists {
                self.record("remove", &path, String::new(), false, "ok".into());
            }
            return Ok(exists);
        }
        let result = self.blocking(move |b| b.remove(&r.root, &r.rel)).await;
        if !matches!(result, Ok(false)) {
            self.record("remove", &path, String::new(), true, outcome(&result));
        }
        result
    }

    pub async fn list(&self, path: String) -> Result<Vec<DirEntry>, CapError> {
        let r = self.resolve(&path, false)?;
        self.blocking(move |b| b.list(&r.root, &r.rel)).await
    }

    pub async fn metadata(&self, path: String) -> Result<Option<Metadata>, CapError> {
        let r = self.resolve(&path, false)?;
        self.blocking(move |b| b.metadata(&r.root, &r.rel)).await
    }

    fn record(&self, operation: &str, path: &str, detail: String, performed: bool, result: String) {
        self.call.mutations.record(Mutation {
            capability: "files",
            operation: operation.to_string(),
            target: path.to_string(),
            detail,
            performed,
            result,
        });
    }
}

/// Content and mode of a regular file, or None when there is none.
fn current_file(
    backend: &dyn FileBackend,
    root: &Path,
    rel: &Path,
) -> Result<Option<(Vec<u8>, u32)>, CapError> {
    match backend.metadata(root, rel)? {
        Some(m) if m.kind == FileKind::File => Ok(Some((backend.read(root, rel)?, m.mode))),
        _ => Ok(None),
    }
}

fn outcome<T>(result: &Result<T, CapError>) -> String {
    match result {
        Ok(_) => "ok".to_string(),
        Err(e) => e.to_string(),
    }
}

#[cfg(test)]
mod tests;
