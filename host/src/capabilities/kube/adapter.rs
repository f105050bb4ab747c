//! The `kube` adapter of one reconcile: the names a call puts into the URL
//! are checked for their shape first, then the call against the plugin's
//! rules (group, resource, verb, namespace, name, `$NODE`, selectors,
//! `fields`) and Tend's own election Lease; inputs are bounded, lists are
//! narrowed by the rule that allows them, every mutation passes the gate.

use super::backend::{EventNote, KubeBackend, ListQuery, PatchBody, PatchKind, ResourceInfo};
use super::fake::FakeKube;
use super::grants::{
    Access, KubeRule, OwnLease, PatchShape, Verb, allow, check_key, check_object, check_own_lease,
    list_scope, needs_object,
};
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

/// `[host.kube]` (defaults and why: `real.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct KubeSettings {
    /// A kubeconfig file; else in-cluster, else `KUBECONFIG` (or ~/.kube/config).
    pub kubeconfig: Option<PathBuf>,
    /// Not a `[host.kube]` key: `[host.leader-election]`'s Lease, filled in
    /// when the config is read, which no plugin may write.
    #[serde(skip)]
    pub own_lease: Option<OwnLease>,
    /// Bytes all watch caches together may hold: beyond, lists read directly.
    pub cache_memory: crate::units::ByteSize,
    /// Watch caches (one API watch each) the host runs at most.
    pub caches: u32,
    /// Requests per second and burst of all plugins' calls together.
    pub qps: u32,
    pub burst: u32,
}

// Bounds on what a plugin sends, shared with the SDK's fake.
use tend_grants::kube::{MAX_BODY, MAX_NOTE, MAX_SELECTOR};

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
                let group = if r.group.is_empty() {
                    String::new()
                } else {
                    format!(".{}", r.group)
                };
                let namespaces = r
                    .namespaces
                    .as_ref()
                    .map(|n| format!(" in {}", n.join(", ")))
                    .unwrap_or_default();
                let names = r
                    .names
                    .as_ref()
                    .map(|n| format!(" named {}", n.join(", ")))
                    .unwrap_or_default();
                format!(
                    "{}{group}{namespaces}{names}: {}",
                    r.resource,
                    verbs.join(", ")
                )
            })
            .collect()
    }

    fn real(settings: &KubeSettings, env: &BackendEnv) -> anyhow::Result<Arc<dyn KubeBackend>> {
        Ok(Arc::new(RealKube::new(settings, env.node_name)))
    }

    fn fake() -> (Arc<dyn KubeBackend>, Arc<FakeKube>) {
        let fake = Arc::new(FakeKube::default());
        (fake.clone(), fake)
    }

    fn for_call(backend: &Arc<dyn KubeBackend>, rules: &Vec<KubeRule>, call: &Arc<Call>) -> Self {
        PluginKube {
            // Charged to this plugin: its request bucket, caches and Events.
            backend: backend.clone().for_plugin(call),
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
    Ok(tend_grants::kube::check_size(what, text, max)?)
}

fn parse(what: &str, text: &str) -> Result<Value, CapError> {
    bounded(what, text, MAX_BODY)?;
    serde_json::from_str(text).map_err(|e| CapError::Invalid(format!("kube {what}: not JSON: {e}")))
}

fn shown(value: &Value) -> Result<String, CapError> {
    serde_json::to_string(value).map_err(|e| CapError::Other(e.to_string()))
}

impl PluginKube {
    /// The kind resolved, with the namespace it takes (none for
    /// cluster-scoped kinds). Every name the call puts into the URL is
    /// checked for its shape first, before any request (discovery included).
    async fn resolve(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> Result<(ResourceInfo, Option<String>), CapError> {
        check_key(api_version, kind, namespace, name)?;
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

    fn access<'a>(
        info: &'a ResourceInfo,
        verb: Verb,
        namespace: Option<&'a str>,
        name: Option<&'a str>,
    ) -> Access<'a> {
        Access {
            group: &info.group,
            resource: &info.plural,
            verb,
            namespace,
            name,
        }
    }

    /// The grant check by name (the object-level one is [`Self::object_allowed`]);
    /// Tend's own election Lease first, whatever the rules say.
    fn named(&self, info: &ResourceInfo, key: &ObjectKey, verb: Verb) -> Result<(), CapError> {
        if info.namespaced && key.namespace.is_none() {
            return Err(CapError::Invalid(format!(
                "{} is namespaced: name its namespace",
                info.kind
            )));
        }
        let access = Self::access(info, verb, key.namespace.as_deref(), Some(&key.name));
        check_own_lease(self.backend.own_lease(), &access)?;
        allow(
            &self.rules,
            &self.call.plugin,
            self.backend.node_name(),
            &access,
        )
    }

    /// The object-level check of a call by name: the rules' selectors on the
    /// object (read first when only rules with selectors allow the call) and,
    /// for a patch, their `fields` on the patch body.
    async fn object_allowed(
        &self,
        info: &ResourceInfo,
        key: &ObjectKey,
        verb: Verb,
        object: Option<&Value>,
        patch: Option<(PatchShape, &Value)>,
    ) -> Result<(), CapError> {
        let access = Self::access(info, verb, key.namespace.as_deref(), Some(&key.name));
        let node = self.backend.node_name();
        let read;
        let object = match object {
            None if needs_object(&self.rules, node, &access) => {
                read = self
                    .backend
                    .get(info, key.namespace.as_deref(), &key.name)
                    .await?;
                Some(&read)
            }
            object => object,
        };
        Ok(check_object(
            &self.rules,
            &self.call.plugin,
            node,
            &access,
            object,
            patch,
        )?)
    }

    async fn admit(
        &self,
        operation: &'static str,
        target: String,
        detail: String,
    ) -> Result<Option<Permit>, CapError> {
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

    /// `key` resolved, with the namespace its kind takes, checked by name for `verb`.
    async fn resolve_key(
        &self,
        key: &ObjectKey,
        verb: Verb,
    ) -> Result<(ResourceInfo, ObjectKey), CapError> {
        let (info, namespace) = self
            .resolve(
                &key.api_version,
                &key.kind,
                key.namespace.as_deref(),
                Some(&key.name),
            )
            .await?;
        let key = ObjectKey {
            namespace,
            ..key.clone()
        };
        self.named(&info, &key, verb)?;
        Ok((info, key))
    }

    pub async fn get(&self, key: &ObjectKey) -> Result<String, CapError> {
        let (info, key) = self.resolve_key(key, Verb::Get).await?;
        let object = self
            .backend
            .get(&info, key.namespace.as_deref(), &key.name)
            .await?;
        self.object_allowed(&info, &key, Verb::Get, Some(&object), None)
            .await?;
        let object = shown(&object)?;
        self.call.spend_read("kube get", object.len() as u64)?;
        Ok(object)
    }

    /// The objects as JSON text, each serialized once (for the read
    /// allowance and for the plugin). The rule allowing the list narrows it:
    /// its selectors (and its one name) are ANDed with the plugin's, and
    /// every result is checked against them again.
    pub async fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        query: &ListQuery,
    ) -> Result<ListedText, CapError> {
        for selector in [
            &query.label_selector,
            &query.field_selector,
            &query.continue_token,
        ]
        .into_iter()
        .flatten()
        {
            bounded("selector", selector, MAX_SELECTOR)?;
        }
        let (info, namespace) = self.resolve(api_version, kind, namespace, None).await?;
        let access = Self::access(&info, Verb::List, namespace.as_deref(), None);
        let scope = list_scope(
            &self.rules,
            &self.call.plugin,
            self.backend.node_name(),
            &access,
            query.label_selector.as_deref(),
            query.field_selector.as_deref(),
        )?;
        let narrowed = ListQuery {
            label_selector: scope.label_selector.clone(),
            field_selector: scope.field_selector.clone(),
            ..query.clone()
        };
        let mut list = self
            .backend
            .list(&info, namespace.as_deref(), &narrowed)
            .await?;
        list.items.retain(|o| scope.admits(o));
        let items: Vec<String> = list.items.iter().map(Value::to_string).collect();
        self.call.spend_read(
            "kube list",
            items.iter().map(String::len).sum::<usize>() as u64,
        )?;
        Ok(ListedText {
            items,
            continue_token: list.continue_token,
            resource_version: list.resource_version,
        })
    }

    pub async fn create(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        object: &str,
    ) -> Result<String, CapError> {
        let mut object = parse("create", object)?;
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if name.is_empty() {
            return Err(CapError::Invalid(
                "kube create: the object needs metadata.name".into(),
            ));
        }
        let (info, namespace) = self
            .resolve(api_version, kind, namespace, Some(&name))
            .await?;
        match (&object["metadata"]["namespace"], &namespace) {
            (Value::Null, _) => {}
            (Value::String(inside), Some(ns)) if inside == ns => {}
            (inside, _) => {
                return Err(CapError::Invalid(format!(
                    "kube create: metadata.namespace {} does not match the namespace of the call ({}); name the same namespace in both, or leave it out of the object",
                    inert(&crate::text::cut(inside.to_string(), 128)),
                    namespace
                        .as_deref()
                        .unwrap_or("none: the kind is cluster-scoped")
                )));
            }
        }
        if let (Some(ns), Some(meta)) = (&namespace, object["metadata"].as_object_mut()) {
            meta.insert("namespace".into(), ns.clone().into());
        }
        let key = ObjectKey {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: namespace.clone(),
            name: name.clone(),
        };
        self.named(&info, &key, Verb::Create)?;
        self.object_allowed(&info, &key, Verb::Create, Some(&object), None)
            .await?;
        let target = Self::target(&info, namespace.as_deref(), &name);
        match self.admit("create", target, String::new()).await? {
            None => shown(&object),
            Some(permit) => shown(
                &self
                    .backend
                    .create(permit, &info, namespace.as_deref(), object)
                    .await?,
            ),
        }
    }

    pub async fn patch(
        &self,
        key: &ObjectKey,
        kind: PatchKind,
        patch: &str,
    ) -> Result<String, CapError> {
        let patch = parse("patch", patch)?;
        let (info, key) = self.resolve_key(key, Verb::Patch).await?;
        let shape = match kind {
            PatchKind::Merge => PatchShape::Merge,
            PatchKind::Json => PatchShape::Json,
            PatchKind::Apply => PatchShape::Apply,
        };
        self.object_allowed(&info, &key, Verb::Patch, None, Some((shape, &patch)))
            .await?;
        let target = Self::target(&info, key.namespace.as_deref(), &key.name);
        let detail = format!("{} patch, {} bytes", kind.name(), patch.to_string().len());
        match self.admit("patch", target, detail).await? {
            None => self.get(&key).await,
            Some(permit) => {
                let manager = format!("tend-{}", self.call.plugin);
                let patched = self
                    .backend
                    .patch(
                        permit,
                        &info,
                        key.namespace.as_deref(),
                        &key.name,
                        PatchBody {
                            kind,
                            body: patch,
                            manager,
                        },
                    )
                    .await?;
                shown(&patched)
            }
        }
    }

    pub async fn delete(&self, key: &ObjectKey) -> Result<(), CapError> {
        let (info, key) = self.resolve_key(key, Verb::Delete).await?;
        self.object_allowed(&info, &key, Verb::Delete, None, None)
            .await?;
        let target = Self::target(&info, key.namespace.as_deref(), &key.name);
        match self.admit("delete", target, String::new()).await? {
            None => Ok(()),
            Some(permit) => {
                self.backend
                    .delete(permit, &info, key.namespace.as_deref(), &key.name)
                    .await
            }
        }
    }

    /// An Event about an object the plugin may read.
    pub async fn emit_event(
        &self,
        key: &ObjectKey,
        warning: bool,
        reason: &str,
        message: &str,
    ) -> Result<(), CapError> {
        tend_grants::kube::check_event(reason, message)?;
        let (info, key) = self.resolve_key(key, Verb::Get).await?;
        let object = self
            .backend
            .get(&info, key.namespace.as_deref(), &key.name)
            .await?;
        self.object_allowed(&info, &key, Verb::Get, Some(&object), None)
            .await?;
        let note = EventNote {
            warning,
            reason: reason.to_string(),
            // Escaping can lengthen the note past what the API server takes.
            message: crate::text::cut(inert(message).into_owned(), MAX_NOTE),
            reporter: format!("tend-{}", self.call.plugin),
        };
        let target = Self::target(&info, key.namespace.as_deref(), &key.name);
        match self
            .admit("emit-event", target, format!("{reason}: {}", note.message))
            .await?
        {
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
        fake.put(
            "nodes",
            json!({"metadata": {"name": "node-1", "uid": "u1"}}),
        );
        fake.put(
            "nodes",
            json!({"metadata": {"name": "node-2", "uid": "u2"}}),
        );
        (
            PluginKube::for_call(&backend, &grant.kube, &call("labeler", dry_run)),
            fake,
        )
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
        kube.patch(
            &node("node-1"),
            PatchKind::Merge,
            r#"{"metadata": {"labels": {"a": "b"}}}"#,
        )
        .await
        .unwrap();
        assert_eq!(
            fake.object("nodes", None, "node-1").unwrap()["metadata"]["labels"]["a"],
            "b"
        );
        let err = kube
            .patch(&node("node-2"), PatchKind::Merge, "{}")
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains(
                "add { resource = \"nodes\", verbs = [\"patch\"], names = [\"node-2\"] }"
            ),
            "{err}"
        );
        let listed = kube
            .list("v1", "Node", None, &ListQuery::default())
            .await
            .unwrap();
        assert_eq!(listed.items.len(), 1, "the list is cut to node-1");
        assert_eq!(fake.actions(), ["patch nodes/node-1 merge"]);
        assert_eq!(
            kube.call.gate.mutations()[0].describe(),
            "did kube.patch nodes/node-1 (merge patch, 33 bytes)"
        );
    }

    #[tokio::test]
    async fn scopes_bounds_and_dry_runs() {
        let (kube, fake) = kube(OWN_NODE, true);
        let err = kube
            .get(&ObjectKey {
                namespace: Some("x".into()),
                ..node("node-1")
            })
            .await
            .unwrap_err();
        assert!(err.to_string().contains("cluster-scoped"), "{err}");
        let err = kube
            .patch(&node("node-1"), PatchKind::Merge, &"x".repeat(MAX_BODY + 1))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), "invalid");
        kube.patch(
            &node("node-1"),
            PatchKind::Merge,
            r#"{"metadata": {"labels": {"a": "b"}}}"#,
        )
        .await
        .unwrap();
        assert!(fake.actions().is_empty(), "a dry run patches nothing");
        assert!(kube.call.gate.mutations()[0].dry_run);
        let err = kube
            .get(&ObjectKey {
                kind: "Widget".into(),
                ..node("w")
            })
            .await
            .unwrap_err();
        assert_eq!(err.kind(), "not-found");
    }

    #[tokio::test]
    async fn events_need_a_readable_object_and_a_plain_reason() {
        let (kube, fake) = kube(OWN_NODE, false);
        kube.emit_event(&node("node-1"), false, "LabelsApplied", "set a=b\n")
            .await
            .unwrap();
        assert_eq!(
            fake.actions(),
            ["event nodes/node-1 LabelsApplied: set a=b\\n"]
        );
        assert_eq!(
            kube.emit_event(&node("node-2"), false, "X", "y")
                .await
                .unwrap_err()
                .kind(),
            "denied"
        );
        assert_eq!(
            kube.emit_event(&node("node-1"), false, "bad reason", "y")
                .await
                .unwrap_err()
                .kind(),
            "invalid"
        );
    }
}
