//! Real peers on loopback, each started by a script in tests/peers (or in
//! process) and stopped on drop.

pub mod aws;
pub mod containerd;
pub mod hostile_registry;
pub mod kube;
pub mod net;
pub mod openstack;
pub mod prometheus;
pub mod registry;
pub mod systemd;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Stops the peer in `dir` with its script (`tests/peers/<script> stop DIR`),
/// which fails unless nothing of the peer is left; a peer that did not stop
/// cleanly fails the test, unless it is already failing.
pub(crate) fn stop_with_script(script: &str, dir: &std::path::Path) {
    let status =
        std::process::Command::new(crate::workspace_root().join("tests/peers").join(script))
            .arg("stop")
            .arg(dir)
            .status();
    if !status.is_ok_and(|s| s.success()) && !std::thread::panicking() {
        panic!(
            "the peer of {script} in {} did not stop cleanly",
            dir.display()
        );
    }
}

/// target/venv's python (or the one `override_var` names) when it can import
/// `modules` (`"aiohttp, yaml"`), which `cargo xtask test` installs there (xtask's
/// VENV_PACKAGES); else what to run, naming `needed_by`. The harness installs
/// nothing itself. Callers keep the answer in a `OnceLock` and panic with the error.
pub(crate) fn venv_python(
    override_var: &str,
    modules: &str,
    needed_by: &str,
) -> Result<PathBuf, String> {
    let python = std::env::var_os(override_var).map_or_else(
        || crate::workspace_root().join("target/venv/bin/python"),
        PathBuf::from,
    );
    let ok = Command::new(&python)
        .args(["-c", &format!("import {modules}")])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    match ok {
        true => Ok(python),
        false => Err(format!(
            "{} cannot import {modules}, which {needed_by} needs: run `cargo xtask test`, which \
             installs them into target/venv (or set {override_var} to a python that has them)",
            python.display()
        )),
    }
}

/// Poll until `ready` holds while `child` runs; panics with `what` and the
/// peer's stderr (`err`) when it exits or `within` passes (killing it then).
pub(crate) fn wait_child_ready<T>(
    child: &mut Child,
    what: &str,
    err: &Path,
    within: Duration,
    mut ready: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = ready() {
            return value;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "{what} exited at start ({status}): {}",
                std::fs::read_to_string(err).unwrap_or_default()
            );
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what} did not answer within {within:?}: {}",
                std::fs::read_to_string(err).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The port a peer wrote to `dir/port` once it listens.
pub(crate) fn port_file(dir: &Path) -> Option<u16> {
    std::fs::read_to_string(dir.join("port"))
        .ok()
        .and_then(|p| p.trim().parse().ok())
}

/// Stop a peer child by its PID: SIGTERM, then SIGKILL after `grace`; true
/// when it exited on SIGTERM.
pub(crate) fn stop_child(child: &mut Child, grace: Duration) -> bool {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + grace;
    loop {
        if child.try_wait().unwrap().is_some() {
            return true;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
