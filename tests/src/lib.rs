//! Harness for Tend's end-to-end tests: the real `tend` binary, the real
//! compiled plugins, real peers on loopback. Build everything first with
//! `cargo xtask test` (or `cargo xtask plugins && cargo build -p tend`).

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn built(path: PathBuf) -> PathBuf {
    assert!(
        path.exists(),
        "{} is missing: run `cargo xtask test`, which builds it",
        path.display()
    );
    path
}

/// The `tend` binary under test: `TEND_BIN` (relative to the workspace root),
/// else target/debug/tend.
pub fn tend_bin() -> PathBuf {
    let bin =
        std::env::var_os("TEND_BIN").map_or_else(|| "target/debug/tend".into(), PathBuf::from);
    built(workspace_root().join(bin))
}

/// A plugin built by `cargo xtask plugins`.
pub fn plugin(name: &str) -> PathBuf {
    built(
        workspace_root()
            .join("target/plugins")
            .join(format!("{name}.wasm")),
    )
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// GET `path` from 127.0.0.1:`port`: (status, body). A plain HTTP/1.0 client,
/// enough for tend's status endpoints.
pub fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Ok((status, body))
}

/// `/status` of a daemon as JSON, once it answers.
pub fn status(port: u16) -> serde_json::Value {
    let mut body = String::new();
    wait_until(
        Duration::from_secs(30),
        "/status to answer",
        || match http_get(port, "/status") {
            Ok((200, b)) => {
                body = b;
                true
            }
            _ => false,
        },
    );
    serde_json::from_str(&body).unwrap()
}

/// One plugin's entry in `/status` (null when absent).
pub fn plugin_status(port: u16, name: &str) -> serde_json::Value {
    let status = status(port);
    let plugins = status["plugins"].as_array().unwrap();
    plugins
        .iter()
        .find(|p| p["name"] == name)
        .cloned()
        .unwrap_or(serde_json::Value::Null)
}

/// Wait until `name`'s `/status` entry satisfies `condition`; returns it.
pub fn wait_for_plugin(
    port: u16,
    name: &str,
    what: &str,
    condition: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let current = plugin_status(port, name);
        if condition(&current) {
            return current;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {name}: {what}; last status: {current:#}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The sha256 digest of a file as tend reports it.
pub fn digest_of(path: &Path) -> String {
    let output = Command::new("sha256sum").arg(path).output().unwrap();
    format!(
        "sha256:{}",
        String::from_utf8_lossy(&output.stdout)
            .split(' ')
            .next()
            .unwrap()
    )
}

/// Poll `condition` until it holds or `within` passes; panics with `what`.
pub fn wait_until(within: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A real OCI registry (tests/peers/registry.sh), stopped by PID on drop.
pub struct Registry {
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Registry {
    pub fn start() -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let status = Command::new(workspace_root().join("tests/peers/registry.sh"))
            .args(["start", dir.path().to_str().unwrap(), &port.to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "registry did not start");
        Registry { port, dir }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = Command::new(workspace_root().join("tests/peers/registry.sh"))
            .args(["stop", self.dir.path().to_str().unwrap()])
            .status();
    }
}

/// A scratch directory with a plugins dir, a state dir and a config file.
/// All sandboxes share one compile cache, so each component compiles once.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Default for Sandbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("plugins")).unwrap();
        Sandbox { dir }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Copy a built plugin into the plugins dir under `name`.
    pub fn add_plugin(&self, built: &str, name: &str) -> &Self {
        std::fs::copy(plugin(built), self.path(&format!("plugins/{name}.wasm"))).unwrap();
        self
    }

    /// Write tend.toml: a [host] section, then `plugins` (TOML text).
    pub fn config(&self, plugins: &str) -> &Self {
        self.config_with_host("", plugins)
    }

    /// Write tend.toml with extra `[host]` lines (such as `listen = ...`).
    pub fn config_with_host(&self, host: &str, plugins: &str) -> &Self {
        // A shared compile cache unless the test brings its own.
        let cache = match host.contains("cache-dir") {
            true => String::new(),
            false => format!(
                "cache-dir = \"{}\"\n",
                workspace_root().join("target/e2e-cache").display()
            ),
        };
        let text = format!(
            "[host]\nplugins-dir = \"plugins\"\nstate-dir = \"state\"\n{cache}node-name = \"e2e-node\"\n{host}\n{plugins}"
        );
        // Write then rename, as an operator's tooling would: a running tend never
        // reads half a file.
        let tmp = self.path(".tend.toml.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(tmp, self.path("tend.toml")).unwrap();
        self
    }

    /// Run `tend ARGS... -c tend.toml` to completion.
    pub fn tend(&self, args: &[&str]) -> Outcome {
        let output = Command::new(tend_bin())
            .args(args)
            .arg("-c")
            .arg(self.path("tend.toml"))
            .env("TEND_LOG", "warn")
            .output()
            .unwrap();
        Outcome::from(output)
    }

    /// Start `tend run` in the background.
    pub fn daemon(&self) -> Daemon {
        self.daemon_with_env(&[])
    }

    /// Start `tend run` with extra environment variables.
    pub fn daemon_with_env(&self, env: &[(&str, &str)]) -> Daemon {
        let log = self.path("tend.log");
        let _ = std::fs::remove_file(&log);
        let child = Command::new(tend_bin())
            .args(["run", "-c"])
            .arg(self.path("tend.toml"))
            .env("TEND_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .unwrap(),
            )
            .spawn()
            .unwrap();
        Daemon {
            child: Some(child),
            log,
        }
    }
}

/// What a finished `tend` command printed.
#[derive(Debug)]
pub struct Outcome {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Outcome {
    fn from(o: Output) -> Self {
        Outcome {
            success: o.status.success(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

/// A running `tend run`, killed on drop if still running.
pub struct Daemon {
    child: Option<Child>,
    log: PathBuf,
}

impl Daemon {
    /// Everything the daemon logged so far (without ANSI colours).
    pub fn log(&self) -> String {
        let mut text = String::new();
        std::fs::File::open(&self.log)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        strip_ansi(&text)
    }

    /// How many log lines contain every one of `needles`.
    pub fn count(&self, needles: &[&str]) -> usize {
        self.log()
            .lines()
            .filter(|l| needles.iter().all(|n| l.contains(n)))
            .count()
    }

    pub fn wait_for_log(&self, within: Duration, needles: &[&str]) {
        wait_until(within, &format!("a log line with {needles:?}"), || {
            self.count(needles) > 0
        });
        let _ = self.log();
    }

    /// Times (seconds since the epoch) of log lines containing every needle.
    pub fn times_of(&self, needles: &[&str]) -> Vec<f64> {
        self.log()
            .lines()
            .filter(|l| needles.iter().all(|n| l.contains(n)))
            .filter_map(|l| humantime::parse_rfc3339(l.split_whitespace().next()?).ok())
            .map(|t| {
                t.duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_secs_f64()
            })
            .collect()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// SIGTERM, then wait; returns whether it exited 0.
    pub fn terminate(mut self, within: Duration) -> bool {
        let mut child = self.child.take().unwrap();
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status.success();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("tend did not exit within {within:?} of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            if std::thread::panicking() {
                eprintln!("--- tend log ---\n{}", self.log());
            }
        }
    }
}

fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A TCP peer on loopback that accepts connections and never answers: a
/// mutation sent to it blocks until its caller gives up. Stops on drop.
pub struct SilentPeer {
    pub port: u16,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl SilentPeer {
    pub fn start() -> SilentPeer {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = std::sync::Arc::new(AtomicUsize::new(0));
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (count, stopping) = (accepted.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut held = Vec::new();
            while !stopping.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        held.push(stream);
                        count.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        SilentPeer {
            port,
            accepted,
            stop,
        }
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for SilentPeer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// `tend journal --json` of a sandbox, one JSON object per entry.
pub fn journal(sandbox: &Sandbox) -> Vec<serde_json::Value> {
    let out = sandbox.tend(&["journal", "--json"]);
    assert!(out.success, "tend journal failed: {}", out.stderr);
    out.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
