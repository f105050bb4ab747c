//! The shipped systemd unit (examples/deploy/tend.service), sandboxing and
//! all, run by a real systemd (tests/peers/systemd.sh): `tend` reaches active
//! (Type=notify), the built-in plugins do their job through the paths the
//! unit makes writable, and a write anywhere else is refused by the sandbox.
//!
//! The test unit is the shipped file with its paths substituted (the binary,
//! the config, the state directory's name, the ReadWritePaths), nothing else:
//! every directive under test is the shipped one. PrivateTmp=yes hides /tmp
//! from tend, so everything it reads or writes lives under target/.

use std::path::{Path, PathBuf};
use std::time::Duration;
use tend_e2e::{
    Registry, SystemdPeer, free_port, plugin_status, tend_bin, wait_until, workspace_root,
};

const WITHIN: Duration = Duration::from_secs(60);
const UNIT: &str = "tend.service";
const WEB: &str = "tend-e2e-web.service";

/// Replace `from` (which must occur exactly once) by `to`.
fn substitute(unit: &str, from: &str, to: &str) -> String {
    assert_eq!(
        unit.matches(from).count(),
        1,
        "examples/deploy/tend.service should hold {from:?} once: the test's substitutions need updating"
    );
    unit.replacen(from, to, 1)
}

/// The state directory systemd creates for the unit (/var/lib/NAME), removed on drop.
struct StateDirectory(PathBuf);

impl Drop for StateDirectory {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Host PIDs of the unit's processes (its cgroup in the peer's hierarchy).
fn unit_pids(peer: &SystemdPeer, unit: &str) -> Vec<u32> {
    let cgroup = std::fs::read_to_string(peer.dir().join("cgroup")).unwrap();
    let procs = Path::new(cgroup.trim()).join(format!("system.slice/{unit}/cgroup.procs"));
    std::fs::read_to_string(procs)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect()
}

/// A field of /proc/PID/status ("CapEff", "NoNewPrivs", "Seccomp").
fn proc_status(pid: u32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
        .trim()
        .to_string()
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

#[test]
fn the_sandboxed_unit_runs_the_demo_plugins_and_refuses_writes_elsewhere() {
    // Not under the checkout: the unit's PrivateTmp= and ProtectHome= hide
    // /tmp, /var/tmp and /home, where a CI clone may live. The binary and the
    // plugins are copied here for the same reason.
    let scratch = Path::new("/var/lib/tend-e2e-unit");
    std::fs::create_dir_all(scratch).unwrap();
    let scratch = scratch.canonicalize().unwrap();
    let peer = SystemdPeer::start_in(&scratch);
    let work = tempfile::tempdir_in(&scratch).unwrap();
    let work = work.path();
    let registry = Registry::start();
    let port = free_port();
    let state_name = format!(
        "tend-e2e-{}",
        work.file_name()
            .unwrap()
            .to_string_lossy()
            .trim_start_matches('.')
    );
    let state = StateDirectory(Path::new("/var/lib").join(&state_name));
    let units = peer.units_dir().canonicalize().unwrap();
    let (certs, outside) = (
        work.join("etc/containerd/certs.d"),
        work.join("outside/certs.d"),
    );
    for dir in [&certs, &outside, &work.join("var/lib/cni/networks")] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let starts = work.join("web.starts");
    let tend = work.join("tend");
    std::fs::copy(tend_bin(), &tend).unwrap();
    let plugins = work.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    for name in ["mirror-gate", "unit-applier", "unit-doctor"] {
        let file = format!("{name}.wasm");
        std::fs::copy(
            workspace_root().join("target/plugins").join(&file),
            plugins.join(&file),
        )
        .unwrap();
    }

    // The shipped unit, its paths pointed at this test's directories.
    let shipped =
        std::fs::read_to_string(workspace_root().join("examples/deploy/tend.service")).unwrap();
    let config = work.join("tend.toml");
    let mut unit = substitute(
        &shipped,
        "/usr/local/bin/tend ",
        &format!("{} ", tend.display()),
    );
    unit = substitute(&unit, "/etc/tend/tend.toml", &config.display().to_string());
    unit = substitute(
        &unit,
        "StateDirectory=tend\n",
        &format!("StateDirectory={state_name}\n"),
    );
    unit = substitute(
        &unit,
        "ReadWritePaths=-/etc/systemd/system -/etc/containerd -/var/lib/cni/networks\n",
        &format!(
            "ReadWritePaths=-{} -{} -{}\n",
            units.display(),
            work.join("etc/containerd").display(),
            work.join("var/lib/cni/networks").display()
        ),
    );
    std::fs::write(units.join(UNIT), unit).unwrap();

    let mirror = |name: &str, certs: &Path| {
        format!(
            "[plugins.{name}]\nfile = \"{plugins}/mirror-gate.wasm\"\ninterval = \"1h\"\n[plugins.{name}.grants]\nfiles = [{{ path = \"{certs}\", write = true }}]\nhttp = [\"{endpoint}/v2/\"]\n[plugins.{name}.config]\ncerts-dir = \"{certs}\"\n[[plugins.{name}.config.caches]]\nupstream = \"docker.io\"\nendpoint = \"{endpoint}\"\n",
            plugins = plugins.display(),
            certs = certs.display(),
            endpoint = registry.endpoint(),
        )
    };
    let web_unit = format!(
        "[Unit]\nDescription=tend e2e web\n[Service]\nExecStartPre=/bin/sh -c 'echo started >> {}'\nExecStart=/bin/sleep infinity\n[Install]\nWantedBy=peer.target\n",
        starts.display()
    );
    let text = format!(
        r#"[host]
plugins-dir = "{plugins}"
state-dir = "/var/lib/{state_name}"
node-name = "e2e-node"
listen = "127.0.0.1:{port}"
[host.systemd]
bus = "unix:path=/run/dbus/system_bus_socket"

{mirror_gate}
{mirror_outside}
[plugins.unit-applier]
interval = "1h"
[plugins.unit-applier.grants]
files = [{{ path = "{units}", write = true }}]
systemd = {{ units = ["tend-e2e-*.service"], operations = ["start", "stop", "restart", "enable", "disable", "daemon-reload"] }}
[plugins.unit-applier.config]
unit-dir = "{units}"
[[plugins.unit-applier.config.units]]
name = "{WEB}"
content = {web}

[plugins.unit-doctor]
interval = "1h"
[plugins.unit-doctor.grants]
systemd = {{ units = ["tend-e2e-*.service"], operations = ["restart"], watch = true }}
[plugins.unit-doctor.config]
[[plugins.unit-doctor.config.checks]]
unit = "{WEB}"
probe = "active"
# A unit systemd is starting is in transition, not failing; once
# unit-applier's start is done, one that failed is restarted within 500 ms.
fail-after-ms = 500
backoff-ms = 1000
"#,
        plugins = plugins.display(),
        mirror_gate = mirror("mirror-gate", &certs),
        mirror_outside = mirror("mirror-gate-outside", &outside),
        units = units.display(),
        web = serde_json::to_string(&web_unit).unwrap(),
    );
    std::fs::write(&config, text).unwrap();

    peer.manager(&["Reload"]);
    peer.manager(&["StartUnit", "ss", UNIT, "replace"]);
    // Type=notify: active once every plugin has loaded.
    peer.wait_for_unit(UNIT, "ActiveState", "active", WITHIN);

    // The sandbox is in force: no capabilities, no new privileges, seccomp on.
    let pids = unit_pids(&peer, UNIT);
    assert_eq!(pids.len(), 1, "tend's processes: {pids:?}");
    assert_eq!(proc_status(pids[0], "CapEff"), "0000000000000000");
    assert_eq!(proc_status(pids[0], "CapBnd"), "0000000000000000");
    assert_eq!(proc_status(pids[0], "NoNewPrivs"), "1");
    assert_eq!(proc_status(pids[0], "Seccomp"), "2");
    // ProtectSystem=strict: tend's root is read-only. PrivateTmp=yes: its /tmp
    // is not the host's.
    let mountinfo = std::fs::read_to_string(format!("/proc/{}/mountinfo", pids[0])).unwrap();
    let root = mountinfo
        .lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .rfind(|f| f[4] == "/")
        .unwrap();
    assert!(root[5].split(',').any(|o| o == "ro"), "{root:?}");
    let marker = tempfile::NamedTempFile::new().unwrap();
    let seen_from_tend = Path::new(&format!("/proc/{}/root", pids[0]))
        .join(marker.path().strip_prefix("/").unwrap());
    assert!(marker.path().exists() && !seen_from_tend.exists());
    // StateDirectory=: systemd made tend's state directory, 0700.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&state.0).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);

    // mirror-gate writes hosts.toml under a ReadWritePaths directory.
    let hosts = certs.join("docker.io/hosts.toml");
    wait_until(WITHIN, "mirror-gate's hosts.toml", || hosts.exists());
    assert!(
        std::fs::read_to_string(&hosts)
            .unwrap()
            .contains(&registry.endpoint())
    );
    // unit-applier writes the unit file, reloads systemd and starts it.
    peer.wait_for_unit(WEB, "ActiveState", "active", WITHIN);
    assert!(units.join(WEB).exists());
    assert_eq!(lines(&starts), 1);
    // unit-doctor hears it fail and restarts it.
    peer.manager(&["KillUnit", "ssi", WEB, "all", "9"]);
    wait_until(WITHIN, "unit-doctor's restart", || {
        lines(&starts) >= 2 && peer.unit_property(WEB, "ActiveState") == "active"
    });

    // The same plugin granted a directory the unit leaves read-only: the kernel
    // refuses the write, and tend says so in its status and its log.
    let mut last = serde_json::Value::Null;
    wait_until(WITHIN, "the refused write in /status", || {
        last = plugin_status(port, "mirror-gate-outside");
        last.to_string().contains("Read-only file system")
    });
    assert!(!outside.join("docker.io").exists(), "{last:#}");
    assert!(
        peer.console().contains("Read-only file system"),
        "the refusal is not in tend's log:\n{}",
        peer.console()
    );

    // A clean stop: SIGTERM, the reconciles in flight finish, the unit is
    // inactive (not failed).
    peer.manager(&["StopUnit", "ss", UNIT, "replace"]);
    peer.wait_for_unit(UNIT, "ActiveState", "inactive", WITHIN);
}
