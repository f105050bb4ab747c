//! [`FakeKube`]: an in-memory API server behind the host's grant rules.

use super::patch::apply_patch;
use super::rules::IntoKubeRules;
use super::{EventType, Kube, ListParams, ObjectKey, ObjectList, PatchType};
use crate::{Error, Result};
use serde_json::{Map, Value};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use tend_rules::kube::{
    Access, FieldSelector, KubeRule, LabelSelector, MAX_BODY, MAX_SELECTOR, OwnLease, PatchShape,
    Verb, check, check_event, check_key, check_object, check_own_lease, check_size, list_scope,
    needs_object,
};
use tend_rules::text::inert;

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
    failures: crate::fake::ScriptedFailures,
}

impl crate::fake::Fake for FakeKube {
    fn for_plugin(plugin: &str) -> Self {
        FakeKube::new(plugin)
    }
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
            failures: crate::fake::ScriptedFailures::new("FakeKube", &super::CALLS),
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
        self.try_put(object)
            .unwrap_or_else(|e| panic!("FakeKube::put: {e}"));
        self
    }

    /// [`FakeKube::put`], answering what is wrong with `object` instead of
    /// panicking (for callers outside Rust tests, such as `tend-fakes`).
    pub fn try_put(&self, object: Value) -> std::result::Result<(), String> {
        let Some(key) = ObjectKey::of(&object) else {
            return Err(format!(
                "the object needs apiVersion, kind and metadata.name: {object}"
            ));
        };
        let kind = self
            .resolve(&key.api_version, &key.kind)
            .map_err(|e| format!("{e} (teach it with add_kind)"))?;
        if kind.namespaced != key.namespace.is_some() {
            let fix = if kind.namespaced {
                "namespaced: set metadata.namespace"
            } else {
                "cluster-scoped: drop metadata.namespace"
            };
            return Err(format!("{} is {fix}: {object}", kind.kind));
        }
        self.store(&kind, key.namespace.as_deref(), &key.name, object);
        Ok(())
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
        self.failures.fail_with(error);
        self
    }

    /// The call named `call` as in the WIT ("get", "list", "create", "patch",
    /// "delete", "emit-event") fails with `error` until cleared with None.
    pub fn fail_call(&self, call: &str, error: Option<Error>) -> &Self {
        self.failures.fail_call(call, error);
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
        check_size(what, text, max).map_err(crate::Error::from)
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
        check_key(api_version, kind, namespace, name).map_err(crate::Error::from)?;
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
        check_own_lease(self.own_lease.borrow().as_ref(), &access).map_err(crate::Error::from)?;
        check(
            &self.rules.borrow(),
            &self.plugin,
            &self.node.borrow(),
            &access,
        )
        .map_err(crate::Error::from)?;
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
            .map_err(crate::Error::from)
    }

    /// A scripted failure of `call`, if any.
    fn failing(&self, call: &str) -> Result<()> {
        self.failures.check(call)
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
        .map_err(crate::Error::from)?;
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
        tend_rules::kube::body_namespace(&mut object, namespace.as_deref())?;
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
        let shape = super::patch_shape(patch_type);
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
        check_event(reason, message).map_err(crate::Error::from)?;
        let (kind, namespace) = self.named(regarding, Verb::Get)?;
        self.failing("emit-event")?;
        // As the host: the object need not exist unless the rules need it.
        let object = self
            .stored("get", &kind, namespace.as_deref(), &regarding.name)
            .ok();
        self.object_allowed(
            &kind,
            namespace.as_deref(),
            &regarding.name,
            Verb::Get,
            object.as_ref(),
            None,
        )?;
        let message = inert(message).into_owned();
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
