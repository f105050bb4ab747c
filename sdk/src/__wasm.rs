//! The glue between the generated bindings and the SDK's types, used by
//! [`crate::export_plugin!`] in the wasm build.

use crate::bindings::tend::plugin::{files, http, log, state, types as wit};
use crate::{
    Context, DirEntry, Error, FileKind, Health, Host, Level, Metadata, Plugin, PluginInfo, Request,
    Response, Result, Trigger,
};

pub fn describe<P: Plugin>() -> wit::PluginInfo {
    let PluginInfo {
        name,
        version,
        summary,
    } = P::info();
    wit::PluginInfo {
        name,
        version,
        summary,
    }
}

pub fn reconcile<P: Plugin>(ctx: wit::Context) -> Result<wit::Outcome, wit::Error> {
    let ctx = Context {
        plugin: ctx.plugin,
        config: ctx.config,
        triggers: ctx
            .triggers
            .into_iter()
            .map(|t| Trigger {
                kind: t.kind,
                subject: t.subject,
            })
            .collect(),
        node_name: ctx.node_name,
        dry_run: ctx.dry_run,
    };
    match P::reconcile(&ctx, &WasmHost) {
        Ok(outcome) => Ok(wit::Outcome {
            health: match outcome.health {
                Health::Healthy => wit::Health::Healthy,
                Health::Progressing => wit::Health::Progressing,
                Health::Degraded => wit::Health::Degraded,
            },
            message: outcome.message,
            requeue_after_ms: outcome.requeue_after.map(|d| d.as_millis() as u64),
        }),
        Err(e) => Err(to_wit_error(e)),
    }
}

fn to_wit_error(e: Error) -> wit::Error {
    match e {
        Error::Denied(m) => wit::Error::Denied(m),
        Error::NotFound(m) => wit::Error::NotFound(m),
        Error::Conflict(m) => wit::Error::Conflict(m),
        Error::Unavailable(m) => wit::Error::Unavailable(m),
        Error::Timeout(m) => wit::Error::Timeout(m),
        Error::Invalid(m) => wit::Error::Invalid(m),
        Error::BudgetExhausted(m) => wit::Error::BudgetExhausted(m),
        Error::Other(m) => wit::Error::Other(m),
    }
}

fn from_wit_error(e: wit::Error) -> Error {
    match e {
        wit::Error::Denied(m) => Error::Denied(m),
        wit::Error::NotFound(m) => Error::NotFound(m),
        wit::Error::Conflict(m) => Error::Conflict(m),
        wit::Error::Unavailable(m) => Error::Unavailable(m),
        wit::Error::Timeout(m) => Error::Timeout(m),
        wit::Error::Invalid(m) => Error::Invalid(m),
        wit::Error::BudgetExhausted(m) => Error::BudgetExhausted(m),
        wit::Error::Other(m) => Error::Other(m),
    }
}

fn file_kind(kind: files::FileKind) -> FileKind {
    match kind {
        files::FileKind::File => FileKind::File,
        files::FileKind::Directory => FileKind::Directory,
        files::FileKind::Symlink => FileKind::Symlink,
        files::FileKind::Other => FileKind::Other,
    }
}

/// The real host, reached through the component's imports.
struct WasmHost;

impl Host for WasmHost {
    fn log(&self, level: Level, message: &str) {
        let level = match level {
            Level::Trace => log::Level::Trace,
            Level::Debug => log::Level::Debug,
            Level::Info => log::Level::Info,
            Level::Warn => log::Level::Warn,
            Level::Error => log::Level::Error,
        };
        log::log(level, message);
    }
    fn state(&self) -> &dyn crate::State {
        self
    }
    fn files(&self) -> &dyn crate::Files {
        self
    }
    fn http(&self) -> &dyn crate::Http {
        self
    }
}

impl crate::State for WasmHost {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        state::get(key).map_err(from_wit_error)
    }
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        state::set(key, value).map_err(from_wit_error)
    }
    fn delete(&self, key: &str) -> Result<bool> {
        state::delete(key).map_err(from_wit_error)
    }
    fn list_keys(&self, prefix: &str) -> Result<Vec<String>> {
        state::list_keys(prefix).map_err(from_wit_error)
    }
}

impl crate::Files for WasmHost {
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
        files::list_dir(path)
            .map(|entries| {
                entries
                    .into_iter()
                    .map(|e| DirEntry {
                        name: e.name,
                        kind: file_kind(e.kind),
                    })
                    .collect()
            })
            .map_err(from_wit_error)
    }
    fn metadata(&self, path: &str) -> Result<Option<Metadata>> {
        files::stat(path)
            .map(|m| {
                m.map(|m| Metadata {
                    kind: file_kind(m.kind),
                    size: m.size,
                    mode: m.mode,
                    modified_ms: m.modified_ms,
                })
            })
            .map_err(from_wit_error)
    }
}

impl crate::Http for WasmHost {
    fn send(&self, request: &Request) -> Result<Response> {
        let req = http::Request {
            method: request.method.clone(),
            url: request.url.clone(),
            headers: request.headers.clone(),
            body: request.body.clone(),
            timeout_ms: request
                .timeout
                .map(|t| t.as_millis().min(u32::MAX as u128) as u32),
        };
        http::send(&req)
            .map(|r| Response {
                status: r.status,
                headers: r.headers,
                body: r.body,
            })
            .map_err(from_wit_error)
    }
}
