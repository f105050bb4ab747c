//! A running `tend run` and what it serves: `/status`, `/status/NAME`, `/metrics`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{http_get, strip_ansi, tend_bin, wait_until};

/// `/status` of a daemon as JSON, once it answers.
pub fn status(port: u16) -> serde_json::Value {
    let mut body = String::new();
    wait_until(
        Duration::from_secs(30),
        "/status to answer",
        || match http_get(port, "/status") {
            Ok((200, b)) => {
                body = b;
                true
            }
            _ => false,
        },
    );
    serde_json::from_str(&body).unwrap()
}

/// One plugin's entry in `/status` (null when absent).
pub fn plugin_status(port: u16, name: &str) -> serde_json::Value {
    let status = status(port);
    let plugins = status["plugins"].as_array().unwrap();
    plugins
        .iter()
        .find(|p| p["name"] == name)
        .cloned()
        .unwrap_or(serde_json::Value::Null)
}

/// Wait until `name`'s `/status` entry satisfies `condition`; returns it.
pub fn wait_for_plugin(
    port: u16,
    name: &str,
    what: &str,
    condition: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let current = plugin_status(port, name);
        if condition(&current) {
            return current;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {name}: {what}; last status: {current:#}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A running `tend run`, killed on drop if still running.
pub struct Daemon {
    child: Option<Child>,
    log: PathBuf,
}

impl Daemon {
    /// Start `tend run -c CONFIG` in the background, logging to `log`
    /// (truncated first), with extra environment variables.
    pub(crate) fn spawn(config: &Path, log: PathBuf, env: &[(&str, &str)]) -> Daemon {
        let _ = std::fs::remove_file(&log);
        let child = Command::new(tend_bin())
            .args(["run", "-c"])
            .arg(config)
            .env("TEND_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .unwrap(),
            )
            .spawn()
            .unwrap();
        Daemon {
            child: Some(child),
            log,
        }
    }

    /// Everything the daemon logged so far (without ANSI colours).
    /// Never panics (it is also read while a failing test unwinds, where a
    /// second panic would abort every test of the binary): a log that cannot
    /// be read is empty.
    pub fn log(&self) -> String {
        let mut text = String::new();
        let _ = std::fs::File::open(&self.log).and_then(|mut f| f.read_to_string(&mut text));
        strip_ansi(&text)
    }

    /// How many log lines contain every one of `needles`.
    pub fn count(&self, needles: &[&str]) -> usize {
        self.log()
            .lines()
            .filter(|l| needles.iter().all(|n| l.contains(n)))
            .count()
    }

    pub fn wait_for_log(&self, within: Duration, needles: &[&str]) {
        wait_until(within, &format!("a log line with {needles:?}"), || {
            self.count(needles) > 0
        });
        let _ = self.log();
    }

    /// Times (seconds since the epoch) of log lines containing every needle.
    pub fn times_of(&self, needles: &[&str]) -> Vec<f64> {
        self.log()
            .lines()
            .filter(|l| needles.iter().all(|n| l.contains(n)))
            .filter_map(|l| humantime::parse_rfc3339(l.split_whitespace().next()?).ok())
            .map(|t| {
                t.duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_secs_f64()
            })
            .collect()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// SIGTERM, then wait; returns whether it exited 0.
    pub fn terminate(self, within: Duration) -> bool {
        self.terminate_logged(within).0
    }

    /// [`Daemon::terminate`], also returning everything the daemon logged
    /// (without ANSI colours), its last lines included.
    pub fn terminate_logged(mut self, within: Duration) -> (bool, String) {
        let mut child = self.child.take().unwrap();
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return (status.success(), self.log());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("tend did not exit within {within:?} of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            if std::thread::panicking() {
                eprintln!("--- tend log ---\n{}", self.log());
            }
        }
    }
}

/// `/status/NAME` of a daemon as JSON: the plugin's schedule (`running`,
/// `next_run`, `requeue`), its grants, its last outcome.
pub fn plugin_detail(port: u16, name: &str) -> serde_json::Value {
    let mut body = String::new();
    wait_until(
        Duration::from_secs(30),
        &format!("/status/{name} to answer"),
        || match http_get(port, &format!("/status/{name}")) {
            Ok((200, b)) => {
                body = b;
                true
            }
            _ => false,
        },
    );
    serde_json::from_str(&body).unwrap()
}

/// The value of metric `name` on a daemon's `/metrics` (summed over its label
/// sets); None when absent.
pub fn metric(port: u16, name: &str) -> Option<f64> {
    let (status, body) = http_get(port, "/metrics").ok()?;
    assert_eq!(status, 200, "/metrics: {body}");
    let values: Vec<f64> = body
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}
