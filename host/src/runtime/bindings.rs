//! Host bindings of the `tend:plugin` world: each import is answered by the
//! capability adapters of the call's [`CallState`]; this file only converts
//! between WIT types and the adapters' types.

use super::call::CallState;
use crate::capabilities::{CapError, files as cap_files, http as cap_http, log as cap_log};
use std::time::Duration;

wasmtime::component::bindgen!({
    path: "../wit",
    world: "plugin",
    imports: { default: async },
    exports: { default: async },
});

pub use self::tend::plugin::types;
use self::tend::plugin::{files, http, log, state};

pub fn to_wit_error(e: CapError) -> types::Error {
    match e {
        CapError::Denied(m) => types::Error::Denied(m),
        CapError::NotFound(m) => types::Error::NotFound(m),
        CapError::Conflict(m) => types::Error::Conflict(m),
        CapError::Unavailable(m) => types::Error::Unavailable(m),
        CapError::Timeout(m) => types::Error::Timeout(m),
        CapError::Invalid(m) => types::Error::Invalid(m),
        CapError::BudgetExhausted(m) => types::Error::BudgetExhausted(m),
        CapError::Other(m) => types::Error::Other(m),
    }
}

pub fn from_wit_error(e: types::Error) -> CapError {
    match e {
        types::Error::Denied(m) => CapError::Denied(m),
        types::Error::NotFound(m) => CapError::NotFound(m),
        types::Error::Conflict(m) => CapError::Conflict(m),
        types::Error::Unavailable(m) => CapError::Unavailable(m),
        types::Error::Timeout(m) => CapError::Timeout(m),
        types::Error::Invalid(m) => CapError::Invalid(m),
        types::Error::BudgetExhausted(m) => CapError::BudgetExhausted(m),
        types::Error::Other(m) => CapError::Other(m),
    }
}

type WitResult<T> = Result<T, types::Error>;

impl types::Host for CallState {}

impl log::Host for CallState {
    async fn log(&mut self, level: log::Level, message: String) {
        let _ = self.counted("log", "log", Ok(()));
        let level = match level {
            log::Level::Trace => cap_log::Level::Trace,
            log::Level::Debug => cap_log::Level::Debug,
            log::Level::Info => cap_log::Level::Info,
            log::Level::Warn => cap_log::Level::Warn,
            log::Level::Error => cap_log::Level::Error,
        };
        self.caps.log.log(level, &message);
    }
}

impl state::Host for CallState {
    async fn get(&mut self, key: String) -> WitResult<Option<Vec<u8>>> {
        let result = self.caps.state.get(&key);
        self.counted("state", "get", result)
    }
    async fn set(&mut self, key: String, value: Vec<u8>) -> WitResult<()> {
        let result = self.caps.state.set(&key, value);
        self.counted("state", "set", result)
    }
    async fn delete(&mut self, key: String) -> WitResult<bool> {
        let result = self.caps.state.delete(&key);
        self.counted("state", "delete", result)
    }
    async fn list_keys(&mut self, prefix: String) -> WitResult<Vec<String>> {
        let result = self.caps.state.list_keys(&prefix);
        self.counted("state", "list-keys", result)
    }
}

fn file_kind(kind: cap_files::FileKind) -> files::FileKind {
    match kind {
        cap_files::FileKind::File => files::FileKind::File,
        cap_files::FileKind::Directory => files::FileKind::Directory,
        cap_files::FileKind::Symlink => files::FileKind::Symlink,
        cap_files::FileKind::Other => files::FileKind::Other,
    }
}

impl files::Host for CallState {
    async fn read(&mut self, path: String) -> WitResult<Vec<u8>> {
        let result = self.caps.files.read(path).await;
        self.counted("files", "read", result)
    }
    async fn write(
        &mut self,
        path: String,
        contents: Vec<u8>,
        mode: Option<u32>,
    ) -> WitResult<bool> {
        let result = self.caps.files.write(path, contents, mode).await;
        self.counted("files", "write", result)
    }
    async fn remove(&mut self, path: String) -> WitResult<bool> {
        let result = self.caps.files.remove(path).await;
        self.counted("files", "remove", result)
    }
    async fn list_dir(&mut self, path: String) -> WitResult<Vec<files::DirEntry>> {
        let result = self.caps.files.list(path).await;
        let entries = self.counted("files", "list-dir", result)?;
        Ok(entries
            .into_iter()
            .map(|e| files::DirEntry {
                name: e.name,
                kind: file_kind(e.kind),
            })
            .collect())
    }
    async fn stat(&mut self, path: String) -> WitResult<Option<files::Metadata>> {
        let result = self.caps.files.metadata(path).await;
        let meta = self.counted("files", "stat", result)?;
        Ok(meta.map(|m| files::Metadata {
            kind: file_kind(m.kind),
            size: m.size,
            mode: m.mode,
            modified_ms: m.modified_ms,
        }))
    }
}

impl http::Host for CallState {
    async fn send(&mut self, req: http::Request) -> WitResult<http::Response> {
        let timeout = req.timeout_ms.map(|ms| Duration::from_millis(ms.into()));
        let request = cap_http::HttpRequest {
            method: req.method,
            url: req.url,
            headers: req.headers,
            body: req.body,
        };
        let result = self.caps.http.send(request, timeout).await;
        let response = self.counted("http", "send", result)?;
        Ok(http::Response {
            status: response.status,
            headers: response.headers,
            body: response.body,
        })
    }
}
