//! An in-memory filesystem for unit tests of the adapter (grants, dry run):
//! records every mutation it performs and injects failures on request.

use super::backend::{DirEntry, FileBackend, FileKind, Metadata};
use crate::capabilities::error::CapError;
use crate::capabilities::fakes::FakeLedger;
use crate::capabilities::gate::Permit;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Files by absolute path, with their mode. Directories exist implicitly.
#[derive(Default)]
pub struct FakeFiles {
    files: Mutex<BTreeMap<PathBuf, (Vec<u8>, u32)>>,
    ledger: FakeLedger,
}

impl FakeFiles {
    /// Every mutation performed, as "write /path" or "remove /path".
    pub fn actions(&self) -> Vec<String> {
        self.ledger.actions()
    }

    /// Fail every mutation with `error` until cleared with None.
    pub fn fail_mutations_with(&self, error: Option<CapError>) {
        self.ledger.fail_with(error);
    }

    pub fn put(&self, path: &str, contents: &[u8]) {
        self.files
            .lock()
            .unwrap()
            .insert(path.into(), (contents.to_vec(), 0o644));
    }

    pub fn get(&self, path: &str) -> Option<Vec<u8>> {
        self.files
            .lock()
            .unwrap()
            .get(Path::new(path))
            .map(|(c, _)| c.clone())
    }

    fn is_dir(&self, path: &Path) -> bool {
        self.files
            .lock()
            .unwrap()
            .keys()
            .any(|p| p != path && p.starts_with(path))
    }
}

impl FakeFiles {
    fn write_now(&self, path: &Path, contents: Vec<u8>, mode: u32) -> Result<bool, CapError> {
        self.ledger.act(super::WRITE, &path.display().to_string())?;
        let new = (contents, mode);
        let old = self
            .files
            .lock()
            .unwrap()
            .insert(path.to_path_buf(), new.clone());
        Ok(old != Some(new))
    }

    fn remove_now(&self, path: &Path) -> Result<bool, CapError> {
        self.ledger
            .act(super::REMOVE, &path.display().to_string())?;
        if self.is_dir(path) {
            return Err(CapError::Conflict(format!(
                "{} is not empty",
                path.display()
            )));
        }
        Ok(self.files.lock().unwrap().remove(path).is_some())
    }
}

fn not_found(path: &Path) -> CapError {
    CapError::NotFound(format!("{} does not exist", path.display()))
}

#[async_trait::async_trait]
impl FileBackend for FakeFiles {
    async fn read(&self, root: &Path, rel: &Path, max: u64) -> Result<Vec<u8>, CapError> {
        let path = root.join(rel);
        let contents = self
            .files
            .lock()
            .unwrap()
            .get(&path)
            .map(|(c, _)| c.clone())
            .ok_or_else(|| not_found(&path))?;
        if contents.len() as u64 > max {
            return Err(CapError::Invalid(format!(
                "{} is {} bytes, more than the {max} one read may return",
                path.display(),
                contents.len()
            )));
        }
        Ok(contents)
    }

    async fn write(
        &self,
        _: Permit,
        root: &Path,
        rel: &Path,
        contents: Vec<u8>,
        mode: u32,
    ) -> Result<bool, CapError> {
        self.write_now(&root.join(rel), contents, mode)
    }

    async fn remove(&self, _: Permit, root: &Path, rel: &Path) -> Result<bool, CapError> {
        self.remove_now(&root.join(rel))
    }

    async fn list(&self, root: &Path, rel: &Path) -> Result<Vec<DirEntry>, CapError> {
        let dir = root.join(rel);
        let files = self.files.lock().unwrap();
        let mut entries: Vec<DirEntry> = files
            .keys()
            .filter_map(|p| p.strip_prefix(&dir).ok())
            .filter_map(|rest| {
                let mut parts = rest.components();
                let name = parts.next()?.as_os_str().to_string_lossy().into_owned();
                let kind = if parts.next().is_some() {
                    FileKind::Directory
                } else {
                    FileKind::File
                };
                Some(DirEntry { name, kind })
            })
            .collect();
        entries.dedup();
        if entries.is_empty() {
            return Err(not_found(&dir));
        }
        Ok(entries)
    }

    async fn metadata(&self, root: &Path, rel: &Path) -> Result<Option<Metadata>, CapError> {
        let path = root.join(rel);
        if let Some((contents, mode)) = self.files.lock().unwrap().get(&path) {
            let size = contents.len() as u64;
            return Ok(Some(Metadata {
                kind: FileKind::File,
                size,
                mode: *mode,
                modified_ms: None,
            }));
        }
        Ok(self.is_dir(&path).then_some(Metadata {
            kind: FileKind::Directory,
            size: 0,
            mode: 0o755,
            modified_ms: None,
        }))
    }
}
