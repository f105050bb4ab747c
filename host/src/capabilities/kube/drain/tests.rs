use super::*;
use crate::capabilities::capability::Capability;
use crate::capabilities::kube::{FakeKube, KubeRule};
use crate::capabilities::limits::Limits;
use crate::capabilities::testing::call_with_limits;
use serde_json::json;
use std::sync::Arc;

/// Everything a drain needs, pods only on this node.
const DRAIN: &str = r#"kube = [
  { resource = "nodes", verbs = ["get", "patch"], names = ["$NODE"], fields = ["spec.unschedulable"] },
  { resource = "pods", verbs = ["get", "list"], field-selector = "spec.nodeName=$NODE" },
  { resource = "pods/eviction", verbs = ["create"], field-selector = "spec.nodeName=$NODE" },
]"#;

fn kube(rules: &str, dry_run: bool) -> (PluginKube, Arc<FakeKube>) {
    let (backend, fake) = PluginKube::fake();
    #[derive(serde::Deserialize)]
    struct G {
        kube: Vec<KubeRule>,
    }
    let grant: G = toml::from_str(rules).unwrap();
    fake.put(
        "nodes",
        json!({"metadata": {"name": "node-1", "uid": "u1"}, "spec": {}}),
    );
    let pod = |ns: &str, name: &str, node: &str, meta: Value| {
        let mut pod =
            json!({"metadata": {"name": name, "namespace": ns}, "spec": {"nodeName": node}});
        pod["metadata"]
            .as_object_mut()
            .unwrap()
            .extend(meta.as_object().unwrap().clone());
        pod
    };
    fake.put("pods", pod("default", "web-1", "node-1", json!({})));
    fake.put("pods", pod("default", "web-2", "node-1", json!({})));
    fake.put(
        "pods",
        pod(
            "kube-system",
            "proxy-x",
            "node-1",
            json!({"ownerReferences": [
        {"kind": "DaemonSet", "name": "proxy", "controller": true}]}),
        ),
    );
    fake.put(
        "pods",
        pod(
            "kube-system",
            "etcd-node-1",
            "node-1",
            json!({"annotations": {
        "kubernetes.io/config.mirror": "abc"}}),
        ),
    );
    fake.put("pods", pod("default", "web-3", "node-2", json!({})));
    // A reconcile long enough for the drains' own deadlines.
    let limits = Limits {
        timeout: Duration::from_secs(600),
        ..Limits::default()
    };
    let adapter = PluginKube::for_call(
        &backend,
        &grant.kube,
        &Default::default(),
        &call_with_limits("remediator", dry_run, limits),
    );
    (adapter, fake)
}

fn unschedulable(fake: &FakeKube) -> bool {
    cordoned(&fake.object("nodes", None, "node-1").unwrap())
}

fn options(deadline_ms: u64, uncordon_on_give_up: bool) -> DrainOptions {
    DrainOptions {
        deadline_ms,
        uncordon_on_give_up,
    }
}

#[tokio::test(start_paused = true)]
async fn a_drain_cordons_and_evicts_all_but_daemonset_and_mirror_pods() {
    let (kube, fake) = kube(DRAIN, false);
    let report = kube.drain(options(60_000, true)).await.unwrap();
    assert_eq!(report.evicted, ["default/web-1", "default/web-2"]);
    assert_eq!(report.skipped.len(), 2, "{:?}", report.skipped);
    assert!(
        report
            .skipped
            .iter()
            .any(|s| s.starts_with("kube-system/proxy-x: a DaemonSet pod"))
    );
    assert!(
        report
            .skipped
            .iter()
            .any(|s| s.starts_with("kube-system/etcd-node-1: a mirror pod"))
    );
    assert!(report.remaining.is_empty() && !report.uncordoned);
    assert!(
        unschedulable(&fake),
        "a completed drain leaves the Node cordoned"
    );
    assert_eq!(
        fake.actions(),
        [
            "patch nodes/node-1 merge",
            "evict pods/default/web-1",
            "evict pods/default/web-2"
        ]
    );
    assert!(
        fake.object("pods", Some("default"), "web-3").is_some(),
        "another node's pod stays"
    );
    // Each act passed the gate: one cordon, one eviction per pod.
    let ops: Vec<_> = kube
        .call
        .gate
        .mutations()
        .iter()
        .map(|m| format!("{} {}", m.operation, m.target))
        .collect();
    assert_eq!(
        ops,
        [
            "cordon nodes/node-1",
            "evict pods/default/web-1",
            "evict pods/default/web-2"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_budget_that_blocks_forever_stops_the_drain_at_its_deadline_naming_it_and_uncordons() {
    let (kube, fake) = kube(DRAIN, false);
    fake.block_eviction("default", "web-2", Some("default/web-pdb"));
    let started = Instant::now();
    let report = kube.drain(options(30_000, true)).await.unwrap();
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(30) && took < Duration::from_secs(32),
        "{took:?}"
    );
    assert_eq!(report.evicted, ["default/web-1"]);
    assert_eq!(report.remaining.len(), 1, "{:?}", report.remaining);
    assert_eq!(
        report.remaining,
        ["default/web-2: [pdb:default/web-pdb] blocked by PodDisruptionBudget default/web-pdb"]
    );
    assert!(report.uncordoned && !unschedulable(&fake));
    assert!(
        fake.object("pods", Some("default"), "web-2").is_some(),
        "never deleted"
    );
    // The blocked eviction was asked as the server's dry run only: no
    // budget spent, nothing journaled for it.
    let ops: Vec<_> = kube
        .call
        .gate
        .mutations()
        .iter()
        .map(|m| format!("{} {}", m.operation, m.target))
        .collect();
    assert_eq!(
        ops,
        [
            "cordon nodes/node-1",
            "evict pods/default/web-1",
            "uncordon nodes/node-1"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_budget_that_frees_up_lets_the_drain_finish() {
    let (kube, fake) = kube(DRAIN, false);
    fake.block_eviction("default", "web-2", Some("default/web-pdb"));
    let drain = tokio::spawn(async move { kube.drain(options(60_000, true)).await });
    tokio::time::sleep(Duration::from_secs(12)).await;
    fake.block_eviction("default", "web-2", None);
    let report = drain.await.unwrap().unwrap();
    assert_eq!(report.evicted, ["default/web-1", "default/web-2"]);
    assert!(report.remaining.is_empty());
    assert!(unschedulable(&fake));
}

#[tokio::test(start_paused = true)]
async fn a_drain_gives_up_in_time_to_undo_itself_before_the_reconciles_deadline() {
    let (backend, fake) = PluginKube::fake();
    let (_, seeded) = kube(DRAIN, false);
    for pod in ["web-1", "web-2"] {
        fake.put("pods", seeded.object("pods", Some("default"), pod).unwrap());
    }
    fake.put("nodes", json!({"metadata": {"name": "node-1"}, "spec": {}}));
    fake.block_eviction("default", "web-2", Some("default/web-pdb"));
    #[derive(serde::Deserialize)]
    struct G {
        kube: Vec<KubeRule>,
    }
    let grant: G = toml::from_str(DRAIN).unwrap();
    let limits = Limits {
        timeout: Duration::from_secs(30),
        ..Limits::default()
    };
    let plugin = PluginKube::for_call(
        &backend,
        &grant.kube,
        &Default::default(),
        &call_with_limits("remediator", false, limits),
    );
    let started = Instant::now();
    let report = plugin.drain(options(3_600_000, true)).await.unwrap();
    assert!(
        started.elapsed() <= Duration::from_secs(26),
        "{:?}",
        started.elapsed()
    );
    assert!(report.uncordoned && !unschedulable(&fake), "{report:?}");
}

#[tokio::test(start_paused = true)]
async fn without_uncordon_on_give_up_the_node_stays_cordoned() {
    let (kube, fake) = kube(DRAIN, false);
    fake.block_eviction("default", "web-1", Some("default/web-pdb"));
    let report = kube.drain(options(10_000, false)).await.unwrap();
    assert!(!report.uncordoned && unschedulable(&fake));
    assert_eq!(report.remaining.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_uncordon_by_someone_else_ends_the_drain_before_the_next_eviction() {
    let (kube, fake) = kube(DRAIN, false);
    fake.block_eviction("default", "web-1", Some("default/web-pdb"));
    fake.block_eviction("default", "web-2", Some("default/web-pdb"));
    let drain = tokio::spawn(async move { kube.drain(options(60_000, true)).await });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(unschedulable(&fake));
    // Someone uncordons the Node, and the budget frees up.
    fake.put(
        "nodes",
        json!({"metadata": {"name": "node-1", "uid": "u1"}, "spec": {}}),
    );
    fake.block_eviction("default", "web-1", None);
    fake.block_eviction("default", "web-2", None);
    let report = drain.await.unwrap().unwrap();
    assert!(report.evicted.is_empty(), "{report:?}");
    assert_eq!(report.remaining.len(), 2);
    assert!(
        !fake.actions().iter().any(|a| a.starts_with("evict")),
        "{:?}",
        fake.actions()
    );
    assert!(fake.object("pods", Some("default"), "web-1").is_some());
}

#[tokio::test(start_paused = true)]
async fn a_missing_grant_refuses_the_drain_before_it_cordons() {
    let only_default = DRAIN.replace(
        r#"{ resource = "pods/eviction", verbs = ["create"], field-selector = "spec.nodeName=$NODE" }"#,
        r#"{ resource = "pods/eviction", verbs = ["create"], namespaces = ["kube-system"] }"#,
    );
    let (plugin, fake) = kube(&only_default, false);
    let err = plugin.drain(options(60_000, true)).await.unwrap_err();
    assert_eq!(err.kind(), "denied");
    assert!(
        err.message().contains("resource = \"pods/eviction\""),
        "{err}"
    );
    assert!(
        fake.actions().is_empty(),
        "nothing changed: {:?}",
        fake.actions()
    );
    let no_cordon = DRAIN.replace(
        r#"fields = ["spec.unschedulable"]"#,
        r#"fields = ["metadata.labels"]"#,
    );
    let (kube, fake) = kube(&no_cordon, false);
    assert_eq!(
        kube.drain(options(60_000, true)).await.unwrap_err().kind(),
        "denied"
    );
    assert!(fake.actions().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_plan_says_what_the_drain_would_do_and_does_nothing() {
    let (kube, fake) = kube(DRAIN, true);
    fake.block_eviction("default", "web-2", Some("default/web-pdb"));
    let report = kube.drain(options(60_000, true)).await.unwrap();
    assert_eq!(report.evicted, ["default/web-1"]);
    assert_eq!(
        report.remaining,
        ["default/web-2: [pdb:default/web-pdb] blocked by PodDisruptionBudget default/web-pdb"]
    );
    assert!(fake.actions().is_empty() && !unschedulable(&fake));
    // The plan shows the budget's refusal of the one eviction.
    let planned: Vec<_> = kube
        .call
        .gate
        .mutations()
        .iter()
        .map(|m| (m.operation, m.result.clone()))
        .collect();
    assert_eq!(
        &planned[..2],
        [("cordon", "ok".to_string()), ("evict", "ok".to_string())]
    );
    assert!(
        planned[2].1.starts_with(
            "budget-exhausted: [pdb:default/web-pdb] blocked by PodDisruptionBudget default/web-pdb"
        ),
        "{planned:?}"
    );
}

#[tokio::test]
async fn an_eviction_granted_on_this_node_reaches_no_other_nodes_pod() {
    let (kube, fake) = kube(DRAIN, false);
    let err = kube.evict("default", "web-3").await.unwrap_err();
    assert_eq!(err.kind(), "not-found", "{err}");
    assert!(fake.object("pods", Some("default"), "web-3").is_some());
    kube.evict("default", "web-1").await.unwrap();
    assert_eq!(fake.actions(), ["evict pods/default/web-1"]);
    // A path for a name is refused before any request.
    assert_eq!(
        kube.evict("default", "web-2/status")
            .await
            .unwrap_err()
            .kind(),
        "invalid"
    );
}

#[tokio::test]
async fn a_cordon_that_changes_nothing_is_no_mutation() {
    let (kube, fake) = kube(DRAIN, false);
    kube.cordon(false).await.unwrap();
    assert!(fake.actions().is_empty() && kube.call.gate.mutations().is_empty());
    kube.cordon(true).await.unwrap();
    kube.cordon(true).await.unwrap();
    assert_eq!(fake.actions(), ["patch nodes/node-1 merge"]);
    kube.cordon(false).await.unwrap();
    assert!(!unschedulable(&fake));
    let ops: Vec<_> = kube
        .call
        .gate
        .mutations()
        .iter()
        .map(|m| m.operation)
        .collect();
    assert_eq!(ops, ["cordon", "uncordon"]);
}

#[tokio::test(start_paused = true)]
async fn a_drain_undoes_only_its_own_cordon() {
    let (kube, fake) = kube(DRAIN, false);
    // Cordoned already (an operator, or another plugin's drain).
    fake.put(
        "nodes",
        json!({"metadata": {"name": "node-1", "uid": "u1"}, "spec": {"unschedulable": true}}),
    );
    fake.block_eviction("default", "web-1", Some("default/web-pdb"));
    let report = kube.drain(options(10_000, true)).await.unwrap();
    assert!(!report.remaining.is_empty());
    assert!(!report.uncordoned, "not its cordon to undo");
    assert!(unschedulable(&fake));
}

#[tokio::test(start_paused = true)]
async fn a_drain_that_cannot_see_every_pod_on_the_node_is_refused_before_it_cordons() {
    let narrowed = DRAIN.replace(
        r#"{ resource = "pods", verbs = ["get", "list"], field-selector = "spec.nodeName=$NODE" }"#,
        r#"{ resource = "pods", verbs = ["get", "list"], label-selector = "app=web" }"#,
    );
    let (kube, fake) = kube(&narrowed, false);
    let err = kube.drain(options(60_000, true)).await.unwrap_err();
    assert_eq!(err.kind(), "denied");
    assert!(err.message().contains("must see every pod"), "{err}");
    assert!(fake.actions().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_gate_refusal_ends_the_drain_and_undoes_it() {
    let (backend, fake) = PluginKube::fake();
    let (_, seeded) = kube(DRAIN, false);
    for pod in ["web-1", "web-2"] {
        fake.put("pods", seeded.object("pods", Some("default"), pod).unwrap());
    }
    fake.put("nodes", json!({"metadata": {"name": "node-1"}, "spec": {}}));
    #[derive(serde::Deserialize)]
    struct G {
        kube: Vec<KubeRule>,
    }
    let grant: G = toml::from_str(DRAIN).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // One eviction an hour on this host.
    let rule = crate::capabilities::gate::BudgetRule {
        name: "evictions".into(),
        operations: vec!["kube.evict".into()],
        max: 1,
        per: Duration::from_secs(3600),
        min_interval_per_target: Duration::ZERO,
    };
    let call =
        crate::capabilities::testing::call_journaled("remediator", false, dir.path(), vec![rule]);
    let plugin = PluginKube::for_call(&backend, &grant.kube, &Default::default(), &call);
    let report = plugin.drain(options(20_000, true)).await.unwrap();
    // Stopped at once: web-1 was evicted (still leaving, as far as the
    // drain saw), web-2 refused by the host's budget.
    assert_eq!(report.remaining.len(), 2, "{report:?}");
    assert!(
        report.remaining[0].starts_with("default/web-1: terminating"),
        "{report:?}"
    );
    assert!(fake.object("pods", Some("default"), "web-2").is_some());
    assert!(report.uncordoned && !unschedulable(&fake));
    // Stopped at the refusal, not retried until the deadline.
    let refused = plugin
        .call
        .gate
        .mutations()
        .iter()
        .filter(|m| m.result.starts_with("budget-exhausted"))
        .count();
    assert_eq!(refused, 1, "{:?}", plugin.call.gate.mutations());
}

#[tokio::test]
async fn a_plugin_cannot_cordon_through_a_plain_patch() {
    let rules = r#"kube = [{ resource = "nodes", verbs = ["get", "patch"], names = ["$NODE"] }]"#;
    let (kube, fake) = kube(rules, false);
    let node = super::super::backend::ObjectKey {
        api_version: "v1".into(),
        kind: "Node".into(),
        namespace: None,
        name: "node-1".into(),
    };
    for body in [r#"{"spec": {"unschedulable": true}}"#, r#"{"spec": null}"#] {
        let err = kube.patch(&node, PatchType::Merge, body).await.unwrap_err();
        assert_eq!(err.kind(), "invalid", "{err}");
        assert!(err.message().contains("call kube.cordon"), "{err}");
    }
    kube.patch(
        &node,
        PatchType::Merge,
        r#"{"metadata": {"labels": {"a": "b"}}}"#,
    )
    .await
    .unwrap();
    assert_eq!(fake.actions(), ["patch nodes/node-1 merge"]);
}

#[tokio::test]
async fn an_eviction_reaches_only_pods_bound_to_this_node_whatever_the_grant() {
    let rules =
        r#"kube = [{ resource = "pods/eviction", verbs = ["create"], namespaces = ["default"] }]"#;
    let (kube, fake) = kube(rules, false);
    let elsewhere = kube.evict("default", "web-3").await.unwrap_err();
    assert!(fake.object("pods", Some("default"), "web-3").is_some());
    assert!(fake.object("pods", Some("default"), "nowhere").is_none());
    let absent = kube.evict("default", "nowhere").await.unwrap_err();
    // Another Node's pod and no pod at all look the same: evict is no way
    // to learn what runs elsewhere.
    for (err, name) in [(&elsewhere, "web-3"), (&absent, "nowhere")] {
        assert_eq!(err.kind(), "not-found", "{err}");
        assert_eq!(
            err.message(),
            format!(
                "kube evict pods/default/{name}: no such pod on this host's Node node-1 (evict reaches this Node's pods only)"
            )
        );
    }
    assert!(
        fake.actions().iter().all(|a| !a.starts_with("evict")),
        "{:?}",
        fake.actions()
    );
}

/// Under a grant with selectors, a pod of this Node outside them is
/// answered as one that does not exist, and as one on another Node: the
/// same not-found, naming the grant's scope. Inside them, the pod is evicted.
#[tokio::test]
async fn by_selectors_an_eviction_outside_them_is_answered_as_absent() {
    let rules = r#"kube = [{ resource = "pods/eviction", verbs = ["create"], label-selector = "evictable=yes" }]"#;
    let (kube, fake) = kube(rules, false);
    fake.put(
        "pods",
        json!({"metadata": {"name": "web-9", "namespace": "default", "labels": {"evictable": "yes"}}, "spec": {"nodeName": "node-1"}}),
    );
    let mut answers = Vec::new();
    for name in ["web-1", "web-3", "nowhere"] {
        let err = kube.evict("default", name).await.unwrap_err();
        answers.push(err.to_string().replace(name, "NAME"));
    }
    assert_eq!(
        answers,
        ["not-found: create pods/eviction in namespace default named NAME: no such object within the grant's selectors ({ resource = \"pods/eviction\", label-selector = \"evictable=yes\" }); one outside them is answered as absent: if it exists, label it to match, or widen the selectors in [plugins.remediator.grants] kube";
            3]
    );
    assert!(fake.actions().is_empty(), "{:?}", fake.actions());
    kube.evict("default", "web-9").await.unwrap();
    assert_eq!(fake.actions(), ["evict pods/default/web-9"]);
}

/// A cordon under a Node rule with selectors: judged on the Node as read
/// (outside them, answered as a Node that does not exist), done inside.
#[tokio::test]
async fn a_cordon_under_selectors_is_judged_on_the_node() {
    let rules = r#"kube = [{ resource = "nodes", verbs = ["get", "patch"], label-selector = "pool=a", fields = ["spec.unschedulable"] }]"#;
    let (kube, fake) = kube(rules, false);
    let err = kube.cordon(true).await.unwrap_err();
    assert_eq!(err.kind(), "not-found", "{err}");
    assert!(
        err.message()
            .contains("no such object within the grant's selectors"),
        "{err}"
    );
    assert!(fake.actions().is_empty(), "{:?}", fake.actions());
    fake.put(
        "nodes",
        json!({"metadata": {"name": "node-1", "uid": "u1", "labels": {"pool": "a"}}, "spec": {}}),
    );
    kube.cordon(true).await.unwrap();
    assert_eq!(fake.actions(), ["patch nodes/node-1 merge"]);
}

/// A cordon names the UID of the Node it read: a Node recreated under the
/// name in between is left alone.
#[tokio::test]
async fn a_cordon_is_bound_to_the_node_it_read() {
    let (kube, fake) = kube(DRAIN, false);
    let recreated = json!({"metadata": {"name": "node-1", "uid": "u9"}, "spec": {}});
    fake.recreate_after_get("nodes", recreated.clone());
    let err = kube.cordon(true).await.unwrap_err();
    assert_eq!(err.kind(), "invalid", "{err}");
    assert!(err.message().contains("immutable"), "{err}");
    assert_eq!(fake.object("nodes", None, "node-1"), Some(recreated));
    kube.cordon(true).await.unwrap();
    assert_eq!(
        fake.object("nodes", None, "node-1").unwrap()["spec"]["unschedulable"],
        true
    );
}
