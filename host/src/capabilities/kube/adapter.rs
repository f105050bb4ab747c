//! The `kube` adapter of one reconcile: every call is checked against the
//! plugin's rules (group, resource, verb, namespace, name, `$NODE`), inputs
//! are bounded, lists are cut to the names granted, every mutation passes the
//! gate.

use super::backend::{EventNote, KubeBackend, ListQuery, PatchBody, PatchKind, ResourceInfo};
use super::fake::FakeKube;
use super::grants::{Access, KubeRule, Verb, allow, listable_names};
use super::real::RealKube;
use crate::capabilities::call::Call;
use crate::capabilities::capability::{BackendEnv, Capability};
use crate::capabilities::error::CapError;
use crate::capabilities::gate::{Admission, Intent, Permit};
use crate::text::inert;
use serde::Deserialize;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

/// `[host.kube]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubeSettings {
    /// A kubeconfig file; else in-cluster, else `KUBECONFIG` (or ~/.kube/config).
    pub kubeconfig: Option<PathBuf>,
}

/// The largest object or patch a plugin may send (etcd's own limit is 1.5 MiB).
const MAX_BODY: usize = 1024 * 1024;
/// Event reasons and messages, as the API server bounds them.
const MAX_REASON: usize = 128;
const MAX_NOTE: usize = 1024;

/// One object as the plugin names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectKey {
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
}

/// A list as the plugin receives it: each object as JSON text.
pub struct ListedText {
    pub items: Vec<String>,
    pub continue_token: Option<String>,
    pub resource_version: String,
}

pub struct PluginKube {
    backend: Arc<dyn KubeBackend>,
    rules: Vec<KubeRule>,
    pub(super) call: Arc<Call>,
}

impl Capability for PluginKube {
    const NAME: &'static str = "kube";
    const MUTATIONS: &'static [&'static str] = &["create", "patch", "delete", "emit-event"];
    type Grant = Vec<KubeRule>;
    type Settings = KubeSettings;
    type Backend = dyn KubeBackend;
    type Fake = FakeKube;

    fn describe_grant(rules: &Vec<KubeRule>) -> Vec<String> {
        rules
            .iter()
            .map(|r| {
                let verbs: Vec<&str> = r.verbs.iter().map(|v| v.name()).collect();
                let group = if r.group.is_empty() { String::new() } else { format!(".{}", r.group) };
                let namespaces = r.namespaces.as_ref().map(|n| format!(" in {}", n.join(", "))).unwrap_or_default();
                let names = r.names.as_ref().map(|n| format!(" named {}", n.join(", "))).unwrap_or_default();
                format!("{}{group}{namespaces}{names}: {}", r.resource, verbs.join(", "))
            })
            .collect()
    }

    fn real(settings: &KubeSettings, env: &BackendEnv) -> anyhow::Result<Arc<dyn KubeBackend>> {
        Ok(Arc::new(RealKube::new(settings.kubeconfig.clone(), env.node_name)))
    }

    fn fake() -> (Arc<dyn KubeBackend>, Arc<FakeKube>) {
        let fake = Arc::new(FakeKube::default());
        (fake.clone(), fake)
    }

    fn for_call(backend: &Arc<dyn KubeBackend>, rules: &Vec<KubeRule>, call: &Arc<Call>) -> Self {
        PluginKube {
            backend: backend.clone(),
            rules: rules.clone(),
            call: call.clone(),
        }
    }

    fn add_to_linker<T: Send + 'static>(
        linker: &mut wasmtime::component::Linker<T>,
        get: fn(&mut T) -> &mut Self,
    ) -> wasmtime::Result<()> {
        super::wit::add_to_linker(linker, get)
    }
}

fn bounded(what: &str, text: &str, max: usize) -> Result<(), CapError> {
    if text.len() > max {
        return Err(CapError::Invalid(format!("kube {what}: {} bytes, at most {max}", text.len())));
    }
    Ok(())
}

fn parse(what: &str, text: &str) -> Result<Value, CapError> {
    bounded(what, text, MAX_BODY)?;
    serde_json::from_str(text).map_err(|e| CapError::Invalid(format!("kube {what}: not JSON: {e}")))
}

fn shown(value: &Value) -> Result<String, CapError> {
    serde_json::to_string(value).map_err(|e| CapError::Other(e.to_string()))
}

impl PluginKube {
    /// The kind resolved, with the namespace it takes (none for cluster-scoped kinds).
    async fn resolve(&self, api_version: &str, kind: &str, namespace: Option<&str>) -> Result<(ResourceInfo, Option<String>), CapError> {
        bounded("api-version", api_version, 253)?;
        bounded("kind", kind, 253)?;
        let info = self.backend.resolve(api_version, kind).await?;
        let namespace = match (info.namespaced, namespace) {
            (true, ns) => ns.map(str::to_string),
            (false, None) => None,
            (false, Some(ns)) => {
                return Err(CapError::Invalid(format!(
                    "{kind} is cluster-scoped: call without a namespace (got {:?})",
                    inert(ns)
                )));
            }
        };
        Ok((info, namespace))
    }

    fn allow(&self, info: &ResourceInfo, verb: Verb, namespace: Option<&str>, name: Option<&str>) -> Result<(), CapError> {
        let access = Access {
            group: &info.group,
            resource: &info.plural,
            verb,
            namespace,
            name,
        };
        allow(&self.rules, &self.call.plugin, self.backend.node_name(), &access)
    }

    fn named(&self, info: &ResourceInfo, key: &ObjectKey, verb: Verb) -> Result<(), CapError> {
        bounded("name", &key.name, 253)?;
        if info.namespaced && key.namespace.is_none() {
            return Err(CapError::Invalid(format!("{} is namespaced: name its namespace", info.kind)));
        }
        self.allow(info, verb, key.namespace.as_deref(), Some(&key.name))
    }

    async fn admit(&self, operation: &'static str, target: String, detail: String) -> Result<Option<Permit>, CapError> {
        let intent = Intent {
            capability: "kube",
            operation,
            target,
            detail,
            diff: None,
        };
        Ok(match self.call.gate.admit(intent).await? {
            Admission::Planned => None,
            Admission::Go(permit) => Some(permit),
        })
    }

    fn target(info: &ResourceInfo, namespace: Option<&str>, name: &str) -> String {
        match namespace {
            Some(ns) => format!("{}/{ns}/{name}", info.plural),
            None => format!("{}/{name}", info.plural),
        }
    }

    pub async fn get(&self, key: &ObjectKey) -> Result<String, CapError> {
        let (info, namespace) = self.resolve(&key.api_version, &key.kind, key.namespace.as_deref()).await?;
        let key = ObjectKey { namespace, ..key.clone() };
        self.named(&info, &key, Verb::Get)?;
        let object = shown(&self.backend.get(&info, key.namespace.as_deref(), &key.name).await?)?;
        self.call.spend_read("kube get", object.len() as u64)?;
        Ok(object)
    }

    /// The objects as JSON text, each serialized once (for the read
    /// allowance and for the plugin).
    pub async fn list(&self, api_version: &str, kind: &str, namespace: Option<&str>, query: &ListQuery) -> Result<ListedText, CapError> {
        for selector in [&query.label_selector, &query.field_selector, &query.continue_token].into_iter().flatten() {
            bounded("selector", selector, 4096)?;
        }
        let (info, namespace) = self.resolve(api_version, kind, namespace).await?;
        self.allow(&info, Verb::List, namespace.as_deref(), None)?;
        let access = Access {
            group: &info.group,
            resource: &info.plural,
            verb: Verb::List,
            namespace: namespace.as_deref(),
            name: None,
        };
        let names = listable_names(&self.rules, self.backend.node_name(), &access);
        // A plugin allowed one object (its own Node) reads only that object:
        // at fleet scale, a cache of every Node on every node is what hurts.
        let only = match (&names, &query.field_selector) {
            (Some(names), None) if names.len() == 1 => Some(ListQuery {
                field_selector: Some(format!("metadata.name={}", names[0])),
                ..query.clone()
            }),
            _ => None,
        };
        let mut list = self.backend.list(&info, namespace.as_deref(), only.as_ref().unwrap_or(query)).await?;
        if let Some(names) = names {
            list.items.retain(|o| o["metadata"]["name"].as_str().is_some_and(|n| names.iter().any(|a| a == n)));
        }
        let items: Vec<String> = list.items.iter().map(Value::to_string).collect();
        self.call.spend_read("kube list", items.iter().map(String::len).sum::<usize>() as u64)?;
        Ok(ListedText {
            items,
            continue_token: list.continue_token,
            resource_version: list.resource_version,
        })
    }

    pub async fn create(&self, api_version: &str, kind: &str, namespace: Option<&str>, object: &str) -> Result<String, CapError> {
        let object = parse("create", object)?;
        let (info, namespace) = self.resolve(api_version, kind, namespace).await?;
        let name = object["metadata"]["name"].as_str().unwrap_or_default().to_string();
        if name.is_empty() {
            return Err(CapError::Invalid("kube create: the object needs metadata.name".into()));
        }
        let key = ObjectKey {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: namespace.clone(),
            name: name.clone(),
        };
        self.named(&info, &key, Verb::Create)?;
        let target = Self::target(&info, namespace.as_deref(), &name);
        match self.admit("create", target, String::new()).await? {
            None => shown(&object),
            Some(permit) => shown(&self.backend.create(permit, &info, namespace.as_deref(), object).await?),
        }
    }

    pub async fn patch(&self, key: &ObjectKey, kind: PatchKind, patch: &str) -> Result<String, CapError> {
        let patch = parse("patch", patch)?;
        let (info, namespace) = self.resolve(&key.api_version, &key.kind, key.namespace.as_deref()).await?;
        let key = ObjectKey { namespace, ..key.clone() };
        self.named(&info, &key, Verb::Patch)?;
        let target = Self::target(&info, key.namespace.as_deref(), &key.name);
        let detail = format!("{} patch, {} bytes", kind.name(), patch.to_string().len());
        match self.admit("patch", target, detail).await? {
            None => self.get(&key).await,
            Some(permit) => {
                let manager = format!("tend-{}", self.call.plugin);
                let patched = self
                    .backend
                    .patch(permit, &info, key.namespace.as_deref(), &key.name, PatchBody { kind, body: patch, manager })
                    .await?;
                shown(&patched)
            }
        }
    }

    pub async fn delete(&self, key: &ObjectKey) -> Result<(), CapError> {
        let (info, namespace) = self.resolve(&key.api_version, &key.kind, key.namespace.as_deref()).await?;
        let key = ObjectKey { namespace, ..key.clone() };
        self.named(&info, &key, Verb::Delete)?;
        let target = Self::target(&info, key.namespace.as_deref(), &key.name);
        match self.admit("delete", target, String::new()).await? {
            None => Ok(()),
            Some(permit) => self.backend.delete(permit, &info, key.namespace.as_deref(), &key.name).await,
        }
    }

    /// An Event about an object the plugin may read.
    pub async fn emit_event(&self, key: &ObjectKey, warning: bool, reason: &str, message: &str) -> Result<(), CapError> {
        bounded("event reason", reason, MAX_REASON)?;
        bounded("event message", message, MAX_NOTE)?;
        if reason.is_empty() || !reason.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(CapError::Invalid(format!(
                "kube event reason {:?}: expected a CamelCase word such as \"LabelsApplied\"",
                inert(reason)
            )));
        }
        let (info, namespace) = self.resolve(&key.api_version, &key.kind, key.namespace.as_deref()).await?;
        let key = ObjectKey { namespace, ..key.clone() };
        self.named(&info, &key, Verb::Get)?;
        let object = self.backend.get(&info, key.namespace.as_deref(), &key.name).await?;
        let note = EventNote {
            warning,
            reason: reason.to_string(),
            message: inert(message).into_owned(),
            reporter: format!("tend-{}", self.call.plugin),
        };
        let target = Self::target(&info, key.namespace.as_deref(), &key.name);
        match self.admit("emit-event", target, format!("{reason}: {}", note.message)).await? {
            None => Ok(()),
            Some(permit) => self.backend.emit_event(permit, &info, &object, &note).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::testing::call;
    use serde_json::json;

    fn kube(rules: &str, dry_run: bool) -> (PluginKube, Arc<FakeKube>) {
        let (backend, fake) = PluginKube::fake();
        #[derive(Deserialize)]
        struct G {
            kube: Vec<KubeRule>,
        }
        let grant: G = toml::from_str(rules).unwrap();
        fake.put("nodes", json!({"metadata": {"name": "node-1", "uid": "u1"}}));
        fake.put("nodes", json!({"metadata": {"name": "node-2", "uid": "u2"}}));
        (PluginKube::for_call(&backend, &grant.kube, &call("labeler", dry_run)), fake)
    }

    fn node(name: &str) -> ObjectKey {
        ObjectKey {
            api_version: "v1".into(),
            kind: "Node".into(),
            namespace: None,
            name: name.into(),
        }
    }

    const OWN_NODE: &str = "kube = [{ resource = \"nodes\", verbs = [\"get\", \"list\", \"patch\"], names = [\"$NODE\"] }]";

    #[tokio::test]
    async fn only_my_own_node() {
        let (kube, fake) = kube(OWN_NODE, false);
        kube.patch(&node("node-1"), PatchKind::Merge, r#"{"metadata": {"labels": {"a": "b"}}}"#).await.unwrap();
        assert_eq!(fake.object("nodes", None, "node-1").unwrap()["metadata"]["labels"]["a"], "b");
        let err = kube.patch(&node("node-2"), PatchKind::Merge, "{}").await.unwrap_err();
        assert!(err.to_string().contains("add { resource = \"nodes\", verbs = [\"patch\"], names = [\"node-2\"] }"), "{err}");
        let listed = kube.list("v1", "Node", None, &ListQuery::default()).await.unwrap();
        assert_eq!(listed.items.len(), 1, "the list is cut to node-1");
        assert_eq!(fake.actions(), ["patch nodes/node-1 merge"]);
        assert_eq!(kube.call.gate.mutations()[0].describe(), "did kube.patch nodes/node-1 (merge patch, 33 bytes)");
    }

    #[tokio::test]
    async fn scopes_bounds_and_dry_runs() {
        let (kube, fake) = kube(OWN_NODE, true);
        let err = kube.get(&ObjectKey { namespace: Some("x".into()), ..node("node-1") }).await.unwrap_err();
        assert!(err.to_string().contains("cluster-scoped"), "{err}");
        let err = kube.patch(&node("node-1"), PatchKind::Merge, &"x".repeat(MAX_BODY + 1)).await.unwrap_err();
        assert_eq!(err.kind(), "invalid");
        kube.patch(&node("node-1"), PatchKind::Merge, r#"{"metadata": {"labels": {"a": "b"}}}"#).await.unwrap();
        assert!(fake.actions().is_empty(), "a dry run patches nothing");
        assert!(kube.call.gate.mutations()[0].dry_run);
        let err = kube.get(&ObjectKey { kind: "Widget".into(), ..node("w") }).await.unwrap_err();
        assert_eq!(err.kind(), "not-found");
    }

    #[tokio::test]
    async fn events_need_a_readable_object_and_a_plain_reason() {
        let (kube, fake) = kube(OWN_NODE, false);
        kube.emit_event(&node("node-1"), false, "LabelsApplied", "set a=b\n").await.unwrap();
        assert_eq!(fake.actions(), ["event nodes/node-1 LabelsApplied: set a=b\\n"]);
        assert_eq!(kube.emit_event(&node("node-2"), false, "X", "y").await.unwrap_err().kind(), "denied");
        assert_eq!(kube.emit_event(&node("node-1"), false, "bad reason", "y").await.unwrap_err().kind(), "invalid");
    }
}
