//! `cargo xtask plugins | test | demo`: build orchestration for Tend. Each
//! command installs what is missing first (the wasm target, Debian packages
//! when run as root, a venv with componentize-py).

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// Rust plugins: (cargo package, output name).
const RUST_PLUGINS: &[(&str, &str)] = &[
    ("mirror-gate", "mirror-gate"),
    ("unit-doctor", "unit-doctor"),
    ("unit-applier", "unit-applier"),
    ("ipam-sweeper", "ipam-sweeper"),
    ("pull-guard", "pull-guard"),
    ("chaos", "chaos"),
];
const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";
/// Debian packages the tests and the demo need: (command, package).
const DEBIAN: &[(&str, &str)] = &[
    ("docker-registry", "docker-registry"),
    ("curl", "curl"),
    // promtool validates /metrics in the end-to-end tests.
    ("promtool", "prometheus"),
    // tests/peers/systemd.sh: a real systemd with a private system bus.
    ("systemd", "systemd"),
    ("busctl", "systemd"),
    ("dbus-daemon", "dbus"),
    ("unshare", "util-linux"),
    ("script", "bsdutils"),
    // The CRI client in tests/src/lib.rs: the k8s-cri build runs protoc.
    ("protoc", "protobuf-compiler"),
    // tests/peers/containerd.sh: a real containerd (CRI), a registry, a stalling
    // proxy, images built here (a static pause with gcc, a static busybox).
    ("containerd", "containerd"),
    ("ctr", "containerd"),
    ("runc", "runc"),
    ("skopeo", "skopeo"),
    ("gcc", "gcc"),
    ("busybox", "busybox-static"),
    ("python3", "python3"),
    // SynDrop in tests/src/lib.rs: a cache port that drops SYNs.
    ("iptables", "iptables"),
];
const QUICKSTART_REGISTRY_PORT: u16 = 5055;

fn main() -> ExitCode {
    let task = std::env::args().nth(1).unwrap_or_default();
    let result = match task.as_str() {
        "plugins" => plugins(),
        "test" => test(),
        "demo" => demo(),
        _ => {
            eprintln!(
                "usage: cargo xtask <plugins|test|demo>\n  plugins  build every plugin into target/plugins/\n  test     everything: unit and end-to-end tests\n  demo     run tend on examples/quickstart against a local registry"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask {task}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn step(what: &str) {
    eprintln!("\n==> {what}");
}

fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(root());
    cmd
}

fn has_command(name: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn ensure_wasm_target() -> Result<()> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()?;
    if !String::from_utf8_lossy(&installed.stdout)
        .lines()
        .any(|l| l == "wasm32-wasip2")
    {
        step("installing the wasm32-wasip2 target");
        run(Command::new("rustup").args(["target", "add", "wasm32-wasip2"]))?;
    }
    Ok(())
}

fn ensure_debian_packages() -> Result<()> {
    let missing: Vec<&str> = DEBIAN
        .iter()
        .filter(|(cmd, _)| !has_command(cmd))
        .map(|(_, pkg)| *pkg)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    if !is_root {
        bail!(
            "missing Debian packages: run `sudo apt-get install -y {}` and try again",
            missing.join(" ")
        );
    }
    step(&format!(
        "installing Debian packages: {}",
        missing.join(" ")
    ));
    run(Command::new("apt-get").args(["update", "-qq"]))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

/// componentize-py in a venv under target/, installed on first use.
fn componentize_py() -> Result<PathBuf> {
    let venv = root().join("target/venv");
    let bin = venv.join("bin/componentize-py");
    if !bin.exists() {
        step(&format!(
            "installing {COMPONENTIZE_PY} into {}",
            venv.display()
        ));
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
        run(Command::new(venv.join("bin/pip")).args(["install", "-q", COMPONENTIZE_PY]))?;
    }
    Ok(bin)
}

fn newest_mtime(paths: impl IntoIterator<Item = PathBuf>) -> std::time::SystemTime {
    paths
        .into_iter()
        .filter_map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .max()
        .unwrap_or(std::time::UNIX_EPOCH)
}

fn plugins() -> Result<()> {
    ensure_wasm_target()?;
    let out = root().join("target/plugins");
    std::fs::create_dir_all(&out)?;
    step("building Rust plugins for wasm32-wasip2");
    let mut build = cargo();
    build.args(["build", "--profile", "plugin", "--target", "wasm32-wasip2"]);
    for (package, _) in RUST_PLUGINS {
        build.args(["-p", package]);
    }
    run(&mut build)?;
    let built = |package: &str| {
        root()
            .join("target/wasm32-wasip2/plugin")
            .join(format!("{}.wasm", package.replace('-', "_")))
    };
    for (package, name) in RUST_PLUGINS {
        std::fs::copy(built(package), out.join(format!("{name}.wasm")))
            .with_context(|| format!("copy {package}"))?;
    }
    // A second version of chaos, for the hot-reload tests.
    run(cargo().args([
        "build",
        "--profile",
        "plugin",
        "--target",
        "wasm32-wasip2",
        "-p",
        "chaos",
        "--features",
        "v2",
    ]))?;
    std::fs::copy(built("chaos"), out.join("chaos-v2.wasm")).context("copy chaos v2")?;
    let wit: Vec<PathBuf> = std::fs::read_dir(root().join("wit"))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    for entry in std::fs::read_dir(root().join("examples/plugins"))? {
        let dir = entry?.path();
        if !dir.join("app.py").exists() {
            continue;
        }
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let target = out.join(format!("{name}.wasm"));
        let sources = wit.iter().cloned().chain([dir.join("app.py")]);
        if target.exists() && newest_mtime([target.clone()]) >= newest_mtime(sources) {
            continue;
        }
        let componentize = componentize_py()?;
        step(&format!(
            "building Python plugin {name} with componentize-py"
        ));
        run(Command::new(componentize)
            .current_dir(&dir)
            .arg("-d")
            .arg(root().join("wit"))
            .args(["-w", "plugin", "componentize", "app", "-o"])
            .arg(&target))?;
    }
    eprintln!("plugins in {}", out.display());
    Ok(())
}

fn build_tend() -> Result<PathBuf> {
    step("building tend");
    run(cargo().args(["build", "-p", "tend"]))?;
    Ok(root().join("target/debug/tend"))
}

fn test() -> Result<()> {
    ensure_debian_packages()?;
    plugins()?;
    let tend = build_tend()?;
    step("running every test (unit and end-to-end)");
    run(cargo()
        .args(["test", "--no-fail-fast"])
        .env("TEND_BIN", tend))
}

/// A local registry started with the project's peer script, stopped on drop.
struct DemoRegistry(PathBuf);

impl DemoRegistry {
    fn start(port: u16) -> Result<Self> {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            bail!(
                "127.0.0.1:{port} is in use; examples/quickstart/tend.toml expects the stand-in cache there: free the port and try again"
            );
        }
        let dir = root().join("target/demo/registry");
        let _ = std::fs::remove_dir_all(&dir);
        run(Command::new(root().join("tests/peers/registry.sh"))
            .arg("start")
            .arg(&dir)
            .arg(port.to_string()))?;
        Ok(DemoRegistry(dir))
    }
}

impl Drop for DemoRegistry {
    fn drop(&mut self) {
        let _ = Command::new(root().join("tests/peers/registry.sh"))
            .arg("stop")
            .arg(&self.0)
            .status();
    }
}

/// The demo's systemd (tests/peers/systemd.sh), stopped on drop.
struct DemoSystemd(PathBuf);

impl DemoSystemd {
    fn start(dir: &Path) -> Result<Self> {
        let output = Command::new(root().join("tests/peers/systemd.sh"))
            .arg("start")
            .arg(dir)
            .output()?;
        if !output.status.success() {
            bail!(
                "the demo's systemd did not start: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(DemoSystemd(dir.to_path_buf()))
    }

    /// `busctl` on the demo's bus.
    fn busctl(&self, args: &[&str]) -> Result<String> {
        let address = format!(
            "unix:path={}",
            self.0.join("run/dbus/system_bus_socket").display()
        );
        let output = Command::new("busctl")
            .arg(format!("--address={address}"))
            .args(args)
            .output()?;
        if !output.status.success() {
            bail!(
                "busctl {args:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
    }
}

impl Drop for DemoSystemd {
    fn drop(&mut self) {
        let _ = Command::new(root().join("tests/peers/systemd.sh"))
            .arg("stop")
            .arg(&self.0)
            .status();
    }
}

/// Wait for `done` (at most `within`), giving up early when tend exits.
fn wait_for(
    daemon: &mut std::process::Child,
    within: Duration,
    done: impl Fn() -> bool,
) -> Result<bool> {
    let deadline = Instant::now() + within;
    while !done() {
        if Instant::now() > deadline || daemon.try_wait()?.is_some() {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(true)
}

fn demo() -> Result<()> {
    ensure_debian_packages()?;
    plugins()?;
    let tend = build_tend()?;
    let config = root().join("examples/quickstart/tend.toml");
    let work = Path::new("/tmp/tend-quickstart");
    // A systemd left running by an interrupted demo goes first.
    drop(DemoSystemd(work.join("systemd")));
    let _ = std::fs::remove_dir_all(work);
    std::fs::create_dir_all(work.join("certs.d/quay.io"))?;
    std::fs::write(
        work.join("certs.d/quay.io/hosts.toml"),
        "# the operator's own file: mirror-gate leaves it alone\nserver = \"https://quay.io\"\n",
    )?;

    step(&format!(
        "starting a real OCI registry on 127.0.0.1:{QUICKSTART_REGISTRY_PORT} as a stand-in registry cache"
    ));
    let registry = DemoRegistry::start(QUICKSTART_REGISTRY_PORT)?;
    step("starting a real systemd in private namespaces, on its own bus (not this machine's)");
    let systemd = DemoSystemd::start(&work.join("systemd"))?;

    step("tend check: the config is valid and every plugin compiles");
    run(Command::new(&tend).args(["check", "-c"]).arg(&config))?;
    step("tend plan: what tend would change (a dry run: nothing is written)");
    run(Command::new(&tend).args(["plan", "-c"]).arg(&config))?;

    step("tend run: the daemon, until docker.io's mirror and demo-web.service are in place");
    let log_path = root().join("target/demo/tend.log");
    let mut daemon = Command::new(&tend)
        .args(["run", "-c"])
        .arg(&config)
        .stderr(std::fs::File::create(&log_path)?)
        .spawn()?;
    let hosts = work.join("certs.d/docker.io/hosts.toml");
    let starts_file = work.join("demo-web.starts");
    let starts = || std::fs::read_to_string(&starts_file).map_or(0, |t| t.lines().count());
    let active = || {
        systemd
            .busctl(&[
                "call",
                "org.freedesktop.systemd1",
                "/org/freedesktop/systemd1/unit/demo_2dweb_2eservice",
                "org.freedesktop.DBus.Properties",
                "Get",
                "ss",
                "org.freedesktop.systemd1.Unit",
                "ActiveState",
            ])
            .is_ok_and(|s| s.contains("\"active\""))
    };
    let applied = wait_for(&mut daemon, Duration::from_secs(120), || {
        hosts.exists() && active()
    })?;
    let mut doctored = false;
    if applied {
        step("killing demo-web.service: unit-doctor hears it fail and restarts it");
        systemd.busctl(&[
            "call",
            "org.freedesktop.systemd1",
            "/org/freedesktop/systemd1",
            "org.freedesktop.systemd1.Manager",
            "KillUnit",
            "ssi",
            "demo-web.service",
            "all",
            "9",
        ])?;
        doctored = wait_for(&mut daemon, Duration::from_secs(30), || {
            starts() >= 2 && active()
        })?;
    }
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    run(Command::new("kill").args(["-TERM", &daemon.id().to_string()]))?;
    let status = daemon.wait()?;
    drop(registry);
    drop(systemd);

    step("what happened");
    eprintln!("tend log ({}):\n{log}", log_path.display());
    let Ok(text) = std::fs::read_to_string(&hosts) else {
        bail!("{} was not written; see the log above", hosts.display());
    };
    eprintln!(
        "{} (written because 127.0.0.1:{QUICKSTART_REGISTRY_PORT}/v2/ answered 200):\n{text}",
        hosts.display()
    );
    eprintln!(
        "ghcr.io: {}",
        if work.join("certs.d/ghcr.io").exists() {
            "written (unexpected!)"
        } else {
            "no hosts.toml: its cache (127.0.0.1:5056) does not answer, so containerd keeps pulling directly"
        }
    );
    eprintln!(
        "quay.io: the operator's own hosts.toml is untouched: {}",
        std::fs::read_to_string(work.join("certs.d/quay.io/hosts.toml"))?
            .lines()
            .last()
            .unwrap_or("")
    );
    eprintln!(
        "unit-applier: wrote {} and demo-web.service, reloaded systemd and started it: {}",
        work.join("etc/demo.conf").display(),
        if applied {
            "active"
        } else {
            "NOT active (see the log)"
        }
    );
    eprintln!(
        "unit-doctor: demo-web.service was killed and restarted at once (starts: {}): {}",
        starts(),
        if doctored {
            "ok"
        } else {
            "NOT restarted (see the log)"
        }
    );
    if !applied || !doctored {
        bail!("the systemd part of the demo did not complete; see the log above");
    }
    eprintln!(
        "tend stopped on SIGTERM with {status}. Files are under {}; the config is {}",
        work.display(),
        config.display()
    );
    Ok(())
}
