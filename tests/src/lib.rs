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

/// A real systemd (tests/peers/systemd.sh): PID 1 of private namespaces, on the
/// host filesystem, with a private system bus. Units go in `units_dir()`; it is
/// stopped by PID on drop, and dropping it fails if any of its processes remain.
pub struct SystemdPeer {
    address: String,
    processes: PeerProcesses,
    dir: tempfile::TempDir,
}

impl SystemdPeer {
    /// Start a peer in a new temporary directory; returns once the manager
    /// answers on its bus and has finished booting.
    pub fn start() -> SystemdPeer {
        let dir = tempfile::tempdir().unwrap();
        let output = Command::new(workspace_root().join("tests/peers/systemd.sh"))
            .arg("start")
            .arg(dir.path())
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(output.status.success(), "the systemd peer did not start");
        let address = String::from_utf8(output.stdout).unwrap().trim().to_string();
        let cgroup = std::fs::read_to_string(dir.path().join("cgroup")).unwrap();
        let processes = PeerProcesses {
            dir: dir.path().canonicalize().unwrap(),
            cgroup: PathBuf::from(cgroup.trim()),
        };
        SystemdPeer {
            address,
            processes,
            dir,
        }
    }

    /// Stop the manager and its bus (the directory stays): what a node sees
    /// when systemd's bus goes away.
    pub fn stop_bus(&self) {
        let status = Command::new(workspace_root().join("tests/peers/systemd.sh"))
            .arg("stop")
            .arg(self.dir.path())
            .status()
            .unwrap();
        assert!(status.success(), "the systemd peer did not stop");
    }

    /// Start it again in the same directory, on the same bus address.
    pub fn start_bus_again(&self) {
        let output = Command::new(workspace_root().join("tests/peers/systemd.sh"))
            .arg("start")
            .arg(self.dir.path())
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "the systemd peer did not start again"
        );
        assert_eq!(
            String::from_utf8(output.stdout).unwrap().trim(),
            self.address
        );
    }

    /// `unix:path=DIR/run/dbus/system_bus_socket`.
    pub fn bus_address(&self) -> &str {
        &self.address
    }

    /// The manager's only unit path.
    pub fn units_dir(&self) -> PathBuf {
        self.dir.path().join("units")
    }

    /// The peer's directory (units/, run/, console.log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The peer's processes, as seen in /proc; usable after the peer is dropped.
    pub fn processes(&self) -> PeerProcesses {
        self.processes.clone()
    }

    /// What the manager and its units wrote to the console so far.
    pub fn console(&self) -> String {
        let bytes = std::fs::read(self.dir.path().join("console.log")).unwrap_or_default();
        strip_ansi(&String::from_utf8_lossy(&bytes))
    }

    /// `busctl --address=<bus> ARGS...`: asserts success, returns stdout.
    pub fn busctl(&self, args: &[&str]) -> String {
        let output = Command::new("busctl")
            .arg(format!("--address={}", self.address))
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "busctl {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    /// Call a method of org.freedesktop.systemd1.Manager, e.g.
    /// `manager(&["StartUnit", "ss", "hello.service", "replace"])`; returns busctl's output.
    pub fn manager(&self, method_and_args: &[&str]) -> String {
        let mut args = vec![
            "call",
            "org.freedesktop.systemd1",
            "/org/freedesktop/systemd1",
            "org.freedesktop.systemd1.Manager",
        ];
        args.extend_from_slice(method_and_args);
        self.busctl(&args)
    }

    /// A property of the org.freedesktop.systemd1.Unit interface (`ActiveState`,
    /// `SubState`, `LoadState`, `FragmentPath`, ...): strings as they are, other
    /// values as JSON. Uses `LoadUnit`, which also works for units not loaded yet.
    pub fn unit_property(&self, unit: &str, property: &str) -> String {
        let loaded: serde_json::Value = serde_json::from_str(&self.busctl(&[
            "--json=short",
            "call",
            "org.freedesktop.systemd1",
            "/org/freedesktop/systemd1",
            "org.freedesktop.systemd1.Manager",
            "LoadUnit",
            "s",
            unit,
        ]))
        .unwrap();
        let path = loaded["data"][0].as_str().unwrap().to_string();
        let value: serde_json::Value = serde_json::from_str(&self.busctl(&[
            "--json=short",
            "get-property",
            "org.freedesktop.systemd1",
            &path,
            "org.freedesktop.systemd1.Unit",
            property,
        ]))
        .unwrap();
        match &value["data"] {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }

    /// Wait until `unit`'s `property` is `value`.
    pub fn wait_for_unit(&self, unit: &str, property: &str, value: &str, within: Duration) {
        wait_until(within, &format!("{unit} {property}={value}"), || {
            self.unit_property(unit, property) == value
        });
    }
}

impl Drop for SystemdPeer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- systemd peer console ---\n{}", self.console());
        }
        let status = Command::new(workspace_root().join("tests/peers/systemd.sh"))
            .arg("stop")
            .arg(self.dir.path())
            .status();
        let stopped = status.is_ok_and(|s| s.success());
        if !stopped && !std::thread::panicking() {
            panic!(
                "the systemd peer in {} did not stop cleanly",
                self.dir.path().display()
            );
        }
    }
}

/// Finds a systemd peer's processes in /proc: those in its cgroup (the manager,
/// the bus, every unit's processes) or whose command line names its directory
/// (script, unshare).
#[derive(Clone, Debug)]
pub struct PeerProcesses {
    dir: PathBuf,
    cgroup: PathBuf,
}

impl PeerProcesses {
    /// "PID: command line" of each living process of the peer.
    pub fn list(&self) -> Vec<String> {
        let dir = self.dir.to_string_lossy().into_owned();
        let dir_slash = format!("{dir}/");
        let name = self.cgroup.file_name().unwrap().to_string_lossy();
        let (exact, below) = (format!("0::/{name}"), format!("0::/{name}/"));
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            // Gone since read_dir, or a zombie (empty command line): not running.
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                continue;
            };
            let args: Vec<String> = cmdline
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let cgroup = std::fs::read_to_string(entry.path().join("cgroup")).unwrap_or_default();
            let in_cgroup = cgroup.lines().any(|l| l == exact || l.starts_with(&below));
            let names_dir = args.iter().any(|a| *a == dir || a.contains(&dir_slash));
            if !args.is_empty() && (in_cgroup || names_dir) {
                found.push(format!("{pid}: {}", args.join(" ")));
            }
        }
        found
    }

    /// Whether the peer's cgroup directory still exists.
    pub fn cgroup_exists(&self) -> bool {
        self.cgroup.exists()
    }
}

impl Registry {
    /// What the registry logged so far: its access log (every request, with
    /// its query string) and its warnings.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }
}

/// Whether the tests run as root: the containerd peer and iptables need it.
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// The CRI v1 API (k8s-cri), for calls the [`ContainerdPeer`] helpers do not cover.
pub use k8s_cri::v1 as cri;

/// A CRI pod sandbox as `ListPodSandbox` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CriSandbox {
    pub id: String,
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub attempt: u32,
    pub state: SandboxState,
}

/// `SANDBOX_READY` or `SANDBOX_NOTREADY`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SandboxState {
    Ready,
    NotReady,
}

/// A real containerd 1.6 with its CRI plugin (tests/peers/containerd.sh) on a
/// private socket, a real registry holding `exp/big:v1` and `library/pause:3.9`,
/// and a proxy in front of that registry whose blob downloads never finish. Talks
/// CRI v1 with tonic over the unix socket. Stopped by PID on drop (sandboxes
/// removed over CRI first); dropping it fails if any of its processes, mounts
/// or cgroups remain. Needs root.
pub struct ContainerdPeer {
    dir: tempfile::TempDir,
    endpoint: String,
    registry_port: u16,
    stall_port: u16,
    certs_dir: PathBuf,
    cgroup_parent: String,
    runtime: tokio::runtime::Runtime,
    channel: tonic::transport::Channel,
}

impl ContainerdPeer {
    /// The sandbox image, imported at start (never pulled).
    pub const PAUSE_IMAGE: &'static str = "localhost/tend/pause:v1";
    /// A static busybox, entrypoint /bin/sh, imported at start.
    pub const BUSYBOX_IMAGE: &'static str = "localhost/tend/busybox:v1";

    /// Start a peer in a new temporary directory, on free ports, with its CRI
    /// `registry.config_path` in that directory (`certs.d`).
    pub fn start() -> ContainerdPeer {
        Self::start_with(None)
    }

    /// Start a peer whose CRI `registry.config_path` is `certs_dir` (which a
    /// test, or mirror-gate, manages). The peer writes hosts.toml there only for
    /// its own registry and proxy (`127.0.0.1:PORT`), never for docker.io.
    pub fn start_with_certs_dir(certs_dir: &Path) -> ContainerdPeer {
        Self::start_with(Some(certs_dir))
    }

    fn start_with(certs_dir: Option<&Path>) -> ContainerdPeer {
        let dir = tempfile::tempdir().unwrap();
        let certs_dir = certs_dir.map_or_else(|| dir.path().join("certs.d"), Path::to_path_buf);
        let (registry_port, stall_port) = loop {
            let (a, b) = (free_port(), free_port());
            if a != b {
                break (a, b);
            }
        };
        let output = Command::new(workspace_root().join("tests/peers/containerd.sh"))
            .arg("start")
            .arg(dir.path())
            .args([registry_port.to_string(), stall_port.to_string()])
            .env("CERTS_DIR", &certs_dir)
            // Built images are kept across peers (and runs): about 1.5 s a start.
            .env(
                "IMAGE_CACHE",
                workspace_root().join("target/cri-peer-images"),
            )
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(output.status.success(), "the containerd peer did not start");
        let endpoint = String::from_utf8(output.stdout).unwrap().trim().to_string();
        let socket = PathBuf::from(endpoint.strip_prefix("unix://").unwrap());
        let cgroup_parent = std::fs::read_to_string(dir.path().join("cgroup-parent"))
            .unwrap()
            .trim()
            .to_string();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let channel = runtime
            .block_on(async {
                // tonic needs a URI; the connector ignores it and dials the socket.
                tonic::transport::Endpoint::try_from("http://[::]:50051")
                    .unwrap()
                    .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
                        let socket = socket.clone();
                        async move {
                            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                                tokio::net::UnixStream::connect(socket).await?,
                            ))
                        }
                    }))
                    .await
            })
            .unwrap();
        ContainerdPeer {
            dir,
            endpoint,
            registry_port,
            stall_port,
            certs_dir,
            cgroup_parent,
            runtime,
            channel,
        }
    }

    /// The CRI endpoint as a kubelet names it: `unix://DIR/containerd.sock`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The CRI socket's path.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("containerd.sock")
    }

    /// The peer's directory (config.toml, *.log, state).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CRI's `registry.config_path`.
    pub fn certs_dir(&self) -> &Path {
        &self.certs_dir
    }

    /// `127.0.0.1:PORT` of the registry (plain HTTP; `exp/big:v1`, `library/pause:3.9`).
    pub fn registry(&self) -> String {
        format!("127.0.0.1:{}", self.registry_port)
    }

    /// `http://127.0.0.1:PORT` of the registry: a cache endpoint for mirror-gate.
    pub fn registry_endpoint(&self) -> String {
        format!("http://{}", self.registry())
    }

    pub fn registry_port(&self) -> u16 {
        self.registry_port
    }

    /// `127.0.0.1:PORT` of the stalling proxy in front of the registry: manifests
    /// come through, blobs of 10 kB or more never finish.
    pub fn stall_proxy(&self) -> String {
        format!("127.0.0.1:{}", self.stall_port)
    }

    pub fn stall_port(&self) -> u16 {
        self.stall_port
    }

    /// `127.0.0.1:PORT/exp/big:v1` from the registry: a real 4 MB pull.
    pub fn big_image(&self) -> String {
        format!("{}/exp/big:v1", self.registry())
    }

    /// The same image through the stalling proxy: its pull hangs, as long as the
    /// image's blobs are not in containerd's store (see [`Self::remove_image`]).
    pub fn stalled_big_image(&self) -> String {
        format!("{}/exp/big:v1", self.stall_proxy())
    }

    /// What the registry logged so far: its access log shows every request,
    /// with containerd's `?ns=docker.io` on requests for a mirrored docker.io.
    pub fn registry_log(&self) -> String {
        self.read_log("registry.log")
    }

    /// What the stalling proxy logged so far (every request; `stall ...` when it
    /// starts holding a blob, `client went away` when the client gave up).
    pub fn stall_proxy_log(&self) -> String {
        self.read_log("proxy.log")
    }

    /// What containerd logged so far.
    pub fn containerd_log(&self) -> String {
        self.read_log("containerd.log")
    }

    fn read_log(&self, name: &str) -> String {
        let bytes = std::fs::read(self.dir.path().join(name)).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Run `f` on the peer's runtime: for CRI calls the helpers do not cover.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.runtime.block_on(f)
    }

    /// A CRI RuntimeService client (use it inside [`Self::block_on`]).
    pub fn runtime_client(
        &self,
    ) -> cri::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel> {
        cri::runtime_service_client::RuntimeServiceClient::new(self.channel.clone())
    }

    /// A CRI ImageService client (use it inside [`Self::block_on`]).
    pub fn image_client(
        &self,
    ) -> cri::image_service_client::ImageServiceClient<tonic::transport::Channel> {
        cri::image_service_client::ImageServiceClient::new(self.channel.clone())
    }

    /// A request with a deadline (sent as grpc-timeout: containerd cancels the
    /// call's work when it passes).
    fn request<T>(message: T, timeout: Duration) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(timeout);
        request
    }

    /// Run `call` with a client-side deadline too (`timeout` plus a grace).
    fn call<T>(
        &self,
        timeout: Duration,
        call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, tonic::Status> {
        self.block_on(async {
            match tokio::time::timeout(timeout + Duration::from_secs(5), call).await {
                Ok(result) => result.map(tonic::Response::into_inner),
                Err(_) => Err(tonic::Status::deadline_exceeded(format!(
                    "no answer within {timeout:?}"
                ))),
            }
        })
    }

    /// The sandbox config of a hostNetwork pod (the kubelet's labels, an empty
    /// hostname as hostNetwork needs, the peer's cgroup parent).
    pub fn sandbox_config(
        &self,
        name: &str,
        namespace: &str,
        uid: &str,
        attempt: u32,
    ) -> cri::PodSandboxConfig {
        let labels = [
            ("io.kubernetes.pod.name", name),
            ("io.kubernetes.pod.namespace", namespace),
            ("io.kubernetes.pod.uid", uid),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: name.into(),
                uid: uid.into(),
                namespace: namespace.into(),
                attempt,
            }),
            labels,
            linux: Some(cri::LinuxPodSandboxConfig {
                // Under the peer's own cgroup, which stop removes.
                cgroup_parent: format!("/{}", self.cgroup_parent),
                security_context: Some(cri::LinuxSandboxSecurityContext {
                    namespace_options: Some(cri::NamespaceOption {
                        network: cri::NamespaceMode::Node as i32,
                        pid: cri::NamespaceMode::Pod as i32,
                        ipc: cri::NamespaceMode::Pod as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// RunPodSandbox of a hostNetwork pod; returns the sandbox id once it is ready.
    pub fn run_sandbox(&self, name: &str, namespace: &str, uid: &str, attempt: u32) -> String {
        let config = self.sandbox_config(name, namespace, uid, attempt);
        let timeout = Duration::from_secs(60);
        let mut client = self.runtime_client();
        let request = cri::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: String::new(),
        };
        self.call(
            timeout,
            client.run_pod_sandbox(Self::request(request, timeout)),
        )
        .unwrap_or_else(|e| panic!("RunPodSandbox {namespace}/{name} attempt {attempt}: {e}"))
        .pod_sandbox_id
    }

    /// StopPodSandbox: its processes end, it lists as NOTREADY.
    pub fn stop_sandbox(&self, id: &str) {
        let timeout = Duration::from_secs(60);
        let mut client = self.runtime_client();
        let request = cri::StopPodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        self.call(
            timeout,
            client.stop_pod_sandbox(Self::request(request, timeout)),
        )
        .unwrap_or_else(|e| panic!("StopPodSandbox {id}: {e}"));
    }

    /// RemovePodSandbox (stops it first if it runs).
    pub fn remove_sandbox(&self, id: &str) {
        let timeout = Duration::from_secs(60);
        let mut client = self.runtime_client();
        let request = cri::RemovePodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        self.call(
            timeout,
            client.remove_pod_sandbox(Self::request(request, timeout)),
        )
        .unwrap_or_else(|e| panic!("RemovePodSandbox {id}: {e}"));
    }

    /// Every pod sandbox, as ListPodSandbox reports it (oldest first).
    pub fn sandboxes(&self) -> Vec<CriSandbox> {
        let timeout = Duration::from_secs(30);
        let mut client = self.runtime_client();
        let request = cri::ListPodSandboxRequest { filter: None };
        let mut items = self
            .call(
                timeout,
                client.list_pod_sandbox(Self::request(request, timeout)),
            )
            .unwrap_or_else(|e| panic!("ListPodSandbox: {e}"))
            .items;
        items.sort_by_key(|s| s.created_at);
        items
            .into_iter()
            .map(|s| {
                let metadata = s.metadata.unwrap_or_default();
                CriSandbox {
                    id: s.id,
                    name: metadata.name,
                    namespace: metadata.namespace,
                    uid: metadata.uid,
                    attempt: metadata.attempt,
                    state: match s.state == cri::PodSandboxState::SandboxReady as i32 {
                        true => SandboxState::Ready,
                        false => SandboxState::NotReady,
                    },
                }
            })
            .collect()
    }

    /// PullImage with a 2-minute deadline; the image's ref (its id) or the CRI's error.
    pub fn pull(&self, image: &str) -> Result<String, tonic::Status> {
        self.pull_within(image, Duration::from_secs(120))
    }

    /// PullImage that gives up after `timeout` (containerd 1.6 has no pull
    /// progress deadline of its own: a stalled pull waits for the client's).
    pub fn pull_within(&self, image: &str, timeout: Duration) -> Result<String, tonic::Status> {
        let mut client = self.image_client();
        let request = cri::PullImageRequest {
            image: Some(Self::image_spec(image)),
            ..Default::default()
        };
        self.call(timeout, client.pull_image(Self::request(request, timeout)))
            .map(|r| r.image_ref)
    }

    /// Whether ImageStatus knows `image` (by name or id).
    pub fn image_present(&self, image: &str) -> bool {
        let timeout = Duration::from_secs(30);
        let mut client = self.image_client();
        let request = cri::ImageStatusRequest {
            image: Some(Self::image_spec(image)),
            verbose: false,
        };
        self.call(
            timeout,
            client.image_status(Self::request(request, timeout)),
        )
        .unwrap_or_else(|e| panic!("ImageStatus {image}: {e}"))
        .image
        .is_some()
    }

    /// RemoveImage (containerd then deletes its content at once).
    pub fn remove_image(&self, image: &str) {
        let timeout = Duration::from_secs(30);
        let mut client = self.image_client();
        let request = cri::RemoveImageRequest {
            image: Some(Self::image_spec(image)),
        };
        self.call(
            timeout,
            client.remove_image(Self::request(request, timeout)),
        )
        .unwrap_or_else(|e| panic!("RemoveImage {image}: {e}"));
    }

    fn image_spec(image: &str) -> cri::ImageSpec {
        cri::ImageSpec {
            image: image.into(),
            ..Default::default()
        }
    }

    /// The peer's processes, mounts and cgroups as the host sees them; usable
    /// after the peer is dropped.
    pub fn processes(&self) -> CriPeerProcesses {
        CriPeerProcesses {
            dir: self.dir.path().canonicalize().unwrap(),
            cgroup_parent: self.cgroup_parent.clone(),
        }
    }
}

impl Drop for ContainerdPeer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.containerd_log();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!(
                "--- containerd peer log (last lines) ---\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        let status = Command::new(workspace_root().join("tests/peers/containerd.sh"))
            .arg("stop")
            .arg(self.dir.path())
            .status();
        let stopped = status.is_ok_and(|s| s.success());
        if !stopped && !std::thread::panicking() {
            panic!(
                "the containerd peer in {} did not stop cleanly",
                self.dir.path().display()
            );
        }
    }
}

/// Finds a containerd peer's leftovers on the host: processes whose command
/// line names its directory (containerd, its shims, the registry, the proxy) or
/// that live in its cgroups (what the shims run), mounts under its directory,
/// its cgroup directories.
#[derive(Clone, Debug)]
pub struct CriPeerProcesses {
    dir: PathBuf,
    cgroup_parent: String,
}

impl CriPeerProcesses {
    /// "PID: command line" of each living process of the peer.
    pub fn list(&self) -> Vec<String> {
        let dir = self.dir.to_string_lossy().into_owned();
        let dir_slash = format!("{dir}/");
        let (exact, below) = (
            format!("/{}", self.cgroup_parent),
            format!("/{}/", self.cgroup_parent),
        );
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                continue;
            };
            let args: Vec<String> = cmdline
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let cgroup = std::fs::read_to_string(entry.path().join("cgroup")).unwrap_or_default();
            // Every hierarchy: "ID:CONTROLLERS:PATH" (v1) and "0::PATH" (v2).
            let in_cgroup = cgroup.lines().any(|l| {
                let path = l.splitn(3, ':').nth(2).unwrap_or_default();
                path == exact || path.starts_with(&below)
            });
            let names_dir = args.iter().any(|a| *a == dir || a.contains(&dir_slash));
            if !args.is_empty() && (in_cgroup || names_dir) {
                found.push(format!("{pid}: {}", args.join(" ")));
            }
        }
        found
    }

    /// Mount points at or under the peer's directory.
    pub fn mounts(&self) -> Vec<String> {
        let dir = self.dir.to_string_lossy().into_owned();
        let dir_slash = format!("{dir}/");
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| *m == dir || m.starts_with(&dir_slash))
            .map(str::to_string)
            .collect()
    }

    /// The peer's cgroup directories that still exist (in any hierarchy).
    pub fn cgroups(&self) -> Vec<PathBuf> {
        let mut roots = vec![PathBuf::from("/sys/fs/cgroup")];
        if let Ok(entries) = std::fs::read_dir("/sys/fs/cgroup") {
            roots.extend(entries.flatten().map(|e| e.path()));
        }
        roots
            .into_iter()
            .map(|r| r.join(&self.cgroup_parent))
            .filter(|p| p.is_dir())
            .collect()
    }
}

/// Makes a port on loopback drop incoming SYNs (iptables, INPUT, `-i lo`): a
/// connect to it then times out, as to a cache host that is down or
/// unreachable. The rule is removed by [`SynDrop::accept_syns`] or on drop.
/// Needs root.
pub fn drop_syns(port: u16) -> SynDrop {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    remove_stale_syn_drops();
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let comment = format!("{SYN_DROP_TAG}{}:{port}:{n}", std::process::id());
    let rule = [
        "-i",
        "lo",
        "-p",
        "tcp",
        "--dport",
        &port.to_string(),
        "--syn",
        "-m",
        "comment",
        "--comment",
        &comment,
        "-j",
        "DROP",
    ]
    .map(str::to_string)
    .to_vec();
    let output = iptables(&["-I", "INPUT"], &rule);
    assert!(
        output.status.success(),
        "iptables -I INPUT {rule:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    SynDrop {
        port,
        rule: Some(rule),
    }
}

/// An iptables rule that drops SYNs to a loopback port; see [`drop_syns`].
pub struct SynDrop {
    port: u16,
    rule: Option<Vec<String>>,
}

/// The comment that marks the harness's rules: `tend-e2e-syn-drop:PID:PORT:N`.
const SYN_DROP_TAG: &str = "tend-e2e-syn-drop:";

impl SynDrop {
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Remove the rule: the port answers again.
    pub fn accept_syns(mut self) {
        let rule = self.rule.take().unwrap();
        let output = iptables(&["-D", "INPUT"], &rule);
        assert!(
            output.status.success(),
            "iptables -D INPUT {rule:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for SynDrop {
    fn drop(&mut self) {
        if let Some(rule) = self.rule.take() {
            let output = iptables(&["-D", "INPUT"], &rule);
            if !output.status.success() {
                eprintln!(
                    "iptables -D INPUT {rule:?} failed: {}",
                    String::from_utf8_lossy(&output.stderr)
                );
            }
        }
    }
}

fn iptables(command: &[&str], rule: &[String]) -> Output {
    // -w: wait for the xtables lock (tests run in parallel).
    Command::new("iptables")
        .args(["-w", "10"])
        .args(command)
        .args(rule)
        .output()
        .expect("cannot run iptables (Debian package iptables)")
}

/// Remove the SYN-drop rules of test processes that died before dropping them.
fn remove_stale_syn_drops() {
    let Ok(output) = Command::new("iptables")
        .args(["-w", "10", "-S", "INPUT"])
        .output()
    else {
        return;
    };
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Some((_, tagged)) = line.split_once(SYN_DROP_TAG) else {
            continue;
        };
        let pid = tagged.split(':').next().unwrap_or_default();
        if Path::new("/proc").join(pid).exists() {
            continue;
        }
        // `-A INPUT <rule>` as -S prints it; the comment (quoted) has no spaces.
        let rule: Vec<String> = line
            .split_whitespace()
            .skip(2)
            .map(|a| a.trim_matches('"').to_string())
            .collect();
        let _ = iptables(&["-D", "INPUT"], &rule);
    }
}

// ---------------------------------------------------------------------------
// mirror-gate against containerd's CRI (tests/e2e/cri_mirror.rs): a
// pull-through cache.
// ---------------------------------------------------------------------------

impl Registry {
    /// A pull-through cache of `remote` (`http://127.0.0.1:PORT`): distribution's
    /// proxy mode, as a node's registry cache runs. It answers `GET /v2/` by itself
    /// and fetches from `remote` what it is asked for; its [`Registry::log`] shows
    /// every request (with containerd's `?ns=docker.io` for a mirrored docker.io).
    pub fn start_pull_through(remote: &str) -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let status = Command::new(workspace_root().join("tests/peers/registry.sh"))
            .args([
                "start",
                dir.path().to_str().unwrap(),
                &port.to_string(),
                remote,
            ])
            .status()
            .unwrap();
        assert!(status.success(), "the pull-through cache did not start");
        Registry { port, dir }
    }
}

/// Makes a port on loopback drop every incoming TCP packet (iptables, INPUT,
/// `-i lo`), not only SYNs: a host gone dark, whose established connections
/// go silent too (a client's pooled keep-alive connection included) while new
/// connects time out. Undone like [`drop_syns`]: [`SynDrop::accept_syns`] or
/// drop. Needs root.
pub fn drop_packets(port: u16) -> SynDrop {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    remove_stale_syn_drops();
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    // The same tag as drop_syns' rules: removed the same way if this process dies.
    let comment = format!("{SYN_DROP_TAG}{}:{port}:all{n}", std::process::id());
    let rule = [
        "-i",
        "lo",
        "-p",
        "tcp",
        "--dport",
        &port.to_string(),
        "-m",
        "comment",
        "--comment",
        &comment,
        "-j",
        "DROP",
    ]
    .map(str::to_string)
    .to_vec();
    let output = iptables(&["-I", "INPUT"], &rule);
    assert!(
        output.status.success(),
        "iptables -I INPUT {rule:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    SynDrop {
        port,
        rule: Some(rule),
    }
}

// ---------------------------------------------------------------------------
// The CRI plugins, ipam-sweeper and pull-guard (tests/e2e/cri_plugins.rs):
// a plugin's /status entry in detail, the journal lines as written.
// ---------------------------------------------------------------------------

/// `/status/NAME` of a daemon as JSON: the plugin's schedule (`running`,
/// `next_run`, `requeue`), its grants, its last outcome.
pub fn plugin_detail(port: u16, name: &str) -> serde_json::Value {
    let mut body = String::new();
    wait_until(
        Duration::from_secs(30),
        &format!("/status/{name} to answer"),
        || match http_get(port, &format!("/status/{name}")) {
            Ok((200, b)) => {
                body = b;
                true
            }
            _ => false,
        },
    );
    serde_json::from_str(&body).unwrap()
}

/// Every line of `plugin`'s journal file as tend wrote it: an intent and its
/// result are separate lines (same `id`, each with its own `time_ms`), where
/// [`journal`] pairs them into one entry.
pub fn journal_lines(sandbox: &Sandbox, plugin: &str) -> Vec<serde_json::Value> {
    let path = sandbox.path(&format!("state/journal/{plugin}.jsonl"));
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Milliseconds since the epoch of an RFC 3339 time as tend writes it.
pub fn epoch_ms(rfc3339: &str) -> u64 {
    humantime::parse_rfc3339(rfc3339)
        .unwrap_or_else(|e| panic!("{rfc3339:?} is not an RFC 3339 time: {e}"))
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

// ---------------------------------------------------------------------------
// The fake Kubernetes API server (tests/peers/kube-apiserver.py) and kubectl
// against it (tests/e2e/kube_fake.rs). KubeApi starts the server as a child of
// the test process and stops it by PID; Kubectl runs a real kubectl against it.
// ---------------------------------------------------------------------------

/// target/venv's python, checked once to have the fake API server's packages
/// (aiohttp, jsonpatch, PyYAML), which `cargo xtask test` installs there (xtask's
/// VENV_PACKAGES). `TEND_KUBE_PYTHON` names another python. Panics with what to
/// run when they are missing: the harness does not install anything itself.
pub fn kube_python() -> PathBuf {
    static PYTHON: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    PYTHON
        .get_or_init(|| {
            let python = std::env::var_os("TEND_KUBE_PYTHON").map_or_else(
                || workspace_root().join("target/venv/bin/python"),
                PathBuf::from,
            );
            let ok = Command::new(&python)
                .args(["-c", "import aiohttp, jsonpatch, yaml"])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            match ok {
                true => Ok(python),
                false => Err(format!(
                    "{} lacks aiohttp, jsonpatch or PyYAML, which the fake Kubernetes API server \
                     (tests/peers/kube-apiserver.py) needs: run `cargo xtask test`, which installs \
                     them into target/venv",
                    python.display()
                )),
            }
        })
        .clone()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// One HTTP/1.0 exchange with 127.0.0.1:`port` (the server closes the
/// connection after its answer): (status, body). `headers` are sent as given.
pub fn http_call(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    timeout: Duration,
) -> std::io::Result<(u16, String)> {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(timeout))?;
    let mut request = format!(
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes())?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let response = String::from_utf8_lossy(&response).into_owned();
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

/// The fake Kubernetes API server on a free loopback port, its state in a
/// temporary directory (kubeconfig, request log, server.err). Stopped by PID on
/// drop: SIGTERM, then SIGKILL after 5 s.
pub struct KubeApi {
    child: Option<Child>,
    port: u16,
    pid: u32,
    dir: tempfile::TempDir,
}

impl KubeApi {
    /// Start with the defaults: a watch history of 10000 events, a bookmark
    /// every 60 s on watches that allow them.
    pub fn start() -> KubeApi {
        Self::start_with(&[])
    }

    /// Start with extra server arguments: `--history N` (events kept for watch
    /// replay; older resourceVersions get 410), `--bookmark-interval SECONDS`.
    /// Returns once GET /version answers.
    pub fn start_with(args: &[&str]) -> KubeApi {
        let dir = tempfile::tempdir().unwrap();
        let err = std::fs::File::create(dir.path().join("server.err")).unwrap();
        let mut child = Command::new(kube_python())
            .arg(workspace_root().join("tests/peers/kube-apiserver.py"))
            .arg("0")
            .arg("--state-dir")
            .arg(dir.path())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .unwrap();
        let pid = child.id();
        let port_file = dir.path().join("port");
        let deadline = Instant::now() + Duration::from_secs(20);
        let port = loop {
            if let Some(port) = std::fs::read_to_string(&port_file)
                .ok()
                .and_then(|p| p.trim().parse::<u16>().ok())
                && matches!(http_get(port, "/version"), Ok((200, _)))
            {
                break port;
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "the fake API server exited at start ({status}): {}",
                    std::fs::read_to_string(dir.path().join("server.err")).unwrap_or_default()
                );
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the fake API server did not answer GET /version within 20 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        KubeApi {
            child: Some(child),
            port,
            pid,
            dir,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The server's state directory (port, kube-apiserver.pid, kubeconfig,
    /// kube-apiserver.log, server.err).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A kubeconfig (no credentials, namespace `default`) pointing at the server.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// Write a kubeconfig for the server to `path`, with `namespace` as the
    /// context's namespace.
    pub fn write_kubeconfig(&self, path: &Path, namespace: &str) {
        std::fs::write(
            path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
                 users:\n- name: fake\n  user: {{}}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n\
                 \x20   user: fake\n    namespace: {namespace}\ncurrent-context: fake\n",
                self.url()
            ),
        )
        .unwrap();
    }

    /// A request with a body of `content_type` (and `User-Agent: agent` when
    /// given): (status, body). Errors only when the exchange itself fails (a
    /// blackholed request times out after `timeout`).
    pub fn call_raw(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &str,
        agent: Option<&str>,
        timeout: Duration,
    ) -> std::io::Result<(u16, String)> {
        let mut headers = vec![
            ("Content-Type", content_type),
            ("Accept", "application/json"),
        ];
        if let Some(agent) = agent {
            headers.push(("User-Agent", agent));
        }
        http_call(self.port, method, path, &headers, body, timeout)
    }

    /// A JSON request (the body, if any, as application/json): (status, JSON).
    pub fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let (status, text) = self
            .call_raw(
                method,
                path,
                "application/json",
                &body,
                None,
                Duration::from_secs(30),
            )
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let json = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
        (status, json)
    }

    /// Open a watch (`path` with its query, e.g.
    /// `/api/v1/nodes?watch=1&resourceVersion=0`); events as they come.
    pub fn watch(&self, path: &str) -> KubeWatch {
        KubeWatch::open(self.port, path, None)
    }

    /// A watch opened with `User-Agent: agent`.
    pub fn watch_as(&self, path: &str, agent: &str) -> KubeWatch {
        KubeWatch::open(self.port, path, Some(agent))
    }

    fn admin(&self, method: &str, path: &str) -> serde_json::Value {
        let (status, body) = self.call(method, path, None);
        assert_eq!(status, 200, "{method} {path}: {body}");
        body
    }

    /// `GET /fake/watches`: `total` open watches, `opened` since start, and
    /// `watches`: one entry per (group, version, resource, namespace,
    /// labelSelector, fieldSelector) with its `count` and `userAgents`.
    pub fn watches(&self) -> serde_json::Value {
        self.admin("GET", "/fake/watches")
    }

    /// Open watches of `resource` (plural, e.g. "nodes" or "leases"), any
    /// namespace or selector.
    pub fn open_watches(&self, resource: &str) -> u64 {
        self.watches()["watches"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|w| w["resource"] == resource)
            .map(|w| w["count"].as_u64().unwrap())
            .sum()
    }

    /// `GET /fake/requests`: `total`, `counts` per verb (get, list, watch,
    /// create, update, patch, delete, deletecollection, nonresource),
    /// `resources` ({"pods": {"list": 1, ...}}), `seq` and `log` (every
    /// request: seq, verb, method, path, query, resource, namespace, name,
    /// userAgent, contentType, code).
    pub fn requests(&self) -> serde_json::Value {
        self.admin("GET", "/fake/requests")
    }

    /// The log entries of requests after sequence number `seq` (see
    /// [`KubeApi::request_seq`]).
    pub fn requests_since(&self, seq: u64) -> Vec<serde_json::Value> {
        self.admin("GET", &format!("/fake/requests?since={seq}"))["log"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// The sequence number of the last request so far.
    pub fn request_seq(&self) -> u64 {
        self.requests()["seq"].as_u64().unwrap()
    }

    /// Zero the request counts and log.
    pub fn reset_requests(&self) {
        self.admin("POST", "/fake/requests/reset");
    }

    /// Compact the event history up to now: watches and list continuations
    /// from an older resourceVersion get 410 Expired. Returns the compaction
    /// point.
    pub fn compact(&self) -> u64 {
        self.admin("POST", "/fake/compact")["compacted"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    }

    /// Send a BOOKMARK now on every watch that allows them; returns how many.
    pub fn bookmark(&self) -> u64 {
        self.admin("POST", "/fake/bookmark")["sent"]
            .as_u64()
            .unwrap()
    }

    /// For `seconds`, requests (and watch events) of clients whose User-Agent
    /// contains `agent` (everyone's with None) hang unanswered; when it ends,
    /// their connections are closed, as after a network partition.
    pub fn blackhole(&self, seconds: f64, agent: Option<&str>) {
        let mut path = format!("/fake/blackhole?seconds={seconds}");
        if let Some(agent) = agent {
            path.push_str(&format!("&userAgent={}", url_encode(agent)));
        }
        self.admin("POST", &path);
    }

    /// End a blackhole now.
    pub fn end_blackhole(&self) {
        self.admin("DELETE", "/fake/blackhole");
    }

    /// Remove every object but the default namespaces (each removal is a
    /// DELETED watch event), then compact the history.
    pub fn reset(&self) {
        self.admin("POST", "/fake/reset");
    }

    /// The server's current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.admin("GET", "/fake/state")["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    }

    /// The request log the server wrote (one line per request).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("kube-apiserver.log")).unwrap_or_default()
    }

    /// SIGTERM, then wait (SIGKILL after 5 s); true when it exited on SIGTERM.
    pub fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if child.try_wait().unwrap().is_some() {
                return true;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for KubeApi {
    fn drop(&mut self) {
        if std::thread::panicking() && self.child.is_some() {
            let err =
                std::fs::read_to_string(self.dir.path().join("server.err")).unwrap_or_default();
            if !err.trim().is_empty() {
                eprintln!("--- fake API server stderr ---\n{err}");
            }
        }
        self.stop();
    }
}

fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A watch on the fake API server, read event by event (HTTP/1.0: the server
/// closes the connection when the watch ends).
pub struct KubeWatch {
    reader: std::io::BufReader<std::net::TcpStream>,
    /// The HTTP status of the watch request.
    pub status: u16,
}

impl KubeWatch {
    fn open(port: u16, path: &str, agent: Option<&str>) -> KubeWatch {
        use std::io::{BufRead, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let agent = agent.map_or(String::new(), |a| format!("User-Agent: {a}\r\n"));
        write!(
            stream,
            "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nAccept: application/json\r\n{agent}\r\n"
        )
        .unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut reader = std::io::BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let status = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                break;
            }
        }
        KubeWatch { reader, status }
    }

    /// The next event (`{"type": ..., "object": ...}`) within `within`; None
    /// when none came in time or the server ended the watch.
    pub fn next(&mut self, within: Duration) -> Option<serde_json::Value> {
        use std::io::BufRead;
        self.reader
            .get_ref()
            .set_read_timeout(Some(within.max(Duration::from_millis(1))))
            .unwrap();
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(serde_json::from_str(line.trim()).unwrap()),
        }
    }

    /// Events until one satisfies `want` (returned), panicking after `within`.
    pub fn until(
        &mut self,
        within: Duration,
        what: &str,
        want: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "timed out after {within:?} waiting for {what}"
            );
            if let Some(event) = self.next(left)
                && want(&event)
            {
                return event;
            }
        }
    }
}

/// What a kubectl run printed, and its exit code.
#[derive(Debug)]
pub struct KubectlOutput {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl KubectlOutput {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// A real kubectl pointed at a [`KubeApi`] (its kubeconfig, its own discovery
/// cache directory).
pub struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
    cache: tempfile::TempDir,
}

impl Kubectl {
    /// kubectl `version` ("1.28" ... "1.33"): `kubectl.VERSION` in the Google
    /// Cloud SDK (/usr/lib/google-cloud-sdk/bin) or in `TEND_KUBECTL_DIR`.
    pub fn version(version: &str, api: &KubeApi) -> Kubectl {
        let dir = std::env::var_os("TEND_KUBECTL_DIR").map_or_else(
            || PathBuf::from("/usr/lib/google-cloud-sdk/bin"),
            PathBuf::from,
        );
        let bin = dir.join(format!("kubectl.{version}"));
        assert!(
            bin.exists(),
            "{} is missing: the tests run kubectl {version} from the Google Cloud SDK \
             (Debian package google-cloud-cli, whose kubectl package ships kubectl.1.28 \
             ... kubectl.1.33); set TEND_KUBECTL_DIR to a directory holding kubectl.{version}",
            bin.display()
        );
        Kubectl {
            bin,
            kubeconfig: api.kubeconfig(),
            cache: tempfile::tempdir().unwrap(),
        }
    }

    pub fn bin(&self) -> &Path {
        &self.bin
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.cache.path())
            .arg("--cache-dir")
            .arg(self.cache.path().join("cache"))
            .args(args);
        cmd
    }

    /// Run to completion.
    pub fn run(&self, args: &[&str]) -> KubectlOutput {
        self.run_stdin(args, "")
    }

    /// Run to completion with `stdin` as its standard input (`-f -`).
    pub fn run_stdin(&self, args: &[&str], stdin: &str) -> KubectlOutput {
        use std::io::Write;
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let output = child.wait_with_output().unwrap();
        KubectlOutput {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Run; assert it succeeded; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.success(),
            "{} {args:?} failed ({:?}): {}",
            self.bin.display(),
            out.code,
            out.stderr
        );
        out.stdout
    }

    /// `kubectl ARGS -o json`, parsed.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        serde_json::from_str(&self.ok(&all)).unwrap()
    }

    /// `kubectl apply -f -` of `manifest` with `extra` flags.
    pub fn apply(&self, manifest: &str, extra: &[&str]) -> KubectlOutput {
        let mut args = vec!["apply", "-f", "-"];
        args.extend_from_slice(extra);
        self.run_stdin(&args, manifest)
    }

    /// Start it in the background, stdout and stderr appended to `out`.
    pub fn spawn(&self, args: &[&str], out: &Path) -> Child {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(out)
            .unwrap();
        self.command(args)
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap()
    }
}

// ---------------------------------------------------------------------------
// A ConfigMap volume as kubelet lays it out (tests/e2e/configmap_reload.rs):
// `..<timestamp>/<key>` holds the data, `..data` links to the newest
// timestamped dir, `<key>` links to `..data/<key>`. An update writes a new
// timestamped dir, renames a new `..data_tmp` link over `..data` (atomic),
// then deletes the old dir: the user-visible `<key>` link never changes.
// ---------------------------------------------------------------------------

/// A directory updated the way kubelet's AtomicWriter updates a ConfigMap volume.
pub struct ConfigMapVolume {
    dir: PathBuf,
    generation: u32,
}

impl ConfigMapVolume {
    /// `dir` is created if missing; nothing is published yet.
    pub fn new(dir: &Path) -> ConfigMapVolume {
        std::fs::create_dir_all(dir).unwrap();
        ConfigMapVolume {
            dir: dir.to_path_buf(),
            generation: 0,
        }
    }

    /// The user-visible path of `key` (what a pod is given: `/etc/tend/tend.toml`).
    pub fn path(&self, key: &str) -> PathBuf {
        self.dir.join(key)
    }

    /// The timestamped dir `..data` points at now, if any.
    pub fn data_dir(&self) -> Option<PathBuf> {
        std::fs::read_link(self.dir.join("..data"))
            .ok()
            .map(|target| self.dir.join(target))
    }

    /// Every `..<timestamp>` dir present (kubelet keeps exactly one).
    pub fn timestamped_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                name.starts_with("..") && name != "..data" && name != "..data_tmp" && p.is_dir()
            })
            .filter(|p| !p.is_symlink())
            .collect();
        dirs.sort();
        dirs
    }

    /// Publish `files` (key, content) in the order of kubelet's
    /// AtomicWriter.Write: a new timestamped dir holding them, user-visible
    /// links for new keys, `..data_tmp` -> the new dir renamed over `..data`,
    /// then the previous timestamped dir deleted.
    pub fn publish(&mut self, files: &[(&str, &str)]) {
        use std::os::unix::fs::symlink;
        self.generation += 1;
        let old = self.data_dir();
        // kubelet: os.MkdirTemp(dir, time.Now().UTC().Format("..2006_01_02_15_04_05.")).
        let stamp = humantime::format_rfc3339_nanos(std::time::SystemTime::now())
            .to_string()
            .replace(['-', 'T', ':'], "_")
            .replace('Z', "");
        let (seconds, nanos) = stamp.split_once('.').unwrap();
        let name = format!("..{seconds}.{nanos}{}", self.generation);
        let new = self.dir.join(&name);
        std::fs::create_dir(&new).unwrap();
        for (key, content) in files {
            std::fs::write(new.join(key), content).unwrap();
        }
        for (key, _) in files {
            let visible = self.dir.join(key);
            if std::fs::symlink_metadata(&visible).is_err() {
                symlink(Path::new("..data").join(key), &visible).unwrap();
            }
        }
        let tmp = self.dir.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        symlink(&name, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
        if let Some(old) = old {
            std::fs::remove_dir_all(old).unwrap();
        }
    }
}

impl Sandbox {
    /// Start `tend run -c CONFIG` for a config outside the sandbox's own
    /// tend.toml (a ConfigMap volume's `tend.toml` link), logging to tend.log.
    pub fn daemon_for(&self, config: &Path) -> Daemon {
        let log = self.path("tend.log");
        let _ = std::fs::remove_file(&log);
        let child = Command::new(tend_bin())
            .args(["run", "-c"])
            .arg(config)
            .env("TEND_LOG", "info")
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

// ---------------------------------------------------------------------------
// The kube capability end to end (tests/e2e/kube.rs): a config naming its
// node, and one value of a daemon's /metrics.
// ---------------------------------------------------------------------------

impl Sandbox {
    /// Write tend.toml as [`Sandbox::config_with_host`] does, but with `node`
    /// as `[host] node-name` (what `$NODE` in a kube grant stands for).
    pub fn config_on_node(&self, node: &str, host: &str, plugins: &str) -> &Self {
        let text = format!(
            "[host]\nplugins-dir = \"plugins\"\nstate-dir = \"state\"\ncache-dir = \"{}\"\nnode-name = \"{node}\"\n{host}\n{plugins}",
            workspace_root().join("target/e2e-cache").display()
        );
        let tmp = self.path(".tend.toml.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(tmp, self.path("tend.toml")).unwrap();
        self
    }
}

/// The value of metric `name` on a daemon's `/metrics` (summed over its label
/// sets); None when absent.
pub fn metric(port: u16, name: &str) -> Option<f64> {
    let (status, body) = http_get(port, "/metrics").ok()?;
    assert_eq!(status, 200, "/metrics: {body}");
    let values: Vec<f64> = body
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}
