//! The OpenStack fake (tests/peers/openstack-fake.py: Keystone v3, Nova, Neutron)
//! and the real `openstack` CLI against it. [`OpenStackFake`] starts the fake as a
//! child of the test process on a free port and stops it by PID on drop; tests seed
//! servers and security groups and switch faults on through its `/fake` control API,
//! and read what clients sent from its request log. Its API contract is
//! /work/notes/openstack-contract.md (the real backend is written against the same).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::{port_file, stop_child, venv_python, wait_child_ready};
use crate::{http_call, http_get, workspace_root};

/// target/venv's python with aiohttp (the fake) and python-openstackclient (the
/// `openstack` CLI next to it); `TEND_OPENSTACK_PYTHON` names another.
pub fn openstack_python() -> PathBuf {
    static PYTHON: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    PYTHON
        .get_or_init(|| {
            venv_python(
                "TEND_OPENSTACK_PYTHON",
                "aiohttp, openstackclient",
                "the OpenStack fake (tests/peers/openstack-fake.py) and its CLI tests",
            )
        })
        .clone()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// One request the fake served (Keystone, Nova, Neutron, Glance; not /fake).
#[derive(Debug, Clone)]
pub struct OpenStackRequest {
    pub method: String,
    pub path: String,
    /// The raw query string ("" when none).
    pub query: String,
    pub status: u16,
}

/// The fake's request log, with counts of the requests tests ask about.
#[derive(Debug, Clone)]
pub struct OpenStackRequests(pub Vec<OpenStackRequest>);

impl std::ops::Deref for OpenStackRequests {
    type Target = [OpenStackRequest];
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl OpenStackRequests {
    /// Requests with `method` whose path starts with `path_prefix`.
    pub fn count(&self, method: &str, path_prefix: &str) -> usize {
        self.0
            .iter()
            .filter(|r| r.method == method && r.path.starts_with(path_prefix))
            .count()
    }

    /// DELETEs of servers (`/compute/v2.1/servers/{id}`), `Some(id)`: of that one.
    pub fn server_deletes(&self, id: Option<&str>) -> usize {
        let prefix = format!("/compute/v2.1/servers/{}", id.unwrap_or(""));
        self.count("DELETE", &prefix)
    }

    /// POSTs of security group rules.
    pub fn rule_creates(&self) -> usize {
        self.count("POST", "/network/v2.0/security-group-rules")
    }

    /// PUTs of ports (security group changes), `Some(id)`: of that one.
    pub fn port_updates(&self, id: Option<&str>) -> usize {
        self.count("PUT", &format!("/network/v2.0/ports/{}", id.unwrap_or("")))
    }

    /// GETs of server listings (`servers/detail` pages).
    pub fn server_list_pages(&self) -> usize {
        self.count("GET", "/compute/v2.1/servers/detail")
    }

    /// Token requests (`POST /identity/v3/auth/tokens`).
    pub fn token_requests(&self) -> usize {
        self.count("POST", "/identity/v3/auth/tokens")
    }

    /// Requests answered `status`.
    pub fn with_status(&self, status: u16) -> usize {
        self.0.iter().filter(|r| r.status == status).count()
    }
}

/// What a run of the `openstack` CLI printed, and its exit code.
#[derive(Debug)]
pub struct CliOutput {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl CliOutput {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// The OpenStack fake on a free loopback port, its state in a temporary
/// directory (port, openstack-fake.pid, clouds.yaml, server.err). Stopped by PID
/// on drop: SIGTERM, then SIGKILL after 5 s.
pub struct OpenStackFake {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

impl OpenStackFake {
    /// Start with the defaults: tokens live 3600 s, pages hold up to 1000.
    pub fn start() -> OpenStackFake {
        Self::start_with(&[])
    }

    /// Start with fake arguments: `--token-ttl SECONDS`, `--max-limit N` (Nova's
    /// and Neutron's page size cap). Returns once GET /identity/v3 answers.
    pub fn start_with(args: &[&str]) -> OpenStackFake {
        let dir = tempfile::tempdir().unwrap();
        let err_path = dir.path().join("server.err");
        let mut child = Command::new(openstack_python())
            .arg(workspace_root().join("tests/peers/openstack-fake.py"))
            .arg("0")
            .arg("--state-dir")
            .arg(dir.path())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err_path).unwrap())
            .spawn()
            .unwrap();
        let port = wait_child_ready(
            &mut child,
            "the OpenStack fake",
            &err_path,
            Duration::from_secs(20),
            || {
                port_file(dir.path())
                    .filter(|&p| matches!(http_get(p, "/identity/v3"), Ok((200, _))))
            },
        );
        OpenStackFake {
            child: Some(child),
            port,
            dir,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Keystone's v3 URL, what a clouds.yaml's auth_url holds.
    pub fn auth_url(&self) -> String {
        format!("{}/identity/v3", self.url())
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A clouds.yaml naming `tend-fake` (password auth: tend / tend-secret,
    /// project cluster, domain Default, region RegionOne) and `tend-fake-app`
    /// (application credential tend-app / app-secret).
    pub fn clouds_yaml(&self) -> PathBuf {
        self.dir.path().join("clouds.yaml")
    }

    /// One request: (status, JSON body, or the text as a JSON string; Null when
    /// empty). `token` goes in X-Auth-Token. Panics when the exchange fails.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> (u16, Value) {
        self.try_call(method, path, token, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// [`OpenStackFake::call`], but an exchange that fails (the fake cut the
    /// answer short) is an error rather than a panic.
    pub fn try_call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> std::io::Result<(u16, Value)> {
        let mut headers = vec![
            ("Content-Type", "application/json"),
            ("Accept", "application/json"),
        ];
        if let Some(token) = token {
            headers.push(("X-Auth-Token", token));
        }
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let (status, text) = http_call(
            self.port,
            method,
            path,
            &headers,
            &body,
            Duration::from_secs(30),
        )?;
        let json = match text.trim() {
            "" => Value::Null,
            t => serde_json::from_str(t).unwrap_or_else(|_| Value::String(text.clone())),
        };
        Ok((status, json))
    }

    /// PUT `body` to `path` with `If-Match: revision_number=REVISION` (Neutron's
    /// compare-and-swap): (status, JSON).
    pub fn call_with_if_match(
        &self,
        path: &str,
        token: &str,
        revision: u64,
        body: &Value,
    ) -> (u16, Value) {
        let if_match = format!("revision_number={revision}");
        let headers = [
            ("Content-Type", "application/json"),
            ("X-Auth-Token", token),
            ("If-Match", if_match.as_str()),
        ];
        let (status, text) = http_call(
            self.port,
            "PUT",
            path,
            &headers,
            &body.to_string(),
            Duration::from_secs(30),
        )
        .unwrap_or_else(|e| panic!("PUT {path}: {e}"));
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// A fresh token by password (tend / tend-secret, project cluster).
    pub fn token(&self) -> String {
        self.issue_token(&json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": "tend", "domain": {"name": "Default"}, "password": "tend-secret"}}},
            "scope": {"project": {"name": "cluster", "domain": {"name": "Default"}}}}}))
            .unwrap_or_else(|status| panic!("password authentication failed: {status}"))
    }

    /// POST /identity/v3/auth/tokens with `body`: the X-Subject-Token, or the
    /// status when it was not 201.
    pub fn issue_token(&self, body: &Value) -> Result<String, u16> {
        use std::io::{Read, Write};
        let body = body.to_string();
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        write!(
            stream,
            "POST /identity/v3/auth/tokens HTTP/1.0\r\nHost: 127.0.0.1\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let (status, _) = crate::split_response(&response);
        if status != 201 {
            return Err(status);
        }
        let head = response.split("\r\n\r\n").next().unwrap_or("");
        Ok(head
            .lines()
            .find_map(|l| {
                l.split_once(':')
                    .filter(|(name, _)| name.eq_ignore_ascii_case("x-subject-token"))
                    .map(|(_, v)| v.trim().to_string())
            })
            .expect("a 201 from Keystone without X-Subject-Token"))
    }

    /// A control request (`/fake/...`) that must answer 200 or 201: its JSON.
    fn control(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let (status, json) = self.call(method, &format!("/fake/{path}"), None, body);
        assert!(
            status == 200 || status == 201,
            "{method} /fake/{path}: {status} {json}"
        );
        json
    }

    /// Everything empty again: servers, groups, ports, tokens, faults, the log.
    pub fn reset(&self) {
        self.control("POST", "reset", None);
    }

    /// Seed a server (`{"name", "status"?, "task_state"?, "created"? |
    /// "age_seconds"?, "metadata"?, "addresses"? ({"private": ["10.0.0.5"],
    /// "public": [floating]}), "security_groups"? (ids), "id"?, "zone"?}); its id.
    pub fn add_server(&self, server: &Value) -> String {
        self.control("POST", "servers", Some(server))["id"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Seed `count` servers named `<template.name>-<i>`; their ids.
    pub fn add_servers_bulk(&self, count: usize, template: &Value) -> Vec<String> {
        self.control(
            "POST",
            "servers/bulk",
            Some(&json!({"count": count, "template": template})),
        )["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| id.as_str().unwrap().to_string())
            .collect()
    }

    /// Change a server (`{"status"?, "task_state"?, "metadata"?}`): its Nova view.
    pub fn patch_server(&self, id: &str, patch: &Value) -> Value {
        self.control("PATCH", &format!("servers/{id}"), Some(patch))
    }

    /// Seed a security group (`{"name", "description"?, "id"?, "rules"?}`; no
    /// rules given: Neutron's two default egress rules); its id.
    pub fn add_group(&self, group: &Value) -> String {
        self.control("POST", "security-groups", Some(group))["id"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Merge faults into the current ones (see the fake's contract: `fail`,
    /// `empty_servers`, `truncate`, `bad_marker`, `expire_tokens`, `slow`,
    /// `delete_seconds`, `duplicate_server`: an ID its listing page names twice).
    pub fn fault(&self, faults: &Value) {
        self.control("POST", "faults", Some(faults));
    }

    pub fn clear_faults(&self) {
        self.control("POST", "faults/clear", None);
    }

    /// Change `token_ttl` (seconds, for tokens issued from now), `max_limit`,
    /// `delete_seconds`; the resulting config.
    pub fn config(&self, config: &Value) -> Value {
        self.control("POST", "config", Some(config))
    }

    /// The request log since the last reset or [`OpenStackFake::clear_requests`].
    pub fn requests(&self) -> OpenStackRequests {
        let log = self.control("GET", "requests", None);
        OpenStackRequests(
            log.as_array()
                .unwrap()
                .iter()
                .map(|r| OpenStackRequest {
                    method: r["method"].as_str().unwrap().to_string(),
                    path: r["path"].as_str().unwrap().to_string(),
                    query: r["query"].as_str().unwrap_or("").to_string(),
                    status: r["status"].as_u64().unwrap() as u16,
                })
                .collect(),
        )
    }

    pub fn clear_requests(&self) {
        self.control("DELETE", "requests", None);
    }

    /// `{"servers": [Nova views], "security_groups": [...], "ports": [...],
    /// "tokens", "faults", "delete_seconds"}`.
    pub fn state(&self) -> Value {
        self.control("GET", "state", None)
    }

    /// A server's Nova view from the state, None when it is gone.
    pub fn server(&self, id: &str) -> Option<Value> {
        self.state()["servers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .cloned()
    }

    /// Run the real `openstack` CLI (target/venv's) with this fake's clouds.yaml
    /// and `--os-cloud cloud` before `args`.
    pub fn cli(&self, cloud: &str, args: &[&str]) -> CliOutput {
        let bin = openstack_python().with_file_name("openstack");
        assert!(
            bin.exists(),
            "{} is missing: run `cargo xtask test`, which installs python-openstackclient \
             into target/venv",
            bin.display()
        );
        let output = Command::new(&bin)
            .env("OS_CLIENT_CONFIG_FILE", self.clouds_yaml())
            .env("HOME", self.dir.path())
            .env_remove("OS_CLOUD")
            .arg("--os-cloud")
            .arg(cloud)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        CliOutput {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// `openstack --os-cloud tend-fake ARGS -f json`, which must succeed: parsed.
    pub fn cli_json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-f", "json"]);
        let out = self.cli("tend-fake", &all);
        assert!(
            out.success(),
            "openstack {all:?} failed ({:?}): {}",
            out.code,
            out.stderr
        );
        serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("openstack {all:?} printed no JSON ({e}): {}", out.stdout))
    }

    /// SIGTERM, then wait (SIGKILL after 5 s); true when it exited on SIGTERM.
    pub fn stop(&mut self) -> bool {
        self.child
            .take()
            .is_none_or(|mut child| stop_child(&mut child, Duration::from_secs(5)))
    }
}

impl Drop for OpenStackFake {
    fn drop(&mut self) {
        if std::thread::panicking() && self.child.is_some() {
            let err =
                std::fs::read_to_string(self.dir.path().join("server.err")).unwrap_or_default();
            if !err.trim().is_empty() {
                eprintln!("--- OpenStack fake stderr ---\n{err}");
            }
        }
        self.stop();
    }
}
