//! Real peers on loopback, each started by a script in tests/peers (or in
//! process) and stopped on drop.

pub mod containerd;
pub mod kube;
pub mod net;
pub mod registry;
pub mod systemd;

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
