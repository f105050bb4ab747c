//! The release daemon under measurement, shared by the daemon and python_load
//! benches: started on a sandbox, plugin files landed in its plugins dir, and
//! the time until a reconcile ran on them.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tend_e2e::{
    Daemon, Sandbox, digest_of, epoch_ms, free_port, http_get, plugin_status, wait_until,
};

/// Write the sandbox's config (`plugins`, its own compile cache, a fresh
/// port) and start the release `tend run` on it, logging at `log`; returns
/// once /readyz says ready, or not ready only for plugins whose file is
/// still to land.
pub fn start(sandbox: &Sandbox, plugins: &str, log: &str) -> (Daemon, u16) {
    start_with_host(sandbox, "", plugins, log)
}

/// [`start`] with more `[host]` text after the bench's own (`[host.logs]`).
pub fn start_with_host(sandbox: &Sandbox, host: &str, plugins: &str, log: &str) -> (Daemon, u16) {
    let port = free_port();
    sandbox.config_with_host(
        &format!("cache-dir = \"cache\"\nlisten = \"127.0.0.1:{port}\"\n{host}"),
        plugins,
    );
    let daemon = sandbox.daemon_with_env(&[("TEND_LOG", log)]);
    let to_land = |why: &str| !why.is_empty() && why.lines().all(|l| l.contains("does not exist"));
    wait_until(Duration::from_secs(30), "/readyz", || {
        http_get(port, "/readyz").is_ok_and(|(_, body)| body == "ready\n" || to_land(&body))
    });
    (daemon, port)
}

/// Land `source` as plugins/`name`.wasm (written beside, renamed in) and time
/// until a reconcile on it ended: the end time is the one `/status` gives for
/// the reconcile (ms), polled every 20 ms. Polling every millisecond instead
/// costs a good part of one of the two cores and slowed the compile it times
/// by up to 40 %.
pub fn land(sandbox: &Sandbox, port: u16, name: &str, source: &Path) -> Duration {
    let target = sandbox.path(&format!("plugins/{name}.wasm"));
    let staging = sandbox.path(&format!("{name}.staging"));
    std::fs::copy(source, &staging).unwrap();
    let want = digest_of(source);
    let runs_before = plugin_status(port, name)["reconciles"]
        .as_u64()
        .unwrap_or(0);
    let landed = SystemTime::now();
    std::fs::rename(&staging, &target).unwrap();
    let mut ended = None;
    wait_until(Duration::from_secs(120), "a reconcile on it", || {
        let p = plugin_status(port, name);
        let done =
            p["reconciles"].as_u64() > Some(runs_before) && p["last"]["digest"] == want.as_str();
        if done {
            ended = p["last"]["time"].as_str().map(epoch_ms);
        }
        done
    });
    let landed = landed.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    Duration::from_millis(ended.expect("the reconcile's time") - landed)
}

/// Wait (untimed) until the plugin runs its Cranelift build, so it is cached
/// and no compile competes with the next measurement.
pub fn settle(port: u16, name: &str) {
    wait_until(Duration::from_secs(120), "the Cranelift build", || {
        plugin_status(port, name)["compiler"] == "cranelift"
    });
}
