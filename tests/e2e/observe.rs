//! What operators see and rely on: metrics, status, sd_notify, the journal and
//! the state store surviving kill -9, and backoff that can be measured.

use std::os::unix::net::UnixDatagram;
use std::process::Command;
use std::time::Duration;
use tend_e2e::{Sandbox, free_port, http_get, plugin_status, wait_for_plugin, wait_until};

/// The value of the sample of `name` whose labels include every `key="value"`.
fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

fn chaos(name: &str, mode: &str, interval: &str) -> String {
    format!(
        "[plugins.{name}]\nfile = \"plugins/chaos.wasm\"\ninterval = \"{interval}\"\n[plugins.{name}.config]\nmode = \"{mode}\"\n"
    )
}

#[test]
fn metrics_validate_with_promtool_and_counters_move() {
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "chaos");
    let port = free_port();
    sandbox.config_with_host(
        &format!("listen = \"127.0.0.1:{port}\""),
        &(chaos("steady", "ok", "100ms") + &chaos("panicker", "panic", "100ms")),
    );
    let daemon = sandbox.daemon();
    wait_for_plugin(port, "steady", "a few runs", |p| {
        p["reconciles"].as_u64() >= Some(3)
    });
    wait_for_plugin(port, "panicker", "a trap", |p| p["state"] == "failing");
    assert_eq!(http_get(port, "/healthz").unwrap().0, 200);
    assert_eq!(
        http_get(port, "/readyz").unwrap(),
        (200, "ready\n".to_string())
    );

    let (status, first) = http_get(port, "/metrics").unwrap();
    assert_eq!(status, 200);
    let file = sandbox.path("metrics.txt");
    std::fs::write(&file, &first).unwrap();
    let check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&file).unwrap())
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "promtool: {}{}\n{first}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );

    let ok = [("plugin", "steady"), ("result", "ok")];
    let before = metric(&first, "tend_reconciles_total", &ok).expect("reconciles counter");
    assert!(
        metric(
            &first,
            "tend_traps_total",
            &[("plugin", "panicker"), ("cause", "trap")]
        )
        .unwrap()
            >= 1.0
    );
    let state_sets = [
        ("plugin", "steady"),
        ("capability", "state"),
        ("operation", "set"),
        ("result", "ok"),
    ];
    assert!(metric(&first, "tend_capability_calls_total", &state_sets).unwrap() >= 1.0);
    assert_eq!(
        metric(
            &first,
            "tend_plugin_state",
            &[("plugin", "steady"), ("state", "ready")]
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(
            &first,
            "tend_plugin_state",
            &[("plugin", "panicker"), ("state", "failing")]
        ),
        Some(1.0)
    );
    assert_eq!(metric(&first, "tend_plugins_loaded", &[]), Some(2.0));
    assert!(
        metric(
            &first,
            "tend_reconcile_duration_seconds_count",
            &[("plugin", "steady")]
        )
        .unwrap()
            >= 1.0
    );
    assert!(
        metric(
            &first,
            "tend_plugin_last_success_timestamp_seconds",
            &[("plugin", "steady")]
        )
        .unwrap()
            > 1.7e9
    );
    wait_until(Duration::from_secs(10), "the ok counter to move", || {
        metric(
            &http_get(port, "/metrics").unwrap().1,
            "tend_reconciles_total",
            &ok,
        )
        .unwrap()
            > before
    });

    // `tend status` reads the same from the running daemon.
    let status = sandbox.tend(&["status"]);
    assert!(status.success, "{status:?}");
    let steady = status
        .stdout
        .lines()
        .find(|l| l.starts_with("steady"))
        .unwrap_or_default();
    assert!(
        steady.contains("ready") && steady.contains("sha256:"),
        "{}",
        status.stdout
    );
    let json: serde_json::Value =
        serde_json::from_str(&sandbox.tend(&["status", "--json"]).stdout).unwrap();
    assert_eq!(json["ready"], true);
    assert!(daemon.terminate(Duration::from_secs(10)));
}

#[test]
fn sd_notify_ready_watchdog_and_stopping() {
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "chaos");
    sandbox.config(&chaos("steady", "ok", "1h"));
    let socket_path = sandbox.path("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let daemon = sandbox.daemon_with_env(&[
        ("NOTIFY_SOCKET", socket_path.to_str().unwrap()),
        ("WATCHDOG_USEC", "200000"),
    ]);
    let mut seen = String::new();
    let mut buffer = [0u8; 4096];
    while !(seen.contains("READY=1") && seen.contains("WATCHDOG=1")) {
        let n = socket
            .recv(&mut buffer)
            .expect("a notification within 30 s");
        seen += &String::from_utf8_lossy(&buffer[..n]);
        seen.push('\n');
    }
    assert!(daemon.terminate(Duration::from_secs(10)));
    while !seen.contains("STOPPING=1") {
        let n = socket.recv(&mut buffer).expect("STOPPING=1 on shutdown");
        seen += &String::from_utf8_lossy(&buffer[..n]);
    }
}

#[test]
fn kill_9_mid_burst_leaves_whole_files_a_readable_journal_and_intact_state() {
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "chaos");
    let out = sandbox.path("out");
    let size = 64 * 1024;
    sandbox.config(&format!(
        "[plugins.burst]\nfile = \"plugins/chaos.wasm\"\ninterval = \"10ms\"\n[plugins.burst.grants]\nfiles = [{{ path = \"{}\", write = true }}]\n[plugins.burst.config]\nmode = \"burst\"\ndir = \"{}\"\nfiles = 20\nsize = {size}\n",
        out.display(),
        out.display()
    ));
    let daemon = sandbox.daemon();
    wait_until(Duration::from_secs(60), "five bursts", || {
        daemon.count(&["plugin=burst", "healthy", "burst "]) >= 5
    });
    Command::new("kill")
        .args(["-9", &daemon.pid().to_string()])
        .status()
        .unwrap();
    drop(daemon);

    // Every file is one whole version: never a mix, never short.
    for i in 0..20 {
        let bytes = std::fs::read(out.join(format!("file-{i}"))).unwrap();
        assert_eq!(bytes.len(), size, "file-{i}");
        assert!(
            bytes.iter().all(|b| *b == bytes[0]),
            "file-{i} mixes two versions"
        );
    }
    // The journal reads up to its last complete entry.
    let journal = sandbox.tend(&["journal", "--json", "--plugin", "burst"]);
    assert!(journal.success, "{journal:?}");
    let entries: Vec<serde_json::Value> = journal
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(entries.len() >= 100, "{} entries", entries.len());
    assert!(
        entries
            .iter()
            .all(|e| e["operation"] == "write" && e["dry_run"] == false)
    );
    let completed = entries.len() / 20;

    // The state store opens and still counts: runs continue past those before the kill.
    let daemon = sandbox.daemon();
    wait_until(Duration::from_secs(60), "a burst after restart", || {
        daemon.count(&["plugin=burst", "healthy", "burst "]) >= 1
    });
    // The outcome line reads "...runner: burst N health=...".
    let log = daemon.log();
    let outcome = log
        .lines()
        .find_map(|l| l.split_once("runner: burst "))
        .expect("a burst outcome")
        .1;
    let run: usize = outcome.split_whitespace().next().unwrap().parse().unwrap();
    assert!(
        run > completed.saturating_sub(1),
        "state survived: run {run} after {completed} complete bursts"
    );
    assert!(daemon.terminate(Duration::from_secs(20)));
    // A completed burst after the restart cleaned up any temp file the kill left.
    let leftovers: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().contains(".tend-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn a_trapping_plugin_backs_off_with_growing_intervals_while_another_keeps_its_own() {
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "chaos");
    let port = free_port();
    sandbox.config_with_host(
        &format!("listen = \"127.0.0.1:{port}\""),
        &(chaos("steady", "ok", "200ms") + &chaos("panicker", "panic", "200ms")),
    );
    let daemon = sandbox.daemon();
    wait_until(Duration::from_secs(40), "four failed runs", || {
        daemon.count(&["plugin=panicker", "reconcile failed"]) >= 4
    });
    let failures = daemon.times_of(&["plugin=panicker", "reconcile failed"]);
    let gaps: Vec<f64> = failures.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.windows(2).all(|g| g[1] > g[0]),
        "backoff intervals grow: {gaps:?}"
    );
    assert!(
        gaps[0] >= 0.75,
        "the first backoff is about a second: {gaps:?}"
    );
    let steady = daemon.times_of(&["plugin=steady", "healthy"]);
    let recent: Vec<f64> = steady
        .iter()
        .copied()
        .filter(|t| *t >= failures[0])
        .collect();
    let mut steady_gaps: Vec<f64> = recent.windows(2).map(|w| w[1] - w[0]).collect();
    // The median, not every gap: a loaded 2-core machine may stall one run,
    // while steady waiting on panicker's backoff would move them all to 1 s+.
    steady_gaps.sort_by(f64::total_cmp);
    assert!(
        steady_gaps.len() >= 4 && steady_gaps[steady_gaps.len() / 2] < 0.3,
        "steady keeps 200 ms: {steady_gaps:?}"
    );
    assert!(plugin_status(port, "panicker")["failures"].as_u64() >= Some(4));
    assert!(daemon.terminate(Duration::from_secs(10)));
}

#[test]
fn tend_reconcile_goes_through_a_running_daemon() {
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "chaos");
    let port = free_port();
    sandbox.config_with_host(
        &format!("listen = \"127.0.0.1:{port}\""),
        &(chaos("steady", "ok", "1h") + &chaos("failing", "fail", "1h")),
    );
    let daemon = sandbox.daemon();
    wait_for_plugin(port, "steady", "its startup run", |p| p["reconciles"] == 1);
    wait_for_plugin(port, "failing", "its startup run", |p| {
        p["state"] == "failing"
    });

    // The daemon holds the state store; the command asks it instead.
    let run = sandbox.tend(&["reconcile", "steady"]);
    assert!(run.success, "{run:?}");
    assert!(
        run.stdout.starts_with("steady: healthy: run 2 (v1)"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(&format!(
            "by the tend daemon at {}",
            sandbox.path("state/tend.sock").display()
        )),
        "{}",
        run.stdout
    );
    daemon.wait_for_log(
        Duration::from_secs(5),
        &["plugin=steady", "trigger=manual", "healthy"],
    );

    let run = sandbox.tend(&["reconcile", "failing"]);
    assert!(!run.success);
    assert!(
        run.stdout
            .contains("failing: FAILED: other: chaos was asked to fail"),
        "{}",
        run.stdout
    );

    let run = sandbox.tend(&["reconcile", "nope"]);
    assert!(
        !run.success && run.stderr.contains("no plugin \"nope\""),
        "{run:?}"
    );
    assert!(daemon.terminate(Duration::from_secs(10)));
}

/// `tend journal | head -1`: a reader that stops reading ends the command
/// quietly with success (it panicked on the broken pipe before).
#[test]
fn a_reader_that_stops_reading_ends_tend_journal_quietly() {
    use std::io::{BufRead, BufReader};
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "chaos");
    let out = sandbox.path("out");
    sandbox.config(&format!(
        "[plugins.burst]\nfile = \"plugins/chaos.wasm\"\n[plugins.burst.grants]\nfiles = [{{ path = \"{}\", write = true }}]\n[plugins.burst.config]\nmode = \"burst\"\ndir = \"{}\"\nfiles = 200\nsize = 8\n",
        out.display(),
        out.display()
    ));
    // Three reconciles of 200 writes each: far more journal text than a pipe
    // holds (64 KiB), so the command is still writing when the reader leaves.
    for _ in 0..3 {
        let run = sandbox.tend(&["reconcile", "burst"]);
        assert!(run.success, "{}", run.stderr);
    }
    let mut journal = Command::new(tend_e2e::tend_bin())
        .args(["journal", "--json", "-c"])
        .arg(sandbox.path("tend.toml"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(journal.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("burst"), "{first}");
    // The read end is closed here (dropped with the BufReader).
    let output = journal.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{:?}: {stderr}", output.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}
