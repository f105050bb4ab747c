//! What a plugin's Kubernetes grant allows: rules like RBAC's, pure, so every
//! decision is tested without an API server.
//!
//! `kube = [{ resource = "nodes", verbs = ["get", "list", "patch"], names =
//! ["$NODE"] }]`: a call needs one rule covering its API group, resource,
//! verb, namespace and name. `namespaces` absent means every namespace (and
//! cluster-scoped resources); `names` absent means every name; `$NODE` in
//! `names` is the host's node name. A list is allowed by a rule with the
//! `list` verb and its results are cut to the names the rules allow.

use crate::Refusal;
use serde::{Deserialize, Deserializer, de::Error as _};

/// A Kubernetes API verb, as RBAC names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Patch,
    Delete,
}

impl Verb {
    pub fn name(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }
}

/// The placeholder for the host's own node name in `names`.
pub const NODE: &str = "$NODE";

/// One rule of `[plugins.<name>.grants] kube`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct KubeRule {
    /// The API group: "" (the default) for the core group, "apps", "coordination.k8s.io".
    #[serde(default)]
    pub group: String,
    /// The resource, plural and lower case as RBAC writes it: "nodes", "pods".
    #[serde(deserialize_with = "resource_name")]
    pub resource: String,
    pub verbs: Vec<Verb>,
    /// Absent: every namespace, and cluster-scoped objects.
    #[serde(default)]
    pub namespaces: Option<Vec<String>>,
    /// Absent: every name. `$NODE` is the host's node name.
    #[serde(default)]
    pub names: Option<Vec<String>>,
    /// Narrows the `watch` trigger (and its shared cache) to matching objects.
    #[serde(default)]
    pub label_selector: Option<String>,
    /// Narrows the `watch` trigger likewise; `$NODE` is the host's node name,
    /// so `"spec.nodeName=$NODE"` watches the Pods of this node only.
    #[serde(default)]
    pub field_selector: Option<String>,
}

fn resource_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let text = String::deserialize(d)?;
    let ok = !text.is_empty()
        && text.len() <= 63
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '/');
    if !ok {
        return Err(D::Error::custom(format!(
            "invalid resource {text:?}: expected a plural lower-case resource as RBAC writes it, for example \"nodes\" or \"pods\""
        )));
    }
    Ok(text)
}

/// One call as the grant sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access<'a> {
    pub group: &'a str,
    pub resource: &'a str,
    pub verb: Verb,
    /// None for cluster-scoped objects, and for lists across all namespaces.
    pub namespace: Option<&'a str>,
    /// None for lists and creates without a name yet.
    pub name: Option<&'a str>,
}

impl KubeRule {
    fn names_for(&self, node: &str) -> Option<Vec<String>> {
        self.names.as_ref().map(|names| {
            names
                .iter()
                .map(|n| {
                    if n == NODE {
                        node.to_string()
                    } else {
                        n.clone()
                    }
                })
                .collect()
        })
    }

    fn covers(&self, node: &str, access: &Access) -> bool {
        let namespace_ok = match (&self.namespaces, access.namespace) {
            (None, _) => true,
            (Some(allowed), Some(ns)) => allowed.iter().any(|a| a == ns),
            // A list across all namespaces needs a rule for all of them.
            (Some(_), None) => false,
        };
        let name_ok = match (self.names_for(node), access.name) {
            (None, _) => true,
            (Some(allowed), Some(name)) => allowed.iter().any(|a| a == name),
            // Lists are cut to the allowed names afterwards.
            (Some(_), None) => access.verb == Verb::List || access.verb == Verb::Watch,
        };
        self.group == access.group
            && self.resource == access.resource
            && self.verbs.contains(&access.verb)
            && namespace_ok
            && name_ok
    }
}

fn describe(access: &Access) -> String {
    let resource = if access.group.is_empty() {
        access.resource.to_string()
    } else {
        format!("{}.{}", access.resource, access.group)
    };
    let mut text = format!("{} {resource}", access.verb.name());
    if let Some(ns) = access.namespace {
        text += &format!(" in namespace {ns}");
    }
    if let Some(name) = access.name {
        text += &format!(" named {}", crate::shown(name));
    }
    text
}

/// May `plugin`, on node `node`, make `access`?
pub fn check(rules: &[KubeRule], plugin: &str, node: &str, access: &Access) -> Result<(), Refusal> {
    if rules.iter().any(|r| r.covers(node, access)) {
        return Ok(());
    }
    let group = if access.group.is_empty() {
        String::new()
    } else {
        format!("group = \"{}\", ", access.group)
    };
    let namespaces = access
        .namespace
        .map(|ns| format!(", namespaces = [\"{ns}\"]"))
        .unwrap_or_default();
    let names = access
        .name
        .map(|n| format!(", names = [\"{}\"]", crate::shown(n)))
        .unwrap_or_default();
    Err(Refusal::Denied(format!(
        "no kube grant allows {}: add {{ {group}resource = \"{}\", verbs = [\"{}\"]{namespaces}{names} }} to [plugins.{plugin}.grants] kube",
        describe(access),
        access.resource,
        access.verb.name()
    )))
}

/// The names a list may return when every rule that allows it names its
/// objects (None: any name).
pub fn listable_names(rules: &[KubeRule], node: &str, access: &Access) -> Option<Vec<String>> {
    let mut names = Vec::new();
    for rule in rules.iter().filter(|r| r.covers(node, access)) {
        names.extend(rule.names_for(node)?);
    }
    Some(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(toml_like_json: &str) -> Vec<KubeRule> {
        serde_json::from_str(toml_like_json).unwrap()
    }

    fn access<'a>(
        resource: &'a str,
        verb: Verb,
        namespace: Option<&'a str>,
        name: Option<&'a str>,
    ) -> Access<'a> {
        Access {
            group: "",
            resource,
            verb,
            namespace,
            name,
        }
    }

    #[test]
    fn my_own_node_only() {
        let r = rules(
            r#"[{"resource": "nodes", "verbs": ["get", "list", "patch"], "names": ["$NODE"]}]"#,
        );
        assert!(
            check(
                &r,
                "p",
                "node-1",
                &access("nodes", Verb::Patch, None, Some("node-1"))
            )
            .is_ok()
        );
        let err = check(
            &r,
            "p",
            "node-1",
            &access("nodes", Verb::Patch, None, Some("node-2")),
        )
        .unwrap_err();
        assert_eq!(
            err.message(),
            "no kube grant allows patch nodes named node-2: add { resource = \"nodes\", verbs = [\"patch\"], names = [\"node-2\"] } to [plugins.p.grants] kube"
        );
        assert!(
            check(
                &r,
                "p",
                "node-1",
                &access("nodes", Verb::Delete, None, Some("node-1"))
            )
            .is_err()
        );
        assert!(check(&r, "p", "node-1", &access("nodes", Verb::List, None, None)).is_ok());
        assert_eq!(
            listable_names(&r, "node-1", &access("nodes", Verb::List, None, None)),
            Some(vec!["node-1".into()])
        );
    }

    #[test]
    fn namespaces_groups_and_resources_must_all_match() {
        let r = rules(
            r#"[{"group": "coordination.k8s.io", "resource": "leases", "verbs": ["get"], "namespaces": ["kube-system"]}]"#,
        );
        let lease = |ns| Access {
            group: "coordination.k8s.io",
            resource: "leases",
            verb: Verb::Get,
            namespace: ns,
            name: Some("x"),
        };
        assert!(check(&r, "p", "n", &lease(Some("kube-system"))).is_ok());
        assert!(check(&r, "p", "n", &lease(Some("default"))).is_err());
        assert!(check(&r, "p", "n", &lease(None)).is_err());
        let core = Access {
            group: "",
            ..lease(Some("kube-system"))
        };
        assert!(
            check(&r, "p", "n", &core).is_err(),
            "the core group is not coordination.k8s.io"
        );
        assert!(
            check(&[], "p", "n", &lease(Some("kube-system"))).is_err(),
            "deny by default"
        );
        let list = rules(r#"[{"resource": "pods", "verbs": ["list"], "namespaces": ["a"]}]"#);
        assert!(
            check(&list, "p", "n", &access("pods", Verb::List, None, None)).is_err(),
            "all namespaces need a rule for all"
        );
        assert_eq!(
            listable_names(&list, "n", &access("pods", Verb::List, Some("a"), None)),
            None
        );
    }

    #[test]
    fn rules_parse_strictly() {
        assert!(
            serde_json::from_str::<Vec<KubeRule>>(r#"[{"resource": "Nodes", "verbs": ["get"]}]"#)
                .is_err()
        );
        assert!(
            serde_json::from_str::<Vec<KubeRule>>(
                r#"[{"resource": "nodes", "verbs": ["escalate"]}]"#
            )
            .is_err()
        );
        assert!(
            serde_json::from_str::<Vec<KubeRule>>(
                r#"[{"resource": "nodes", "verbs": ["get"], "nmes": []}]"#
            )
            .is_err()
        );
    }
}
