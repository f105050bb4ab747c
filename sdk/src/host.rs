//! The capabilities a plugin is handed, as traits: the wasm build calls the host
//! through them, and [`crate::testing`] implements them in memory.

use crate::Result;
use serde::{Serialize, de::DeserializeOwned};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

/// What a reconcile can reach. Each accessor is always present; whether a call
/// succeeds depends on the operator's grants (an ungranted call returns `denied`).
pub trait Host {
    fn log(&self, level: Level, message: &str);
    fn state(&self) -> &dyn State;
    fn files(&self) -> &dyn Files;
    fn http(&self) -> &dyn Http;
}

/// The plugin's own persistent key-value store.
pub trait State {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>>;
    fn set(&self, key: &str, value: &[u8]) -> Result<()>;
    fn delete(&self, key: &str) -> Result<bool>;
    fn list_keys(&self, prefix: &str) -> Result<Vec<String>>;
}

impl dyn State + '_ {
    /// The JSON value under `key`, or none; a value that does not parse is `invalid`.
    pub fn get_json<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>> {
        match self.get(key)? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| crate::Error::Invalid(format!("state key {key:?}: {e}"))),
        }
    }

    pub fn set_json<T: Serialize>(&self, key: &str, value: &T) -> Result<()> {
        let bytes = serde_json::to_vec(value)
            .map_err(|e| crate::Error::Invalid(format!("state key {key:?}: {e}")))?;
        self.set(key, &bytes)
    }
}

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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
    pub timeout: Option<Duration>,
}

impl Request {
    pub fn get(url: &str) -> Self {
        Request {
            method: "GET".into(),
            url: url.into(),
            headers: Vec::new(),
            body: None,
            timeout: None,
        }
    }

    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Outbound HTTP to the URL patterns granted to the plugin.
pub trait Http {
    fn send(&self, request: &Request) -> Result<Response>;
}
