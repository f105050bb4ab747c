//! Engine settings: the pooling allocator sized from the config (an on-demand
//! engine beside it for a plugin beyond it, and alone when the pool cannot
//! reserve its address space), and epoch interruption driven by a ticker that
//! runs only while a plugin runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often a running guest yields to the host, so deadlines can cut it off.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// The Cranelift engines' settings, but the pool (which does not change
/// what they compile): what their builds compile on.
pub fn optimized() -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    // `TEND_PERFMAP=1 perf record ...` names the guest's functions (in
    // /tmp/perf-<pid>.map) where a profile otherwise shows `[JIT]`.
    if std::env::var_os("TEND_PERFMAP").is_some() {
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    config
}

/// Component instances the pool holds for `plugins` enabled plugins: a
/// reconcile and a plan or `describe` of each at once, and room for plugins a
/// reload adds. While it is full, a call runs on the on-demand engine
/// (`Runtime::instance_pre`).
pub fn pool_instances(plugins: usize) -> u32 {
    (plugins.saturating_mul(2).saturating_add(8)).clamp(16, 1000) as u32
}

/// Bytes of each linear memory a freed slot keeps resident: the pages a
/// plugin dirtied below it (found by Linux's PAGEMAP_SCAN, 6.7 and later) are
/// reset to the memory's initial image by `memcpy` instead of `madvise`, so
/// the next instance of the same plugin takes no page faults and no TLB
/// shootdown. A Rust plugin's stack, data and heap fit in it; a Python
/// plugin's beyond it is released as before. What stays resident is what the
/// plugin touched, at most this much per warm slot.
const MEMORY_KEEP_RESIDENT: usize = 4 << 20;
/// The same for each table (a Rust plugin's is a few hundred entries).
const TABLE_KEEP_RESIDENT: usize = 64 << 10;

/// The pool for `instances` component instances, each possibly several core
/// instances (componentize-py components have about ten).
fn pooling(instances: u32) -> PoolingAllocationConfig {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(instances)
        .total_core_instances(instances * 10)
        .total_memories(instances * 2)
        .total_tables(instances * 10)
        .total_stacks(instances)
        .max_unused_warm_slots(instances)
        .max_core_instances_per_component(32)
        .max_memories_per_component(16)
        .max_tables_per_component(32)
        .max_tables_per_module(8)
        .table_elements(100_000)
        .max_core_instance_size(4 << 20)
        .max_component_instance_size(1 << 20)
        .linear_memory_keep_resident(MEMORY_KEEP_RESIDENT)
        .table_keep_resident(TABLE_KEEP_RESIDENT)
        .pagemap_scan(wasmtime::Enabled::Auto);
    pool
}

/// The Winch (baseline compiler) engine's settings. On-demand allocation: it serves a
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
pub fn baseline() -> Config {
    let mut config = optimized();
    config
        .strategy(wasmtime::Strategy::Winch)
        .cranelift_opt_level(wasmtime::OptLevel::None)
        .cranelift_regalloc_algorithm(wasmtime::RegallocAlgorithm::SinglePass);
    config
}

/// The x86-64 CPU a build made ahead of time may assume (`tend plugins
/// precompile --cpu`). wasmtime loads a build on any host that has every CPU
/// feature it was compiled with, so a build for a level runs on every CPU of
/// that level, where one compiled for the machine at hand (`native`, as the
/// daemon compiles) needs that machine's features: an image's builds are made
/// on a build machine and run on nodes of every kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuLevel {
    /// The features of the machine that compiles.
    Native,
    /// x86-64 as first specified (SSE2): every x86-64 CPU, and QEMU's default models.
    X86_64,
    /// x86-64-v2 (SSE4.2, POPCNT): every x86-64 server CPU since 2009.
    X86_64V2,
    /// x86-64-v3 (AVX2, BMI, LZCNT): Haswell (2013), Zen and later.
    X86_64V3,
}

/// Cranelift's x86-64 features, each with the first level that has it
/// (4: beyond x86-64-v3).
const X86_FEATURES: [(&str, u8); 19] = [
    ("has_sse3", 2),
    ("has_ssse3", 2),
    ("has_cmpxchg16b", 2),
    ("has_sse41", 2),
    ("has_sse42", 2),
    ("has_popcnt", 2),
    ("has_avx", 3),
    ("has_avx2", 3),
    ("has_fma", 3),
    ("has_bmi1", 3),
    ("has_bmi2", 3),
    ("has_lzcnt", 3),
    ("has_avx_vnni", 4),
    ("has_avx512bitalg", 4),
    ("has_avx512dq", 4),
    ("has_avx512f", 4),
    ("has_avx512vl", 4),
    ("has_avx512vbmi", 4),
    ("has_avx512vnni", 4),
];

impl std::str::FromStr for CpuLevel {
    type Err = String;
    fn from_str(name: &str) -> Result<Self, String> {
        match name {
            "native" => Ok(CpuLevel::Native),
            "x86-64" => Ok(CpuLevel::X86_64),
            "x86-64-v2" => Ok(CpuLevel::X86_64V2),
            "x86-64-v3" => Ok(CpuLevel::X86_64V3),
            _ => Err(format!(
                "{name:?} is no CPU level tend knows: use x86-64, x86-64-v2, x86-64-v3 or native"
            )),
        }
    }
}

impl CpuLevel {
    /// What a build made ahead of time assumes unless told: x86-64-v2 on
    /// x86-64 (nearly every server, and loads on all of them), else the
    /// machine's own features.
    pub fn portable() -> Self {
        match cfg!(target_arch = "x86_64") {
            true => CpuLevel::X86_64V2,
            false => CpuLevel::Native,
        }
    }

    /// As `--cpu` names it.
    pub fn name(self) -> &'static str {
        match self {
            CpuLevel::Native => "native",
            CpuLevel::X86_64 => "x86-64",
            CpuLevel::X86_64V2 => "x86-64-v2",
            CpuLevel::X86_64V3 => "x86-64-v3",
        }
    }

    /// The optimized engines' settings, the features beyond this level off.
    /// Those of the level that this machine has stay on, so a build machine
    /// short of one makes builds that still load on every CPU of the level.
    pub fn precompiling(self) -> anyhow::Result<Config> {
        let mut config = optimized();
        let level = match self {
            CpuLevel::Native => return Ok(config),
            CpuLevel::X86_64 => 1,
            CpuLevel::X86_64V2 => 2,
            CpuLevel::X86_64V3 => 3,
        };
        if !cfg!(target_arch = "x86_64") {
            anyhow::bail!(
                "{} names an x86-64 CPU and this is {}: use --cpu native",
                self.name(),
                std::env::consts::ARCH
            );
        }
        for (feature, first) in X86_FEATURES {
            if first > level {
                // SAFETY: turning a CPU feature off only narrows what the
                // compiled code may use; the compiler and wasmtime know it.
                unsafe {
                    config.cranelift_flag_set(feature, "false");
                }
            }
        }
        Ok(config)
    }
}

/// The Cranelift engines: pooled (sized for `plugins`) and on-demand, for a
/// plugin beyond the pool; or on-demand alone when the pool cannot reserve its
/// address space.
pub fn build(plugins: usize) -> anyhow::Result<(Engine, Option<Engine>)> {
    let mut pooled = optimized();
    pooled.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling(
        pool_instances(plugins),
    )));
    let on_demand = Engine::new(&optimized())?;
    match Engine::new(&pooled) {
        Ok(engine) => Ok((engine, Some(on_demand))),
        Err(e) => {
            tracing::warn!("pooling allocator unavailable ({e:#}); using on-demand allocation");
            Ok((on_demand, None))
        }
    }
}

/// Advances the engines' epochs every [`EPOCH_TICK`] while at least one guest
/// runs, and parks otherwise: an idle host does no periodic work.
///
/// A call only counts itself in and out (an atomic each) and unparks the
/// thread, which costs a syscall only when the thread is parked: at most once
/// per tick, where a condition variable's notify was a futex syscall on every
/// call (docs/benchmarks.md, stop 55).
#[derive(Clone)]
pub struct EpochTicker {
    running: Arc<AtomicUsize>,
    thread: std::thread::Thread,
}

impl EpochTicker {
    pub fn start(engines: &[&Engine]) -> Self {
        let running = Arc::new(AtomicUsize::new(0));
        let counted = running.clone();
        let engines: Vec<_> = engines.iter().map(|e| e.weak()).collect();
        let thread = std::thread::Builder::new()
            .name("tend-epoch".into())
            .spawn(move || {
                loop {
                    // An `unpark` between the load and the `park` leaves its
                    // token, so the `park` returns at once: no call is missed.
                    while counted.load(Ordering::Acquire) == 0 {
                        std::thread::park();
                    }
                    std::thread::sleep(EPOCH_TICK);
                    for engine in &engines {
                        match engine.upgrade() {
                            Some(engine) => engine.increment_epoch(),
                            None => return,
                        }
                    }
                }
            })
            .expect("spawn the epoch ticker thread")
            .thread()
            .clone();
        EpochTicker { running, thread }
    }

    /// Keep ticking until the guard is dropped.
    pub fn running(&self) -> TickGuard<'_> {
        self.running.fetch_add(1, Ordering::AcqRel);
        self.thread.unpark();
        TickGuard(&self.running)
    }
}

pub struct TickGuard<'a>(&'a AtomicUsize);

impl Drop for TickGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_component::{Extras, exporting_run, module, run};
    use super::*;
    use wasm_encoder::{DataSection, Function, Instruction, MemArg, MemorySection, MemoryType};

    const MIB: u64 = 1 << 20;

    /// `run` adds one to the byte at each of `addresses` and returns their sum.
    fn incrementing(addresses: &[u64]) -> Function {
        let byte = MemArg {
            offset: 0,
            align: 0,
            memory_index: 0,
        };
        let mut run = Function::new([]);
        for address in addresses {
            run.instruction(&Instruction::I32Const(*address as i32));
            run.instruction(&Instruction::I32Const(*address as i32));
            run.instruction(&Instruction::I32Load8U(byte));
            run.instruction(&Instruction::I32Const(1));
            run.instruction(&Instruction::I32Add);
            run.instruction(&Instruction::I32Store8(byte));
        }
        run.instruction(&Instruction::I32Const(0));
        for address in addresses {
            run.instruction(&Instruction::I32Const(*address as i32));
            run.instruction(&Instruction::I32Load8U(byte));
            run.instruction(&Instruction::I32Add);
        }
        run.instruction(&Instruction::End);
        run
    }

    /// Each instance from the pool starts from the module's image, whether a
    /// page was reset by `memcpy` (kept resident) or by `madvise` (beyond
    /// what is kept), and whether the image put data there or not: nothing a
    /// reconcile wrote reaches the next one, of the same plugin or another.
    #[test]
    fn every_instance_from_the_pool_starts_from_the_image() {
        let (pooled, _) = build(1).unwrap();
        let mut memories = MemorySection::new();
        memories.memory(MemoryType {
            minimum: 8 * MIB / 65536,
            maximum: None,
            memory64: false,
            shared: false,
            page_size_log2: None,
        });
        let mut data = DataSection::new();
        let kept = MEMORY_KEEP_RESIDENT as u64;
        for (address, value) in [(0, 5u8), (kept + MIB, 7)] {
            data.active(
                0,
                &wasm_encoder::ConstExpr::i32_const(address as i32),
                [value],
            );
        }
        let extras = Extras {
            memories: Some(memories),
            data: Some(data),
            ..Extras::default()
        };
        // Data below and beyond what is kept resident, a zero page in each.
        let touched = [0, MIB, kept + MIB, kept + 2 * MIB];
        let wasm = exporting_run(&module(&[incrementing(&touched)], &extras), 1);
        let component = wasmtime::component::Component::new(&pooled, &wasm).unwrap();
        // Another plugin, no data of its own, reading and writing the same bytes.
        let other_extras = Extras {
            memories: extras.memories.clone(),
            ..Extras::default()
        };
        let other = exporting_run(&module(&[incrementing(&touched)], &other_extras), 1);
        let other = wasmtime::component::Component::new(&pooled, &other).unwrap();
        let fresh = (5 + 1) + 1 + (7 + 1) + 1;
        for _ in 0..5 {
            assert_eq!(run(&pooled, &component), fresh);
            assert_eq!(run(&pooled, &other), 4, "nothing of the first plugin");
        }
    }

    /// A build for a CPU level leaves out the features beyond it (its
    /// engine's settings differ from this machine's) and still loads and
    /// runs on the daemon's engine, which compiles for this machine.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_build_for_a_cpu_level_loads_on_this_machines_engine() {
        use std::hash::{DefaultHasher, Hash, Hasher};
        let (pooled, _) = build(1).unwrap();
        let hash = |engine: &Engine| {
            let mut hasher = DefaultHasher::new();
            engine.precompile_compatibility_hash().hash(&mut hasher);
            hasher.finish()
        };
        // POPCNT is an instruction from x86-64-v2 on, a sequence before.
        let mut popcnt = Function::new([]);
        popcnt.instruction(&Instruction::I32Const(0x2ff));
        popcnt.instruction(&Instruction::I32Popcnt);
        popcnt.instruction(&Instruction::End);
        let wasm = exporting_run(&module(&[popcnt], &Extras::default()), 1);
        // What this machine has beyond each level, so beyond what its build may use.
        let beyond = [
            ("x86-64", std::arch::is_x86_feature_detected!("sse3")),
            ("x86-64-v2", std::arch::is_x86_feature_detected!("avx")),
            ("x86-64-v3", std::arch::is_x86_feature_detected!("avx512f")),
            ("native", false),
        ];
        for (level, more_here) in beyond {
            let level: CpuLevel = level.parse().unwrap();
            let engine = Engine::new(&level.precompiling().unwrap()).unwrap();
            assert_eq!(
                hash(&engine) != hash(&pooled),
                more_here,
                "{level:?}: this machine's features beyond it are off, and only those"
            );
            let compiled = engine.precompile_component(&wasm).unwrap();
            // SAFETY: serialized just now; wasmtime checks settings and CPU features.
            let component =
                unsafe { wasmtime::component::Component::deserialize(&pooled, &compiled) }
                    .unwrap_or_else(|e| panic!("{level:?}: {e:#}"));
            assert_eq!(run(&pooled, &component), 9, "{level:?}");
        }
        // Every feature Cranelift knows is in the list: x86-64 with all of
        // them off is x86-64 named as a target, which infers none.
        let mut named = optimized();
        named.target("x86_64-unknown-linux-gnu").unwrap();
        let baseline = Engine::new(&CpuLevel::X86_64.precompiling().unwrap()).unwrap();
        assert_eq!(hash(&Engine::new(&named).unwrap()), hash(&baseline));
        let unknown = "x86-64-v9".parse::<CpuLevel>().unwrap_err();
        assert!(unknown.contains("x86-64-v2"), "{unknown}");
    }

    /// A guest that spins is cut off only because the ticker advances the
    /// epoch while it runs; each spin here starts after the last one's count
    /// went back to zero, so most find the ticker parked and must wake it.
    #[test]
    fn the_ticker_cuts_off_a_spinning_guest_each_time_one_runs() {
        let engine = Engine::new(&optimized()).unwrap();
        let ticker = EpochTicker::start(&[&engine]);
        let mut spin = Function::new([]);
        spin.instruction(&Instruction::Loop(wasm_encoder::BlockType::Empty));
        spin.instruction(&Instruction::Br(0));
        spin.instruction(&Instruction::End);
        spin.instruction(&Instruction::I32Const(0));
        spin.instruction(&Instruction::End);
        let bytes = exporting_run(&module(&[spin], &Extras::default()), 1);
        let component = wasmtime::component::Component::new(&engine, bytes).unwrap();
        for _ in 0..20 {
            let (done, cut_off) = std::sync::mpsc::channel();
            let (engine, component) = (engine.clone(), component.clone());
            let _ticking = ticker.running();
            std::thread::spawn(move || {
                let mut store = wasmtime::Store::new(&engine, ());
                store.set_epoch_deadline(1);
                let linker = wasmtime::component::Linker::new(&engine);
                let instance = linker.instantiate(&mut store, &component).unwrap();
                let run = instance
                    .get_typed_func::<(), (u32,)>(&mut store, "run")
                    .unwrap();
                let _ = done.send(run.call(&mut store, ()).is_err());
            });
            let trapped = cut_off.recv_timeout(Duration::from_secs(10)).expect(
                "the spinning guest was not cut off within 10 s: the epoch did not advance",
            );
            assert!(trapped);
        }
    }

    #[test]
    fn the_pool_grows_with_the_plugins_within_bounds() {
        assert_eq!(pool_instances(0), 16);
        assert_eq!(pool_instances(9), 26);
        assert_eq!(pool_instances(10_000), 1000);
        assert_eq!(pool_instances(usize::MAX), 1000);
    }
}
