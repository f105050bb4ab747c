//! Kubernetes watch triggers: a plugin with a kube rule carrying the `watch`
//! verb is reconciled when a covered object is added, changed or deleted.
//! Plugins watching the same (resource, namespace, label selector) share one
//! subscription to the shared watch cache, so ten plugins watching Nodes cost
//! the API server one watch.

use super::backend::{Change, KubeBackend};
use super::grants::{KubeRule, Verb};
use crate::capabilities::watch::{TriggerSink, Watch};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tend_rules::kube::{Access, NODE, check};

pub struct KubeSource {
    backend: Arc<dyn KubeBackend>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl KubeSource {
    pub fn new(backend: Arc<dyn KubeBackend>) -> Self {
        KubeSource {
            backend,
            tasks: Vec::new(),
        }
    }
}

impl Drop for KubeSource {
    fn drop(&mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
    }
}

/// The trigger kind: "kube", with "<resource>/<namespace>/<name>" as its
/// subject.
pub const KUBE_TRIGGER: &str = "kube";

/// One shared subscription: group, resource, namespace, label selector,
/// field selector.
type WatchKey = (
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// Every watch `watchers` (plugins with their rules) ask for on `node`,
/// with who asked and the rules of theirs that asked for it: only those
/// judge a change it delivers (another rule's names would admit an object
/// this watch's selectors never applied to).
fn watched(
    watchers: &[(String, Vec<KubeRule>)],
    node: &str,
) -> BTreeMap<WatchKey, Vec<(String, Vec<KubeRule>)>> {
    let mut watches: BTreeMap<WatchKey, Vec<(String, Vec<KubeRule>)>> = BTreeMap::new();
    for (plugin, rules) in watchers {
        for rule in rules.iter().filter(|r| r.verbs.contains(&Verb::Watch)) {
            let namespaces: Vec<Option<String>> = match &rule.namespaces {
                Some(list) => list.iter().cloned().map(Some).collect(),
                None => vec![None],
            };
            // A rule for one name (its own Node) watches only that object;
            // `$NODE` in a field selector is this node.
            let by_name = match rule.names.as_deref() {
                Some([name]) => Some(format!(
                    "metadata.name={}",
                    if name == NODE { node } else { name }
                )),
                _ => None,
            };
            let by_field = rule.field_selector.as_ref().map(|f| f.replace(NODE, node));
            let fields = match (by_field, by_name) {
                (Some(a), Some(b)) => Some(format!("{a},{b}")),
                (a, b) => a.or(b),
            };
            for namespace in namespaces {
                let key = (
                    rule.group.clone(),
                    rule.resource.clone(),
                    namespace,
                    rule.label_selector.clone(),
                    fields.clone(),
                );
                let watchers = watches.entry(key).or_default();
                match watchers.iter_mut().find(|(name, _)| name == plugin) {
                    Some((_, asked)) => asked.push(rule.clone()),
                    None => watchers.push((plugin.clone(), vec![rule.clone()])),
                }
            }
        }
    }
    watches
}

/// "nodes/node-1", "pods/default/web-0".
fn subject(change: &Change) -> String {
    match &change.namespace {
        Some(ns) => format!("{}/{ns}/{}", change.resource, change.name),
        None => format!("{}/{}", change.resource, change.name),
    }
}

/// Whether `rules` (those behind the watch that saw it: its selectors held
/// on the object) let the plugin watch the changed object (their names,
/// namespaces, `$NODE`).
fn covers(rules: &[KubeRule], node: &str, change: &Change) -> bool {
    let watch = Access {
        group: &change.group,
        resource: &change.resource,
        verb: Verb::Watch,
        namespace: change.namespace.as_deref(),
        name: Some(&change.name),
    };
    check(rules, "", node, &watch).is_ok()
}

impl Watch<Vec<KubeRule>> for KubeSource {
    fn update(&mut self, watchers: Vec<(String, Vec<KubeRule>)>, sink: Arc<dyn TriggerSink>) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
        let watches = watched(&watchers, self.backend.node_name());
        for ((group, resource, namespace, labels, fields), watchers) in watches {
            let (backend, sink) = (self.backend.clone(), sink.clone());
            self.tasks.push(tokio::spawn(async move {
                let mut backoff = Duration::from_millis(500);
                loop {
                    let subscribed = async {
                        let info = backend.resource(&group, &resource).await?;
                        backend.watch(&info, namespace.as_deref(), labels.as_deref(), fields.as_deref()).await
                    }
                    .await;
                    match subscribed {
                        Ok(mut changes) => {
                            backoff = Duration::from_millis(500);
                            loop {
                                match changes.recv().await {
                                    Ok(mut change) => {
                                        change.group = group.clone();
                                        for (plugin, rules) in &watchers {
                                            if covers(rules, backend.node_name(), &change) {
                                                sink.reconcile(plugin, KUBE_TRIGGER, subject(&change));
                                            }
                                        }
                                    }
                                    Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                                        tracing::warn!(%resource, "kube watch trigger missed {missed} changes");
                                    }
                                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                                }
                            }
                        }
                        Err(e) => tracing::warn!(%resource, "cannot watch {resource}: {}; retrying in {backoff:?}", crate::text::inert(&e.to_string())),
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                }
            }));
        }
    }

    fn waits_on(&self, rules: &Vec<KubeRule>) -> Vec<String> {
        let plugin = [(String::new(), rules.clone())];
        watched(&plugin, self.backend.node_name())
            .into_keys()
            .map(|(group, resource, namespace, labels, fields)| {
                let group = if group.is_empty() {
                    String::new()
                } else {
                    format!(".{group}")
                };
                let namespace = namespace.map(|ns| format!(" in {ns}")).unwrap_or_default();
                let labels: String = [labels, fields]
                    .into_iter()
                    .flatten()
                    .map(|l| format!(" ({l})"))
                    .collect();
                format!("changes of {resource}{group}{namespace}{labels}")
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugins_share_watches_and_single_names_and_node_fields_narrow_them() {
        let rules = |text: &str| -> Vec<KubeRule> {
            #[derive(serde::Deserialize)]
            struct G {
                kube: Vec<KubeRule>,
            }
            toml::from_str::<G>(text).unwrap().kube
        };
        let mut watchers = Vec::new();
        for plugin in ["a", "b"] {
            watchers.push((
                plugin.to_string(),
                rules("kube = [{ resource = \"nodes\", verbs = [\"watch\"] }]"),
            ));
        }
        watchers.push((
            "c".to_string(),
            rules("kube = [{ resource = \"nodes\", verbs = [\"watch\"], names = [\"$NODE\"] },\n  { resource = \"pods\", verbs = [\"watch\"], field-selector = \"spec.nodeName=$NODE\" }]"),
        ));
        let watches = watched(&watchers, "node-1");
        let keys: Vec<(&str, Option<&str>, usize)> = watches
            .iter()
            .map(|((_, resource, _, _, fields), who)| {
                (resource.as_str(), fields.as_deref(), who.len())
            })
            .collect();
        assert_eq!(
            keys,
            [
                ("nodes", None, 2),
                ("nodes", Some("metadata.name=node-1"), 1),
                ("pods", Some("spec.nodeName=node-1"), 1)
            ]
        );
    }

    /// A rule naming two pods watches every pod (no selector can say two
    /// names); a rule with a label selector admits any name. A change the
    /// first watch delivers is judged by the first rule alone: the second
    /// rule's selector never applied to it.
    #[test]
    fn a_change_is_judged_by_the_rules_behind_its_watch_alone() {
        let rules: Vec<KubeRule> = serde_json::from_str(
            r#"[{"resource": "pods", "verbs": ["watch"], "names": ["a", "b"]},
                {"resource": "pods", "verbs": ["watch"], "label-selector": "tend=yes"}]"#,
        )
        .unwrap();
        let watches = watched(&[("p".to_string(), rules)], "node-1");
        let behind = |labels: Option<&str>| {
            let key = watches
                .keys()
                .find(|k| k.3.as_deref() == labels)
                .expect("a watch");
            watches[key][0].1.clone()
        };
        let change = |name: &str| Change {
            resource: "pods".into(),
            group: String::new(),
            namespace: Some("kube-system".into()),
            name: name.into(),
        };
        let every_pod = behind(None);
        assert!(covers(&every_pod, "node-1", &change("a")));
        assert!(
            !covers(&every_pod, "node-1", &change("victim")),
            "a pod outside both rules"
        );
        let labelled = behind(Some("tend=yes"));
        assert!(covers(&labelled, "node-1", &change("victim")));
    }
}
