//! A plugin compiled once: the validated component and its `InstancePre`,
//! shared by every reconcile until the file changes.

use super::cache::{CacheOutcome, Lookup, sha256_hex};
use super::store::CallState;
use super::{Compiler, Runtime};
use crate::wit::PluginPre;
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
    pub compiler: Compiler,
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
    /// Read, compile with Cranelift (or load from the cache) and validate a
    /// component file. CPU-heavy on a cache miss: call it off the async executor.
    pub fn load(&self, path: &Path) -> Result<CompiledPlugin, LoadError> {
        self.load_with(path, false)
    }

    /// Like [`Runtime::load`], but on a cache miss compile with Winch, about
    /// four times faster, so a new plugin can run at once; the caller then swaps
    /// in the Cranelift build from [`Runtime::load`] when it is ready.
    pub fn load_quick(&self, path: &Path) -> Result<CompiledPlugin, LoadError> {
        self.load_with(path, true)
    }

    fn load_with(&self, path: &Path, quick: bool) -> Result<CompiledPlugin, LoadError> {
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
        let cached = match quick {
            true => match self.optimized.cache.lookup(&self.optimized.engine, &digest) {
                Lookup::Hit(component) => Some(component),
                Lookup::Absent | Lookup::Corrupt => None,
            },
            false => None,
        };
        let (tier, compiler, component, cache) = match cached {
            Some(component) => (
                &self.optimized,
                Compiler::Cranelift,
                component,
                CacheOutcome::Hit,
            ),
            None if quick => {
                let component = Component::new(&self.baseline.engine, &wasm)
                    .map_err(|e| compile_error(e.into()))?;
                (
                    &self.baseline,
                    Compiler::Winch,
                    component,
                    CacheOutcome::Miss,
                )
            }
            None => {
                let (component, cache) = self
                    .optimized
                    .cache
                    .load_or_compile(&self.optimized.engine, &wasm, &digest)
                    .map_err(compile_error)?;
                (&self.optimized, Compiler::Cranelift, component, cache)
            }
        };
        let ty = component.component_type();
        let imports: Vec<String> = ty
            .imports(&tier.engine)
            .map(|(n, _)| n.to_string())
            .collect();
        let exports: Vec<String> = ty
            .exports(&tier.engine)
            .map(|(n, _)| n.to_string())
            .collect();
        if !exports.iter().any(|e| e == RECONCILER_EXPORT) {
            return Err(LoadError::Exports {
                path: path.to_path_buf(),
                cause: format!("it exports [{}]", exports.join(", ")),
            });
        }
        let instance_pre =
            tier.linker
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
            compiler,
            cache,
            load_time: started.elapsed(),
        })
    }
}
