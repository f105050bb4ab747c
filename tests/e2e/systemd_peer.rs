//! The systemd test peer itself (tests/peers/systemd.sh): a real systemd that
//! loads units from its own directory, runs host binaries, answers on its own
//! bus, does not see other peers, and leaves no process behind.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};
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
        peer.units_dir().join("systemd-journald.service").to_str().unwrap()
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
    ] {
        assert!(
            running.iter().any(|p| p.contains(&format!(": {command} "))),
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
