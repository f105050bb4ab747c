//! tests/peers/hostile-registry.py: an OCI registry on loopback that answers
//! a huge manifest, a huge error body, a redirect to the metadata endpoint or
//! a link-local token realm (see the script), recording every request.

use super::{stop_child, wait_child_ready};
use crate::{free_port, workspace_root};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The hostile registry, stopped by its PID on drop.
pub struct HostileRegistry {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl HostileRegistry {
    /// Start it serving `component` as `tend/good`; returns once it answers.
    pub fn start(component: &Path) -> HostileRegistry {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let err = dir.path().join("registry.err");
        let mut child = Command::new("python3")
            .arg(workspace_root().join("tests/peers/hostile-registry.py"))
            .arg(port.to_string())
            .arg(component)
            .arg(dir.path().join("requests.jsonl"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        wait_child_ready(
            &mut child,
            "the hostile registry",
            &err,
            Duration::from_secs(20),
            || matches!(crate::http_get(port, "/v2/"), Ok((200, _))).then_some(()),
        );
        HostileRegistry { child, port, dir }
    }

    /// `oci://127.0.0.1:PORT/tend/REPOSITORY:v1`.
    pub fn at(&self, repository: &str) -> String {
        format!("oci://127.0.0.1:{}/tend/{repository}:v1", self.port)
    }

    /// Every request so far, as the script recorded it.
    pub fn requests(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.dir.path().join("requests.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for HostileRegistry {
    fn drop(&mut self) {
        stop_child(&mut self.child, Duration::from_secs(5));
    }
}
