//! The node and cluster every case runs against: files, a probe answer,
//! units, log lines, conditions held (one reported, one cleared), sandboxes
//! in two namespaces and two states, a container, images,
//! instances of two owners, security groups, Kubernetes objects and state
//! keys. A populated backend is what lets a case be an ownership refusal (an
//! instance of another cluster, a sandbox in another namespace) or a plain
//! success, rather than "not denied".
//!
//! Written as the SDK fakes' setup requests (`sdk/fakes/README.md`): each
//! implementation applies them to its own fakes.

use super::{KUBE_OWN_LEASE, kube_objects};
use serde_json::{Value, json};
use tend_rules::ident::CRI_ID;

/// The node's name (`$NODE` in grants).
pub const NODE: &str = "node-1";

/// Sandboxes: ready in kube-system, not ready in default, ready in default.
pub const SANDBOX_SYSTEM: &str = CRI_ID.example;
pub const SANDBOX_EXITED: &str = "1b4f0e9851971998e732078544c96b36c3d01cedf7caa332359d6f1d83567014";
pub const SANDBOX_WEB: &str = "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752";
/// The container in the kube-system sandbox.
pub const CONTAINER: &str = "fd61a03af4f77d870fc21e05e7e80678095c92d808cfb3b5c279ee04c74aca13";
/// The images the runtime holds.
pub const IMAGES: [&str; 2] = ["registry.k8s.io/pause:3.9", "docker.io/library/nginx:1.25"];

/// Instances of cluster a (the granted owner) and of cluster b.
pub const INSTANCE_A: &str = "i-0123456789abcdef0";
pub const INSTANCE_B: &str = "i-0123456789abcdef1";
/// The granted group and another.
pub const GROUP: &str = "sg-0123456789abcdef0";
pub const OTHER_GROUP: &str = "sg-0123456789abcdef1";

/// The condition types the plugin holds before the case (as the host holds
/// them from an earlier run): the first reported, the second cleared.
pub const CONDITIONS: [&str; 2] = ["KernelDeadlock", "ReadonlyFilesystem"];

/// The probe the fixture answers (GET, 200).
pub const HEALTHZ: &str = "http://127.0.0.1:10248/healthz";

/// The state keys the plugin holds before the case.
pub const STATE_KEYS: [&str; 3] = ["seen/a", "seen/b", "other"];

fn setup(fake: &str, function: &str, args: Value) -> Value {
    json!({"fake": fake, "fn": function, "args": args})
}

fn sandbox(id: &str, name: &str, namespace: &str, state: &str) -> Value {
    json!({
        "id": id, "pod-name": name, "namespace": namespace, "uid": format!("uid-{name}"),
        "attempt": 0, "state": state, "created-at-ns": 0,
        "labels": [["io.kubernetes.pod.namespace", namespace], ["io.kubernetes.pod.name", name]],
        "annotations": [],
    })
}

fn instance(id: &str, cluster: &str, groups: &[&str]) -> Value {
    json!({
        "id": id, "name": format!("node-{cluster}"), "state": "running", "status": "running",
        "task-state": null, "created-at-ms": 0, "zone": null,
        "private-addresses": ["10.0.0.1"], "public-addresses": [],
        "security-groups": groups,
        "tags": [[format!("kubernetes.io/cluster/{cluster}"), "owned"]],
        "provider-id": format!("aws:///zone/{id}"),
    })
}

fn group(id: &str, name: &str) -> Value {
    json!({"id": id, "name": name, "description": name, "rules": []})
}

/// The setup requests, in order.
pub fn setup_requests() -> Vec<Value> {
    let mut requests = vec![
        setup(
            "files",
            "put",
            json!({"path": "/etc/containerd/certs.d/docker.io/hosts.toml", "contents": "c2VydmVyID0gImh0dHBzOi8vZG9ja2VyLmlvIgo="}),
        ),
        setup(
            "files",
            "put",
            json!({"path": "/etc/hosts", "contents": "MTI3LjAuMC4xIGxvY2FsaG9zdAo="}),
        ),
        setup("http", "status", json!({"url": HEALTHZ, "status": 200})),
        setup(
            "systemd",
            "set-unit",
            json!({"unit": "kubelet.service", "active-state": "active"}),
        ),
        setup(
            "systemd",
            "set-unit",
            json!({"unit": "containerd.service", "active-state": "failed"}),
        ),
        setup(
            "logs",
            "kernel",
            json!({"priority": 3, "message": "INFO: task kworker/0:1 blocked for more than 120 seconds."}),
        ),
        setup(
            "logs",
            "kernel",
            json!({"priority": 6, "message": "eth0: link up"}),
        ),
        setup(
            "logs",
            "journal",
            json!({"unit": "containerd.service", "identifier": "containerd", "priority": 3, "message": "failed to start shim"}),
        ),
        setup(
            "logs",
            "journal",
            json!({"unit": "sshd.service", "identifier": "sshd", "priority": 6, "message": "Accepted publickey for root"}),
        ),
        setup(
            "conditions",
            "hold",
            json!({"condition": CONDITIONS[0], "active": true, "reason": "TaskHung", "message": "task kworker/0:1 blocked for more than 120 seconds"}),
        ),
        setup(
            "conditions",
            "hold",
            json!({"condition": CONDITIONS[1], "active": false, "reason": "FilesystemWritable", "message": "/ is writable"}),
        ),
        setup(
            "cri",
            "set-version",
            json!({"name": "containerd", "version": "1.7.24"}),
        ),
        setup(
            "cri",
            "put-sandbox",
            json!({"sandbox": sandbox(SANDBOX_SYSTEM, "coredns", "kube-system", "ready")}),
        ),
        setup(
            "cri",
            "put-sandbox",
            json!({"sandbox": sandbox(SANDBOX_EXITED, "job", "default", "not-ready")}),
        ),
        setup(
            "cri",
            "put-sandbox",
            json!({"sandbox": sandbox(SANDBOX_WEB, "web", "default", "ready")}),
        ),
        setup(
            "cri",
            "add-container",
            json!({"container": {
                "id": CONTAINER, "pod-sandbox-id": SANDBOX_SYSTEM, "name": "coredns", "attempt": 0,
                "image": IMAGES[0], "image-ref": IMAGES[0], "state": "running", "created-at-ns": 0,
                "labels": [], "annotations": [],
            }}),
        ),
    ];
    for image in IMAGES {
        requests.push(setup("cri", "add-image", json!({"reference": image})));
    }
    requests.extend([
        setup(
            "cloud",
            "put-instance",
            json!({"instance": instance(INSTANCE_A, "a", &[GROUP])}),
        ),
        setup(
            "cloud",
            "put-instance",
            json!({"instance": instance(INSTANCE_B, "b", &[OTHER_GROUP])}),
        ),
        setup(
            "cloud",
            "put-group",
            json!({"group": group(GROUP, "nodes")}),
        ),
        setup(
            "cloud",
            "put-group",
            json!({"group": group(OTHER_GROUP, "other")}),
        ),
        setup("kube", "set-node-name", json!({"node": NODE})),
        setup(
            "kube",
            "set-own-lease",
            json!({"namespace": KUBE_OWN_LEASE.0, "name": KUBE_OWN_LEASE.1}),
        ),
    ]);
    for object in kube_objects() {
        requests.push(setup("kube", "put", json!({"object": object})));
    }
    requests
}

/// Plugin calls made before the case (state is always granted): they must
/// succeed.
pub fn seed_calls() -> Vec<Value> {
    STATE_KEYS
        .iter()
        .map(|key| json!({"cap": "state", "fn": "set", "args": {"key": key, "value": "MQ=="}}))
        .collect()
}
