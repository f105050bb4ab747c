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

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tend::daemon::control::MANUAL_MIN_INTERVAL;
use tend_e2e::{
    Daemon, Sandbox, SystemdPeer, free_port, http_get, journal, peak_rss_kib, plugin_detail,
    plugin_status, rss_kib, wait_until,
};

const FILES: usize = 50;
const UNITS: usize = 10;
const NOOP_RUNS: usize = 30;
const DOCTOR_ROUNDS: usize = 20;
const DOCTOR_UNIT: &str = "tend-doctor.service";
/// Its object path on the bus.
const DOCTOR_PATH: &str = "/org/freedesktop/systemd1/unit/tend_2ddoctor_2eservice";

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
    "GetUnitFileLinks",
    "ListJobs",
    "Subscribe",
    "Introspect",
    "Ping",
];

/// Wall-clock microseconds: the clock of systemd's timestamps, of the bus
/// monitor's and of `date +%s%N` in the units.
fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// `busctl monitor` on the peer's bus, keeping every method call to systemd
/// and systemd's signals that a unit entered `failed`.
struct Monitor {
    child: Child,
    calls: Arc<Mutex<Vec<Value>>>,
    failures: Arc<Mutex<Vec<Value>>>,
    /// Every method return, to tell systemd's time from tend's.
    returns: Arc<Mutex<Vec<Value>>>,
}

impl Monitor {
    fn start(peer: &SystemdPeer) -> Monitor {
        let mut child = Command::new("busctl")
            .arg(format!("--address={}", peer.bus_address()))
            .args(["monitor", "--json=short"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let returns = Arc::new(Mutex::new(Vec::new()));
        let (kept, kept_failures, kept_returns) =
            (calls.clone(), failures.clone(), returns.clone());
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
                } else if message["member"] == "PropertiesChanged"
                    && message["payload"]["data"][1]["ActiveState"]["data"] == "failed"
                {
                    kept_failures.lock().unwrap().push(message);
                } else if message["type"] == "method_return" {
                    kept_returns.lock().unwrap().push(message);
                }
            }
        });
        let monitor = Monitor {
            child,
            calls,
            failures,
            returns,
        };
        // Attached once it sees a call of ours.
        wait_until(Duration::from_secs(10), "the monitor to attach", || {
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

    /// When systemd signalled that the unit at object `path` entered `failed`,
    /// the first time in `from..=to` (microseconds).
    fn failure_signal(&self, path: &str, from: u64, to: u64) -> Option<u64> {
        self.failures
            .lock()
            .unwrap()
            .iter()
            .filter(|m| m["path"] == path)
            .filter_map(|m| m["timestamp-realtime"].as_u64())
            .find(|t| (from..=to).contains(t))
    }

    /// When systemd last answered a call in `from..=to` (microseconds): its
    /// unique name is the sender of its `failed` signals.
    fn last_systemd_reply(&self, from: u64, to: u64) -> Option<u64> {
        let systemd = self.failures.lock().unwrap().first()?["sender"].clone();
        self.returns
            .lock()
            .unwrap()
            .iter()
            .filter(|m| m["sender"] == systemd)
            .filter_map(|m| m["timestamp-realtime"].as_u64())
            .filter(|t| (from..=to).contains(t))
            .max()
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

/// `POST /reconcile/NAME` on the daemon's control socket: the reconcile's
/// summary, when it was posted (wall clock, microseconds) and the round trip.
/// Waits out the daemon's minimum interval between manual reconciles of a
/// plugin first, so that none is refused.
fn reconcile(sandbox: &Sandbox, name: &str) -> (Value, u64, Duration) {
    std::thread::sleep(MANUAL_MIN_INTERVAL);
    let posted = now_us();
    let started = Instant::now();
    let (status, body) = sandbox
        .control_post(&format!("/reconcile/{name}"))
        .expect("the daemon's control socket");
    let took = started.elapsed();
    assert_eq!(status, 200, "POST /reconcile/{name}: {body}");
    let summary: Value =
        serde_json::from_str(&body).unwrap_or_else(|_| panic!("not a summary: {body}"));
    (summary, posted, took)
}

/// The release `tend run` on the sandbox's config; returns once /readyz says ready.
fn start(sandbox: &Sandbox, port: u16) -> Daemon {
    let daemon = sandbox.daemon_with_env(&[("TEND_LOG", "warn")]);
    wait_until(Duration::from_secs(30), "/readyz", || {
        http_get(port, "/readyz").is_ok_and(|(_, body)| body == "ready\n")
    });
    daemon
}

/// Wait until the plugin runs Cranelift code and has reconciled at least once.
fn settle(port: u16, name: &str) {
    wait_until(Duration::from_secs(120), "the Cranelift build", || {
        let p = plugin_status(port, name);
        p["compiler"] == "cranelift" && p["reconciles"].as_u64() >= Some(1)
    });
}

/// Wait until the plugin neither runs nor has a trigger pending.
fn quiet(port: u16, name: &str) {
    wait_until(Duration::from_secs(30), "the plugin quiet", || {
        let status = plugin_detail(port, name);
        status["schedule"]["running"] == false
            && status["schedule"]["pending_triggers"]
                .as_array()
                .is_some_and(|p| p.is_empty())
    });
}

/// The `p`-quantile (0..=1) of `values`, nearest rank.
/// unit-doctor's reconciles so far, whatever their result (`/metrics`).
fn doctor_reconciles(port: u16) -> u64 {
    let (_, metrics) = http_get(port, "/metrics").expect("the daemon's /metrics");
    metrics
        .lines()
        .filter(|l| l.starts_with("tend_reconciles_total{") && l.contains("plugin=\"unit-doctor\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

fn quantile(values: &[f64], p: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn toml_string(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}

/// The config: all three built-in plugins, systemd on the peer's bus, the
/// bench's own compile cache (filled by the first daemon); returns the HTTP port.
fn write_config(sandbox: &Sandbox, peer: &SystemdPeer) -> u16 {
    let port = free_port();
    let (etc, units, certs) = (
        sandbox.path("etc"),
        peer.units_dir(),
        sandbox.path("certs.d"),
    );
    // Grants are directory roots: the declaration file gets one of its own.
    let (decl_dir, declaration) = (sandbox.path("decl"), sandbox.path("decl/declaration.json"));
    let host = format!(
        r#"cache-dir = "cache"
listen = "127.0.0.1:{port}"
[host.systemd]
bus = {bus}
"#,
        bus = toml_string(peer.bus_address()),
    );
    let plugins = format!(
        r#"[plugins.mirror-gate]
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
        certs = toml_string(&certs.display().to_string()),
        etc = toml_string(&etc.display().to_string()),
        units = toml_string(&units.display().to_string()),
        decl_dir = toml_string(&decl_dir.display().to_string()),
        declaration = toml_string(&declaration.display().to_string()),
    );
    sandbox.config_with_host(&host, &plugins);
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::create_dir_all(&decl_dir).unwrap();
    std::fs::create_dir_all(&certs).unwrap();
    for name in ["mirror-gate", "unit-applier", "unit-doctor"] {
        sandbox.add_plugin(name, name);
    }
    port
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
    // SAFETY: no other thread runs yet. The harness runs `tend` from TEND_BIN:
    // here the release build cargo made for this bench.
    unsafe { std::env::set_var("TEND_BIN", env!("CARGO_BIN_EXE_tend")) };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    // Declared first, dropped last: the peer outlives the daemon and the monitor.
    let peer = SystemdPeer::start();
    let monitor = Monitor::start(&peer);
    let sandbox = Sandbox::new();
    let dir = sandbox.dir.path();
    let port = write_config(&sandbox, &peer);

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
    peer.wait_for_unit(
        DOCTOR_UNIT,
        "ActiveState",
        "active",
        Duration::from_secs(10),
    );

    // Fill the compile cache (the declaration file does not exist yet, so
    // unit-applier only waits for it), then start again with a warm cache.
    let filling = start(&sandbox, port);
    for name in ["mirror-gate", "unit-applier", "unit-doctor"] {
        settle(port, name);
    }
    drop(filling);
    let daemon = start(&sandbox, port);
    for name in ["mirror-gate", "unit-applier", "unit-doctor"] {
        wait_until(Duration::from_secs(30), "a first reconcile", || {
            plugin_status(port, name)["reconciles"].as_u64() >= Some(1)
        });
    }
    let pid = daemon.pid();
    std::thread::sleep(Duration::from_secs(5));
    let rss_start = (rss_kib(pid), peak_rss_kib(pid));

    println!("== unit-applier: first apply of {FILES} files and {UNITS} units ==");
    std::fs::write(
        sandbox.path("decl/declaration.json"),
        serde_json::to_string_pretty(&declaration(dir)).unwrap(),
    )
    .unwrap();
    let journal_before = journal(&sandbox).len();
    let (summary, from, round_trip) = reconcile(&sandbox, "unit-applier");
    let to = now_us();
    assert_eq!(summary["health"], "healthy", "{summary:#}");
    let mut last_active = 0;
    for u in 0..UNITS {
        let unit = format!("bench-{u:02}.service");
        let state = peer.unit_property(&unit, "ActiveState");
        assert_eq!(state, "active", "{unit} after the first apply");
        let active_at = peer.unit_property(&unit, "ActiveEnterTimestamp");
        last_active = last_active.max(active_at.parse::<u64>().unwrap());
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
        journal(&sandbox).len() - journal_before,
        calls.len(),
        mutating.len(),
        by_member(&mutating)
    );
    println!("  all calls: {}", by_member(&calls));
    println!("  when (ms after the POST): {}", timeline(&calls, from));

    println!("\n== unit-applier: no-op reconcile, {NOOP_RUNS} runs after the first apply ==");
    for _ in 0..3 {
        reconcile(&sandbox, "unit-applier"); // warm-up, not counted
    }
    let journal_before = journal(&sandbox).len();
    let (mut elapsed, mut round_trips) = (Vec::new(), Vec::new());
    let mut messages = BTreeSet::new();
    let mut mutations = 0;
    let from = now_us();
    for _ in 0..NOOP_RUNS {
        let (summary, _, round_trip) = reconcile(&sandbox, "unit-applier");
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
        journal(&sandbox).len() - journal_before,
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
    let mut failed_to_signal = Vec::new();
    let mut signal_to_first_call = Vec::new();
    let mut probing = Vec::new();
    let mut probed_to_restart = Vec::new();
    let mut probe_answered = Vec::new();
    let mut answered_to_restart = Vec::new();
    let mut restart_to_pre = Vec::new();
    let reconciles_before = doctor_reconciles(port);
    for round in 0..DOCTOR_ROUNDS + 2 {
        quiet(port, "unit-doctor");
        std::thread::sleep(Duration::from_millis(100));
        let before = lines(&starts).len();
        let kill_sent = now_us();
        peer.manager(&["KillUnit", "ssi", DOCTOR_UNIT, "all", "9"]);
        let killed = now_us();
        wait_until(Duration::from_secs(10), "ExecStartPre to run", || {
            lines(&starts).len() > before
        });
        let pre_ran = lines(&starts)[before] / 1000;
        peer.wait_for_unit(
            DOCTOR_UNIT,
            "ActiveState",
            "active",
            Duration::from_secs(10),
        );
        let failed_at: u64 = peer
            .unit_property(DOCTOR_UNIT, "InactiveEnterTimestamp")
            .parse()
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
        let last_probe = calls
            .iter()
            .filter_map(|c| c["timestamp-realtime"].as_u64())
            .filter(|t| (first_call..restart_at).contains(t))
            .max()
            .unwrap_or(first_call);
        let signalled = monitor
            .failure_signal(DOCTOR_PATH, kill_sent, restart_at)
            .unwrap_or_else(|| panic!("no PropertiesChanged to failed for {DOCTOR_UNIT}"));
        if round < 2 {
            continue; // warm-up
        }
        let d = |a: u64, b: u64| (b as f64 - a as f64) / 1e3;
        failed_to_restart.push(d(failed_at, restart_at));
        kill_to_pre.push(d(killed, pre_ran));
        kill_to_failed.push(d(kill_sent, failed_at));
        failed_to_first_call.push(d(failed_at, first_call));
        failed_to_signal.push(d(failed_at, signalled));
        signal_to_first_call.push(d(signalled, first_call));
        probing.push(d(first_call, last_probe));
        probed_to_restart.push(d(last_probe, restart_at));
        let answered = monitor
            .last_systemd_reply(last_probe, restart_at)
            .unwrap_or(last_probe);
        probe_answered.push(d(last_probe, answered));
        answered_to_restart.push(d(answered, restart_at));
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
    println!(
        "  unit-doctor reconciles per round: {:.1}",
        (doctor_reconciles(port) - reconciles_before) as f64 / (DOCTOR_ROUNDS + 2) as f64
    );
    println!(
        "  p50 of failed -> RestartUnit: failed -> systemd's PropertiesChanged {:.2} ms; signal -> tend's first call {:.2} ms; first -> last probe call {:.2} ms; last probe call -> RestartUnit {:.2} ms",
        quantile(&failed_to_signal, 0.5),
        quantile(&signal_to_first_call, 0.5),
        quantile(&probing, 0.5),
        quantile(&probed_to_restart, 0.5)
    );
    println!(
        "  p50 of last probe call -> RestartUnit: -> systemd's last answer {:.2} ms; its answer -> RestartUnit (tend: the plugin, state, journal) {:.2} ms",
        quantile(&probe_answered, 0.5),
        quantile(&answered_to_restart, 0.5)
    );

    println!("\n== tend run, mirror-gate + unit-applier + unit-doctor loaded, idle ==");
    quiet(port, "unit-doctor");
    std::thread::sleep(Duration::from_secs(5));
    println!(
        "RSS after start-up (warm cache, 5 s idle): {} KiB (peak {} KiB)",
        rss_start.0, rss_start.1
    );
    println!(
        "RSS after the runs above (5 s idle): {} KiB (peak {} KiB)",
        rss_kib(pid),
        peak_rss_kib(pid)
    );
    drop(daemon);
    drop(monitor);
    drop(peer);
}
