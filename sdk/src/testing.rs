//! In-memory fakes of every capability, for unit tests of plugin logic in plain
//! `cargo test`. They follow the host's contract: atomic-write semantics (report
//! whether content changed), `not-found` errors, grants that deny with a message.
//!
//! ```
//! use tend_sdk::testing::FakeHost;
//! use tend_sdk::{Host, Response};
//! let host = FakeHost::new();
//! host.http.respond("GET", "http://cache:5000/v2/", Ok(Response { status: 200, headers: vec![], body: vec![] }));
//! assert_eq!(host.http().send(&tend_sdk::Request::get("http://cache:5000/v2/")).unwrap().status, 200);
//! ```

use crate::{
    DirEntry, Error, FileKind, Files, Host, Http, Level, Metadata, Request, Response, Result, State,
};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A [`Host`] whose capabilities are the public fakes below.
#[derive(Default)]
pub struct FakeHost {
    pub state: FakeState,
    pub files: FakeFiles,
    pub http: FakeHttp,
    logs: RefCell<Vec<(Level, String)>>,
}

impl FakeHost {
    pub fn new() -> Self {
        Self::default()
    }

    /// Every line logged so far.
    pub fn logs(&self) -> Vec<(Level, String)> {
        self.logs.borrow().clone()
    }
}

impl Host for FakeHost {
    fn log(&self, level: Level, message: &str) {
        self.logs.borrow_mut().push((level, message.to_string()));
    }
    fn state(&self) -> &dyn State {
        &self.state
    }
    fn files(&self) -> &dyn Files {
        &self.files
    }
    fn http(&self) -> &dyn Http {
        &self.http
    }
}

#[derive(Default)]
pub struct FakeState {
    entries: RefCell<BTreeMap<String, Vec<u8>>>,
}

impl State for FakeState {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.entries.borrow().get(key).cloned())
    }
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.entries
            .borrow_mut()
            .insert(key.to_string(), value.to_vec());
        Ok(())
    }
    fn delete(&self, key: &str) -> Result<bool> {
        Ok(self.entries.borrow_mut().remove(key).is_some())
    }
    fn list_keys(&self, prefix: &str) -> Result<Vec<String>> {
        Ok(self
            .entries
            .borrow()
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect())
    }
}

/// A file tree in memory. With no grant added every path is allowed; once
/// [`FakeFiles::grant`] is called, paths outside the grants are `denied`.
#[derive(Default)]
pub struct FakeFiles {
    files: RefCell<BTreeMap<String, (Vec<u8>, u32)>>,
    dirs: RefCell<BTreeSet<String>>,
    grants: RefCell<Vec<(String, bool)>>,
}

impl FakeFiles {
    /// Allow `root` and everything below it; `write` allows mutations.
    pub fn grant(&self, root: &str, write: bool) -> &Self {
        self.grants
            .borrow_mut()
            .push((root.trim_end_matches('/').to_string(), write));
        self
    }

    /// Put a file in place (creating its parents), as if the operator had written it.
    pub fn put(&self, path: &str, contents: &[u8]) -> &Self {
        self.add_parents(path);
        self.files
            .borrow_mut()
            .insert(path.to_string(), (contents.to_vec(), 0o644));
        self
    }

    /// The content of `path`, if it is a file.
    pub fn get(&self, path: &str) -> Option<Vec<u8>> {
        self.files.borrow().get(path).map(|(c, _)| c.clone())
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

    fn check(&self, path: &str, write: bool) -> Result<()> {
        if !path.starts_with('/') || path.split('/').any(|c| c == "..") {
            return Err(Error::Invalid(format!(
                "{path}: use an absolute path without `..`"
            )));
        }
        let grants = self.grants.borrow();
        if grants.is_empty() {
            return Ok(());
        }
        let covering = grants.iter().filter(|(root, _)| is_within(path, root));
        match covering.map(|(_, w)| *w).max() {
            None => Err(Error::Denied(format!("no files grant covers {path}"))),
            Some(false) if write => Err(Error::Denied(format!("{path} is granted read-only"))),
            Some(_) => Ok(()),
        }
    }
}

fn parent(path: &str) -> Option<&str> {
    match path.rfind('/') {
        Some(0) | None => None,
        Some(i) => Some(&path[..i]),
    }
}

fn is_within(path: &str, root: &str) -> bool {
    path == root
        || path
            .strip_prefix(root)
            .is_some_and(|rest| rest.starts_with('/'))
}

impl Files for FakeFiles {
    fn read(&self, path: &str) -> Result<Vec<u8>> {
        self.check(path, false)?;
        self.get(path)
            .ok_or_else(|| Error::NotFound(format!("{path} does not exist")))
    }
    fn write(&self, path: &str, contents: &[u8], mode: Option<u32>) -> Result<bool> {
        self.check(path, true)?;
        let new = (contents.to_vec(), mode.unwrap_or(0o644));
        self.add_parents(path);
        let old = self
            .files
            .borrow_mut()
            .insert(path.to_string(), new.clone());
        Ok(old.as_ref() != Some(&new))
    }
    fn remove(&self, path: &str) -> Result<bool> {
        self.check(path, true)?;
        if self.files.borrow_mut().remove(path).is_some() {
            return Ok(true);
        }
        if self.dirs.borrow().contains(path) {
            if !self.list(path)?.is_empty() {
                return Err(Error::Conflict(format!(
                    "{path} is a directory that is not empty"
                )));
            }
            return Ok(self.dirs.borrow_mut().remove(path));
        }
        Ok(false)
    }
    fn list(&self, path: &str) -> Result<Vec<DirEntry>> {
        self.check(path, false)?;
        if !self.dirs.borrow().contains(path) {
            return Err(Error::NotFound(format!("directory {path} does not exist")));
        }
        let is_child = |p: &&String| parent(p) == Some(path);
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
        self.check(path, false)?;
        if let Some((contents, mode)) = self.files.borrow().get(path) {
            let size = contents.len() as u64;
            return Ok(Some(Metadata {
                kind: FileKind::File,
                size,
                mode: *mode,
                modified_ms: None,
            }));
        }
        Ok(self.dirs.borrow().contains(path).then_some(Metadata {
            kind: FileKind::Directory,
            size: 0,
            mode: 0o755,
            modified_ms: None,
        }))
    }
}

fn name_of(path: &str) -> String {
    path.rsplit('/').next().unwrap_or(path).to_string()
}

/// Scripted HTTP: answers per method and URL; anything unscripted is `unavailable`,
/// like a connection refused. Records every request it was sent.
#[derive(Default)]
pub struct FakeHttp {
    responses: RefCell<HashMap<(String, String), Result<Response>>>,
    sent: RefCell<Vec<Request>>,
}

impl FakeHttp {
    pub fn respond(&self, method: &str, url: &str, response: Result<Response>) -> &Self {
        self.responses
            .borrow_mut()
            .insert((method.to_string(), url.to_string()), response);
        self
    }

    /// Answer `GET url` with `status` and an empty body.
    pub fn status(&self, url: &str, status: u16) -> &Self {
        self.respond(
            "GET",
            url,
            Ok(Response {
                status,
                headers: vec![],
                body: vec![],
            }),
        )
    }

    /// Every request sent so far.
    pub fn sent(&self) -> Vec<Request> {
        self.sent.borrow().clone()
    }
}

impl Http for FakeHttp {
    fn send(&self, request: &Request) -> Result<Response> {
        self.sent.borrow_mut().push(request.clone());
        let key = (request.method.clone(), request.url.clone());
        self.responses
            .borrow()
            .get(&key)
            .cloned()
            .unwrap_or_else(|| {
                Err(Error::Unavailable(format!(
                    "{} {}: connection refused",
                    request.method, request.url
                )))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_reports_change_only_when_content_differs() {
        let files = FakeFiles::default();
        assert!(files.write("/etc/a/b", b"x", None).unwrap());
        assert!(!files.write("/etc/a/b", b"x", None).unwrap());
        assert!(files.write("/etc/a/b", b"y", None).unwrap());
    }

    #[test]
    fn grants_deny_outside_roots_and_read_only_writes() {
        let files = FakeFiles::default();
        files
            .grant("/etc/containerd", true)
            .grant("/var/log", false);
        assert!(files.write("/etc/containerd/x", b"", None).is_ok());
        assert!(matches!(
            files.write("/etc/containerdx", b"", None),
            Err(Error::Denied(_))
        ));
        assert!(matches!(
            files.write("/var/log/x", b"", None),
            Err(Error::Denied(_))
        ));
        assert!(matches!(
            files.read("/etc/containerd/../passwd"),
            Err(Error::Invalid(_))
        ));
    }

    #[test]
    fn list_and_remove_follow_directory_rules() {
        let files = FakeFiles::default();
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
    fn unscripted_http_is_unavailable_and_recorded() {
        let http = FakeHttp::default();
        let err = http.send(&Request::get("http://x/")).unwrap_err();
        assert_eq!(err.kind(), "unavailable");
        assert_eq!(http.sent().len(), 1);
    }
}
