//! The `files` adapter of one reconcile: resolves every path inside the
//! plugin's grants, decides with a read whether a write or remove would change
//! anything (an unchanged file is no mutation), and sends every change through
//! the mutation gate.

use super::backend::{DirEntry, FileBackend, FileKind, Metadata};
use super::grants::{FileGrant, Resolved, refuse_root, resolve};
use crate::capabilities::call::Call;
use crate::capabilities::capability::Capability;
use crate::capabilities::error::CapError;
use crate::capabilities::gate::{Intent, diff};
use crate::capabilities::limits::raise;
use std::sync::Arc;

/// The permission bits of a write, by the rules crate's rule (shared with
/// the SDK's fake).
fn file_mode(path: &str, mode: Option<u32>) -> Result<u32, CapError> {
    Ok(tend_rules::files::file_mode(path, mode)?)
}

pub struct PluginFiles {
    pub(super) backend: Arc<dyn FileBackend>,
    pub(super) grants: Vec<FileGrant>,
    pub(super) call: Arc<Call>,
}

impl PluginFiles {
    fn resolve(&self, path: &str, write: bool) -> Result<Resolved, CapError> {
        resolve(&self.grants, &self.call.plugin, path, write)
    }

    /// The most one read may return.
    fn read_cap(&self) -> u64 {
        self.call.limits.read_per_call.0
    }

    /// Content and mode of the regular file at `r`, or None when there is none.
    /// A file too large to compare counts as different.
    async fn current(&self, r: &Resolved) -> Result<Option<(Vec<u8>, u32)>, CapError> {
        match self.backend.metadata(&r.root, &r.rel).await? {
            Some(m) if m.kind == FileKind::File && m.size <= self.read_cap() => {
                let contents = self.backend.read(&r.root, &r.rel, self.read_cap()).await?;
                Ok(Some((contents, m.mode)))
            }
            Some(m) if m.kind == FileKind::File => Ok(Some((Vec::new(), u32::MAX))),
            _ => Ok(None),
        }
    }

    pub async fn read(&self, path: String) -> Result<Vec<u8>, CapError> {
        let r = self.resolve(&path, false)?;
        let cap = self.read_cap();
        if let Some(meta) = self.backend.metadata(&r.root, &r.rel).await?
            && meta.kind == FileKind::File
            && meta.size > cap
        {
            return Err(CapError::Invalid(format!(
                "{path} is {} bytes, more than one read may return; {}",
                meta.size,
                raise(
                    &self.call.plugin,
                    "read-per-call",
                    self.call.limits.read_per_call
                )
            )));
        }
        let contents = self.backend.read(&r.root, &r.rel, cap).await?;
        self.call.spend_read(&path, contents.len() as u64)?;
        Ok(contents)
    }

    pub async fn write(
        &self,
        path: String,
        contents: Vec<u8>,
        mode: Option<u32>,
    ) -> Result<bool, CapError> {
        let r = self.resolve(&path, true)?;
        refuse_root(&r, &path, "directory, not a file")?;
        let mode = file_mode(&path, mode)?;
        let before = self.current(&r).await?;
        if before
            .as_ref()
            .is_some_and(|(c, m)| *c == contents && *m == mode)
        {
            return Ok(false);
        }
        let size = contents.len();
        let detail = match &before {
            None => format!("new file, {size} bytes, mode {mode:o}"),
            Some((old, _)) => format!("{} -> {size} bytes, mode {mode:o}", old.len()),
        };
        let diff = self
            .call
            .dry_run
            .then(|| diff::unified(&path, before.as_ref().map(|(c, _)| c.as_slice()), &contents));
        let intent = Intent {
            capability: Self::NAME,
            operation: super::WRITE,
            target: r.root.join(&r.rel).display().to_string(),
            detail,
            diff,
        };
        self.call
            .gate
            .mutate(intent, Ok(true), |permit| {
                self.backend.write(permit, &r.root, &r.rel, contents, mode)
            })
            .await
    }

    pub async fn remove(&self, path: String) -> Result<bool, CapError> {
        let r = self.resolve(&path, true)?;
        refuse_root(&r, &path, "and cannot be removed")?;
        let Some(meta) = self.backend.metadata(&r.root, &r.rel).await? else {
            return Ok(false);
        };
        let detail = match meta.kind {
            FileKind::Directory => "directory".to_string(),
            FileKind::Symlink => "symlink".to_string(),
            _ => format!("{} bytes", meta.size),
        };
        let intent = Intent {
            capability: Self::NAME,
            operation: super::REMOVE,
            target: r.root.join(&r.rel).display().to_string(),
            detail,
            diff: None,
        };
        self.call
            .gate
            .mutate(intent, Ok(true), |permit| {
                self.backend.remove(permit, &r.root, &r.rel)
            })
            .await
    }

    pub async fn list(&self, path: String) -> Result<Vec<DirEntry>, CapError> {
        let r = self.resolve(&path, false)?;
        self.backend.list(&r.root, &r.rel).await
    }

    pub async fn metadata(&self, path: String) -> Result<Option<Metadata>, CapError> {
        let r = self.resolve(&path, false)?;
        self.backend.metadata(&r.root, &r.rel).await
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
