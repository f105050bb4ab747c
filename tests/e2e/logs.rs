//! The `logs` capability and log triggers with the real `tend` and the real
//! chaos plugin (modes `log-matches` and `logs-read`).
//!
//! The kernel log here is a FILE in the exact `/dev/kmsg` record format
//! (`prio,seq,usec,flags;message`, then ` KEY=value` lines), behind the same
//! reader as the device (`[host.logs] kernel-path`): a test may not flood the
//! machine's real ring buffer, which every other process shares. The reader's
//! one difference for the device (one `read(2)` is one record) is tested in
//! `host/src/capabilities/logs/kmsg.rs`. The boot ID is a file too
//! (`boot-id-path`), so a test can reboot.

use std::path::Path;
use std::time::{Duration, Instant};
use tend_e2e::{
    Daemon, Sandbox, SystemdPeer, append_kmsg, free_port, http_get, metric, plugin_status,
    wait_until,
};

const HUNG: &str = "INFO: task kworker/0:1 blocked for more than 120 seconds.";

/// Append kernel records `first..` with these messages (priority 3, kernel).
fn kmsg(path: &Path, first: u64, messages: &[String]) {
    append_kmsg(path, first, 3, messages.iter().cloned());
}

/// A sandbox whose plugin `watcher` (chaos in `mode`) watches the kernel
/// log file for hung tasks, burst 3 and 6 a minute; nothing else runs it
/// (a day's interval).
fn watcher(mode: &str) -> (Sandbox, u16) {
    let sandbox = Sandbox::new();
    std::fs::write(
        sandbox.path("boot_id"),
        "0f5e3c7d-9a0b-4c1d-8e2f-3a4b5c6d7e8f\n",
    )
    .unwrap();
    kmsg(&sandbox.path("kmsg"), 1, &[format!("old: {HUNG}")]);
    let port = free_port();
    sandbox.add_plugin("chaos", "watcher");
    configure(&sandbox, port, mode);
    (sandbox, port)
}

fn configure(sandbox: &Sandbox, port: u16, mode: &str) {
    sandbox.config_with_host(
        &format!(
            "listen = \"127.0.0.1:{port}\"\n[host.logs]\nkernel-path = \"{}\"\nboot-id-path = \"{}\"\n",
            sandbox.path("kmsg").display(),
            sandbox.path("boot_id").display()
        ),
        &format!(
            r#"[plugins.watcher]
interval = "24h"
[plugins.watcher.config]
mode = "{mode}"
[plugins.watcher.grants.logs]
kernel = true
[[plugins.watcher.grants.logs.watch]]
rule = "hung"
source = "kernel"
pattern = 'blocked for more than \d+ seconds'
burst = 3
per-minute = 6
"#
        ),
    );
}

fn runs(port: u16) -> u64 {
    plugin_status(port, "watcher")["reconciles"]
        .as_u64()
        .unwrap_or(0)
}

/// The messages the plugin was handed for `rule`, in order, from its log lines.
fn delivered_for(daemon: &Daemon, rule: &str) -> Vec<String> {
    let marker = format!("matched {rule}: ");
    daemon
        .log()
        .lines()
        .filter_map(|l| {
            let message = l.split_once(&marker)?.1;
            Some(
                message
                    .trim_end()
                    .trim_end_matches(" plugin=\"watcher\"")
                    .to_string(),
            )
        })
        .collect()
}

/// The messages handed for the kernel rule `hung`.
fn delivered(daemon: &Daemon) -> Vec<String> {
    delivered_for(daemon, "hung")
}

/// The missed count of every take, from "missed hung: N, gap G".
fn missed(daemon: &Daemon) -> u64 {
    daemon
        .log()
        .lines()
        .filter_map(|l| {
            l.split_once("missed hung: ")?
                .1
                .split(',')
                .next()?
                .trim()
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[test]
fn a_matched_line_wakes_the_plugin_with_it_and_an_unmatched_flood_wakes_nothing() {
    let (sandbox, port) = watcher("log-matches");
    let daemon = sandbox.daemon();
    wait_until(Duration::from_secs(60), "the startup reconcile", || {
        runs(port) >= 1
    });
    daemon.wait_for_log(Duration::from_secs(20), &["following the kernel log"]);
    let started = runs(port);

    // 10,000 lines no rule matches, then one that matches: lines are matched
    // in order, so when the match arrives the flood has been read, and it
    // woke nothing.
    let flood: Vec<String> = (0..10_000)
        .map(|i| format!("eth0: link flap {i}"))
        .collect();
    kmsg(&sandbox.path("kmsg"), 2, &flood);
    let line = format!("new: {HUNG}");
    let written = Instant::now();
    kmsg(&sandbox.path("kmsg"), 10_002, std::slice::from_ref(&line));
    // The plugin logs the line during its reconcile; the status counts the
    // reconcile once it ends.
    wait_until(Duration::from_secs(20), "the match delivered", || {
        delivered(&daemon).contains(&line) && runs(port) > started
    });
    println!(
        "a line behind 10,000 unmatched ones reached the plugin in {:?}",
        written.elapsed()
    );
    assert_eq!(
        delivered(&daemon),
        [line],
        "only the new line: the one written before the start is the past"
    );
    let last = plugin_status(port, "watcher")["last"].clone();
    assert!(
        last["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("1 matched; triggers: log:hung")),
        "{last:#}"
    );
    assert_eq!(runs(port), started + 1, "the flood woke nothing");
    let (_, metrics) = http_get(port, "/metrics").unwrap();
    assert!(
        metrics.contains(
            "tend_logs_matches_total{outcome=\"kept\",plugin=\"watcher\",rule=\"hung\"} 1"
        ),
        "{metrics}"
    );
    assert!(metric(port, "tend_logs_lines_total").unwrap() >= 10_001.0);

    // 50 matches at once: within the rule's rate a few are delivered, the
    // rest counted; none lost, none twice.
    let matches: Vec<String> = (0..50).map(|i| format!("burst {i}: {HUNG}")).collect();
    kmsg(&sandbox.path("kmsg"), 10_003, &matches);
    wait_until(Duration::from_secs(20), "the burst taken", || {
        missed(&daemon) + delivered(&daemon).len() as u64 >= 51
    });
    let got = delivered(&daemon);
    assert!(
        (2..=4).contains(&(got.len() - 1)),
        "the burst (3, one spent) and at most a refill: {got:?}"
    );
    assert_eq!(
        missed(&daemon) + got.len() as u64,
        51,
        "every match counted once"
    );
    assert!(daemon.terminate(Duration::from_secs(10)));
}

#[test]
fn kill_9_between_a_line_and_its_delivery_delivers_it_once_after_the_restart() {
    // The plugin fails without taking its matches: a matched line waits in
    // the host's store, as it would between the match and the plugin's run.
    let (sandbox, port) = watcher("fail");
    let daemon = sandbox.daemon();
    daemon.wait_for_log(Duration::from_secs(60), &["following the kernel log"]);
    let line = format!("before the kill: {HUNG}");
    kmsg(&sandbox.path("kmsg"), 2, std::slice::from_ref(&line));
    let store = sandbox.path("state/logs/watcher.json");
    wait_until(Duration::from_secs(20), "the match saved", || {
        std::fs::read_to_string(&store).is_ok_and(|s| s.contains("before the kill"))
    });
    let mode = std::fs::metadata(&store).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
    let killed = std::process::Command::new("kill")
        .args(["-9", &daemon.pid().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    drop(daemon);

    // Written while tend is down: not lost.
    let while_down = format!("while down: {HUNG}");
    kmsg(&sandbox.path("kmsg"), 3, std::slice::from_ref(&while_down));
    configure(&sandbox, port, "log-matches");
    let daemon = sandbox.daemon();
    wait_until(Duration::from_secs(60), "both delivered", || {
        delivered(&daemon).len() >= 2
    });
    // One more match: the two are not handed again.
    let after = format!("after: {HUNG}");
    kmsg(&sandbox.path("kmsg"), 4, std::slice::from_ref(&after));
    wait_until(Duration::from_secs(20), "the third delivered", || {
        delivered(&daemon).contains(&after)
    });
    assert_eq!(delivered(&daemon), [line, while_down, after]);
    assert!(daemon.terminate(Duration::from_secs(10)));

    // A reboot (a new boot ID, the sequence from 1 again) starts cleanly:
    // this boot's lines are matched, the old cursor's are not compared.
    std::fs::write(
        sandbox.path("boot_id"),
        "1f5e3c7d-9a0b-4c1d-8e2f-3a4b5c6d7e8f\n",
    )
    .unwrap();
    std::fs::write(sandbox.path("kmsg"), "").unwrap();
    let rebooted = format!("after the reboot: {HUNG}");
    kmsg(&sandbox.path("kmsg"), 1, std::slice::from_ref(&rebooted));
    let daemon = sandbox.daemon();
    wait_until(Duration::from_secs(60), "the new boot's line", || {
        delivered(&daemon).contains(&rebooted)
    });
    assert_eq!(delivered(&daemon), [rebooted]);
    assert!(daemon.terminate(Duration::from_secs(10)));
}

#[test]
fn a_plugin_reads_only_its_granted_sources_and_pages_with_the_cursor() {
    let sandbox = Sandbox::new();
    std::fs::write(
        sandbox.path("boot_id"),
        "0f5e3c7d9a0b4c1d8e2f3a4b5c6d7e8f\n",
    )
    .unwrap();
    let lines: Vec<String> = ["one", "two", "three"].map(String::from).to_vec();
    kmsg(&sandbox.path("kmsg"), 1, &lines);
    sandbox.add_plugin("chaos", "reader");
    // One `tend reconcile` of the reader in `mode` under `grant`: its stdout.
    let read = |mode: &str, grant: &str| -> String {
        sandbox.config_with_host(
            &format!(
                "[host.logs]\nkernel-path = \"{}\"\nboot-id-path = \"{}\"\njournal-directory = \"{}\"\n",
                sandbox.path("kmsg").display(),
                sandbox.path("boot_id").display(),
                sandbox.path("no-journal").display(),
            ),
            &format!("[plugins.reader.config]\n{mode}\n[plugins.reader.grants]\nlogs = {grant}\n"),
        );
        sandbox.tend(&["reconcile", "reader"]).stdout
    };
    let kernel = "{ kernel = true }";
    let out = read("mode = \"logs-read\"\nsource = \"kernel\"\nmax = 2", kernel);
    let cursor = "k1;b=0f5e3c7d9a0b4c1d8e2f3a4b5c6d7e8f;s=2";
    assert!(
        out.contains(&format!("read 2: one | two cursor {cursor}")),
        "{out}"
    );

    let out = read(
        &format!("mode = \"logs-read\"\nsource = \"kernel\"\nmax = 10\nsince = \"{cursor}\""),
        kernel,
    );
    assert!(out.contains("read 1: three"), "{out}");

    // The journal is not granted by the kernel grant, and a cursor that
    // would be an option of journalctl is refused.
    let out = read(
        "mode = \"logs-read\"\nsource = \"journal\"\nmax = 10",
        kernel,
    );
    assert!(
        out.contains("error denied") && out.contains("may not read the journal log"),
        "{out}"
    );
    let out = read(
        "mode = \"logs-read\"\nsource = \"kernel\"\nmax = 10\nsince = \"--file=/etc/shadow\"",
        kernel,
    );
    assert!(out.contains("error invalid"), "{out}");
    let out = read(
        "mode = \"logs-read\"\nsource = \"kernel\"\nmax = 10",
        "{ units = [\"kubelet.service\"] }",
    );
    assert!(out.contains("add kernel = true"), "{out}");
}

#[test]
fn a_watch_rule_beyond_its_grant_is_refused_with_file_and_line() {
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "watcher");
    sandbox.config(
        "[plugins.watcher.grants.logs]\nunits = [\"containerd.service\"]\n[[plugins.watcher.grants.logs.watch]]\nrule = \"kubelet\"\nsource = \"journal\"\npattern = \"PLEG\"\nunits = [\"kubelet.service\"]\n",
    );
    let out = sandbox.tend(&["check"]);
    assert!(!out.success);
    assert!(
        out.stderr.contains("tend.toml")
            && out.stderr.contains("which the grant's units do not cover"),
        "{}",
        out.stderr
    );
}

/// The `journalctl` processes reading `dir` (by their command line).
fn journalctl_reading(dir: &Path) -> Vec<u32> {
    let needle = format!("--directory={}", dir.display());
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|p| p.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).split('\0').any(|a| a == needle))
        })
        .collect()
}

#[test]
fn journal_lines_of_a_granted_unit_wake_the_plugin_once_across_a_kill_9() {
    let peer = SystemdPeer::start();
    let sandbox = Sandbox::new();
    let port = free_port();
    sandbox.add_plugin("chaos", "watcher");
    sandbox.config_with_host(
        &format!(
            "listen = \"127.0.0.1:{port}\"\n[host.logs]\njournal-directory = \"{}\"\n",
            peer.journal_dir().display()
        ),
        r#"[plugins.watcher]
interval = "24h"
[plugins.watcher.config]
mode = "log-matches"
[plugins.watcher.grants.logs]
units = ["containerd.service"]
[[plugins.watcher.grants.logs.watch]]
rule = "shim"
source = "journal"
pattern = "failed to start shim"
max-priority = 3
"#,
    );
    let daemon = sandbox.daemon();
    daemon.wait_for_log(Duration::from_secs(60), &["following the journal log"]);
    // Another unit's line and a line not severe enough match nothing.
    peer.journal_write_unit(
        "sshd.service",
        "sshd",
        3,
        "failed to start shim: not granted",
    );
    peer.journal_write_unit(
        "containerd.service",
        "containerd",
        6,
        "failed to start shim: only info",
    );
    peer.journal_write_unit(
        "containerd.service",
        "containerd",
        3,
        "failed to start shim: boom",
    );
    wait_until(Duration::from_secs(20), "the journal match", || {
        !delivered_for(&daemon, "shim").is_empty()
    });
    assert_eq!(
        delivered_for(&daemon, "shim"),
        ["failed to start shim: boom"]
    );
    let readers = journalctl_reading(&peer.journal_dir());
    assert_eq!(readers.len(), 1, "one journalctl follows: {readers:?}");

    // kill -9: the journalctl child dies with tend (its parent-death
    // signal), and a line written meanwhile is matched once after the restart.
    let killed = std::process::Command::new("kill")
        .args(["-9", &daemon.pid().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    drop(daemon);
    wait_until(Duration::from_secs(10), "no journalctl left", || {
        journalctl_reading(&peer.journal_dir()).is_empty()
    });
    peer.journal_write_unit(
        "containerd.service",
        "containerd",
        2,
        "failed to start shim: while down",
    );
    let daemon = sandbox.daemon();
    wait_until(
        Duration::from_secs(30),
        "the line written while down",
        || !delivered_for(&daemon, "shim").is_empty(),
    );
    peer.journal_write_unit(
        "containerd.service",
        "containerd",
        3,
        "failed to start shim: after",
    );
    wait_until(Duration::from_secs(20), "the line written after", || {
        delivered_for(&daemon, "shim").len() >= 2
    });
    assert_eq!(
        delivered_for(&daemon, "shim"),
        [
            "failed to start shim: while down",
            "failed to start shim: after"
        ],
        "nothing twice, nothing lost"
    );
    assert!(daemon.terminate(Duration::from_secs(10)));
    assert!(journalctl_reading(&peer.journal_dir()).is_empty());
}
