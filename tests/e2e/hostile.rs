//! A hostile plugin (the test-only `chaos` plugin in its hostile modes) run by
//! the real `tend`: each test is one attack that once broke the host, and
//! fails if the defence is removed. See docs/security.md.

use std::time::{Duration, Instant};
use tend_e2e::{
    Registry, Sandbox, free_port, journal, plugin_detail, plugin_status, wait_for_plugin,
    wait_until,
};

/// Chaos as `name` with `grants` and `limits` TOML lines and a config table.
fn chaos(sandbox: &Sandbox, grants: &str, limits: &str, config: &str) {
    sandbox.add_plugin("chaos", "chaos").config(&format!(
        "[plugins.chaos]\n[plugins.chaos.grants]\n{grants}\n[plugins.chaos.limits]\n{limits}\n[plugins.chaos.config]\n{config}\n"
    ));
}

/// A FIFO in the sandbox: an open for reading blocks until a writer comes.
fn fifo(sandbox: &Sandbox, rel: &str) -> std::path::PathBuf {
    let fifo = sandbox.path(rel);
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    fifo
}

fn dir_grant(sandbox: &Sandbox, dir: &str) -> String {
    let path = sandbox.path(dir);
    std::fs::create_dir_all(&path).unwrap();
    format!(
        "files = [{{ path = \"{}\", write = true }}]",
        path.display()
    )
}

#[test]
fn setuid_setgid_and_sticky_bits_are_refused() {
    let sandbox = Sandbox::new();
    let target = sandbox.path("out/sh");
    chaos(
        &sandbox,
        &dir_grant(&sandbox, "out"),
        "",
        &format!(
            "mode = \"write\"\npath = \"{}\"\ncontent = \"#!/bin/sh\"\nfile-mode = {}",
            target.display(),
            0o4755
        ),
    );
    let out = sandbox.tend(&["reconcile", "chaos"]);
    assert!(!out.success);
    assert!(
        out.stdout.contains("mode 4755 has bits beyond 0o777"),
        "{}",
        out.stdout
    );
    assert!(!target.exists());
}

#[test]
fn ip_patterns_match_ip_literals_only_and_ranges_need_the_cidr_form() {
    let registry = Registry::start();
    let port = registry.port;
    let sandbox = Sandbox::new();
    let get = |grant: &str, url: &str| {
        chaos(
            &sandbox,
            &format!("http = [\"{grant}\"]"),
            "",
            &format!("mode = \"get\"\nurl = \"{url}\""),
        );
        sandbox.tend(&["reconcile", "chaos"])
    };
    let exact = format!("http://127.0.0.1:{port}/*");
    let by_name = get(&exact, &format!("http://localhost:{port}/v2/"));
    assert!(
        by_name.stdout.contains("denied: GET http://localhost"),
        "{}",
        by_name.stdout
    );
    let decimal = get(&exact, &format!("http://2130706433:{port}/v2/"));
    assert!(
        decimal.stdout.contains("got: 200"),
        "the decimal form is 127.0.0.1: {}",
        decimal.stdout
    );
    let range = get(
        "http://127.0.0.0/8:*/*",
        &format!("http://127.0.0.1:{port}/v2/"),
    );
    assert!(range.stdout.contains("got: 200"), "{}", range.stdout);
    let outside = get(
        "http://10.0.0.0/8:*/*",
        &format!("http://127.0.0.1:{port}/v2/"),
    );
    assert!(outside.stdout.contains("denied"), "{}", outside.stdout);
    chaos(
        &sandbox,
        "http = [\"http://127.0.0.*:18080/*\"]",
        "",
        "mode = \"noop\"",
    );
    let check = sandbox.tend(&["check"]);
    assert!(!check.success);
    assert!(
        check.stderr.contains("tend.toml:9:8: invalid URL pattern"),
        "names the place: {}",
        check.stderr
    );
    assert!(
        check.stderr.contains("write a CIDR"),
        "points at the CIDR form: {}",
        check.stderr
    );
}

#[test]
fn encoded_separators_cannot_climb_out_of_a_granted_path() {
    let registry = Registry::start();
    let sandbox = Sandbox::new();
    chaos(
        &sandbox,
        "http = [\"http://127.0.0.1:*/v2/*\"]",
        "",
        &format!(
            "mode = \"get\"\nurl = \"http://127.0.0.1:{}/v2/..%2fsecret\"",
            registry.port
        ),
    );
    let out = sandbox.tend(&["reconcile", "chaos"]);
    assert!(!out.success);
    assert!(out.stdout.contains("invalid:"), "{}", out.stdout);
    assert!(out.stdout.to_lowercase().contains("%2f"), "{}", out.stdout);
}

#[test]
fn a_journal_flood_is_capped_and_cannot_evict_another_plugins_history() {
    let sandbox = Sandbox::new();
    sandbox
        .add_plugin("chaos", "quiet")
        .add_plugin("chaos", "loud");
    let quiet_file = sandbox.path("quiet/precious");
    let config = |name_len: usize| {
        format!(
            "[plugins.quiet]\n[plugins.quiet.grants]\n{}\n[plugins.quiet.config]\nmode = \"write\"\npath = \"{}\"\ncontent = \"x\"\n\
             [plugins.loud]\n[plugins.loud.grants]\n{}\n[plugins.loud.config]\nmode = \"flood\"\ndir = \"{}\"\ncount = 2000\nname-len = {name_len}\n",
            dir_grant(&sandbox, "quiet"),
            quiet_file.display(),
            dir_grant(&sandbox, "loud"),
            sandbox.path("loud").display(),
        )
    };
    sandbox.config(&config(200));
    assert!(sandbox.tend(&["reconcile", "quiet"]).success);
    for run in 0..5 {
        // Each run writes new content, so each write is a mutation.
        std::fs::remove_dir_all(sandbox.path("loud")).unwrap();
        std::fs::create_dir_all(sandbox.path("loud")).unwrap();
        let out = sandbox.tend(&["reconcile", "loud"]);
        assert!(
            out.stdout.contains("\"budget-exhausted\": 1744"),
            "run {run}: {}",
            out.stdout
        );
    }
    // Names past the 255-byte component limit never reach the journal.
    sandbox.config(&config(60_000));
    let out = sandbox.tend(&["reconcile", "loud"]);
    assert!(out.stdout.contains("\"invalid\": 2000"), "{}", out.stdout);
    let entries = journal(&sandbox);
    assert!(
        entries
            .iter()
            .any(|e| e["plugin"] == "quiet" && e["target"] == quiet_file.display().to_string())
    );
    let loud = entries.iter().filter(|e| e["plugin"] == "loud").count();
    assert!(loud <= 5 * 256, "at most `mutations` per reconcile: {loud}");
    let total: u64 = std::fs::read_dir(sandbox.path("state/journal"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(total < 16 << 20, "the journal stays bounded: {total} bytes");
}

#[test]
fn a_fifo_never_blocks_and_a_late_write_is_journaled_before_the_report() {
    let sandbox = Sandbox::new();
    let grant = dir_grant(&sandbox, "d");
    let fifo = fifo(&sandbox, "d/fifo");
    chaos(
        &sandbox,
        &grant,
        "timeout = \"10s\"",
        &format!("mode = \"read\"\npath = \"{}\"", fifo.display()),
    );
    let started = Instant::now();
    let out = sandbox.tend(&["reconcile", "chaos"]);
    assert!(
        out.stdout.contains("is not a regular file"),
        "{}",
        out.stdout
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the open did not block"
    );

    // Large writes until the deadline: it lands in a write on the blocking
    // pool (1 MB each: the one in flight ends within the grace even on a
    // loaded disk, where a 20 MB write once outlasted it on a cold CI run and
    // a 4 MB one beside the whole suite and two builds). The report waits for
    // that write, and the journal has its real result: no write on disk is
    // journaled as interrupted, none is missing.
    let burst = sandbox.path("d/burst");
    std::fs::create_dir_all(&burst).unwrap();
    chaos(
        &sandbox,
        &grant,
        "timeout = \"2s\"\nmemory = \"256MiB\"",
        &format!(
            "mode = \"burst\"\ndir = \"{}\"\nfiles = 8000\nsize = 1000000",
            burst.display()
        ),
    );
    let started = Instant::now();
    let out = sandbox.tend(&["reconcile", "chaos"]);
    let took = started.elapsed();
    assert!(
        out.stdout.contains("deadline of 2s exceeded"),
        "{}",
        out.stdout
    );
    assert!(
        took < Duration::from_secs(2 + 3 + 2),
        "deadline plus grace: {took:?}"
    );
    let writes: Vec<_> = journal(&sandbox)
        .into_iter()
        .filter(|e| e["operation"] == "write")
        .collect();
    assert!(!writes.is_empty());
    // On a disk busy enough (an fsync behind other processes' writes), the
    // write in flight can outlast the grace: the one-shot report cannot wait
    // for it, and journals it as interrupted, but only that one, and only
    // after waiting the whole grace. One the deadline cut between its
    // journaled intent and its start wrote nothing (files are written by
    // rename): it is interrupted at once, and no file of it appears.
    let (writes, cut): (Vec<_>, Vec<_>) = writes.into_iter().partition(|w| w["result"] == "ok");
    assert!(cut.len() <= 1, "only the write in flight: {cut:?}");
    for write in &cut {
        assert!(
            write["result"].as_str().unwrap().starts_with("interrupted"),
            "{write}"
        );
        let written = std::path::Path::new(write["target"].as_str().unwrap()).exists();
        assert!(
            !written || took >= Duration::from_secs(2 + 3),
            "a write that happened is journaled as interrupted only after the grace: {took:?}"
        );
    }
    for write in &writes {
        let target = write["target"].as_str().unwrap();
        assert_eq!(
            std::fs::metadata(target).unwrap().len(),
            1_000_000,
            "{target}"
        );
    }
    let on_disk = std::fs::read_dir(&burst)
        .unwrap()
        .filter(|e| {
            !e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with('.')
        })
        .count();
    assert!(
        (writes.len()..=writes.len() + cut.len()).contains(&on_disk),
        "every file on disk is journaled: {on_disk} files, {} writes",
        writes.len()
    );
}

/// SIGTERM arrives while a reconcile spins in compute (chaos `loop`, which
/// never returns and calls nothing): the daemon lets that reconcile end (its
/// 2 s deadline cuts it, and its failure is logged) before it stops, and exits
/// 0 within the deadline plus the grace.
#[test]
fn sigterm_ends_the_daemon_within_the_deadline_and_grace_whatever_the_plugin_does() {
    let sandbox = Sandbox::new();
    let port = free_port();
    sandbox.add_plugin("chaos", "chaos").config_with_host(
        &format!("listen = \"127.0.0.1:{port}\""),
        "[plugins.chaos]\ninterval = \"100ms\"\n[plugins.chaos.limits]\ntimeout = \"2s\"\n[plugins.chaos.config]\nmode = \"loop\"\n",
    );
    let daemon = sandbox.daemon();
    wait_until(Duration::from_secs(60), "a reconcile running", || {
        plugin_detail(port, "chaos")["schedule"]["running"] == true
    });
    let started = Instant::now();
    let (exited_0, log) = daemon.terminate_logged(Duration::from_secs(2 + 3 + 3));
    assert!(exited_0, "{log}");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2 + 3), "{took:?}");
    // The reconcile in flight was not abandoned: its end (cut by the deadline)
    // is logged after the daemon began stopping, and before it stopped.
    let lines: Vec<&str> = log.lines().collect();
    let after = |from: usize, needle: &str| {
        from + lines[from..]
            .iter()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no log line with {needle:?} after line {from}:\n{log}"))
    };
    let stopping = after(0, "stopping: letting reconciles in flight finish");
    let cut = after(stopping, "reconcile failed: deadline of 2s exceeded");
    after(cut, "tend::daemon: stopped");
}

/// A 2 GiB (sparse) file read through a grant: the read is refused past
/// `read-per-call` (16 MiB), and the daemon's peak memory grows by at most
/// a few times that over the same daemon reading a small file (a ratio to
/// a baseline of the same build, not an absolute bound a debug build or
/// an allocator could move).
#[test]
fn host_memory_stays_bounded_when_a_plugin_reads_a_huge_sparse_file() {
    let sandbox = Sandbox::new();
    let grant = dir_grant(&sandbox, "d");
    let sparse = sandbox.path("d/sparse");
    std::fs::File::create(&sparse)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    let small = sandbox.path("d/small");
    std::fs::write(&small, b"small").unwrap();
    sandbox.add_plugin("chaos", "chaos");
    // The daemon's peak resident memory (KiB) once the plugin read `path`,
    // and the read's outcome.
    let peak_after_reading = |path: &std::path::Path| -> (u64, String) {
        let port = free_port();
        sandbox.config_with_host(
            &format!("listen = \"127.0.0.1:{port}\""),
            &format!("[plugins.chaos]\n[plugins.chaos.grants]\n{grant}\n[plugins.chaos.config]\nmode = \"read\"\npath = \"{}\"\n", path.display()),
        );
        let daemon = sandbox.daemon();
        let status = wait_for_plugin(port, "chaos", "the read", |p| p["reconciles"] == 1);
        let proc_status =
            std::fs::read_to_string(format!("/proc/{}/status", daemon.pid())).unwrap();
        let peak_kib: u64 = proc_status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .unwrap();
        assert!(daemon.terminate(Duration::from_secs(10)));
        (
            peak_kib,
            status["last"]["message"].as_str().unwrap().to_string(),
        )
    };
    let (baseline_kib, _) = peak_after_reading(&small);
    let (peak_kib, message) = peak_after_reading(&sparse);
    assert!(
        message.contains("raise [plugins.chaos.limits] read-per-call (now 16.0 MiB)"),
        "{message}"
    );
    assert!(
        peak_kib < baseline_kib + 4 * 16 * 1024,
        "peak RSS {peak_kib} KiB reading 2 GiB, {baseline_kib} KiB reading 5 bytes"
    );
}

#[test]
fn state_is_bounded_per_plugin() {
    let sandbox = Sandbox::new();
    chaos(
        &sandbox,
        "",
        "",
        "mode = \"state-flood\"\ncount = 300\nsize = 1048576",
    );
    for _ in 0..2 {
        let out = sandbox.tend(&["reconcile", "chaos"]);
        assert!(
            out.stdout
                .contains("raise [plugins.chaos.limits] state-bytes (now 16.0 MiB)"),
            "{}",
            out.stdout
        );
    }
    let size = std::fs::metadata(sandbox.path("state/state.redb"))
        .unwrap()
        .len();
    assert!(size < 64 << 20, "state.redb is {size} bytes");
}

#[test]
fn log_floods_and_requeue_spins_are_bounded() {
    let sandbox = Sandbox::new();
    let port = free_port();
    sandbox.add_plugin("chaos", "chaos").config_with_host(
        &format!("listen = \"127.0.0.1:{port}\""),
        "[plugins.chaos]\n[plugins.chaos.config]\nmode = \"log-flood\"\nlines = 200000\ntext = \"\"\n",
    );
    let daemon = sandbox.daemon();
    wait_for_plugin(port, "chaos", "the flood", |p| p["reconciles"] == 1);
    daemon.wait_for_log(Duration::from_secs(10), &["plugin log lines dropped"]);
    // The plugin's own lines carry the field plugin="chaos" (the host's carry
    // only the span's plugin=chaos).
    let lines = daemon.count(&["plugin=\"chaos\""]);
    assert!(lines <= 1000 + 20, "{lines} plugin lines logged");
    assert!(daemon.terminate(Duration::from_secs(10)));

    // requeue-after of 0 ms waits the shortest requeue (1 s by default).
    sandbox.config_with_host(
        &format!("listen = \"127.0.0.1:{port}\""),
        "[plugins.chaos]\n[plugins.chaos.config]\nmode = \"requeue\"\nms = 0\n",
    );
    let daemon = sandbox.daemon();
    wait_for_plugin(port, "chaos", "its first run", |p| p["reconciles"] == 1);
    let first = Instant::now();
    wait_until(Duration::from_secs(30), "two requeued runs", || {
        plugin_status(port, "chaos")["reconciles"].as_u64() >= Some(3)
    });
    assert!(
        first.elapsed() >= Duration::from_millis(1900),
        "{:?}",
        first.elapsed()
    );
    assert!(daemon.terminate(Duration::from_secs(10)));
}

#[test]
fn plugin_text_cannot_forge_log_lines_or_drive_a_terminal() {
    let sandbox = Sandbox::new();
    let port = free_port();
    sandbox.add_plugin("chaos", "chaos").config_with_host(
        &format!("listen = \"127.0.0.1:{port}\""),
        "[plugins.chaos]\n[plugins.chaos.config]\nmode = \"log\"\nmessage = \"ok\\nFORGED tend: all plugins healthy\"\n",
    );
    let daemon = sandbox.daemon();
    daemon.wait_for_log(Duration::from_secs(30), &["FORGED"]);
    assert!(
        !daemon.log().lines().any(|l| l.starts_with("FORGED")),
        "{}",
        daemon.log()
    );
    assert!(daemon.log().contains("ok\\nFORGED"), "{}", daemon.log());
    assert!(daemon.terminate(Duration::from_secs(10)));

    let grant = dir_grant(&sandbox, "d");
    let evil = format!("{}/\u{1b}[2Jx", sandbox.path("d").display());
    chaos(
        &sandbox,
        &grant,
        "",
        &format!(
            "mode = \"write\"\npath = \"{}\"\ncontent = \"x\"",
            evil.replace('\u{1b}', "\\u001b")
        ),
    );
    // Such a name is refused outright (hostile_daemon.rs has the daemon's side);
    // the refusal names it inert.
    let plan = sandbox.tend(&["plan"]);
    assert!(
        plan.stdout.contains("invalid: ") && plan.stdout.contains("U+001B"),
        "{}",
        plan.stdout
    );
    assert!(!plan.stdout.contains('\u{1b}'), "{:?}", plan.stdout);
    assert!(plan.stdout.contains("\\u{1b}[2Jx"), "{}", plan.stdout);
    // A journal line holding one (written by an older Tend) is shown inert.
    let line = serde_json::json!({
        "time": "2026-01-01T00:00:00.000Z", "time_ms": 1, "plugin": "chaos",
        "digest": "sha256:x", "triggers": ["manual"], "capability": "files",
        "operation": "write", "target": evil, "detail": "\u{7}", "dry_run": false,
        "result": "ok",
    });
    std::fs::create_dir_all(sandbox.path("state/journal")).unwrap();
    std::fs::write(
        sandbox.path("state/journal/chaos.jsonl"),
        format!("{line}\n"),
    )
    .unwrap();
    let shown = sandbox.tend(&["journal"]);
    assert!(
        !shown.stdout.contains('\u{1b}') && shown.stdout.contains("\\u{1b}"),
        "{:?}",
        shown.stdout
    );
    assert!(!shown.stdout.contains('\u{7}'), "{:?}", shown.stdout);
}

#[test]
fn tends_own_proc_entries_and_inner_read_only_grants_hold() {
    let sandbox = Sandbox::new();
    chaos(
        &sandbox,
        "files = [{ path = \"/proc\" }]",
        "",
        "mode = \"read\"\npath = \"/proc/self/environ\"",
    );
    let out = sandbox.tend(&["reconcile", "chaos"]);
    assert!(out.stdout.contains("denied:"), "{}", out.stdout);
    assert!(out.stdout.contains("never granted"), "{}", out.stdout);

    let outer = sandbox.path("etc");
    std::fs::create_dir_all(outer.join("ro")).unwrap();
    chaos(
        &sandbox,
        &format!(
            "files = [{{ path = \"{o}\", write = true }}, {{ path = \"{o}/ro\" }}]",
            o = outer.display()
        ),
        "",
        &format!(
            "mode = \"write\"\npath = \"{}/ro/x\"\ncontent = \"x\"",
            outer.display()
        ),
    );
    let out = sandbox.tend(&["reconcile", "chaos"]);
    assert!(
        out.stdout.contains("is granted read-only by"),
        "{}",
        out.stdout
    );
    assert!(!outer.join("ro/x").exists());
}

#[test]
fn metric_series_are_bounded_per_plugin_and_carry_the_plugins_own_name() {
    let sandbox = Sandbox::new();
    let port = free_port();
    sandbox.add_plugin("chaos", "chaos").config_with_host(
        &format!("listen = \"127.0.0.1:{port}\""),
        "[plugins.chaos]\n[plugins.chaos.config]\nmode = \"metrics-flood\"\ncount = 100000\n",
    );
    let daemon = sandbox.daemon();
    wait_for_plugin(port, "chaos", "the flood", |p| {
        p["last"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("then budget-exhausted"))
    });
    let status = plugin_status(port, "chaos");
    assert!(
        status["last"]["message"]
            .as_str()
            .unwrap()
            .starts_with("recorded 64 series, then budget-exhausted"),
        "{status}"
    );
    let (_, metrics) = tend_e2e::http_get(port, "/metrics").unwrap();
    let series = metrics
        .lines()
        .filter(|l| l.starts_with("tend_plugin_flood{plugin=\"chaos\",series="))
        .count();
    assert_eq!(series, 64, "{metrics}");
    assert!(daemon.terminate(Duration::from_secs(10)));
}

#[test]
fn one_send_all_cannot_open_more_than_32_connections() {
    let registry = Registry::start();
    let sandbox = Sandbox::new();
    let url = format!("http://127.0.0.1:{}/v2/", registry.port);
    let send_all = |count: usize| {
        chaos(
            &sandbox,
            &format!("http = [\"http://127.0.0.1:{}/*\"]", registry.port),
            "",
            &format!("mode = \"send-all\"\nurl = \"{url}\"\ncount = {count}"),
        );
        sandbox.tend(&["reconcile", "chaos"]).stdout
    };
    let within = send_all(32);
    assert!(within.contains("32 answered, 0 failed"), "{within}");
    let over = send_all(33);
    assert!(
        over.contains("0 answered, 33 failed: invalid: send-all takes at most 32 requests, got 33: split the call"),
        "{over}"
    );
}

#[test]
fn cri_grants_hold_before_the_runtime_is_reached() {
    let sandbox = Sandbox::new();
    // Nothing listens here: a call that got past the grants would say unavailable.
    let socket = sandbox.path("no-runtime.sock");
    let pull = |grant: &str, limits: &str, image: &str, timeout_ms: u64| {
        sandbox.add_plugin("chaos", "chaos").config_with_host(
            &format!("[host.cri]\nendpoint = \"unix://{}\"", socket.display()),
            &format!(
                "[plugins.chaos]\n[plugins.chaos.grants]\n{grant}\n[plugins.chaos.limits]\n{limits}\n[plugins.chaos.config]\nmode = \"pull\"\nimage = \"{image}\"\ntimeout-ms = {timeout_ms}\n"
            ),
        );
        sandbox.tend(&["reconcile", "chaos"]).stdout
    };
    let granted =
        "cri = { read = true, operations = [\"pull-image\"], images = [\"docker.io/library/*\"] }";
    let out = pull("", "", "busybox", 1000);
    assert!(
        out.contains("list: denied: cri list-pod-sandboxes is not granted: set read = true in [plugins.chaos.grants] cri"),
        "{out}"
    );
    assert!(
        out.contains(
            "pull: denied: cri pull-image of docker.io/library/busybox:latest is not granted"
        ),
        "{out}"
    );
    // A path component more than the pattern says, a climb, a short name for
    // another registry: each refused before the socket is tried.
    let out = pull(granted, "", "docker.io/library/evil/busybox", 1000);
    assert!(
        out.contains(
            "pull: denied: no cri images pattern covers docker.io/library/evil/busybox:latest"
        ),
        "{out}"
    );
    let out = pull(granted, "", "docker.io/library/../x", 1000);
    assert!(out.contains("pull: invalid:"), "{out}");
    let out = pull(granted, "", "quay.io/busybox", 1000);
    assert!(
        out.contains("pull: denied: no cri images pattern covers quay.io/busybox:latest"),
        "{out}"
    );
    // A pull longer than the reconcile's deadline is refused up front.
    let out = pull(granted, "timeout = \"5s\"", "busybox", 60_000);
    assert!(
        out.contains("raise [plugins.chaos.limits] timeout above the pull's timeout"),
        "{out}"
    );
    // Granted calls do reach for the runtime, and say where it was looked for.
    let out = pull(granted, "", "busybox", 1000);
    assert!(
        out.contains(&format!(
            "list: unavailable: the container runtime at unix://{}",
            socket.display()
        )),
        "{out}"
    );
    assert!(out.contains("pull: unavailable"), "{out}");
}
