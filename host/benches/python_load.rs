//! How fast a Python plugin gets going (issue 18): the release `tend run`,
//! timed from the component file landing in the plugins directory to the
//! first reconcile on it, for
//!
//! - a host that has never compiled Python (empty compile cache: the worst case);
//! - a host that already runs another Python plugin (its Cranelift build cached)
//!   when a new, different one lands: what an operator dropping in a plugin sees;
//! - a hot reload back to a version this host has already compiled;
//!
//! and, in-process, the compile and cached-load times behind those numbers.
//! The second Python plugin is python-http-check with another description,
//! built once with the venv's componentize-py into the bench's scratch dir.
//! Needs `cargo xtask plugins`.
//!
//!   CARGO_TARGET_DIR=/work/bench-target cargo bench -p tend --bench python_load

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
mod landing;
use landing::{land, settle, start};
use tend::runtime::Runtime;
use tend_e2e::{Daemon, Sandbox, cpu_ticks, plugin, workspace_root};

/// Rounds of each daemon measurement (each cold one starts a fresh host).
const ROUNDS: usize = 3;

/// A Python plugin that differs from python-http-check only in a string:
/// the same CPython, another app module and memory snapshot.
fn second_python_plugin() -> PathBuf {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("python-http-check-2.wasm");
    let source = workspace_root().join("examples/plugins/python-http-check/app.py");
    let fresh = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if out.exists() && fresh(&out) >= fresh(&source) {
        return out;
    }
    let dir = tempfile::tempdir().unwrap();
    let app = std::fs::read_to_string(&source).unwrap();
    let changed = app.replace("probes HTTP endpoints", "probes HTTP endpoints (copy)");
    assert_ne!(
        app, changed,
        "python-http-check's description changed: update the bench"
    );
    std::fs::write(dir.path().join("app.py"), changed).unwrap();
    let status =
        std::process::Command::new(workspace_root().join("target/venv/bin/componentize-py"))
            .current_dir(dir.path())
            .arg("-d")
            .arg(workspace_root().join("wit"))
            .args(["-w", "plugin", "componentize", "app", "-o"])
            .arg(&out)
            .status()
            .expect("target/venv/bin/componentize-py (cargo xtask plugins makes the venv)");
    assert!(status.success(), "componentize-py failed");
    out
}

/// CPU time of this process, user + system, from /proc (10 ms ticks).
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Winch compile of `wasm`, wall and CPU time, with the Cranelift-built
/// trampolines at wasmtime's defaults (`lean` false) or as Tend builds them.
fn winch_compile(wasm: &[u8], lean: bool) -> (Duration, Duration) {
    let mut config = wasmtime::Config::new();
    config
        .strategy(wasmtime::Strategy::Winch)
        .epoch_interruption(true)
        .wasm_component_model(true);
    if lean {
        config
            .cranelift_opt_level(wasmtime::OptLevel::None)
            .cranelift_regalloc_algorithm(wasmtime::RegallocAlgorithm::SinglePass);
    }
    let engine = wasmtime::Engine::new(&config).unwrap();
    let (started, cpu_before) = (Instant::now(), cpu());
    wasmtime::component::Component::new(&engine, wasm).unwrap();
    (started.elapsed(), cpu() - cpu_before)
}

fn in_process(python: &Path) {
    println!("== in-process: compile and load of python-http-check ==");
    let wasm = std::fs::read(python).unwrap();
    for lean in [false, true, false, true] {
        let (wall, cpu) = winch_compile(&wasm, lean);
        let what = match lean {
            true => "trampolines unoptimized, single-pass regalloc (Tend)",
            false => "trampolines at wasmtime's defaults",
        };
        println!(
            "Winch, {what:<54} {:>7.0} ms  CPU {:>5.0} ms",
            ms(wall),
            ms(cpu)
        );
    }
    let cache = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(Some(cache.path()), 4).unwrap();
    let quick = runtime.load_quick(python).unwrap();
    println!(
        "load_quick, cache empty ({:?}):{:>39.0} ms",
        quick.compiler,
        ms(quick.load_time)
    );
    let cranelift = runtime.load(python).unwrap();
    println!(
        "load, Cranelift compile + cache write:{:>34.0} ms",
        ms(cranelift.load_time)
    );
    let cached: Vec<Duration> = (0..20)
        .map(|_| runtime.load_quick(python).unwrap().load_time)
        .collect();
    println!(
        "load_quick, Cranelift artifact cached, p50:{:>32.1} ms",
        ms(median(cached))
    );
}

/// The plugins `python` and `other`, configured (their files not there yet).
fn plugins() -> String {
    ["python", "other"]
        .iter()
        .map(|name| {
            format!(
                "[plugins.{name}]\n[plugins.{name}.grants]\nhttp = [\"http://127.0.0.1:*/*\"]\n[plugins.{name}.config]\nurls = [\"http://127.0.0.1:1/\"]\n"
            )
        })
        .collect()
}

/// The `load_ms` of the daemon's last line with `message` about `plugin`:
/// the load's own share (read, hash, compile or cache lookup, validate).
fn load_ms(daemon: &Daemon, plugin: &str, message: &str) -> u64 {
    let log = daemon.log();
    let line = log
        .lines()
        .rfind(|l| l.contains(message) && l.contains(&format!("plugin={plugin}")))
        .unwrap_or_else(|| panic!("no {message:?} line for {plugin}"));
    let value = line.split("load_ms=").nth(1).unwrap();
    value.split_whitespace().next().unwrap().parse().unwrap()
}

fn daemon(python: &Path, other: &Path) {
    // SAFETY: no other thread runs yet. The harness runs `tend` from TEND_BIN:
    // here the release build cargo made for this bench.
    unsafe { std::env::set_var("TEND_BIN", env!("CARGO_BIN_EXE_tend")) };
    println!("\n== the release daemon: file landing -> first reconcile on it ==");
    let (mut never, mut seen_other, mut hot) = (vec![], vec![], vec![]);
    for round in 1..=ROUNDS {
        let sandbox = Sandbox::new();
        let (daemon, port) = start(&sandbox, &plugins(), "info");
        let load = load_average();
        // The daemon's CPU time over the first landing: the compile's work,
        // whatever the other tenants of the machine leave of its two cores.
        let ticks = cpu_ticks(daemon.pid());
        let first = land(&sandbox, port, "python", python);
        let first_cpu = (cpu_ticks(daemon.pid()) - ticks) * 10;
        let first_load = load_ms(&daemon, "python", "plugin loaded");
        settle(port, "python");
        let second = land(&sandbox, port, "other", other);
        let second_load = load_ms(&daemon, "other", "plugin loaded");
        settle(port, "other");
        // `other` back and forth between two versions this host has compiled.
        let reloads = [python, other, python, other].map(|v| {
            let took = land(&sandbox, port, "other", v);
            (took, load_ms(&daemon, "other", "plugin reloaded"))
        });
        println!(
            "round {round} (load average {load}): never seen Python {:.0} ms (load {first_load} ms, daemon CPU {first_cpu} ms); \
             another Python plugin cached {:.0} ms (load {second_load} ms); \
             hot reloads to seen versions {:?} ms (load {:?} ms)",
            ms(first),
            ms(second),
            reloads.map(|(d, _)| (ms(d) * 10.0).round() / 10.0),
            reloads.map(|(_, l)| l),
        );
        let reloads = reloads.map(|(d, _)| d);
        never.push(first);
        seen_other.push(second);
        hot.extend(reloads);
    }
    println!(
        "median: never seen Python {:.0} ms; another Python plugin cached {:.0} ms; hot reload to a seen version {:.1} ms (max {:.1} ms)",
        ms(median(never)),
        ms(median(seen_other)),
        ms(median(hot.clone())),
        ms(*hot.iter().max().unwrap()),
    );
}

fn main() {
    let python = plugin("python-http-check");
    let other = second_python_plugin();
    in_process(&python);
    daemon(&python, &other);
}
