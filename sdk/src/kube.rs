//! `tend:plugin/kube`: the Kubernetes API, objects as [`serde_json::Value`],
//! for any API group, version and kind, within the plugin's `kube` rules
//! (RBAC-like: group, resource, verb, namespace, name; `$NODE` is the host's
//! node name).

use crate::{Error, NotProvided, Result};
use serde_json::{Map, Value};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use tend_grants::kube::{Access, KubeRule, Verb, check, listable_names};

/// One object: `ObjectKey::cluster("v1", "Node", "node-1")`,
/// `ObjectKey::namespaced("apps/v1", "Deployment", "default", "web")`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// "v1", "apps/v1", "coordination.k8s.io/v1".
    pub api_version: String,
    /// "Node", "Pod", "Lease".
    pub kind: String,
    /// None for cluster-scoped kinds.
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectKey {
    /// A cluster-scoped object (a Node, a Namespace).
    pub fn cluster(api_version: &str, kind: &str, name: &str) -> Self {
        ObjectKey {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: None,
            name: name.to_string(),
        }
    }

    /// An object in `namespace` (a Pod, a ConfigMap).
    pub fn namespaced(api_version: &str, kind: &str, namespace: &str, name: &str) -> Self {
        ObjectKey {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: Some(namespace.to_string()),
            name: name.to_string(),
        }
    }

    /// The key of `object` (its apiVersion, kind, metadata.namespace and
    /// metadata.name), or None when one of them is missing.
    pub fn of(object: &Value) -> Option<Self> {
        let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
        Some(ObjectKey {
            api_version: text(&object["apiVersion"])?,
            kind: text(&object["kind"])?,
            namespace: text(&object["metadata"]["namespace"]),
            name: text(&object["metadata"]["name"])?,
        })
    }
}

/// Which objects a list returns; the default lists them all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListParams {
    /// "app=web,tier!=db".
    pub label_selector: Option<String>,
    /// "spec.nodeName=node-1".
    pub field_selector: Option<String>,
    /// Page size; a paged list goes to the API server, not the host's cache.
    pub limit: Option<u32>,
    /// The `continue_token` of the previous page.
    pub continue_token: Option<String>,
}

impl ListParams {
    /// Objects whose labels match `selector` ("app=web,tier!=db").
    pub fn labels(selector: &str) -> Self {
        ListParams {
            label_selector: Some(selector.to_string()),
            ..ListParams::default()
        }
    }

    /// Objects whose fields match `selector` ("spec.nodeName=node-1").
    pub fn fields(selector: &str) -> Self {
        ListParams {
            field_selector: Some(selector.to_string()),
            ..ListParams::default()
        }
    }
}

/// One page of a list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObjectList {
    pub items: Vec<Value>,
    /// Set when more pages follow: pass it in [`ListParams::continue_token`].
    pub continue_token: Option<String>,
    pub resource_version: String,
}

impl ObjectList {
    /// The items' `metadata.name`s, in list order.
    pub fn names(&self) -> Vec<&str> {
        self.items
            .iter()
            .filter_map(|o| o["metadata"]["name"].as_str())
            .collect()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PatchType {
    /// RFC 7386 JSON merge patch: `{"metadata": {"labels": {"a": "b"}}}`.
    Merge,
    /// RFC 6902 JSON patch: `[{"op": "add", "path": "/metadata/labels/a", "value": "b"}]`.
    Json,
    /// Server-side apply, with the field manager "tend-<plugin>".
    Apply,
}

impl PatchType {
    /// "merge", "json" or "apply".
    pub fn name(self) -> &'static str {
        match self {
            PatchType::Merge => "merge",
            PatchType::Json => "json",
            PatchType::Apply => "apply",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

/// The Kubernetes API, within the plugin's grant: each call needs a rule
/// covering its group, resource (the kind resolved by discovery), verb,
/// namespace and name. Lists need `list` and are cut to the names the rules
/// allow. Mutations pass the host's mutation gate (dry run, budgets, journal).
pub trait Kube {
    /// One object.
    fn get(&self, key: &ObjectKey) -> Result<Value>;
    /// Objects of one kind, in `namespace` or (None) in all namespaces.
    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<ObjectList>;
    /// Create `object` (it needs `metadata.name`); returns it as stored.
    fn create(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        object: &Value,
    ) -> Result<Value>;
    /// Patch an object; returns it as stored.
    fn patch(&self, key: &ObjectKey, patch_type: PatchType, patch: &Value) -> Result<Value>;
    fn delete(&self, key: &ObjectKey) -> Result<()>;
    /// Record an Event about an object the plugin may `get`; a repeat of the
    /// same reason and message about the same object raises its count.
    /// `reason` is a CamelCase word ("LabelApplied").
    fn emit_event(
        &self,
        regarding: &ObjectKey,
        event_type: EventType,
        reason: &str,
        message: &str,
    ) -> Result<()>;
}

impl Kube for NotProvided {
    fn get(&self, _: &ObjectKey) -> Result<Value> {
        Err(NotProvided::denied("kube"))
    }
    fn list(&self, _: &str, _: &str, _: Option<&str>, _: &ListParams) -> Result<ObjectList> {
        Err(NotProvided::denied("kube"))
    }
    fn create(&self, _: &str, _: &str, _: Option<&str>, _: &Value) -> Result<Value> {
        Err(NotProvided::denied("kube"))
    }
    fn patch(&self, _: &ObjectKey, _: PatchType, _: &Value) -> Result<Value> {
        Err(NotProvided::denied("kube"))
    }
    fn delete(&self, _: &ObjectKey) -> Result<()> {
        Err(NotProvided::denied("kube"))
    }
    fn emit_event(&self, _: &ObjectKey, _: EventType, _: &str, _: &str) -> Result<()> {
        Err(NotProvided::denied("kube"))
    }
}

/// The wasm glue: the host's `kube` import; objects cross it as JSON text.
#[cfg(target_arch = "wasm32")]
pub(crate) mod wasm {
    use super::*;
    use crate::__wasm::from_wit_error;
    use crate::bindings::tend::plugin::kube as wit;

    pub(crate) struct WasmKube;

    fn key(k: &ObjectKey) -> wit::ObjectKey {
        wit::ObjectKey {
            api_version: k.api_version.clone(),
            kind: k.kind.clone(),
            namespace: k.namespace.clone(),
            name: k.name.clone(),
        }
    }

    fn parse(call: &str, text: &str) -> Result<Value> {
        serde_json::from_str(text).map_err(|e| {
            Error::Other(format!(
                "kube {call}: the host answered with invalid JSON: {e}"
            ))
        })
    }

    fn text(call: &str, value: &Value) -> Result<String> {
        serde_json::to_string(value)
            .map_err(|e| Error::Invalid(format!("kube {call}: not JSON: {e}")))
    }

    impl Kube for WasmKube {
        fn get(&self, k: &ObjectKey) -> Result<Value> {
            let object = wit::get(&key(k)).map_err(from_wit_error)?;
            parse("get", &object)
        }
        fn list(
            &self,
            api_version: &str,
            kind: &str,
            namespace: Option<&str>,
            params: &ListParams,
        ) -> Result<ObjectList> {
            let params = wit::ListParams {
                label_selector: params.label_selector.clone(),
                field_selector: params.field_selector.clone(),
                limit: params.limit,
                continue_token: params.continue_token.clone(),
            };
            let list = wit::list(api_version, kind, namespace, &params).map_err(from_wit_error)?;
            Ok(ObjectList {
                items: list
                    .items
                    .iter()
                    .map(|item| parse("list", item))
                    .collect::<Result<_>>()?,
                continue_token: list.continue_token,
                resource_version: list.resource_version,
            })
        }
        fn create(
            &self,
            api_version: &str,
            kind: &str,
            namespace: Option<&str>,
            object: &Value,
        ) -> Result<Value> {
            let object = text("create", object)?;
            let created =
                wit::create(api_version, kind, namespace, &object).map_err(from_wit_error)?;
            parse("create", &created)
        }
        fn patch(&self, k: &ObjectKey, patch_type: PatchType, patch: &Value) -> Result<Value> {
            let patch_type = match patch_type {
                PatchType::Merge => wit::PatchType::Merge,
                PatchType::Json => wit::PatchType::Json,
                PatchType::Apply => wit::PatchType::Apply,
            };
            let patch = text("patch", patch)?;
            let patched = wit::patch(&key(k), patch_type, &patch).map_err(from_wit_error)?;
            parse("patch", &patched)
        }
        fn delete(&self, k: &ObjectKey) -> Result<()> {
            wit::delete(&key(k)).map_err(from_wit_error)
        }
        fn emit_event(
            &self,
            regarding: &ObjectKey,
            event_type: EventType,
            reason: &str,
            message: &str,
        ) -> Result<()> {
            let event_type = match event_type {
                EventType::Normal => wit::EventType::Normal,
                EventType::Warning => wit::EventType::Warning,
            };
            wit::emit_event(&key(regarding), event_type, reason, message).map_err(from_wit_error)
        }
    }
}

/// The calls [`FakeKube::fail_call`] can make fail: the WIT function names.
const CALLS: [&str; 6] = ["get", "list", "create", "patch", "delete", "emit-event"];

/// The largest object or patch the host accepts.
const MAX_BODY: usize = 1024 * 1024;
/// Event reasons and messages, as the API server bounds them.
const MAX_REASON: usize = 128;
const MAX_NOTE: usize = 1024;

/// A kind the fake's discovery knows.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Kind {
    group: String,
    version: String,
    kind: String,
    plural: String,
    namespaced: bool,
}

impl Kind {
    fn new(api_version: &str, kind: &str, plural: &str, namespaced: bool) -> Self {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        Kind {
            group: group.to_string(),
            version: version.to_string(),
            kind: kind.to_string(),
            plural: plural.to_string(),
            namespaced,
        }
    }

    fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// "nodes/node-1", "pods/default/web": as the host's journal and triggers name it.
    fn target(&self, namespace: Option<&str>, name: &str) -> String {
        match namespace {
            Some(ns) => format!("{}/{ns}/{name}", self.plural),
            None => format!("{}/{name}", self.plural),
        }
    }
}

/// Where the fake keeps an object: group, plural, namespace, name.
type Slot = (String, String, Option<String>, String);

/// A patch the fake was asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedPatch {
    pub key: ObjectKey,
    pub patch_type: PatchType,
    pub patch: Value,
}

/// An Event the fake recorded, aggregated as the host's recorder does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedEvent {
    pub regarding: ObjectKey,
    pub event_type: EventType,
    pub reason: String,
    /// Control characters escaped, as the host records it.
    pub message: String,
    /// How many times it was emitted.
    pub count: u32,
}

/// Rules for [`FakeKube::grant`]: a [`KubeRule`], a `Vec` or slice of them,
/// or text, one rule or a list, written as in the host config (TOML inline
/// tables: `{ resource = "nodes", verbs = ["get", "patch"], names = ["$NODE"] }`)
/// or as JSON.
pub trait IntoKubeRules {
    fn into_kube_rules(self) -> Vec<KubeRule>;
}

impl IntoKubeRules for KubeRule {
    fn into_kube_rules(self) -> Vec<KubeRule> {
        vec![self]
    }
}

impl IntoKubeRules for Vec<KubeRule> {
    fn into_kube_rules(self) -> Vec<KubeRule> {
        self
    }
}

impl IntoKubeRules for &[KubeRule] {
    fn into_kube_rules(self) -> Vec<KubeRule> {
        self.to_vec()
    }
}

impl IntoKubeRules for &str {
    /// Panics on a rule the host would reject: a test setup error.
    fn into_kube_rules(self) -> Vec<KubeRule> {
        let json = inline_toml_to_json(self);
        let parsed = if json.trim_start().starts_with('[') {
            serde_json::from_str::<Vec<KubeRule>>(&json)
        } else {
            serde_json::from_str::<KubeRule>(&json).map(|rule| vec![rule])
        };
        parsed.unwrap_or_else(|e| panic!("FakeKube::grant: {e} in {self}"))
    }
}

/// TOML inline tables and arrays as JSON: bare keys quoted, `=` as `:`,
/// 'literal' strings as JSON strings, comments and trailing commas dropped.
/// JSON passes through unchanged.
fn inline_toml_to_json(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                out.push('"');
                while let Some(c) = chars.next() {
                    out.push(c);
                    match c {
                        '\\' => out.extend(chars.next()),
                        '"' => break,
                        _ => {}
                    }
                }
            }
            '\'' => {
                let literal: String = chars.by_ref().take_while(|c| *c != '\'').collect();
                out.push_str(&Value::String(literal).to_string());
            }
            '#' => {
                chars.by_ref().take_while(|c| *c != '\n').for_each(drop);
            }
            '=' => out.push(':'),
            c if c.is_ascii_alphanumeric() || c == '_' || c == '-' => {
                let mut word = c.to_string();
                while let Some(&c) = chars.peek() {
                    if !(c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                        break;
                    }
                    word.push(c);
                    chars.next();
                }
                let number = word.starts_with(|c: char| c.is_ascii_digit() || c == '-')
                    && word.parse::<f64>().is_ok();
                let literal = number || matches!(word.as_str(), "true" | "false" | "null");
                if literal {
                    out.push_str(&word);
                } else {
                    out.push_str(&Value::String(word).to_string());
                }
            }
            ']' | '}' => {
                let kept = out.trim_end().len();
                if out[..kept].ends_with(',') {
                    out.truncate(kept - 1);
                }
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// The fake: an in-memory API server behind the host's grant rules and
/// messages (nothing granted until [`FakeKube::grant`]).
///
/// - Discovery knows Node, Namespace, Pod, ConfigMap, Event (v1), Lease
///   (coordination.k8s.io/v1) and Event (events.k8s.io/v1); add others with
///   [`FakeKube::add_kind`]. Kinds resolve to (group, plural) before the
///   grant check, as on the host.
/// - `$NODE` in the rules is [`FakeKube::node_name`], "node-1" until
///   [`FakeKube::set_node_name`].
/// - Lists are cut to the names the rules allow, filtered by label and field
///   selectors, paged with `limit`.
/// - Merge patches are applied (RFC 7386); JSON patches and server-side
///   applies are recorded ([`FakeKube::patches`]) and leave the object as it
///   was: `put` the expected result to go on.
/// - Every mutation is recorded ([`FakeKube::actions`]: "patch
///   nodes/node-1 merge", "delete pods/default/web", "event nodes/node-1
///   LabelApplied: ..."), Events aggregated in [`FakeKube::events`].
/// - Failures are injected with [`FakeKube::fail_with`] and
///   [`FakeKube::fail_call`].
pub struct FakeKube {
    plugin: String,
    node: RefCell<String>,
    rules: RefCell<Vec<KubeRule>>,
    kinds: RefCell<Vec<Kind>>,
    objects: RefCell<BTreeMap<Slot, Value>>,
    resource_version: Cell<u64>,
    actions: RefCell<Vec<String>>,
    patches: RefCell<Vec<RecordedPatch>>,
    events: RefCell<Vec<RecordedEvent>>,
    failure: RefCell<Option<Error>>,
    call_failures: RefCell<BTreeMap<String, Error>>,
}

impl Default for FakeKube {
    /// For a plugin named "test".
    fn default() -> Self {
        FakeKube::new("test")
    }
}

impl FakeKube {
    pub fn new(plugin: &str) -> Self {
        FakeKube {
            plugin: plugin.to_string(),
            node: RefCell::new("node-1".to_string()),
            rules: RefCell::default(),
            kinds: RefCell::new(vec![
                Kind::new("v1", "Node", "nodes", false),
                Kind::new("v1", "Namespace", "namespaces", false),
                Kind::new("v1", "Pod", "pods", true),
                Kind::new("v1", "ConfigMap", "configmaps", true),
                Kind::new("v1", "Event", "events", true),
                Kind::new("coordination.k8s.io/v1", "Lease", "leases", true),
                Kind::new("events.k8s.io/v1", "Event", "events", true),
            ]),
            objects: RefCell::default(),
            resource_version: Cell::new(0),
            actions: RefCell::default(),
            patches: RefCell::default(),
            events: RefCell::default(),
            failure: RefCell::default(),
            call_failures: RefCell::default(),
        }
    }

    /// Add `rules` to the grant, as `[plugins.NAME.grants] kube` would:
    /// `grant(r#"{ resource = "nodes", verbs = ["get", "patch"], names = ["$NODE"] }"#)`.
    pub fn grant(&self, rules: impl IntoKubeRules) -> &Self {
        self.rules.borrow_mut().extend(rules.into_kube_rules());
        self
    }

    /// The node `$NODE` stands for.
    pub fn set_node_name(&self, node: &str) -> &Self {
        *self.node.borrow_mut() = node.to_string();
        self
    }

    pub fn node_name(&self) -> String {
        self.node.borrow().clone()
    }

    /// Teach discovery a kind: `add_kind("apps/v1", "Deployment", "deployments", true)`.
    pub fn add_kind(&self, api_version: &str, kind: &str, plural: &str, namespaced: bool) -> &Self {
        let kind = Kind::new(api_version, kind, plural, namespaced);
        let mut kinds = self.kinds.borrow_mut();
        kinds.retain(|k| !(k.api_version() == kind.api_version() && k.kind == kind.kind));
        kinds.push(kind);
        self
    }

    /// Store `object` as is (no grant check, nothing recorded). It names its
    /// `apiVersion`, `kind`, `metadata.name` and, for a namespaced kind,
    /// `metadata.namespace`; a uid and resourceVersion are added when absent.
    /// Panics otherwise: a test setup error.
    pub fn put(&self, object: Value) -> &Self {
        let key = ObjectKey::of(&object).unwrap_or_else(|| {
            panic!("FakeKube::put: the object needs apiVersion, kind and metadata.name: {object}")
        });
        let kind = self
            .resolve(&key.api_version, &key.kind)
            .unwrap_or_else(|e| panic!("FakeKube::put: {e} (teach it with add_kind)"));
        assert_eq!(
            kind.namespaced,
            key.namespace.is_some(),
            "FakeKube::put: {} is {}: {object}",
            kind.kind,
            if kind.namespaced {
                "namespaced: set metadata.namespace"
            } else {
                "cluster-scoped: drop metadata.namespace"
            }
        );
        self.store(&kind, key.namespace.as_deref(), &key.name, object);
        self
    }

    /// The object stored under `key` now, if any.
    pub fn object(&self, key: &ObjectKey) -> Option<Value> {
        let kind = self.resolve(&key.api_version, &key.kind).ok()?;
        let slot = Self::slot(&kind, key.namespace.as_deref(), &key.name);
        self.objects.borrow().get(&slot).cloned()
    }

    /// Take an object away (no grant check, nothing recorded), as another
    /// client deleting it would; returns it.
    pub fn remove(&self, key: &ObjectKey) -> Option<Value> {
        let kind = self.resolve(&key.api_version, &key.kind).ok()?;
        let slot = Self::slot(&kind, key.namespace.as_deref(), &key.name);
        self.objects.borrow_mut().remove(&slot)
    }

    /// Every call fails with `error` (say, `unavailable`: the API server is
    /// down) until cleared with None. Grant checks come first, as on the host.
    pub fn fail_with(&self, error: Option<Error>) -> &Self {
        *self.failure.borrow_mut() = error;
        self
    }

    /// The call named `call` as in the WIT ("get", "list", "create", "patch",
    /// "delete", "emit-event") fails with `error` until cleared with None.
    pub fn fail_call(&self, call: &str, error: Option<Error>) -> &Self {
        assert!(
            CALLS.contains(&call),
            "FakeKube::fail_call: no call {call:?}, expected one of {CALLS:?}"
        );
        let mut failures = self.call_failures.borrow_mut();
        match error {
            Some(error) => failures.insert(call.to_string(), error),
            None => failures.remove(call),
        };
        self
    }

    /// Every mutation performed, in order: "create configmaps/default/x",
    /// "patch nodes/node-1 merge", "delete pods/default/web",
    /// "event nodes/node-1 LabelApplied: set a=b".
    pub fn actions(&self) -> Vec<String> {
        self.actions.borrow().clone()
    }

    /// Every patch performed, in order, applied or not.
    pub fn patches(&self) -> Vec<RecordedPatch> {
        self.patches.borrow().clone()
    }

    /// The Events emitted, one per object, reason and message, with their counts.
    pub fn events(&self) -> Vec<RecordedEvent> {
        self.events.borrow().clone()
    }

    fn slot(kind: &Kind, namespace: Option<&str>, name: &str) -> Slot {
        (
            kind.group.clone(),
            kind.plural.clone(),
            namespace.filter(|_| kind.namespaced).map(str::to_string),
            name.to_string(),
        )
    }

    /// Store `object` under its slot with a new resourceVersion (and a uid,
    /// apiVersion and kind when absent).
    fn store(&self, kind: &Kind, namespace: Option<&str>, name: &str, mut object: Value) -> Value {
        let version = self.resource_version.get() + 1;
        self.resource_version.set(version);
        if let Value::Object(fields) = &mut object {
            fields
                .entry("apiVersion")
                .or_insert_with(|| kind.api_version().into());
            fields
                .entry("kind")
                .or_insert_with(|| kind.kind.clone().into());
            let meta = fields
                .entry("metadata")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(meta) = meta {
                meta.insert("name".into(), name.into());
                if let Some(ns) = namespace {
                    meta.insert("namespace".into(), ns.into());
                }
                meta.entry("uid")
                    .or_insert_with(|| format!("uid-{}-{name}", kind.plural).into());
                meta.insert("resourceVersion".into(), version.to_string().into());
            }
        }
        let slot = Self::slot(kind, namespace, name);
        self.objects.borrow_mut().insert(slot, object.clone());
        object
    }

    /// The host's bounds on what a plugin sends.
    fn bounded(what: &str, text: &str, max: usize) -> Result<()> {
        if text.len() > max {
            return Err(Error::Invalid(format!(
                "kube {what}: {} bytes, at most {max}",
                text.len()
            )));
        }
        Ok(())
    }

    fn resolve(&self, api_version: &str, kind: &str) -> Result<Kind> {
        Self::bounded("api-version", api_version, 253)?;
        Self::bounded("kind", kind, 253)?;
        let kinds = self.kinds.borrow();
        let found = kinds
            .iter()
            .find(|k| k.api_version() == api_version && k.kind == kind);
        found.cloned().ok_or_else(|| {
            Error::NotFound(format!(
                "the API server has no kind {kind} in {api_version}"
            ))
        })
    }

    /// The kind resolved and the namespace it takes, as the host decides.
    fn scoped(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Result<(Kind, Option<String>)> {
        let info = self.resolve(api_version, kind)?;
        match (info.namespaced, namespace) {
            (false, Some(ns)) => Err(Error::Invalid(format!(
                "{kind} is cluster-scoped: call without a namespace (got {:?})",
                inert(ns)
            ))),
            (_, ns) => Ok((info, ns.map(str::to_string))),
        }
    }

    fn allow(
        &self,
        kind: &Kind,
        verb: Verb,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> Result<()> {
        let access = Access {
            group: &kind.group,
            resource: &kind.plural,
            verb,
            namespace,
            name,
        };
        check(
            &self.rules.borrow(),
            &self.plugin,
            &self.node.borrow(),
            &access,
        )
        .map_err(crate::types::refused)
    }

    /// Resolve a key and check `verb` on it, as the host does.
    fn named(&self, key: &ObjectKey, verb: Verb) -> Result<(Kind, Option<String>)> {
        let (kind, namespace) =
            self.scoped(&key.api_version, &key.kind, key.namespace.as_deref())?;
        Self::bounded("name", &key.name, 253)?;
        if kind.namespaced && namespace.is_none() {
            return Err(Error::Invalid(format!(
                "{} is namespaced: name its namespace",
                kind.kind
            )));
        }
        self.allow(&kind, verb, namespace.as_deref(), Some(&key.name))?;
        Ok((kind, namespace))
    }

    /// A scripted failure of `call`, if any.
    fn failing(&self, call: &str) -> Result<()> {
        match self.failure.borrow().clone() {
            Some(error) => Err(error),
            None => self
                .call_failures
                .borrow()
                .get(call)
                .cloned()
                .map_or(Ok(()), Err),
        }
    }

    fn stored(
        &self,
        call: &str,
        kind: &Kind,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value> {
        let slot = Self::slot(kind, namespace, name);
        let found = self.objects.borrow().get(&slot).cloned();
        found.ok_or_else(|| {
            Error::NotFound(format!(
                "{call} {}/{name}: {} {name:?} not found (NotFound)",
                kind.plural, kind.plural
            ))
        })
    }
}

impl Kube for FakeKube {
    fn get(&self, key: &ObjectKey) -> Result<Value> {
        let (kind, namespace) = self.named(key, Verb::Get)?;
        self.failing("get")?;
        self.stored("get", &kind, namespace.as_deref(), &key.name)
    }

    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<ObjectList> {
        let selectors = [
            &params.label_selector,
            &params.field_selector,
            &params.continue_token,
        ];
        for selector in selectors.into_iter().flatten() {
            Self::bounded("selector", selector, 4096)?;
        }
        let (kind, namespace) = self.scoped(api_version, kind, namespace)?;
        self.allow(&kind, Verb::List, namespace.as_deref(), None)?;
        let access = Access {
            group: &kind.group,
            resource: &kind.plural,
            verb: Verb::List,
            namespace: namespace.as_deref(),
            name: None,
        };
        let names = listable_names(&self.rules.borrow(), &self.node.borrow(), &access);
        self.failing("list")?;
        let labels = params
            .label_selector
            .as_deref()
            .map(LabelSelector::parse)
            .transpose()?;
        let fields = params
            .field_selector
            .as_deref()
            .map(FieldSelector::parse)
            .transpose()?;
        let objects = self.objects.borrow();
        let matching: Vec<Value> = objects
            .iter()
            .filter(|((group, plural, ns, name), _)| {
                *group == kind.group
                    && *plural == kind.plural
                    && (namespace.is_none() || ns.as_deref() == namespace.as_deref())
                    && names.as_ref().is_none_or(|allowed| allowed.contains(name))
            })
            .map(|(_, object)| object)
            .filter(|o| labels.as_ref().is_none_or(|s| s.matches(o)))
            .filter(|o| fields.as_ref().is_none_or(|s| s.matches(o)))
            .cloned()
            .collect();
        let start = match &params.continue_token {
            None => 0,
            Some(token) => token.parse::<usize>().map_err(|_| {
                Error::Invalid(format!(
                    "list {}: invalid continue token {token:?} (BadRequest)",
                    kind.plural
                ))
            })?,
        };
        let end = match params.limit {
            Some(limit) if limit > 0 => matching.len().min(start.saturating_add(limit as usize)),
            _ => matching.len(),
        };
        Ok(ObjectList {
            items: matching.get(start..end).unwrap_or_default().to_vec(),
            continue_token: (end < matching.len()).then(|| end.to_string()),
            resource_version: self.resource_version.get().to_string(),
        })
    }

    fn create(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        object: &Value,
    ) -> Result<Value> {
        Self::bounded("create", &object.to_string(), MAX_BODY)?;
        let (info, namespace) = self.scoped(api_version, kind, namespace)?;
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if name.is_empty() {
            return Err(Error::Invalid(
                "kube create: the object needs metadata.name".into(),
            ));
        }
        let key = ObjectKey {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: namespace.clone(),
            name: name.clone(),
        };
        self.named(&key, Verb::Create)?;
        self.failing("create")?;
        let other = object["metadata"]["namespace"].as_str();
        if other.is_some_and(|other| namespace.as_deref() != Some(other)) {
            return Err(Error::Invalid(format!(
                "create {}: the namespace of the provided object does not match the namespace sent on the request (BadRequest)",
                info.plural
            )));
        }
        if self
            .stored("create", &info, namespace.as_deref(), &name)
            .is_ok()
        {
            return Err(Error::Conflict(format!(
                "create {}: {} {name:?} already exists (AlreadyExists)",
                info.plural, info.plural
            )));
        }
        let target = info.target(namespace.as_deref(), &name);
        self.actions.borrow_mut().push(format!("create {target}"));
        Ok(self.store(&info, namespace.as_deref(), &name, object.clone()))
    }

    fn patch(&self, key: &ObjectKey, patch_type: PatchType, patch: &Value) -> Result<Value> {
        Self::bounded("patch", &patch.to_string(), MAX_BODY)?;
        let (kind, namespace) = self.named(key, Verb::Patch)?;
        self.failing("patch")?;
        if patch_type == PatchType::Json && !patch.is_array() {
            return Err(Error::Invalid(
                "not a JSON patch: expected a list of operations".into(),
            ));
        }
        let target = kind.target(namespace.as_deref(), &key.name);
        self.actions
            .borrow_mut()
            .push(format!("patch {target} {}", patch_type.name()));
        self.patches.borrow_mut().push(RecordedPatch {
            key: ObjectKey {
                namespace: namespace.clone(),
                ..key.clone()
            },
            patch_type,
            patch: patch.clone(),
        });
        let mut object = self.stored("patch", &kind, namespace.as_deref(), &key.name)?;
        if patch_type != PatchType::Merge {
            return Ok(object);
        }
        merge_patch(&mut object, patch);
        Ok(self.store(&kind, namespace.as_deref(), &key.name, object))
    }

    fn delete(&self, key: &ObjectKey) -> Result<()> {
        let (kind, namespace) = self.named(key, Verb::Delete)?;
        self.failing("delete")?;
        let target = kind.target(namespace.as_deref(), &key.name);
        self.actions.borrow_mut().push(format!("delete {target}"));
        self.stored("delete", &kind, namespace.as_deref(), &key.name)?;
        let slot = Self::slot(&kind, namespace.as_deref(), &key.name);
        self.objects.borrow_mut().remove(&slot);
        Ok(())
    }

    fn emit_event(
        &self,
        regarding: &ObjectKey,
        event_type: EventType,
        reason: &str,
        message: &str,
    ) -> Result<()> {
        Self::bounded("event reason", reason, MAX_REASON)?;
        Self::bounded("event message", message, MAX_NOTE)?;
        if reason.is_empty() || !reason.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(Error::Invalid(format!(
                "kube event reason {:?}: expected a CamelCase word such as \"LabelsApplied\"",
                inert(reason)
            )));
        }
        let (kind, namespace) = self.named(regarding, Verb::Get)?;
        self.failing("emit-event")?;
        self.stored("get", &kind, namespace.as_deref(), &regarding.name)?;
        let message = inert(message);
        let target = kind.target(namespace.as_deref(), &regarding.name);
        self.actions
            .borrow_mut()
            .push(format!("event {target} {reason}: {message}"));
        let regarding = ObjectKey {
            namespace,
            ..regarding.clone()
        };
        let mut events = self.events.borrow_mut();
        let same = events.iter_mut().find(|e| {
            e.regarding == regarding
                && e.event_type == event_type
                && e.reason == reason
                && e.message == message
        });
        match same {
            Some(event) => event.count += 1,
            None => events.push(RecordedEvent {
                regarding,
                event_type,
                reason: reason.to_string(),
                message,
                count: 1,
            }),
        }
        Ok(())
    }
}

/// RFC 7386: apply the JSON merge patch `patch` to `target`.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(target) = target {
        for (key, value) in fields {
            if value.is_null() {
                target.remove(key);
            } else {
                merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

/// `text` with control characters escaped, as the host shows plugin text.
fn inert(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\n' => "\\n".to_string(),
            '\r' => "\\r".to_string(),
            '\t' => "\\t".to_string(),
            c if c.is_control() => c.escape_unicode().to_string(),
            c => c.to_string(),
        })
        .collect()
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Exists(String),
    Absent(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A label selector as the API server reads it: "app=web,tier!=db",
/// "env in (a,b)", "env notin (c)", "gpu", "!gpu".
#[derive(Debug, Clone, PartialEq, Eq)]
struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    fn parse(text: &str) -> Result<Self> {
        let invalid = |part: &str| {
            Error::Invalid(format!(
                "unable to parse requirement {part:?} of label selector {text:?} (BadRequest)"
            ))
        };
        let mut parts = Vec::new();
        let (mut depth, mut start) = (0, 0);
        for (i, c) in text.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&text[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&text[start..]);
        let mut requirements = Vec::new();
        for part in parts.into_iter().map(str::trim).filter(|p| !p.is_empty()) {
            let valid_key = |key: &str| {
                !key.is_empty()
                    && key
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
            };
            let set = |rest: &str| -> Option<Vec<String>> {
                let inner = rest.trim().strip_prefix('(')?.strip_suffix(')')?;
                Some(inner.split(',').map(|v| v.trim().to_string()).collect())
            };
            let requirement = if let Some(key) = part.strip_prefix('!') {
                Requirement::Absent(key.trim().to_string())
            } else if let Some((key, value)) = part.split_once("!=") {
                Requirement::NotIn(key.trim().to_string(), vec![value.trim().to_string()])
            } else if let Some((key, value)) =
                part.split_once("==").or_else(|| part.split_once('='))
            {
                Requirement::In(key.trim().to_string(), vec![value.trim().to_string()])
            } else if let Some((key, rest)) = part.split_once(" notin ") {
                Requirement::NotIn(
                    key.trim().to_string(),
                    set(rest).ok_or_else(|| invalid(part))?,
                )
            } else if let Some((key, rest)) = part.split_once(" in ") {
                Requirement::In(
                    key.trim().to_string(),
                    set(rest).ok_or_else(|| invalid(part))?,
                )
            } else {
                Requirement::Exists(part.to_string())
            };
            let key = match &requirement {
                Requirement::Exists(k)
                | Requirement::Absent(k)
                | Requirement::In(k, _)
                | Requirement::NotIn(k, _) => k,
            };
            if !valid_key(key) {
                return Err(invalid(part));
            }
            requirements.push(requirement);
        }
        Ok(LabelSelector(requirements))
    }

    fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        let label = |key: &str| labels[key].as_str();
        self.0.iter().all(|r| match r {
            Requirement::Exists(k) => label(k).is_some(),
            Requirement::Absent(k) => label(k).is_none(),
            Requirement::In(k, values) => label(k).is_some_and(|v| values.iter().any(|a| a == v)),
            Requirement::NotIn(k, values) => label(k).is_none_or(|v| values.iter().all(|a| a != v)),
        })
    }
}

/// A field selector: "spec.nodeName=node-1,metadata.namespace!=kube-system",
/// any dotted path of the object compared as text (absent: "").
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldSelector(Vec<(Vec<String>, bool, String)>);

impl FieldSelector {
    fn parse(text: &str) -> Result<Self> {
        let mut terms = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (path, equal, value) = if let Some((p, v)) = part.split_once("!=") {
                (p, false, v)
            } else if let Some((p, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (p, true, v)
            } else {
                return Err(Error::Invalid(format!(
                    "invalid field selector {text:?}: {part:?} is not field=value (BadRequest)"
                )));
            };
            let path = path.trim().split('.').map(str::to_string).collect();
            terms.push((path, equal, value.trim().to_string()));
        }
        Ok(FieldSelector(terms))
    }

    fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(path, equal, value)| {
            let field = path.iter().fold(object, |v, step| &v[step.as_str()]);
            let text = match field {
                Value::Null => String::new(),
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (text == *value) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str) -> ObjectKey {
        ObjectKey::cluster("v1", "Node", name)
    }

    fn cluster() -> FakeKube {
        let kube = FakeKube::new("labeler");
        kube.put(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}}))
            .put(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-2"}}));
        kube
    }

    const OWN_NODE: &str =
        r#"{ resource = "nodes", verbs = ["get", "list", "patch"], names = ["$NODE"] }"#;

    #[test]
    fn only_my_own_node_with_the_hosts_messages() {
        let kube = cluster();
        let err = kube.get(&node("node-1")).unwrap_err();
        assert_eq!(
            err,
            Error::Denied(
                "no kube grant allows get nodes named node-1: add { resource = \"nodes\", verbs = [\"get\"], names = [\"node-1\"] } to [plugins.labeler.grants] kube".into()
            )
        );
        kube.grant(OWN_NODE);
        let patch = json!({"metadata": {"labels": {"a": "b"}}});
        let patched = kube
            .patch(&node("node-1"), PatchType::Merge, &patch)
            .unwrap();
        assert_eq!(patched["metadata"]["labels"]["a"], "b");
        let err = kube
            .patch(&node("node-2"), PatchType::Merge, &patch)
            .unwrap_err();
        assert_eq!(
            err.message(),
            "no kube grant allows patch nodes named node-2: add { resource = \"nodes\", verbs = [\"patch\"], names = [\"node-2\"] } to [plugins.labeler.grants] kube"
        );
        assert_eq!(kube.delete(&node("node-1")).unwrap_err().kind(), "denied");
        assert_eq!(kube.actions(), ["patch nodes/node-1 merge"]);
        assert_eq!(
            kube.object(&node("node-1")).unwrap()["metadata"]["labels"]["a"],
            "b"
        );

        kube.set_node_name("node-2");
        assert!(
            kube.get(&node("node-2")).is_ok(),
            "$NODE follows the node name"
        );
        assert_eq!(kube.get(&node("node-1")).unwrap_err().kind(), "denied");
    }

    #[test]
    fn lists_are_cut_to_the_granted_names_and_filtered() {
        let kube = cluster();
        let err = kube
            .list("v1", "Node", None, &ListParams::default())
            .unwrap_err();
        assert!(
            err.message().starts_with(
                "no kube grant allows list nodes: add { resource = \"nodes\", verbs = [\"list\"] }"
            ),
            "{err}"
        );
        kube.grant(OWN_NODE);
        let listed = kube
            .list("v1", "Node", None, &ListParams::default())
            .unwrap();
        assert_eq!(listed.names(), ["node-1"]);

        kube.grant(r#"[{ resource = "pods", verbs = ["list"], namespaces = ["default"] }]"#);
        for (name, ns, app) in [
            ("a", "default", "web"),
            ("b", "default", "db"),
            ("c", "other", "web"),
        ] {
            kube.put(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
                "spec": {"nodeName": "node-1"}}));
        }
        let list = |ns: Option<&str>, params: &ListParams| kube.list("v1", "Pod", ns, params);
        assert_eq!(
            list(Some("default"), &ListParams::default())
                .unwrap()
                .names(),
            ["a", "b"]
        );
        assert_eq!(
            list(None, &ListParams::default()).unwrap_err().kind(),
            "denied",
            "all namespaces need a rule for all"
        );
        assert_eq!(
            list(Some("default"), &ListParams::labels("app=web"))
                .unwrap()
                .names(),
            ["a"]
        );
        assert_eq!(
            list(Some("default"), &ListParams::labels("app notin (web)"))
                .unwrap()
                .names(),
            ["b"]
        );
        assert_eq!(
            list(Some("default"), &ListParams::labels("!app"))
                .unwrap()
                .names(),
            Vec::<&str>::new()
        );
        assert_eq!(
            list(Some("default"), &ListParams::labels("app in (web, db),app"))
                .unwrap()
                .names(),
            ["a", "b"]
        );
        assert_eq!(
            list(Some("default"), &ListParams::labels("=x"))
                .unwrap_err()
                .kind(),
            "invalid"
        );
        assert_eq!(
            list(Some("default"), &ListParams::fields("metadata.name!=a"))
                .unwrap()
                .names(),
            ["b"]
        );
        assert_eq!(
            list(Some("default"), &ListParams::fields("spec.nodeName=node-2"))
                .unwrap()
                .items,
            Vec::<Value>::new()
        );

        let page = ListParams {
            limit: Some(1),
            ..ListParams::default()
        };
        let first = list(Some("default"), &page).unwrap();
        assert_eq!(first.names(), ["a"]);
        let next = ListParams {
            continue_token: first.continue_token,
            ..page
        };
        let second = list(Some("default"), &next).unwrap();
        assert_eq!(second.names(), ["b"]);
        assert_eq!(second.continue_token, None);
    }

    #[test]
    fn merge_patches_follow_rfc_7386_and_other_patches_are_recorded() {
        let mut target = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        merge_patch(
            &mut target,
            &json!({"a": "z", "c": {"f": null}, "l": [3], "n": {"m": 1}}),
        );
        assert_eq!(
            target,
            json!({"a": "z", "c": {"d": "e"}, "l": [3], "n": {"m": 1}})
        );
        merge_patch(&mut target, &json!("replaced"));
        assert_eq!(target, json!("replaced"));

        let kube = cluster();
        kube.grant(OWN_NODE);
        let before = kube.get(&node("node-1")).unwrap();
        let json_patch = json!([{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]);
        assert_eq!(
            kube.patch(&node("node-1"), PatchType::Json, &json_patch)
                .unwrap(),
            before
        );
        let apply = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}});
        kube.patch(&node("node-1"), PatchType::Apply, &apply)
            .unwrap();
        assert_eq!(
            kube.patch(&node("node-1"), PatchType::Json, &json!({}))
                .unwrap_err()
                .kind(),
            "invalid"
        );
        assert_eq!(
            kube.actions(),
            ["patch nodes/node-1 json", "patch nodes/node-1 apply"]
        );
        assert_eq!(kube.patches()[0].patch, json_patch);
        assert_eq!(kube.patches()[1].patch_type, PatchType::Apply);
    }

    #[test]
    fn scopes_kinds_creates_deletes_and_failures() {
        let kube = FakeKube::default();
        kube.grant(r#"
            # The host config's inline tables, as written there.
            [
              { resource = "configmaps", verbs = ["get", "create", "delete"], namespaces = ['default'] },
              { group = "apps", resource = "deployments", verbs = ["get"] },
            ]"#);
        let cm = ObjectKey::namespaced("v1", "ConfigMap", "default", "x");
        let object = json!({"metadata": {"name": "x"}, "data": {"k": "v"}});
        let created = kube
            .create("v1", "ConfigMap", Some("default"), &object)
            .unwrap();
        assert_eq!(created["metadata"]["namespace"], "default");
        assert_eq!(kube.get(&cm).unwrap()["data"]["k"], "v");
        let again = kube
            .create("v1", "ConfigMap", Some("default"), &object)
            .unwrap_err();
        assert_eq!(
            again.message(),
            "create configmaps: configmaps \"x\" already exists (AlreadyExists)"
        );
        assert_eq!(
            kube.create("v1", "ConfigMap", Some("other"), &object)
                .unwrap_err()
                .kind(),
            "denied"
        );
        assert_eq!(
            kube.create("v1", "ConfigMap", Some("default"), &json!({}))
                .unwrap_err()
                .kind(),
            "invalid"
        );

        let err = kube
            .get(&ObjectKey {
                namespace: None,
                ..cm.clone()
            })
            .unwrap_err();
        assert_eq!(
            err,
            Error::Invalid("ConfigMap is namespaced: name its namespace".into())
        );
        let err = kube
            .get(&ObjectKey::namespaced("v1", "Node", "x", "n"))
            .unwrap_err();
        assert_eq!(
            err,
            Error::Invalid("Node is cluster-scoped: call without a namespace (got \"x\")".into())
        );
        let deployment = ObjectKey::namespaced("apps/v1", "Deployment", "default", "web");
        let err = kube.get(&deployment).unwrap_err();
        assert_eq!(
            err,
            Error::NotFound("the API server has no kind Deployment in apps/v1".into())
        );
        kube.add_kind("apps/v1", "Deployment", "deployments", true);
        assert_eq!(
            kube.get(&deployment).unwrap_err(),
            Error::NotFound("get deployments/web: deployments \"web\" not found (NotFound)".into())
        );

        kube.fail_call(
            "get",
            Some(Error::Unavailable("the API server is down".into())),
        );
        assert_eq!(kube.get(&cm).unwrap_err().kind(), "unavailable");
        kube.fail_call("get", None)
            .fail_with(Some(Error::Timeout("slow".into())));
        assert_eq!(kube.delete(&cm).unwrap_err().kind(), "timeout");
        kube.fail_with(None);
        kube.delete(&cm).unwrap();
        assert_eq!(kube.delete(&cm).unwrap_err().kind(), "not-found");
        assert_eq!(kube.object(&cm), None);
        assert_eq!(
            kube.actions(),
            [
                "create configmaps/default/x",
                "delete configmaps/default/x",
                "delete configmaps/default/x"
            ]
        );
    }

    #[test]
    fn events_need_a_readable_object_and_aggregate() {
        let kube = cluster();
        kube.grant(OWN_NODE);
        kube.emit_event(
            &node("node-1"),
            EventType::Normal,
            "LabelApplied",
            "set a=b\n",
        )
        .unwrap();
        kube.emit_event(
            &node("node-1"),
            EventType::Normal,
            "LabelApplied",
            "set a=b\n",
        )
        .unwrap();
        assert_eq!(
            kube.emit_event(&node("node-2"), EventType::Normal, "X", "y")
                .unwrap_err()
                .kind(),
            "denied"
        );
        assert_eq!(
            kube.emit_event(&node("node-1"), EventType::Warning, "bad reason", "y")
                .unwrap_err()
                .kind(),
            "invalid"
        );
        assert_eq!(
            kube.actions(),
            ["event nodes/node-1 LabelApplied: set a=b\\n"; 2]
        );
        assert_eq!(
            kube.events(),
            [RecordedEvent {
                regarding: node("node-1"),
                event_type: EventType::Normal,
                reason: "LabelApplied".into(),
                message: "set a=b\\n".into(),
                count: 2,
            }]
        );
    }

    #[test]
    fn grants_parse_as_strictly_as_the_hosts() {
        let result = std::panic::catch_unwind(|| {
            FakeKube::default().grant(r#"{ resource = "Nodes", verbs = ["get"] }"#);
        });
        assert!(result.is_err());
        assert_eq!(
            inline_toml_to_json(r#"{ resource = "a=b", verbs = ['get',], n = 1 }"#),
            r#"{ "resource" : "a=b", "verbs" : ["get"], "n" : 1 }"#
        );
    }

    #[test]
    fn a_host_without_kube_denies_it() {
        struct Bare;
        impl crate::Host for Bare {}
        let err = crate::Host::kube(&Bare).get(&node("node-1")).unwrap_err();
        assert_eq!(
            err,
            Error::Denied("kube is not provided by this host: its Host implementation does not override Host::kube".into())
        );
    }

    #[test]
    fn keys_of_objects() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"}});
        assert_eq!(
            ObjectKey::of(&pod),
            Some(ObjectKey::namespaced("v1", "Pod", "default", "web"))
        );
        assert_eq!(ObjectKey::of(&json!({"kind": "Pod"})), None);
    }
}
