//! A real OCI registry (tests/peers/registry.sh), plain or as a pull-through cache.

use std::process::Command;

use crate::{free_port, workspace_root};

/// A real OCI registry (tests/peers/registry.sh), stopped by PID on drop.
pub struct Registry {
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Registry {
    pub fn start() -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let status = Command::new(workspace_root().join("tests/peers/registry.sh"))
            .args(["start", dir.path().to_str().unwrap(), &port.to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "registry did not start");
        Registry { port, dir }
    }

    /// A pull-through cache of `remote` (`http://127.0.0.1:PORT`): distribution's
    /// proxy mode, as a node's registry cache runs. It answers `GET /v2/` by itself
    /// and fetches from `remote` what it is asked for; its [`Registry::log`] shows
    /// every request (with containerd's `?ns=docker.io` for a mirrored docker.io).
    pub fn start_pull_through(remote: &str) -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let status = Command::new(workspace_root().join("tests/peers/registry.sh"))
            .args([
                "start",
                dir.path().to_str().unwrap(),
                &port.to_string(),
                remote,
            ])
            .status()
            .unwrap();
        assert!(status.success(), "the pull-through cache did not start");
        Registry { port, dir }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The file the registry serves blob `digest` (`sha256:…`) from: what a
    /// test alters to play a corrupted or tampered registry.
    pub fn blob_file(&self, digest: &str) -> std::path::PathBuf {
        let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
        self.dir
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// What the registry logged so far: its access log (every request, with
    /// its query string) and its warnings.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = Command::new(workspace_root().join("tests/peers/registry.sh"))
            .args(["stop", self.dir.path().to_str().unwrap()])
            .status();
    }
}

/// `tend-author plugins push FILE REFERENCE --insecure [--sign-key KEY]` (key
/// password "test"): the `oci://…@sha256:…` reference it printed.
pub fn push_plugin(
    file: &std::path::Path,
    reference: &str,
    sign_key: Option<&std::path::Path>,
) -> String {
    let mut command = Command::new(crate::author_bin());
    command
        .args(["plugins", "push"])
        .arg(file)
        .args([reference, "--insecure"])
        .env("COSIGN_PASSWORD", "test");
    if let Some(key) = sign_key {
        command.arg("--sign-key").arg(key);
    }
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "push failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pinned = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(
        pinned.starts_with("oci://") && pinned.contains("@sha256:"),
        "{pinned}"
    );
    pinned
}
