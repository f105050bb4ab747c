//! `tend:plugin/files`: files on the node by absolute path, confined to the
//! roots granted to the plugin.

use crate::{Error, NotProvided, Result};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use tend_rules::files::{FileGrant, resolve};

/// The WIT records themselves: the host answers with these very types.
pub use crate::bindings::tend::plugin::files::{DirEntry, FileKind, Metadata};

/// Files inside the roots granted to the plugin, by absolute path.
pub trait Files {
    fn read(&self, path: &str) -> Result<Vec<u8>>;
    /// Atomic replace; true when the content or mode changed.
    fn write(&self, path: &str, contents: &[u8], mode: Option<u32>) -> Result<bool>;
    /// Remove a file or empty directory; true when it existed.
    fn remove(&self, path: &str) -> Result<bool>;
    fn list(&self, path: &str) -> Result<Vec<DirEntry>>;
    fn metadata(&self, path: &str) -> Result<Option<Metadata>>;
}

impl dyn Files + '_ {
    /// The file's content as UTF-8 text, or none when it does not exist.
    pub fn read_string(&self, path: &str) -> Result<Option<String>> {
        match self.read(path) {
            Ok(bytes) => String::from_utf8(bytes)
                .map(Some)
                .map_err(|_| crate::Error::Invalid(format!("{path} is not UTF-8 text"))),
            Err(crate::Error::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl Files for NotProvided {
    fn read(&self, _path: &str) -> Result<Vec<u8>> {
        Err(NotProvided::denied("files"))
    }
    fn write(&self, _path: &str, _contents: &[u8], _mode: Option<u32>) -> Result<bool> {
        Err(NotProvided::denied("files"))
    }
    fn remove(&self, _path: &str) -> Result<bool> {
        Err(NotProvided::denied("files"))
    }
    fn list(&self, _path: &str) -> Result<Vec<DirEntry>> {
        Err(NotProvided::denied("files"))
    }
    fn metadata(&self, _path: &str) -> Result<Option<Metadata>> {
        Err(NotProvided::denied("files"))
    }
}

/// The wasm glue: the host's `files` imports.
#[cfg(target_arch = "wasm32")]
pub(crate) mod wasm {
    use super::{DirEntry, Metadata};
    use crate::Result;
    use crate::bindings::tend::plugin::files;
    use crate::types::from_wit_error;

    pub(crate) struct WasmFiles;

    impl crate::Files for WasmFiles {
        fn read(&self, path: &str) -> Result<Vec<u8>> {
            files::read(path).map_err(from_wit_error)
        }
        fn write(&self, path: &str, contents: &[u8], mode: Option<u32>) -> Result<bool> {
            files::write(path, contents, mode).map_err(from_wit_error)
        }
        fn remove(&self, path: &str) -> Result<bool> {
            files::remove(path).map_err(from_wit_error)
        }
        fn list(&self, path: &str) -> Result<Vec<DirEntry>> {
            files::list_dir(path).map_err(from_wit_error)
        }
        fn metadata(&self, path: &str) -> Result<Option<Metadata>> {
            files::stat(path).map_err(from_wit_error)
        }
    }
}

/// The fake: a file tree in memory behind the host's grant rules. Like the
/// host, it denies every path no [`FakeFiles::grant`] covers (no grant at all
/// denies everything), denies writes under read-only grants, and refuses to
/// write or remove a granted root itself, with the host's messages.
pub struct FakeFiles {
    plugin: String,
    files: RefCell<BTreeMap<String, (Vec<u8>, u32)>>,
    dirs: RefCell<BTreeSet<String>>,
    grants: RefCell<Vec<FileGrant>>,
}

impl crate::fake::Fake for FakeFiles {
    fn for_plugin(plugin: &str) -> Self {
        FakeFiles::new(plugin)
    }
}

impl Default for FakeFiles {
    /// For a plugin named "test".
    fn default() -> Self {
        FakeFiles::new("test")
    }
}

impl FakeFiles {
    /// No grants yet; `plugin` is named in denial messages.
    pub fn new(plugin: &str) -> Self {
        FakeFiles {
            plugin: plugin.to_string(),
            files: RefCell::default(),
            dirs: RefCell::default(),
            grants: RefCell::default(),
        }
    }

    /// Grant `root` (an existing directory) and everything below it; `write`
    /// allows mutations. As on the host, the innermost grant covering a path
    /// decides, for writes too: a read-only grant inside a writable one keeps
    /// its subtree read-only. Panics when `root` is not absolute, contains `..`
    /// or lies in `/proc/self`, as the host rejects such a config.
    pub fn grant(&self, root: &str, write: bool) -> &Self {
        let grant = FileGrant::new(root, write).unwrap_or_else(|e| panic!("FakeFiles::grant: {e}"));
        let root = key(root);
        self.add_parents(&root);
        self.dirs.borrow_mut().insert(root);
        self.grants.borrow_mut().push(grant);
        self
    }

    /// Put a file in place (creating its parents), as if the operator had
    /// written it; grants do not apply.
    pub fn put(&self, path: &str, contents: &[u8]) -> &Self {
        let path = key(path);
        self.add_parents(&path);
        self.files
            .borrow_mut()
            .insert(path, (contents.to_vec(), tend_rules::files::DEFAULT_MODE));
        self
    }

    /// The content of `path`, if it is a file.
    pub fn get(&self, path: &str) -> Option<Vec<u8>> {
        self.files.borrow().get(&key(path)).map(|(c, _)| c.clone())
    }

    /// Every file path, sorted.
    pub fn paths(&self) -> Vec<String> {
        self.files.borrow().keys().cloned().collect()
    }

    fn add_parents(&self, path: &str) {
        let mut dir = parent(path);
        while let Some(d) = dir {
            self.dirs.borrow_mut().insert(d.to_string());
            dir = parent(d);
        }
    }

    /// The host's decision for `path`: the normalized path and whether it is a
    /// granted root itself.
    fn check(&self, path: &str, write: bool) -> Result<(String, bool)> {
        let resolved = resolve(&self.grants.borrow(), &self.plugin, path, write)
            .map_err(crate::Error::from)?;
        Ok((key(path), resolved.rel.as_os_str().is_empty()))
    }
}

/// `path` with repeated slashes, `.` and a trailing slash dropped.
fn key(path: &str) -> String {
    let parts: Vec<&str> = path
        .split('/')
        .filter(|part| !part.is_empty() && *part != ".")
        .collect();
    format!("/{}", parts.join("/"))
}

fn parent(path: &str) -> Option<&str> {
    match path.rfind('/') {
        Some(0) if path.len() > 1 => Some("/"),
        Some(0) | None => None,
        Some(i) => Some(&path[..i]),
    }
}

fn name_of(path: &str) -> String {
    path.rsplit('/').next().unwrap_or(path).to_string()
}

impl Files for FakeFiles {
    fn read(&self, path: &str) -> Result<Vec<u8>> {
        let (path, _) = self.check(path, false)?;
        self.get(&path)
            .ok_or_else(|| Error::NotFound(format!("{path} does not exist")))
    }
    fn write(&self, path: &str, contents: &[u8], mode: Option<u32>) -> Result<bool> {
        let (key, is_root) = self.check(path, true)?;
        if is_root {
            return Err(Error::Invalid(format!(
                "{path} is a granted root directory, not a file"
            )));
        }
        let mode = tend_rules::files::file_mode(path, mode).map_err(crate::Error::from)?;
        let new = (contents.to_vec(), mode);
        self.add_parents(&key);
        let old = self.files.borrow_mut().insert(key, new.clone());
        Ok(old.as_ref() != Some(&new))
    }
    fn remove(&self, path: &str) -> Result<bool> {
        let (key, is_root) = self.check(path, true)?;
        if is_root {
            return Err(Error::Invalid(format!(
                "{path} is a granted root and cannot be removed"
            )));
        }
        if self.files.borrow_mut().remove(&key).is_some() {
            return Ok(true);
        }
        if self.dirs.borrow().contains(&key) {
            if !self.list(&key)?.is_empty() {
                return Err(Error::Conflict(format!(
                    "{path} is a directory that is not empty"
                )));
            }
            return Ok(self.dirs.borrow_mut().remove(&key));
        }
        Ok(false)
    }
    fn list(&self, path: &str) -> Result<Vec<DirEntry>> {
        let (path, _) = self.check(path, false)?;
        if !self.dirs.borrow().contains(&path) {
            return Err(Error::NotFound(format!("directory {path} does not exist")));
        }
        let is_child = |p: &&String| parent(p) == Some(path.as_str());
        let mut entries: Vec<DirEntry> = self
            .files
            .borrow()
            .keys()
            .filter(is_child)
            .map(|p| DirEntry {
                name: name_of(p),
                kind: FileKind::File,
            })
            .chain(
                self.dirs
                    .borrow()
                    .iter()
                    .filter(is_child)
                    .map(|p| DirEntry {
                        name: name_of(p),
                        kind: FileKind::Directory,
                    }),
            )
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }
    fn metadata(&self, path: &str) -> Result<Option<Metadata>> {
        let (path, _) = self.check(path, false)?;
        if let Some((contents, mode)) = self.files.borrow().get(&path) {
            let size = contents.len() as u64;
            return Ok(Some(Metadata {
                kind: FileKind::File,
                size,
                mode: *mode,
                modified_ms: None,
            }));
        }
        Ok(self.dirs.borrow().contains(&path).then_some(Metadata {
            kind: FileKind::Directory,
            size: 0,
            mode: 0o755,
            modified_ms: None,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn granted(root: &str, write: bool) -> FakeFiles {
        let files = FakeFiles::new("mirror-gate");
        files.grant(root, write);
        files
    }

    #[test]
    fn no_grant_denies_with_the_hosts_message() {
        let files = FakeFiles::new("mirror-gate");
        assert_eq!(
            files.write("/var/lib/x", b"", None).unwrap_err(),
            Error::Denied(
                "no files grant covers /var/lib/x: add { path = \"/var/lib\", write = true } to [plugins.mirror-gate.grants] files".into()
            )
        );
        assert_eq!(files.read("/etc/hosts").unwrap_err().kind(), "denied");
        assert_eq!(files.metadata("/etc").unwrap_err().kind(), "denied");
    }

    #[test]
    fn a_read_only_grant_denies_writes_naming_the_grant() {
        let files = granted("/etc", false);
        files.put("/etc/hosts", b"127.0.0.1 localhost\n");
        assert_eq!(files.read("/etc/hosts").unwrap(), b"127.0.0.1 localhost\n");
        assert_eq!(
            files.write("/etc/hosts", b"", None).unwrap_err(),
            Error::Denied(
                "/etc/hosts is granted read-only by { path = \"/etc\" }: set write = true on that grant in [plugins.mirror-gate.grants] files".into()
            )
        );
        assert_eq!(files.remove("/etc/hosts").unwrap_err().kind(), "denied");
    }

    #[test]
    fn grants_deny_outside_roots_and_invalid_paths() {
        let files = granted("/etc/containerd", true);
        assert!(files.write("/etc/containerd/x", b"", None).is_ok());
        assert_eq!(
            files
                .write("/etc/containerdx", b"", None)
                .unwrap_err()
                .kind(),
            "denied"
        );
        assert!(matches!(
            files.read("/etc/containerd/../passwd"),
            Err(Error::Invalid(_))
        ));
        assert!(matches!(files.read("etc/hosts"), Err(Error::Invalid(_))));
    }

    #[test]
    fn a_granted_root_is_a_directory_that_cannot_be_written_or_removed() {
        let files = granted("/etc/containerd/certs.d", true);
        assert_eq!(files.list("/etc/containerd/certs.d/").unwrap(), []);
        assert_eq!(
            files.write("/etc/containerd/certs.d/", b"", None),
            Err(Error::Invalid(
                "/etc/containerd/certs.d/ is a granted root directory, not a file".into()
            ))
        );
        assert_eq!(
            files.remove("/etc/containerd/certs.d"),
            Err(Error::Invalid(
                "/etc/containerd/certs.d is a granted root and cannot be removed".into()
            ))
        );
    }

    #[test]
    fn paths_are_normalized_like_the_host_does() {
        let files = granted("/etc", true);
        assert!(files.write("/etc//a/./b", b"x", None).unwrap());
        assert_eq!(files.paths(), ["/etc/a/b"]);
        assert_eq!(files.read("/etc/a/b").unwrap(), b"x");
    }

    #[test]
    fn write_reports_change_only_when_content_differs() {
        let files = granted("/etc", true);
        assert!(files.write("/etc/a/b", b"x", None).unwrap());
        assert!(!files.write("/etc/a/b", b"x", None).unwrap());
        assert!(files.write("/etc/a/b", b"y", None).unwrap());
        assert!(files.write("/etc/a/b", b"y", Some(0o600)).unwrap());
    }

    #[test]
    fn list_and_remove_follow_directory_rules() {
        let files = granted("/d", true);
        files.put("/d/a", b"1").put("/d/sub/b", b"2");
        let names: Vec<_> = files
            .list("/d")
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, ["a", "sub"]);
        assert!(matches!(files.remove("/d/sub"), Err(Error::Conflict(_))));
        assert!(files.remove("/d/sub/b").unwrap());
        assert!(files.remove("/d/sub").unwrap());
        assert!(!files.remove("/d/sub").unwrap());
    }

    #[test]
    #[should_panic(expected = "must be absolute")]
    fn a_relative_grant_is_a_test_setup_error() {
        FakeFiles::default().grant("etc", true);
    }
}
