//! [`FakeKube`]: an in-memory API server behind the host's grant rules.

use super::patch::{apply_patch, merge_patch};
use super::rules::IntoKubeRules;
use super::{
    DrainOptions, DrainReport, EventType, Kube, ListParams, ObjectKey, PatchType, TextList,
};
use crate::{Error, Result};
use serde_json::{Map, Value};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use tend_rules::drain::{
    Disposition, blocked_message, blocked_reason, check_cordon, check_evict, check_evict_pod,
    cordon_patch, cordoned, disposition, named, pod_on_node,
};
use tend_rules::kube::{
    Access, FieldSelector, KubeRule, LabelSelector, MAX_BODY, MAX_SELECTOR, OwnLease, PatchShape,
    Verb, bind_to_uid, check, check_event, check_found, check_key, check_object, check_own_lease,
    check_size, list_scope, needs_object,
};
use tend_rules::text::inert;

/// What the API server says when a PodDisruptionBudget refuses an eviction
/// (HTTP 429), inside the fake's `budget-exhausted` message.
const BUDGET_REFUSAL: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

/// Why a drain left a pod whose eviction it had not asked for yet (the
/// host's words).
const NOT_EVICTED_YET: &str = "not evicted yet";

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
///   LabelApplied: ...", "cordon nodes/node-1", "uncordon nodes/node-1",
///   "evict pods/default/web"), Events aggregated in [`FakeKube::events`].
/// - `cordon` sets or removes `spec.unschedulable` on the Node named
///   [`FakeKube::node_name`] (a Node already so is left alone and nothing is
///   recorded, as the host journals nothing); `evict` removes the pod at
///   once (the fake has no grace period), unless
///   [`FakeKube::block_eviction`] made its PodDisruptionBudget refuse it
///   (`budget-exhausted`, nothing done). `drain` is the host's drain in one
///   pass (the fake has no clock: `deadline-ms` is not waited on, and a
///   blocked pod stays blocked for the whole drain); see [`Kube::drain`] on
///   [`FakeKube`]. [`FakeKube::uncordon_during_drain`] scripts someone else
///   uncordoning the Node in the middle of one.
/// - Failures are injected with [`FakeKube::fail_with`] and
///   [`FakeKube::fail_call`]; a drain's own cordon, evictions and uncordon
///   meet the failures scripted for `cordon` and `evict`.
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
    /// Pods whose eviction a PodDisruptionBudget refuses: (namespace, name)
    /// to the budget's name (in the pod's namespace).
    blocked: RefCell<BTreeMap<(String, String), String>>,
    /// Someone else uncordons the Node once a drain has evicted this many pods.
    uncordon_during_drain: Cell<Option<usize>>,
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
            blocked: RefCell::default(),
            uncordon_during_drain: Cell::new(None),
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
    /// "delete", "emit-event", "cordon", "evict", "drain") fails with `error`
    /// until cleared with None. A drain's own cordon, evictions and uncordon
    /// meet the failures of "cordon" and "evict" too: an eviction failing
    /// with another error than `denied` or `invalid` leaves its pod in the
    /// report's `remaining`, with the error's message.
    pub fn fail_call(&self, call: &str, error: Option<Error>) -> &Self {
        self.failures.fail_call(call, error);
        self
    }

    /// The eviction of pod `namespace`/`name` is refused by the
    /// PodDisruptionBudget `budget` (its name; a budget lives in its pod's
    /// namespace), as the API server refuses it while the budget allows no
    /// disruption: `evict` answers `budget-exhausted` (`"blocked by
    /// PodDisruptionBudget NAMESPACE/BUDGET: ..."`) and nothing happens; a
    /// drain leaves the pod in `remaining` (`"NAMESPACE/NAME: blocked by
    /// PodDisruptionBudget NAMESPACE/BUDGET"`). Until
    /// [`FakeKube::unblock_eviction`].
    pub fn block_eviction(&self, namespace: &str, name: &str, budget: &str) -> &Self {
        self.blocked.borrow_mut().insert(
            (namespace.to_string(), name.to_string()),
            budget.to_string(),
        );
        self
    }

    /// The budget allows evicting pod `namespace`/`name` again.
    pub fn unblock_eviction(&self, namespace: &str, name: &str) -> &Self {
        self.blocked
            .borrow_mut()
            .remove(&(namespace.to_string(), name.to_string()));
        self
    }

    /// Someone else uncordons the Node in the middle of a drain: once a
    /// drain has evicted `evictions` pods (0: right after its cordon), the
    /// Node's `spec.unschedulable` is removed (not recorded: another
    /// client's change). The drain finds it so before its next eviction,
    /// stops, and reports the pods it had not evicted yet (`"NAMESPACE/NAME:
    /// not evicted yet"`), uncordoning nothing itself. Fires once, in the
    /// first drain that gets that far.
    pub fn uncordon_during_drain(&self, evictions: usize) -> &Self {
        self.uncordon_during_drain.set(Some(evictions));
        self
    }

    /// Every mutation performed, in order: "create configmaps/default/x",
    /// "patch nodes/node-1 merge", "delete pods/default/web",
    /// "event nodes/node-1 LabelApplied: set a=b", "cordon nodes/node-1",
    /// "uncordon nodes/node-1", "evict pods/default/web".
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
    /// object (the stored one, when only rules with selectors allow the
    /// call; one outside them is answered as an absent one), `fields` on a
    /// patch. The UID of the object read, when one was (the host binds the
    /// write to it).
    fn object_allowed(
        &self,
        kind: &Kind,
        namespace: Option<&str>,
        name: &str,
        verb: Verb,
        patch: Option<(PatchShape, &Value)>,
    ) -> Result<Option<String>> {
        let access = Self::access(kind, verb, namespace, Some(name));
        if needs_object(&self.rules.borrow(), &self.node.borrow(), &access) {
            let object = self.read_checked("get", kind, namespace, name, verb, patch)?;
            return Ok(object["metadata"]["uid"].as_str().map(str::to_string));
        }
        check_object(
            &self.rules.borrow(),
            &self.plugin,
            &self.node.borrow(),
            &access,
            None,
            patch,
        )
        .map_err(crate::Error::from)?;
        Ok(None)
    }

    /// The stored object, checked for `verb` as the host checks one it
    /// reads ([`check_found`]): absent and outside the selectors alike.
    fn read_checked(
        &self,
        call: &str,
        kind: &Kind,
        namespace: Option<&str>,
        name: &str,
        verb: Verb,
        patch: Option<(PatchShape, &Value)>,
    ) -> Result<Value> {
        let read = self.stored(call, kind, namespace, name);
        let access = Self::access(kind, verb, namespace, Some(name));
        check_found(
            &self.rules.borrow(),
            &self.plugin,
            &self.node.borrow(),
            &access,
            read.as_ref().ok(),
            patch,
        )?;
        read
    }

    /// A scripted failure of `call`, if any.
    fn failing(&self, call: &str) -> Result<()> {
        self.failures.check(call)
    }

    /// The cordon itself, as the host makes it: the Node read fresh and
    /// checked with it (a rule's selectors) and the one patch; a Node
    /// already so is left alone and nothing is recorded.
    fn set_unschedulable(&self, node: &str, unschedulable: bool) -> Result<()> {
        let kind = self.resolve("v1", "Node")?;
        let patch = cordon_patch(unschedulable);
        let merge = Some((PatchShape::Merge, &patch));
        let mut current = self.read_checked("cordon", &kind, None, node, Verb::Patch, merge)?;
        if cordoned(&current) == unschedulable {
            return Ok(());
        }
        merge_patch(&mut current, &patch);
        let verb = if unschedulable { "cordon" } else { "uncordon" };
        self.actions
            .borrow_mut()
            .push(format!("{verb} {}", kind.target(None, node)));
        self.store(&kind, None, node, current);
        Ok(())
    }

    /// The pods bound to `node`, by "<namespace>/<name>", as the plugin's
    /// `list` of them with the field selector `spec.nodeName=<node>` sees
    /// them (its grant, the rule's selectors, the scripted `list` failures).
    fn node_pods(&self, node: &str) -> Result<BTreeMap<String, Value>> {
        let on_node = format!("spec.nodeName={node}");
        let listed = self.list("v1", "Pod", None, &ListParams::fields(&on_node))?;
        Ok(listed
            .items
            .into_iter()
            .filter(|pod| pod["spec"]["nodeName"].as_str() == Some(node))
            .map(|pod| (named(&pod), pod))
            .collect())
    }

    /// Another client's uncordon, when [`FakeKube::uncordon_during_drain`]
    /// scripted one after `evictions`.
    fn someone_uncordons(&self, node: &str, evictions: usize) {
        if self.uncordon_during_drain.get() != Some(evictions) {
            return;
        }
        self.uncordon_during_drain.set(None);
        let Ok(kind) = self.resolve("v1", "Node") else {
            return;
        };
        if let Ok(mut current) = self.stored("get", &kind, None, node) {
            merge_patch(&mut current, &cordon_patch(false));
            self.store(&kind, None, node, current);
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
        self.read_checked(
            "get",
            &kind,
            namespace.as_deref(),
            &key.name,
            Verb::Get,
            None,
        )
    }

    /// Each item as the host sends it: its JSON text.
    fn list_texts(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<TextList> {
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
        Ok(TextList {
            items: (matching.get(start..end).unwrap_or_default().iter())
                .map(Value::to_string)
                .collect(),
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
        // The body is the plugin's own: one outside the selectors is denied.
        let access = Self::access(&info, Verb::Create, namespace.as_deref(), Some(&name));
        check_object(
            &self.rules.borrow(),
            &self.plugin,
            &self.node.borrow(),
            &access,
            Some(&object),
            None,
        )
        .map_err(crate::Error::from)?;
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
        let checked = self.object_allowed(
            &kind,
            namespace.as_deref(),
            &key.name,
            Verb::Patch,
            Some((shape, patch)),
        )?;
        // As the host: a Node's spec.unschedulable is `cordon`'s alone.
        if kind.group.is_empty()
            && kind.plural == "nodes"
            && tend_rules::drain::patch_cordons(shape, patch)
        {
            return Err(Error::Invalid(format!(
                "kube patch nodes/{}: it writes spec.unschedulable, which is a cordon: call kube.cordon, which passes the fleet's ticket (operation kube.cordon)",
                key.name
            )));
        }
        // As the host: a body that cannot carry the UID it is bound to.
        if let Some(uid) = &checked {
            bind_to_uid(shape, &mut patch.clone(), uid).map_err(crate::Error::from)?;
        }
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
        self.object_allowed(&kind, namespace.as_deref(), &key.name, Verb::Delete, None)?;
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
        let name = &regarding.name;
        match self.read_checked("get", &kind, namespace.as_deref(), name, Verb::Get, None) {
            Ok(_) => {}
            Err(Error::NotFound(_))
                if !needs_object(
                    &self.rules.borrow(),
                    &self.node.borrow(),
                    &Self::access(&kind, Verb::Get, namespace.as_deref(), Some(name)),
                ) => {}
            Err(e) => return Err(e),
        }
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

    fn cordon(&self, unschedulable: bool) -> Result<()> {
        let node = self.node_name();
        check_cordon(&self.rules.borrow(), &self.plugin, &node, unschedulable)
            .map_err(crate::Error::from)?;
        self.failing("cordon")?;
        self.set_unschedulable(&node, unschedulable)
    }

    fn evict(&self, namespace: &str, name: &str) -> Result<()> {
        let node = self.node_name();
        let pods = self.resolve("v1", "Pod")?;
        {
            let rules = self.rules.borrow();
            check_evict(&rules, &self.plugin, &node, namespace, name)
                .map_err(crate::Error::from)?;
            // As the host: the pod read, bound to this node and inside the
            // rule's selectors (absent, elsewhere or outside answered alike).
            let found = self.stored("evict", &pods, Some(namespace), name).ok();
            let pod = pod_on_node(
                &rules,
                &self.plugin,
                &node,
                (namespace, name),
                found.as_ref(),
            )?;
            check_evict_pod(&rules, &self.plugin, &node, namespace, name, pod)
                .map_err(crate::Error::from)?;
        }
        self.failing("evict")?;
        let pod = self.stored("evict", &pods, Some(namespace), name)?;
        let key = (namespace.to_string(), name.to_string());
        if let Some(budget) = self.blocked.borrow().get(&key) {
            return Err(Error::BudgetExhausted(blocked_message(
                &named(&pod),
                Some(&format!("{namespace}/{budget}")),
                BUDGET_REFUSAL,
            )));
        }
        let slot = Self::slot(&pods, Some(namespace), name);
        self.objects.borrow_mut().remove(&slot);
        self.actions
            .borrow_mut()
            .push(format!("evict {}", pods.target(Some(namespace), name)));
        Ok(())
    }

    /// The host's drain in one pass, the fake having no clock to wait on:
    ///
    /// 1. Every grant first, before anything changes, as on the host:
    ///    cordon's (and uncordon's, with `uncordon-on-give-up`), the `list`
    ///    of the pods bound to the Node (`spec.nodeName=<node>`, through
    ///    [`Kube::list`]), `evict` of each pod to evict; a refusal is the
    ///    drain's error. Then a scripted failure of "drain".
    /// 2. The cordon ([`Kube::cordon`]).
    /// 3. Each pod, by `"NAMESPACE/NAME"`, by its
    ///    [`tend_rules::drain::disposition`]: a DaemonSet or mirror pod is
    ///    `skipped` (`"NAMESPACE/NAME: WHY"`); one already leaving stays in
    ///    `remaining` (`"NAMESPACE/NAME: terminating"`) unless gone by the end
    ///    (then `evicted`, as the host counts a pod that left);
    ///    any other is evicted ([`Kube::evict`]): gone, it is `evicted`;
    ///    blocked ([`FakeKube::block_eviction`]), it stays in `remaining`
    ///    (`"NAMESPACE/NAME: [pdb:NAMESPACE/BUDGET] blocked by PodDisruptionBudget NAMESPACE/BUDGET"`);
    ///    refused otherwise, it stays with the refusal's message (`denied`
    ///    and `invalid` end the drain with that error, as on the host).
    ///    Before each eviction the Node is read: found uncordoned
    ///    ([`FakeKube::uncordon_during_drain`]), the drain stops, the pods
    ///    it had not evicted yet stay in `remaining` (`"NAMESPACE/NAME: not
    ///    evicted yet"`).
    /// 4. Anything remaining, the drain gave up: with `uncordon-on-give-up`
    ///    it uncordons the Node and says so in `uncordoned` (not when
    ///    someone else uncordoned it).
    fn drain(&self, options: &DrainOptions) -> Result<DrainReport> {
        let node = self.node_name();
        {
            let rules = self.rules.borrow();
            check_cordon(&rules, &self.plugin, &node, true).map_err(crate::Error::from)?;
            if options.uncordon_on_give_up {
                check_cordon(&rules, &self.plugin, &node, false).map_err(crate::Error::from)?;
            }
        }
        let pods = self.node_pods(&node)?;
        for pod in pods.values() {
            if disposition(pod) == Disposition::Evict {
                let meta = &pod["metadata"];
                check_evict_pod(
                    &self.rules.borrow(),
                    &self.plugin,
                    &node,
                    meta["namespace"].as_str().unwrap_or_default(),
                    meta["name"].as_str().unwrap_or_default(),
                    pod,
                )
                .map_err(crate::Error::from)?;
            }
        }
        self.failing("drain")?;
        self.cordon(true)?;
        let node_key = ObjectKey::cluster("v1", "Node", &node);
        let mut report = DrainReport::default();
        let mut remaining: BTreeMap<String, String> = BTreeMap::new();
        let mut leaving = Vec::new();
        let mut stopped = false;
        for (pod, object) in &pods {
            let meta = &object["metadata"];
            let namespace = meta["namespace"].as_str().unwrap_or_default();
            let name = meta["name"].as_str().unwrap_or_default();
            match disposition(object) {
                Disposition::Skip(why) => report.skipped.push(format!("{pod}: {why}")),
                Disposition::Leaving => leaving.push((pod, namespace, name)),
                Disposition::Evict if stopped => {
                    remaining.insert(pod.clone(), NOT_EVICTED_YET.into());
                }
                Disposition::Evict => {
                    self.someone_uncordons(&node, report.evicted.len());
                    // The cordon read fresh before each disruption: an
                    // uncordon by someone else ends the drain.
                    if !self.object(&node_key).is_some_and(|n| cordoned(&n)) {
                        stopped = true;
                        remaining.insert(pod.clone(), NOT_EVICTED_YET.into());
                        continue;
                    }
                    match self.evict(namespace, name) {
                        // Gone by itself meanwhile: gone all the same.
                        Ok(()) | Err(Error::NotFound(_)) => report.evicted.push(pod.clone()),
                        Err(e @ (Error::Denied(_) | Error::Invalid(_))) => return Err(e),
                        Err(e) => {
                            let why = match &e {
                                Error::BudgetExhausted(m) => blocked_reason(m).map(str::to_string),
                                _ => None,
                            };
                            let why = why.unwrap_or_else(|| inert(e.message()).into_owned());
                            remaining.insert(pod.clone(), why);
                        }
                    }
                }
            }
        }
        for (pod, namespace, name) in leaving {
            let key = ObjectKey::namespaced("v1", "Pod", namespace, name);
            match self.object(&key) {
                Some(_) => {
                    remaining.insert(pod.clone(), "terminating".into());
                }
                // Gone: as the host counts a pod that left.
                None => report.evicted.push(pod.clone()),
            }
        }
        report.remaining = remaining
            .into_iter()
            .map(|(pod, why)| format!("{pod}: {why}"))
            .collect();
        if !report.remaining.is_empty() && options.uncordon_on_give_up && !stopped {
            report.uncordoned = self.cordon(false).is_ok();
        }
        Ok(report)
    }
}
