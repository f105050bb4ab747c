//! The fake Kubernetes API server (tests/peers/kube-apiserver.py) and a real
//! kubectl against it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Sandbox, http_call, http_get, url_encode, workspace_root};

/// The bearer token of the fixtures' admin (`kubernetes-admin`, in the group
/// system:masters), which the fake registers at start: the test's own requests
/// and the kubeconfig in its state directory carry it. Never given to tend.
pub const KUBE_ADMIN_TOKEN: &str = "tend-fake-admin-token";

/// The condition types a healthy node carries from others than tend: the
/// kubelet's (MemoryPressure, DiskPressure, PIDPressure, Ready) and the
/// network plugin's NetworkUnavailable, in the order a real Node lists them.
/// Tend must never change them.
pub const KUBELET_CONDITION_TYPES: [&str; 5] = [
    "NetworkUnavailable",
    "MemoryPressure",
    "DiskPressure",
    "PIDPressure",
    "Ready",
];

/// When the seeded kubelet last reported (fixed, so a later read can be
/// compared with [`kubelet_conditions`] as it is).
pub const KUBELET_SEEN_AT: &str = "2026-01-01T00:00:00Z";

/// The conditions of a healthy node as its kubelet (and, for
/// NetworkUnavailable, the route controller) writes them: each type of
/// [`KUBELET_CONDITION_TYPES`] with the real reason and message, heartbeat and
/// transition at [`KUBELET_SEEN_AT`].
pub fn kubelet_conditions() -> serde_json::Value {
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        serde_json::json!({
            "type": kind, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": KUBELET_SEEN_AT, "lastTransitionTime": KUBELET_SEEN_AT,
        })
    };
    serde_json::json!([
        condition(
            "NetworkUnavailable",
            "False",
            "RouteCreated",
            "RouteController created a route"
        ),
        condition(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available"
        ),
        condition(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure"
        ),
        condition(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available"
        ),
        condition(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status"
        ),
    ])
}

/// A Node `name` as a registered, healthy kubelet leaves it: its
/// [`kubelet_conditions`], an InternalIP and its nodeInfo.
pub fn kubelet_node(name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "conditions": kubelet_conditions(),
            "addresses": [{"type": "InternalIP", "address": "10.0.0.10"}, {"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": "v1.33.0", "osImage": "Debian GNU/Linux 13 (trixie)",
                         "kernelVersion": "6.12.0", "containerRuntimeVersion": "containerd://2.1.0"},
        },
    })
}

// ---------------------------------------------------------------------------
// The fake Kubernetes API server (tests/peers/kube-apiserver.py) and kubectl
// against it (tests/e2e/kube_fake.rs). KubeApi starts the server as a child of
// the test process and stops it by PID; Kubectl runs a real kubectl against it.
// ---------------------------------------------------------------------------

/// target/venv's python, checked once to have the fake API server's packages
/// (aiohttp, jsonpatch, PyYAML), which `cargo xtask test` installs there (xtask's
/// VENV_PACKAGES). `TEND_KUBE_PYTHON` names another python. Panics with what to
/// run when they are missing: the harness does not install anything itself.
/// A Node's condition of `kind` (its `status.conditions` entry), if it has one.
pub fn node_condition<'a>(
    node: &'a serde_json::Value,
    kind: &str,
) -> Option<&'a serde_json::Value> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

pub fn kube_python() -> PathBuf {
    static PYTHON: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    PYTHON
        .get_or_init(|| {
            super::venv_python(
                "TEND_KUBE_PYTHON",
                "aiohttp, jsonpatch, yaml",
                "the fake Kubernetes API server (tests/peers/kube-apiserver.py)",
            )
        })
        .clone()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The fake Kubernetes API server on a free loopback port, its state in a
/// temporary directory (kubeconfig, request log, server.err). Stopped by PID on
/// drop: SIGTERM, then SIGKILL after 5 s.
pub struct KubeApi {
    child: Option<Child>,
    port: u16,
    pid: u32,
    dir: tempfile::TempDir,
}

impl KubeApi {
    /// Start with the defaults: a watch history of 10000 events, a bookmark
    /// every 60 s on watches that allow them.
    pub fn start() -> KubeApi {
        Self::start_with(&[])
    }

    /// Start with extra server arguments: `--history N` (events kept for watch
    /// replay; older resourceVersions get 410), `--bookmark-interval SECONDS`,
    /// `--token TOKEN=USER` (a bearer token whose requests RBAC authorizes).
    /// It also serves HTTPS on `dir()/tls-port` (certificate `dir()/tls.crt`).
    /// Returns once GET /version answers (anonymous, as on a real server).
    pub fn start_with(args: &[&str]) -> KubeApi {
        let dir = tempfile::tempdir().unwrap();
        let err = std::fs::File::create(dir.path().join("server.err")).unwrap();
        let mut child = Command::new(kube_python())
            .arg(workspace_root().join("tests/peers/kube-apiserver.py"))
            .arg("0")
            .arg("--state-dir")
            .arg(dir.path())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .unwrap();
        let pid = child.id();
        let port_file = dir.path().join("port");
        let deadline = Instant::now() + Duration::from_secs(20);
        let port = loop {
            if let Some(port) = std::fs::read_to_string(&port_file)
                .ok()
                .and_then(|p| p.trim().parse::<u16>().ok())
                && matches!(http_get(port, "/version"), Ok((200, _)))
            {
                break port;
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "the fake API server exited at start ({status}): {}",
                    std::fs::read_to_string(dir.path().join("server.err")).unwrap_or_default()
                );
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the fake API server did not answer GET /version within 20 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        KubeApi {
            child: Some(child),
            port,
            pid,
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

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The server's state directory (port, kube-apiserver.pid, kubeconfig,
    /// kube-apiserver.log, server.err).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The admin's kubeconfig (the fixtures': [`KUBE_ADMIN_TOKEN`] over HTTPS,
    /// as kubectl sends credentials over TLS only; namespace `default`). Never
    /// tend's: see [`KubeApi::grant_rbac`].
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// Write a kubeconfig for the server's plain HTTP port to `path`, its user
    /// the bearer `token` (kube-rs sends it over plain HTTP too), namespace
    /// `default`. Written then renamed: a running tend never reads half a file.
    pub fn write_kubeconfig(&self, path: &Path, token: &str) {
        let tmp = path.with_extension("tmp");
        std::fs::write(
            &tmp,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
                 users:\n- name: sa\n  user:\n    token: {token}\ncontexts:\n- name: fake\n  context:\n\
                 \x20   cluster: fake\n    user: sa\n    namespace: default\ncurrent-context: fake\n",
                self.url()
            ),
        )
        .unwrap();
        std::fs::rename(tmp, path).unwrap();
    }

    /// Register a bearer `token` for `user` (`system:serviceaccount:NS:NAME`).
    pub fn register_token(&self, token: &str, user: &str) {
        let body = serde_json::json!({"token": token, "user": user});
        let (status, answer) = self.call("POST", "/fake/tokens", Some(&body));
        assert_eq!(status, 200, "POST /fake/tokens: {answer}");
    }

    /// `[host.kube]` naming the kubeconfig of the tend in `sandbox`, which
    /// [`KubeApi::grant_rbac`] writes.
    pub fn host_kube(&self, sandbox: &Sandbox) -> String {
        format!(
            "[host.kube]\nkubeconfig = \"{}\"\n",
            sandbox.path("kubeconfig").display()
        )
    }

    /// Give the tend of `sandbox` (its tend.toml written, its `[host.kube]`
    /// from [`KubeApi::host_kube`]) exactly the access an operator following
    /// examples/deploy gives it: the namespace and ServiceAccounts of
    /// examples/deploy and what `tend rbac` renders for tend.toml, applied
    /// with kubectl as the admin; then a token for the one ServiceAccount the
    /// RBAC binds (tend-node when it binds none), in tend's kubeconfig. RBAC
    /// the config's grants need and `tend rbac` leaves out is then refused
    /// (403) to tend as a real API server would. Call it again after a config
    /// change. Returns the ServiceAccount's user name.
    pub fn grant_rbac(&self, sandbox: &Sandbox) -> String {
        let rbac = sandbox.tend(&["rbac"]);
        assert!(rbac.success, "tend rbac: {}", rbac.stderr);
        let kubectl = Kubectl::version("1.33", self);
        let deploy = workspace_root().join("examples/deploy");
        let mut args = vec!["apply".to_string()];
        for manifest in [
            "namespace.yaml",
            "serviceaccount-node.yaml",
            "serviceaccount-cluster.yaml",
        ] {
            args.extend(["-f".into(), deploy.join(manifest).display().to_string()]);
        }
        kubectl.ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let accounts = if rbac_objects(&rbac.stdout) {
            let applied = kubectl.run_stdin(&["apply", "-f", "-", "-o", "json"], &rbac.stdout);
            assert!(applied.success(), "{applied:?}\n{}", rbac.stdout);
            bound_service_accounts(&serde_json::from_str(&applied.stdout).unwrap())
        } else {
            vec!["system:serviceaccount:tend-system:tend-node".to_string()]
        };
        assert!(
            accounts.len() == 1,
            "`tend rbac` binds {accounts:?}, but one tend runs as one ServiceAccount: \
             give the node and the cluster scope each its own tend\n{}",
            rbac.stdout
        );
        let user = accounts[0].clone();
        let token = format!("token-for-{user}").replace(':', "-");
        self.register_token(&token, &user);
        self.write_kubeconfig(&sandbox.path("kubeconfig"), &token);
        user
    }

    /// A request as the admin with a body of `content_type` (and `User-Agent:
    /// agent` when given): (status, body). Errors only when the exchange itself fails (a
    /// blackholed request times out after `timeout`).
    pub fn call_raw(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &str,
        agent: Option<&str>,
        timeout: Duration,
    ) -> std::io::Result<(u16, String)> {
        let admin = format!("Bearer {KUBE_ADMIN_TOKEN}");
        let mut headers = vec![
            ("Content-Type", content_type),
            ("Accept", "application/json"),
            ("Authorization", admin.as_str()),
        ];
        if let Some(agent) = agent {
            headers.push(("User-Agent", agent));
        }
        http_call(self.port, method, path, &headers, body, timeout)
    }

    /// A JSON request as the admin (the body, if any, as application/json):
    /// (status, JSON).
    pub fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let (status, text) = self
            .call_raw(
                method,
                path,
                "application/json",
                &body,
                None,
                Duration::from_secs(30),
            )
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let json = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
        (status, json)
    }

    /// A merge patch of `path` as the admin (a status subresource too),
    /// asserted to succeed.
    pub fn merge_patch(&self, path: &str, body: &serde_json::Value) {
        let (status, text) = self
            .call_raw(
                "PATCH",
                path,
                "application/merge-patch+json",
                &body.to_string(),
                None,
                Duration::from_secs(30),
            )
            .unwrap_or_else(|e| panic!("PATCH {path}: {e}"));
        assert_eq!(status, 200, "PATCH {path}: {text}");
    }

    /// Open a watch (`path` with its query, e.g.
    /// `/api/v1/nodes?watch=1&resourceVersion=0`); events as they come.
    pub fn watch(&self, path: &str) -> KubeWatch {
        KubeWatch::open(self.port, path, None)
    }

    /// A watch opened with `User-Agent: agent`.
    pub fn watch_as(&self, path: &str, agent: &str) -> KubeWatch {
        KubeWatch::open(self.port, path, Some(agent))
    }

    fn admin(&self, method: &str, path: &str) -> serde_json::Value {
        let (status, body) = self.call(method, path, None);
        assert_eq!(status, 200, "{method} {path}: {body}");
        body
    }

    /// `GET /fake/watches`: `total` open watches, `opened` since start, and
    /// `watches`: one entry per (group, version, resource, namespace,
    /// labelSelector, fieldSelector) with its `count` and `userAgents`.
    pub fn watches(&self) -> serde_json::Value {
        self.admin("GET", "/fake/watches")
    }

    /// Open watches of `resource` (plural, e.g. "nodes" or "leases"), any
    /// namespace or selector.
    pub fn open_watches(&self, resource: &str) -> u64 {
        self.watches()["watches"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|w| w["resource"] == resource)
            .map(|w| w["count"].as_u64().unwrap())
            .sum()
    }

    /// `GET /fake/requests`: `total`, `counts` per verb (get, list, watch,
    /// create, update, patch, delete, deletecollection, nonresource),
    /// `resources` ({"pods": {"list": 1, ...}}), `seq` and `log` (every
    /// request: seq, verb, method, path, query, resource, namespace, name,
    /// userAgent, contentType, code, user: the token's user, `kubernetes-admin`
    /// for the admin, `system:anonymous` without credentials, null on a 401).
    pub fn requests(&self) -> serde_json::Value {
        self.admin("GET", "/fake/requests")
    }

    /// The log entries of requests after sequence number `seq` (see
    /// [`KubeApi::request_seq`]).
    pub fn requests_since(&self, seq: u64) -> Vec<serde_json::Value> {
        self.admin("GET", &format!("/fake/requests?since={seq}"))["log"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// The sequence number of the last request so far.
    pub fn request_seq(&self) -> u64 {
        self.requests()["seq"].as_u64().unwrap()
    }

    /// Zero the request counts and log.
    pub fn reset_requests(&self) {
        self.admin("POST", "/fake/requests/reset");
    }

    /// Compact the event history up to now: watches and list continuations
    /// from an older resourceVersion get 410 Expired. Returns the compaction
    /// point.
    pub fn compact(&self) -> u64 {
        self.admin("POST", "/fake/compact")["compacted"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    }

    /// Send a BOOKMARK now on every watch that allows them; returns how many.
    pub fn bookmark(&self) -> u64 {
        self.admin("POST", "/fake/bookmark")["sent"]
            .as_u64()
            .unwrap()
    }

    /// For `seconds`, requests (and watch events) of clients whose User-Agent
    /// contains `agent` (everyone's with None) hang unanswered; when it ends,
    /// their connections are closed, as after a network partition.
    pub fn blackhole(&self, seconds: f64, agent: Option<&str>) {
        let mut path = format!("/fake/blackhole?seconds={seconds}");
        if let Some(agent) = agent {
            path.push_str(&format!("&userAgent={}", url_encode(agent)));
        }
        self.admin("POST", &path);
    }

    /// End a blackhole now.
    pub fn end_blackhole(&self) {
        self.admin("DELETE", "/fake/blackhole");
    }

    /// For `seconds`, requests (from a User-Agent containing `agent`, when
    /// given) answer 503 at once and their open watches end: the API server
    /// failing, not silent.
    pub fn outage(&self, seconds: f64, agent: Option<&str>) {
        let mut path = format!("/fake/outage?seconds={seconds}");
        if let Some(agent) = agent {
            path.push_str(&format!("&userAgent={}", url_encode(agent)));
        }
        self.admin("POST", &path);
    }

    /// End an outage now.
    pub fn end_outage(&self) {
        self.admin("DELETE", "/fake/outage");
    }

    /// Run the kubelet stand-in of `node` (`POST /fake/kubelet?node=NODE`):
    /// from now on, every pod bound to `node` that is being deleted gracefully
    /// (those already terminating included) is deleted for good when its grace
    /// period ends (its deletionTimestamp), with grace 0 as a kubelet's final
    /// delete does: a DELETED watch event. Without it (the default) such a pod
    /// stays Terminating. It does nothing else a kubelet does (no pod status).
    pub fn run_kubelet(&self, node: &str) {
        self.admin("POST", &format!("/fake/kubelet?node={}", url_encode(node)));
    }

    /// Stop the kubelet stand-in of `node` (`DELETE /fake/kubelet?node=NODE`):
    /// its pods being deleted stay Terminating again. [`KubeApi::reset`] stops
    /// every stand-in.
    pub fn stop_kubelet(&self, node: &str) {
        self.admin(
            "DELETE",
            &format!("/fake/kubelet?node={}", url_encode(node)),
        );
    }

    /// Remove every object but the default namespaces (each removal is a
    /// DELETED watch event), stop every kubelet stand-in, then compact the
    /// history.
    pub fn reset(&self) {
        self.admin("POST", "/fake/reset");
    }

    /// The server's current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.admin("GET", "/fake/state")["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    }

    /// The request log the server wrote (one line per request).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("kube-apiserver.log")).unwrap_or_default()
    }

    /// The report tend's node Lease of `node` in `namespace` carries (its
    /// `tend.dev/revision` annotation), if the Lease and the report exist.
    pub fn node_report(&self, namespace: &str, node: &str) -> Option<serde_json::Value> {
        let path =
            format!("/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/tend-node-{node}");
        let (code, lease) = self.call("GET", &path, None);
        if code == 404 {
            return None;
        }
        assert_eq!(code, 200, "{lease}");
        let text = lease["metadata"]["annotations"]["tend.dev/revision"].as_str()?;
        Some(serde_json::from_str(text).unwrap())
    }

    /// A Lease in `namespace` that looks like tend's node Lease of `node`,
    /// written by someone else (the cluster's admin), with `report` in its
    /// `tend.dev/revision` annotation; renewed for the next century when
    /// `fresh`, never otherwise.
    pub fn plant_node_lease(&self, namespace: &str, node: &str, report: &str, fresh: bool) {
        let spec = match fresh {
            true => serde_json::json!({
                "holderIdentity": node,
                "renewTime": "2099-01-01T00:00:00.000000Z",
                "leaseDurationSeconds": 3600
            }),
            false => serde_json::json!({"holderIdentity": node}),
        };
        let lease = serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": format!("tend-node-{node}"),
                "labels": {"tend.dev/node-lease": "true"},
                "annotations": {"tend.dev/revision": report}
            },
            "spec": spec
        });
        let (code, body) = self.call(
            "POST",
            &format!("/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"),
            Some(&lease),
        );
        assert_eq!(code, 201, "{body}");
    }

    /// Create [`kubelet_node`] `name` as the admin (a Node takes its status on
    /// create, as the real strategy allows the kubelet's registration); the
    /// created Node.
    pub fn seed_node(&self, name: &str) -> serde_json::Value {
        let (status, body) = self.call("POST", "/api/v1/nodes", Some(&kubelet_node(name)));
        assert_eq!(status, 201, "create Node {name}: {body}");
        body
    }

    /// Write requests (POST, PUT, PATCH) the server answered, whatever the
    /// answer, whose path is `path` or below it (`/api/v1/nodes/n1` counts
    /// `/api/v1/nodes/n1/status` too, not `/api/v1/nodes/n10`), from its request
    /// log: the API load a client causes ("API writes per node per hour").
    /// Requests refused before they were answered (401, an outage's 503, a
    /// blackhole) and the `/fake/*` endpoints are not in the log.
    pub fn writes_to(&self, path: &str) -> usize {
        let path = path.trim_end_matches('/');
        self.log()
            .lines()
            .filter(|line| {
                let mut fields = line.split(' ').skip(1);
                let (Some(method), Some(target)) = (fields.next(), fields.next()) else {
                    return false;
                };
                let target = target.split('?').next().unwrap_or_default();
                matches!(method, "POST" | "PUT" | "PATCH")
                    && target
                        .strip_prefix(path)
                        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
            })
            .count()
    }

    /// SIGTERM, then wait (SIGKILL after 5 s); true when it exited on SIGTERM.
    pub fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        super::stop_child(&mut child, Duration::from_secs(5))
    }
}

impl Drop for KubeApi {
    fn drop(&mut self) {
        if std::thread::panicking() && self.child.is_some() {
            let err =
                std::fs::read_to_string(self.dir.path().join("server.err")).unwrap_or_default();
            if !err.trim().is_empty() {
                eprintln!("--- fake API server stderr ---\n{err}");
            }
        }
        self.stop();
    }
}

/// Whether `tend rbac` output holds any object (it is only comments when
/// tend needs no RBAC).
fn rbac_objects(yaml: &str) -> bool {
    yaml.lines()
        .any(|l| !l.trim().is_empty() && !l.starts_with('#') && l != "---")
}

/// The users (`system:serviceaccount:NS:NAME`) of the ServiceAccount subjects
/// of the bindings in `applied` (`kubectl apply -o json`: one object or a List).
fn bound_service_accounts(applied: &serde_json::Value) -> Vec<String> {
    let items = applied["items"]
        .as_array()
        .cloned()
        .unwrap_or_else(|| vec![applied.clone()]);
    let mut users: Vec<String> = items
        .iter()
        .filter_map(|o| o["subjects"].as_array())
        .flatten()
        .filter(|s| s["kind"] == "ServiceAccount")
        .map(|s| {
            format!(
                "system:serviceaccount:{}:{}",
                s["namespace"].as_str().unwrap_or_default(),
                s["name"].as_str().unwrap_or_default()
            )
        })
        .collect();
    users.sort();
    users.dedup();
    users
}

/// A watch on the fake API server as the admin, read event by event (HTTP/1.0: the server
/// closes the connection when the watch ends).
pub struct KubeWatch {
    reader: std::io::BufReader<std::net::TcpStream>,
    /// The HTTP status of the watch request.
    pub status: u16,
}

impl KubeWatch {
    fn open(port: u16, path: &str, agent: Option<&str>) -> KubeWatch {
        use std::io::{BufRead, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let agent = agent.map_or(String::new(), |a| format!("User-Agent: {a}\r\n"));
        write!(
            stream,
            "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nAccept: application/json\r\n\
             Authorization: Bearer {KUBE_ADMIN_TOKEN}\r\n{agent}\r\n"
        )
        .unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut reader = std::io::BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let status = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                break;
            }
        }
        KubeWatch { reader, status }
    }

    /// The next event (`{"type": ..., "object": ...}`) within `within`; None
    /// when none came in time or the server ended the watch.
    pub fn next(&mut self, within: Duration) -> Option<serde_json::Value> {
        use std::io::BufRead;
        self.reader
            .get_ref()
            .set_read_timeout(Some(within.max(Duration::from_millis(1))))
            .unwrap();
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(serde_json::from_str(line.trim()).unwrap()),
        }
    }

    /// Events until one satisfies `want` (returned), panicking after `within`.
    pub fn until(
        &mut self,
        within: Duration,
        what: &str,
        want: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "timed out after {within:?} waiting for {what}"
            );
            if let Some(event) = self.next(left)
                && want(&event)
            {
                return event;
            }
        }
    }
}

/// What a kubectl run printed, and its exit code.
#[derive(Debug)]
pub struct KubectlOutput {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl KubectlOutput {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// kubectl `version` ("1.27" ... "1.33"): `kubectl.VERSION` in the Google
/// Cloud SDK (/usr/lib/google-cloud-sdk/bin) or in `TEND_KUBECTL_DIR`.
pub fn kubectl_bin(version: &str) -> PathBuf {
    let dir = std::env::var_os("TEND_KUBECTL_DIR").map_or_else(
        || PathBuf::from("/usr/lib/google-cloud-sdk/bin"),
        PathBuf::from,
    );
    let bin = dir.join(format!("kubectl.{version}"));
    assert!(
        bin.exists(),
        "{} is missing: the tests run kubectl {version} from the Google Cloud SDK \
         (its kubectl package, google-cloud-cli-kubectl, ships kubectl.1.27 \
         ... kubectl.1.33; the tests use 1.27, 1.28 and 1.33); set TEND_KUBECTL_DIR to a directory holding kubectl.{version}",
        bin.display()
    );
    bin
}

/// A real kubectl pointed at a [`KubeApi`] (its kubeconfig, its own discovery
/// cache directory).
pub struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
    cache: tempfile::TempDir,
}

impl Kubectl {
    /// kubectl `version` ("1.27" ... "1.33") against `api`: see [`kubectl_bin`].
    pub fn version(version: &str, api: &KubeApi) -> Kubectl {
        let bin = kubectl_bin(version);
        Kubectl {
            bin,
            kubeconfig: api.kubeconfig(),
            cache: tempfile::tempdir().unwrap(),
        }
    }

    pub fn bin(&self) -> &Path {
        &self.bin
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.cache.path())
            .arg("--cache-dir")
            .arg(self.cache.path().join("cache"))
            .args(args);
        cmd
    }

    /// Run to completion.
    pub fn run(&self, args: &[&str]) -> KubectlOutput {
        self.run_stdin(args, "")
    }

    /// Run to completion with `stdin` as its standard input (`-f -`).
    pub fn run_stdin(&self, args: &[&str], stdin: &str) -> KubectlOutput {
        use std::io::Write;
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let output = child.wait_with_output().unwrap();
        KubectlOutput {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Run; assert it succeeded; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.success(),
            "{} {args:?} failed ({:?}): {}",
            self.bin.display(),
            out.code,
            out.stderr
        );
        out.stdout
    }

    /// `kubectl ARGS -o json`, parsed.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        serde_json::from_str(&self.ok(&all)).unwrap()
    }

    /// `kubectl apply -f -` of `manifest` with `extra` flags.
    pub fn apply(&self, manifest: &str, extra: &[&str]) -> KubectlOutput {
        let mut args = vec!["apply", "-f", "-"];
        args.extend_from_slice(extra);
        self.run_stdin(&args, manifest)
    }

    /// Start it in the background, stdout and stderr appended to `out`.
    pub fn spawn(&self, args: &[&str], out: &Path) -> Child {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(out)
            .unwrap();
        self.command(args)
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap()
    }
}
