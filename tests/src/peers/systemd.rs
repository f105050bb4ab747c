//! A real systemd on a private bus (tests/peers/systemd.sh).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
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
        self.try_busctl(args)
            .unwrap_or_else(|error| panic!("busctl {args:?} failed: {error}"))
    }

    /// [`SystemdPeer::busctl`] that returns busctl's error instead of panicking.
    fn try_busctl(&self, args: &[&str]) -> Result<String, String> {
        let output = Command::new("busctl")
            .arg(format!("--address={}", self.address))
            .args(args)
            .output()
            .unwrap();
        if output.status.success() {
            Ok(String::from_utf8(output.stdout).unwrap())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    }

    /// Write `unit` into the units dir, a long-running service that counts
    /// its starts in `count` (a line each, see [`starts`]), and reload.
    pub fn counting_unit(&self, unit: &str, count: &Path) {
        std::fs::write(
            self.units_dir().join(unit),
            format!(
                "[Service]\nExecStartPre=/bin/sh -c 'echo started >> {}'\nExecStart=/bin/sleep 1000\n",
                count.display()
            ),
        )
        .unwrap();
        self.manager(&["Reload"]);
    }

    /// Make the peer rebootable, as a machine is: `reboot.target` stands for
    /// the real one (its start reboots the peer's systemd: PID 1 of its pid
    /// namespace calls reboot(2), so the namespace and everything in it ends,
    /// as a machine's processes do; [`SystemdPeer::wait_rebooted`] sees it),
    /// each reboot counted in `reboots` (a line each, see [`starts`]); and
    /// every boot writes a new identity into `boot_id` (the kernel's boot ID
    /// cannot change in a test: this file is its stand-in). Written for this
    /// boot too. Returns the boot identity's path.
    pub fn rebootable(&self) -> PathBuf {
        let (units, dir) = (self.units_dir(), self.dir.path());
        let unit = |name: &str, text: String| std::fs::write(units.join(name), text).unwrap();
        unit(
            "reboot.target",
            "[Unit]\nDescription=Reboot (the test peer's stand-in)\nDefaultDependencies=no\nRequires=tend-reboot.service\nAfter=tend-reboot.service\n".into(),
        );
        unit(
            "tend-reboot.service",
            format!(
                "[Unit]\nDefaultDependencies=no\nSuccessAction=reboot-force\n[Service]\nType=oneshot\nExecStart=/bin/sh -c 'echo reboot >> {}'\n",
                dir.join("reboots").display()
            ),
        );
        let boot_id = dir.join("boot_id");
        unit(
            "tend-boot-id.service",
            format!(
                "[Unit]\nDefaultDependencies=no\n[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/bin/sh -c 'cat /proc/sys/kernel/random/uuid > {}'\n",
                boot_id.display()
            ),
        );
        let wants = units.join("peer.target.wants");
        std::fs::create_dir_all(&wants).unwrap();
        std::os::unix::fs::symlink(
            "../tend-boot-id.service",
            wants.join("tend-boot-id.service"),
        )
        .unwrap();
        self.manager(&["Reload"]);
        self.manager(&["StartUnit", "ss", "tend-boot-id.service", "replace"]);
        self.wait_for_unit(
            "tend-boot-id.service",
            "ActiveState",
            "active",
            Duration::from_secs(10),
        );
        boot_id
    }

    /// How many times the peer rebooted (see [`SystemdPeer::rebootable`]).
    pub fn reboots(&self) -> usize {
        starts(&self.dir.path().join("reboots"))
    }

    /// Wait until the peer's systemd has rebooted: its PID 1 is gone (and
    /// with it the namespace). The machine stays off until
    /// [`SystemdPeer::start_bus_again`] boots it, as firmware would.
    pub fn wait_rebooted(&self, within: Duration) {
        let pid1 = std::fs::read_to_string(self.dir.path().join("pid1")).unwrap();
        let pid1 = PathBuf::from(format!("/proc/{}", pid1.trim()));
        wait_until(within, "the peer's systemd to reboot", || !pid1.exists());
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

    /// The peer's journal, for `journalctl --directory=`: journald keeps it in
    /// the manager's /run/log/journal (Storage=volatile), DIR/run/log/journal
    /// here, one subdirectory per machine id. Gone once the peer stops.
    pub fn journal_dir(&self) -> PathBuf {
        self.dir.path().join("run/log/journal")
    }

    /// `journalctl --directory=<journal_dir> -o json --no-pager ARGS...`: the
    /// entries, oldest first, each a JSON object of strings.
    pub fn journalctl(&self, args: &[&str]) -> Vec<serde_json::Value> {
        let output = Command::new("journalctl")
            .arg(format!("--directory={}", self.journal_dir().display()))
            .args(["-o", "json", "--no-pager"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "journalctl {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// Write one entry to the peer's journal from a unit of its own
    /// ([`SystemdPeer::journal_write_unit`] with a fresh unit name,
    /// `journal-write-N.service`); returns the entry once journalctl shows it.
    pub fn journal_write(
        &self,
        identifier: &str,
        priority: u8,
        message: &str,
    ) -> serde_json::Value {
        static WRITES: AtomicUsize = AtomicUsize::new(0);
        let n = WRITES.fetch_add(1, Ordering::Relaxed);
        self.journal_write_unit(
            &format!("journal-write-{n}.service"),
            identifier,
            priority,
            message,
        )
    }

    /// Write one entry to the peer's journal as `unit` (say `containerd.service`)
    /// would: a transient oneshot unit of that name runs `cat` on `<priority>message`
    /// with StandardOutput=journal. journald then records MESSAGE=message,
    /// PRIORITY, SYSLOG_IDENTIFIER=identifier, SYSLOG_FACILITY=3 (daemon),
    /// _TRANSPORT=stdout, _SYSTEMD_UNIT=unit, _SYSTEMD_INVOCATION_ID, _STREAM_ID,
    /// _PID, _UID, _GID, _BOOT_ID (the host's), _MACHINE_ID (the host's),
    /// _HOSTNAME, plus __CURSOR and the timestamps (no _COMM/_EXE: cat is gone
    /// before journald looks). Returns the entry once journalctl shows it, and
    /// the unit is stopped and unloaded again, so the name can be reused; it must
    /// not be a unit of the units dir.
    pub fn journal_write_unit(
        &self,
        unit: &str,
        identifier: &str,
        priority: u8,
        message: &str,
    ) -> serde_json::Value {
        assert!(
            priority <= 7,
            "syslog priorities are 0 (emerg) to 7 (debug)"
        );
        assert!(
            !message.contains(['\n', '\0']),
            "one line per entry: journald splits a stream at newlines and NULs"
        );
        // journald reads a leading <N> as the priority (SyslogLevelPrefix=yes).
        let line = format!("<{priority}>{message}\n");
        let mut data = vec![line.len().to_string()];
        data.extend(line.bytes().map(|b| b.to_string()));
        let input = vec![
            property("StandardInput", "s", ["data"]),
            property("StandardInputData", "ay", data),
        ];
        self.start_transient_oneshot(unit, identifier, &["/bin/cat"], input);
        self.wait_for_unit(unit, "SubState", "exited", Duration::from_secs(10));
        let invocation = self.invocation_id(unit);
        let mut entries = Vec::new();
        wait_until(
            Duration::from_secs(10),
            &format!("{unit}'s entry in the journal"),
            || {
                entries = self.journalctl(&[&format!("_SYSTEMD_INVOCATION_ID={invocation}")]);
                !entries.is_empty()
            },
        );
        self.manager(&["StopUnit", "ss", unit, "replace"]);
        assert_eq!(entries.len(), 1, "{entries:#?}");
        entries.remove(0)
    }

    /// Start `unit`, a transient oneshot unit whose shell loop writes `lines`
    /// lines, `flood line 0` to `flood line <lines - 1>`, to the journal with
    /// SYSLOG_IDENTIFIER=`identifier` and PRIORITY=6, as fast as journald takes
    /// them (the peer's journald has no rate limit). Returns at once; the unit's
    /// SubState is `exited` once the loop has written its last line.
    pub fn journal_flood(&self, unit: &str, identifier: &str, lines: u32) {
        let script =
            format!("i=0; while [ $i -lt {lines} ]; do echo \"flood line $i\"; i=$((i+1)); done");
        self.start_transient_oneshot(unit, identifier, &["/bin/sh", "-c", &script], Vec::new());
    }

    /// StartTransientUnit of a oneshot service running `argv` with its output to
    /// the journal under `identifier`; it stays active (exited) until stopped,
    /// then is unloaded. `extra` are more properties (see [`property`]). Retries
    /// while a unit of that name is still loaded (being unloaded after a stop).
    fn start_transient_oneshot(
        &self,
        unit: &str,
        identifier: &str,
        argv: &[&str],
        extra: Vec<Vec<String>>,
    ) {
        let mut exec_start = vec!["1".to_string(), argv[0].to_string(), argv.len().to_string()];
        exec_start.extend(argv.iter().map(|a| a.to_string()));
        exec_start.push("false".to_string());
        let mut properties = vec![
            property("Type", "s", ["oneshot"]),
            property("RemainAfterExit", "b", ["true"]),
            property("CollectMode", "s", ["inactive-or-failed"]),
            property("StandardOutput", "s", ["journal"]),
            property("SyslogIdentifier", "s", [identifier]),
            property("ExecStart", "a(sasb)", exec_start),
        ];
        properties.extend(extra);
        let count = properties.len().to_string();
        let mut args = vec![
            "--", // the end of busctl's options: a command line may hold `-c`
            "call",
            "org.freedesktop.systemd1",
            "/org/freedesktop/systemd1",
            "org.freedesktop.systemd1.Manager",
            "StartTransientUnit",
            "ssa(sv)a(sa(sv))",
            unit,
            "replace",
            &count,
        ];
        args.extend(properties.iter().flatten().map(String::as_str));
        args.push("0"); // no auxiliary units
        let what = format!("{unit} to be free for a transient unit (is it in the units dir?)");
        wait_until(Duration::from_secs(10), &what, || {
            match self.try_busctl(&args) {
                Ok(_) => true,
                Err(e) if e.contains("already loaded") => false,
                Err(e) => panic!("StartTransientUnit {unit}: {e}"),
            }
        });
    }

    /// The unit's current InvocationID, as journald writes it (32 hex digits).
    fn invocation_id(&self, unit: &str) -> String {
        let bytes: Vec<u8> =
            serde_json::from_str(&self.unit_property(unit, "InvocationID")).unwrap();
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// One property of a StartTransientUnit call, as busctl takes it: name,
/// D-Bus signature, then the value's parts.
fn property<V: ToString>(
    name: &str,
    signature: &str,
    value: impl IntoIterator<Item = V>,
) -> Vec<String> {
    let mut parts = vec![name.to_string(), signature.to_string()];
    parts.extend(value.into_iter().map(|v| v.to_string()));
    parts
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

/// How many times a [`SystemdPeer::counting_unit`] started (its count file's lines).
pub fn starts(count: &Path) -> usize {
    std::fs::read_to_string(count).map_or(0, |t| t.lines().count())
}
