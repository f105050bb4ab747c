//! The wasmtime side of Tend. "Compiled once" ([`CompiledPlugin`]: component +
//! `InstancePre`, validated against the world) is kept apart from "per call"
//! ([`call`]: a fresh `Store` and instance per reconcile, with limits).

mod cache;
/// A component's digest, as every part of Tend writes it.
pub use cache::sha256_digest;
mod call;
mod compile_lane;
mod engine;
mod plugin;
mod store;
#[cfg(test)]
mod test_component;

pub use cache::{
    ArtifactCache, CacheOutcome, create_precompiled_dir, precompiled_dir_problem, write_precompiled,
};
pub use call::{
    CallRequest, Failure, Health, Outcome, PluginInfo, ReconcileReport, SETTLE_GRACE, TapedRun,
};
pub use engine::{CpuLevel, EpochTicker};
pub use plugin::{CompiledPlugin, LoadError};
pub use store::CallState;

use compile_lane::{CompileLane, Priority};
use std::path::Path;
use wasmtime::component::Linker;
use wasmtime::{Config, Engine};

/// Which compiler built a plugin's machine code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Compiler {
    /// Optimizing; cached on disk; what runs in the steady state.
    Cranelift,
    /// Baseline, about 4x faster to compile: used on a compile-cache miss so a new
    /// plugin runs at once, until its Cranelift build is swapped in.
    Winch,
}

/// One compiler's engine, with the linker and compile cache that belong to it.
struct Tier {
    engine: Engine,
    /// The engine's settings but its instance allocator: what its builds
    /// compile on ([`Tier::compile`]).
    compiling: Config,
    linker: Linker<CallState>,
    cache: ArtifactCache,
    /// Where the builds of a tier that caches none are loaded from (files
    /// with no name, see [`cache::UncachedBuilds`]).
    uncached: cache::UncachedBuilds,
}

impl Tier {
    /// `pooled`: the engine allocates from an instance pool.
    fn new(
        engine: Engine,
        compiling: Config,
        cache_dir: Option<&Path>,
        pooled: bool,
    ) -> anyhow::Result<Self> {
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        crate::capabilities::Capabilities::add_to_linker(&mut linker)?;
        Ok(Tier {
            cache: ArtifactCache::new(cache_dir, &engine).with_pool_limits(pooled),
            engine,
            compiling,
            linker,
            uncached: cache::UncachedBuilds::new(None),
        })
    }

    /// A tier that caches nothing, whose fresh builds are mapped from files
    /// with no name in `dir`.
    fn mapping_uncached_builds_from(self, dir: Option<&Path>) -> Self {
        Tier {
            uncached: cache::UncachedBuilds::new(dir),
            ..self
        }
    }

    /// `wasm` compiled for this tier's engine, serialized, on an engine of its
    /// own that is dropped with all its compiler kept: wasmtime's Cranelift
    /// keeps each compile thread's scratch (regalloc's arenas) for its
    /// engine's life, some 20 MB after a first start with the built-in
    /// plugins (docs/benchmarks.md).
    fn compile(&self, wasm: &[u8]) -> anyhow::Result<Vec<u8>> {
        Ok(Engine::new(&self.compiling)?.precompile_component(wasm)?)
    }
}

/// The engines, the linkers with every capability, and the compile cache.
pub struct Runtime {
    /// Pooled when the pool could reserve its address space.
    optimized: Tier,
    /// On-demand Cranelift beside the pool, for a plugin beyond the pool's
    /// limits for one plugin; None when `optimized` is on-demand itself.
    beyond_pool: Option<Tier>,
    /// Never cached on disk: the Cranelift build is what persists.
    baseline: Tier,
    ticker: EpochTicker,
    /// Component instances the pool holds.
    pool_instances: u32,
    /// Every compile, one at a time (the start-up peak).
    compiles: CompileLane,
    /// False when the pooling allocator could not reserve its memory and the
    /// engine fell back to on-demand allocation.
    pub pooling: bool,
}

impl Runtime {
    /// `cache_dir`: where compiled components are kept across restarts; None
    /// compiles every time. `plugins`: how many the config enables, which sizes
    /// the instance pool.
    pub fn new(cache_dir: Option<&Path>, plugins: usize) -> anyhow::Result<Self> {
        let (cranelift, on_demand) = engine::build(plugins)?;
        let winch = Engine::new(&engine::baseline())?;
        let mut engines = vec![&cranelift, &winch];
        engines.extend(on_demand.as_ref());
        let ticker = EpochTicker::start(&engines);
        Ok(Runtime {
            optimized: Tier::new(
                cranelift,
                engine::optimized(),
                cache_dir,
                on_demand.is_some(),
            )?,
            pooling: on_demand.is_some(),
            beyond_pool: on_demand
                .map(|engine| Tier::new(engine, engine::optimized(), cache_dir, false))
                .transpose()?,
            baseline: Tier::new(winch, engine::baseline(), None, false)?
                .mapping_uncached_builds_from(cache_dir),
            ticker,
            pool_instances: engine::pool_instances(plugins),
            compiles: CompileLane::default(),
        })
    }

    /// Where the compile cache has no build of a component, load the one
    /// made ahead of time in `dir` (`precompiled-dir`), if there is one there;
    /// unless the directory is not Tend's alone, which a warning says with
    /// the fix (the builds only save a compile: no reason to refuse to start).
    pub fn with_precompiled(mut self, dir: Option<&Path>) -> Self {
        let problem = dir.and_then(cache::precompiled_dir_problem);
        if let Some(problem) = &problem {
            tracing::warn!("{problem}");
        }
        let dir = dir.filter(|_| problem.is_none());
        for tier in std::iter::once(&mut self.optimized).chain(self.beyond_pool.as_mut()) {
            tier.cache.set_precompiled(dir);
        }
        self
    }

    /// Bound the compile cache to `max_bytes`, never evicting the artifacts of
    /// `in_use` digests; returns how many entries were evicted.
    pub fn evict_cache(&self, in_use: &std::collections::HashSet<String>, max_bytes: u64) -> usize {
        self.optimized.cache.evict(in_use, max_bytes)
    }
}

/// `wasm` compiled ahead of time for the CPUs of `cpu` (`tend plugins
/// precompile`), serialized, on an engine of its own: what a runtime
/// [`Runtime::with_precompiled`] loads.
pub fn precompile(wasm: &[u8], cpu: CpuLevel) -> anyhow::Result<Vec<u8>> {
    Ok(Engine::new(&cpu.precompiling()?)?.precompile_component(wasm)?)
}
