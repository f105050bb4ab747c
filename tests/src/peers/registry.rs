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
        Registry::start_on(free_port())
    }

    /// A registry on a fixed `port`: for content signed for a fixed
    /// `127.0.0.1:PORT/…` name (tests/fixtures/cosign).
    pub fn start_on(port: u16) -> Registry {
        let dir = tempfile::tempdir().unwrap();
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

    /// Store `manifest` (an OCI image manifest, exactly these bytes) as
    /// `repository:tag`, after the `blobs` it names: how a test puts content
    /// another tool pushed into the registry as that tool laid it out.
    pub fn put_image(&self, repository: &str, tag: &str, manifest: &[u8], blobs: &[Vec<u8>]) {
        let base = format!("{}/v2/{repository}", self.endpoint());
        for blob in blobs {
            let started = curl(
                &["-X", "POST", "-D", "-", &format!("{base}/blobs/uploads/")],
                &[],
            );
            let started = String::from_utf8_lossy(&started);
            let location = started
                .lines()
                .find_map(|line| {
                    line.strip_prefix("Location: ")
                        .or(line.strip_prefix("location: "))
                })
                .unwrap_or_else(|| panic!("no upload location in {started}"))
                .trim();
            let separator = if location.contains('?') { '&' } else { '?' };
            let url = format!("{location}{separator}digest={}", crate::sha256_of(blob));
            curl(
                &[
                    "-X",
                    "PUT",
                    "-H",
                    "Content-Type: application/octet-stream",
                    &url,
                ],
                blob,
            );
        }
        curl(
            &[
                "-X",
                "PUT",
                "-H",
                "Content-Type: application/vnd.oci.image.manifest.v1+json",
                &format!("{base}/manifests/{tag}"),
            ],
            manifest,
        );
    }

    /// The bytes of the OCI image manifest `repository:reference`.
    pub fn manifest(&self, repository: &str, reference: &str) -> Vec<u8> {
        let url = format!("{}/v2/{repository}/manifests/{reference}", self.endpoint());
        let out = Command::new("curl")
            .args([
                "-fsS",
                "-H",
                "Accept: application/vnd.oci.image.manifest.v1+json",
                &url,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "GET {url}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
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

/// `curl -fsS ARGS --data-binary @-` with `body` on stdin: its stdout.
fn curl(args: &[&str], body: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = Command::new("curl")
        .args(["-fsS", "--data-binary", "@-"])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(body).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}
