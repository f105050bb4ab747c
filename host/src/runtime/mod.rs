//! The wasmtime side of Tend. "Compiled once" ([`CompiledPlugin`]: component +
//! `InstancePre`, validated against the world) is kept apart from "per call"
//! ([`call`]: a fresh `Store` and instance per reconcile, with limits).

mod bindings;
mod cache;
pub mod call;
mod engine;
mod plugin;

pub use cache::{ArtifactCache, CacheOutcome};
pub use call::{
    CallCount, CallState, Failure, Health, Outcome, PluginInfo, ReconcileReport, Trigger,
};
pub use engine::EpochTicker;
pub use plugin::{CompiledPlugin, LoadError};

use std::path::Path;
use wasmtime::Engine;
use wasmtime::component::Linker;

/// The engine, the linker with every capability, and the compiled-artifact cache.
pub struct Runtime {
    engine: Engine,
    linker: Linker<CallState>,
    cache: ArtifactCache,
    ticker: EpochTicker,
    /// False when the pooling allocator could not reserve its memory and the
    /// engine fell back to on-demand allocation.
    pub pooling: bool,
}

impl Runtime {
    /// `cache_dir`: where compiled components are kept across restarts; None
    /// compiles every time (for one-off commands such as `tend plugins inspect`).
    pub fn new(cache_dir: Option<&Path>) -> anyhow::Result<Self> {
        let (engine, pooling) = engine::build()?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        bindings::Plugin::add_to_linker::<CallState, wasmtime::component::HasSelf<CallState>>(
            &mut linker,
            |state| state,
        )?;
        let ticker = EpochTicker::start(&engine);
        Ok(Runtime {
            cache: ArtifactCache::new(cache_dir, &engine),
            engine,
            linker,
            ticker,
            pooling,
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Bound the compile cache to `max_bytes`, never evicting the artifacts of
    /// `in_use` digests; returns how many entries were evicted.
    pub fn evict_cache(&self, in_use: &std::collections::HashSet<String>, max_bytes: u64) -> usize {
        self.cache.evict(in_use, max_bytes)
    }
}
