//! The systemd capability against a real systemd (tests/peers/systemd.sh, which
//! this bench starts in a temporary directory and stops at the end, also on a
//! panic), with the release `tend` binary and the built `unit-applier` and
//! `unit-doctor`: a no-op `unit-applier` reconcile over 50 files and 10 units
//! and the mutating D-Bus calls it makes, the full first apply of that
//! declaration, unit-doctor's latency from a unit entering `failed` to its
//! restart job, and the idle RSS of `tend run` with every built-in plugin.
//! Needs root (the peer's namespaces), systemd, busctl, dbus-daemon and
//! `cargo xtask plugins`.
//!
//!   cargo bench -p tend --bench systemd
//!
//! D-Bus calls are counted with `busctl monitor` on the peer's bus: a method
//! call to org.freedesktop.systemd1 from one of tend's connections (those that
//! sent `Subscribe`; the bench's own busctl calls never do).

mod common;
use common::plugins_dir;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const FILES: usize = 50;
const UNITS: usize = 10;
const NOOP_RUNS: usize = 30;
const DOCTOR_ROUNDS: usize = 20;
const DOCTOR_UNIT: &str = "tend-doctor.service";

/// Manager methods that change nothing; any other method call to systemd is mutating.
const READ_ONLY: &[&str] = &[
    "Get",
    "GetAll",
    "LoadUnit",
    "GetUnit",
    "GetUnitByPID",
    "ListUnits",
    "ListUnitsFiltered",
    "ListUnitsByPatterns",
    "ListUnitsByNames",
    "ListUnitFiles",
    "ListUnitFilesByPatterns",
    "GetUnitFileState",
    "ListJobs",
    "Subscribe",
    "Introspect",
    "Ping",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Wall-clock microseconds: the clock of systemd's timestamps, of the bus
/// monitor's and of `date +%s%N` in the units.
fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// A real systemd on a private bus; stopped (systemd.sh stop) on drop.
struct Peer {
    address: String,
    dir: tempfile::TempDir,
}

impl Peer {
    fn start() -> Peer {
        let dir = tempfile::tempdir().unwrap();
        let output = Command::new(workspace().join("tests/peers/systemd.sh"))
            .arg("start")
            .arg(dir.path())
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        // Built before the assert: a failed start is stopped by the guard too.
        let peer = Peer {
            address: String::from_utf8(output.stdout).unwrap().trim().to_string(),
            dir,
        };
        assert!(output.status.success(), "the systemd peer did not start");
        peer
    }

    fn units_dir(&self) -> PathBuf {
        self.dir.path().join("units")
    }

    fn busctl(&self, args: &[&str]) -> String {
        let output = Command::new("busctl")
            .arg(format!("--address={}", self.address))
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "busctl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    fn manager(&self, method_and_args: &[&str]) -> String {
        let mut args = vec![
            "call",
            "org.freedesktop.systemd1",
            "/org/freedesktop/systemd1",
            "org.freedesktop.systemd1.Manager",
        ];
        args.extend_from_slice(method_and_args);
        self.busctl(&args)
    }

    /// Properties of the org.freedesktop.systemd1.Unit interface, as JSON values.
    fn unit(&self, unit: &str, properties: &[&str]) -> Vec<Value> {
        let loaded: Value =
            serde_json::from_str(&self.manager(&["--json=short", "LoadUnit", "s", unit])).unwrap();
        let path = loaded["data"][0].as_str().unwrap().to_string();
        let mut args = vec![
            "--json=short",
            "get-property",
            "org.freedesktop.systemd1",
            &path,
            "org.freedesktop.systemd1.Unit",
        ];
        args.extend_from_slice(properties);
        self.busctl(&args)
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["data"].clone())
            .collect()
    }

    fn active_state(&self, unit: &str) -> String {
        self.unit(unit, &["ActiveState"])[0]
            .as_str()
            .unwrap()
            .to_string()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let console = std::fs::read(self.dir.path().join("console.log")).unwrap_or_default();
            let console = String::from_utf8_lossy(&console);
            let tail: Vec<&str> = console.lines().rev().take(40).collect();
            eprintln!("--- systemd peer console (last lines) ---");
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
        let stopped = Command::new(workspace().join("tests/peers/systemd.sh"))
            .arg("stop")
            .arg(self.dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !stopped {
            eprintln!(
                "the systemd peer in {} did not stop cleanly",
                self.dir.path().display()
            );
        }
    }
}

/// `busctl monitor` on the peer's bus, keeping every method call to systemd.
struct Monitor {
    child: Child,
    calls: Arc<Mutex<Vec<Value>>>,
}

impl Monitor {
    fn start(peer: &Peer) -> Monitor {
        let mut child = Command::new("busctl")
            .arg(format!("--address={}", peer.address))
            .args(["monitor", "--json=short"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let kept = calls.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let Ok(message) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if message["type"] == "method_call"
                    && message["destination"] == "org.freedesktop.systemd1"
                {
                    kept.lock().unwrap().push(message);
                }
            }
        });
        let monitor = Monitor { child, calls };
        // Attached once it sees a call of ours.
        time_until(Duration::from_secs(10), || {
            peer.busctl(&[
                "get-property",
                "org.freedesktop.systemd1",
                "/org/freedesktop/systemd1",
                "org.freedesktop.systemd1.Manager",
                "Version",
            ]);
            std::thread::sleep(Duration::from_millis(50));
            !monitor.calls.lock().unwrap().is_empty()
        });
        monitor
    }

    /// tend's calls to systemd with a bus timestamp in `from..=to` (microseconds).
    fn tend_calls(&self, from: u64, to: u64) -> Vec<Value> {
        let calls = self.calls.lock().unwrap();
        let tend: BTreeSet<&str> = calls
            .iter()
            .filter(|c| c["member"] == "Subscribe")
            .filter_map(|c| c["sender"].as_str())
            .collect();
        calls
            .iter()
            .filter(|c| c["sender"].as_str().is_some_and(|s| tend.contains(s)))
            .filter(|c| (from..=to).contains(&c["timestamp-realtime"].as_u64().unwrap_or(0)))
            .cloned()
            .collect()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn is_mutating(call: &Value) -> bool {
    !READ_ONLY.contains(&call["member"].as_str().unwrap_or(""))
}

/// "StartUnit x10, Reload x1, ..." for a list of calls.
fn by_member(calls: &[Value]) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for call in calls {
        *counts
            .entry(call["member"].as_str().unwrap_or("?"))
            .or_default() += 1;
    }
    let parts: Vec<String> = counts.iter().map(|(m, n)| format!("{m} x{n}")).collect();
    parts.join(", ")
}

/// "LoadUnit +1.0..+9.0, ..." : when each kind of call was first and last sent,
/// in ms after `from` (microseconds), in the order they began.
fn timeline(calls: &[Value], from: u64) -> String {
    let mut spans: Vec<(&str, u64, u64)> = Vec::new();
    for call in calls {
        let member = call["member"].as_str().unwrap_or("?");
        let at = call["timestamp-realtime"].as_u64().unwrap_or(0);
        match spans.iter_mut().find(|s| s.0 == member) {
            Some(span) => span.2 = span.2.max(at),
            None => spans.push((member, at, at)),
        }
    }
    let ms = |at: u64| (at as f64 - from as f64) / 1e3;
    let parts: Vec<String> = spans
        .iter()
        .map(|(m, first, last)| format!("{m} +{:.0}..+{:.0}", ms(*first), ms(*last)))
        .collect();
    parts.join(", ")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn http(port: u16, method: &str, path: &str) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nContent-Length: 0\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    Some(response.split_once("\r\n\r\n")?.1.to_string())
}

/// The named plugin's `/status` entry.
fn plugin(port: u16, name: &str) -> Option<Value> {
    let status: Value = serde_json::from_str(&http(port, "GET", "/status")?).ok()?;
    status["plugins"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == name)
        .cloned()
}

/// `POST /reconcile/NAME`: the reconcile's summary and the round trip.
fn reconcile(port: u16, name: &str) -> (Value, Duration) {
    let started = Instant::now();
    let body = http(port, "POST", &format!("/reconcile/{name}")).expect("no answer");
    let took = started.elapsed();
    let summary: Value =
        serde_json::from_str(&body).unwrap_or_else(|_| panic!("not a summary: {body}"));
    (summary, took)
}

/// Poll every millisecond until `condition` holds; the time it took.
fn time_until(limit: Duration, mut condition: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !condition() {
        assert!(started.elapsed() < limit, "gave up after {limit:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
    started.elapsed()
}

struct Daemon {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            eprintln!("--- tend run stderr ---\n{log}");
        }
    }
}

/// `tend run` on `dir`/tend.toml; returns once /readyz says ready.
fn start(dir: &Path) -> Daemon {
    let log = dir.join("tend.log");
    let child = Command::new(env!("CARGO_BIN_EXE_tend"))
        .args(["run", "-c"])
        .arg(dir.join("tend.toml"))
        .env("TEND_LOG", "warn")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let port = std::fs::read_to_string(dir.join("port"))
        .unwrap()
        .parse()
        .unwrap();
    let daemon = Daemon { child, port, log };
    time_until(Duration::from_secs(30), || {
        http(port, "GET", "/readyz").is_some_and(|b| b == "ready\n")
    });
    daemon
}

/// Wait until the plugin runs Cranelift code and has reconciled at least once.
fn settle(daemon: &Daemon, name: &str) {
    time_until(Duration::from_secs(120), || {
        plugin(daemon.port, name)
            .is_some_and(|p| p["compiler"] == "cranelift" && p["reconciles"].as_u64() >= Some(1))
    });
}

/// Wait until the plugin neither runs nor has a trigger pending.
fn quiet(daemon: &Daemon, name: &str) {
    time_until(Duration::from_secs(30), || {
        let Some(body) = http(daemon.port, "GET", &format!("/status/{name}")) else {
            return false;
        };
        let status: Value = serde_json::from_str(&body).unwrap_or_default();
        status["schedule"]["running"] == false
            && status["schedule"]["pending_triggers"]
                .as_array()
                .is_some_and(|p| p.is_empty())
    });
}

fn journal_len(dir: &Path) -> usize {
    let output = Command::new(env!("CARGO_BIN_EXE_tend"))
        .args(["journal", "--json", "-c"])
        .arg(dir.join("tend.toml"))
        .env("TEND_LOG", "warn")
        .output()
        .unwrap();
    assert!(output.status.success(), "tend journal failed");
    String::from_utf8(output.stdout).unwrap().lines().count()
}

fn proc_status(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(key)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The `p`-quantile (0..=1) of `values`, nearest rank.
fn quantile(values: &[f64], p: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn toml_string(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}

/// The config: all three built-in plugins, systemd on the peer's bus.
fn write_config(dir: &Path, peer: &Peer) {
    let port = free_port();
    std::fs::write(dir.join("port"), port.to_string()).unwrap();
    let (etc, units, certs) = (dir.join("etc"), peer.units_dir(), dir.join("certs.d"));
    // Grants are directory roots: the declaration file gets one of its own.
    let (decl_dir, declaration) = (dir.join("decl"), dir.join("decl/declaration.json"));
    let config = format!(
        r#"[host]
plugins-dir = "plugins"
state-dir = "state"
cache-dir = "cache"
listen = "127.0.0.1:{port}"
[host.systemd]
bus = {bus}

[plugins.mirror-gate]
interval = "1h"
[plugins.mirror-gate.grants]
files = [{{ path = {certs}, write = true }}]
[plugins.mirror-gate.config]
certs-dir = {certs}

[plugins.unit-applier]
interval = "1h"
[plugins.unit-applier.grants]
files = [{{ path = {etc}, write = true }}, {{ path = {units}, write = true }}, {{ path = {decl_dir} }}]
systemd = {{ units = ["bench-*.service"], operations = ["start", "stop", "restart", "enable", "disable", "daemon-reload"] }}
[plugins.unit-applier.config]
unit-dir = {units}
declaration-file = {declaration}

[plugins.unit-doctor]
interval = "1h"
[plugins.unit-doctor.grants]
systemd = {{ units = ["{DOCTOR_UNIT}"], operations = ["restart"], watch = true }}
[plugins.unit-doctor.config]
[[plugins.unit-doctor.config.checks]]
unit = "{DOCTOR_UNIT}"
probe = "active"
fail-after-ms = 0
backoff-ms = 0
max-restarts = 1000
window-ms = 600000
"#,
        bus = toml_string(&peer.address),
        certs = toml_string(&certs.display().to_string()),
        etc = toml_string(&etc.display().to_string()),
        units = toml_string(&units.display().to_string()),
        decl_dir = toml_string(&decl_dir.display().to_string()),
        declaration = toml_string(&declaration.display().to_string()),
    );
    std::fs::write(dir.join("tend.toml"), config).unwrap();
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::create_dir_all(&decl_dir).unwrap();
    std::fs::create_dir_all(&certs).unwrap();
    std::fs::create_dir_all(dir.join("plugins")).unwrap();
    for name in ["mirror-gate", "unit-applier", "unit-doctor"] {
        std::fs::copy(
            plugins_dir().join(format!("{name}.wasm")),
            dir.join(format!("plugins/{name}.wasm")),
        )
        .unwrap();
    }
}

/// 50 files and 10 oneshot units, each unit depending on 5 of the files. No
/// [Install] section: enabling a unit with one would write its wants symlink
/// into the host's /etc/systemd/system (the peer shares the host's /etc).
fn declaration(dir: &Path) -> Value {
    let path = |i: usize| {
        dir.join(format!("etc/bench-{i:02}.conf"))
            .display()
            .to_string()
    };
    let files: Vec<Value> = (0..FILES)
        .map(|i| {
            serde_json::json!({
                "path": path(i),
                "content": format!("# bench file {i}\nlisten = 127.0.0.1:{}\nlog-level = info\nworkers = 4\n", 9000 + i),
            })
        })
        .collect();
    let per_unit = FILES / UNITS;
    let units: Vec<Value> = (0..UNITS)
        .map(|u| {
            serde_json::json!({
                "name": format!("bench-{u:02}.service"),
                "content": format!("[Unit]\nDescription=tend bench unit {u}\n[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/bin/true\n"),
                "files": (u * per_unit..(u + 1) * per_unit).map(path).collect::<Vec<_>>(),
            })
        })
        .collect();
    serde_json::json!({ "files": files, "units": units })
}

fn main() {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    // Declared first, dropped last: the peer outlives the daemon and the monitor.
    let peer = Peer::start();
    let monitor = Monitor::start(&peer);
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    write_config(dir, &peer);

    // The unit unit-doctor checks: a long-running service whose ExecStartPre
    // appends the wall clock in ns to `starts`. %% is systemd's escape for %.
    let starts = dir.join("doctor.starts");
    std::fs::write(
        peer.units_dir().join(DOCTOR_UNIT),
        format!(
            "[Unit]\nStartLimitIntervalSec=0\n[Service]\nExecStartPre=/bin/sh -c 'date +%%s%%N >> {}'\nExecStart=/bin/sleep 100000\n",
            starts.display()
        ),
    )
    .unwrap();
    peer.manager(&["Reload"]);
    peer.manager(&["StartUnit", "ss", DOCTOR_UNIT, "replace"]);
    time_until(Duration::from_secs(10), || {
        peer.active_state(DOCTOR_UNIT) == "active"
    });

    // Fill the compile cache (the declaration file does not exist yet, so
    // unit-applier only waits for it), then start again with a warm cache.
    let filling = start(dir);
    for name in ["mirror-gate", "unit-applier", "unit-doctor"] {
        settle(&filling, name);
    }
    drop(filling);
    let daemon = start(dir);
    for name in ["mirror-gate", "unit-applier", "unit-doctor"] {
        time_until(Duration::from_secs(30), || {
            plugin(daemon.port, name).is_some_and(|p| p["reconciles"].as_u64() >= Some(1))
        });
    }
    let pid = daemon.child.id();
    std::thread::sleep(Duration::from_secs(5));
    let rss_start = (proc_status(pid, "VmRSS:"), proc_status(pid, "VmHWM:"));

    println!("== unit-applier: first apply of {FILES} files and {UNITS} units ==");
    std::fs::write(
        dir.join("decl/declaration.json"),
        serde_json::to_string_pretty(&declaration(dir)).unwrap(),
    )
    .unwrap();
    let journal_before = journal_len(dir);
    let from = now_us();
    let (summary, round_trip) = reconcile(daemon.port, "unit-applier");
    let to = now_us();
    assert_eq!(summary["health"], "healthy", "{summary:#}");
    let mut last_active = 0;
    for u in 0..UNITS {
        let unit = format!("bench-{u:02}.service");
        let props = peer.unit(&unit, &["ActiveState", "ActiveEnterTimestamp"]);
        assert_eq!(props[0], "active", "{unit} after the first apply");
        last_active = last_active.max(props[1].as_u64().unwrap());
    }
    let calls = monitor.tend_calls(from, to);
    let mutating: Vec<Value> = calls.iter().filter(|c| is_mutating(c)).cloned().collect();
    println!(
        "reconcile {:.1} ms (tend's elapsed_ms; POST round trip {:.1} ms); all {UNITS} units active {:.1} ms after the POST",
        summary["elapsed_ms"].as_f64().unwrap(),
        ms(round_trip),
        (last_active - from) as f64 / 1e3
    );
    println!(
        "{} mutations reported, {} journal entries; D-Bus calls to systemd: {} ({} mutating: {})",
        summary["mutations"].as_array().unwrap().len(),
        journal_len(dir) - journal_before,
        calls.len(),
        mutating.len(),
        by_member(&mutating)
    );
    println!("  all calls: {}", by_member(&calls));
    println!("  when (ms after the POST): {}", timeline(&calls, from));

    println!("\n== unit-applier: no-op reconcile, {NOOP_RUNS} runs after the first apply ==");
    for _ in 0..3 {
        reconcile(daemon.port, "unit-applier"); // warm-up, not counted
    }
    let journal_before = journal_len(dir);
    let (mut elapsed, mut round_trips) = (Vec::new(), Vec::new());
    let mut messages = BTreeSet::new();
    let mut mutations = 0;
    let from = now_us();
    for _ in 0..NOOP_RUNS {
        let (summary, round_trip) = reconcile(daemon.port, "unit-applier");
        elapsed.push(summary["elapsed_ms"].as_f64().unwrap());
        round_trips.push(ms(round_trip));
        mutations += summary["mutations"].as_array().unwrap().len();
        messages.insert(summary["message"].as_str().unwrap().to_string());
    }
    let to = now_us();
    let calls = monitor.tend_calls(from, to);
    let mutating = calls.iter().filter(|c| is_mutating(c)).count();
    println!(
        "reconcile p50 {:.2} ms, p90 {:.2} ms, max {:.2} ms (tend's elapsed_ms)",
        quantile(&elapsed, 0.5),
        quantile(&elapsed, 0.9),
        quantile(&elapsed, 1.0)
    );
    println!(
        "POST round trip p50 {:.1} ms, p90 {:.1} ms (the daemon polls for the result every 10 ms)",
        quantile(&round_trips, 0.5),
        quantile(&round_trips, 0.9)
    );
    println!(
        "over {NOOP_RUNS} runs: {mutations} mutations reported, {} new journal entries, {} D-Bus calls to systemd ({mutating} mutating); message {messages:?}",
        journal_len(dir) - journal_before,
        calls.len(),
    );

    println!("\n== unit-doctor: {DOCTOR_UNIT} killed -> restart job, {DOCTOR_ROUNDS} rounds ==");
    let lines = |path: &Path| -> Vec<u64> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    };
    // Per round, in ms: failed -> RestartUnit on the bus, kill (KillUnit
    // answered) -> ExecStartPre ran, and the steps between.
    let mut failed_to_restart = Vec::new();
    let mut kill_to_pre = Vec::new();
    let mut kill_to_failed = Vec::new();
    let mut failed_to_first_call = Vec::new();
    let mut restart_to_pre = Vec::new();
    for round in 0..DOCTOR_ROUNDS + 2 {
        quiet(&daemon, "unit-doctor");
        std::thread::sleep(Duration::from_millis(100));
        let before = lines(&starts).len();
        let kill_sent = now_us();
        peer.manager(&["KillUnit", "ssi", DOCTOR_UNIT, "all", "9"]);
        let killed = now_us();
        time_until(Duration::from_secs(10), || lines(&starts).len() > before);
        let pre_ran = lines(&starts)[before] / 1000;
        time_until(Duration::from_secs(10), || {
            peer.active_state(DOCTOR_UNIT) == "active"
        });
        let failed_at = peer.unit(DOCTOR_UNIT, &["InactiveEnterTimestamp"])[0]
            .as_u64()
            .unwrap();
        let calls = monitor.tend_calls(kill_sent, pre_ran);
        let restart = calls
            .iter()
            .find(|c| c["member"] == "RestartUnit" && c["payload"]["data"][0] == DOCTOR_UNIT)
            .unwrap_or_else(|| panic!("no RestartUnit between the kill and the start: {calls:?}"));
        let restart_at = restart["timestamp-realtime"].as_u64().unwrap();
        let first_call = calls
            .iter()
            .filter_map(|c| c["timestamp-realtime"].as_u64())
            .filter(|t| *t >= failed_at)
            .min()
            .unwrap();
        if round < 2 {
            continue; // warm-up
        }
        let d = |a: u64, b: u64| (b as f64 - a as f64) / 1e3;
        failed_to_restart.push(d(failed_at, restart_at));
        kill_to_pre.push(d(killed, pre_ran));
        kill_to_failed.push(d(kill_sent, failed_at));
        failed_to_first_call.push(d(failed_at, first_call));
        restart_to_pre.push(d(restart_at, pre_ran));
    }
    println!(
        "unit failed -> RestartUnit sent: p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms",
        quantile(&failed_to_restart, 0.5),
        quantile(&failed_to_restart, 0.9),
        quantile(&failed_to_restart, 1.0)
    );
    println!(
        "KillUnit answered -> ExecStartPre ran again: p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms",
        quantile(&kill_to_pre, 0.5),
        quantile(&kill_to_pre, 0.9),
        quantile(&kill_to_pre, 1.0)
    );
    println!(
        "  p50 of the steps: busctl KillUnit start -> unit failed {:.1} ms; failed -> tend's first call {:.1} ms; RestartUnit -> ExecStartPre {:.1} ms",
        quantile(&kill_to_failed, 0.5),
        quantile(&failed_to_first_call, 0.5),
        quantile(&restart_to_pre, 0.5)
    );

    println!("\n== tend run, mirror-gate + unit-applier + unit-doctor loaded, idle ==");
    quiet(&daemon, "unit-doctor");
    std::thread::sleep(Duration::from_secs(5));
    println!(
        "RSS after start-up (warm cache, 5 s idle): {} KiB (peak {} KiB)",
        rss_start.0, rss_start.1
    );
    println!(
        "RSS after the runs above (5 s idle): {} KiB (peak {} KiB)",
        proc_status(pid, "VmRSS:"),
        proc_status(pid, "VmHWM:")
    );
    drop(daemon);
    drop(monitor);
    drop(peer);
}
