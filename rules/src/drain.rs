//! The pure parts of cordon, evict and drain (`tend:plugin/kube`), shared by
//! the host and the SDK's fakes: which grant each needs, the one patch a
//! cordon sends, which pods a drain leaves alone, and how an eviction's
//! refusal names the PodDisruptionBudget that blocked it.

use crate::Refusal;
use crate::kube::{
    Access, KubeRule, PatchShape, Verb, check, check_found, check_key, check_object,
    check_patch_fields,
};
use crate::reason::Reason;
use serde_json::{Value, json};

/// How much of an API server's own words a refusal repeats.
pub const MAX_SERVER_TEXT: usize = 300;

/// The only field a cordon writes.
pub const CORDON_FIELD: &str = "spec.unschedulable";

/// The merge patch of a cordon, as `kubectl cordon` / `uncordon` send it: an
/// uncordon removes the field (false is its default, which the API server
/// does not store).
pub fn cordon_patch(unschedulable: bool) -> Value {
    if unschedulable {
        json!({"spec": {"unschedulable": true}})
    } else {
        json!({"spec": {"unschedulable": null}})
    }
}

/// Does a patch of a Node write `spec.unschedulable` (or a parent of it)?
/// Such a patch is a cordon, which only [`check_cordon`]'s function may
/// make: it passes the fleet's ticket as `kube.cordon`.
pub fn patch_cordons(shape: PatchShape, body: &Value) -> bool {
    let target = ["spec", "unschedulable"];
    crate::kube::patch_paths(shape, body).is_ok_and(|paths| {
        paths
            .iter()
            .any(|path| path.len() <= target.len() && path.iter().zip(target).all(|(a, b)| a == b))
    })
}

/// Is `node` (its JSON) cordoned?
pub fn cordoned(node: &Value) -> bool {
    node["spec"]["unschedulable"].as_bool() == Some(true)
}

/// May `plugin` cordon or uncordon its own Node (`patch` on `nodes` named
/// `$NODE`, its `fields` admitting `spec.unschedulable`)? A rule's selectors
/// are judged on the Node once it is read.
pub fn check_cordon(
    rules: &[KubeRule],
    plugin: &str,
    node: &str,
    unschedulable: bool,
) -> Result<(), Refusal> {
    let access = Access {
        group: "",
        resource: "nodes",
        verb: Verb::Patch,
        namespace: None,
        name: Some(node),
    };
    let patch = cordon_patch(unschedulable);
    check_patch_fields(rules, plugin, node, &access, (PatchShape::Merge, &patch))
}

/// May `plugin` evict pod `namespace`/`name` (`create` on `pods/eviction`,
/// as RBAC says it)? The names are checked for their shape first: they
/// become URL path parts.
pub fn check_evict(
    rules: &[KubeRule],
    plugin: &str,
    node: &str,
    namespace: &str,
    name: &str,
) -> Result<(), Refusal> {
    check_key("v1", "Pod", Some(namespace), Some(name))?;
    check(
        rules,
        plugin,
        node,
        &Access {
            group: "",
            resource: "pods/eviction",
            verb: Verb::Create,
            namespace: Some(namespace),
            name: Some(name),
        },
    )
}

/// The pod `evict` reaches, read fresh (`found`, None when the API server
/// has no such pod): one bound to `node`, inside the grant's selectors. A
/// pod that does not exist, one bound to another Node and (under a grant
/// with selectors) one outside them get the same answer, so `evict` tells a
/// plugin nothing about pods beyond its own Node and its grant (not even
/// that they exist): [`check_found`]'s words where only rules with
/// selectors allow the eviction, else "no such pod on this host's Node".
pub fn pod_on_node<'a>(
    rules: &[KubeRule],
    plugin: &str,
    node: &str,
    (namespace, name): (&str, &str),
    found: Option<&'a Value>,
) -> Result<&'a Value, crate::Error> {
    let on_node = found.filter(|pod| pod["spec"]["nodeName"].as_str() == Some(node));
    let eviction = Access {
        group: "",
        resource: "pods/eviction",
        verb: Verb::Create,
        namespace: Some(namespace),
        name: Some(name),
    };
    check_found(rules, plugin, node, &eviction, on_node, None)?;
    on_node.ok_or_else(|| {
        crate::Error::NotFound(format!(
            "kube evict pods/{namespace}/{name}: no such pod on this host's Node {node} (evict reaches this Node's pods only)"
        ))
    })
}

/// May `plugin` evict `pod` (its JSON, read fresh): [`check_evict`] by
/// name, the pod bound to `node` whatever the grant says, and the rule's
/// selectors (`field-selector = "spec.nodeName=$NODE"`) checked on it.
pub fn check_evict_pod(
    rules: &[KubeRule],
    plugin: &str,
    node: &str,
    namespace: &str,
    name: &str,
    pod: &Value,
) -> Result<(), Refusal> {
    check_evict(rules, plugin, node, namespace, name)?;
    if pod["spec"]["nodeName"].as_str() != Some(node) {
        return Err(Refusal::Denied(format!(
            "kube evict pods/{namespace}/{name}: the pod is not bound to this host's Node; evict reaches this node's pods only"
        )));
    }
    let access = Access {
        group: "",
        resource: "pods/eviction",
        verb: Verb::Create,
        namespace: Some(namespace),
        name: Some(name),
    };
    check_object(rules, plugin, node, &access, Some(pod), None)
}

/// What a drain does with one pod bound to the Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// Evict it.
    Evict,
    /// Already leaving (deleted, in its grace period): wait for it.
    Leaving,
    /// Leave it, and why.
    Skip(&'static str),
}

/// A DaemonSet's pods tolerate the cordon and would be put back; a mirror
/// pod is the kubelet's static pod, which the API cannot remove; a finished
/// pod holds nothing. Everything else is evicted (kubectl drain's `--force`
/// for bare pods: a drain that stops at a bare pod never ends).
pub fn disposition(pod: &Value) -> Disposition {
    let meta = &pod["metadata"];
    if meta["annotations"]
        .get("kubernetes.io/config.mirror")
        .is_some()
    {
        return Disposition::Skip("a mirror pod (the kubelet's static pod)");
    }
    let daemon = meta["ownerReferences"].as_array().is_some_and(|owners| {
        owners
            .iter()
            .any(|o| o["controller"].as_bool() == Some(true) && o["kind"] == "DaemonSet")
    });
    if daemon {
        return Disposition::Skip("a DaemonSet pod");
    }
    if meta.get("deletionTimestamp").is_some_and(|t| !t.is_null()) {
        return Disposition::Leaving;
    }
    Disposition::Evict
}

/// "<namespace>/<name>" of an object.
pub fn named(object: &Value) -> String {
    format!(
        "{}/{}",
        object["metadata"]["namespace"].as_str().unwrap_or_default(),
        object["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// The PodDisruptionBudget an eviction's refusal (HTTP 429) names, from the
/// cause the API server adds ("The disruption budget web-pdb needs 2 healthy
/// pods and has 2 currently"); a PDB lives in its pod's namespace.
pub fn blocking_budget(namespace: &str, status: &Value) -> Option<String> {
    status["details"]["causes"]
        .as_array()?
        .iter()
        .filter(|c| c["reason"] == "DisruptionBudget")
        .find_map(|c| {
            let name = c["message"]
                .as_str()?
                .strip_prefix("The disruption budget ")?
                .split(' ')
                .next()?;
            crate::ident::check("", name, &crate::ident::KUBE_NAME).ok()?;
            Some(format!("{namespace}/{name}"))
        })
}

/// What `evict` answers for a refusal by a PodDisruptionBudget: the
/// message starts with its reason (`[pdb:<ns>/<name>]`, `tend plan`'s and
/// plugins' to read) and says it.
pub fn blocked_message(pod: &str, budget: Option<&str>, server: &str) -> String {
    // A server's text: inert and bounded.
    let server = crate::text::inert(server);
    let server: String = server.chars().take(MAX_SERVER_TEXT).collect();
    let namespace = pod.split('/').next().unwrap_or_default();
    let (reason, which) = match budget {
        Some(budget) => (budget.to_string(), format!("PodDisruptionBudget {budget}")),
        None => (
            format!("{namespace}/*"),
            format!("a PodDisruptionBudget in {namespace}"),
        ),
    };
    Reason::Pdb(reason).tag(&format!(
        "blocked by {which}: evicting {pod} now would break it ({server}); nothing was done, try again later"
    ))
}

/// "[pdb:<ns>/<name>] blocked by PodDisruptionBudget <ns>/<name>" of a
/// [`blocked_message`]: what a drain's report says of a pod it left for
/// that reason.
pub fn blocked_reason(message: &str) -> Option<&str> {
    matches!(Reason::of(message), Some(Reason::Pdb(_))).then(|| {
        message
            .split_once(": ")
            .map_or(message, |(reason, _)| reason)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(toml_text: &str) -> Vec<KubeRule> {
        #[derive(serde::Deserialize)]
        struct Grants {
            kube: Vec<KubeRule>,
        }
        toml::from_str::<Grants>(toml_text).unwrap().kube
    }

    #[test]
    fn a_cordon_needs_its_own_node_and_only_the_unschedulable_field() {
        let granted = rules(
            r#"kube = [{ resource = "nodes", verbs = ["patch"], names = ["$NODE"], fields = ["spec.unschedulable"] }]"#,
        );
        assert!(check_cordon(&granted, "p", "node-a", true).is_ok());
        assert!(check_cordon(&granted, "p", "node-a", false).is_ok());
        let labels_only = rules(
            r#"kube = [{ resource = "nodes", verbs = ["patch"], names = ["$NODE"], fields = ["metadata.labels"] }]"#,
        );
        let refused = check_cordon(&labels_only, "p", "node-a", true).unwrap_err();
        assert_eq!(refused.kind(), "denied");
        assert!(
            refused.message().contains("spec.unschedulable"),
            "{refused:?}"
        );
        let err = check_cordon(&[], "p", "node-a", true).unwrap_err();
        assert!(err.message().contains("resource = \"nodes\""), "{err:?}");
        // A rule's selectors are judged on the Node once it is read.
        let by_label = rules(
            r#"kube = [{ resource = "nodes", verbs = ["patch"], label-selector = "pool=a", fields = ["spec.unschedulable"] }]"#,
        );
        assert_eq!(check_cordon(&by_label, "p", "node-a", true), Ok(()));
    }

    #[test]
    fn an_eviction_needs_create_on_pods_eviction_in_its_namespace() {
        let granted = rules(
            r#"kube = [{ resource = "pods/eviction", verbs = ["create"], namespaces = ["default"] }]"#,
        );
        assert!(check_evict(&granted, "p", "n", "default", "web-1").is_ok());
        let err = check_evict(&granted, "p", "n", "kube-system", "dns").unwrap_err();
        assert!(
            err.message().contains(
                "resource = \"pods/eviction\", verbs = [\"create\"], namespaces = [\"kube-system\"]"
            ),
            "{err:?}"
        );
        // Deleting pods is another grant: it does not allow evicting them.
        let delete = rules(r#"kube = [{ resource = "pods", verbs = ["delete", "create"] }]"#);
        assert!(check_evict(&delete, "p", "n", "default", "web-1").is_err());
        // Names become URL parts: checked before the grant.
        for (ns, name) in [
            ("default", "web/status"),
            ("default/pods/x", "web"),
            ("default", ".."),
        ] {
            assert_eq!(
                check_evict(&granted, "p", "n", ns, name)
                    .unwrap_err()
                    .kind(),
                "invalid"
            );
        }
    }

    #[test]
    fn a_drain_leaves_daemonset_and_mirror_pods_and_waits_for_leaving_ones() {
        let pod = |meta: Value| json!({"metadata": meta});
        assert_eq!(
            disposition(&pod(json!({"name": "web"}))),
            Disposition::Evict
        );
        assert_eq!(
            disposition(&pod(json!({"name": "w", "ownerReferences": [
                {"kind": "ReplicaSet", "controller": true}]}))),
            Disposition::Evict
        );
        assert!(matches!(
            disposition(&pod(json!({"name": "c", "ownerReferences": [
                {"kind": "DaemonSet", "controller": true}]}))),
            Disposition::Skip(_)
        ));
        // Owned by a DaemonSet that is not its controller: evicted.
        assert_eq!(
            disposition(&pod(json!({"name": "c", "ownerReferences": [
                {"kind": "DaemonSet", "controller": false}]}))),
            Disposition::Evict
        );
        assert!(matches!(
            disposition(&pod(json!({"name": "m", "annotations": {
                "kubernetes.io/config.mirror": "abc"}}))),
            Disposition::Skip(_)
        ));
        assert_eq!(
            disposition(&pod(
                json!({"name": "t", "deletionTimestamp": "2026-01-01T00:00:00Z"})
            )),
            Disposition::Leaving
        );
    }

    #[test]
    fn a_refusal_names_its_budget_only_from_the_servers_cause() {
        let status = json!({"code": 429, "details": {"causes": [{"reason": "DisruptionBudget",
            "message": "The disruption budget web-pdb needs 2 healthy pods and has 2 currently"}]}});
        assert_eq!(
            blocking_budget("default", &status).as_deref(),
            Some("default/web-pdb")
        );
        assert_eq!(blocking_budget("default", &json!({"code": 429})), None);
        // A name that is no object name is not repeated.
        let odd = json!({"details": {"causes": [{"reason": "DisruptionBudget",
            "message": "The disruption budget ../../x\u{1b}[2J needs 1"}]}});
        assert_eq!(blocking_budget("default", &odd), None);
        let message = blocked_message(
            "default/web-1",
            Some("default/web-pdb"),
            "Cannot evict\u{1b}[2J",
        );
        assert!(
            message.starts_with(
                "[pdb:default/web-pdb] blocked by PodDisruptionBudget default/web-pdb:"
            ),
            "{message}"
        );
        assert_eq!(
            Reason::of(&message),
            Some(Reason::Pdb("default/web-pdb".into()))
        );
        assert!(!message.contains('\u{1b}'), "{message}");
        let unnamed = blocked_message("default/web-1", None, "x");
        assert!(
            unnamed.starts_with("[pdb:default/*] blocked by a PodDisruptionBudget in default"),
            "{unnamed}"
        );
        assert_eq!(
            blocked_reason(&message),
            Some("[pdb:default/web-pdb] blocked by PodDisruptionBudget default/web-pdb")
        );
        assert_eq!(blocked_reason("the API server did not answer"), None);
        assert_eq!(blocked_reason("[budget] budget \"x\": spent"), None);
    }

    #[test]
    fn a_node_patch_that_writes_unschedulable_or_its_parents_is_a_cordon() {
        for (shape, body) in [
            (PatchShape::Merge, json!({"spec": {"unschedulable": true}})),
            (PatchShape::Merge, json!({"spec": null})),
            (
                PatchShape::Json,
                json!([{"op": "replace", "path": "/spec", "value": {}}]),
            ),
            (
                PatchShape::Json,
                json!([{"op": "add", "path": "/spec/unschedulable", "value": true}]),
            ),
            (PatchShape::Apply, json!({"spec": {"unschedulable": true}})),
        ] {
            assert!(patch_cordons(shape, &body), "{body}");
        }
        for (shape, body) in [
            (
                PatchShape::Merge,
                json!({"metadata": {"labels": {"a": "b"}}}),
            ),
            (PatchShape::Merge, json!({"spec": {"taints": []}})),
            (
                PatchShape::Json,
                json!([{"op": "test", "path": "/spec/unschedulable", "value": true}]),
            ),
        ] {
            assert!(!patch_cordons(shape, &body), "{body}");
        }
    }

    #[test]
    fn the_cordon_patch_sets_or_removes_the_one_field() {
        assert_eq!(cordon_patch(true), json!({"spec": {"unschedulable": true}}));
        assert_eq!(
            cordon_patch(false),
            json!({"spec": {"unschedulable": null}})
        );
        assert!(cordoned(&json!({"spec": {"unschedulable": true}})));
        assert!(!cordoned(&json!({"spec": {}})));
    }
}
