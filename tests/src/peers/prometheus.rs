//! A real Prometheus (tests/peers/prometheus.sh): scrapes live tends and
//! evaluates the project's alerting rules, so an alert's expression is
//! checked against what a tend really exports, labels included.

use crate::{free_port, http_get, url_encode, workspace_root};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// A Prometheus scraping tend targets every second, stopped by PID on drop.
pub struct Prometheus {
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Prometheus {
    /// Scrape each `(port, node)` on loopback as job `tend-metrics` with the
    /// label `node`, as the ServiceMonitor does, and evaluate `rules`.
    pub fn start(rules: &Path, targets: &[(u16, &str)]) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let targets = targets
            .iter()
            .map(|(p, node)| format!("127.0.0.1:{p}={node}"));
        let status = Command::new(workspace_root().join("tests/peers/prometheus.sh"))
            .args(["start", dir.path().to_str().unwrap(), &port.to_string()])
            .arg(rules)
            .args(targets)
            .status()
            .unwrap();
        assert!(status.success(), "prometheus did not start");
        Prometheus { port, dir }
    }

    /// The series an instant query of `expr` answers now (its `result`).
    pub fn query(&self, expr: &str) -> Vec<Value> {
        let path = format!("/api/v1/query?query={}", url_encode(expr));
        let (code, body) = http_get(self.port, &path).unwrap();
        let answer: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        assert_eq!(code, 200, "{expr}: {body}");
        answer["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Read its config and rule files again (SIGHUP), as an operator's change does.
    pub fn reload(&self) {
        let pid = std::fs::read_to_string(self.dir.path().join("prometheus.pid")).unwrap();
        let sent = Command::new("kill")
            .args(["-HUP", pid.trim()])
            .status()
            .unwrap();
        assert!(sent.success(), "SIGHUP to prometheus {pid}");
    }

    /// What Prometheus logged (rule evaluation errors among it).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        super::stop_with_script("prometheus.sh", self.dir.path());
    }
}
