//! The cases every implementation of the capabilities must end alike: the
//! host (through its WIT `Host` traits) and the SDK's fakes (Rust natively,
//! Python and JavaScript through the same fakes compiled to wasm) each run
//! [`cases`] on the node of [`fixture`] and compare the [`outcome`] of every
//! call with the case's [`Expect`], exactly.
//!
//! Every function a plugin imports has a case that succeeds and one that
//! fails (a test reads `wit/` to hold that), with the grant decisions of each
//! rules module and the input bounds both sides call
//! ([`tend_rules::systemd::check_names`], [`tend_rules::kube::check_size`],
//! [`tend_rules::cri::check_filter_labels`], [`tend_rules::files::file_mode`],
//! [`tend_rules::state`]). Rules the capability adapters add on top (a
//! granted root cannot be written or removed, methods are upper-cased before
//! the check) are tested where they live.
//!
//! Test data, not code a plugin builds: only tests depend on this crate.

use serde_json::{Value, json};
use tend_rules::Refusal;
use tend_rules::cloud::CloudGrant;
use tend_rules::conditions::ConditionsGrant;
use tend_rules::cri::{CriGrant, MAX_FILTER_LABELS, MAX_LABEL_TEXT, Operation as CriOperation};
use tend_rules::files::{FileGrant, OWN_PROC};
use tend_rules::http::UrlPattern;
use tend_rules::kube::{KubeRule, MAX_BODY, MAX_NOTE, MAX_REASON, OWN_LEASE, PatchShape};
use tend_rules::logs::LogsGrant;
use tend_rules::systemd::{MAX_NAME_LEN, MAX_NAMES, SystemdGrant};

pub mod fixture;
mod populated;

/// The plugin name the expected messages use.
pub const PLUGIN: &str = "conformance";

/// One operation, a plugin's call as the capability sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Read(String),
    Write(String),
    Remove(String),
    List(String),
    Stat(String),
    /// An HTTP request; `method` is upper case.
    Send {
        method: String,
        url: String,
    },
    /// A write of this path with these mode bits.
    WriteMode(String, u32),
    /// A Kubernetes API call, against the objects of [`kube_objects`].
    Kube(KubeOp),
    /// A systemd call.
    Systemd(SystemdCall),
    /// A CRI sandbox removal.
    CriRemove(String),
    /// A CRI sandbox listing filtered on these labels.
    CriList(Vec<(String, String)>),
    /// A cloud call.
    Cloud(CloudCall),
    /// A state write of `len` bytes under `key` (state is always granted).
    StateSet {
        key: String,
        len: usize,
    },
    /// A metric series of this name, value 1 (metrics are always granted).
    Metric {
        counter: bool,
        name: String,
    },
    /// Any WIT function with its arguments as WIT JSON (`sdk/fakes/README.md`).
    Wit {
        cap: &'static str,
        function: &'static str,
        args: Value,
    },
}

/// One Kubernetes API call of a plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeOp {
    pub call: KubeCall,
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    /// The object's name (unused by lists; a create's body names its own).
    pub name: String,
}

/// One cloud call of a plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloudCall {
    ListInstances {
        tag: String,
        value: String,
    },
    GetInstance(String),
    DeleteInstance(String),
    FindSecurityGroup(String),
    /// A tcp ingress rule over every port from `cidr` into `group`.
    EnsureRule {
        group: String,
        cidr: String,
    },
    /// An ingress rule of `protocol` ("tcp", "any") over `ports` (None:
    /// all) from security group `remote` into `group`.
    EnsureGroupRule {
        group: String,
        protocol: String,
        ports: Option<(u16, u16)>,
        remote: String,
    },
}

/// One systemd call of a plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SystemdCall {
    Status(String),
    ListUnits(Vec<String>),
    Restart(String),
    Enable(Vec<String>),
    DaemonReload,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KubeCall {
    Get,
    /// A list with the plugin's own selectors.
    List {
        labels: Option<String>,
        fields: Option<String>,
    },
    /// A create of this JSON body.
    Create(String),
    Patch(PatchShape, String),
    Delete,
    /// A Normal Event about the object.
    Event {
        reason: String,
        message: String,
    },
}

impl Op {
    /// Whether the grant check is the one for mutations (`write = true`).
    pub fn writes(&self) -> bool {
        matches!(self, Op::Write(_) | Op::WriteMode(..) | Op::Remove(_))
    }
}

/// How the call ends, on the fixture's node and cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// It succeeded.
    Ok,
    /// Refused by a grant or an input rule with exactly this error and message.
    Refused(Refusal),
    /// It failed with an error of this kind other than denied or invalid
    /// (`not-found`, `conflict`, ...): the kind is compared, the message is
    /// the backend's own.
    Failed(String),
    /// A listing answered these names, sorted (see [`outcome`]); for
    /// `http.send-all`, each request's outcome in order.
    Listed(Vec<String>),
}

/// Grants of plugin [`PLUGIN`], one operation, and the decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    pub files: Vec<FileGrant>,
    pub http: Vec<UrlPattern>,
    pub kube: Vec<KubeRule>,
    pub systemd: SystemdGrant,
    pub cri: CriGrant,
    pub cloud: CloudGrant,
    pub logs: LogsGrant,
    pub conditions: ConditionsGrant,
    pub op: Op,
    pub expect: Expect,
}

/// A case with no grant at all.
fn ungranted(op: Op, expect: Expect) -> Case {
    Case {
        files: Vec::new(),
        http: Vec::new(),
        kube: Vec::new(),
        systemd: SystemdGrant::default(),
        cri: CriGrant::default(),
        cloud: CloudGrant::default(),
        logs: LogsGrant::default(),
        conditions: ConditionsGrant::default(),
        op,
        expect,
    }
}

/// `call` under a grant of listing and getting pool `a`'s instances and of
/// adding rules to one group.
fn cloud(call: CloudCall, expect: Expect) -> Case {
    let grant = serde_json::from_value(json!({
        "operations": ["list-instances", "get-instance", "list-security-groups", "ensure-rule"],
        "instances": [{"tag": "kubernetes.io/cluster/a", "value": "owned"}],
        "security-groups": ["sg-0123456789abcdef0"],
        "remotes": ["10.244.0.0/16", "fd00:10:244::/56"],
        "ports": ["1-65535"],
    }))
    .expect("valid grant");
    Case {
        cloud: grant,
        ..ungranted(Op::Cloud(call), expect)
    }
}

/// `/etc` read-only, `/etc/containerd/certs.d` writable.
fn etc() -> Vec<FileGrant> {
    vec![
        FileGrant::new("/etc", false).expect("valid grant"),
        FileGrant::new("/etc/containerd/certs.d", true).expect("valid grant"),
    ]
}

/// `/proc` read-only.
fn proc() -> Vec<FileGrant> {
    vec![FileGrant::new("/proc", false).expect("valid grant")]
}

fn patterns(patterns: &[&str]) -> Vec<UrlPattern> {
    patterns
        .iter()
        .map(|p| UrlPattern::parse(p).expect("valid pattern"))
        .collect()
}

fn file(files: Vec<FileGrant>, op: Op, expect: Expect) -> Case {
    Case {
        files,
        ..ungranted(op, expect)
    }
}

fn send(http: &[&str], method: &str, url: &str, expect: Expect) -> Case {
    let op = Op::Send {
        method: method.into(),
        url: url.into(),
    };
    Case {
        http: patterns(http),
        ..ungranted(op, expect)
    }
}

fn denied(message: &str) -> Expect {
    Expect::Refused(Refusal::Denied(message.into()))
}

fn invalid(message: &str) -> Expect {
    Expect::Refused(Refusal::Invalid(message.into()))
}

fn failed(kind: &str) -> Expect {
    Expect::Failed(kind.into())
}

/// The table (about two hundred cases); see the crate docs.
pub fn cases() -> Vec<Case> {
    let p = |s: &str| s.to_string();
    let loopback = ["http://127.0.0.1:*/*"];
    let wildcard = ["http://*.example.com/*"];
    let ula = ["http://[fd00::a]:18080/*"];
    let ten = ["http://10.0.0.0/8:*/*"];
    let long_path = format!("/etc/{}", "a/".repeat(2100));
    // Expect::Ok, and sent to the fixture's network, where nothing answers.
    let unanswered = || failed("unavailable");
    vec![
        // files: inside a root, the innermost root, the roots themselves
        file(
            etc(),
            Op::Read(p("/etc/containerd/certs.d/docker.io/hosts.toml")),
            Expect::Ok,
        ),
        file(
            etc(),
            Op::Write(p("/etc/containerd/certs.d//docker.io/./hosts.toml")),
            Expect::Ok,
        ),
        // (a directory that is not empty: the backend's conflict)
        file(
            etc(),
            Op::Remove(p("/etc/containerd/certs.d/docker.io")),
            failed("conflict"),
        ),
        file(
            etc(),
            Op::List(p("/etc/containerd/certs.d")),
            listed(&["docker.io"]),
        ),
        file(etc(), Op::Stat(p("/etc/containerd/certs.d/")), Expect::Ok),
        file(etc(), Op::List(p("/etc")), listed(&["containerd", "hosts"])),
        // files: a read-only grant
        file(
            etc(),
            Op::Write(p("/etc/hosts")),
            denied(
                "/etc/hosts is granted read-only by { path = \"/etc\" }: set write = true on that grant in [plugins.conformance.grants] files",
            ),
        ),
        file(
            etc(),
            Op::Remove(p("/etc/containerd/config.toml")),
            denied(
                "/etc/containerd/config.toml is granted read-only by { path = \"/etc\" }: set write = true on that grant in [plugins.conformance.grants] files",
            ),
        ),
        // files: outside every grant
        file(
            etc(),
            Op::Read(p("/etcetera/x")),
            denied(
                "no files grant covers /etcetera/x: add { path = \"/etcetera\" } to [plugins.conformance.grants] files",
            ),
        ),
        file(
            etc(),
            Op::Stat(p("/")),
            denied(
                "no files grant covers /: add { path = \"/\" } to [plugins.conformance.grants] files",
            ),
        ),
        file(
            Vec::new(),
            Op::Read(p("/etc/hosts")),
            denied(
                "no files grant covers /etc/hosts: add { path = \"/etc\" } to [plugins.conformance.grants] files",
            ),
        ),
        file(
            Vec::new(),
            Op::Write(p("/var/lib/x")),
            denied(
                "no files grant covers /var/lib/x: add { path = \"/var/lib\", write = true } to [plugins.conformance.grants] files",
            ),
        ),
        // files: malformed paths
        file(
            etc(),
            Op::Read(p("/etc/containerd/certs.d/../../shadow")),
            invalid(
                "/etc/containerd/certs.d/../../shadow: `..` is not allowed in paths; name the file directly",
            ),
        ),
        file(
            etc(),
            Op::Read(p("etc/hosts")),
            invalid(
                "\"etc/hosts\": files are addressed by absolute path, for example \"/etc/containerd/certs.d/docker.io/hosts.toml\"",
            ),
        ),
        file(
            etc(),
            Op::Stat(p("/etc/\0x")),
            invalid(
                "\"/etc/\\0x\": files are addressed by absolute path, for example \"/etc/containerd/certs.d/docker.io/hosts.toml\"",
            ),
        ),
        // files: control characters (a name that would forge a log line)
        file(
            etc(),
            Op::Write(p("/etc/containerd/certs.d/x\nINFO forged")),
            invalid(
                "\"/etc/containerd/certs.d/x\\nINFO forged\": a path component contains the control character U+000A; name files without control characters",
            ),
        ),
        file(
            etc(),
            Op::Read(p("/etc/\u{1b}]0;title\u{7}")),
            invalid(
                "\"/etc/\\u{1b}]0;title\\u{7}\": a path component contains the control character U+001B; name files without control characters",
            ),
        ),
        // files: the innermost grant decides writes too
        file(
            vec![
                FileGrant::new("/etc", true).expect("valid grant"),
                FileGrant::new("/etc/ssl", false).expect("valid grant"),
            ],
            Op::Write(p("/etc/ssl/certs/ca.pem")),
            denied(
                "/etc/ssl/certs/ca.pem is granted read-only by { path = \"/etc/ssl\" }: set write = true on that grant in [plugins.conformance.grants] files",
            ),
        ),
        // files: Tend's own /proc entries, whatever the grants
        file(
            proc(),
            Op::Read(p("/proc/self/environ")),
            denied(&format!("/proc/self/environ: {OWN_PROC}")),
        ),
        file(
            proc(),
            Op::List(p("/proc/thread-self/fd")),
            denied(&format!("/proc/thread-self/fd: {OWN_PROC}")),
        ),
        file(proc(), Op::Stat(p("/proc/1/status")), Expect::Ok),
        // files: oversized paths
        file(
            etc(),
            Op::Read(long_path.clone()),
            invalid(&format!(
                "{}…: the path is 4205 bytes, over the limit of 4096; use a shorter path",
                &long_path[..64]
            )),
        ),
        file(
            etc(),
            Op::Write(format!("/etc/containerd/certs.d/{}", "n".repeat(256))),
            invalid(&format!(
                "/etc/containerd/certs.d/{}…: a path component is 256 bytes, over the limit of 255; use shorter names",
                "n".repeat(40)
            )),
        ),
        // http: ports
        send(&loopback, "GET", "http://127.0.0.1:5000/v2/", unanswered()),
        send(&loopback, "GET", "http://127.0.0.1/", unanswered()),
        send(
            &["https://registry.example.com"],
            "GET",
            "https://REGISTRY.example.com:443/v2/",
            unanswered(),
        ),
        send(
            &["https://registry.example.com"],
            "GET",
            "https://registry.example.com:8443/v2/",
            denied(
                "GET https://registry.example.com:8443/v2/: no http grant matches; add \"https://registry.example.com:8443/*\" to [plugins.conformance.grants] http",
            ),
        ),
        // http: scheme, host, path
        send(
            &loopback,
            "GET",
            "https://127.0.0.1:5000/v2/",
            denied(
                "GET https://127.0.0.1:5000/v2/: no http grant matches; add \"https://127.0.0.1:5000/*\" to [plugins.conformance.grants] http",
            ),
        ),
        send(&wildcard, "GET", "http://cache.example.com/v2/", unanswered()),
        send(
            &wildcard,
            "GET",
            "http://cache.example.com.evil.com/",
            denied(
                "GET http://cache.example.com.evil.com/: no http grant matches; add \"http://cache.example.com.evil.com:80/*\" to [plugins.conformance.grants] http",
            ),
        ),
        send(
            &["http://127.0.0.1:10248/healthz"],
            "GET",
            "http://127.0.0.1:10248/healthz/x",
            denied(
                "GET http://127.0.0.1:10248/healthz/x: no http grant matches; add \"http://127.0.0.1:10248/*\" to [plugins.conformance.grants] http",
            ),
        ),
        send(
            &[],
            "POST",
            "http://127.0.0.1:5000/v2/",
            denied(
                "POST http://127.0.0.1:5000/v2/: no http grant matches; add \"http://127.0.0.1:5000/*\" to [plugins.conformance.grants] http",
            ),
        ),
        // http: IP literals are addresses, never names
        send(&ula, "GET", "http://[fd00::a]:18080/v2/", unanswered()),
        send(
            &ula,
            "GET",
            "http://a:18080/v2/",
            denied(
                "GET http://a:18080/v2/: no http grant matches; add \"http://a:18080/*\" to [plugins.conformance.grants] http",
            ),
        ),
        send(&loopback, "GET", "http://2130706433:5000/v2/", unanswered()),
        send(
            &loopback,
            "GET",
            "http://127.0.0.1.example.com/",
            denied(
                "GET http://127.0.0.1.example.com/: no http grant matches; add \"http://127.0.0.1.example.com:80/*\" to [plugins.conformance.grants] http",
            ),
        ),
        // http: CIDR ranges
        send(&ten, "GET", "http://10.1.2.3:5000/v2/", unanswered()),
        send(
            &ten,
            "GET",
            "http://11.0.0.1:5000/v2/",
            denied(
                "GET http://11.0.0.1:5000/v2/: no http grant matches; add \"http://11.0.0.1:5000/*\" to [plugins.conformance.grants] http",
            ),
        ),
        send(
            &ten,
            "GET",
            "http://10.example.com/",
            denied(
                "GET http://10.example.com/: no http grant matches; add \"http://10.example.com:80/*\" to [plugins.conformance.grants] http",
            ),
        ),
        // http: one label under a wildcard
        send(
            &wildcard,
            "GET",
            "http://a.b.example.com/",
            denied(
                "GET http://a.b.example.com/: no http grant matches; add \"http://a.b.example.com:80/*\" to [plugins.conformance.grants] http",
            ),
        ),
        // http: malformed requests
        send(
            &["http://127.0.0.1:5000/v2/*"],
            "GET",
            "http://127.0.0.1:5000/v2/..%2Fsecret",
            invalid(
                "GET http://127.0.0.1:5000/v2/..%2Fsecret: an encoded `/` or `\\` (%2F, %5C) in the path is refused, since a server that decodes it would leave the granted path; send plain `/` separators",
            ),
        ),
        send(
            &wildcard,
            "GET",
            "http://evil.com:80@cache.example.com/",
            invalid(
                "GET http://evil.com:80@cache.example.com/: user info in URLs is not supported; send an Authorization header",
            ),
        ),
        send(
            &loopback,
            "GET",
            "file:///etc/passwd",
            invalid("GET file:///etc/passwd: only http and https URLs are supported"),
        ),
    ]
    .into_iter()
    .chain(kube_cases())
    .chain(drain_cases())
    .chain(node_cases())
    .chain(bound_cases())
    .chain(systemd_cases())
    .chain(cri_cases())
    .chain(cloud_cases())
    .chain(logs_cases())
    .chain(conditions_cases())
    .chain(populated::cases())
    .collect()
}

/// `op` under the logs grant `grant` (its TOML's JSON twin).
fn logs(grant: Value, op: Op, expect: Expect) -> Case {
    Case {
        logs: serde_json::from_value(grant).expect("valid grant"),
        ..ungranted(op, expect)
    }
}

/// A `logs.read` of `source` after `since`, filtered, at most `max`.
fn read_logs(source: &str, since: Option<&str>, filter: Value, max: u32) -> Op {
    Op::Wit {
        cap: "logs",
        function: "read",
        args: json!({"source": source, "since": since, "filter": filter, "max": max}),
    }
}

/// Logs: sources and units by grant, filters, cursors, bounds, and matches
/// only for a plugin with watch rules (the fixture's lines are in
/// [`fixture::setup_requests`]).
fn logs_cases() -> Vec<Case> {
    let kernel = || json!({"kernel": true});
    let all = || json!({"units": [], "identifiers": [], "max-priority": null});
    let matches = Op::Wit {
        cap: "logs",
        function: "matches",
        args: json!({}),
    };
    vec![
        logs(
            kernel(),
            read_logs("kernel", None, all(), 10),
            listed(&[
                "INFO: task kworker/0:1 blocked for more than 120 seconds.",
                "eth0: link up",
            ]),
        ),
        logs(
            kernel(),
            read_logs("kernel", Some("k1;b=fake;s=1"), all(), 10),
            listed(&["eth0: link up"]),
        ),
        logs(
            kernel(),
            read_logs("kernel", None, all(), 1),
            listed(&["INFO: task kworker/0:1 blocked for more than 120 seconds."]),
        ),
        logs(
            json!({"units": ["containerd.service"]}),
            read_logs("journal", None, all(), 10),
            listed(&["failed to start shim"]),
        ),
        logs(
            json!({"units": ["*.service"], "identifiers": ["kubelet"]}),
            read_logs(
                "journal",
                None,
                json!({"units": [], "identifiers": [], "max-priority": 3}),
                10,
            ),
            listed(&["failed to start shim"]),
        ),
        logs(
            json!({"identifiers": ["*"]}),
            read_logs(
                "journal",
                None,
                json!({"units": [], "identifiers": ["sshd"], "max-priority": null}),
                10,
            ),
            listed(&["Accepted publickey for root"]),
        ),
        logs(
            json!({"units": ["containerd.service"]}),
            read_logs("kernel", None, all(), 10),
            denied(
                "plugin \"conformance\" may not read the kernel log: add kernel = true to [plugins.conformance.grants.logs]",
            ),
        ),
        ungranted(
            read_logs("journal", None, all(), 10),
            denied(
                "plugin \"conformance\" may not read the journal log: add units = [\"<unit>\"] or identifiers = [\"<identifier>\"] to [plugins.conformance.grants.logs]",
            ),
        ),
        logs(
            kernel(),
            read_logs("kernel", None, all(), 0),
            invalid("read returns 1 to 1000 entries at a time, not 0; page with the cursor"),
        ),
        logs(
            kernel(),
            read_logs("kernel", Some("--file=/etc/shadow"), all(), 10),
            invalid(
                "logs cursor \"--file=/etc/shadow\": expected a logs cursor (the `cursor` of an entry or page, handed back unchanged), for example \"k1;b=0f5e3c7d9a0b4c1d8e2f3a4b5c6d7e8f;s=42\"",
            ),
        ),
        logs(
            kernel(),
            read_logs(
                "kernel",
                None,
                json!({"units": [], "identifiers": [], "max-priority": 9}),
                10,
            ),
            invalid("max-priority is a syslog priority, 0 (emerg) to 7 (debug)"),
        ),
        logs(
            json!({"kernel": true, "watch": [{"rule": "task-hung", "source": "kernel", "pattern": "blocked for more than"}]}),
            matches.clone(),
            listed(&[]),
        ),
        logs(
            kernel(),
            matches,
            denied(
                "plugin \"conformance\" has no watch rules, so nothing matches for it: add a [[plugins.conformance.grants.logs.watch]] rule",
            ),
        ),
    ]
}

/// `op` under a grant of [`fixture::CONDITIONS`], the second tied to a taint.
fn conditions(op: Op, expect: Expect) -> Case {
    let grant = json!(["KernelDeadlock", {"condition": "ReadonlyFilesystem", "taint-on": {"effect": "NoSchedule"}}]);
    Case {
        conditions: serde_json::from_value(grant).expect("valid grant"),
        ..ungranted(op, expect)
    }
}

/// A `conditions.set` of `condition` with `reason`, `message` and `ttl`.
fn set_condition(condition: &str, reason: &str, message: &str, ttl: Option<u32>) -> Op {
    Op::Wit {
        cap: "conditions",
        function: "set",
        args: json!({"report": {"condition": condition, "reason": reason, "message": message, "ttl-seconds": ttl}}),
    }
}

/// Conditions: only granted types, never the kubelet's, shapes and bounds
/// in the host's order (type, grant, note, TTL); the list of what the
/// fixture holds (one reported, one cleared) by type, status and reason.
fn conditions_cases() -> Vec<Case> {
    let clear = |condition: &str| Op::Wit {
        cap: "conditions",
        function: "clear",
        args: json!({"condition": condition, "reason": "TaskRecovered", "message": "no task blocked"}),
    };
    let list = || Op::Wit {
        cap: "conditions",
        function: "list",
        args: json!({}),
    };
    let hung =
        |condition: &str| set_condition(condition, "TaskHung", "task kworker/0:1 blocked", None);
    let not_granted = "condition \"Other\" is not granted: add it to [plugins.<name>.grants] conditions (a condition type has one owner)";
    vec![
        conditions(hung("KernelDeadlock"), Expect::Ok),
        conditions(
            set_condition("ReadonlyFilesystem", "RemountedReadonly", "", Some(300)),
            Expect::Ok,
        ),
        conditions(hung("Other"), denied(not_granted)),
        ungranted(
            hung("KernelDeadlock"),
            denied(
                "condition \"KernelDeadlock\" is not granted: add it to [plugins.<name>.grants] conditions (a condition type has one owner)",
            ),
        ),
        conditions(
            hung("Ready"),
            denied("condition \"Ready\" is the kubelet's: no plugin may set it"),
        ),
        conditions(
            hung("kernel-deadlock"),
            invalid(
                "condition type \"kernel-deadlock\": expected CamelCase letters and digits, at most 63 bytes, for example \"KernelDeadlock\"",
            ),
        ),
        conditions(
            set_condition("KernelDeadlock", "task hung", "", None),
            invalid(
                "condition reason \"task hung\": expected CamelCase letters and digits, at most 128 bytes, for example \"TaskHung\"",
            ),
        ),
        conditions(
            set_condition("KernelDeadlock", "TaskHung", &"x".repeat(1025), None),
            invalid("condition message: at most 1024 bytes, not 1025"),
        ),
        conditions(
            set_condition("KernelDeadlock", "TaskHung", "", Some(0)),
            invalid(
                "condition ttl-seconds 0: expected 1 to 604800 (a week), or none to hold until cleared",
            ),
        ),
        conditions(clear("KernelDeadlock"), Expect::Ok),
        conditions(clear("Other"), denied(not_granted)),
        conditions(
            list(),
            listed(&[
                "KernelDeadlock True TaskHung",
                "ReadonlyFilesystem False FilesystemWritable",
            ]),
        ),
        ungranted(
            list(),
            denied(
                "no condition types are granted, so none is held: add conditions = [\"<Type>\"] to [plugins.<name>.grants]",
            ),
        ),
    ]
}

/// Cloud: owners by key and value, IDs and rules by shape, groups by ID.
fn cloud_cases() -> Vec<Case> {
    let p = |s: &str| s.to_string();
    vec![
        cloud(
            CloudCall::ListInstances {
                tag: p("kubernetes.io/cluster/a"),
                value: p("owned"),
            },
            listed(&[fixture::INSTANCE_A]),
        ),
        cloud(
            CloudCall::ListInstances {
                tag: p("kubernetes.io/cluster/ab"),
                value: p("owned"),
            },
            denied(
                "cloud list-instances of instances tagged kubernetes.io/cluster/ab=owned is not granted: add { tag = \"kubernetes.io/cluster/ab\", value = \"owned\" } to instances in [plugins.conformance.grants] cloud",
            ),
        ),
        cloud(
            CloudCall::GetInstance(p("i-0123456789abcdef0/../x")),
            invalid(
                "cloud instance id \"i-0123456789abcdef0/../x\": expected an instance ID: an AWS instance ID (\"i-\" and 8 or 17 lower-case hexadecimal digits) or an OpenStack server UUID, for example \"i-0123456789abcdef0\"",
            ),
        ),
        cloud(CloudCall::GetInstance(p("i-0123456789abcdef0")), Expect::Ok),
        cloud(
            CloudCall::DeleteInstance(p("i-0123456789abcdef0")),
            denied(
                "cloud delete-instance of instance i-0123456789abcdef0 is not granted: add \"delete-instance\" to operations in [plugins.conformance.grants] cloud",
            ),
        ),
        cloud(
            CloudCall::FindSecurityGroup(p("nodes\nx")),
            invalid(
                "cloud security group name \"nodes\\nx\": expected non-empty printable text of at most 255 bytes",
            ),
        ),
        cloud(
            CloudCall::EnsureRule {
                group: p("sg-0123456789abcdef0"),
                cidr: p("10.244.0.0/16"),
            },
            Expect::Ok,
        ),
        cloud(
            CloudCall::EnsureRule {
                group: p("sg-0123456789abcdef1"),
                cidr: p("10.244.0.0/16"),
            },
            denied(
                "cloud ensure-rule of security group sg-0123456789abcdef1 is not granted: add \"sg-0123456789abcdef1\" to security-groups in [plugins.conformance.grants] cloud",
            ),
        ),
        cloud(
            CloudCall::EnsureRule {
                group: p("sg-0123456789abcdef0"),
                cidr: p("10.244.0.0/33"),
            },
            invalid(
                "cloud rule: \"10.244.0.0/33\" is not a CIDR: expected for example \"10.244.0.0/16\" or \"fd00:10:244::/56\"",
            ),
        ),
        // Rules are part of the grant: the pod CIDR is not the internet.
        cloud(
            CloudCall::EnsureRule {
                group: p("sg-0123456789abcdef0"),
                cidr: p("0.0.0.0/0"),
            },
            denied(
                "cloud ensure-rule of ingress ipv4 tcp from 0.0.0.0/0 into security group sg-0123456789abcdef0: the remote 0.0.0.0/0 lies inside none of remotes (10.244.0.0/16, fd00:10:244::/56): narrow the rule, or add \"0.0.0.0/0\" to remotes in [plugins.conformance.grants] cloud",
            ),
        ),
        cloud(
            CloudCall::EnsureRule {
                group: p("sg-0123456789abcdef0"),
                cidr: p("10.0.0.0/8"),
            },
            denied(
                "cloud ensure-rule of ingress ipv4 tcp from 10.0.0.0/8 into security group sg-0123456789abcdef0: the remote 10.0.0.0/8 lies inside none of remotes (10.244.0.0/16, fd00:10:244::/56): narrow the rule, or add \"10.0.0.0/8\" to remotes in [plugins.conformance.grants] cloud",
            ),
        ),
        cloud(
            CloudCall::EnsureRule {
                group: p("sg-0123456789abcdef0"),
                cidr: p("10.244.3.0/24"),
            },
            Expect::Ok,
        ),
        cloud(
            CloudCall::EnsureGroupRule {
                group: p("sg-0123456789abcdef0"),
                protocol: p("tcp"),
                ports: Some((22, 22)),
                remote: p("sg-0123456789abcdef1"),
            },
            denied(
                "cloud ensure-rule of ingress ipv4 tcp 22-22 from group sg-0123456789abcdef1 into security group sg-0123456789abcdef0: the remote group sg-0123456789abcdef1 is not granted: add \"sg-0123456789abcdef1\" to security-groups in [plugins.conformance.grants] cloud",
            ),
        ),
        cloud(
            CloudCall::EnsureGroupRule {
                group: p("sg-0123456789abcdef0"),
                protocol: p("any"),
                ports: None,
                remote: p("sg-0123456789abcdef0"),
            },
            denied(
                "cloud ensure-rule of ingress ipv4 any from group sg-0123456789abcdef0 into security group sg-0123456789abcdef0: protocol any is not among protocols (tcp, udp, icmp, icmpv6): add \"any\" to protocols in [plugins.conformance.grants] cloud",
            ),
        ),
    ]
}

/// Input bounds: file modes, kube bodies and Events, state keys and values.
fn bound_cases() -> Vec<Case> {
    let own_node = r#"[{"resource": "nodes", "verbs": ["get", "create", "patch"]}]"#;
    let node = ("v1", "Node", None, "node-1");
    // Compact JSON: the host bounds the text, the SDK the JSON it serializes.
    let body = |len: usize| {
        let wrapper = r#"{"metadata":{"labels":{"a":""}}}"#;
        let filler = "x".repeat(len - wrapper.len());
        format!(r#"{{"metadata":{{"labels":{{"a":"{filler}"}}}}}}"#)
    };
    let event = |reason: &str, message: &str| KubeCall::Event {
        reason: reason.into(),
        message: message.into(),
    };
    let state = |key: &str, len| {
        ungranted(
            Op::StateSet {
                key: key.into(),
                len,
            },
            Expect::Ok,
        )
    };
    let long_key = "k".repeat(tend_rules::state::MAX_KEY + 1);
    let writable = "/etc/containerd/certs.d/docker.io/hosts.toml";
    vec![
        // files: plain permission bits only
        file(etc(), Op::WriteMode(writable.into(), 0o755), Expect::Ok),
        file(
            etc(),
            Op::WriteMode(writable.into(), 0o4755),
            invalid(&format!(
                "{writable}: mode 4755 has bits beyond 0o777 (setuid, setgid, sticky or file type); plugins write plain permission bits only"
            )),
        ),
        file(
            etc(),
            Op::WriteMode(writable.into(), 0o1777),
            invalid(&format!(
                "{writable}: mode 1777 has bits beyond 0o777 (setuid, setgid, sticky or file type); plugins write plain permission bits only"
            )),
        ),
        // ...after the grant
        file(
            etc(),
            Op::WriteMode("/etc/hosts".into(), 0o4755),
            denied(
                "/etc/hosts is granted read-only by { path = \"/etc\" }: set write = true on that grant in [plugins.conformance.grants] files",
            ),
        ),
        // kube: bodies and Events
        kube(
            own_node,
            KubeCall::Patch(PatchShape::Merge, body(MAX_BODY)),
            node,
            Expect::Ok,
        ),
        kube(
            own_node,
            KubeCall::Patch(PatchShape::Merge, body(MAX_BODY + 1)),
            node,
            invalid("kube patch: 1048577 bytes, at most 1048576"),
        ),
        kube(
            own_node,
            event("LabelsApplied", &"m".repeat(MAX_NOTE)),
            node,
            Expect::Ok,
        ),
        kube(
            own_node,
            event(&"R".repeat(MAX_REASON + 1), "m"),
            node,
            invalid("kube event reason: 129 bytes, at most 128"),
        ),
        kube(
            own_node,
            event("LabelsApplied", &"m".repeat(MAX_NOTE + 1)),
            node,
            invalid("kube event message: 1025 bytes, at most 1024"),
        ),
        kube(
            own_node,
            event("labels applied", "m"),
            node,
            invalid(
                "kube event reason \"labels applied\": expected a CamelCase word such as \"LabelsApplied\"",
            ),
        ),
        // state: keys and values
        state("k", tend_rules::state::MAX_VALUE),
        Case {
            expect: invalid(
                "state keys must be 1 to 512 bytes long, not 0; use a shorter key (a hash of a long one)",
            ),
            ..state("", 1)
        },
        Case {
            expect: invalid(
                "state keys must be 1 to 512 bytes long, not 513; use a shorter key (a hash of a long one)",
            ),
            ..state(&long_key, 1)
        },
        Case {
            expect: invalid(
                "state value for \"k\" is 1048577 bytes; at most 1048576 are allowed: store less, or split it over several keys",
            ),
            ..state("k", tend_rules::state::MAX_VALUE + 1)
        },
    ]
}

/// systemd: units and operations, names per call.
fn systemd_cases() -> Vec<Case> {
    let grant: SystemdGrant = serde_json::from_value(json!({
        "units": ["kubelet.service", "tend-*.service"],
        "operations": ["restart"],
    }))
    .expect("valid systemd grant");
    let case = |call, expect| Case {
        systemd: grant.clone(),
        ..ungranted(Op::Systemd(call), expect)
    };
    let names = |n: usize, len: usize| vec!["u".repeat(len); n];
    let too_many = |what: &str| {
        invalid(&format!(
            "{what}: at most {MAX_NAMES} names of at most {MAX_NAME_LEN} bytes per call; split the call"
        ))
    };
    let uncovered = |unit: &str| {
        denied(&format!(
            "no systemd grant covers unit {unit}: add \"{unit}\" to units in [plugins.conformance.grants] systemd"
        ))
    };
    vec![
        case(SystemdCall::Status("kubelet.service".into()), Expect::Ok),
        case(SystemdCall::Status("tend-a.service".into()), Expect::Ok),
        case(SystemdCall::Restart("kubelet.service".into()), Expect::Ok),
        case(
            SystemdCall::Status("containerd.service".into()),
            uncovered("containerd.service"),
        ),
        case(
            SystemdCall::Restart("tend-.socket".into()),
            uncovered("tend-.socket"),
        ),
        case(
            SystemdCall::Enable(vec!["kubelet.service".into()]),
            denied(
                "systemd enable of kubelet.service is not granted: add \"enable\" to operations in [plugins.conformance.grants] systemd",
            ),
        ),
        case(
            SystemdCall::DaemonReload,
            denied(
                "systemd daemon-reload of the unit files is not granted: add \"daemon-reload\" to operations in [plugins.conformance.grants] systemd",
            ),
        ),
        case(
            SystemdCall::Status("../../etc/passwd".into()),
            invalid(
                "\"../../etc/passwd\" is not a unit name: expected for example \"kubelet.service\"",
            ),
        ),
        // only the granted units are listed
        case(
            SystemdCall::ListUnits(vec!["*.service".into()]),
            listed(&["kubelet.service"]),
        ),
        case(
            SystemdCall::ListUnits(names(MAX_NAMES, MAX_NAME_LEN)),
            listed(&[]),
        ),
        case(
            SystemdCall::ListUnits(names(MAX_NAMES + 1, 1)),
            too_many("list-units"),
        ),
        case(
            SystemdCall::ListUnits(names(1, MAX_NAME_LEN + 1)),
            too_many("list-units"),
        ),
        case(
            SystemdCall::Enable(names(MAX_NAMES + 1, 1)),
            too_many("enable"),
        ),
    ]
}

/// cri: reads need `read = true`; label filters are bounded.
fn cri_cases() -> Vec<Case> {
    let reader = CriGrant {
        read: true,
        ..CriGrant::default()
    };
    let list = |grant: &CriGrant, labels: Vec<(String, String)>, expect| Case {
        cri: grant.clone(),
        ..ungranted(Op::CriList(labels), expect)
    };
    let label = |k: &str, v: &str| (k.to_string(), v.to_string());
    let text = |what: &str, shown: &str| {
        invalid(&format!(
            "cri {what}: expected 1 to {MAX_LABEL_TEXT} bytes without control characters, got {shown:?}"
        ))
    };
    let long = "v".repeat(MAX_LABEL_TEXT + 1);
    vec![
        list(
            &reader,
            vec![label("io.kubernetes.pod.namespace", "default")],
            listed(&[fixture::SANDBOX_EXITED, fixture::SANDBOX_WEB]),
        ),
        list(
            &CriGrant::default(),
            vec![],
            denied(
                "cri list-pod-sandboxes is not granted: set read = true in [plugins.conformance.grants] cri",
            ),
        ),
        list(
            &reader,
            vec![label("k", ""); MAX_FILTER_LABELS],
            listed(&[]),
        ),
        list(
            &reader,
            vec![label("k", "v"); MAX_FILTER_LABELS + 1],
            invalid(
                "cri list-pod-sandboxes: at most 64 labels in a filter; filter on fewer and match the rest in the plugin",
            ),
        ),
        list(
            &reader,
            vec![label("k", &long)],
            text("label value", &long[..64]),
        ),
        list(&reader, vec![label("", "v")], text("label", "")),
        list(&reader, vec![label("a\nb", "v")], text("label", "a\nb")),
        Case {
            cri: CriGrant::default(),
            ..ungranted(
                Op::CriRemove(tend_rules::ident::CRI_ID.example.into()),
                denied(&format!(
                    "cri remove-pod-sandbox of {} is not granted: add \"remove-pod-sandbox\" to operations in [plugins.conformance.grants] cri",
                    tend_rules::ident::CRI_ID.example
                )),
            )
        },
    ]
}

/// The election Lease both implementations are told is Tend's own
/// (namespace, name).
pub const KUBE_OWN_LEASE: (&str, &str) = ("tend-system", "tend-cluster");

/// The objects the kube cases run against (node name "node-1"): two Nodes;
/// Pods `web` (node-1, tend=yes), `other` (node-2, tend=yes) and `bare`
/// (node-1, no labels) in "default"; the election Lease and another Lease.
pub fn kube_objects() -> Vec<Value> {
    let pod = |name: &str, node: &str, labels: Value| {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "default", "labels": labels},
               "spec": {"nodeName": node}})
    };
    let lease = |name: &str| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": name, "namespace": KUBE_OWN_LEASE.0},
               "spec": {"holderIdentity": "tend-0"}})
    };
    vec![
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}}),
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-2"}}),
        pod("web", "node-1", json!({"tend": "yes"})),
        pod("other", "node-2", json!({"tend": "yes"})),
        pod("bare", "node-1", json!({})),
        lease(KUBE_OWN_LEASE.1),
        lease("mine"),
    ]
}

fn kube(
    rules: &str,
    call: KubeCall,
    key: (&str, &str, Option<&str>, &str),
    expect: Expect,
) -> Case {
    let (api_version, kind, namespace, name) = key;
    let op = Op::Kube(KubeOp {
        call,
        api_version: api_version.into(),
        kind: kind.into(),
        namespace: namespace.map(str::to_string),
        name: name.into(),
    });
    Case {
        kube: serde_json::from_str(rules).expect("valid kube rules"),
        ..ungranted(op, expect)
    }
}

fn listed(names: &[&str]) -> Expect {
    Expect::Listed(names.iter().map(|n| n.to_string()).collect())
}

/// A `kube` function called by its WIT name and arguments, under `rules`.
fn kube_wit(rules: &str, function: &'static str, args: Value, expect: Expect) -> Case {
    let op = Op::Wit {
        cap: "kube",
        function,
        args,
    };
    Case {
        kube: serde_json::from_str(rules).expect("valid kube rules"),
        ..ungranted(op, expect)
    }
}

/// `cordon`, `evict` and `drain`: the grant each needs and the names an
/// eviction takes, decided by `tend_rules::drain` alike on every side
/// (held to it by `every_case_holds_for_resolve_and_check_url`), and one
/// success each (an `ok` compares no value: a drain's report depends on
/// each side's object model, so it is tested where each lives).
fn drain_cases() -> Vec<Case> {
    let cordoner = r#"[{"resource": "nodes", "verbs": ["patch"], "names": ["$NODE"], "fields": ["spec.unschedulable"]}]"#;
    let labels_only = r#"[{"resource": "nodes", "verbs": ["patch"], "names": ["$NODE"], "fields": ["metadata.labels"]}]"#;
    // The fixture's node-1 has no labels: outside `pool=a`, inside `!pool`.
    let pool_a = r#"[{"resource": "nodes", "verbs": ["get", "patch"], "label-selector": "pool=a", "fields": ["spec.unschedulable"]}]"#;
    let no_pool = r#"[{"resource": "nodes", "verbs": ["get", "patch"], "label-selector": "!pool", "fields": ["spec.unschedulable"]}]"#;
    let evictor =
        r#"[{"resource": "pods/eviction", "verbs": ["create"], "namespaces": ["default"]}]"#;
    let deleter = r#"[{"resource": "pods", "verbs": ["get", "create", "delete"], "namespaces": ["default"]}]"#;
    let drainer = r#"[{"resource": "nodes", "verbs": ["patch"], "names": ["$NODE"], "fields": ["spec.unschedulable"]},
                      {"resource": "pods", "verbs": ["list", "get"], "field-selector": "spec.nodeName=$NODE"},
                      {"resource": "pods/eviction", "verbs": ["create"], "field-selector": "spec.nodeName=$NODE"}]"#;
    let cordon = |rules, unschedulable: bool, expect| {
        kube_wit(
            rules,
            "cordon",
            json!({"unschedulable": unschedulable}),
            expect,
        )
    };
    let evict = |rules, namespace: &str, name: &str, expect| {
        kube_wit(
            rules,
            "evict",
            json!({"namespace": namespace, "name": name}),
            expect,
        )
    };
    let drain = |rules, expect| {
        let options = json!({"deadline-ms": 2000, "uncordon-on-give-up": false});
        kube_wit(rules, "drain", json!({"options": options}), expect)
    };
    let no_cordon = denied(
        "no kube grant allows patch nodes named node-1: add { resource = \"nodes\", verbs = [\"patch\"], names = [\"node-1\"] } to [plugins.conformance.grants] kube",
    );
    let outside_fields = denied(
        "patch nodes named node-1: the patch touches \"spec.unschedulable\", outside the fields of { resource = \"nodes\", fields = [\"metadata.labels\"] }; add that path to the rule's fields in [plugins.conformance.grants] kube",
    );
    let no_eviction = denied(
        "no kube grant allows create pods/eviction in namespace default named web: add { resource = \"pods/eviction\", verbs = [\"create\"], namespaces = [\"default\"], names = [\"web\"] } to [plugins.conformance.grants] kube",
    );
    let name_shape = "expected a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 bytes), for example \"node-1\"";
    let namespace_shape = "expected a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63 bytes), for example \"kube-system\"";
    vec![
        // cordon: `patch` on the own Node, its `fields` admitting spec.unschedulable
        cordon(cordoner, true, Expect::Ok),
        cordon(cordoner, false, Expect::Ok),
        cordon("[]", true, no_cordon.clone()),
        cordon(labels_only, true, outside_fields.clone()),
        // an uncordon removes the field: the same path
        cordon(labels_only, false, outside_fields),
        // under selectors, judged on the Node as read: outside them it is
        // answered as a Node that does not exist
        cordon(pool_a, true, failed("not-found")),
        cordon(no_pool, true, Expect::Ok),
        // evict: `create` on pods/eviction, never another grant on pods
        evict(evictor, "default", "web", Expect::Ok),
        evict("[]", "default", "web", no_eviction.clone()),
        evict(deleter, "default", "web", no_eviction),
        // names are URL path parts: refused before the grant
        evict(
            evictor,
            "default",
            "web/status",
            invalid(&format!("kube name \"web/status\": {name_shape}")),
        ),
        evict(
            evictor,
            "default",
            "..",
            invalid(&format!("kube name \"..\": {name_shape}")),
        ),
        evict(
            "[]",
            "default/pods/web",
            "web",
            invalid(&format!(
                "kube namespace \"default/pods/web\": {namespace_shape}"
            )),
        ),
        // drain: the cordon's grant is the first it needs
        drain("[]", no_cordon),
        drain(drainer, Expect::Ok),
    ]
}

/// The kube part of the table: path parts, the own Lease, selectors, one
/// name, `fields`.
/// CRI ids and metric names: shapes both implementations refuse alike.
fn node_cases() -> Vec<Case> {
    let remover = CriGrant {
        operations: vec![CriOperation::RemovePodSandbox],
        ..CriGrant::default()
    };
    let case = |op, expect| Case {
        cri: remover.clone(),
        ..ungranted(op, expect)
    };
    let id = tend_rules::ident::CRI_ID.example;
    let short_id = invalid(&format!(
        "cri sandbox id \"{}\": expected {}, for example \"{id}\"",
        &id[..12],
        tend_rules::ident::CRI_ID.description
    ));
    let metric = |counter, name: &str| Op::Metric {
        counter,
        name: name.into(),
    };
    let host_family = |name: &str, family: &str| {
        invalid(&format!(
            "metric \"{name}\": it would be exported as {family}, a family of the host itself; choose another name"
        ))
    };
    vec![
        case(Op::CriRemove(id.into()), Expect::Ok),
        case(Op::CriRemove(id[..12].into()), short_id),
        case(metric(false, "cache_withdrawn"), Expect::Ok),
        case(metric(true, "cache_withdrawn_seconds"), Expect::Ok),
        case(
            metric(false, "state"),
            host_family("state", "tend_plugin_state"),
        ),
        case(
            metric(false, "last_success_timestamp_seconds"),
            host_family(
                "last_success_timestamp_seconds",
                "tend_plugin_last_success_timestamp_seconds",
            ),
        ),
        case(
            metric(true, "load_errors"),
            host_family("load_errors", "tend_plugin_load_errors_total"),
        ),
        case(
            metric(false, "x_count"),
            invalid(
                "metric \"x_count\": `_count` names are for histograms and summaries; choose another suffix",
            ),
        ),
    ]
}

fn kube_cases() -> Vec<Case> {
    let pods = r#"[{"resource": "pods", "verbs": ["get", "list", "create", "patch", "delete"], "namespaces": ["default"]}]"#;
    let pod = |name| ("v1", "Pod", Some("default"), name);
    let on_node = r#"[{"resource": "pods", "verbs": ["list", "get"], "field-selector": "spec.nodeName=$NODE"}]"#;
    let labelled = r#"[{"resource": "pods", "verbs": ["list", "get", "create", "delete"], "label-selector": "tend=yes"}]"#;
    let own_node = r#"[{"resource": "nodes", "verbs": ["list", "get", "patch"], "names": ["$NODE"],
                        "fields": ["metadata.labels", "metadata.annotations", "status.conditions"]}]"#;
    let one_annotation = r#"[{"resource": "nodes", "verbs": ["get", "patch"], "names": ["$NODE"],
                        "fields": ["metadata.annotations[tend.dev/replace-requested]"]}]"#;
    let node = ("v1", "Node", None, "node-1");
    let leases = r#"[{"group": "coordination.k8s.io", "resource": "leases", "verbs": ["get", "create", "patch", "delete"]}]"#;
    let lease = |name| {
        (
            "coordination.k8s.io/v1",
            "Lease",
            Some(KUBE_OWN_LEASE.0),
            name,
        )
    };
    let merge = |body: &str| KubeCall::Patch(PatchShape::Merge, body.into());
    let name_shape = "expected a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 bytes), for example \"node-1\"";
    let namespace_shape = "expected a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63 bytes), for example \"kube-system\"";
    let list = KubeCall::List {
        labels: None,
        fields: None,
    };
    vec![
        // path parts: a subresource, another resource, a query, each refused before the grant
        kube(pods, merge("{}"), pod("web/status"), invalid(&format!("kube name \"web/status\": {name_shape}"))),
        kube(
            pods,
            KubeCall::Get,
            ("v1", "ConfigMap", Some("kube-system/secrets/db?x="), "x"),
            invalid(&format!("kube namespace \"kube-system/secrets/db?x=\": {namespace_shape}")),
        ),
        kube(
            pods,
            KubeCall::Create(r#"{"metadata": {"name": "web"}}"#.into()),
            ("policy/v1", "Eviction", Some("default/pods/web/eviction"), ""),
            invalid(&format!("kube namespace \"default/pods/web/eviction\": {namespace_shape}")),
        ),
        kube(
            pods,
            merge("{}"),
            pod("web?fieldManager=x&force=true"),
            invalid(&format!("kube name \"web?fieldManager=x&force=true\": {name_shape}")),
        ),
        kube(pods, KubeCall::Delete, pod(".."), invalid(&format!("kube name \"..\": {name_shape}"))),
        kube(
            pods,
            KubeCall::Get,
            ("v1/../../api/v1/secrets", "Pod", Some("default"), "web"),
            invalid("kube api-version \"v1/../../api/v1/secrets\": expected \"v1\" or \"<group>/<version>\" such as \"coordination.k8s.io/v1\" (the group a DNS-1123 subdomain, the version such as v1 or v1beta1)"),
        ),
        kube(
            pods,
            KubeCall::Create(r#"{"metadata": {"name": "x", "namespace": "kube-system"}}"#.into()),
            pod(""),
            invalid("kube create: metadata.namespace \"kube-system\" does not match the namespace of the call (default); name the same namespace in both, or leave it out of the object"),
        ),
        kube(pods, KubeCall::Get, pod("web"), Expect::Ok),
        // the API server's own answers: what does not exist, what already does
        kube(pods, KubeCall::Get, pod("gone"), failed("not-found")),
        kube(pods, KubeCall::Delete, pod("gone"), failed("not-found")),
        kube(
            pods,
            KubeCall::Create(r#"{"metadata": {"name": "web"}}"#.into()),
            pod(""),
            failed("conflict"),
        ),
        // Tend's own election Lease, whatever the grant
        kube(
            leases,
            merge(r#"{"spec": {"holderIdentity": "evil"}}"#),
            lease(KUBE_OWN_LEASE.1),
            denied(&format!("patch leases.coordination.k8s.io in namespace tend-system named tend-cluster: {OWN_LEASE}")),
        ),
        kube(
            leases,
            KubeCall::Delete,
            lease(KUBE_OWN_LEASE.1),
            denied(&format!("delete leases.coordination.k8s.io in namespace tend-system named tend-cluster: {OWN_LEASE}")),
        ),
        kube(
            leases,
            KubeCall::Create(r#"{"metadata": {"name": "tend-cluster"}}"#.into()),
            lease(""),
            denied(&format!("create leases.coordination.k8s.io in namespace tend-system named tend-cluster: {OWN_LEASE}")),
        ),
        kube(leases, KubeCall::Get, lease(KUBE_OWN_LEASE.1), Expect::Ok),
        kube(leases, merge(r#"{"spec": {"holderIdentity": "me"}}"#), lease("mine"), Expect::Ok),
        // selectors are part of the grant: an object by name outside them is
        // answered as an absent one (the same words: tend-rules' check_found)
        kube(on_node, list.clone(), pod(""), listed(&["bare", "web"])),
        kube(
            on_node,
            KubeCall::Get,
            pod("other"),
            failed("not-found"),
        ),
        kube(labelled, list.clone(), pod(""), listed(&["other", "web"])),
        kube(
            labelled,
            KubeCall::Get,
            pod("bare"),
            failed("not-found"),
        ),
        kube(labelled, KubeCall::Get, pod("gone"), failed("not-found")),
        kube(labelled, KubeCall::Delete, pod("web"), Expect::Ok),
        kube(
            labelled,
            KubeCall::Delete,
            pod("bare"),
            failed("not-found"),
        ),
        kube(
            labelled,
            KubeCall::Create(r#"{"metadata": {"name": "new"}}"#.into()),
            pod(""),
            denied("create pods in namespace default named new: the object is outside the grant's selectors ({ resource = \"pods\", label-selector = \"tend=yes\" }); label the object to match, or widen the selectors in [plugins.conformance.grants] kube"),
        ),
        kube(
            labelled,
            KubeCall::Create(r#"{"metadata": {"name": "new", "labels": {"tend": "yes"}}}"#.into()),
            pod(""),
            Expect::Ok,
        ),
        kube(
            labelled,
            KubeCall::List { labels: Some("a b".into()), fields: None },
            pod(""),
            invalid("kube label selector \"a b\": cannot parse \"a b\"; expected key=value, key!=value, key in (a,b), key notin (a,b), key or !key"),
        ),
        // one name: a plugin's field selector is ANDed, never replaces it
        kube(
            own_node,
            KubeCall::List { labels: None, fields: Some("metadata.name!=x".into()) },
            ("v1", "Node", None, ""),
            listed(&["node-1"]),
        ),
        // a JSON patch that does not apply changes nothing, as the API server's 422
        kube(
            pods,
            KubeCall::Patch(PatchShape::Json, r#"[{"op": "replace", "path": "/spec/missing", "value": 1}]"#.into()),
            pod("web"),
            invalid("kube patch pods/default/web: the JSON patch does not apply (operation '/0' failed at path '/spec/missing': path is invalid); patch paths that exist, or `add` their parents first"),
        ),
        // fields narrow patch
        kube(own_node, merge(r#"{"metadata": {"labels": {"a": "b"}}}"#), node, Expect::Ok),
        kube(
            own_node,
            merge(r#"{"spec": {"unschedulable": true}}"#),
            node,
            denied("patch nodes named node-1: the patch touches \"spec.unschedulable\", outside the fields of { resource = \"nodes\", fields = [\"metadata.labels\", \"metadata.annotations\", \"status.conditions\"] }; add that path to the rule's fields in [plugins.conformance.grants] kube"),
        ),
        kube(
            own_node,
            KubeCall::Patch(PatchShape::Json, r#"[{"op": "add", "path": "/spec/taints/-", "value": {"key": "x", "effect": "NoExecute"}}]"#.into()),
            node,
            denied("patch nodes named node-1: the patch touches \"spec.taints.-\", outside the fields of { resource = \"nodes\", fields = [\"metadata.labels\", \"metadata.annotations\", \"status.conditions\"] }; add that path to the rule's fields in [plugins.conformance.grants] kube"),
        ),
        kube(
            own_node,
            KubeCall::Patch(PatchShape::Apply, r#"{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}, "spec": {"unschedulable": true}}"#.into()),
            node,
            denied("patch nodes named node-1: the patch touches \"spec.unschedulable\", outside the fields of { resource = \"nodes\", fields = [\"metadata.labels\", \"metadata.annotations\", \"status.conditions\"] }; add that path to the rule's fields in [plugins.conformance.grants] kube"),
        ),
        // a key with dots granted alone, in brackets: not its siblings
        kube(
            one_annotation,
            merge(r#"{"metadata": {"annotations": {"tend.dev/replace-requested": "true"}}}"#),
            node,
            Expect::Ok,
        ),
        kube(
            one_annotation,
            merge(r#"{"metadata": {"annotations": {"tend.dev/replace-requested-by": "x"}}}"#),
            node,
            denied("patch nodes named node-1: the patch touches \"metadata.annotations[tend.dev/replace-requested-by]\", outside the fields of { resource = \"nodes\", fields = [\"metadata.annotations[tend.dev/replace-requested]\"] }; add that path to the rule's fields in [plugins.conformance.grants] kube"),
        ),
    ]
}

/// The table as data, `sdk/conformance.json`, for the fakes of every
/// language (the Python and JavaScript SDKs run it through `tend-fakes`):
/// grants as an operator writes them under `[plugins.NAME.grants]`, calls as
/// WIT functions with their WIT-named arguments, expectations as outcomes.
/// The file's format is described in `sdk/fakes/README.md`.
pub fn to_json() -> Value {
    let cases: Vec<Value> = cases().iter().map(Case::to_json).collect();
    json!({
        "plugin": PLUGIN,
        "fixture": {"setup": fixture::setup_requests(), "calls": fixture::seed_calls()},
        "cases": cases,
    })
}

/// The functions whose answer is compared as a list of names (see
/// [`item_name`]).
pub const LISTINGS: [(&str, &str); 13] = [
    ("conditions", "list"),
    ("logs", "read"),
    ("logs", "matches"),
    ("state", "list-keys"),
    ("files", "list-dir"),
    ("http", "send-all"),
    ("systemd", "list-units"),
    ("cri", "list-pod-sandboxes"),
    ("cri", "list-containers"),
    ("cri", "list-images"),
    ("kube", "list"),
    ("cloud", "list-instances"),
    ("cloud", "list-security-groups"),
];

/// The name of one item of a listing's answer (WIT JSON): a key, a `name`,
/// an `id`, an image's first tag, a kube object's `metadata.name`, or for
/// `http.send-all` the request's outcome ("ok 200", "denied: MESSAGE").
fn item_name(cap: &str, function: &str, item: &Value) -> Option<String> {
    let text = |value: &Value| value.as_str().map(str::to_string);
    match (cap, function) {
        ("state", "list-keys") => text(item),
        ("files", "list-dir") | ("systemd", "list-units") => text(&item["name"]),
        ("cri", "list-images") => text(&item["repo-tags"][0]),
        ("logs", "read") => text(&item["message"]),
        ("logs", "matches") => text(&item["rule"]),
        ("conditions", "list") => {
            let status = if item["active"].as_bool()? {
                "True"
            } else {
                "False"
            };
            Some(format!(
                "{} {status} {}",
                text(&item["condition"])?,
                text(&item["reason"])?
            ))
        }
        ("kube", "list") => {
            let object: Value = serde_json::from_str(item.as_str()?).ok()?;
            text(&object["metadata"]["name"])
        }
        ("http", "send-all") => Some(match outcome("http", "send", item) {
            Expect::Ok => format!("ok {}", item["ok"]["status"]),
            Expect::Refused(refusal) => format!("{}: {}", refusal.kind(), refusal.message()),
            Expect::Failed(kind) => kind,
            Expect::Listed(_) => unreachable!("send is not a listing"),
        }),
        _ => text(&item["id"]),
    }
}

/// How a call ended, from its answer as WIT JSON (`{"ok": VALUE}` or
/// `{"err": {"kind", "message"}}`): what every implementation compares with
/// the case's [`Expect`].
pub fn outcome(cap: &str, function: &str, answer: &Value) -> Expect {
    if let Some(error) = answer.get("err") {
        let message = error["message"].as_str().unwrap_or_default().to_string();
        return match error["kind"].as_str().unwrap_or_default() {
            "denied" => Expect::Refused(Refusal::Denied(message)),
            "invalid" => Expect::Refused(Refusal::Invalid(message)),
            kind => Expect::Failed(kind.to_string()),
        };
    }
    if !LISTINGS.contains(&(cap, function)) {
        return Expect::Ok;
    }
    let items = match (cap, function) {
        ("kube", "list") => &answer["ok"]["items"],
        ("logs", "read") => &answer["ok"]["entries"],
        _ => &answer["ok"],
    };
    let names: Option<Vec<String>> = items.as_array().and_then(|items| {
        items
            .iter()
            .map(|item| item_name(cap, function, item))
            .collect()
    });
    let Some(mut names) = names else {
        return Expect::Failed(format!("an answer that is no listing: {answer}"));
    };
    if function != "send-all" {
        names.sort();
    }
    Expect::Listed(names)
}

impl Case {
    /// One case as data: see [`to_json`].
    pub fn to_json(&self) -> Value {
        let (cap, function, args) = self.op.call();
        let expect = match &self.expect {
            Expect::Ok => json!({"outcome": "ok"}),
            Expect::Refused(refusal) => {
                json!({"outcome": "refused", "kind": refusal.kind(), "message": refusal.message()})
            }
            Expect::Failed(kind) => json!({"outcome": "failed", "kind": kind}),
            Expect::Listed(names) => json!({"outcome": "listed", "names": names}),
        };
        json!({
            "grants": self.grants(),
            "call": {"cap": cap, "fn": function, "args": compress(args)},
            "expect": expect,
        })
    }

    /// The grants in `tend.toml` shape, capabilities without any left out.
    pub fn grants(&self) -> Value {
        let mut grants = serde_json::Map::new();
        let mut put = |cap: &str, value: Value, empty: bool| {
            if !empty {
                grants.insert(cap.to_string(), value);
            }
        };
        let files: Vec<Value> = self
            .files
            .iter()
            .map(|g| json!({"path": g.path.to_string_lossy(), "write": g.write}))
            .collect();
        put("files", json!(files), files.is_empty());
        let http: Vec<&str> = self.http.iter().map(|p| p.text.as_str()).collect();
        put("http", json!(http), http.is_empty());
        let kube: Vec<Value> = self.kube.iter().map(kube_rule).collect();
        put("kube", json!(kube), kube.is_empty());
        let systemd = &self.systemd;
        let units: Vec<&str> = systemd.units.iter().map(|u| u.0.as_str()).collect();
        let operations: Vec<&str> = systemd.operations.iter().map(|o| o.name()).collect();
        put(
            "systemd",
            json!({"units": units, "operations": operations, "watch": systemd.watch}),
            *systemd == tend_rules::systemd::SystemdGrant::default(),
        );
        let cri = &self.cri;
        put(
            "cri",
            json!({
                "read": cri.read,
                "operations": cri.operations.iter().map(|o| o.name()).collect::<Vec<_>>(),
                "images": cri.images.iter().map(|i| i.0.as_str()).collect::<Vec<_>>(),
                "namespaces": cri.namespaces,
                "states": cri.states.iter().map(|s| s.name()).collect::<Vec<_>>(),
            }),
            *cri == CriGrant::default(),
        );
        let cloud = &self.cloud;
        put(
            "cloud",
            json!({
                "operations": cloud.operations.iter().map(|o| o.name()).collect::<Vec<_>>(),
                "instances": cloud.instances.iter().map(|o| json!({"tag": o.tag, "value": o.value})).collect::<Vec<_>>(),
                "security-groups": cloud.security_groups.iter().map(|g| g.0.as_str()).collect::<Vec<_>>(),
                "remotes": cloud.remotes.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "protocols": cloud.protocols.as_ref().map(|ps| ps.iter().map(|p| p.name()).collect::<Vec<_>>()),
                "ports": cloud.ports.iter().map(ToString::to_string).collect::<Vec<_>>(),
            }),
            *cloud == CloudGrant::default(),
        );
        let logs = &self.logs;
        let names = |patterns: Vec<&str>| json!(patterns);
        let watch: Vec<Value> = logs
            .watch
            .iter()
            .map(|rule| {
                json!({
                    "rule": rule.rule,
                    "source": rule.source.name(),
                    "pattern": rule.pattern.0.as_str(),
                    "units": names(rule.units.iter().map(|u| u.0.as_str()).collect()),
                    "identifiers": names(rule.identifiers.iter().map(|i| i.0.as_str()).collect()),
                    "max-priority": rule.max_priority,
                    "burst": rule.burst,
                    "per-minute": rule.per_minute,
                })
            })
            .collect();
        put(
            "logs",
            json!({
                "kernel": logs.kernel,
                "units": names(logs.units.iter().map(|u| u.0.as_str()).collect()),
                "identifiers": names(logs.identifiers.iter().map(|i| i.0.as_str()).collect()),
                "watch": watch,
            }),
            *logs == LogsGrant::default(),
        );
        let conditions: Vec<Value> = (self.conditions.0.iter())
            .map(|granted| match granted.taint_on {
                None => json!(granted.condition),
                Some(taint) => json!({"condition": granted.condition, "taint-on": {"effect": taint.effect.name()}}),
            })
            .collect();
        put("conditions", json!(conditions), conditions.is_empty());
        Value::Object(grants)
    }
}

/// A kube rule as the config writes it, optional keys only when set.
fn kube_rule(rule: &KubeRule) -> Value {
    let mut object = serde_json::Map::new();
    if !rule.group.is_empty() {
        object.insert("group".into(), json!(rule.group));
    }
    object.insert("resource".into(), json!(rule.resource));
    let verbs: Vec<&str> = rule.verbs.iter().map(|v| v.name()).collect();
    object.insert("verbs".into(), json!(verbs));
    let optional = [
        ("namespaces", json!(rule.namespaces)),
        ("names", json!(rule.names)),
        ("label-selector", json!(rule.label_selector)),
        ("field-selector", json!(rule.field_selector)),
        ("fields", json!(rule.fields)),
    ];
    for (key, value) in optional {
        if !value.is_null() {
            object.insert(key.into(), value);
        }
    }
    Value::Object(object)
}

impl Op {
    /// The WIT call: interface, function and arguments by their WIT names
    /// (`list<u8>` as base64, objects and patches as JSON text).
    pub fn call(&self) -> (&'static str, &'static str, Value) {
        let x = base64(b"x");
        match self {
            Op::Read(path) => ("files", "read", json!({"path": path})),
            Op::Write(path) => (
                "files",
                "write",
                json!({"path": path, "contents": x, "mode": null}),
            ),
            Op::WriteMode(path, mode) => (
                "files",
                "write",
                json!({"path": path, "contents": x, "mode": mode}),
            ),
            Op::Remove(path) => ("files", "remove", json!({"path": path})),
            Op::List(path) => ("files", "list-dir", json!({"path": path})),
            Op::Stat(path) => ("files", "stat", json!({"path": path})),
            Op::Send { method, url } => (
                "http",
                "send",
                json!({"req": {"method": method, "url": url, "headers": [], "body": null, "timeout-ms": null}}),
            ),
            Op::Kube(op) => op.call(),
            Op::Systemd(call) => match call {
                SystemdCall::Status(unit) => ("systemd", "status", json!({"unit": unit})),
                SystemdCall::ListUnits(patterns) => {
                    ("systemd", "list-units", json!({"patterns": patterns}))
                }
                SystemdCall::Restart(unit) => ("systemd", "restart", json!({"unit": unit})),
                SystemdCall::Enable(units) => ("systemd", "enable", json!({"units": units})),
                SystemdCall::DaemonReload => ("systemd", "daemon-reload", json!({})),
            },
            Op::CriRemove(id) => ("cri", "remove-pod-sandbox", json!({"id": id})),
            Op::CriList(labels) => (
                "cri",
                "list-pod-sandboxes",
                json!({"filter": {"id": null, "state": null, "labels": labels}}),
            ),
            Op::Cloud(call) => call.call(),
            Op::StateSet { key, len } => (
                "state",
                "set",
                json!({"key": key, "value": base64(&vec![0; *len])}),
            ),
            Op::Metric { counter, name } => (
                "metrics",
                if *counter { "counter-add" } else { "gauge-set" },
                json!({"name": name, "labels": [], "value": 1.0}),
            ),
            Op::Wit {
                cap,
                function,
                args,
            } => (cap, function, args.clone()),
        }
    }
}

impl KubeOp {
    fn call(&self) -> (&'static str, &'static str, Value) {
        let key = json!({
            "api-version": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
        });
        let (function, args) = match &self.call {
            KubeCall::Get => ("get", json!({"key": key})),
            KubeCall::Delete => ("delete", json!({"key": key})),
            KubeCall::List { labels, fields } => (
                "list",
                json!({
                    "api-version": self.api_version,
                    "kind": self.kind,
                    "namespace": self.namespace,
                    "params": {"label-selector": labels, "field-selector": fields, "limit": null, "continue-token": null},
                }),
            ),
            KubeCall::Create(body) => (
                "create",
                json!({"api-version": self.api_version, "kind": self.kind, "namespace": self.namespace, "object": body}),
            ),
            KubeCall::Patch(shape, body) => {
                let shape = match shape {
                    PatchShape::Merge => "merge",
                    PatchShape::Json => "json",
                    PatchShape::Apply => "apply",
                };
                (
                    "patch",
                    json!({"key": key, "patch-type": shape, "patch": body}),
                )
            }
            KubeCall::Event { reason, message } => (
                "emit-event",
                json!({"regarding": key, "event-type": "normal", "reason": reason, "message": message}),
            ),
        };
        ("kube", function, args)
    }
}

impl CloudCall {
    fn call(&self) -> (&'static str, &'static str, Value) {
        let (function, args) = match self {
            CloudCall::ListInstances { tag, value } => (
                "list-instances",
                json!({"owner": {"key": tag, "value": value}}),
            ),
            CloudCall::GetInstance(id) => ("get-instance", json!({"id": id})),
            CloudCall::DeleteInstance(id) => ("delete-instance", json!({"id": id})),
            CloudCall::FindSecurityGroup(name) => ("find-security-group", json!({"name": name})),
            CloudCall::EnsureRule { group, cidr } => (
                "ensure-rule",
                json!({"group-id": group, "rule": {
                    "direction": "ingress", "ether-type": "ipv4", "protocol": "tcp",
                    "ports": null, "remote": {"cidr": cidr}, "description": null,
                }}),
            ),
            CloudCall::EnsureGroupRule {
                group,
                protocol,
                ports,
                remote,
            } => (
                "ensure-rule",
                json!({"group-id": group, "rule": {
                    "direction": "ingress", "ether-type": "ipv4", "protocol": protocol,
                    "ports": ports.map(|(min, max)| json!({"min": min, "max": max})),
                    "remote": {"group": remote}, "description": null,
                }}),
            ),
        };
        ("cloud", function, args)
    }
}

/// `bytes` in standard, padded base64: how `list<u8>` crosses JSON.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Strings longer than this are stored as a repeat when they have one.
const COMPRESS_OVER: usize = 4096;

/// `value` with every long string that repeats a unit of 1 to 4 characters
/// written `{"$repeat": UNIT, "times": N, "before": A, "after": B}` (it
/// stands for `A + UNIT * N + B`), so megabyte bodies stay small in the file.
pub fn compress(value: Value) -> Value {
    match value {
        Value::String(text) if text.len() > COMPRESS_OVER => {
            let Some((start, unit, times)) = longest_repeat(&text) else {
                return Value::String(text);
            };
            let end = start + unit * times;
            json!({
                "$repeat": &text[start..start + unit],
                "times": times,
                "before": &text[..start],
                "after": &text[end..],
            })
        }
        Value::Array(items) => Value::Array(items.into_iter().map(compress).collect()),
        Value::Object(object) => {
            Value::Object(object.into_iter().map(|(k, v)| (k, compress(v))).collect())
        }
        other => other,
    }
}

/// The longest run of one unit of 1 to 4 ASCII bytes repeated: its start,
/// the unit's length and how many times it repeats.
fn longest_repeat(text: &str) -> Option<(usize, usize, usize)> {
    let bytes = text.as_bytes();
    let mut best: Option<(usize, usize, usize)> = None;
    for unit in 1..=4 {
        let mut start = 0;
        while start + unit <= bytes.len() {
            let mut times = 1;
            while bytes[start + times * unit..]
                .get(..unit)
                .is_some_and(|next| next == &bytes[start..start + unit])
            {
                times += 1;
            }
            let covered = times * unit;
            let ascii = bytes[start..start + unit].is_ascii();
            if ascii && times > 1 && best.is_none_or(|(_, u, t)| covered > u * t) {
                best = Some((start, unit, times));
            }
            start += covered.max(1);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use tend_rules::{files::resolve, http::check_url};

    /// `sdk/conformance.json` is [`to_json`]; `UPDATE_CONFORMANCE=1` rewrites it.
    #[test]
    fn the_committed_table_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk/conformance.json");
        let text = serde_json::to_string_pretty(&to_json()).expect("JSON") + "\n";
        if std::env::var_os("UPDATE_CONFORMANCE").is_some_and(|v| v == "1") {
            std::fs::write(path, &text).expect("write sdk/conformance.json");
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == text,
            "sdk/conformance.json is stale: run `UPDATE_CONFORMANCE=1 cargo test -p tend-conformance` and commit it"
        );
    }

    /// The exported grants read back, through the config's own types, as the
    /// grants of the case: they are what an operator writes.
    #[test]
    fn exported_grants_are_the_config_shapes() {
        fn read<T: serde::de::DeserializeOwned + Default>(grants: &Value, cap: &str) -> T {
            grants
                .get(cap)
                .map(|g| serde_json::from_value(g.clone()).expect("a grant the config reads"))
                .unwrap_or_default()
        }
        for case in cases() {
            let grants = case.grants();
            assert_eq!(read::<Vec<FileGrant>>(&grants, "files"), case.files);
            assert_eq!(read::<Vec<UrlPattern>>(&grants, "http"), case.http);
            assert_eq!(read::<Vec<KubeRule>>(&grants, "kube"), case.kube);
            assert_eq!(read::<SystemdGrant>(&grants, "systemd"), case.systemd);
            assert_eq!(read::<CriGrant>(&grants, "cri"), case.cri);
            assert_eq!(read::<CloudGrant>(&grants, "cloud"), case.cloud);
            assert_eq!(read::<LogsGrant>(&grants, "logs"), case.logs);
            assert_eq!(
                read::<ConditionsGrant>(&grants, "conditions"),
                case.conditions
            );
        }
    }

    /// Compressed strings expand back to themselves.
    #[test]
    fn long_strings_compress_to_repeats() {
        let expand = |v: &Value| match v {
            Value::String(s) => s.clone(),
            v => {
                let unit = v["$repeat"].as_str().unwrap();
                let times = v["times"].as_u64().unwrap() as usize;
                format!(
                    "{}{}{}",
                    v["before"].as_str().unwrap(),
                    unit.repeat(times),
                    v["after"].as_str().unwrap()
                )
            }
        };
        for text in [
            format!("/etc/{}", "a/".repeat(2100)),
            base64(&[0; 4097 * 3 + 1]),
            format!("{{\"a\":\"{}\"}}", "x".repeat(5000)),
            "short".to_string(),
        ] {
            let compressed = compress(json!(text));
            assert_eq!(expand(&compressed), text);
            assert!(compressed.to_string().len() < 200, "{compressed}");
        }
        assert_eq!(base64(b"hi\n"), "aGkK");
        assert_eq!(base64(b"x"), "eA==");
        assert_eq!(base64(b"xy"), "eHk=");
    }

    /// Every capability has cases, refusals among them.
    #[test]
    fn the_table_covers_every_capability() {
        let capability = |op: &Op| op.call().0;
        let mut counts = std::collections::BTreeMap::<&str, (usize, usize)>::new();
        for case in cases() {
            let count = counts.entry(capability(&case.op)).or_default();
            count.0 += 1;
            count.1 += usize::from(matches!(case.expect, Expect::Refused(_)));
        }
        println!("cases (all, refused): {counts:?}");
        for name in [
            "files",
            "http",
            "kube",
            "systemd",
            "cri",
            "cloud",
            "metrics",
            "state",
            "conditions",
        ] {
            let (all, refused) = counts.get(name).copied().unwrap_or_default();
            assert!(
                all >= 4 && refused >= 3,
                "{name}: {all} cases, {refused} refusals"
            );
        }
    }

    /// The table agrees with the functions it describes.
    #[test]
    fn every_case_holds_for_resolve_and_check_url() {
        for case in cases() {
            let decision = match &case.op {
                Op::Send { method, url } => check_url(&case.http, PLUGIN, method, url),
                Op::Read(path)
                | Op::Write(path)
                | Op::Remove(path)
                | Op::List(path)
                | Op::Stat(path) => {
                    resolve(&case.files, PLUGIN, path, case.op.writes()).map(|_| ())
                }
                Op::WriteMode(path, mode) => resolve(&case.files, PLUGIN, path, true)
                    .and_then(|_| tend_rules::files::file_mode(path, Some(*mode)).map(drop)),
                Op::Wit {
                    cap: "conditions",
                    function,
                    args,
                } => conditions_decision(&case.conditions, function, args),
                Op::Wit {
                    cap: "kube",
                    function,
                    args,
                } => match drain_decision(&case.kube, function, args) {
                    Some(decision) => decision,
                    None => continue,
                },
                // Kube decisions need objects, systemd, cri and cloud calls
                // a host: the host and the SDK's fake run them.
                Op::Kube(_) | Op::Systemd(_) | Op::CriList(_) | Op::Cloud(_) | Op::Wit { .. } => {
                    continue;
                }
                Op::CriRemove(id) => tend_rules::cri::check_id("sandbox id", id).and_then(|()| {
                    case.cri
                        .check_operation(PLUGIN, CriOperation::RemovePodSandbox, id)
                }),
                Op::StateSet { key, len } => tend_rules::state::check_key(key)
                    .and_then(|()| tend_rules::state::check_value(key, &vec![0; *len])),
                Op::Metric { counter, name } => {
                    let kind = if *counter {
                        tend_rules::metrics::Kind::Counter
                    } else {
                        tend_rules::metrics::Kind::Gauge
                    };
                    tend_rules::metrics::check_series(kind, name, &[], 1.0)
                }
            };
            match decision {
                Ok(()) => assert!(
                    !matches!(case.expect, Expect::Refused(_)),
                    "{:?}: allowed by the rules, but the table expects {:?}",
                    case.op,
                    case.expect
                ),
                Err(refusal) => assert_eq!(Expect::Refused(refusal), case.expect, "{:?}", case.op),
            }
        }
    }

    /// A conditions call's grant and input checks, in the host's order.
    fn conditions_decision(
        grant: &ConditionsGrant,
        function: &str,
        args: &Value,
    ) -> Result<(), Refusal> {
        use tend_rules::conditions::{check_condition, check_list, check_note, check_ttl};
        let text = |value: &Value| value.as_str().expect("text").to_string();
        let args = match function {
            "list" => return check_list(grant),
            "set" => &args["report"],
            _ => args,
        };
        check_condition(grant, &text(&args["condition"]))?;
        check_note(&text(&args["reason"]), &text(&args["message"]))?;
        let ttl = args.get("ttl-seconds").and_then(Value::as_u64);
        check_ttl(ttl.map(|t| u32::try_from(t).expect("a u32")))
    }

    /// A cordon's or an eviction's decision by `tend_rules::drain` on the
    /// fixture's node; a drain's only when its first check, the cordon's,
    /// refuses it (None: the rest needs the pods).
    fn drain_decision(
        rules: &[KubeRule],
        function: &str,
        args: &Value,
    ) -> Option<Result<(), Refusal>> {
        use tend_rules::drain::{check_cordon, check_evict};
        let node = fixture::NODE;
        let text = |value: &Value| value.as_str().expect("text").to_string();
        match function {
            "cordon" => {
                let unschedulable = args["unschedulable"].as_bool().expect("a bool");
                Some(check_cordon(rules, PLUGIN, node, unschedulable))
            }
            "evict" => Some(check_evict(
                rules,
                PLUGIN,
                node,
                &text(&args["namespace"]),
                &text(&args["name"]),
            )),
            "drain" => check_cordon(rules, PLUGIN, node, true).err().map(Err),
            _ => None,
        }
    }

    /// Every function a plugin imports has a case that succeeds and a case
    /// that fails.
    #[test]
    fn the_table_covers_every_wit_function() {
        // Generated from wit/ by `cargo xtask gen` (held current by its test).
        let functions: std::collections::BTreeSet<(String, String)> = tend_rules::wit::INTERFACES
            .iter()
            .flat_map(|(cap, functions)| functions.iter().map(|f| (cap.to_string(), f.to_string())))
            .collect();
        let mut seen = std::collections::BTreeMap::<(String, String), (bool, bool)>::new();
        for case in cases() {
            let (cap, function, _) = case.op.call();
            let entry = seen.entry((cap.into(), function.into())).or_default();
            match case.expect {
                // Each request of a send-all has its own outcome.
                Expect::Listed(outcomes) if function == "send-all" => {
                    entry.0 |= outcomes.iter().any(|o| o.starts_with("ok "));
                    entry.1 |= outcomes.iter().any(|o| !o.starts_with("ok "));
                }
                Expect::Ok | Expect::Listed(_) => entry.0 = true,
                Expect::Refused(_) | Expect::Failed(_) => entry.1 = true,
            }
        }
        for function in &functions {
            let covered = seen.get(function).copied().unwrap_or_default();
            // log.log has no error: a line over the limits is dropped.
            let needs_failure = function.0 != "log";
            assert!(
                covered.0 && (covered.1 || !needs_failure),
                "{function:?}: (succeeds, fails) = {covered:?}"
            );
        }
        let unknown: Vec<_> = seen.keys().filter(|f| !functions.contains(f)).collect();
        assert!(unknown.is_empty(), "cases of no WIT function: {unknown:?}");
    }
}
