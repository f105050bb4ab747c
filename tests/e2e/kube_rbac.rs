//! `tend rbac` prints all the RBAC tend needs, and no less: the fake API
//! server (tests/peers/kube-apiserver.py) enforces the Roles, ClusterRoles and
//! bindings `tend rbac` renders for two configs (a node scope and a cluster
//! scope with leader election), for the ServiceAccount tokens the two `tend
//! run`s carry in their kubeconfigs. The elector acquires and renews its
//! Lease, the plugins patch, list, watch and record Events, and the fake
//! answers none of it 401 or 403. Without the Events rule, the Events are
//! what gets 403. Every wait is on a condition with a deadline.

use serde_json::Value;
use std::collections::BTreeSet;
use std::time::Duration;
use tend_e2e::{
    Daemon, KubeApi, Kubectl, Sandbox, free_port, plugin_status, status, wait_for_plugin,
    wait_until,
};

const WITHIN: Duration = Duration::from_secs(30);
const NODE_USER: &str = "system:serviceaccount:tend-system:tend-node";
const CLUSTER_USER: &str = "system:serviceaccount:tend-system:tend-cluster";

/// One chaos plugin with a kube grant (a TOML array) and its config (TOML lines).
fn chaos(name: &str, scope: &str, grant: &str, config: &str) -> String {
    format!(
        "[plugins.{name}]\nscope = \"{scope}\"\ninterval = \"1s\"\n[plugins.{name}.grants]\nkube = {grant}\n[plugins.{name}.config]\n{config}\n"
    )
}

/// A `tend run` on `node` with `plugins` (chaos plugins named `names`), as
/// the ServiceAccount `user`: its config's `tend rbac` output applied with
/// kubectl (as the admin), tend's kubeconfig that ServiceAccount's token
/// ([`KubeApi::grant_rbac`]).
fn tend(
    api: &KubeApi,
    node: &str,
    user: &str,
    extra_host: &str,
    (names, plugins): (&[&str], String),
) -> (Sandbox, u16, Daemon) {
    let sandbox = Sandbox::new();
    for name in names {
        sandbox.add_plugin("chaos", name);
    }
    let port = free_port();
    let host = format!(
        "listen = \"127.0.0.1:{port}\"\n{}{extra_host}",
        api.host_kube(&sandbox)
    );
    sandbox.config_on_node(node, &host, &plugins);
    assert_eq!(api.grant_rbac(&sandbox), user);
    let daemon = sandbox.daemon();
    (sandbox, port, daemon)
}

fn lease(kubectl: &Kubectl) -> Value {
    kubectl.json(&["get", "lease", "tend-cluster", "-n", "tend-system"])
}

/// tend's own requests (not kubectl's) in the fake's log.
fn tend_requests(api: &KubeApi) -> Vec<Value> {
    api.requests()["log"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["userAgent"].as_str().unwrap_or("").starts_with("tend/"))
        .cloned()
        .collect()
}

fn healthy(p: &Value, message: &str) -> bool {
    p["last"]["message"].as_str() == Some(message)
}

#[test]
fn tend_rbac_output_is_all_the_access_tend_needs() {
    let api = KubeApi::start();
    let kubectl = Kubectl::version("1.33", &api);
    for node in ["node-1", "node-2"] {
        let out = kubectl.apply(
            &format!("apiVersion: v1\nkind: Node\nmetadata: {{name: {node}}}\n"),
            &[],
        );
        assert!(out.success(), "{out:?}");
    }
    kubectl.ok(&[
        "create",
        "configmap",
        "kubeadm-config",
        "-n",
        "kube-system",
        "--from-literal=ClusterConfiguration=podSubnet: 10.244.0.0/16",
    ]);

    // The node scope: a DaemonSet's tend labels its own Node ($NODE: a rule
    // without resourceNames) and says so in an Event.
    let (_node_sandbox, node_port, _node_daemon) = tend(
        &api,
        "node-1",
        NODE_USER,
        "",
        (
            &["self-labeler"],
            chaos(
                "self-labeler",
                "node",
                r#"[{ resource = "nodes", verbs = ["get", "patch"], names = ["$NODE"] }]"#,
                "mode = \"kube-label\"\nnode = \"node-1\"\nkey = \"tend.dev/node\"\nvalue = \"yes\"",
            ),
        ),
    );
    // The cluster scope: the elected replica labels node-2 by name and lists
    // (a shared cache: list, then watch) kubeadm's ConfigMaps.
    let election = "[host.leader-election]\nnamespace = \"tend-system\"\nname = \"tend-cluster\"\nlease-duration = \"6s\"\nrenew-deadline = \"4s\"\nretry-period = \"1s\"\n";
    let cluster_plugins = chaos(
        "labeler",
        "cluster",
        r#"[{ resource = "nodes", verbs = ["get", "patch"], names = ["node-2"] }]"#,
        "mode = \"kube-label\"\nnode = \"node-2\"\nkey = \"tend.dev/cluster\"\nvalue = \"yes\"",
    ) + &chaos(
        "lister",
        "cluster",
        r#"[{ resource = "configmaps", verbs = ["list", "watch"], namespaces = ["kube-system"] }]"#,
        "mode = \"kube-list\"\napi-version = \"v1\"\nkind = \"ConfigMap\"\nnamespace = \"kube-system\"",
    );
    let (_cluster_sandbox, port, _cluster_daemon) = tend(
        &api,
        "controller",
        CLUSTER_USER,
        election,
        (&["labeler", "lister"], cluster_plugins),
    );

    // The elector acquires the Lease and renews it (acquireTime stays).
    wait_until(WITHIN, "the cluster tend to lead", || {
        status(port)["leader"]["leading"] == true
    });
    let acquired = lease(&kubectl);
    wait_until(WITHIN, "a renewal", || {
        let now = lease(&kubectl);
        now["metadata"]["resourceVersion"] != acquired["metadata"]["resourceVersion"]
            && now["spec"]["renewTime"] != acquired["spec"]["renewTime"]
    });
    let renewed = lease(&kubectl);
    assert_eq!(
        renewed["spec"]["acquireTime"], acquired["spec"]["acquireTime"],
        "a renewal moved acquireTime: {renewed:#}"
    );
    assert_eq!(
        renewed["spec"]["holderIdentity"],
        acquired["spec"]["holderIdentity"]
    );
    // The plugins did their calls, each twice (the second Event raises the first's count).
    for (p, name, message) in [
        (port, "labeler", "labeled node-2 tend.dev/cluster=yes"),
        (port, "lister", "listed 1 ConfigMap: kubeadm-config"),
        (
            node_port,
            "self-labeler",
            "labeled node-1 tend.dev/node=yes",
        ),
    ] {
        wait_for_plugin(p, name, message, |s| {
            healthy(s, message) && s["reconciles"].as_u64().unwrap_or(0) >= 2
        });
    }
    let events = kubectl.json(&["get", "events.events.k8s.io", "-n", "default"]);
    let counts: Vec<(String, u64)> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["regarding"]["name"].as_str().unwrap().to_string(),
                e["series"]["count"].as_u64().unwrap_or(1),
            )
        })
        .collect();
    for node in ["node-1", "node-2"] {
        assert!(
            counts.iter().any(|(n, c)| n == node && *c >= 2),
            "no repeated Event about {node}: {counts:?}"
        );
    }

    // Zero 401s and 403s: every request tend made was allowed to its ServiceAccount.
    let requests = tend_requests(&api);
    let refused: Vec<&Value> = requests
        .iter()
        .filter(|e| matches!(e["code"].as_u64(), Some(401 | 403)))
        .collect();
    assert!(refused.is_empty(), "refused: {refused:#?}");
    let used: BTreeSet<(String, String, String)> = requests
        .iter()
        .map(|e| {
            (
                e["user"].as_str().unwrap_or_default().to_string(),
                e["verb"].as_str().unwrap().to_string(),
                e["resource"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    eprintln!("what tend did, as whom:");
    for (user, verb, resource) in &used {
        eprintln!("  {user} {verb} {resource}");
    }
    for (user, verb, resource) in [
        (CLUSTER_USER, "update", "leases.coordination.k8s.io"),
        (CLUSTER_USER, "patch", "nodes"),
        (CLUSTER_USER, "create", "events.events.k8s.io"),
        (CLUSTER_USER, "patch", "events.events.k8s.io"),
        (CLUSTER_USER, "list", "configmaps"),
        (CLUSTER_USER, "watch", "configmaps"),
        (NODE_USER, "patch", "nodes"),
        (NODE_USER, "create", "events.events.k8s.io"),
    ] {
        assert!(
            used.contains(&(user.into(), verb.into(), resource.into())),
            "{user} never did {verb} {resource}: {used:#?}"
        );
    }
    assert!(
        used.iter()
            .all(|(user, _, _)| user == CLUSTER_USER || user == NODE_USER),
        "a request without the ServiceAccount's token: {used:#?}"
    );

    // Without the Events rule of the cluster ClusterRole, the cluster tend's
    // Events are refused (403), and nothing else is.
    let role = kubectl.json(&["get", "clusterrole", "tend-system:tend-cluster"]);
    let index = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .position(|r| r["apiGroups"][0] == "events.k8s.io")
        .unwrap_or_else(|| panic!("no Events rule in {role:#}"));
    let seq = api.request_seq();
    kubectl.ok(&[
        "patch",
        "clusterrole",
        "tend-system:tend-cluster",
        "--type",
        "json",
        "-p",
        &format!(r#"[{{"op": "remove", "path": "/rules/{index}"}}]"#),
    ]);
    let labeler = wait_for_plugin(port, "labeler", "the Event refused", |s| {
        s["last"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("Forbidden"))
    });
    eprintln!(
        "labeler without the Events rule: {}",
        labeler["last"]["message"]
    );
    let refused: Vec<Value> = api
        .requests_since(seq)
        .into_iter()
        .filter(|e| e["code"] == 403)
        .collect();
    assert!(!refused.is_empty());
    for e in &refused {
        assert_eq!(e["user"], CLUSTER_USER, "{e:#}");
        assert_eq!(e["resource"], "events.events.k8s.io", "{e:#}");
    }
    // The elector keeps its Lease: its rules are untouched.
    let before = lease(&kubectl)["metadata"]["resourceVersion"].clone();
    wait_until(WITHIN, "another renewal", || {
        lease(&kubectl)["metadata"]["resourceVersion"] != before
    });
    assert_eq!(status(port)["leader"]["leading"], true);
    assert!(healthy(
        &plugin_status(node_port, "self-labeler"),
        "labeled node-1 tend.dev/node=yes"
    ));
}
