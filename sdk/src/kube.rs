//! `tend:plugin/kube`: the Kubernetes API, objects as [`serde_json::Value`],
//! for any API group, version and kind, within the plugin's `kube` rules
//! (RBAC-like: group, resource, verb, namespace, name; `$NODE` is the host's
//! node name).

use crate::{Error, NotProvided, Result};
use serde_json::{Map, Value};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use tend_grants::kube::{
    Access, FieldSelector, KubeRule, LabelSelector, MAX_BODY, MAX_SELECTOR, OwnLease, PatchShape,
    Verb, check, check_event, check_key, check_object, check_own_lease, check_size, list_scope,
    needs_object,
};

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
        parse_rules(self).unwrap_or_else(|e| panic!("FakeKube::grant: {e} in {self}"))
    }
}

/// One rule or a list, as JSON or as the value of `kube = ...` in the host
/// config (parsed by the `toml` crate, as the host parses its config).
fn parse_rules(text: &str) -> std::result::Result<Vec<KubeRule>, String> {
    #[derive(serde::Deserialize)]
    struct Grants<T> {
        kube: T,
    }
    // TOML wants a value on the line of its key: start at the value, after
    // any leading comments.
    let mut value = text.trim_start();
    while let Some(comment) = value.strip_prefix('#') {
        value = comment
            .split_once('\n')
            .map_or("", |(_, rest)| rest)
            .trim_start();
    }
    let many = value.starts_with('[');
    if serde_json::from_str::<Value>(text).is_ok() {
        return match many {
            true => serde_json::from_str(text),
            false => serde_json::from_str(text).map(|rule| vec![rule]),
        }
        .map_err(|e| e.to_string());
    }
    let document = format!("kube = {value}");
    match many {
        true => toml::from_str::<Grants<Vec<KubeRule>>>(&document).map(|g| g.kube),
        false => toml::from_str::<Grants<KubeRule>>(&document).map(|g| vec![g.kube]),
    }
    .map_err(|e| e.to_string())
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
/// - Patches are applied and recorded ([`FakeKube::patches`]): merge patches
///   by RFC 7386, JSON patches by RFC 6902 (one that does not apply is
///   `invalid` and changes nothing, as the API server answers 422), and
///   server-side applies as a merge patch: the fake keeps no field managers,
///   so lists are replaced, not merged by key, and an apply never creates the
///   object. `put` the expected result where that differs.
/// - Every mutation is recorded ([`FakeKube::actions`]: "patch
///   nodes/node-1 merge", "delete pods/default/web", "event nodes/node-1
///   LabelApplied: ..."), Events aggregated in [`FakeKube::events`].
/// - Failures are injected with [`FakeKube::fail_with`] and
///   [`FakeKube::fail_call`].
pub struct FakeKube {
    plugin: String,
    node: RefCell<String>,
    rules: RefCell<Vec<KubeRule>>,
    own_lease: RefCell<Option<OwnLease>>,
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
            own_lease: RefCell::default(),
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

    /// Make the Lease `namespace`/`name` Tend's own election Lease, as the
    /// host's `[host.leader-election]` does: creating, patching or deleting
    /// it is denied whatever the grant says.
    pub fn set_own_lease(&self, namespace: &str, name: &str) -> &Self {
        *self.own_lease.borrow_mut() = Some(OwnLease {
            namespace: namespace.to_string(),
            name: name.to_string(),
        });
        self
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

    /// The host's bounds on what a plugin sends (the rules crate's).
    fn bounded(what: &str, text: &str, max: usize) -> Result<()> {
        check_size(what, text, max).map_err(crate::types::refused)
    }

    fn resolve(&self, api_version: &str, kind: &str) -> Result<Kind> {
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

    /// The kind resolved and the namespace it takes, as the host decides:
    /// every name the call puts into a URL is checked for its shape first.
    fn scoped(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> Result<(Kind, Option<String>)> {
        check_key(api_version, kind, namespace, name).map_err(crate::types::refused)?;
        let info = self.resolve(api_version, kind)?;
        match (info.namespaced, namespace) {
            (false, Some(ns)) => Err(Error::Invalid(format!(
                "{kind} is cluster-scoped: call without a namespace (got {:?})",
                inert(ns)
            ))),
            (_, ns) => Ok((info, ns.map(str::to_string))),
        }
    }

    fn access<'a>(
        kind: &'a Kind,
        verb: Verb,
        namespace: Option<&'a str>,
        name: Option<&'a str>,
    ) -> Access<'a> {
        Access {
            group: &kind.group,
            resource: &kind.plural,
            verb,
            namespace,
            name,
        }
    }

    /// Resolve a key and check `verb` on it by name, as the host does (Tend's
    /// own election Lease first).
    fn named(&self, key: &ObjectKey, verb: Verb) -> Result<(Kind, Option<String>)> {
        let (kind, namespace) = self.scoped(
            &key.api_version,
            &key.kind,
            key.namespace.as_deref(),
            Some(&key.name),
        )?;
        if kind.namespaced && namespace.is_none() {
            return Err(Error::Invalid(format!(
                "{} is namespaced: name its namespace",
                kind.kind
            )));
        }
        let access = Self::access(&kind, verb, namespace.as_deref(), Some(&key.name));
        check_own_lease(self.own_lease.borrow().as_ref(), &access)
            .map_err(crate::types::refused)?;
        check(
            &self.rules.borrow(),
            &self.plugin,
            &self.node.borrow(),
            &access,
        )
        .map_err(crate::types::refused)?;
        Ok((kind, namespace))
    }

    /// The object-level check, as the host makes it: selectors on the
    /// object (the stored one when `object` is None and only rules with
    /// selectors allow the call), `fields` on a patch.
    fn object_allowed(
        &self,
        kind: &Kind,
        namespace: Option<&str>,
        name: &str,
        verb: Verb,
        object: Option<&Value>,
        patch: Option<(PatchShape, &Value)>,
    ) -> Result<()> {
        let access = Self::access(kind, verb, namespace, Some(name));
        let rules = self.rules.borrow();
        let node = self.node.borrow();
        let stored;
        let object = match object {
            None if needs_object(&rules, &node, &access) => {
                stored = self.stored("get", kind, namespace, name)?;
                Some(&stored)
            }
            object => object,
        };
        check_object(&rules, &self.plugin, &node, &access, object, patch)
            .map_err(crate::types::refused)
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
        let object = self.stored("get", &kind, namespace.as_deref(), &key.name)?;
        self.object_allowed(
            &kind,
            namespace.as_deref(),
            &key.name,
            Verb::Get,
            Some(&object),
            None,
        )?;
        Ok(object)
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
            Self::bounded("selector", selector, MAX_SELECTOR)?;
        }
        let (kind, namespace) = self.scoped(api_version, kind, namespace, None)?;
        let access = Self::access(&kind, Verb::List, namespace.as_deref(), None);
        let scope = list_scope(
            &self.rules.borrow(),
            &self.plugin,
            &self.node.borrow(),
            &access,
            params.label_selector.as_deref(),
            params.field_selector.as_deref(),
        )
        .map_err(crate::types::refused)?;
        self.failing("list")?;
        // What the API server does with the selectors sent (the rule's ANDed
        // with the plugin's); they parsed in `list_scope`.
        let labels = LabelSelector::parse(scope.label_selector.as_deref().unwrap_or_default())
            .map_err(Error::Invalid)?;
        let fields = FieldSelector::parse(scope.field_selector.as_deref().unwrap_or_default())
            .map_err(Error::Invalid)?;
        let objects = self.objects.borrow();
        let matching: Vec<Value> = objects
            .iter()
            .filter(|((group, plural, ns, _), _)| {
                *group == kind.group
                    && *plural == kind.plural
                    && (namespace.is_none() || ns.as_deref() == namespace.as_deref())
            })
            .map(|(_, object)| object)
            .filter(|o| labels.matches(o) && fields.matches(o) && scope.admits(o))
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
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if name.is_empty() {
            return Err(Error::Invalid(
                "kube create: the object needs metadata.name".into(),
            ));
        }
        let (info, namespace) = self.scoped(api_version, kind, namespace, Some(&name))?;
        let mut object = object.clone();
        match (&object["metadata"]["namespace"], &namespace) {
            (Value::Null, _) => {}
            (Value::String(inside), Some(ns)) if inside == ns => {}
            (inside, _) => {
                return Err(Error::Invalid(format!(
                    "kube create: metadata.namespace {} does not match the namespace of the call ({}); name the same namespace in both, or leave it out of the object",
                    inert(&inside.to_string()),
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
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: namespace.clone(),
            name: name.clone(),
        };
        self.named(&key, Verb::Create)?;
        self.object_allowed(
            &info,
            namespace.as_deref(),
            &name,
            Verb::Create,
            Some(&object),
            None,
        )?;
        self.failing("create")?;
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
        Ok(self.store(&info, namespace.as_deref(), &name, object))
    }

    fn patch(&self, key: &ObjectKey, patch_type: PatchType, patch: &Value) -> Result<Value> {
        Self::bounded("patch", &patch.to_string(), MAX_BODY)?;
        let (kind, namespace) = self.named(key, Verb::Patch)?;
        let shape = match patch_type {
            PatchType::Merge => PatchShape::Merge,
            PatchType::Json => PatchShape::Json,
            PatchType::Apply => PatchShape::Apply,
        };
        self.object_allowed(
            &kind,
            namespace.as_deref(),
            &key.name,
            Verb::Patch,
            None,
            Some((shape, patch)),
        )?;
        self.failing("patch")?;
        if patch_type == PatchType::Json && !patch.is_array() {
            return Err(Error::Invalid(
                "not a JSON patch: expected a list of operations".into(),
            ));
        }
        let target = kind.target(namespace.as_deref(), &key.name);
        let patched = match self.stored("patch", &kind, namespace.as_deref(), &key.name) {
            Ok(mut object) => {
                apply_patch(&mut object, patch_type, patch)
                    .map_err(|e| Error::Invalid(format!("kube patch {target}: {e}")))?;
                Ok(object)
            }
            Err(e) => Err(e),
        };
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
        Ok(self.store(&kind, namespace.as_deref(), &key.name, patched?))
    }

    fn delete(&self, key: &ObjectKey) -> Result<()> {
        let (kind, namespace) = self.named(key, Verb::Delete)?;
        self.object_allowed(
            &kind,
            namespace.as_deref(),
            &key.name,
            Verb::Delete,
            None,
            None,
        )?;
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
        check_event(reason, message).map_err(crate::types::refused)?;
        let (kind, namespace) = self.named(regarding, Verb::Get)?;
        self.failing("emit-event")?;
        let object = self.stored("get", &kind, namespace.as_deref(), &regarding.name)?;
        self.object_allowed(
            &kind,
            namespace.as_deref(),
            &regarding.name,
            Verb::Get,
            Some(&object),
            None,
        )?;
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

/// `patch` applied to `object` as the API server would: a merge patch (RFC
/// 7386), a JSON patch (RFC 6902, all or nothing) or a server-side apply,
/// which without field managers is a merge. The error says why a JSON patch
/// does not apply.
fn apply_patch(object: &mut Value, patch_type: PatchType, patch: &Value) -> Result<(), String> {
    match patch_type {
        PatchType::Merge | PatchType::Apply => merge_patch(object, patch),
        PatchType::Json => {
            let operations: json_patch::Patch =
                serde_json::from_value(patch.clone()).map_err(|e| {
                    format!("not a JSON patch ({e}); send a list of RFC 6902 operations")
                })?;
            json_patch::patch(object, &operations).map_err(|e| {
                format!("the JSON patch does not apply ({e}); patch paths that exist, or `add` their parents first")
            })?;
        }
    }
    Ok(())
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
    fn patches_apply_as_on_the_api_server_and_are_recorded() {
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
        let json_patch = json!([{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]);
        let patched = kube
            .patch(&node("node-1"), PatchType::Json, &json_patch)
            .unwrap();
        assert_eq!(patched["metadata"]["labels"], json!({"a": "b"}));
        assert_eq!(kube.get(&node("node-1")).unwrap(), patched);
        // A JSON patch that does not apply changes nothing, as a 422 would.
        let missing = json!([
            {"op": "add", "path": "/metadata/labels/c", "value": "d"},
            {"op": "remove", "path": "/metadata/annotations/x"}
        ]);
        let err = kube
            .patch(&node("node-1"), PatchType::Json, &missing)
            .unwrap_err();
        assert_eq!(err.kind(), "invalid");
        assert!(
            err.message()
                .starts_with("kube patch nodes/node-1: the JSON patch does not apply"),
            "{err}"
        );
        assert_eq!(kube.get(&node("node-1")).unwrap(), patched);
        // A server-side apply merges.
        let apply = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1", "labels": {"e": "f"}}});
        let applied = kube
            .patch(&node("node-1"), PatchType::Apply, &apply)
            .unwrap();
        assert_eq!(applied["metadata"]["labels"], json!({"a": "b", "e": "f"}));
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
        // TOML as in the config: literal strings, trailing commas, comments.
        let rules = parse_rules(
            "[\n  # nodes\n  { resource = 'nodes', verbs = ['get',], names = [\"$NODE\"] },\n]",
        )
        .unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].resource, "nodes");
        assert_eq!(rules[0].verbs, [Verb::Get]);
        // Unknown keys are refused, as the host refuses them.
        let err = parse_rules(r#"{ resource = "nodes", verbs = ["get"], n = 1 }"#).unwrap_err();
        assert!(err.contains("unknown field `n`"), "{err}");
        // JSON too.
        assert_eq!(
            parse_rules(r#"{"resource": "nodes", "verbs": ["get"]}"#).unwrap(),
            rules[..1]
                .iter()
                .map(|r| KubeRule {
                    names: None,
                    ..r.clone()
                })
                .collect::<Vec<_>>()
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
