//! The daemon as operators run it (the release `tend` binary, real files):
//! time from a plugin file landing to its first reconcile on the new version,
//! start-up to first reconcile, and idle RSS and CPU. Needs `cargo xtask plugins`.
//!
//!   cargo bench -p tend --bench daemon

mod common;
use common::plugins_dir;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn get(port: u16, path: &str) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    Some(response.split_once("\r\n\r\n")?.1.to_string())
}

/// The named plugin's `/status` entry.
fn plugin(port: u16, name: &str) -> Option<serde_json::Value> {
    let status: serde_json::Value = serde_json::from_str(&get(port, "/status")?).ok()?;
    status["plugins"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == name)
        .cloned()
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

fn digest(path: &Path) -> String {
    use sha2::Digest;
    format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(std::fs::read(path).unwrap()))
    )
}

struct Daemon {
    child: Child,
    port: u16,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &Path, plugins: &str) -> Daemon {
    let port = free_port();
    let config = format!(
        "[host]\nplugins-dir = \"plugins\"\nstate-dir = \"state\"\ncache-dir = \"cache\"\nlisten = \"127.0.0.1:{port}\"\n{plugins}"
    );
    std::fs::write(dir.join("tend.toml"), config).unwrap();
    std::fs::create_dir_all(dir.join("plugins")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_tend"))
        .args(["run", "-c"])
        .arg(dir.join("tend.toml"))
        .env("TEND_LOG", "warn")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let daemon = Daemon { child, port };
    time_until(Duration::from_secs(30), || {
        get(port, "/readyz").is_some_and(|b| b == "ready\n")
    });
    daemon
}

/// Land `source` as plugins/`name`.wasm (write beside, rename) and time until a
/// reconcile ran on it.
fn land(dir: &Path, daemon: &Daemon, name: &str, source: &Path) -> Duration {
    let target = dir.join(format!("plugins/{name}.wasm"));
    let staging = dir.join(format!("{name}.staging"));
    std::fs::copy(source, &staging).unwrap();
    let want = digest(source);
    let runs_before = plugin(daemon.port, name)
        .and_then(|p| p["reconciles"].as_u64())
        .unwrap_or(0);
    let started = Instant::now();
    std::fs::rename(&staging, &target).unwrap();
    time_until(Duration::from_secs(120), || {
        plugin(daemon.port, name).is_some_and(|p| {
            p["reconciles"].as_u64() > Some(runs_before) && p["last"]["digest"] == want.as_str()
        })
    });
    started.elapsed()
}

/// Wait (untimed) until the Cranelift build replaced the Winch one, so it is cached.
fn settle(daemon: &Daemon, name: &str) {
    time_until(Duration::from_secs(120), || {
        plugin(daemon.port, name).is_some_and(|p| p["compiler"] == "cranelift")
    });
}

/// Delete the plugin's file and wait until the daemon reports it missing.
fn unland(dir: &Path, daemon: &Daemon, name: &str) {
    std::fs::remove_file(dir.join(format!("plugins/{name}.wasm"))).unwrap();
    time_until(Duration::from_secs(30), || {
        plugin(daemon.port, name).is_some_and(|p| p["state"] == "missing")
    });
}

fn proc_status(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(key)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// utime + stime in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn main() {
    let plugins = plugins_dir();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;

    println!("== plugin file landing -> first reconcile on it ==");
    for (name, file, config) in [
        (
            "rust",
            "chaos.wasm",
            "[plugins.rust.config]\nmode = \"noop\"\n",
        ),
        (
            "python",
            "python-http-check.wasm",
            "[plugins.python.grants]\nhttp = [\"http://127.0.0.1:*/*\"]\n[plugins.python.config]\nurls = [\"http://127.0.0.1:1/\"]\n",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let daemon = start(dir.path(), &format!("[plugins.{name}]\n{config}"));
        let cold = land(dir.path(), &daemon, name, &plugins.join(file));
        settle(&daemon, name);
        unland(dir.path(), &daemon, name);
        let warm = land(dir.path(), &daemon, name, &plugins.join(file));
        println!(
            "{name:<8} cache cold {:>8.1} ms   cache warm {:>7.1} ms",
            ms(cold),
            ms(warm)
        );
    }

    println!("\n== start-up and idle, with the built-in plugin loaded ==");
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("plugins")).unwrap();
    std::fs::copy(
        plugins.join("mirror-gate.wasm"),
        dir.path().join("plugins/mirror-gate.wasm"),
    )
    .unwrap();
    let config = "[plugins.mirror-gate]\ninterval = \"1h\"\n[plugins.mirror-gate.grants]\nfiles = [{ path = \"/tmp/tend-bench-certs.d\", write = true }]\n[plugins.mirror-gate.config]\ncerts-dir = \"/tmp/tend-bench-certs.d\"\n";
    let filling = start(dir.path(), config);
    settle(&filling, "mirror-gate");
    drop(filling); // the compile cache now holds the Cranelift build
    let started = Instant::now();
    let daemon = start(dir.path(), config);
    time_until(Duration::from_secs(30), || {
        plugin(daemon.port, "mirror-gate").is_some_and(|p| p["reconciles"].as_u64() >= Some(1))
    });
    println!(
        "start-up to first reconcile (warm cache): {:.1} ms",
        ms(started.elapsed())
    );
    let pid = daemon.child.id();
    std::thread::sleep(Duration::from_secs(2));
    let (ticks_before, idle_from) = (cpu_ticks(pid), Instant::now());
    std::thread::sleep(Duration::from_secs(20));
    let ticks = cpu_ticks(pid) - ticks_before;
    let ticks_per_second = 100.0;
    println!(
        "idle: RSS {} KiB (peak {} KiB), CPU {:.3} % over {:.0} s ({ticks} ticks)",
        proc_status(pid, "VmRSS:"),
        proc_status(pid, "VmHWM:"),
        ticks as f64 / ticks_per_second / idle_from.elapsed().as_secs_f64() * 100.0,
        idle_from.elapsed().as_secs_f64()
    );
}
