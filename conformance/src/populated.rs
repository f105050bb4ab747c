//! Cases on the populated fixture ([`super::fixture`]): every WIT function
//! the other case lists leave out, the ownership refusals only objects can
//! give (an instance of another cluster, a sandbox in another namespace or
//! state, an image outside the grant), and plain successes and failures
//! compared by kind.

use super::fixture::{
    CONTAINER, GROUP, HEALTHZ, IMAGES, INSTANCE_A, INSTANCE_B, OTHER_GROUP, SANDBOX_EXITED,
    SANDBOX_SYSTEM, SANDBOX_WEB,
};
use super::{Case, Expect, Op, denied, etc, failed, invalid, listed, ungranted};
use serde_json::{Value, json};
use tend_rules::cloud::CloudGrant;
use tend_rules::cri::CriGrant;
use tend_rules::http::UrlPattern;
use tend_rules::systemd::{Operation, SystemdGrant};

fn call(cap: &'static str, function: &'static str, args: Value) -> Op {
    Op::Wit {
        cap,
        function,
        args,
    }
}

/// Every case of this module.
pub fn cases() -> Vec<Case> {
    [log_and_state(), files(), http(), systemd(), cri(), cloud()]
        .into_iter()
        .flatten()
        .collect()
}

fn log_and_state() -> Vec<Case> {
    let state = |function, args, expect| ungranted(call("state", function, args), expect);
    let key_length = |n: usize| {
        invalid(&format!(
            "state keys must be 1 to 512 bytes long, not {n}; use a shorter key (a hash of a long one)"
        ))
    };
    vec![
        ungranted(
            call(
                "log",
                "log",
                json!({"level": "warn", "message": "line\nINFO forged"}),
            ),
            Expect::Ok,
        ),
        state("get", json!({"key": "seen/a"}), Expect::Ok),
        state("get", json!({"key": "never"}), Expect::Ok),
        state("get", json!({"key": ""}), key_length(0)),
        state("delete", json!({"key": "seen/a"}), Expect::Ok),
        state("delete", json!({"key": "k".repeat(513)}), key_length(513)),
        state(
            "list-keys",
            json!({"prefix": "seen/"}),
            listed(&["seen/a", "seen/b"]),
        ),
        state(
            "list-keys",
            json!({"prefix": ""}),
            listed(&["other", "seen/a", "seen/b"]),
        ),
        state(
            "list-keys",
            json!({"prefix": "p".repeat(513)}),
            invalid(
                "state key prefixes are at most 512 bytes long, not 513; a longer prefix matches no key",
            ),
        ),
    ]
}

fn files() -> Vec<Case> {
    let file = |function, path: &str, expect| Case {
        files: etc(),
        ..ungranted(call("files", function, json!({"path": path})), expect)
    };
    vec![
        file("read", "/etc/hosts", Expect::Ok),
        file("read", "/etc/missing", failed("not-found")),
        file(
            "list-dir",
            "/etc/containerd/certs.d",
            listed(&["docker.io"]),
        ),
        file(
            "remove",
            "/etc/containerd/certs.d/docker.io/hosts.toml",
            Expect::Ok,
        ),
        file("stat", "/etc/hosts", Expect::Ok),
    ]
}

fn http() -> Vec<Case> {
    let request = |url: &str| json!({"method": "GET", "url": url, "headers": [], "body": null, "timeout-ms": null});
    let send_all = |urls: Vec<&str>, expect| Case {
        http: vec![UrlPattern::parse(HEALTHZ).expect("valid pattern")],
        ..ungranted(
            call(
                "http",
                "send-all",
                json!({"reqs": urls.into_iter().map(request).collect::<Vec<_>>()}),
            ),
            expect,
        )
    };
    let too_many = "invalid: send-all takes at most 32 requests, got 33: split the call";
    vec![
        Case {
            http: vec![UrlPattern::parse(HEALTHZ).expect("valid pattern")],
            ..ungranted(
                call("http", "send", json!({"req": request(HEALTHZ)})),
                Expect::Ok,
            )
        },
        send_all(
            vec![HEALTHZ, "http://127.0.0.1:10249/metrics"],
            listed(&[
                "ok 200",
                "denied: GET http://127.0.0.1:10249/metrics: no http grant matches; add \"http://127.0.0.1:10249/*\" to [plugins.conformance.grants] http",
            ]),
        ),
        send_all(vec![HEALTHZ; 33], listed(&[too_many; 33])),
    ]
}

/// Every job and unit-file operation, granted and not.
fn systemd() -> Vec<Case> {
    let grant = |operations: Value| -> SystemdGrant {
        serde_json::from_value(json!({
            "units": ["kubelet.service", "containerd.service"],
            "operations": operations,
        }))
        .expect("valid systemd grant")
    };
    let all = grant(json!(Operation::ALL.map(Operation::name)));
    let none = grant(json!([]));
    let case = |grant: &SystemdGrant, function, args, expect| Case {
        systemd: grant.clone(),
        ..ungranted(call("systemd", function, args), expect)
    };
    let not_granted = |operation: &str, unit: &str| {
        denied(&format!(
            "systemd {operation} of {unit} is not granted: add \"{operation}\" to operations in [plugins.conformance.grants] systemd"
        ))
    };
    let mut cases = Vec::new();
    for function in [
        "start",
        "stop",
        "reload-or-restart",
        "try-restart",
        "reset-failed",
    ] {
        let unit = json!({"unit": "containerd.service"});
        cases.push(case(&all, function, unit.clone(), Expect::Ok));
        cases.push(case(
            &none,
            function,
            unit,
            not_granted(function, "containerd.service"),
        ));
    }
    cases.extend([
        case(
            &all,
            "enable",
            json!({"units": ["kubelet.service", "containerd.service"]}),
            Expect::Ok,
        ),
        case(
            &all,
            "disable",
            json!({"units": ["kubelet.service"]}),
            Expect::Ok,
        ),
        case(
            &none,
            "disable",
            json!({"units": ["kubelet.service"]}),
            not_granted("disable", "kubelet.service"),
        ),
        case(
            &all,
            "disable",
            json!({"units": ["kubelet.service", "sshd.service"]}),
            denied(
                "no systemd grant covers unit sshd.service: add \"sshd.service\" to units in [plugins.conformance.grants] systemd",
            ),
        ),
        case(
            &all,
            "list-units",
            json!({"patterns": ["*.service"]}),
            listed(&["containerd.service", "kubelet.service"]),
        ),
        case(&all, "daemon-reload", json!({}), Expect::Ok),
    ]);
    cases
}

/// Reads, sandbox operations bounded by namespace and state, images.
fn cri() -> Vec<Case> {
    let grant =
        |value: Value| -> CriGrant { serde_json::from_value(value).expect("valid cri grant") };
    let reader = grant(json!({"read": true}));
    let remover = grant(json!({
        "operations": ["stop-pod-sandbox", "remove-pod-sandbox", "pull-image"],
        "namespaces": ["default"],
        "states": ["notready"],
        "images": ["registry.k8s.io/*"],
    }));
    let unread = |function: &str| {
        denied(&format!(
            "cri {function} is not granted: set read = true in [plugins.conformance.grants] cri"
        ))
    };
    let case = |grant: &CriGrant, function, args, expect| Case {
        cri: grant.clone(),
        ..ungranted(call("cri", function, args), expect)
    };
    vec![
        case(&reader, "version", json!({}), Expect::Ok),
        case(
            &CriGrant::default(),
            "version",
            json!({}),
            denied(
                "cri version is not granted: set read = true in [plugins.conformance.grants] cri",
            ),
        ),
        case(
            &reader,
            "pod-sandbox-status",
            json!({"id": SANDBOX_SYSTEM}),
            Expect::Ok,
        ),
        case(
            &reader,
            "pod-sandbox-status",
            json!({"id": "0".repeat(64)}),
            failed("not-found"),
        ),
        case(
            &reader,
            "list-pod-sandboxes",
            json!({"filter": {"id": null, "state": "ready", "labels": []}}),
            listed(&[SANDBOX_WEB, SANDBOX_SYSTEM]),
        ),
        case(
            &reader,
            "list-containers",
            json!({"pod-sandbox-id": null}),
            listed(&[CONTAINER]),
        ),
        case(
            &reader,
            "list-images",
            json!({}),
            listed(&[IMAGES[1], IMAGES[0]]),
        ),
        case(
            &reader,
            "image-status",
            json!({"image": IMAGES[0]}),
            Expect::Ok,
        ),
        case(
            &CriGrant::default(),
            "list-containers",
            json!({"pod-sandbox-id": SANDBOX_SYSTEM}),
            unread("list-containers"),
        ),
        case(
            &CriGrant::default(),
            "list-images",
            json!({}),
            unread("list-images"),
        ),
        case(
            &CriGrant::default(),
            "image-status",
            json!({"image": IMAGES[0]}),
            denied(
                "cri image-status is not granted: set read = true in [plugins.conformance.grants] cri",
            ),
        ),
        // namespace and state bound the sandbox operations
        case(
            &remover,
            "stop-pod-sandbox",
            json!({"id": SANDBOX_EXITED}),
            Expect::Ok,
        ),
        case(
            &remover,
            "remove-pod-sandbox",
            json!({"id": SANDBOX_EXITED}),
            Expect::Ok,
        ),
        case(
            &remover,
            "stop-pod-sandbox",
            json!({"id": SANDBOX_SYSTEM}),
            denied(&format!(
                "cri stop-pod-sandbox of kube-system/coredns (sandbox {SANDBOX_SYSTEM}) is not granted: the sandbox is in namespace kube-system, outside namespaces = [\"default\"]: add \"kube-system\" to namespaces in [plugins.conformance.grants] cri"
            )),
        ),
        case(
            &remover,
            "remove-pod-sandbox",
            json!({"id": SANDBOX_WEB}),
            denied(&format!(
                "cri remove-pod-sandbox of default/web (sandbox {SANDBOX_WEB}) is not granted: the sandbox is READY, outside states = [\"notready\"]: add \"ready\" to states in [plugins.conformance.grants] cri"
            )),
        ),
        case(
            &remover,
            "remove-pod-sandbox",
            json!({"id": "0".repeat(64)}),
            // removal is idempotent, as the CRI says
            Expect::Ok,
        ),
        // images
        case(
            &remover,
            "pull-image",
            json!({"image": IMAGES[0], "timeout-ms": 10000}),
            Expect::Ok,
        ),
        case(
            &remover,
            "pull-image",
            json!({"image": "nginx", "timeout-ms": 10000}),
            denied(
                "no cri images pattern covers docker.io/library/nginx:latest: add \"docker.io/library/nginx:latest\" (or a pattern such as \"docker.io/library/nginx:*\") to images in [plugins.conformance.grants] cri",
            ),
        ),
        case(
            &remover,
            "pull-image",
            json!({"image": "registry.k8s.io/../pause", "timeout-ms": 10000}),
            invalid(
                "\"registry.k8s.io/../pause\" is not an image reference: expected for example \"docker.io/library/busybox:1.36\"",
            ),
        ),
    ]
}

/// Instances of two owners, groups granted and not.
fn cloud() -> Vec<Case> {
    let grant: CloudGrant = serde_json::from_value(json!({
        "operations": ["list-instances", "get-instance", "delete-instance", "list-security-groups", "add-to-group"],
        "instances": [{"tag": "kubernetes.io/cluster/a", "value": "owned"}],
        "security-groups": [GROUP],
    }))
    .expect("valid cloud grant");
    let not_ours = |function: &str| {
        denied(&format!(
            "cloud {function} of instance {INSTANCE_B}: it carries none of the ownership tags in instances of [plugins.conformance.grants] cloud (kubernetes.io/cluster/a=owned): only instances tagged by a granted owner are the plugin's"
        ))
    };
    let other_group = |function: &str| {
        denied(&format!(
            "cloud {function} of security group {OTHER_GROUP} is not granted: add \"{OTHER_GROUP}\" to security-groups in [plugins.conformance.grants] cloud"
        ))
    };
    let case = |function, args, expect| Case {
        cloud: grant.clone(),
        ..ungranted(call("cloud", function, args), expect)
    };
    vec![
        case(
            "list-instances",
            json!({"owner": {"key": "kubernetes.io/cluster/a", "value": "owned"}}),
            listed(&[INSTANCE_A]),
        ),
        case("get-instance", json!({"id": INSTANCE_A}), Expect::Ok),
        case(
            "get-instance",
            json!({"id": INSTANCE_B}),
            not_ours("get-instance"),
        ),
        case(
            "get-instance",
            json!({"id": "i-0123456789abcdef9"}),
            failed("not-found"),
        ),
        case("delete-instance", json!({"id": INSTANCE_A}), Expect::Ok),
        case(
            "delete-instance",
            json!({"id": INSTANCE_B}),
            not_ours("delete-instance"),
        ),
        case(
            "list-security-groups",
            json!({"ids": [GROUP]}),
            listed(&[GROUP]),
        ),
        case(
            "list-security-groups",
            json!({"ids": [OTHER_GROUP]}),
            other_group("list-security-groups"),
        ),
        case("find-security-group", json!({"name": "nodes"}), Expect::Ok),
        // a group outside the grant is not found, as one that does not exist
        case(
            "find-security-group",
            json!({"name": "other"}),
            failed("not-found"),
        ),
        case(
            "add-to-group",
            json!({"instance-id": INSTANCE_A, "group-id": GROUP}),
            Expect::Ok,
        ),
        case(
            "add-to-group",
            json!({"instance-id": INSTANCE_B, "group-id": GROUP}),
            not_ours("add-to-group"),
        ),
        case(
            "add-to-group",
            json!({"instance-id": INSTANCE_A, "group-id": OTHER_GROUP}),
            other_group("add-to-group"),
        ),
    ]
}
