//! A scratch directory with its config, the `tend` commands run against it,
//! its journal, and a ConfigMap volume as kubelet lays it out.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::{Daemon, plugin, split_response, tend_bin, workspace_root};

/// A scratch directory with a plugins dir, a state dir and a config file.
/// All sandboxes share one compile cache, so each component compiles once.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Default for Sandbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("plugins")).unwrap();
        Sandbox { dir }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Copy a built plugin into the plugins dir under `name`.
    pub fn add_plugin(&self, built: &str, name: &str) -> &Self {
        std::fs::copy(plugin(built), self.path(&format!("plugins/{name}.wasm"))).unwrap();
        self
    }

    /// Write tend.toml: a [host] section, then `plugins` (TOML text).
    pub fn config(&self, plugins: &str) -> &Self {
        self.config_with_host("", plugins)
    }

    /// Write tend.toml with extra `[host]` lines (such as `listen = ...`).
    pub fn config_with_host(&self, host: &str, plugins: &str) -> &Self {
        // A shared compile cache unless the test brings its own.
        let cache = match host.contains("cache-dir") {
            true => String::new(),
            false => format!(
                "cache-dir = \"{}\"\n",
                workspace_root().join("target/e2e-cache").display()
            ),
        };
        let text = format!(
            "[host]\nplugins-dir = \"plugins\"\nstate-dir = \"state\"\n{cache}node-name = \"e2e-node\"\n{host}\n{plugins}"
        );
        // Write then rename, as an operator's tooling would: a running tend never
        // reads half a file.
        let tmp = self.path(".tend.toml.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(tmp, self.path("tend.toml")).unwrap();
        self
    }

    /// Run `tend ARGS... -c tend.toml` to completion.
    pub fn tend(&self, args: &[&str]) -> Outcome {
        self.tend_with_env(args, &[])
    }

    /// [`Sandbox::tend`] with extra environment variables (a cloud's
    /// credentials, which a reconcile run in the command's own process needs).
    pub fn tend_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> Outcome {
        let output = Command::new(tend_bin())
            .args(args)
            .arg("-c")
            .arg(self.path("tend.toml"))
            .env("TEND_LOG", "warn")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        Outcome::from(output)
    }

    /// `POST PATH` over the running daemon's control socket (`state/tend.sock`;
    /// the HTTP port is read-only), e.g. `/reconcile/NAME`, which answers once
    /// the reconcile is done, with its summary: (status, body).
    pub fn control_post(&self, path: &str) -> std::io::Result<(u16, String)> {
        let mut stream = UnixStream::connect(self.path("state/tend.sock"))?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        write!(
            stream,
            "POST {path} HTTP/1.1\r\nHost: tend\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response)?;
        Ok(split_response(&String::from_utf8_lossy(&response)))
    }

    /// Start `tend run` in the background.
    pub fn daemon(&self) -> Daemon {
        self.daemon_with_env(&[])
    }

    /// Start `tend run` with extra environment variables.
    pub fn daemon_with_env(&self, env: &[(&str, &str)]) -> Daemon {
        Daemon::spawn(&self.path("tend.toml"), self.path("tend.log"), env)
    }

    /// Start `tend run -c CONFIG` for a config outside the sandbox's own
    /// tend.toml (a ConfigMap volume's `tend.toml` link), logging to tend.log.
    pub fn daemon_for(&self, config: &Path) -> Daemon {
        Daemon::spawn(config, self.path("tend.log"), &[])
    }

    /// Write tend.toml as [`Sandbox::config_with_host`] does, but with `node`
    /// as `[host] node-name` (what `$NODE` in a kube grant stands for).
    pub fn config_on_node(&self, node: &str, host: &str, plugins: &str) -> &Self {
        let text = format!(
            "[host]\nplugins-dir = \"plugins\"\nstate-dir = \"state\"\ncache-dir = \"{}\"\nnode-name = \"{node}\"\n{host}\n{plugins}",
            workspace_root().join("target/e2e-cache").display()
        );
        let tmp = self.path(".tend.toml.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(tmp, self.path("tend.toml")).unwrap();
        self
    }
}

/// What a finished `tend` command printed.
#[derive(Debug)]
pub struct Outcome {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Outcome {
    fn from(o: Output) -> Self {
        Outcome {
            success: o.status.success(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

/// `tend journal --json` of a sandbox, one JSON object per entry.
pub fn journal(sandbox: &Sandbox) -> Vec<serde_json::Value> {
    let out = sandbox.tend(&["journal", "--json"]);
    assert!(out.success, "tend journal failed: {}", out.stderr);
    out.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Every line of `plugin`'s journal file as tend wrote it: an intent and its
/// result are separate lines (same `id`, each with its own `time_ms`), where
/// [`journal`] pairs them into one entry.
pub fn journal_lines(sandbox: &Sandbox, plugin: &str) -> Vec<serde_json::Value> {
    let path = sandbox.path(&format!("state/journal/{plugin}.jsonl"));
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

// ---------------------------------------------------------------------------
// A ConfigMap volume as kubelet lays it out (tests/e2e/configmap_reload.rs):
// `..<timestamp>/<key>` holds the data, `..data` links to the newest
// timestamped dir, `<key>` links to `..data/<key>`. An update writes a new
// timestamped dir, renames a new `..data_tmp` link over `..data` (atomic),
// then deletes the old dir: the user-visible `<key>` link never changes.
// ---------------------------------------------------------------------------

/// A directory updated the way kubelet's AtomicWriter updates a ConfigMap volume.
pub struct ConfigMapVolume {
    dir: PathBuf,
    generation: u32,
}

impl ConfigMapVolume {
    /// `dir` is created if missing; nothing is published yet.
    pub fn new(dir: &Path) -> ConfigMapVolume {
        std::fs::create_dir_all(dir).unwrap();
        ConfigMapVolume {
            dir: dir.to_path_buf(),
            generation: 0,
        }
    }

    /// The user-visible path of `key` (what a pod is given: `/etc/tend/tend.toml`).
    pub fn path(&self, key: &str) -> PathBuf {
        self.dir.join(key)
    }

    /// The timestamped dir `..data` points at now, if any.
    pub fn data_dir(&self) -> Option<PathBuf> {
        std::fs::read_link(self.dir.join("..data"))
            .ok()
            .map(|target| self.dir.join(target))
    }

    /// Every `..<timestamp>` dir present (kubelet keeps exactly one).
    pub fn timestamped_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                name.starts_with("..") && name != "..data" && name != "..data_tmp" && p.is_dir()
            })
            .filter(|p| !p.is_symlink())
            .collect();
        dirs.sort();
        dirs
    }

    /// Publish `files` (key, content) in the order of kubelet's
    /// AtomicWriter.Write: a new timestamped dir holding them, user-visible
    /// links for new keys, `..data_tmp` -> the new dir renamed over `..data`,
    /// then the previous timestamped dir deleted.
    pub fn publish(&mut self, files: &[(&str, &str)]) {
        use std::os::unix::fs::symlink;
        self.generation += 1;
        let old = self.data_dir();
        // kubelet: os.MkdirTemp(dir, time.Now().UTC().Format("..2006_01_02_15_04_05.")).
        let stamp = humantime::format_rfc3339_nanos(std::time::SystemTime::now())
            .to_string()
            .replace(['-', 'T', ':'], "_")
            .replace('Z', "");
        let (seconds, nanos) = stamp.split_once('.').unwrap();
        let name = format!("..{seconds}.{nanos}{}", self.generation);
        let new = self.dir.join(&name);
        std::fs::create_dir(&new).unwrap();
        for (key, content) in files {
            std::fs::write(new.join(key), content).unwrap();
        }
        for (key, _) in files {
            let visible = self.dir.join(key);
            if std::fs::symlink_metadata(&visible).is_err() {
                symlink(Path::new("..data").join(key), &visible).unwrap();
            }
        }
        let tmp = self.dir.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        symlink(&name, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
        if let Some(old) = old {
            std::fs::remove_dir_all(old).unwrap();
        }
    }
}
