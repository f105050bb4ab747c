//! An in-memory filesystem for unit tests of the adapter (grants, dry run).

use super::{DirEntry, FileBackend, FileKind, Metadata};
use crate::capabilities::CapError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Files by absolute path, with their mode. Directories exist implicitly.
#[derive(Default)]
pub struct MemoryFiles {
    files: Mutex<BTreeMap<PathBuf, (Vec<u8>, u32)>>,
}

impl MemoryFiles {
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

fn not_found(path: &Path) -> CapError {
    CapError::NotFound(format!("{} does not exist", path.display()))
}

impl FileBackend for MemoryFiles {
    fn read(&self, root: &Path, rel: &Path) -> Result<Vec<u8>, CapError> {
        let path = root.join(rel);
        self.files
            .lock()
            .unwrap()
            .get(&path)
            .map(|(c, _)| c.clone())
            .ok_or_else(|| not_found(&path))
    }

    fn write(&self, root: &Path, rel: &Path, contents: &[u8], mode: u32) -> Result<bool, CapError> {
        let new = (contents.to_vec(), mode);
        Ok(self
            .files
            .lock()
            .unwrap()
            .insert(root.join(rel), new.clone())
            != Some(new))
    }

    fn remove(&self, root: &Path, rel: &Path) -> Result<bool, CapError> {
        let path = root.join(rel);
        if self.is_dir(&path) {
            return Err(CapError::Conflict(format!(
                "{} is not empty",
                path.display()
            )));
        }
        Ok(self.files.lock().unwrap().remove(&path).is_some())
    }

    fn list(&self, root: &Path, rel: &Path) -> Result<Vec<DirEntry>, CapError> {
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

    fn metadata(&self, root: &Path, rel: &Path) -> Result<Option<Metadata>, CapError> {
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
