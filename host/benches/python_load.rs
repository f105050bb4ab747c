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
use tend::runtime::Runtime;
use tend_e2e::{
    Daemon, Sandbox, digest_of, free_port, http_get, plugin, plugin_status, time_until,
    workspace_root,
};

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
    let runtime = Runtime::new(Some(cache.path())).unwrap();
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

/// The release `tend run` with plugins `python` and `other` configured (their
/// files not there yet) and its own, empty compile cache.
fn start(sandbox: &Sandbox) -> (Daemon, u16) {
    let port = free_port();
    let plugins: String = ["python", "other"]
        .iter()
        .map(|name| {
            format!(
                "[plugins.{name}]\n[plugins.{name}.grants]\nhttp = [\"http://127.0.0.1:*/*\"]\n[plugins.{name}.config]\nurls = [\"http://127.0.0.1:1/\"]\n"
            )
        })
        .collect();
    sandbox.config_with_host(
        &format!("cache-dir = \"cache\"\nlisten = \"127.0.0.1:{port}\""),
        &plugins,
    );
    let daemon = sandbox.daemon_with_env(&[("TEND_LOG", "warn")]);
    time_until(Duration::from_secs(30), "/readyz", || {
        http_get(port, "/readyz").is_ok_and(|(_, body)| body == "ready\n")
    });
    (daemon, port)
}

/// Land `source` as plugins/`name`.wasm (written beside, renamed in) and time
/// until a reconcile ran on it.
fn land(sandbox: &Sandbox, port: u16, name: &str, source: &Path) -> Duration {
    let target = sandbox.path(&format!("plugins/{name}.wasm"));
    let staging = sandbox.path(&format!("{name}.staging"));
    std::fs::copy(source, &staging).unwrap();
    let want = digest_of(source);
    let runs_before = plugin_status(port, name)["reconciles"]
        .as_u64()
        .unwrap_or(0);
    let started = Instant::now();
    std::fs::rename(&staging, &target).unwrap();
    time_until(Duration::from_secs(120), "a reconcile on it", || {
        let p = plugin_status(port, name);
        p["reconciles"].as_u64() > Some(runs_before) && p["last"]["digest"] == want.as_str()
    });
    started.elapsed()
}

/// Wait (untimed) until the plugin runs its Cranelift build, so it is cached
/// and no compile competes with the next measurement.
fn settle(port: u16, name: &str) {
    time_until(Duration::from_secs(120), "the Cranelift build", || {
        plugin_status(port, name)["compiler"] == "cranelift"
    });
}

fn daemon(python: &Path, other: &Path) {
    // SAFETY: no other thread runs yet. The harness runs `tend` from TEND_BIN:
    // here the release build cargo made for this bench.
    unsafe { std::env::set_var("TEND_BIN", env!("CARGO_BIN_EXE_tend")) };
    println!("\n== the release daemon: file landing -> first reconcile on it ==");
    let (mut never, mut seen_other, mut hot) = (vec![], vec![], vec![]);
    for round in 1..=ROUNDS {
        let sandbox = Sandbox::new();
        let (_daemon, port) = start(&sandbox);
        let load = load_average();
        let first = land(&sandbox, port, "python", python);
        settle(port, "python");
        let second = land(&sandbox, port, "other", other);
        settle(port, "other");
        // `other` back and forth between two versions this host has compiled.
        let reloads = [python, other, python, other].map(|v| land(&sandbox, port, "other", v));
        println!(
            "round {round} (load average {load}): never seen Python {:.0} ms; \
             another Python plugin cached {:.0} ms; hot reloads to seen versions {:?} ms",
            ms(first),
            ms(second),
            reloads.map(|d| (ms(d) * 10.0).round() / 10.0),
        );
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
