//! `tend run`: triggers, containment of misbehaving plugins while others keep
//! their schedule, and a clean stop on SIGTERM.

use std::time::Duration;
use tend_e2e::{Registry, Sandbox};

#[test]
fn looping_and_hoarding_plugins_fail_alone_while_others_keep_serving() {
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "chaos");
    let plugin = |name: &str, mode: &str, limits: &str| {
        format!(
            "[plugins.{name}]\nfile = \"plugins/chaos.wasm\"\ninterval = \"200ms\"\n[plugins.{name}.limits]\n{limits}\n[plugins.{name}.config]\nmode = \"{mode}\"\n"
        )
    };
    sandbox.config(
        &[
            plugin("looper", "loop", "timeout = \"300ms\""),
            plugin("hoarder", "alloc", "memory = \"32MiB\""),
            plugin("panicker", "panic", ""),
            plugin("steady", "ok", ""),
        ]
        .concat(),
    );
    let daemon = sandbox.daemon();
    let within = Duration::from_secs(30);
    daemon.wait_for_log(
        within,
        &["looper", "reconcile failed: deadline of 300ms exceeded"],
    );
    daemon.wait_for_log(
        within,
        &[
            "hoarder",
            "reconcile failed: memory limit of 32.0 MiB exceeded",
        ],
    );
    daemon.wait_for_log(
        within,
        &[
            "panicker",
            "the plugin panicked",
            "chaos was asked to panic",
        ],
    );
    // The healthy plugin keeps its interval while the others trap and back off.
    let steady_runs = daemon.count(&["steady", "healthy"]);
    daemon.wait_for_log(within, &["steady", &format!("run {}", steady_runs + 5)]);
    let looper_runs = daemon.count(&["looper", "reconcile failed"]);
    assert!(
        looper_runs <= 4,
        "the looping plugin backs off: {looper_runs} runs"
    );
    assert!(
        daemon.terminate(Duration::from_secs(10)),
        "exit 0 on SIGTERM"
    );
}

#[test]
fn file_changes_trigger_a_reconcile_and_sigterm_exits_cleanly() {
    let registry = Registry::start();
    let sandbox = Sandbox::new();
    sandbox.add_plugin("mirror-gate", "mirror-gate");
    let certs = sandbox.path("certs.d");
    std::fs::create_dir_all(&certs).unwrap();
    let certs = certs.display();
    sandbox.config(&format!(
        "[plugins.mirror-gate]\nwatch = [\"{certs}\"]\n[plugins.mirror-gate.grants]\nfiles = [{{ path = \"{certs}\", write = true }}]\nhttp = [\"http://127.0.0.1:*/*\"]\n[plugins.mirror-gate.config]\ncerts-dir = \"{certs}\"\n[[plugins.mirror-gate.config.caches]]\nupstream = \"docker.io\"\nendpoint = \"{}\"\n",
        registry.endpoint()
    ));
    let daemon = sandbox.daemon();
    let hosts = format!("{certs}/docker.io/hosts.toml");
    tend_e2e::wait_until(Duration::from_secs(30), "hosts.toml at startup", || {
        std::path::Path::new(&hosts).exists()
    });
    // No interval is configured: only the file watch can bring the file back.
    std::fs::remove_file(&hosts).unwrap();
    tend_e2e::wait_until(Duration::from_secs(10), "hosts.toml restored", || {
        std::path::Path::new(&hosts).exists()
    });
    daemon.wait_for_log(
        Duration::from_secs(5),
        &["trigger=file:", "did files.write"],
    );
    assert!(daemon.terminate(Duration::from_secs(10)));
}
