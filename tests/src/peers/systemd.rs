//! A real systemd on a private bus (tests/peers/systemd.sh).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::{strip_ansi, wait_until, workspace_root};

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
        Self::start_at(tempfile::tempdir().unwrap())
    }

    /// [`SystemdPeer::start`] with the peer's directory (and so its units dir)
    /// under `parent`: for units with `PrivateTmp=yes`, which do not see /tmp.
    pub fn start_in(parent: &Path) -> SystemdPeer {
        std::fs::create_dir_all(parent).unwrap();
        Self::start_at(tempfile::tempdir_in(parent).unwrap())
    }

    fn start_at(dir: tempfile::TempDir) -> SystemdPeer {
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

    /// The peer's journal (journald with `Storage=volatile` in the manager's
    /// /run): what `journalctl --directory` and `[host.logs] journal-directory` take.
    pub fn journal_dir(&self) -> PathBuf {
        self.dir.path().join("run/log/journal")
    }

    /// Log `lines` into the peer's journal as `unit` (a oneshot unit of that
    /// name whose stdout is the journal: `_SYSTEMD_UNIT` is `unit`,
    /// `SYSLOG_IDENTIFIER` is `identifier`); a line starting `<N>` has
    /// priority N, others 6. Returns once the unit has run.
    pub fn journal_lines(&self, unit: &str, identifier: &str, lines: &[&str]) {
        let script: String = lines
            .iter()
            .map(|line| format!("printf '%s\\n' '{}'\n", line.replace('\'', "'\\''")))
            .collect();
        let script_path = self.dir.path().join(format!("{unit}.sh"));
        std::fs::write(&script_path, script).unwrap();
        std::fs::write(
            self.units_dir().join(unit),
            format!(
                "[Unit]\nDefaultDependencies=no\n[Service]\nType=oneshot\nRemainAfterExit=no\nStandardOutput=journal\nSyslogIdentifier={identifier}\nLogRateLimitIntervalSec=0\nExecStart=/bin/sh {}\n",
                script_path.display()
            ),
        )
        .unwrap();
        self.manager(&["Reload"]);
        // The start job ends when the oneshot's process has exited (the unit
        // itself, inactive again, may be unloaded at once).
        let job = self.manager(&["StartUnit", "ss", unit, "replace"]);
        let job = job
            .trim()
            .trim_start_matches("o ")
            .trim_matches('"')
            .to_string();
        wait_until(Duration::from_secs(30), &format!("{unit} ran"), || {
            !Command::new("busctl")
                .arg(format!("--address={}", self.address))
                .args(["get-property", "org.freedesktop.systemd1", &job])
                .args(["org.freedesktop.systemd1.Job", "State"])
                .stderr(Stdio::null())
                .output()
                .unwrap()
                .status
                .success()
        });
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
        super::stop_with_script("systemd.sh", self.dir.path());
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
        let name = self.cgroup.file_name().unwrap().to_string_lossy();
        let (exact, below) = (format!("0::/{name}"), format!("0::/{name}/"));
        crate::process::peer_processes(&self.dir, |cgroup| {
            cgroup.lines().any(|l| l == exact || l.starts_with(&below))
        })
    }

    /// Whether the peer's cgroup directory still exists.
    pub fn cgroup_exists(&self) -> bool {
        self.cgroup.exists()
    }
}
