//! The systemd test peer itself (tests/peers/systemd.sh): a real systemd that
//! loads units from its own directory, runs host binaries, answers on its own
//! bus, does not see other peers, and leaves no process behind.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};
use tend_e2e::{SystemdPeer, wait_until};

const WITHIN: Duration = Duration::from_secs(10);

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

/// A oneshot unit that stays active and appends a line to `count` on each start.
fn write_hello(peer: &SystemdPeer, count: &Path) {
    std::fs::write(
        peer.units_dir().join("hello.service"),
        format!(
            "[Unit]\nDescription=hello\n\n[Service]\nType=oneshot\nRemainAfterExit=yes\n\
             ExecStartPre=/bin/sh -c 'echo started >> {}'\nExecStart=/bin/true\n",
            count.display()
        ),
    )
    .unwrap();
}

#[test]
fn starts_a_unit_from_its_units_dir() {
    let peer = SystemdPeer::start();
    let count = peer.dir().join("hello.count");
    write_hello(&peer, &count);
    peer.manager(&["Reload"]);
    peer.manager(&["StartUnit", "ss", "hello.service", "replace"]);
    peer.wait_for_unit("hello.service", "ActiveState", "active", WITHIN);
    assert_eq!(lines(&count), 1);
    assert_eq!(peer.unit_property("hello.service", "SubState"), "exited");
    assert_eq!(
        peer.unit_property("hello.service", "FragmentPath"),
        peer.units_dir().join("hello.service").to_str().unwrap()
    );
    // Only the peer's units dir is on the unit path, not the host's: its
    // journald is its own unit.
    assert!(Path::new("/lib/systemd/system/systemd-logind.service").exists());
    assert_eq!(
        peer.unit_property("systemd-logind.service", "LoadState"),
        "not-found"
    );
    assert_eq!(
        peer.unit_property("systemd-journald.service", "FragmentPath"),
        peer.units_dir()
            .join("systemd-journald.service")
            .to_str()
            .unwrap()
    );
    // Restart: ExecStartPre runs once more.
    peer.manager(&["RestartUnit", "ss", "hello.service", "replace"]);
    wait_until(WITHIN, "a second start", || lines(&count) == 2);
    peer.wait_for_unit("hello.service", "ActiveState", "active", WITHIN);
}

#[test]
fn units_run_host_binaries_and_reach_host_loopback() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = [0u8; 1024];
        let n = stream.read(&mut request).unwrap();
        stream
            .write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")
            .unwrap();
        String::from_utf8_lossy(&request[..n]).into_owned()
    });
    let peer = SystemdPeer::start();
    std::fs::write(
        peer.units_dir().join("probe.service"),
        format!(
            "[Service]\nType=oneshot\nRemainAfterExit=yes\n\
             ExecStart=/usr/bin/curl -fsS -o /dev/null http://127.0.0.1:{port}/health\n"
        ),
    )
    .unwrap();
    peer.manager(&["Reload"]);
    peer.manager(&["StartUnit", "ss", "probe.service", "replace"]);
    peer.wait_for_unit("probe.service", "ActiveState", "active", WITHIN);
    assert!(server.join().unwrap().starts_with("GET /health "));
}

#[test]
fn two_peers_do_not_interfere() {
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(SystemdPeer::start);
        let b = s.spawn(SystemdPeer::start);
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_ne!(a.bus_address(), b.bus_address());
    let (count_a, count_b) = (a.dir().join("hello.count"), b.dir().join("hello.count"));
    write_hello(&a, &count_a);
    write_hello(&b, &count_b);
    a.manager(&["Reload"]);
    b.manager(&["Reload"]);
    a.manager(&["StartUnit", "ss", "hello.service", "replace"]);
    a.wait_for_unit("hello.service", "ActiveState", "active", WITHIN);
    assert_eq!(b.unit_property("hello.service", "ActiveState"), "inactive");
    assert_eq!((lines(&count_a), lines(&count_b)), (1, 0));

    // Stopping one leaves the other running and usable.
    let a_processes = a.processes();
    drop(a);
    assert_eq!(a_processes.list(), Vec::<String>::new());
    assert!(!b.processes().list().is_empty());
    b.manager(&["StartUnit", "ss", "hello.service", "replace"]);
    b.wait_for_unit("hello.service", "ActiveState", "active", WITHIN);
    assert_eq!(lines(&count_b), 1);
}

#[test]
fn drop_leaves_no_process_behind() {
    let started = Instant::now();
    let peer = SystemdPeer::start();
    let start_time = started.elapsed();
    // A service whose main process forks a child into a new session: not a child
    // of the manager any more, but still in the peer's cgroup and pid namespace.
    std::fs::write(
        peer.units_dir().join("long.service"),
        "[Service]\nExecStart=/bin/sh -c 'setsid sleep 1000 & exec sleep 1001'\n",
    )
    .unwrap();
    peer.manager(&["Reload"]);
    peer.manager(&["StartUnit", "ss", "long.service", "replace"]);
    peer.wait_for_unit("long.service", "ActiveState", "active", WITHIN);
    let processes = peer.processes();
    wait_until(WITHIN, "both sleeps to run", || {
        let list = processes.list();
        list.iter().any(|p| p.ends_with(": sleep 1000"))
            && list.iter().any(|p| p.ends_with(": sleep 1001"))
    });
    let running = processes.list();
    for command in [
        "script",
        "unshare",
        "/lib/systemd/systemd",
        "/usr/bin/dbus-daemon",
        "/lib/systemd/systemd-journald",
    ] {
        assert!(
            running.iter().any(|p| p.split(' ').nth(1) == Some(command)),
            "{command} not found among {running:#?}"
        );
    }
    assert!(processes.cgroup_exists());

    let stopping = Instant::now();
    drop(peer);
    let stop_time = stopping.elapsed();
    assert_eq!(processes.list(), Vec::<String>::new());
    assert!(!processes.cgroup_exists());
    eprintln!("systemd peer: start {start_time:?}, stop {stop_time:?}");
}

/// Every file under `roots` with its size and modification time.
fn files_under(roots: &[&str]) -> Vec<(PathBuf, u64, SystemTime)> {
    let mut files = Vec::new();
    let mut dirs: Vec<PathBuf> = roots.iter().map(PathBuf::from).collect();
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                dirs.push(entry.path());
            }
            files.push((entry.path(), meta.len(), meta.modified().unwrap()));
        }
    }
    files.sort();
    files
}

fn messages(entries: &[serde_json::Value]) -> Vec<&str> {
    entries
        .iter()
        .map(|e| e["MESSAGE"].as_str().unwrap())
        .collect()
}

/// The resident memory of the peer's journald, from /proc.
fn journald_rss(peer: &SystemdPeer) -> String {
    let process = peer.processes().list();
    let journald = process
        .iter()
        .find(|p| p.ends_with(": /lib/systemd/systemd-journald"))
        .expect("journald runs");
    let pid = journald.split(':').next().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    rss.trim_start_matches("VmRSS:").trim().to_string()
}

#[test]
fn journal_returns_written_entries_with_their_fields() {
    // The namespace shares the host's /var: the journal must stay in the peer's /run.
    let host_journals = ["/var/log/journal", "/run/log/journal"];
    let host_before = files_under(&host_journals);
    let mut kmsg = kernel_log_from_now();
    let peer = SystemdPeer::start();
    let token = unique_token();
    let writing = Instant::now();
    let first = peer.journal_write("tend-peer-test", 3, &format!("{token} first"));
    let write_to_visible = writing.elapsed();
    let second = peer.journal_write_unit(
        "containerd.service",
        "containerd",
        4,
        &format!("{token} second"),
    );
    let third = peer.journal_write("tend-peer-test", 6, &format!("{token} third: <1> [x]"));
    eprintln!(
        "journal: write to visible {write_to_visible:?}, journald RSS {}",
        journald_rss(&peer)
    );

    // Filtered by identifier: exactly the two entries written with it.
    let by_identifier = peer.journalctl(&["SYSLOG_IDENTIFIER=tend-peer-test"]);
    assert_eq!(
        messages(&by_identifier),
        [format!("{token} first"), format!("{token} third: <1> [x]")]
    );
    assert_eq!(by_identifier[0], first);
    assert_eq!(by_identifier[1], third);
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap()
        .trim()
        .replace('-', "");
    for (entry, priority) in [(&first, "3"), (&third, "6")] {
        assert_eq!(entry["PRIORITY"], priority);
        assert_eq!(entry["SYSLOG_IDENTIFIER"], "tend-peer-test");
        assert!(
            entry["_SYSTEMD_UNIT"]
                .as_str()
                .unwrap()
                .starts_with("journal-write-"),
            "{entry:#}"
        );
        assert_eq!(entry["_BOOT_ID"], boot_id.as_str());
        assert_eq!(entry["_TRANSPORT"], "stdout");
    }
    assert_ne!(first["_SYSTEMD_UNIT"], third["_SYSTEMD_UNIT"]);

    // Filtered by unit: only the entry written as containerd.service.
    let by_unit = peer.journalctl(&["_SYSTEMD_UNIT=containerd.service"]);
    assert_eq!(by_unit, std::slice::from_ref(&second));
    assert_eq!(second["MESSAGE"], format!("{token} second").as_str());
    assert_eq!(second["PRIORITY"], "4");
    assert_eq!(second["SYSLOG_IDENTIFIER"], "containerd");
    assert_eq!(second["_BOOT_ID"], boot_id.as_str());

    // Filtered by priority: warning and worse are the first two, nothing else
    // (journald's own entries are informational).
    let warnings = peer.journalctl(&["--priority=warning"]);
    assert_eq!(warnings, [first.clone(), second.clone()]);

    // After a cursor: only later entries.
    let cursor = first["__CURSOR"].as_str().unwrap();
    assert!(!cursor.is_empty());
    let after = peer.journalctl(&[&format!("--after-cursor={cursor}")]);
    assert_eq!(after, [second.clone(), third.clone()]);
    let after_last = peer.journalctl(&[&format!(
        "--after-cursor={}",
        third["__CURSOR"].as_str().unwrap()
    )]);
    assert_eq!(after_last, Vec::<serde_json::Value>::new());

    // The unit's name is free again once a write returns: a second write as
    // containerd.service adds to the first.
    let fourth = peer.journal_write_unit(
        "containerd.service",
        "containerd",
        2,
        &format!("{token} fourth"),
    );
    assert_eq!(
        peer.journalctl(&["_SYSTEMD_UNIT=containerd.service"]),
        [second, fourth]
    );

    // The journal is in the peer's /run; the host's journal directories are as they were.
    let machine_id = std::fs::read_to_string("/etc/machine-id").unwrap();
    assert!(
        peer.journal_dir()
            .join(machine_id.trim())
            .join("system.journal")
            .exists()
    );
    assert_eq!(files_under(&host_journals), host_before);
    let journal_dir = peer.journal_dir();
    drop(peer);
    assert!(!journal_dir.exists(), "the peer's journal outlived it");
    assert_eq!(files_under(&host_journals), host_before);
    // Nor did journald write to the VM's kernel log (its own log goes to the console).
    let kernel_log = read_kernel_log(&mut kmsg);
    assert!(
        !kernel_log
            .iter()
            .any(|r| r.contains("systemd-journald") || r.contains(&token)),
        "{kernel_log:#?}"
    );
}

/// /dev/kmsg, positioned after its last record, non-blocking.
fn kernel_log_from_now() -> std::fs::File {
    use std::io::Seek;
    use std::os::unix::fs::OpenOptionsExt;
    let mut kmsg = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")
        .unwrap();
    kmsg.seek(std::io::SeekFrom::End(0)).unwrap();
    kmsg
}

/// The kernel log's records since `kmsg`'s position (one read, one record).
fn read_kernel_log(kmsg: &mut std::fs::File) -> Vec<String> {
    let mut records = Vec::new();
    let mut record = vec![0u8; 8192];
    loop {
        match kmsg.read(&mut record) {
            Ok(n) => records.push(String::from_utf8_lossy(&record[..n]).into_owned()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return records,
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue, // overwritten
            Err(e) => panic!("reading /dev/kmsg: {e}"),
        }
    }
}

/// A token that marks this run's lines.
fn unique_token() -> String {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("tend-{}-{nanos}", std::process::id())
}

#[test]
fn journal_takes_a_flood_whole() {
    const LINES: u32 = 100_000;
    let peer = SystemdPeer::start();
    let flooding = Instant::now();
    peer.journal_flood("flood.service", "flood", LINES);
    let last = format!("MESSAGE=flood line {}", LINES - 1);
    wait_until(Duration::from_secs(120), "the flood's last line", || {
        !peer
            .journalctl(&["_SYSTEMD_UNIT=flood.service", &last])
            .is_empty()
    });
    let elapsed = flooding.elapsed();
    peer.wait_for_unit("flood.service", "SubState", "exited", WITHIN);
    // Every line, in order, none suppressed.
    let output = Command::new("journalctl")
        .arg(format!("--directory={}", peer.journal_dir().display()))
        .args(["-o", "cat", "--no-pager", "_SYSTEMD_UNIT=flood.service"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    let expected: Vec<String> = (0..LINES).map(|i| format!("flood line {i}")).collect();
    assert!(text.lines().eq(expected.iter().map(String::as_str)));
    let priorities = peer.journalctl(&["_SYSTEMD_UNIT=flood.service", &last]);
    assert_eq!(priorities[0]["PRIORITY"], "6");
    assert_eq!(priorities[0]["SYSLOG_IDENTIFIER"], "flood");
    eprintln!(
        "journal flood: {LINES} lines in {elapsed:?} ({:.0} lines/s), journald RSS {}",
        f64::from(LINES) / elapsed.as_secs_f64(),
        journald_rss(&peer)
    );
}
