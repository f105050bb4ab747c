//! A plugin compiled once: the validated component and its `InstancePre`,
//! shared by every reconcile until the file changes.

use super::cache::{CacheOutcome, Lookup, sha256_digest};
use super::store::CallState;
use super::{Compiler, Priority, Runtime, Tier};
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
    /// The same build for the on-demand engine, made the first time the
    /// instance pool is full when this plugin runs (None: it could not be).
    pub(super) beyond_pool: std::sync::OnceLock<Option<PluginPre<CallState>>>,
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
    /// A plugin from a registry could not be pulled or verified (the text
    /// names the reference, the cause and the fix).
    #[error("{0}")]
    Fetch(String),
}

/// The build [`Runtime::load_quick`] serves on a compile-cache miss.
struct QuickBuild<'a> {
    tier: &'a Tier,
    component: Component,
    compiler: Compiler,
    cache: CacheOutcome,
    /// Why Winch refused the component, when Cranelift built it instead.
    winch_refused: Option<String>,
}

impl Runtime {
    /// Compile with Winch; if Winch refuses (a proposal it does not implement,
    /// such as tail calls in QuickJS `--opt-size` builds), compile and cache
    /// with Cranelift instead. A component Cranelift refuses too is invalid:
    /// its error is Cranelift's, so the fall-back never hides a broken file.
    fn compile_quick(
        &self,
        path: &Path,
        wasm: &[u8],
        digest: &str,
    ) -> anyhow::Result<QuickBuild<'_>> {
        let winch = {
            let _turn = self.compiles.enter(Priority::Quick);
            self.baseline.compile(wasm)
        };
        let winch =
            winch.and_then(|bytes| self.baseline.uncached.load(&self.baseline.engine, &bytes));
        let winch_error = match winch {
            Ok(component) => {
                return Ok(QuickBuild {
                    tier: &self.baseline,
                    component,
                    compiler: Compiler::Winch,
                    cache: CacheOutcome::Miss,
                    winch_refused: None,
                });
            }
            Err(e) => e,
        };
        let (tier, component, cache) = self.build_optimized(path, wasm, digest, Priority::Quick)?;
        Ok(QuickBuild {
            tier,
            component,
            compiler: Compiler::Cranelift,
            cache,
            winch_refused: Some(format!("{winch_error:#}")),
        })
    }

    /// The Cranelift build, from the compile cache or compiled (and cached):
    /// for the pooled engine, or the on-demand one when the pool's limits for
    /// one plugin refuse the component (said in a log line). When both refuse
    /// it, the on-demand engine's error is the component's own fault. A
    /// compile waits for its turn in the compile lane, at `priority`.
    fn build_optimized(
        &self,
        path: &Path,
        wasm: &[u8],
        digest: &str,
        priority: Priority,
    ) -> anyhow::Result<(&Tier, Component, CacheOutcome)> {
        // A build either engine loads as it is, before either compiles: a
        // precompiled build the pool's limits refuse is the on-demand
        // engine's, not a reason to compile.
        if let Some(found) = self.cached_optimized(digest) {
            if !std::ptr::eq(found.0, &self.optimized) {
                beyond_the_pool(path, "the pooled engine would not load its build");
            }
            return Ok(found);
        }
        let build = |tier: &Tier| {
            tier.cache.load_or_compile(&tier.engine, digest, || {
                let _turn = self.compiles.enter(priority);
                tier.compile(wasm)
            })
        };
        match (build(&self.optimized), &self.beyond_pool) {
            (Ok((component, cache)), _) => Ok((&self.optimized, component, cache)),
            (Err(refused), Some(tier)) => {
                let (component, cache) = build(tier)?;
                beyond_the_pool(path, &format!("{refused:#}"));
                Ok((tier, component, cache))
            }
            (Err(e), None) => Err(e),
        }
    }

    /// A cached or precompiled Cranelift build of `digest`, pooled or beyond
    /// the pool.
    fn cached_optimized(&self, digest: &str) -> Option<(&Tier, Component, CacheOutcome)> {
        std::iter::once(&self.optimized)
            .chain(&self.beyond_pool)
            .find_map(|tier| match tier.cache.lookup(&tier.engine, digest) {
                Lookup::Hit(component) => Some((tier, component, CacheOutcome::Hit)),
                Lookup::Precompiled(component) => {
                    Some((tier, component, CacheOutcome::Precompiled))
                }
                Lookup::Absent
                | Lookup::Corrupt(_)
                | Lookup::Refused(_)
                | Lookup::PrecompiledRefused(_) => None,
            })
    }

    /// Read, compile with Cranelift (or load from the cache) and validate a
    /// component file. CPU-heavy on a cache miss: call it off the async executor.
    pub fn load(&self, path: &Path) -> Result<CompiledPlugin, LoadError> {
        self.load_with(path, false)
    }

    /// Like [`Runtime::load`], but on a cache miss compile with Winch, about
    /// four times faster, so a new plugin can run at once; the caller then swaps
    /// in the Cranelift build from [`Runtime::load`] when it is ready. A
    /// component Winch cannot compile is built (and cached) by Cranelift at once.
    pub fn load_quick(&self, path: &Path) -> Result<CompiledPlugin, LoadError> {
        self.load_with(path, true)
    }

    fn load_with(&self, path: &Path, quick: bool) -> Result<CompiledPlugin, LoadError> {
        let started = Instant::now();
        let wasm = crate::untrusted::read(path, crate::untrusted::MAX_COMPONENT_BYTES).map_err(
            |source| LoadError::Read {
                path: path.to_path_buf(),
                source,
            },
        )?;
        let digest = sha256_digest(&wasm);
        let compile_error = |e: anyhow::Error| LoadError::Compile {
            path: path.to_path_buf(),
            cause: format!("{e:#}"),
        };
        let cached = match quick {
            true => self.cached_optimized(&digest),
            false => None,
        };
        let (tier, compiler, component, cache) = match cached {
            Some((tier, component, cache)) => (tier, Compiler::Cranelift, component, cache),
            None if quick => {
                let quick = self
                    .compile_quick(path, &wasm, &digest)
                    .map_err(compile_error)?;
                if let Some(why) = &quick.winch_refused {
                    tracing::warn!(file = %path.display(), "Winch cannot compile it ({why}); compiled by Cranelift instead");
                }
                (quick.tier, quick.compiler, quick.component, quick.cache)
            }
            None => {
                let (tier, component, cache) = self
                    .build_optimized(path, &wasm, &digest, Priority::Optimized)
                    .map_err(compile_error)?;
                (tier, Compiler::Cranelift, component, cache)
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
            beyond_pool: std::sync::OnceLock::new(),
            load_time: started.elapsed(),
        })
    }
}

/// The log line of a plugin the instance pool's limits for one plugin
/// refuse (`why`), which runs with on-demand allocation.
fn beyond_the_pool(path: &Path, why: &str) {
    tracing::warn!(
        file = %path.display(),
        "beyond the instance pool's limits for one plugin ({why}); it runs with on-demand allocation"
    );
}

#[cfg(test)]
mod tests {
    use super::super::test_component::{Extras, exporting_run, module, run};
    use super::*;
    use wasm_encoder::{Function, Instruction, TableSection, TableType};

    /// A component exporting `run: func() -> u32` whose core function reaches
    /// its result through `return_call` (a tail call, which Winch does not
    /// implement): 42.
    fn tail_call_component() -> Vec<u8> {
        let mut run = Function::new([]);
        run.instruction(&Instruction::ReturnCall(1));
        run.instruction(&Instruction::End);
        let mut answer = Function::new([]);
        answer.instruction(&Instruction::I32Const(42));
        answer.instruction(&Instruction::End);
        exporting_run(&module(&[run, answer], &Extras::default()), 1)
    }

    /// A component returning 42 whose one module has `tables` tables.
    fn component_with_tables(tables: u32) -> Vec<u8> {
        let mut section = TableSection::new();
        for _ in 0..tables {
            section.table(TableType {
                element_type: wasm_encoder::RefType::FUNCREF,
                table64: false,
                minimum: 0,
                maximum: None,
                shared: false,
            });
        }
        let mut answer = Function::new([]);
        answer.instruction(&Instruction::I32Const(42));
        answer.instruction(&Instruction::End);
        let extras = Extras {
            tables: Some(section),
            ..Extras::default()
        };
        exporting_run(&module(&[answer], &extras), 1)
    }

    #[test]
    fn a_plugin_beyond_the_pools_limits_for_one_plugin_runs_on_demand() {
        let runtime = Runtime::new(None, 1).unwrap();
        assert!(runtime.pooling, "the test needs the pool");
        let path = Path::new("many-tables.wasm");
        // The pool holds 8 tables a module.
        let within = component_with_tables(8);
        let (tier, component, _) = runtime
            .build_optimized(path, &within, &sha256_digest(&within), Priority::Optimized)
            .unwrap();
        assert!(std::ptr::eq(tier, &runtime.optimized), "pooled");
        assert_eq!(run(&tier.engine, &component), 42);

        let beyond = component_with_tables(9);
        let Err(refused) = Component::new(&runtime.optimized.engine, &beyond) else {
            panic!("the pool refuses nine tables in a module");
        };
        assert!(format!("{refused:#}").contains("table"), "{refused:#}");
        let (tier, component, _) = runtime
            .build_optimized(path, &beyond, &sha256_digest(&beyond), Priority::Optimized)
            .unwrap();
        assert!(
            std::ptr::eq(tier, runtime.beyond_pool.as_ref().unwrap()),
            "on demand"
        );
        assert_eq!(run(&tier.engine, &component), 42);
    }

    /// With a compile cache, a plugin beyond the pool is compiled once: the
    /// pooled engine refuses the cached build at once, and the on-demand
    /// engine loads it (the same entry), on every later start too.
    #[test]
    fn a_plugin_beyond_the_pool_is_compiled_once_with_a_cache() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let beyond = component_with_tables(9);
        let digest = sha256_digest(&beyond);
        let path = Path::new("many-tables.wasm");
        let start = || Runtime::new(Some(dir.path()), 1).unwrap();
        let first = start();
        assert!(first.pooling, "the test needs the pool");
        let (tier, _, outcome) = first
            .build_optimized(path, &beyond, &digest, Priority::Optimized)
            .unwrap();
        assert!(std::ptr::eq(tier, first.beyond_pool.as_ref().unwrap()));
        let (artifact, _) = first.optimized.cache.entry(&digest).unwrap();
        assert_eq!(
            Some(artifact.clone()),
            tier.cache.entry(&digest).map(|(a, _)| a),
            "one entry for both engines"
        );
        let written = std::fs::metadata(&artifact).unwrap().ino();
        assert_ne!(outcome, CacheOutcome::Corrupt);

        let again = start();
        assert!(matches!(
            again
                .optimized
                .cache
                .lookup(&again.optimized.engine, &digest),
            Lookup::Refused(_)
        ));
        let (tier, component, outcome) = again
            .build_optimized(path, &beyond, &digest, Priority::Optimized)
            .unwrap();
        assert!(std::ptr::eq(tier, again.beyond_pool.as_ref().unwrap()));
        assert_eq!(outcome, CacheOutcome::Hit);
        assert_eq!(
            std::fs::metadata(&artifact).unwrap().ino(),
            written,
            "nothing compiled or written again"
        );
        assert_eq!(run(&tier.engine, &component), 42);
    }

    #[test]
    fn a_component_both_engines_refuse_reports_its_own_fault() {
        let runtime = Runtime::new(None, 1).unwrap();
        let mut wasm = tail_call_component();
        wasm.truncate(wasm.len() - 4);
        let Err(error) = runtime.build_optimized(
            Path::new("broken.wasm"),
            &wasm,
            "sha256:broken",
            Priority::Optimized,
        ) else {
            panic!("a truncated component is refused");
        };
        assert!(!format!("{error:#}").contains("pool"), "{error:#}");
    }

    #[test]
    fn a_component_winch_refuses_is_built_by_cranelift_and_runs() {
        let cache = tempfile::tempdir().unwrap();
        let runtime = Runtime::new(Some(cache.path()), 1).unwrap();
        let wasm = tail_call_component();
        let digest = sha256_digest(&wasm);
        assert!(
            Component::new(&runtime.baseline.engine, &wasm).is_err(),
            "the test needs a component Winch refuses"
        );

        let first = runtime
            .compile_quick(Path::new("tail-call.wasm"), &wasm, &digest)
            .unwrap();
        assert_eq!(first.compiler, Compiler::Cranelift);
        assert_eq!(first.cache, CacheOutcome::Miss);
        let why = first.winch_refused.expect("the fall-back is recorded");
        assert!(why.contains("tail call"), "{why}");
        assert_eq!(run(&runtime.optimized.engine, &first.component), 42);

        let again = runtime
            .compile_quick(Path::new("tail-call.wasm"), &wasm, &digest)
            .unwrap();
        assert_eq!(
            again.cache,
            CacheOutcome::Hit,
            "the Cranelift build was cached"
        );
    }

    #[test]
    fn a_component_winch_compiles_is_built_by_winch() {
        let runtime = Runtime::new(None, 1).unwrap();
        let wasm = b"\0asm\x0d\0\x01\0";
        let build = runtime
            .compile_quick(Path::new("empty.wasm"), wasm, "sha256:empty")
            .unwrap();
        assert_eq!(build.compiler, Compiler::Winch);
        assert!(build.winch_refused.is_none());
    }

    /// What the daemon's first reconcile of a new plugin runs is mapped from
    /// a file with no name in the compile cache's directory.
    #[test]
    fn a_winch_build_is_mapped_from_an_unnamed_file_in_the_cache_dir() {
        use super::super::test_component::{mapped_from_unnamed_file_in, returning};
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let runtime = Runtime::new(Some(&cache), 1).unwrap();
        let build = runtime
            .compile_quick(Path::new("seven.wasm"), &returning(7), "sha256:seven")
            .unwrap();
        assert_eq!(build.compiler, Compiler::Winch);
        assert!(mapped_from_unnamed_file_in(&cache, &build.component));
    }

    /// A pooled runtime whose compile cache is `dir`/cache (empty), with
    /// `wasm` made ahead of time (for the portable CPU level) in
    /// `dir`/precompiled; and the component's digest.
    fn precompiled_for(dir: &Path, wasm: &[u8]) -> (Runtime, String) {
        let ahead = dir.join("precompiled");
        let digest = sha256_digest(wasm);
        let compiled = super::super::precompile(wasm, super::super::CpuLevel::portable()).unwrap();
        super::super::create_precompiled_dir(&ahead).unwrap();
        super::super::write_precompiled(&ahead, &digest, &compiled).unwrap();
        let runtime = Runtime::new(Some(&dir.join("cache")), 1)
            .unwrap()
            .with_precompiled(Some(&ahead));
        assert!(runtime.pooling, "the test needs the pool");
        (runtime, digest)
    }

    /// The lookup a quick load makes first (`cached_optimized`) finds the
    /// build made ahead of time (for the portable CPU level) and serves it on
    /// the pooled engine at once: no Winch build first, no compile at all.
    #[test]
    fn a_build_made_ahead_of_time_is_served_on_the_pool_uncompiled() {
        use super::super::test_component::{returning, run};
        let dir = tempfile::tempdir().unwrap();
        let (runtime, digest) = precompiled_for(dir.path(), &returning(7));
        let (tier, component, outcome) = runtime.cached_optimized(&digest).unwrap();
        assert_eq!(outcome, CacheOutcome::Precompiled);
        assert!(std::ptr::eq(tier, &runtime.optimized), "pooled");
        assert_eq!(run(&tier.engine, &component), 7);
        assert!(!dir.path().join("cache").exists(), "nothing compiled");
    }

    /// A precompiled build the pool's limits for one plugin refuse is served
    /// by the on-demand engine as it is: nothing compiled, nothing cached.
    #[test]
    fn a_precompiled_build_beyond_the_pool_runs_on_demand_uncompiled() {
        let dir = tempfile::tempdir().unwrap();
        let beyond = component_with_tables(9);
        let (runtime, digest) = precompiled_for(dir.path(), &beyond);
        let (tier, component, outcome) = runtime
            .build_optimized(
                Path::new("many-tables.wasm"),
                &beyond,
                &digest,
                Priority::Optimized,
            )
            .unwrap();
        assert!(
            std::ptr::eq(tier, runtime.beyond_pool.as_ref().unwrap()),
            "on demand"
        );
        assert_eq!(outcome, CacheOutcome::Precompiled);
        assert_eq!(
            super::super::test_component::run(&tier.engine, &component),
            42
        );
        assert!(!dir.path().join("cache").exists(), "nothing compiled");
    }

    #[test]
    fn a_corrupt_component_is_still_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = Runtime::new(Some(&dir.path().join("cache")), 1).unwrap();
        let mut wasm = tail_call_component();
        let end = wasm.len() - 4;
        wasm.truncate(end);
        let file = dir.path().join("broken.wasm");
        std::fs::write(&file, &wasm).unwrap();
        match runtime.load_quick(&file) {
            Err(LoadError::Compile { .. }) => {}
            Err(other) => panic!("expected a compile error, got {other}"),
            Ok(_) => panic!("a truncated component loaded"),
        }
        assert!(
            !dir.path().join("cache").exists(),
            "nothing was cached for it"
        );
    }
}
