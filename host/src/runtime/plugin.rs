//! A plugin compiled once: the validated component and its `InstancePre`,
//! shared by every reconcile until the file changes.

use super::bindings::PluginPre;
use super::cache::{CacheOutcome, sha256_hex};
use super::{CallState, Runtime};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use wasmtime::component::Component;

/// The export every plugin must provide.
pub const RECONCILER_EXPORT: &str = "tend:plugin/reconciler@0.1.0";

pub struct CompiledPlugin {
    pub path: PathBuf,
    /// "sha256:<hex>" of the component file.
    pub digest: String,
    pub component: Component,
    pub pre: PluginPre<CallState>,
    /// Interfaces the component imports, for `tend plugins inspect`.
    pub imports: Vec<String>,
    pub exports: Vec<String>,
    pub cache: CacheOutcome,
    /// Time to compile or load from cache, and validate.
    pub load_time: Duration,
}

/// Why a plugin file could not be loaded; the message names the file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a valid WebAssembly component: {cause}")]
    Compile { path: PathBuf, cause: String },
    #[error("{path}: does not export {RECONCILER_EXPORT} as Tend 0.1 defines it: {cause}")]
    Exports { path: PathBuf, cause: String },
    #[error("{path}: imports something Tend does not provide: {cause}")]
    Imports { path: PathBuf, cause: String },
}

impl Runtime {
    /// Read, compile (or load from the cache) and validate a component file.
    /// CPU-heavy on a cache miss: call it off the async executor.
    pub fn load(&self, path: &Path) -> Result<CompiledPlugin, LoadError> {
        let started = Instant::now();
        let wasm = std::fs::read(path).map_err(|source| LoadError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let digest = format!("sha256:{}", sha256_hex(&wasm));
        let compile_error = |e: anyhow::Error| LoadError::Compile {
            path: path.to_path_buf(),
            cause: format!("{e:#}"),
        };
        let (component, cache) = self
            .cache
            .load_or_compile(&self.engine, &wasm, &digest)
            .map_err(compile_error)?;
        let ty = component.component_type();
        let imports: Vec<String> = ty
            .imports(&self.engine)
            .map(|(n, _)| n.to_string())
            .collect();
        let exports: Vec<String> = ty
            .exports(&self.engine)
            .map(|(n, _)| n.to_string())
            .collect();
        if !exports.iter().any(|e| e == RECONCILER_EXPORT) {
            return Err(LoadError::Exports {
                path: path.to_path_buf(),
                cause: format!("it exports [{}]", exports.join(", ")),
            });
        }
        let instance_pre =
            self.linker
                .instantiate_pre(&component)
                .map_err(|e| LoadError::Imports {
                    path: path.to_path_buf(),
                    cause: format!("{e:#}"),
                })?;
        let pre = PluginPre::new(instance_pre).map_err(|e| LoadError::Exports {
            path: path.to_path_buf(),
            cause: format!("{e:#}"),
        })?;
        Ok(CompiledPlugin {
            path: path.to_path_buf(),
            digest,
            component,
            pre,
            imports,
            exports,
            cache,
            load_time: started.elapsed(),
        })
    }
}
