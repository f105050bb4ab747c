//! Hot reload with the real `tend run`: plugin files dropped in, replaced,
//! broken and restored; config edited, broken and fixed; never a restart.

use serde_json::Value;
use std::path::Path;
use tend_e2e::{
    Daemon, Sandbox, digest_of, free_port, plugin, plugin_status, wait_for_plugin, workspace_root,
};

/// The smallest valid component: it exports nothing, so not Tend's world.
const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\0\x01\0";

/// Put bytes in place the way `cp` does: truncate, then write in place.
fn cp_in_place(bytes: &[u8], to: &Path) {
    std::fs::write(to, bytes).unwrap();
}

fn runs(status: &Value) -> u64 {
    status["reconciles"].as_u64().unwrap_or(0)
}

fn sighup(daemon: &Daemon) {
    let sent = std::process::Command::new("kill")
        .args(["-HUP", &daemon.pid().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

#[test]
fn plugin_files_are_loaded_replaced_and_rejected_without_a_restart() {
    let sandbox = Sandbox::new();
    let port = free_port();
    sandbox.config_with_host(
        &format!("listen = \"127.0.0.1:{port}\""),
        "[plugins.hot]\ninterval = \"100ms\"\n[plugins.hot.config]\nmode = \"ok\"\n",
    );
    let daemon = sandbox.daemon();
    let file = sandbox.path("plugins/hot.wasm");
    wait_for_plugin(port, "hot", "reported missing", |p| p["state"] == "missing");

    // Dropped in (written next to it, then renamed, as installers do).
    let v1 = std::fs::read(plugin("chaos")).unwrap();
    std::fs::write(sandbox.path("plugins/.hot.wasm.part"), &v1).unwrap();
    std::fs::rename(sandbox.path("plugins/.hot.wasm.part"), &file).unwrap();
    let v1_digest = digest_of(&file);
    wait_for_plugin(port, "hot", "v1 reconciles", |p| {
        p["state"] == "ready"
            && p["last"]["digest"] == v1_digest.as_str()
            && p["last"]["message"]
                .as_str()
                .unwrap_or("")
                .ends_with("(v1)")
    });

    // Replaced in place by a new version: the new digest serves the next reconcile.
    cp_in_place(&std::fs::read(plugin("chaos-v2")).unwrap(), &file);
    let v2_digest = digest_of(&file);
    wait_for_plugin(port, "hot", "v2 reconciles", |p| {
        p["last"]["digest"] == v2_digest.as_str()
            && p["last"]["message"]
                .as_str()
                .unwrap_or("")
                .ends_with("(v2)")
    });
    assert!(
        daemon.count(&["hot", "plugin reloaded", &v2_digest]) >= 1,
        "{}",
        daemon.log()
    );

    // Broken files: the running version keeps serving, /status names the problem.
    let v2 = std::fs::read(&file).unwrap();
    for (what, bytes, expected) in [
        (
            "garbage",
            b"definitely not wasm".to_vec(),
            "not a valid WebAssembly component",
        ),
        (
            "truncated",
            v2[..v2.len() / 3].to_vec(),
            "not a valid WebAssembly component",
        ),
        (
            "wrong world",
            EMPTY_COMPONENT.to_vec(),
            "does not export tend:plugin/reconciler@0.1.0",
        ),
    ] {
        cp_in_place(&bytes, &file);
        let broken = wait_for_plugin(port, "hot", what, |p| {
            p["load_error"]
                .as_str()
                .is_some_and(|e| e.contains(expected) && e.contains(&file.display().to_string()))
        });
        assert_eq!(broken["state"], "ready", "{what}: {broken:#}");
        assert_eq!(
            broken["digest"],
            v2_digest.as_str(),
            "{what}: the old version stays loaded"
        );
        let before = runs(&broken);
        wait_for_plugin(port, "hot", "the old version keeps reconciling", |p| {
            runs(p) >= before + 2 && p["last"]["digest"] == v2_digest.as_str()
        });
    }

    // Restored: recovers, and the load error is gone.
    cp_in_place(&v1, &file);
    wait_for_plugin(port, "hot", "recovered on v1", |p| {
        p["load_error"].is_null() && p["last"]["digest"] == v1_digest.as_str()
    });

    // Deleted: the plugin stops and is reported missing.
    std::fs::remove_file(&file).unwrap();
    let gone = wait_for_plugin(port, "hot", "missing again", |p| p["state"] == "missing");
    // A reconcile already running when the file went may still finish (CI
    // saw one end 9 ms after the removal); no new one may start.
    let in_flight_done = runs(&gone) + 1;
    std::thread::sleep(std::time::Duration::from_millis(300));
    let settled = runs(&plugin_status(port, "hot"));
    assert!(
        settled <= in_flight_done,
        "a missing plugin does not run: {settled} runs, at most {in_flight_done}"
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(
        runs(&plugin_status(port, "hot")),
        settled,
        "a missing plugin does not run"
    );
    assert!(daemon.terminate(std::time::Duration::from_secs(10)));
}

/// Put `source` in place as `to` in one step: written beside it, then renamed.
fn land(source: &Path, to: &Path) {
    let staging = to.with_extension("part");
    std::fs::copy(source, &staging).unwrap();
    std::fs::rename(staging, to).unwrap();
}

#[test]
fn same_file_changed_twice_during_a_compile_ends_on_the_last_content() {
    let sandbox = Sandbox::new();
    let port = free_port();
    sandbox.add_plugin("chaos", "hot");
    // A cache of its own: the Python component below really compiles (over a second).
    sandbox.config_with_host(
        &format!("listen = \"127.0.0.1:{port}\"\ncache-dir = \"fresh-cache\""),
        "[plugins.hot]\n[plugins.hot.config]\nmode = \"ok\"\n",
    );
    let daemon = sandbox.daemon();
    wait_for_plugin(port, "hot", "first reconcile", |p| runs(p) >= 1);
    let file = sandbox.path("plugins/hot.wasm");
    let loading = [file.to_str().unwrap(), "loading component"];
    let loads_before = daemon.count(&loading);

    // A large component lands and starts compiling; while it compiles, v2 lands.
    land(&plugin("python-http-check"), &file);
    let python = digest_of(&file);
    tend_e2e::wait_until(
        std::time::Duration::from_secs(10),
        "the compile to start",
        || daemon.count(&loading) > loads_before,
    );
    land(&plugin("chaos-v2"), &file);
    let v2 = digest_of(&file);

    wait_for_plugin(port, "hot", "v2 loaded, no load error", |p| {
        p["digest"] == v2.as_str() && p["load_error"].is_null()
    });
    assert_eq!(
        daemon.count(&["plugin reloaded", &python]),
        0,
        "the superseded build never served: {}",
        daemon.log()
    );
    assert_eq!(
        daemon.count(&loading),
        loads_before + 2,
        "compiled again after the change: {}",
        daemon.log()
    );
    drop(daemon);
}

#[test]
fn config_edits_apply_live_and_a_broken_config_keeps_the_last_good_one() {
    let sandbox = Sandbox::new();
    let port = free_port();
    sandbox.add_plugin("chaos", "chaos");
    let host = format!("listen = \"127.0.0.1:{port}\"");
    let plugins = |b_enabled: bool, b_mode: &str| {
        format!(
            "[plugins.steady]\nfile = \"plugins/chaos.wasm\"\ninterval = \"100ms\"\n[plugins.steady.config]\nmode = \"ok\"\n\
             [plugins.other]\nfile = \"plugins/chaos.wasm\"\nenabled = {b_enabled}\ninterval = \"100ms\"\n[plugins.other.config]\nmode = \"{b_mode}\"\n"
        )
    };
    sandbox.config_with_host(&host, &plugins(false, "ok"));
    let daemon = sandbox.daemon();
    wait_for_plugin(port, "steady", "running", |p| runs(p) >= 2);
    assert_eq!(plugin_status(port, "other")["state"], "disabled");

    // Enable a plugin.
    sandbox.config_with_host(&host, &plugins(true, "ok"));
    wait_for_plugin(port, "other", "enabled and reconciling", |p| {
        p["state"] == "ready" && runs(p) >= 1
    });

    // Change its plugin config: it now fails, on its own.
    sandbox.config_with_host(&host, &plugins(true, "fail"));
    wait_for_plugin(port, "other", "new config applied", |p| {
        p["state"] == "failing"
            && p["last"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("chaos was asked to fail")
    });

    // Break the config: rejected with file:line:column, the last good one runs on.
    std::fs::write(sandbox.path("tend.toml"), "[host]\nplugins-dir = \"plugins\"\nstate-dir = \"state\"\nlisten = \"127.0.0.1:1\"\nbogus = 1\n").unwrap();
    let expected = format!(
        "{}:5:1: unknown field `bogus`",
        sandbox.path("tend.toml").display()
    );
    tend_e2e::wait_until(
        std::time::Duration::from_secs(10),
        "the config error in /status",
        || {
            tend_e2e::status(port)["config_error"]
                .as_str()
                .is_some_and(|e| e.contains(&expected))
        },
    );
    let before = runs(&plugin_status(port, "steady"));
    wait_for_plugin(
        port,
        "steady",
        "still reconciling on the last good config",
        |p| runs(p) >= before + 3,
    );
    assert_eq!(plugin_status(port, "other")["state"], "failing");

    // SIGHUP re-reads it though nothing changed on disk: the error is the
    // same, now found by the SIGHUP's read.
    let error = || {
        tend_e2e::status(port)["config_error"]
            .as_str()
            .map(str::to_string)
    };
    assert!(
        error().is_some_and(|e| e.ends_with("(config file changed)")),
        "{:?}",
        error()
    );
    sighup(&daemon);
    tend_e2e::wait_until(
        std::time::Duration::from_secs(10),
        "the config error found again by SIGHUP",
        || error().is_some_and(|e| e.contains(&expected) && e.ends_with("(SIGHUP)")),
    );

    // Fixing it clears the error.
    sandbox.config_with_host(&host, &plugins(true, "ok"));
    tend_e2e::wait_until(
        std::time::Duration::from_secs(10),
        "config error cleared",
        || tend_e2e::status(port)["config_error"].is_null(),
    );
    wait_for_plugin(port, "other", "healthy again", |p| p["state"] == "ready");

    // The unchanged plugin was never disturbed: loaded once, one startup run.
    assert_eq!(
        daemon.count(&["plugin=steady", "plugin loaded"]),
        1,
        "{}",
        daemon.log()
    );
    assert_eq!(
        daemon.count(&["plugin=steady", "trigger=startup", "healthy"]),
        1,
        "{}",
        daemon.log()
    );
    assert!(daemon.terminate(std::time::Duration::from_secs(10)));
}

/// SIGHUP alone re-reads the config: `etc/tend.toml` is a link into `conf/`,
/// a directory tend does not watch, so an edit there is invisible to the
/// watcher. The edit applies on SIGHUP, and not before.
#[test]
fn sighup_applies_a_config_edit_the_watcher_cannot_see() {
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "chaos");
    let port = free_port();
    // Absolute paths: relative ones would resolve next to the link, in etc/.
    let config = |mode: &str| {
        format!(
            "[host]\nplugins-dir = \"{plugins}\"\nstate-dir = \"{state}\"\ncache-dir = \"{cache}\"\n\
             node-name = \"e2e-node\"\nlisten = \"127.0.0.1:{port}\"\n\
             [plugins.steady]\nfile = \"{plugins}/chaos.wasm\"\ninterval = \"100ms\"\n[plugins.steady.config]\nmode = \"ok\"\n\
             [plugins.other]\nfile = \"{plugins}/chaos.wasm\"\ninterval = \"100ms\"\n[plugins.other.config]\nmode = \"{mode}\"\n",
            plugins = sandbox.path("plugins").display(),
            state = sandbox.path("state").display(),
            cache = workspace_root().join("target/e2e-cache").display(),
        )
    };
    let (etc, conf) = (sandbox.path("etc"), sandbox.path("conf"));
    std::fs::create_dir(&etc).unwrap();
    std::fs::create_dir(&conf).unwrap();
    std::fs::write(conf.join("tend.toml"), config("ok")).unwrap();
    std::os::unix::fs::symlink("../conf/tend.toml", etc.join("tend.toml")).unwrap();
    let daemon = sandbox.daemon_for(&etc.join("tend.toml"));
    wait_for_plugin(port, "other", "healthy", |p| {
        p["state"] == "ready" && runs(p) >= 1
    });

    // Edit the target as an operator's tooling would (write, rename), in conf/.
    std::fs::write(conf.join(".tend.toml.tmp"), config("fail")).unwrap();
    std::fs::rename(conf.join(".tend.toml.tmp"), conf.join("tend.toml")).unwrap();
    // Unseen: five reconciles of each later, nothing changed.
    let (steady, other) = (
        runs(&plugin_status(port, "steady")),
        runs(&plugin_status(port, "other")),
    );
    wait_for_plugin(port, "steady", "five more reconciles", |p| {
        runs(p) >= steady + 5
    });
    let unseen = wait_for_plugin(port, "other", "five more reconciles", |p| {
        runs(p) >= other + 5
    });
    assert_eq!(unseen["state"], "ready", "{unseen:#}");
    assert_eq!(daemon.count(&["config reloaded"]), 0, "{}", daemon.log());

    // SIGHUP re-reads it: the edit applies.
    sighup(&daemon);
    wait_for_plugin(port, "other", "the edit applied", |p| {
        p["state"] == "failing"
            && p["last"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("chaos was asked to fail")
    });
    // The reload is logged once it is complete (after the plugin's trigger).
    daemon.wait_for_log(
        std::time::Duration::from_secs(10),
        &["config reloaded (SIGHUP)"],
    );
    assert_eq!(daemon.count(&["config reloaded"]), 1, "{}", daemon.log());
    assert!(daemon.terminate(std::time::Duration::from_secs(10)));
}

#[test]
fn a_new_plugin_runs_at_once_on_winch_then_on_cranelift_and_winch_code_is_contained() {
    let sandbox = Sandbox::new();
    let port = free_port();
    sandbox.add_plugin("chaos", "chaos");
    let plugin = |name: &str, mode: &str| {
        format!(
            "[plugins.{name}]\nfile = \"plugins/chaos.wasm\"\ninterval = \"100ms\"\n[plugins.{name}.limits]\ntimeout = \"300ms\"\nmemory = \"32MiB\"\n[plugins.{name}.config]\nmode = \"{mode}\"\n"
        )
    };
    // A cache of its own, empty: every load starts on Winch.
    sandbox.config_with_host(
        &format!("listen = \"127.0.0.1:{port}\"\ncache-dir = \"fresh-cache\""),
        &(plugin("looper", "loop") + &plugin("hoarder", "alloc") + &plugin("steady", "ok")),
    );
    let daemon = sandbox.daemon();
    let within = std::time::Duration::from_secs(30);
    daemon.wait_for_log(
        within,
        &["plugin=looper", "compiler=Winch", "plugin loaded"],
    );
    // The first reconciles run on Winch code, under the same limits.
    daemon.wait_for_log(
        within,
        &[
            "plugin=looper",
            "compiler=Winch",
            "deadline of 300ms exceeded",
        ],
    );
    daemon.wait_for_log(
        within,
        &[
            "plugin=hoarder",
            "compiler=Winch",
            "memory limit of 32.0 MiB exceeded",
        ],
    );
    daemon.wait_for_log(within, &["plugin=steady", "compiler=Winch", "healthy"]);
    // Then the Cranelift build takes over and is cached.
    daemon.wait_for_log(
        within,
        &["plugin=steady", "optimized (Cranelift) build swapped in"],
    );
    wait_for_plugin(port, "steady", "running on Cranelift", |p| {
        p["compiler"] == "cranelift"
    });
    daemon.wait_for_log(within, &["plugin=steady", "compiler=Cranelift", "healthy"]);
    assert!(
        std::fs::read_dir(sandbox.path("fresh-cache"))
            .unwrap()
            .count()
            >= 2,
        "artifact and checksum cached"
    );
    assert!(daemon.terminate(std::time::Duration::from_secs(10)));
}

/// The instance pool is sized from the config tend starts with (one plugin:
/// the floor of 16 instances). A reload to 24 plugins spinning at once for
/// 3 s needs more than the pool holds: those beyond it run on the on-demand
/// engine, with a log line, instead of failing.
#[test]
fn plugins_a_reload_adds_beyond_the_instance_pool_run_on_demand() {
    let sandbox = Sandbox::new();
    let port = free_port();
    let spinner = |name: &str| {
        sandbox.add_plugin("chaos", name);
        format!(
            "[plugins.{name}]\ninterval = \"1h\"\n[plugins.{name}.limits]\ntimeout = \"3s\"\n[plugins.{name}.config]\nmode = \"loop\"\n"
        )
    };
    let host = format!("listen = \"127.0.0.1:{port}\"");
    sandbox.config_with_host(&host, &spinner("spin-0"));
    let daemon = sandbox.daemon();
    // The Cranelift build is what the pool serves (Winch's is on demand).
    wait_for_plugin(port, "spin-0", "the Cranelift build", |p| {
        p["compiler"] == "cranelift" && runs(p) >= 1
    });

    let count = 24;
    let config: String = (0..count).map(|i| spinner(&format!("spin-{i}"))).collect();
    sandbox.config_with_host(&host, &config);
    let deadline_exceeded = |p: &Value| {
        p["last"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("deadline of 3s exceeded"))
    };
    for i in 1..count {
        wait_for_plugin(
            port,
            &format!("spin-{i}"),
            "a reconcile spun to its deadline",
            |p| runs(p) >= 1,
        );
    }
    let spun = (1..count)
        .filter(|i| deadline_exceeded(&plugin_status(port, &format!("spin-{i}"))))
        .count();
    // 23 at once against 16 slots; a race for the last slots may fail one or
    // two (their next reconcile runs), never all beyond the pool.
    assert!(spun > 16, "{spun} of {} spun to their deadline", count - 1);
    daemon.wait_for_log(
        std::time::Duration::from_secs(10),
        &["the instance pool is full; this plugin runs with on-demand allocation"],
    );
}
