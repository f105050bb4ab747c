//! Attacks on the running daemon by an unprivileged local client and by a
//! hostile plugin (the test-only `chaos` plugin), against the real `tend`:
//! commands on the metrics port, connection floods, plan floods, manual
//! reconcile floods, huge outcome messages, control characters in plugin text
//! and file names. Each test is the attack, asserting the harm did not happen.
//! See docs/security.md.

use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::time::{Duration, Instant};
use tend_e2e::{
    Sandbox, free_port, http_get, is_root, journal, plugin_status, wait_for_plugin, wait_until,
};

/// Chaos as the only plugin, with `extra` lines in its table (interval, watch),
/// `grants` and `limits` TOML lines and its config; the daemon's HTTP port.
fn chaos(sandbox: &Sandbox, extra: &str, grants: &str, limits: &str, config: &str) -> u16 {
    let port = free_port();
    sandbox.add_plugin("chaos", "chaos").config_with_host(
        &format!("listen = \"127.0.0.1:{port}\""),
        &format!(
            "[plugins.chaos]\n{extra}\n[plugins.chaos.grants]\n{grants}\n[plugins.chaos.limits]\n{limits}\n[plugins.chaos.config]\n{config}\n"
        ),
    );
    port
}

/// A plain HTTP/1.0 request of `method` to `path` over `stream`: (status,
/// headers and body as one text).
fn request(mut stream: impl Read + Write, method: &str, path: &str) -> (u16, String) {
    write!(stream, "{method} {path} HTTP/1.0\r\nHost: tend\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, response)
}

fn post_http(port: u16, path: &str) -> (u16, String) {
    let stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    request(stream, "POST", path)
}

/// A POST on the control socket; the whole response, headers included (the
/// rate limit's `Retry-After` is asserted).
fn post_socket(sandbox: &Sandbox, path: &str) -> (u16, String) {
    let stream = std::os::unix::net::UnixStream::connect(sandbox.path("state/tend.sock")).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    request(stream, "POST", path)
}

/// CPU seconds (user + system) `pid` has used so far.
fn cpu_seconds(pid: u32) -> f64 {
    let per_second = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .unwrap();
    tend_e2e::cpu_ticks(pid) as f64
        / String::from_utf8_lossy(&per_second.stdout)
            .trim()
            .parse::<f64>()
            .unwrap()
}

fn has_raw_controls(text: &str) -> bool {
    text.chars().any(|c| c.is_control() && c != '\n')
}

#[test]
fn the_http_port_refuses_commands_and_a_failing_plugins_backoff_is_not_skipped() {
    let sandbox = Sandbox::new();
    let port = chaos(&sandbox, "", "", "", "mode = \"fail\"");
    let _daemon = sandbox.daemon();
    let failing = wait_for_plugin(port, "chaos", "its startup failure", |p| {
        p["state"] == "failing"
    });
    // The attack: 20 manual reconciles and 20 plans in a burst, as any local user.
    let started = Instant::now();
    for _ in 0..20 {
        for path in ["/reconcile/chaos", "/plan", "/plan/chaos"] {
            let (status, response) = post_http(port, path);
            assert_eq!(status, 405, "{response}");
            assert!(
                response.contains("control socket")
                    && response.contains(&sandbox.path("state/tend.sock").display().to_string()),
                "the refusal names the socket: {response}"
            );
        }
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    let after = plugin_status(port, "chaos");
    assert_eq!(
        after["reconciles"], failing["reconciles"],
        "no reconcile ran: the backoff was not skipped"
    );
    assert_eq!(after["failures"], failing["failures"]);
    assert!(journal(&sandbox).is_empty(), "no plan was journaled");
    // The read-only endpoints still answer.
    assert_eq!(http_get(port, "/healthz").unwrap().0, 200);
}

#[test]
fn the_control_socket_is_0600_and_tend_reconcile_and_plan_use_it() {
    let sandbox = Sandbox::new();
    let port = chaos(&sandbox, "", "", "", "mode = \"ok\"");
    let daemon = sandbox.daemon();
    wait_for_plugin(port, "chaos", "its startup run", |p| p["reconciles"] == 1);
    let socket = sandbox.path("state/tend.sock");
    let meta = std::fs::metadata(&socket).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);

    let by = format!("by the tend daemon at {}", socket.display());
    let run = sandbox.tend(&["reconcile", "chaos"]);
    assert!(run.success, "{run:?}");
    assert!(
        run.stdout.starts_with("chaos: healthy: run 2"),
        "the daemon's state store counted it: {}",
        run.stdout
    );
    assert!(run.stdout.contains(&by), "{}", run.stdout);
    let plan = sandbox.tend(&["plan", "chaos"]);
    assert!(plan.success && plan.stdout.contains(&by), "{plan:?}");
    assert_eq!(
        plugin_status(port, "chaos")["reconciles"],
        2,
        "a plan is not a reconcile"
    );

    assert!(
        is_root(),
        "this test runs a command as another user (setpriv): run it as root, as CI does"
    );
    {
        // Another user reaches the socket's directory but not the socket.
        for dir in [sandbox.dir.path().to_path_buf(), sandbox.path("state")] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let nobody = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(tend_e2e::tend_bin())
            .args(["reconcile", "chaos", "-c"])
            .arg(sandbox.path("tend.toml"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&nobody.stderr);
        assert!(!nobody.status.success());
        assert!(
            stderr.contains("permission denied") && stderr.contains("mode 0600"),
            "{stderr}"
        );
        assert_eq!(plugin_status(port, "chaos")["reconciles"], 2);
    }
    // A clean stop removes the socket: commands then run in-process.
    assert!(daemon.terminate(Duration::from_secs(10)));
    assert!(!socket.exists());
    let run = sandbox.tend(&["reconcile", "chaos"]);
    assert!(
        run.success && !run.stdout.contains("by the tend daemon"),
        "{run:?}"
    );
}

#[test]
fn idle_connections_cannot_starve_plugins_of_file_descriptors_or_spin_the_daemon() {
    let sandbox = Sandbox::new();
    let out = sandbox.path("out");
    std::fs::create_dir_all(&out).unwrap();
    let port = chaos(
        &sandbox,
        "interval = \"300ms\"",
        &format!("files = [{{ path = \"{}\", write = true }}]", out.display()),
        "",
        &format!(
            "mode = \"burst\"\ndir = \"{}\"\nfiles = 3\nsize = 10",
            out.display()
        ),
    );
    let daemon = sandbox.daemon();
    wait_for_plugin(port, "chaos", "a few runs", |p| {
        p["reconciles"].as_u64() >= Some(3)
    });
    // A small descriptor limit, as on a busy node: 400 idle connections are
    // far more than it allows.
    let limited = std::process::Command::new("prlimit")
        .arg(format!("--pid={}", daemon.pid()))
        .arg("--nofile=256:256")
        .status()
        .unwrap();
    assert!(limited.success());
    let before = plugin_status(port, "chaos")["reconciles"].as_u64().unwrap();

    // The attack: 400 connections that never send a byte, held open.
    let cpu_before = cpu_seconds(daemon.pid());
    let window = Instant::now();
    let idle: Vec<std::net::TcpStream> = (0..400)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    // /status answers over a fresh connection once the idle ones in the cap
    // time out (5 s after they connected), while all 400 are still held.
    let mut answered = None;
    wait_until(
        Duration::from_secs(20),
        "/status over a fresh connection",
        || match http_get(port, "/status") {
            Ok((200, body)) => {
                answered = Some((window.elapsed(), body));
                true
            }
            _ => false,
        },
    );
    let (after, body) = answered.unwrap();
    assert!(
        after < Duration::from_secs(12),
        "/status answered after {after:?}"
    );
    assert!(body.contains("\"chaos\""));
    let reconciles_then = plugin_status(port, "chaos")["reconciles"].as_u64().unwrap();
    assert!(
        reconciles_then >= before + 10,
        "the plugin kept its 300 ms schedule: {before} -> {reconciles_then}"
    );
    let cpu = (cpu_seconds(daemon.pid()) - cpu_before) / window.elapsed().as_secs_f64();
    eprintln!(
        "400 idle connections: /status answered after {after:?}; tend used {:.1} % of a core",
        cpu * 100.0
    );
    assert!(cpu < 0.35, "tend spun at {:.0} % of a core", cpu * 100.0);
    drop(idle);
    // Every file operation succeeded: no failed reconcile, no EMFILE.
    let status = plugin_status(port, "chaos");
    assert_eq!(status["failures"], 0, "{status:#}");
    assert_eq!(status["state"], "ready");
    let log = daemon.log();
    assert_eq!(daemon.count(&["reconcile failed"]), 0, "{log}");
    assert!(!log.contains("Too many open files"), "{log}");
}

#[test]
fn a_plan_flood_cannot_rotate_away_real_history() {
    let sandbox = Sandbox::new();
    let out = sandbox.path("out");
    std::fs::create_dir_all(&out).unwrap();
    // Each reconcile writes 250 files with 200-byte names: ~140 KB of journal.
    let port = chaos(
        &sandbox,
        "",
        &format!("files = [{{ path = \"{}\", write = true }}]", out.display()),
        "",
        &format!(
            "mode = \"flood\"\ndir = \"{}\"\ncount = 250\nname-len = 200",
            out.display()
        ),
    );
    let _daemon = sandbox.daemon();
    wait_for_plugin(port, "chaos", "its startup run", |p| p["reconciles"] == 1);
    let real = |entries: &[serde_json::Value]| {
        entries
            .iter()
            .filter(|e| e["dry_run"] == false && e["result"] == "ok")
            .count()
    };
    assert_eq!(real(&journal(&sandbox)), 250, "the real history");
    // The attack: plans until their journal lines add up to more than the
    // whole rotation of a plugin's journal (3 x 4 MiB).
    std::fs::remove_dir_all(&out).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    for _ in 0..100 {
        let (status, response) = post_socket(&sandbox, "/plan/chaos");
        assert_eq!(status, 200, "{response}");
    }
    let entries = journal(&sandbox);
    let line = entries
        .iter()
        .find(|e| e["dry_run"] == true)
        .map(|e| e.to_string().len() + 1)
        .unwrap();
    let flooded = 100 * 250 * line;
    assert!(
        flooded > 3 * (4 << 20),
        "the flood outweighs a plugin's whole journal (3 x 4 MiB): {flooded} bytes"
    );
    assert_eq!(real(&entries), 250, "every real entry is still there");
    let planned = entries.iter().filter(|e| e["dry_run"] == true).count();
    assert!(planned >= 250, "plans are journaled and shown: {planned}");
    let dir_bytes = |dir: &str| -> u64 {
        std::fs::read_dir(sandbox.path(dir))
            .unwrap()
            .filter_map(|e| e.ok()?.metadata().ok())
            .filter(|m| m.is_file())
            .map(|m| m.len())
            .sum()
    };
    let plans = dir_bytes("state/journal/plans");
    eprintln!(
        "100 plans of 250 writes: {flooded} bytes of plan lines; plan journal {plans} bytes, real journal {} bytes, {planned} plan entries shown",
        dir_bytes("state/journal")
    );
    assert!(
        plans <= 3 << 20,
        "the plan journal is bounded: {plans} bytes"
    );
    assert!(
        !sandbox.path("state/journal/chaos.jsonl.1").exists(),
        "the real journal never rotated"
    );
}

#[test]
fn manual_reconciles_are_rate_limited_per_plugin() {
    // A healthy plugin: at most one manual reconcile a second.
    let sandbox = Sandbox::new();
    let port = chaos(&sandbox, "", "", "", "mode = \"ok\"");
    let daemon = sandbox.daemon();
    wait_for_plugin(port, "chaos", "its startup run", |p| p["reconciles"] == 1);
    // The attack: 20 manual reconciles in 0.2 s through the control socket.
    // Each answer with when it came: on a loaded machine the burst may take
    // longer than the 1 s limit, which then allows one more per second.
    let burst = |sandbox: &Sandbox| -> Vec<(Instant, u16, String)> {
        (0..20)
            .map(|_| {
                let (status, body) = post_socket(sandbox, "/reconcile/chaos");
                std::thread::sleep(Duration::from_millis(10));
                (Instant::now(), status, body)
            })
            .collect()
    };
    let started = Instant::now();
    let answers = burst(&sandbox);
    let allowed = 1 + started.elapsed().as_secs() as usize;
    let ran: Vec<Instant> = answers
        .iter()
        .filter(|(_, status, _)| *status == 200)
        .map(|(at, _, _)| *at)
        .collect();
    assert!(
        !ran.is_empty() && ran.len() <= allowed,
        "{} ran, at most {allowed} allowed: {answers:#?}",
        ran.len()
    );
    for (_, status, response) in answers.iter().filter(|(_, s, _)| *s != 200) {
        assert_eq!(*status, 429, "{response}");
        assert!(
            response.contains("at most one manual reconcile every 1s: retry in")
                && response.to_lowercase().contains("retry-after: 1"),
            "{response}"
        );
    }
    let cli_started = Instant::now();
    let cli = sandbox.tend(&["reconcile", "chaos"]);
    let last_ran = *ran.last().unwrap();
    if cli_started.duration_since(last_ran) < Duration::from_millis(900) {
        assert!(!cli.success, "within 1 s of the last manual run: {cli:?}");
        assert!(
            cli.stderr.contains("429") && cli.stderr.contains("retry in"),
            "{cli:?}"
        );
    }
    assert_eq!(
        plugin_status(port, "chaos")["reconciles"].as_u64(),
        Some(1 + ran.len() as u64 + u64::from(cli.success)),
        "the startup run, the manual runs admitted, and nothing else"
    );
    drop(daemon);

    // A failing plugin: a manual reconcile cuts its backoff short once; the
    // next waits for the backoff, however many arrive.
    let sandbox = Sandbox::new();
    let port = chaos(&sandbox, "", "", "", "mode = \"fail\"");
    let _daemon = sandbox.daemon();
    let failing = wait_for_plugin(port, "chaos", "its startup failure", |p| {
        p["state"] == "failing"
    });
    let answers = burst(&sandbox);
    assert_eq!(
        answers[0].1, 200,
        "the first skips the backoff: {}",
        answers[0].2
    );
    for (_, status, response) in &answers[1..] {
        assert_eq!(*status, 429, "{response}");
        assert!(
            response.contains("already cut this backoff short: retry in"),
            "{response}"
        );
    }
    let after = plugin_status(port, "chaos");
    assert_eq!(
        after["reconciles"].as_u64(),
        failing["reconciles"].as_u64().map(|n| n + 1),
        "one manual run"
    );
    assert_eq!(after["failures"], 2);
}

#[test]
fn a_huge_outcome_message_every_second_keeps_the_log_and_status_small() {
    let sandbox = Sandbox::new();
    // 4 MiB a message, a reconcile a second; the log budget of 16 KiB a
    // minute holds about four of the (cut) messages.
    let port = chaos(
        &sandbox,
        "",
        "",
        "log-bytes-per-minute = \"16KiB\"",
        "mode = \"outcome\"\ntext = \"x\"\nrepeat = 4194304\nrequeue-ms = 1000",
    );
    let daemon = sandbox.daemon();
    wait_for_plugin(port, "chaos", "six reconciles", |p| {
        p["reconciles"].as_u64() >= Some(6)
    });
    let log_bytes = std::fs::metadata(sandbox.path("tend.log")).unwrap().len();
    let (status, body) = http_get(port, "/status").unwrap();
    assert_eq!(status, 200);
    let (_, detail) = http_get(port, "/status/chaos").unwrap();
    eprintln!(
        "6 x 4 MiB outcome messages: daemon log {log_bytes} bytes, /status {} bytes, /status/chaos {} bytes",
        body.len(),
        detail.len()
    );
    assert!(log_bytes < 64 * 1024, "the log grew by {log_bytes} bytes");
    assert!(body.len() < 16 * 1024, "/status is {} bytes", body.len());
    assert!(
        detail.len() < 32 * 1024,
        "/status/chaos is {} bytes",
        detail.len()
    );
    let message = plugin_status(port, "chaos")["last"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.len() <= 4096, "{}", message.len());
    assert!(
        message.ends_with("… (cut: 4194304 bytes)"),
        "{}",
        &message[4000..]
    );
    // The outcome lines spent the plugin's log budget; then they say so.
    assert!(
        daemon.count(&["bytes not logged: the plugin's log budget per minute is spent"]) >= 1,
        "{}",
        daemon.log()
    );
    let shown = sandbox.tend(&["status", "chaos"]);
    assert!(
        shown.success && shown.stdout.len() < 16 * 1024,
        "{}",
        shown.stdout.len()
    );
}

#[test]
fn plugin_text_reaches_no_terminal_raw() {
    let sandbox = Sandbox::new();
    let hostile = r#"\u001b]0;pwned\u0007\u001b[2J\rFORGED\u009b31m"#;
    let port = chaos(
        &sandbox,
        "",
        "",
        "",
        &format!("mode = \"outcome\"\ntext = \"{hostile}\""),
    );
    let daemon = sandbox.daemon();
    wait_for_plugin(port, "chaos", "its startup run", |p| p["reconciles"] == 1);
    for args in [
        &["status"][..],
        &["status", "chaos"],
        &["status", "--json"],
        &["status", "chaos", "--json"],
        &["reconcile", "chaos"],
        &["plan", "chaos"],
    ] {
        let out = sandbox.tend(args);
        assert!(out.success, "{args:?}: {out:?}");
        assert!(out.stdout.contains("FORGED"), "{args:?}: {}", out.stdout);
        assert!(
            !has_raw_controls(&out.stdout) && !has_raw_controls(&out.stderr),
            "{args:?} printed raw control characters: {:?}",
            out.stdout
        );
    }
    let json = sandbox.tend(&["status", "chaos", "--json"]);
    let parsed: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert!(
        parsed["last"]["message"]
            .as_str()
            .unwrap()
            .contains("\u{1b}]0;pwned\u{7}"),
        "--json still carries the text itself, escaped the JSON way"
    );
    assert!(!has_raw_controls(&daemon.log()), "{:?}", daemon.log());
}

#[test]
fn a_plugin_cannot_create_a_file_named_with_control_characters_and_no_log_line_is_forged() {
    let sandbox = Sandbox::new();
    let watched = sandbox.path("watched");
    std::fs::create_dir_all(&watched).unwrap();
    let forged = "x\nFORGED-LINE INFO tend: all good\u{1b}]0;pwned\u{7}";
    let port = chaos(
        &sandbox,
        &format!("watch = [\"{}\"]", watched.display()),
        &format!(
            "files = [{{ path = \"{}\", write = true }}]",
            watched.display()
        ),
        "",
        &format!(
            "mode = \"write\"\npath = {}\ncontent = \"x\"",
            serde_json::to_string(&format!("{}/{forged}", watched.display())).unwrap()
        ),
    );
    let daemon = sandbox.daemon();
    let failed = wait_for_plugin(port, "chaos", "its startup run", |p| p["reconciles"] == 1);
    let message = failed["last"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("invalid: ") && message.contains("control character U+000A"),
        "{message}"
    );
    let names: Vec<String> = std::fs::read_dir(&watched)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.is_empty(), "the plugin created {names:?}");

    // Someone else creates such a file in the watched dir: its name becomes a
    // trigger subject, which reaches the log inert.
    std::fs::write(watched.join(forged), "x").unwrap();
    wait_for_plugin(port, "chaos", "the file trigger", |p| p["reconciles"] == 2);
    daemon.wait_for_log(Duration::from_secs(5), &["trigger=file:", "\\nFORGED-LINE"]);
    let log = daemon.log();
    assert!(
        !log.lines().any(|l| l.starts_with("FORGED-LINE")),
        "a forged log line: {log}"
    );
    assert!(!has_raw_controls(&log), "{log:?}");
}
