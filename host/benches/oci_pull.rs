//! Pull-to-first-reconcile for a plugin from an OCI registry, by digest
//! (issue 19): the release `tend run` and a real registry (distribution) on
//! loopback, timed from the config naming the `oci://…@sha256:…` reference
//! to the end of the first reconcile on it (the time `/status` gives), for
//!
//! - cold: an empty cache (pull, verify, compile);
//! - cached: a new daemon on the same caches (no registry request, no compile);
//!
//! with a small Rust plugin (chaos) and an 18 MB Python one. Needs `cargo
//! xtask plugins` and docker-registry.
//!
//!   cargo bench -p tend --bench oci_pull

use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tend_e2e::{
    Daemon, Registry, Sandbox, epoch_ms, free_port, http_get, plugin, plugin_status, push_plugin,
    wait_until,
};

const ROUNDS: usize = 3;

/// Write the config with `plugins` (its own cache, plain HTTP to the registry).
fn configure(sandbox: &Sandbox, port: u16, registry: u16, plugins: &str) {
    sandbox.config_with_host(
        &format!(
            "cache-dir = \"cache\"\nlisten = \"127.0.0.1:{port}\"\n[host.oci]\ninsecure-registries = [\"127.0.0.1:{registry}\"]\n"
        ),
        plugins,
    );
}

/// Start a daemon with no plugin, name `reference` in the config, and time
/// until the first reconcile on it ended.
fn pull_to_reconcile(sandbox: &Sandbox, registry: u16, reference: &str, config: &str) -> Duration {
    let port = free_port();
    configure(sandbox, port, registry, "");
    let _daemon: Daemon = sandbox.daemon_with_env(&[("TEND_LOG", "warn")]);
    wait_until(Duration::from_secs(30), "/readyz", || {
        http_get(port, "/readyz").is_ok_and(|(_, body)| body == "ready\n")
    });
    let named = SystemTime::now();
    configure(
        sandbox,
        port,
        registry,
        &format!("[plugins.p]\nfile = \"{reference}\"\ninterval = \"1h\"\n{config}"),
    );
    let mut ended = None;
    wait_until(Duration::from_secs(180), "the first reconcile", || {
        let p = plugin_status(port, "p");
        ended = p["last"]["time"].as_str().map(epoch_ms);
        ended.is_some()
    });
    let named = named.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    // Untimed: the Cranelift build lands in the compile cache before the next round.
    wait_until(Duration::from_secs(180), "the Cranelift build", || {
        plugin_status(port, "p")["compiler"] == "cranelift"
    });
    Duration::from_millis(ended.unwrap() - named)
}

fn main() {
    // SAFETY: no other thread runs yet. The harness runs `tend` from TEND_BIN:
    // here the release build cargo made for this bench.
    unsafe { std::env::set_var("TEND_BIN", env!("CARGO_BIN_EXE_tend")) };
    let registry = Registry::start();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("== config names oci://…@sha256 -> first reconcile (median of {ROUNDS}) ==");
    for (name, file, config) in [
        ("rust", "chaos", "[plugins.p.config]\nmode = \"noop\"\n"),
        (
            "python",
            "python-http-check",
            "[plugins.p.grants]\nhttp = [\"http://127.0.0.1:*/*\"]\n[plugins.p.config]\nurls = [\"http://127.0.0.1:1/\"]\n",
        ),
    ] {
        let reference = push_plugin(
            &plugin(file),
            &format!("oci://127.0.0.1:{}/bench/{file}:1", registry.port),
            None,
        );
        let (mut cold, mut cached) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let sandbox = Sandbox::new();
            cold.push(pull_to_reconcile(
                &sandbox,
                registry.port,
                &reference,
                config,
            ));
            cached.push(pull_to_reconcile(
                &sandbox,
                registry.port,
                &reference,
                config,
            ));
        }
        let median = |v: &mut Vec<Duration>| {
            v.sort();
            v[v.len() / 2]
        };
        let size = std::fs::metadata(plugin(file)).unwrap().len();
        println!(
            "{name:<8} {:>6.1} MB   cold (pull + compile) {:>8.1} ms   cached {:>7.1} ms",
            size as f64 / 1e6,
            ms(median(&mut cold)),
            ms(median(&mut cached))
        );
    }
}
