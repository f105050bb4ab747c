//! Host overhead, measured side by side in one run (numbers go to
//! docs/benchmarks.md). Needs `cargo xtask plugins` first.
//!
//!   cargo bench -p tend --bench reconcile
//!   cargo bench -p tend --bench reconcile -- rust-noop   # those reconciles alone (for perf)
//!
//! - one reconcile = fresh instance from InstancePre + call + drop, against the
//!   in-memory backends (so only the host and the guest are measured);
//! - compile time (cache cold) and cached-load time per plugin;
//! - the baseline: the same trivial check as a forked `/bin/sh -c` script, the
//!   way node-problem-detector runs its plugins.

mod common;
mod winch;
use common::{bench_config, plugins_dir, timed_reconcile};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tend::capabilities::Services;
use tend::capabilities::gate::{BudgetRule, Budgets, Caller, Gate, Intent};
use tend::capabilities::limits::Limits;
use tend::capabilities::state::{FakeState, RedbState};
use tend::config::Config;
use tend::journal::Journal;
use tend::runtime::Runtime;
use winch::winch_engine;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn report(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "{what:<58} n={:<5} p50={:>9.1} us  p90={:>9.1} us  p99={:>9.1} us",
        samples.len(),
        us(percentile(&samples, 0.5)),
        us(percentile(&samples, 0.9)),
        us(percentile(&samples, 0.99)),
    );
}

fn config(plugins: &Path) -> Config {
    let text = format!(
        r#"
[plugins.rust-noop]
file = "{plugins}/chaos.wasm"
[plugins.rust-noop.config]
mode = "noop"
[plugins.rust-noop-declared]
file = "{plugins}/chaos-v2.wasm"
[plugins.rust-noop-declared.config]
mode = "noop"
[plugins.rust-state]
file = "{plugins}/chaos.wasm"
[plugins.rust-state.config]
mode = "ok"
[plugins.python-http-check]
[plugins.python-http-check.grants]
http = ["http://cache.local/*"]
[plugins.python-http-check.config]
urls = ["http://cache.local/v2/"]
[plugins.mirror-gate]
[plugins.mirror-gate.grants]
files = [{{ path = "/etc/containerd/certs.d", write = true }}]
http = ["http://cache.local/*"]
[plugins.mirror-gate.config]
[[plugins.mirror-gate.config.caches]]
upstream = "docker.io"
endpoint = "http://cache.local"
"#,
        plugins = plugins.display()
    );
    bench_config(&text)
}

fn main() {
    let plugins = plugins_dir();
    let config = config(&plugins);
    let cache = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(Some(cache.path()), 4).unwrap();
    println!("pooling allocator: {}", runtime.pooling);
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // A name: only the reconciles it is part of, ten times as many (a profile
    // of them, not of the compiles).
    let only = std::env::args().skip(1).find(|arg| !arg.starts_with('-'));
    if let Some(only) = &only {
        reconciles(
            &tokio,
            &runtime,
            &config,
            |name| name.contains(only.as_str()),
            10,
        );
        return;
    }

    println!("\n== compile (cache cold) and load (cache warm) ==");
    for name in ["chaos", "mirror-gate", "python-http-check"] {
        let file = plugins.join(format!("{name}.wasm"));
        let size = std::fs::metadata(&file).unwrap().len();
        let cold = runtime.load(&file).unwrap();
        let warm: Vec<Duration> = (0..20)
            .map(|_| runtime.load(&file).unwrap().load_time)
            .collect();
        println!(
            "{name:<20} {:>9} bytes  compile {:>8.1} ms  cached load p50 {:>7.2} ms",
            size,
            cold.load_time.as_secs_f64() * 1e3,
            {
                let mut w = warm.clone();
                w.sort();
                percentile(&w, 0.5).as_secs_f64() * 1e3
            }
        );
    }

    println!("\n== the same components compiled by Winch, wasmtime's baseline compiler ==");
    let winch = winch_engine();
    for name in ["chaos", "mirror-gate", "python-http-check"] {
        let bytes = std::fs::read(plugins.join(format!("{name}.wasm"))).unwrap();
        let started = Instant::now();
        match wasmtime::component::Component::new(&winch, &bytes) {
            Ok(_) => println!(
                "{name:<20} winch compile {:>8.1} ms",
                started.elapsed().as_secs_f64() * 1e3
            ),
            Err(e) => println!("{name:<20} winch cannot compile it: {e:#}"),
        }
    }

    reconciles(&tokio, &runtime, &config, |_| true, 1);

    println!("\n== the mutation gate ==");
    tokio.block_on(gate_costs());

    println!("\n== baseline: the same trivial check as a forked script ==");
    let samples: Vec<Duration> = (0..500)
        .map(|_| {
            let started = Instant::now();
            let status = std::process::Command::new("/bin/sh")
                .args(["-c", "exit 0"])
                .status()
                .unwrap();
            assert!(status.success());
            started.elapsed()
        })
        .collect();
    report("fork + exec /bin/sh -c 'exit 0' + wait", samples);
}

/// One reconcile of each plugin `chosen` picks, timed `scale` times as often
/// as by default, against the in-memory backends.
fn reconciles(
    tokio: &tokio::runtime::Runtime,
    runtime: &Runtime,
    config: &Config,
    chosen: impl Fn(&str) -> bool,
    scale: usize,
) {
    let (services, fakes) = Services::fake();
    fakes.http.respond("http://cache.local/v2/", 200);

    println!("\n== one reconcile: fresh instance from InstancePre + call ==");
    let rows = [
        ("rust-noop", 5000),
        // The same code, declaring two capabilities (`uses: [files, state]`)
        // instead of all: what importing less saves an instantiation.
        ("rust-noop-declared", 5000),
        ("rust-state", 5000),
        ("mirror-gate", 2000),
        ("python-http-check", 300),
    ];
    for (name, iterations) in rows.into_iter().filter(|(name, _)| chosen(name)) {
        let iterations = iterations * scale;
        let plugin_config = &config.plugins[name];
        let plugin = runtime.load(&plugin_config.file).unwrap();
        let samples = tokio.block_on(async {
            let mut samples = Vec::with_capacity(iterations);
            for i in 0..iterations + 50 {
                let (elapsed, report) =
                    timed_reconcile(runtime, &plugin, plugin_config, &services).await;
                assert!(report.result.is_ok(), "{name}: {:?}", report.result);
                if i >= 50 {
                    samples.push(elapsed);
                }
            }
            samples
        });
        report(
            &format!(
                "{name} ({})",
                plugin_config.file.file_name().unwrap().to_string_lossy()
            ),
            samples,
        );
    }
}

fn removal(target: String) -> Intent {
    Intent {
        capability: "files",
        operation: "remove",
        target,
        detail: String::new(),
        diff: None,
    }
}

fn caller() -> Caller {
    Caller {
        plugin: "bench".into(),
        digest: "sha256:bench".into(),
        triggers: vec!["interval".into()],
        dry_run: false,
        cluster: false,
    }
}

/// What the gate adds to one mutation: the journal intent (appended and
/// fsynced before the mutation) plus its result, and a budget check.
async fn gate_costs() {
    let no_budgets = || Arc::new(Budgets::new(vec![], Arc::new(FakeState::default())));
    let dir = tempfile::tempdir().unwrap();
    let journal = Arc::new(Journal::open(dir.path()).unwrap());
    let measure = |gate: Gate, n: usize| async move {
        let mut samples = Vec::with_capacity(n);
        for i in 0..n {
            let started = Instant::now();
            gate.mutate(removal(format!("/f{i}")), Ok(()), |_permit| async {
                Ok(())
            })
            .await
            .unwrap();
            samples.push(started.elapsed());
        }
        gate.sync().await;
        samples
    };
    // Unbounded for the measurement: thousands of mutations in one "reconcile".
    let limits = Limits {
        mutations: u32::MAX,
        journal_per_reconcile: tend::units::ByteSize(u64::MAX / 4),
        ..Limits::default()
    };
    let unjournaled = Gate::new(caller(), limits, None, no_budgets(), None);
    report(
        "admit + finish, no journal, no budget",
        measure(unjournaled, 2000).await,
    );
    let journaled = Gate::new(caller(), limits, Some(journal.clone()), no_budgets(), None);
    report(
        "admit + finish with the journal (intent fsynced)",
        measure(journaled, 500).await,
    );
    let rule = BudgetRule {
        name: "removals".into(),
        operations: vec!["files.remove".into()],
        max: 1_000_000,
        per: Duration::from_secs(600),
        min_interval_per_target: Duration::ZERO,
    };
    let budgets = Arc::new(Budgets::new(vec![rule], Arc::new(FakeState::default())));
    let checks: Vec<Duration> = {
        let mut samples = Vec::new();
        for i in 0..2000 {
            let started = Instant::now();
            budgets
                .check("files.remove", &format!("/f{i}"), 1_000, &[])
                .await
                .unwrap();
            samples.push(started.elapsed());
        }
        samples
    };
    report("budget check (one budget covering the operation)", checks);

    // A spend persists the ledger (a redb commit, fsynced) before the mutation.
    let state_dir = tempfile::tempdir().unwrap();
    let store = Arc::new(RedbState::open(&state_dir.path().join("state.redb")).unwrap());
    let rule = BudgetRule {
        name: "removals".into(),
        operations: vec!["files.remove".into()],
        max: 100,
        per: Duration::from_secs(3600),
        min_interval_per_target: Duration::ZERO,
    };
    let budgets = Budgets::new(vec![rule], store);
    let mut spends = Vec::new();
    for i in 0..100 {
        let started = Instant::now();
        budgets
            .spend("files.remove", &format!("/f{i}"))
            .await
            .unwrap();
        spends.push(started.elapsed());
    }
    report(
        "budget spend, persisted in redb (ledger of up to 100)",
        spends,
    );
}
