//! Tend's image (`cargo xtask image`, target/image/tend.oci.tar) in a real
//! containerd (tests/peers/containerd.sh): imported with `ctr images import`,
//! run as containers with `ctr run` (runc), not as host processes: its
//! commands, and `tend run` itself as the node's daemon.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::Duration;
use tend_e2e::{
    ContainerdPeer, built_in_plugins, digest_of, free_port, http_get, plugin, wait_for_plugin,
    wait_until, workspace_root,
};

/// containerd's namespace for the image (not the CRI's k8s.io).
const NAMESPACE: &str = "tend-image";
/// The node plugins the node config enables (the cluster ones need a cloud).
const NODE_PLUGINS: [&str; 5] = [
    "mirror-gate",
    "unit-applier",
    "unit-doctor",
    "ipam-sweeper",
    "pull-guard",
];
const WITHIN: Duration = Duration::from_secs(120);

/// The archive `cargo xtask image` wrote; a clear failure when it is missing.
fn archive() -> PathBuf {
    let path = workspace_root().join("target/image/tend.oci.tar");
    assert!(
        path.exists(),
        "{} is missing: run `cargo xtask test-image` (`cargo xtask test` builds it before the tests)",
        path.display()
    );
    path
}

/// One file of the archive (`tar -xOf`).
fn archive_file(archive: &Path, name: &str) -> Vec<u8> {
    let output = Command::new("tar")
        .arg("-xOf")
        .arg(archive)
        .arg(name)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "no {name} in {}",
        archive.display()
    );
    output.stdout
}

fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap()
}

fn blob(archive: &Path, digest: &str) -> Vec<u8> {
    archive_file(
        archive,
        &format!("blobs/sha256/{}", digest.strip_prefix("sha256:").unwrap()),
    )
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `ctr run --rm` of the image as container `id`, with `/etc/tend` a read-only
/// bind of `etc_tend`; `args` replace the image's entrypoint and command.
fn run(peer: &ContainerdPeer, image: &str, id: &str, etc_tend: &Path, args: &[&str]) -> Output {
    let cgroup = peer.cgroup_for(id);
    let mount = format!(
        "type=bind,src={},dst=/etc/tend,options=rbind:ro",
        etc_tend.display()
    );
    let mut ctr = vec![
        "-n", NAMESPACE, "run", "--rm", "--cgroup", &cgroup, "--mount", &mount, image, id,
    ];
    ctr.extend_from_slice(args);
    peer.ctr(WITHIN, &ctr)
}

/// The archive's image: (manifest digest, name).
fn image_of(archive: &Path) -> (String, String) {
    let index = json(&archive_file(archive, "index.json"));
    let descriptor = &index["manifests"][0];
    (
        descriptor["digest"].as_str().unwrap().to_string(),
        descriptor["annotations"]["io.containerd.image.name"]
            .as_str()
            .unwrap()
            .to_string(),
    )
}

/// `ctr images import` of the archive into `peer`; containerd lists the image
/// `name` with the archive's `digest`.
fn import(peer: &ContainerdPeer, archive: &Path, (digest, name): (&str, &str)) {
    let imported = peer.ctr(
        WITHIN,
        &[
            "-n",
            NAMESPACE,
            "images",
            "import",
            archive.to_str().unwrap(),
        ],
    );
    assert!(imported.status.success(), "import: {}", text(&imported));
    let listed = peer.ctr(WITHIN, &["-n", NAMESPACE, "images", "ls"]);
    let line = text(&listed)
        .lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("{name} not listed after the import:\n{}", text(&listed)))
        .to_string();
    assert!(
        line.contains(digest),
        "containerd lists {name} with another digest than the archive's {digest}: {line}"
    );
}

/// No container left in the namespace (`--rm` removed each).
fn no_containers_left(peer: &ContainerdPeer) {
    let containers = peer.ctr(WITHIN, &["-n", NAMESPACE, "containers", "ls", "-q"]);
    assert_eq!(text(&containers).trim(), "");
}

#[test]
fn the_image_runs_tend_and_checks_the_node_config_in_containerd() {
    let archive = archive();
    let (digest, name) = image_of(&archive);

    // What the image holds: tend on PATH as the entrypoint, the built-in
    // plugins (the very files `cargo xtask plugins` built), a build of each
    // made ahead of time, and no test plugin.
    let manifest = json(&blob(&archive, &digest));
    let config = json(&blob(
        &archive,
        manifest["config"]["digest"].as_str().unwrap(),
    ));
    assert_eq!(config["config"]["Entrypoint"], serde_json::json!(["tend"]));
    let labels = &config["config"]["Labels"];
    assert_eq!(labels["org.opencontainers.image.title"], "tend");
    assert_eq!(
        labels["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION")
    );
    let mut paths = Vec::new();
    for layer in manifest["layers"].as_array().unwrap() {
        let tgz = blob(&archive, layer["digest"].as_str().unwrap());
        let mut list = Command::new("tar")
            .arg("-tz")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = list.stdin.take().unwrap();
        let writer = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, &tgz));
        let listed = list.wait_with_output().unwrap();
        writer.join().unwrap().unwrap();
        paths.extend(
            String::from_utf8_lossy(&listed.stdout)
                .lines()
                .map(str::to_string),
        );
    }
    let mut plugins: Vec<String> = paths
        .iter()
        .filter_map(|l| {
            l.strip_prefix("usr/lib/tend/plugins/")?
                .strip_suffix(".wasm")
                .map(str::to_string)
        })
        .collect();
    // The node agent only: the author's tool stays out of the image.
    assert!(
        paths.iter().any(|p| p == "usr/local/bin/tend")
            && !paths.iter().any(|p| p.contains("tend-author")),
        "{paths:?}"
    );
    plugins.sort();
    assert_eq!(plugins, built_in_plugins(), "the image's plugins");
    for name in built_in_plugins() {
        let hex = digest_of(&plugin(&name))["sha256:".len()..].to_string();
        for file in [format!("{hex}.cwasm"), format!("{hex}.xxh3")] {
            let path = format!("usr/lib/tend/precompiled/{file}");
            assert!(paths.contains(&path), "no {path} for {name}: {paths:?}");
        }
    }

    let peer = ContainerdPeer::start();
    import(&peer, &archive, (&digest, &name));

    let etc = tempfile::tempdir().unwrap();
    let version = run(
        &peer,
        &name,
        "tend-version",
        etc.path(),
        &["tend", "--version"],
    );
    assert!(
        version.status.success(),
        "tend --version: {}",
        text(&version)
    );
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("tend {}", env!("CARGO_PKG_VERSION"))
    );
    // The image's tend has no author commands: it names tend-author instead.
    let new = run(
        &peer,
        &name,
        "tend-new",
        etc.path(),
        &[
            "tend",
            "new",
            "probe",
            "--lang",
            "rust",
            "--dir",
            "/tmp/probe",
        ],
    );
    assert!(
        !new.status.success() && text(&new).contains("`tend new` is in tend-author"),
        "tend new in the image: {}",
        text(&new)
    );

    // A node config naming the node plugins where the image has them
    // (plugins-dir /usr/lib/tend/plugins), as a DaemonSet mounts it.
    std::fs::write(etc.path().join("tend.toml"), node_config()).unwrap();
    let check = run(
        &peer,
        &name,
        "tend-check",
        etc.path(),
        &["tend", "check", "-c", "/etc/tend/tend.toml"],
    );
    let out = text(&check);
    assert!(check.status.success(), "tend check in the image: {out}");
    // Each loaded from the image's build made ahead of time, none compiled.
    for plugin_name in NODE_PLUGINS {
        let expected = format!("ok: {plugin_name} ({}, ", digest_of(&plugin(plugin_name)));
        let line = out.lines().find(|l| l.starts_with(&expected));
        assert!(
            line.is_some_and(|l| l.ends_with(", precompiled)")),
            "no {expected:?}... precompiled) in: {out}"
        );
    }
    assert!(out.contains("5 plugin(s) enabled"), "{out}");
    // The shipped config grants no capability a plugin cannot use.
    assert!(!out.contains("hint:"), "{out}");
    no_containers_left(&peer);
}

/// `tend run` from the image as a DaemonSet runs it: the node config at
/// /etc/tend, the state dir and /etc/containerd mounted from the host, the
/// built-in plugins from the image, the host's network. mirror-gate points
/// containerd at the peer's registry: a reconcile that needs the network and
/// a mounted host path.
#[test]
fn the_image_runs_tend_as_the_daemon_and_it_reconciles() {
    let archive = archive();
    let (digest, name) = image_of(&archive);
    let peer = ContainerdPeer::start();
    import(&peer, &archive, (&digest, &name));
    let port = free_port();
    let endpoint = peer.registry_endpoint();
    let host = HostDirs::new(&daemon_config(port, &endpoint));
    let mut daemon = DaemonTask::start(&peer, &name, &host);

    wait_until(Duration::from_secs(60), "/readyz to answer 200", || {
        daemon.assert_running();
        matches!(http_get(port, "/readyz"), Ok((200, _)))
    });
    let mirror_gate = wait_for_plugin(port, "mirror-gate", "a healthy reconcile", |p| {
        p["last"]["health"] == "healthy"
    });
    let hosts = host.containerd.path().join("certs.d/docker.io/hosts.toml");
    let hosts = std::fs::read_to_string(hosts)
        .unwrap_or_else(|e| panic!("no hosts.toml ({e}): {mirror_gate:#}\n{}", daemon.output()));
    assert!(hosts.contains(&endpoint), "{hosts}");
    // A first start that compiled nothing: the image's build was loaded.
    let (_, metrics) = http_get(port, "/metrics").unwrap();
    assert!(
        metrics.contains("tend_compile_cache_total{result=\"precompiled\"} 1"),
        "{metrics}"
    );
    let compiled = tend_e2e::compiled_builds(&host.state.path().join("cache"));
    assert_eq!(compiled, 0, "nothing compiled on the node");

    // Stopped as the kubelet stops it: SIGTERM to the task, then a clean exit.
    let exit = daemon.stop("SIGTERM");
    assert!(
        exit.success(),
        "tend run exited with {exit}: {}",
        daemon.output()
    );
    no_containers_left(&peer);
}

/// The host paths a node's tend gets: /etc/tend (the node config, read-only),
/// /var/lib/tend and /etc/containerd.
struct HostDirs {
    etc: tempfile::TempDir,
    state: tempfile::TempDir,
    containerd: tempfile::TempDir,
}

impl HostDirs {
    fn new(config: &str) -> HostDirs {
        let dirs = HostDirs {
            etc: tempfile::tempdir().unwrap(),
            state: tempfile::tempdir().unwrap(),
            containerd: tempfile::tempdir().unwrap(),
        };
        std::fs::write(dirs.etc.path().join("tend.toml"), config).unwrap();
        dirs
    }

    /// `ctr run --mount` of each.
    fn mounts(&self) -> [String; 3] {
        [
            (&self.etc, "/etc/tend", "ro"),
            (&self.state, "/var/lib/tend", "rw"),
            (&self.containerd, "/etc/containerd", "rw"),
        ]
        .map(|(src, dst, mode)| {
            format!(
                "type=bind,src={},dst={dst},options=rbind:{mode}",
                src.path().display()
            )
        })
    }
}

/// `ctr run --rm --net-host` of `tend run -c /etc/tend/tend.toml` (the
/// foreground `ctr run` exits with the task's status); killed on drop if
/// still running, so a failed test leaves nothing to the peer's stop.
struct DaemonTask<'a> {
    peer: &'a ContainerdPeer,
    ctr_run: Child,
    log: tempfile::TempDir,
}

impl<'a> DaemonTask<'a> {
    const ID: &'static str = "tend-daemon";

    fn start(peer: &'a ContainerdPeer, image: &str, host: &HostDirs) -> DaemonTask<'a> {
        let cgroup = peer.cgroup_for(Self::ID);
        let mounts = host.mounts();
        let mut args = vec![
            "-n",
            NAMESPACE,
            "run",
            "--rm",
            "--net-host",
            "--cgroup",
            &cgroup,
        ];
        for mount in &mounts {
            args.extend(["--mount", mount]);
        }
        args.extend([image, Self::ID, "tend", "run", "-c", "/etc/tend/tend.toml"]);
        let log = tempfile::tempdir().unwrap();
        let ctr_run = peer
            .ctr_command(&args)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(log.path().join("out")).unwrap())
            .stderr(std::fs::File::create(log.path().join("err")).unwrap())
            .spawn()
            .unwrap();
        DaemonTask { peer, ctr_run, log }
    }

    /// What tend and ctr printed so far.
    fn output(&self) -> String {
        let read = |name| std::fs::read_to_string(self.log.path().join(name)).unwrap_or_default();
        read("out") + &read("err")
    }

    fn assert_running(&mut self) {
        let exited = self.ctr_run.try_wait().unwrap();
        assert!(
            exited.is_none(),
            "tend run exited ({exited:?}): {}",
            self.output()
        );
    }

    /// `ctr tasks kill --signal SIGNAL`, then the exit status of `ctr run`.
    fn stop(&mut self, signal: &str) -> ExitStatus {
        let killed = self.peer.ctr(
            WITHIN,
            &[
                "-n",
                NAMESPACE,
                "tasks",
                "kill",
                "--signal",
                signal,
                Self::ID,
            ],
        );
        assert!(killed.status.success(), "ctr tasks kill: {}", text(&killed));
        let mut exit = None;
        wait_until(Duration::from_secs(30), "tend run to exit", || {
            exit = self.ctr_run.try_wait().unwrap();
            exit.is_some()
        });
        exit.unwrap()
    }
}

impl Drop for DaemonTask<'_> {
    fn drop(&mut self) {
        if let Ok(None) = self.ctr_run.try_wait() {
            self.peer.ctr(
                WITHIN,
                &[
                    "-n",
                    NAMESPACE,
                    "tasks",
                    "kill",
                    "--signal",
                    "SIGKILL",
                    Self::ID,
                ],
            );
            let _ = self.ctr_run.wait();
        }
    }
}

/// A node config with mirror-gate alone, caching docker.io at `endpoint`,
/// served on 127.0.0.1:`port`.
fn daemon_config(port: u16, endpoint: &str) -> String {
    format!(
        r#"[host]
plugins-dir = "/usr/lib/tend/plugins"
precompiled-dir = "/usr/lib/tend/precompiled"
state-dir = "/var/lib/tend"
node-name = "image-test-node"
listen = "127.0.0.1:{port}"

[plugins.mirror-gate]
[plugins.mirror-gate.grants]
files = [{{ path = "/etc/containerd/certs.d", write = true }}]
http = ["{endpoint}/v2/"]
[plugins.mirror-gate.config]
certs-dir = "/etc/containerd/certs.d"
[[plugins.mirror-gate.config.caches]]
upstream = "docker.io"
endpoint = "{endpoint}"
"#
    )
}

/// The node config the image is checked with: the built-in node plugins at the
/// image's paths, their grants as on a node.
fn node_config() -> &'static str {
    r#"[host]
plugins-dir = "/usr/lib/tend/plugins"
precompiled-dir = "/usr/lib/tend/precompiled"
state-dir = "/var/lib/tend"
node-name = "image-test-node"

[host.systemd]
bus = "unix:path=/run/dbus/system_bus_socket"
[host.cri]
endpoint = "unix:///run/containerd/containerd.sock"

[plugins.mirror-gate]
[plugins.mirror-gate.grants]
files = [{ path = "/etc/containerd/certs.d", write = true }]
http = ["http://10.0.0.5:5000/v2/"]
[plugins.mirror-gate.config]
certs-dir = "/etc/containerd/certs.d"
[[plugins.mirror-gate.config.caches]]
upstream = "docker.io"
endpoint = "http://10.0.0.5:5000"

[plugins.unit-applier]
[plugins.unit-applier.grants]
files = [{ path = "/etc/systemd/system", write = true }]
systemd = { units = ["tend-*.service"], operations = ["start", "stop", "restart", "enable", "disable", "daemon-reload"] }
[plugins.unit-applier.config]
unit-dir = "/etc/systemd/system"

[plugins.unit-doctor]
[plugins.unit-doctor.grants]
systemd = { units = ["kubelet.service"], operations = ["restart"], watch = true }
[plugins.unit-doctor.config]
[[plugins.unit-doctor.config.checks]]
unit = "kubelet.service"
probe = "active"

[plugins.ipam-sweeper]
[plugins.ipam-sweeper.grants]
files = [{ path = "/var/lib/cni/networks", write = true }]
cri = { read = true }
[plugins.ipam-sweeper.config]
networks-dir = "/var/lib/cni/networks"

[plugins.pull-guard]
[plugins.pull-guard.limits]
timeout = "10m"
[plugins.pull-guard.grants]
files = [{ path = "/etc/containerd", write = true }]
systemd = { units = ["containerd.service"], operations = ["restart"] }
cri = { read = true, operations = ["pull-image"], images = ["registry.k8s.io/pause:*"] }
[plugins.pull-guard.config]
progress-timeout = "5m"
images = ["registry.k8s.io/pause:3.10"]
pull-timeout = "8m"
runtime-config = { path = "/etc/containerd/config.toml", unit = "containerd.service", version = "auto" }
"#
}
