//! The `kube` adapter of one reconcile: the names a call puts into the URL
//! are checked for their shape first, then the call against the plugin's
//! rules (group, resource, verb, namespace, name, `$NODE`, selectors,
//! `fields`) and Tend's own election Lease; inputs are bounded, lists are
//! narrowed by the rule that allows them, every mutation passes the gate.

use super::backend::{
    EventNote, EventType, KubeBackend, ListParams, ObjectKey, PatchBody, PatchType, ResourceInfo,
    Run,
};
use super::grants::{
    Access, KubeRule, OwnLease, PatchShape, Verb, allow, bind_to_uid, check_fleet_lease,
    check_found, check_key, check_object, check_own_lease, list_scope, needs_object,
};
use crate::capabilities::call::Call;
use crate::capabilities::capability::Capability;
use crate::capabilities::error::CapError;
use crate::capabilities::gate::{Intent, Performed, Permit};
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
    /// Not a `[host.kube]` key: `[host.fleet] namespace`, whose `tend-`
    /// Leases no plugin may write.
    #[serde(skip)]
    pub fleet_namespace: Option<String>,
    /// Bytes all watch caches together may hold: beyond, lists read directly.
    pub cache_memory: crate::units::ByteSize,
    /// Watch caches (one API watch each) the host runs at most.
    pub caches: u32,
    /// Requests per second and burst of all plugins' calls together.
    pub qps: u32,
    pub burst: u32,
}

// Bounds on what a plugin sends, shared with the SDK's fake.
use tend_rules::kube::{MAX_BODY, MAX_NOTE, MAX_SELECTOR};

/// A list as the plugin receives it: each object as JSON text (a cached
/// object's shared with its watch cache). Host-only: the WIT's `object-list`
/// owns its strings, so the one copy into it is made at the WIT boundary,
/// after the read allowance is charged.
pub struct ListedText {
    pub items: Vec<Arc<str>>,
    pub continue_token: Option<String>,
    pub resource_version: String,
}

pub struct PluginKube {
    pub(super) backend: Arc<dyn KubeBackend>,
    pub(super) rules: Vec<KubeRule>,
    pub(super) call: Arc<Call>,
}

fn bounded(what: &str, text: &str, max: usize) -> Result<(), CapError> {
    Ok(tend_rules::kube::check_size(what, text, max)?)
}

fn parse(what: &str, text: &str) -> Result<Value, CapError> {
    bounded(what, text, MAX_BODY)?;
    serde_json::from_str(text).map_err(|e| CapError::Invalid(format!("kube {what}: not JSON: {e}")))
}

fn shown(value: &Value) -> Result<String, CapError> {
    serde_json::to_string(value).map_err(|e| CapError::Other(e.to_string()))
}

/// What a plan shows of a kube mutation: the object before (None: none)
/// and after, as indented JSON without `managedFields`, as a unified diff
/// bounded like a file's.
pub(super) fn object_diff(target: &str, before: Option<&Value>, after: &Value) -> String {
    let text = |object: &Value| {
        let mut object = object.clone();
        if let Some(meta) = object["metadata"].as_object_mut() {
            meta.remove("managedFields");
        }
        serde_json::to_string_pretty(&object).unwrap_or_default() + "\n"
    };
    let before = before.map(text);
    crate::capabilities::gate::diff::unified(
        target,
        before.as_deref().map(str::as_bytes),
        text(after).as_bytes(),
    )
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
        check_fleet_lease(self.backend.fleet_namespace(), &access)?;
        allow(
            &self.rules,
            &self.call.plugin,
            self.backend.node_name(),
            &access,
        )
    }

    /// The object-level check of a call by name: the rules' selectors on the
    /// object (read fresh when only rules with selectors allow the call; one
    /// outside them is answered as an absent one, [`check_found`]) and, for a
    /// patch, their `fields` on the patch body. The UID of the object read,
    /// when one was: the write is bound to it.
    pub(super) async fn object_allowed(
        &self,
        info: &ResourceInfo,
        key: &ObjectKey,
        verb: Verb,
        patch: Option<(PatchShape, &Value)>,
    ) -> Result<Option<String>, CapError> {
        let access = Self::access(info, verb, key.namespace.as_deref(), Some(&key.name));
        let node = self.backend.node_name();
        if needs_object(&self.rules, node, &access) {
            let object = self.read_checked(info, key, verb, patch).await?;
            return Ok(object["metadata"]["uid"].as_str().map(str::to_string));
        }
        check_object(&self.rules, &self.call.plugin, node, &access, None, patch)?;
        Ok(None)
    }

    /// `key`'s object read fresh and checked for `verb` ([`check_found`]):
    /// the API server's not-found only where a rule without selectors allows
    /// the call, else the grant's, worded as for an object outside it.
    pub(super) async fn read_checked(
        &self,
        info: &ResourceInfo,
        key: &ObjectKey,
        verb: Verb,
        patch: Option<(PatchShape, &Value)>,
    ) -> Result<Value, CapError> {
        let read = self
            .backend
            .get(info, key.namespace.as_deref(), &key.name)
            .await;
        let found = match &read {
            Ok(object) => Some(object),
            Err(CapError::NotFound(_)) => None,
            Err(_) => return read,
        };
        let access = Self::access(info, verb, key.namespace.as_deref(), Some(&key.name));
        check_found(
            &self.rules,
            &self.call.plugin,
            self.backend.node_name(),
            &access,
            found,
            patch,
        )?;
        read
    }

    /// One mutation through the gate. In a dry run `planned` is the answer:
    /// the API server's own dry run (`dryRun=All`), with what the plan shows
    /// of the change, asked before the gate records the plan; whatever it
    /// answers (an error included) is the call's answer, as the real call's
    /// would be. Else `perform` runs under the gate's permit.
    pub(super) async fn mutate<T, P, F>(
        &self,
        operation: &'static str,
        target: String,
        detail: String,
        planned: P,
        perform: impl FnOnce(Permit) -> F,
    ) -> Result<T, CapError>
    where
        T: Performed,
        P: Future<Output = (Result<T, CapError>, Option<String>)>,
        F: Future<Output = Result<T, CapError>>,
    {
        let (planned, diff) = if self.call.gate.dry_run() {
            planned.await
        } else {
            // Never answered: the gate performs.
            (
                Err(CapError::Other(format!(
                    "kube {operation} performed, not planned"
                ))),
                None,
            )
        };
        let intent = Intent {
            capability: PluginKube::NAME,
            operation,
            target,
            detail,
            diff,
        };
        self.call.gate.mutate(intent, planned, perform).await
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
        let object = self.read_checked(&info, &key, Verb::Get, None).await?;
        let object = shown(&object)?;
        self.call.spend_read("kube get", object.len() as u64)?;
        Ok(object)
    }

    /// The objects as JSON text, serialized once by the backend (a cached
    /// object when its watch delivered it), for the read allowance and for
    /// the plugin. The rule allowing the list narrows it:
    /// its selectors (and its one name) are ANDed with the plugin's, and
    /// every result is checked against them again.
    pub async fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        query: &ListParams,
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
        let narrowed = ListParams {
            label_selector: scope.label_selector.clone(),
            field_selector: scope.field_selector.clone(),
            ..query.clone()
        };
        let mut list = self
            .backend
            .list(&info, namespace.as_deref(), &narrowed)
            .await?;
        if !scope.admits_everything() {
            list.items.retain(|o| scope.admits(&o.view()));
        }
        self.call.spend_read(
            "kube list",
            list.items.iter().map(|o| o.json.len()).sum::<usize>() as u64,
        )?;
        Ok(ListedText {
            items: list.items.into_iter().map(|o| o.json).collect(),
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
        tend_rules::kube::body_namespace(&mut object, namespace.as_deref())?;
        let key = ObjectKey {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: namespace.clone(),
            name: name.clone(),
        };
        self.named(&info, &key, Verb::Create)?;
        // The body is the plugin's own: one outside the selectors is denied.
        let access = Self::access(&info, Verb::Create, namespace.as_deref(), Some(&name));
        let node = self.backend.node_name();
        check_object(
            &self.rules,
            &self.call.plugin,
            node,
            &access,
            Some(&object),
            None,
        )?;
        let target = Self::target(&info, namespace.as_deref(), &name);
        let ns = namespace.as_deref();
        let planned = async {
            let would = self
                .backend
                .create(Run::DryRun, &info, ns, object.clone())
                .await;
            let diff = would.as_ref().ok().map(|w| object_diff(&target, None, w));
            (would, diff)
        };
        let created = self
            .mutate("create", target.clone(), String::new(), planned, |permit| {
                self.backend
                    .create(Run::Perform(permit), &info, ns, object.clone())
            })
            .await?;
        shown(&created)
    }

    pub async fn patch(
        &self,
        key: &ObjectKey,
        kind: PatchType,
        patch: &str,
    ) -> Result<String, CapError> {
        let patch = parse("patch", patch)?;
        let (info, key) = self.resolve_key(key, Verb::Patch).await?;
        let shape = super::backend::patch_shape(kind);
        let checked = self
            .object_allowed(&info, &key, Verb::Patch, Some((shape, &patch)))
            .await?;
        // Granted or not, a cordon is `cordon`'s (the fleet's ticket).
        if info.group.is_empty()
            && info.plural == "nodes"
            && tend_rules::drain::patch_cordons(shape, &patch)
        {
            return Err(CapError::Invalid(format!(
                "kube patch nodes/{}: it writes spec.unschedulable, which is a cordon: call kube.cordon, which passes the fleet's ticket (operation kube.cordon)",
                inert(&key.name)
            )));
        }
        let target = Self::target(&info, key.namespace.as_deref(), &key.name);
        let detail = format!("{} patch, {} bytes", kind.name(), patch.to_string().len());
        let (ns, name) = (key.namespace.as_deref(), key.name.as_str());
        let mut patch = patch;
        if let Some(uid) = &checked {
            bind_to_uid(shape, &mut patch, uid)?;
        }
        let body = PatchBody {
            kind,
            body: patch,
            manager: format!("tend-{}", self.call.plugin),
        };
        let planned = async {
            // The current object only for the plan's diff: the plugin gets
            // what the real patch answers.
            let current = match self.backend.get(&info, ns, name).await {
                Ok(current) => current,
                Err(e) => return (Err(e), None),
            };
            let would = self
                .backend
                .patch(Run::DryRun, &info, ns, name, body.clone())
                .await;
            let diff = would
                .as_ref()
                .ok()
                .map(|w| object_diff(&target, Some(&current), w));
            (would, diff)
        };
        let patched = self
            .mutate("patch", target.clone(), detail, planned, |permit| {
                self.backend
                    .patch(Run::Perform(permit), &info, ns, name, body.clone())
            })
            .await?;
        shown(&patched)
    }

    pub async fn delete(&self, key: &ObjectKey) -> Result<(), CapError> {
        let (info, key) = self.resolve_key(key, Verb::Delete).await?;
        let checked = self.object_allowed(&info, &key, Verb::Delete, None).await?;
        let target = Self::target(&info, key.namespace.as_deref(), &key.name);
        let (ns, name) = (key.namespace.as_deref(), key.name.as_str());
        let uid = checked.as_deref();
        // The server's dry-run delete answers not-found for a missing object.
        let planned = async {
            (
                self.backend.delete(Run::DryRun, &info, ns, name, uid).await,
                None,
            )
        };
        self.mutate("delete", target, String::new(), planned, |permit| {
            self.backend
                .delete(Run::Perform(permit), &info, ns, name, uid)
        })
        .await
    }

    /// An Event about an object the plugin may read. The object need not
    /// exist (node-reaper reports on instances that never became Nodes),
    /// unless the plugin's rule has selectors: only an object can show it
    /// matches them.
    pub async fn emit_event(
        &self,
        key: &ObjectKey,
        event_type: EventType,
        reason: &str,
        message: &str,
    ) -> Result<(), CapError> {
        tend_rules::kube::check_event(reason, message)?;
        let (info, key) = self.resolve_key(key, Verb::Get).await?;
        let access = Self::access(&info, Verb::Get, key.namespace.as_deref(), Some(&key.name));
        let object = match self.read_checked(&info, &key, Verb::Get, None).await {
            Ok(object) => object,
            // Absent, where a rule without selectors allows it: the Event
            // names the object by its key.
            Err(CapError::NotFound(_))
                if !needs_object(&self.rules, self.backend.node_name(), &access) =>
            {
                serde_json::json!({"metadata": {"name": key.name, "namespace": key.namespace}})
            }
            Err(e) => return Err(e),
        };
        let note = EventNote {
            event_type,
            reason: reason.to_string(),
            // Escaping can lengthen the note past what the API server takes.
            message: crate::text::cut(inert(message).into_owned(), MAX_NOTE),
            reporter: format!("tend-{}", self.call.plugin),
        };
        let target = Self::target(&info, key.namespace.as_deref(), &key.name);
        let detail = format!("{reason}: {}", note.message);
        // Events are not sent in a dry run: the plan says which would be.
        let planned = async { (Ok(()), None) };
        self.mutate("emit-event", target, detail, planned, |permit| {
            self.backend.emit_event(permit, &info, &object, &note)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::kube::FakeKube;
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
            PluginKube::for_call(
                &backend,
                &grant.kube,
                &Default::default(),
                &call("labeler", dry_run),
            ),
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
            PatchType::Merge,
            r#"{"metadata": {"labels": {"a": "b"}}}"#,
        )
        .await
        .unwrap();
        assert_eq!(
            fake.object("nodes", None, "node-1").unwrap()["metadata"]["labels"]["a"],
            "b"
        );
        let err = kube
            .patch(&node("node-2"), PatchType::Merge, "{}")
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains(
                "add { resource = \"nodes\", verbs = [\"patch\"], names = [\"node-2\"] }"
            ),
            "{err}"
        );
        let listed = kube
            .list("v1", "Node", None, &ListParams::default())
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
    async fn the_fake_applies_json_patches_and_applies_and_refuses_what_does_not_apply() {
        let (kube, fake) = kube(OWN_NODE, false);
        let labels = |fake: &FakeKube| {
            fake.object("nodes", None, "node-1").unwrap()["metadata"]["labels"].clone()
        };
        let add = r#"[{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]"#;
        kube.patch(&node("node-1"), PatchType::Json, add)
            .await
            .unwrap();
        assert_eq!(labels(&fake), json!({"a": "b"}));
        let apply = r#"{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1", "labels": {"c": "d"}}}"#;
        kube.patch(&node("node-1"), PatchType::Apply, apply)
            .await
            .unwrap();
        assert_eq!(labels(&fake), json!({"a": "b", "c": "d"}));
        // As the API server's 422: nothing changes, nothing is performed.
        let missing = r#"[{"op": "replace", "path": "/metadata/labels/x", "value": "y"}]"#;
        let err = kube
            .patch(&node("node-1"), PatchType::Json, missing)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), "invalid", "{err}");
        assert_eq!(labels(&fake), json!({"a": "b", "c": "d"}));
        assert_eq!(
            fake.actions(),
            ["patch nodes/node-1 json", "patch nodes/node-1 apply"]
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
            .patch(&node("node-1"), PatchType::Merge, &"x".repeat(MAX_BODY + 1))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), "invalid");
        kube.patch(
            &node("node-1"),
            PatchType::Merge,
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

    /// Under a rule with selectors, a Node outside them and one that does
    /// not exist answer alike, whatever the call: no call by name tells the
    /// plugin which Nodes beyond its grant exist. Nothing is changed.
    #[tokio::test]
    async fn by_selectors_absent_and_outside_answer_alike() {
        const LABELLED: &str = "kube = [{ resource = \"nodes\", verbs = [\"get\", \"patch\", \"delete\"], label-selector = \"pool=a\" }]";
        let (kube, fake) = kube(LABELLED, false);
        fake.put(
            "nodes",
            json!({"metadata": {"name": "node-3", "uid": "u3", "labels": {"pool": "a"}}}),
        );
        let label = r#"{"metadata": {"labels": {"x": "y"}}}"#;
        let mut answers = Vec::new();
        for name in ["node-2", "node-9"] {
            let get = kube.get(&node(name)).await.unwrap_err();
            let patch = kube.patch(&node(name), PatchType::Merge, label).await;
            let delete = kube.delete(&node(name)).await.unwrap_err();
            let event = kube
                .emit_event(&node(name), EventType::Normal, "Probe", "x")
                .await
                .unwrap_err();
            let answer = [get, patch.unwrap_err(), delete, event].map(|e| e.to_string());
            let at = |verb: &str| {
                format!(
                    "not-found: {verb} nodes named {name}: no such object within the grant's selectors ({{ resource = \"nodes\", label-selector = \"pool=a\" }}); one outside them is answered as absent: if it exists, label it to match, or widen the selectors in [plugins.labeler.grants] kube"
                )
            };
            assert_eq!(answer, [at("get"), at("patch"), at("delete"), at("get")]);
            answers.push(answer);
        }
        assert_eq!(
            answers[0],
            answers[1].clone().map(|a| a.replace("node-9", "node-2"))
        );
        assert!(fake.actions().is_empty(), "{:?}", fake.actions());
        assert!(kube.call.gate.mutations().is_empty());
        // Inside the selectors the calls go through.
        kube.get(&node("node-3")).await.unwrap();
        kube.patch(&node("node-3"), PatchType::Merge, label)
            .await
            .unwrap();
        assert_eq!(fake.actions(), ["patch nodes/node-3 merge"]);
    }

    /// The grant is checked on the object as read, and the write names its
    /// UID: an object another client recreated under the name in between
    /// (outside the selectors) is left alone, whatever the call.
    #[tokio::test]
    async fn by_selectors_a_write_is_bound_to_the_object_checked() {
        const LABELLED: &str = "kube = [{ resource = \"nodes\", verbs = [\"get\", \"patch\", \"delete\"], label-selector = \"pool=a\" }]";
        let (kube, fake) = kube(LABELLED, false);
        let checked = json!({"metadata": {"name": "node-3", "uid": "u3", "labels": {"pool": "a"}}});
        let recreated = json!({"metadata": {"name": "node-3", "uid": "u4"}});
        let label = r#"{"metadata": {"labels": {"x": "y"}}}"#;
        let add = r#"[{"op": "add", "path": "/metadata/labels", "value": {"x": "y"}}]"#;
        let mut answers = Vec::new();
        for call in ["merge", "apply", "json", "delete"] {
            fake.put("nodes", checked.clone());
            fake.recreate_after_get("nodes", recreated.clone());
            let key = node("node-3");
            let answer = match call {
                "merge" => kube.patch(&key, PatchType::Merge, label).await.map(drop),
                "apply" => kube.patch(&key, PatchType::Apply, label).await.map(drop),
                "json" => kube.patch(&key, PatchType::Json, add).await.map(drop),
                _ => kube.delete(&key).await,
            };
            answers.push(answer.unwrap_err().kind());
            assert_eq!(
                fake.object("nodes", None, "node-3"),
                Some(recreated.clone()),
                "{call}: the recreated Node changed"
            );
        }
        assert_eq!(answers, ["invalid", "invalid", "invalid", "conflict"]);
        assert!(fake.actions().is_empty(), "{:?}", fake.actions());
        // A body that could not carry the UID would go unbound: refused.
        fake.put("nodes", checked.clone());
        let unbound = r#"{"apiVersion": "v1", "kind": "Node", "metadata": null}"#;
        let err = kube
            .patch(&node("node-3"), PatchType::Apply, unbound)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), "invalid", "{err}");
        assert_eq!(fake.object("nodes", None, "node-3"), Some(checked.clone()));
        // Unraced, the same calls go through.
        kube.patch(&node("node-3"), PatchType::Merge, label)
            .await
            .unwrap();
        kube.delete(&node("node-3")).await.unwrap();
        assert_eq!(fake.object("nodes", None, "node-3"), None);
    }

    /// A plan asks the API server's dry run (here the fake's): the answer and
    /// the grant check are the real call's, the plan shows the object's
    /// diff, and nothing changes.
    #[tokio::test]
    async fn a_dry_run_is_the_servers_dry_run_under_the_same_grant() {
        const PATCH_ONLY: &str = "kube = [{ resource = \"nodes\", verbs = [\"patch\", \"create\", \"delete\"], names = [\"$NODE\", \"node-3\"] }]";
        let label = r#"{"metadata": {"labels": {"a": "b"}}}"#;
        let (real, _) = kube(PATCH_ONLY, false);
        let performed = real
            .patch(&node("node-1"), PatchType::Merge, label)
            .await
            .unwrap();
        let (plan, fake) = kube(PATCH_ONLY, true);
        let planned = plan
            .patch(&node("node-1"), PatchType::Merge, label)
            .await
            .unwrap();
        assert_eq!(
            planned, performed,
            "a plan answers what the real patch does"
        );
        assert!(fake.actions().is_empty());
        assert_eq!(
            fake.object("nodes", None, "node-1").unwrap()["metadata"].get("labels"),
            None
        );
        let mutations = plan.call.gate.mutations();
        let diff = mutations[0].diff.as_deref().unwrap();
        assert!(
            diff.starts_with("--- nodes/node-1\n+++ nodes/node-1\n"),
            "{diff}"
        );
        assert!(
            diff.contains("+    \"labels\": {\n+      \"a\": \"b\"\n+    },"),
            "{diff}"
        );
        assert_eq!(
            mutations[0].describe(),
            "would kube.patch nodes/node-1 (merge patch, 33 bytes)"
        );

        // Create: nothing before; delete: the object must exist.
        let created = plan
            .create("v1", "Node", None, r#"{"metadata": {"name": "node-3"}}"#)
            .await
            .unwrap();
        assert_eq!(created, r#"{"metadata":{"name":"node-3"}}"#);
        let diff = plan.call.gate.mutations()[1].diff.clone().unwrap();
        assert!(
            diff.starts_with("--- /dev/null\n+++ nodes/node-3\n"),
            "{diff}"
        );
        assert!(
            fake.object("nodes", None, "node-3").is_none(),
            "a planned create creates nothing"
        );
        let err = plan.delete(&node("node-3")).await.unwrap_err();
        assert_eq!(err.kind(), "not-found", "{err}");
        plan.delete(&node("node-1")).await.unwrap();
        assert!(
            fake.object("nodes", None, "node-1").is_some(),
            "a planned delete deletes nothing"
        );
        assert!(fake.actions().is_empty());
    }

    #[tokio::test]
    async fn events_need_a_readable_object_and_a_plain_reason() {
        let (kube, fake) = kube(OWN_NODE, false);
        kube.emit_event(
            &node("node-1"),
            EventType::Normal,
            "LabelsApplied",
            "set a=b\n",
        )
        .await
        .unwrap();
        assert_eq!(
            fake.actions(),
            ["event nodes/node-1 LabelsApplied: set a=b\\n"]
        );
        assert_eq!(
            kube.emit_event(&node("node-2"), EventType::Normal, "X", "y")
                .await
                .unwrap_err()
                .kind(),
            "denied"
        );
        assert_eq!(
            kube.emit_event(&node("node-1"), EventType::Normal, "bad reason", "y")
                .await
                .unwrap_err()
                .kind(),
            "invalid"
        );
    }
}
