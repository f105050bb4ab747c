//! Engine settings: pooling allocator (on-demand when its reservation fails) and
//! epoch interruption driven by a ticker that runs only while a plugin runs.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often a running guest yields to the host, so deadlines can cut it off.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

fn config() -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config
}

/// Sized for a few dozen plugins, each possibly several core instances
/// (componentize-py components have about ten) and instantiated concurrently.
fn pooling() -> PoolingAllocationConfig {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(64)
        .total_core_instances(640)
        .total_memories(128)
        .total_tables(640)
        .total_stacks(64)
        .max_core_instances_per_component(32)
        .max_memories_per_component(16)
        .max_tables_per_component(32)
        .max_tables_per_module(8)
        .table_elements(100_000)
        .max_core_instance_size(4 << 20)
        .max_component_instance_size(1 << 20);
    pool
}

/// The Winch (baseline compiler) engine. On-demand allocation: it serves a
/// plugin only until the Cranelift build is ready, so it reserves nothing.
///
/// Winch compiles the functions, but the entry trampolines (one per function
/// that escapes: exported or in a table, which for componentize-py's
/// dynamically linked CPython is nearly all 10,600 of them) are still compiled
/// by Cranelift, and at its default settings they were a third of a Winch
/// build. They are a few instructions each, run once per host-to-guest call,
/// so they are built without optimization and with the single-pass register
/// allocator: the 18 MB Python component's Winch build went from about 1470
/// to 970-1260 ms of CPU (docs/benchmarks.md).
pub fn build_baseline() -> anyhow::Result<Engine> {
    let mut config = config();
    config
        .strategy(wasmtime::Strategy::Winch)
        .cranelift_opt_level(wasmtime::OptLevel::None)
        .cranelift_regalloc_algorithm(wasmtime::RegallocAlgorithm::SinglePass);
    Ok(Engine::new(&config)?)
}

/// The Cranelift engine, and whether it uses the pooling allocator.
pub fn build() -> anyhow::Result<(Engine, bool)> {
    let mut pooled = config();
    pooled.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling()));
    match Engine::new(&pooled) {
        Ok(engine) => Ok((engine, true)),
        Err(e) => {
            tracing::warn!("pooling allocator unavailable ({e:#}); using on-demand allocation");
            Ok((Engine::new(&config())?, false))
        }
    }
}

/// Advances the engines' epochs every [`EPOCH_TICK`] while at least one guest
/// runs, and sleeps otherwise: an idle host does no periodic work.
#[derive(Clone)]
pub struct EpochTicker {
    shared: Arc<(Mutex<usize>, Condvar)>,
}

impl EpochTicker {
    pub fn start(engines: &[&Engine]) -> Self {
        let shared = Arc::new((Mutex::new(0usize), Condvar::new()));
        let ticker = EpochTicker {
            shared: shared.clone(),
        };
        let engines: Vec<_> = engines.iter().map(|e| e.weak()).collect();
        std::thread::Builder::new()
            .name("tend-epoch".into())
            .spawn(move || {
                let (running, wake) = &*shared;
                loop {
                    let mut count = running.lock().unwrap();
                    while *count == 0 {
                        count = wake.wait(count).unwrap();
                    }
                    drop(count);
                    std::thread::sleep(EPOCH_TICK);
                    for engine in &engines {
                        match engine.upgrade() {
                            Some(engine) => engine.increment_epoch(),
                            None => return,
                        }
                    }
                }
            })
            .expect("spawn the epoch ticker thread");
        ticker
    }

    /// Keep ticking until the guard is dropped.
    pub fn running(&self) -> TickGuard {
        let (running, wake) = &*self.shared;
        *running.lock().unwrap() += 1;
        wake.notify_one();
        TickGuard(self.clone())
    }
}

pub struct TickGuard(EpochTicker);

impl Drop for TickGuard {
    fn drop(&mut self) {
        *self.0.shared.0.lock().unwrap() -= 1;
    }
}
