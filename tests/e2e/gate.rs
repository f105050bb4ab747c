//! The mutation gate end to end: intents journaled before mutations (so a
//! mutation cut off by the deadline or by kill -9 reads as interrupted),
//! host-wide budgets shared by plugins and kept across restarts, and plans
//! through a running daemon.

use std::time::Duration;
use tend_e2e::{Sandbox, SilentPeer, free_port, http_get, journal, wait_for_plugin, wait_until};

fn post_to(peer: &SilentPeer, timeout: &str) -> String {
    format!(
        r#"
[plugins.chaos]
[plugins.chaos.grants]
http = ["http://127.0.0.1:{port}/*"]
[plugins.chaos.limits]
timeout = "{timeout}"
[plugins.chaos.config]
mode = "post"
url = "http://127.0.0.1:{port}/hook"
timeout-ms = 600000
"#,
        port = peer.port
    )
}

#[test]
fn a_mutation_cut_off_by_the_deadline_is_journaled_as_interrupted() {
    let peer = SilentPeer::start();
    let sandbox = Sandbox::new();
    sandbox
        .add_plugin("chaos", "chaos")
        .config(&post_to(&peer, "1s"));
    let started = std::time::Instant::now();
    let out = sandbox.tend(&["reconcile", "chaos"]);
    assert!(!out.success, "{}", out.stdout);
    assert!(
        out.stdout.contains("deadline of 1s exceeded"),
        "{}",
        out.stdout
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the deadline held"
    );
    assert_eq!(
        peer.accepted(),
        1,
        "the POST was under way when the deadline hit"
    );
    let entries = journal(&sandbox);
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["capability"], "http");
    assert_eq!(entries[0]["operation"], "send");
    assert!(
        entries[0]["result"]
            .as_str()
            .unwrap()
            .starts_with("interrupted"),
        "{entries:?}"
    );
    let shown = sandbox.tend(&["journal"]);
    assert!(shown.stdout.contains("did http.send"), "{}", shown.stdout);
    assert!(shown.stdout.contains(": interrupted"), "{}", shown.stdout);
}

#[test]
fn kill_9_during_a_slow_mutation_leaves_it_interrupted_after_restart() {
    let peer = SilentPeer::start();
    let sandbox = Sandbox::new();
    sandbox
        .add_plugin("chaos", "chaos")
        .config(&post_to(&peer, "60s"));
    let daemon = sandbox.daemon();
    wait_until(Duration::from_secs(60), "the POST to be under way", || {
        peer.accepted() == 1
    });
    let pid = daemon.pid().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .unwrap()
            .success()
    );
    drop(daemon);
    // The intent was fsynced before the request was sent; no result ever came.
    let entries = journal(&sandbox);
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(
        entries[0]["result"]
            .as_str()
            .unwrap()
            .starts_with("interrupted")
    );
    assert_eq!(
        entries[0]["target"],
        format!("http://127.0.0.1:{}/hook", peer.port)
    );
    // A restarted tend keeps journaling after the cut-off entry: a new
    // mutation is journaled after it, with its result, and the cut-off entry
    // still reads as interrupted.
    let out_dir = sandbox.path("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let written = out_dir.join("after");
    sandbox.config(&format!(
        "[plugins.chaos]\n[plugins.chaos.grants]\nfiles = [{{ path = \"{}\", write = true }}]\n[plugins.chaos.config]\nmode = \"write\"\npath = \"{}\"\ncontent = \"after the cut-off\"\n",
        out_dir.display(),
        written.display()
    ));
    let out = sandbox.tend(&["reconcile", "chaos"]);
    assert!(out.success, "{}{}", out.stdout, out.stderr);
    assert_eq!(
        std::fs::read_to_string(&written).unwrap(),
        "after the cut-off"
    );
    let entries = journal(&sandbox);
    assert_eq!(entries.len(), 2, "{entries:#?}");
    assert!(
        entries[0]["result"]
            .as_str()
            .unwrap()
            .starts_with("interrupted"),
        "{entries:#?}"
    );
    assert_eq!(entries[0]["operation"], "send", "{entries:#?}");
    assert_eq!(entries[1]["capability"], "files", "{entries:#?}");
    assert_eq!(entries[1]["operation"], "write", "{entries:#?}");
    assert_eq!(
        entries[1]["target"],
        written.display().to_string(),
        "{entries:#?}"
    );
    assert_eq!(entries[1]["result"], "ok", "{entries:#?}");
    assert!(
        entries[1]["time_ms"].as_u64() >= entries[0]["time_ms"].as_u64(),
        "{entries:#?}"
    );
}

/// Two plugins, each removing its own files, under one budget of 3 removals.
fn budgeted(sandbox: &Sandbox, host: &str, files_each: usize) {
    let mut plugins = String::new();
    for name in ["a", "b"] {
        let dir = sandbox.path(name);
        std::fs::create_dir_all(&dir).unwrap();
        let paths: Vec<String> = (0..files_each)
            .map(|i| {
                let path = dir.join(format!("f{i}"));
                std::fs::write(&path, "x").unwrap();
                format!("\"{}\"", path.display())
            })
            .collect();
        sandbox.add_plugin("chaos", name);
        plugins += &format!(
            "[plugins.{name}]\n[plugins.{name}.grants]\nfiles = [{{ path = \"{}\", write = true }}]\n[plugins.{name}.config]\nmode = \"remove\"\npaths = [{}]\n",
            dir.display(),
            paths.join(", ")
        );
    }
    let budget =
        "[host.budgets.file-removals]\noperations = [\"files.remove\"]\nmax = 3\nper = \"1h\"\n";
    sandbox.config_with_host(&format!("{host}\n{budget}"), &plugins);
}

#[test]
fn a_budget_shared_by_two_plugins_refuses_journals_and_survives_restarts() {
    let sandbox = Sandbox::new();
    budgeted(&sandbox, "", 2);
    let a = sandbox.tend(&["reconcile", "a"]);
    assert!(a.stdout.contains("a: healthy: removed 2"), "{}", a.stdout);
    let b = sandbox.tend(&["reconcile", "b"]);
    assert!(b.stdout.contains("b: degraded: budget-exhausted: [budget] budget \"file-removals\" allows 3 of files.remove per 1h; 3 used"), "{}", b.stdout);
    assert!(
        b.stdout
            .contains("raise max in [host.budgets.file-removals]"),
        "{}",
        b.stdout
    );
    let removed = |name: &str| {
        (0..2)
            .filter(|i| !sandbox.path(&format!("{name}/f{i}")).exists())
            .count()
    };
    assert_eq!((removed("a"), removed("b")), (2, 1));
    let refusals: Vec<_> = journal(&sandbox)
        .into_iter()
        .filter(|e| {
            e["result"]
                .as_str()
                .unwrap()
                .starts_with("budget-exhausted")
        })
        .collect();
    assert_eq!(refusals.len(), 1);
    assert_eq!(refusals[0]["plugin"], "b");

    // A new process (a restart) spends from the same budget.
    std::fs::write(sandbox.path("a/f0"), "x").unwrap();
    let again = sandbox.tend(&["reconcile", "a"]);
    assert!(
        again.stdout.contains("refused files.remove"),
        "{}",
        again.stdout
    );
    assert!(
        sandbox.path("a/f0").exists(),
        "the budget held across the restart"
    );

    // The daemon shows the budget's use and each plugin's refusals.
    let port = free_port();
    budgeted(&sandbox, &format!("listen = \"127.0.0.1:{port}\""), 2);
    let daemon = sandbox.daemon();
    wait_for_plugin(port, "b", "its startup reconcile", |p| p["reconciles"] == 1);
    let (_, body) = http_get(port, "/status").unwrap();
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["budgets"][0]["name"], "file-removals");
    assert_eq!(status["budgets"][0]["used"], 3);
    assert!(status["budgets"][0]["next_free"].is_string());
    let shown = sandbox.tend(&["status", "b"]);
    assert!(shown.success, "{}", shown.stderr);
    assert!(shown.stdout.contains("refused:"), "{}", shown.stdout);
    assert!(
        shown
            .stdout
            .contains("budget file-removals: 3 of 3 per 1h used"),
        "{}",
        shown.stdout
    );
    assert!(
        shown.stdout.contains(&format!(
            "files: {} (read-write)",
            sandbox.path("b").display()
        )),
        "{}",
        shown.stdout
    );
    assert!(daemon.terminate(Duration::from_secs(30)));
}

#[test]
fn a_plan_checks_budgets_without_spending_them() {
    let sandbox = Sandbox::new();
    budgeted(&sandbox, "", 4);
    let plan = sandbox.tend(&["plan", "a"]);
    let a = sandbox.path("a");
    for i in 0..3 {
        assert!(
            plan.stdout
                .contains(&format!("would files.remove {}/f{i}", a.display())),
            "{}",
            plan.stdout
        );
    }
    assert!(
        plan.stdout
            .contains(&format!("refused files.remove {}/f3", a.display())),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout.contains("3 planned earlier in this dry run"),
        "{}",
        plan.stdout
    );
    assert_eq!(
        std::fs::read_dir(&a).unwrap().count(),
        4,
        "a plan removes nothing"
    );
    // Nothing was spent: the real run gets the whole budget.
    let real = sandbox.tend(&["reconcile", "a"]);
    assert_eq!(std::fs::read_dir(&a).unwrap().count(), 1, "{}", real.stdout);
}

#[test]
fn a_plan_through_the_running_daemon_shows_a_diff_and_changes_nothing() {
    let sandbox = Sandbox::new();
    let port = free_port();
    let target = sandbox.path("etc/app.conf");
    let plugin = format!(
        "[plugins.chaos]\n[plugins.chaos.grants]\nfiles = [{{ path = \"{}\", write = true }}]\n[plugins.chaos.config]\nmode = \"write\"\npath = \"{}\"\ncontent = \"answer = 42\\n\"\n",
        sandbox.path("etc").display(),
        target.display()
    );
    sandbox
        .add_plugin("chaos", "chaos")
        .config_with_host(&format!("listen = \"127.0.0.1:{port}\""), &plugin);
    let daemon = sandbox.daemon();
    let before = wait_for_plugin(port, "chaos", "its startup reconcile", |p| {
        p["reconciles"] == 1
    });
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "answer = 42\n");
    // The operator edits the file by hand; the plugin would put it back.
    std::fs::write(&target, "answer = 41\n").unwrap();
    let plan = sandbox.tend(&["plan", "chaos"]);
    assert!(plan.success, "{}{}", plan.stdout, plan.stderr);
    assert!(
        plan.stdout.contains(&format!(
            "by the tend daemon at {}",
            sandbox.path("state/tend.sock").display()
        )),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout.contains(&format!(
            "would files.write {} (12 -> 12 bytes, mode 644)",
            target.display()
        )),
        "{}",
        plan.stdout
    );
    assert!(plan.stdout.contains("-answer = 41"), "{}", plan.stdout);
    assert!(plan.stdout.contains("+answer = 42"), "{}", plan.stdout);
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "answer = 41\n",
        "the plan changed nothing"
    );
    let after = tend_e2e::plugin_status(port, "chaos");
    assert_eq!(
        after["reconciles"], before["reconciles"],
        "a plan is not a reconcile"
    );
    assert_eq!(after["last"]["time"], before["last"]["time"]);
    let planned: Vec<_> = journal(&sandbox)
        .into_iter()
        .filter(|e| e["dry_run"] == true)
        .collect();
    assert_eq!(planned.len(), 1);
    assert!(daemon.terminate(Duration::from_secs(30)));
}

#[test]
fn status_of_one_plugin_says_why_it_waits() {
    let sandbox = Sandbox::new();
    let port = free_port();
    let watched = sandbox.path("watched");
    std::fs::create_dir_all(&watched).unwrap();
    sandbox.add_plugin("chaos", "chaos").config_with_host(
        &format!("listen = \"127.0.0.1:{port}\""),
        &format!(
            "[plugins.chaos]\ninterval = \"1h\"\nwatch = [\"{w}\"]\n[plugins.chaos.grants]\nfiles = [{{ path = \"{w}\" }}]\nhttp = [\"http://127.0.0.1:*/*\"]\n[plugins.chaos.config]\nmode = \"fail\"\n",
            w = watched.display()
        ),
    );
    let daemon = sandbox.daemon();
    wait_for_plugin(port, "chaos", "a failed reconcile", |p| p["failures"] == 1);
    let shown = sandbox.tend(&["status", "chaos"]);
    assert!(shown.success, "{}", shown.stderr);
    let out = &shown.stdout;
    assert!(out.starts_with("chaos: failing\n"), "{out}");
    assert!(
        out.contains("[startup]: FAILED: other: chaos was asked to fail"),
        "{out}"
    );
    assert!(
        out.contains("1 failure(s) in a row, backing off until in "),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "waits on: interval every 1h; file changes under {}; manual",
            watched.display()
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("files: {} (read-only)", watched.display())),
        "{out}"
    );
    assert!(out.contains("http: http://127.0.0.1:*/*"), "{out}");
    let unknown = sandbox.tend(&["status", "nope"]);
    assert!(
        !unknown.success && unknown.stderr.contains("no plugin \"nope\""),
        "{}",
        unknown.stderr
    );
    assert!(daemon.terminate(Duration::from_secs(30)));
}

/// A filesystem mounted for one test, unmounted when dropped (also on a panic).
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(at: &std::path::Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        let mounted = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(at)
            .status()
            .unwrap();
        assert!(
            mounted.success(),
            "mount a tmpfs at {}: run as root, as CI does",
            at.display()
        );
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// A state write is answered once it is checked and made durable while the
/// plugin goes on; one lost on its way to disk (the state directory on a full
/// filesystem) fails the reconcile saying so, whatever the plugin made of the
/// refusals that followed (this one reports them and says healthy).
#[test]
fn a_state_write_lost_on_its_way_to_disk_fails_the_reconcile() {
    assert!(
        tend_e2e::is_root(),
        "this test mounts a full filesystem: run it as root, as CI does"
    );
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "chaos").config(
        "[plugins.chaos]\n[plugins.chaos.config]\nmode = \"state-flood\"\ncount = 8\nsize = 300000\n",
    );
    let _full = Tmpfs::mount(&sandbox.path("state"), "1m");
    let out = sandbox.tend(&["reconcile", "chaos"]);
    assert!(!out.success, "{out:?}");
    assert!(
        out.stdout.contains(
            "chaos: FAILED: unavailable: a state write this reconcile was answered for could not be made durable"
        ) && out.stdout.contains("No space left on device"),
        "{out:?}"
    );
}
