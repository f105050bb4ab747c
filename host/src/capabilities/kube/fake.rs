//! An in-memory Kubernetes API for tests: a discovery table, objects by
//! resource, namespace and name, recorded actions, injectable failures.
//! Patches are applied as the API server (and the SDK's fake) applies them.

use super::backend::{
    Change, EventNote, KubeBackend, KubeLimits, ListParams, Listed, ObjectList, PatchBody,
    PatchType, ResourceInfo, Run,
};
use crate::capabilities::call::Call;
use crate::capabilities::error::CapError;
use crate::capabilities::fakes::FakeLedger;
use crate::capabilities::gate::Permit;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

type ObjectKey = (String, Option<String>, String);

pub struct FakeKube {
    kinds: Vec<ResourceInfo>,
    /// Each object with its text, serialized when stored (as the watch cache
    /// holds its objects): a list hands out shared texts, not fresh copies.
    objects: Mutex<BTreeMap<ObjectKey, Listed>>,
    ledger: FakeLedger,
    changes: broadcast::Sender<Change>,
    requests: AtomicU64,
    /// What [`FakeKube::set_own_lease`] set.
    own_lease: std::sync::OnceLock<super::grants::OwnLease>,
    /// Pods ("<ns>/<name>") whose eviction a PodDisruptionBudget refuses,
    /// with its "<ns>/<name>".
    blocked: Mutex<BTreeMap<String, String>>,
    /// What [`FakeKube::recreate_after_get`] scripted.
    recreate: Mutex<Option<(String, Value)>>,
}

impl Default for FakeKube {
    /// Knows Nodes, Pods, ConfigMaps, Leases and Events.
    fn default() -> Self {
        let kind =
            |group: &str, version: &str, kind: &str, plural: &str, namespaced| ResourceInfo {
                group: group.into(),
                version: version.into(),
                kind: kind.into(),
                plural: plural.into(),
                namespaced,
            };
        FakeKube {
            kinds: vec![
                kind("", "v1", "Node", "nodes", false),
                kind("", "v1", "Pod", "pods", true),
                kind("", "v1", "ConfigMap", "configmaps", true),
                kind("coordination.k8s.io", "v1", "Lease", "leases", true),
                kind("events.k8s.io", "v1", "Event", "events", true),
            ],
            objects: Mutex::default(),
            ledger: FakeLedger::default(),
            changes: broadcast::channel(64).0,
            requests: AtomicU64::new(0),
            own_lease: std::sync::OnceLock::new(),
            blocked: Mutex::default(),
            recreate: Mutex::default(),
        }
    }
}

impl FakeKube {
    /// Put an object (its JSON, with metadata.name and, if namespaced, namespace).
    pub fn put(&self, plural: &str, object: Value) {
        let namespace = object["metadata"]["namespace"].as_str().map(str::to_string);
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let _ = self.changes.send(Change {
            resource: plural.into(),
            group: String::new(),
            namespace: namespace.clone(),
            name: name.clone(),
        });
        self.objects
            .lock()
            .unwrap()
            .insert((plural.into(), namespace, name), Listed::whole(object));
    }

    pub fn object(&self, plural: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let key = (
            plural.to_string(),
            namespace.map(str::to_string),
            name.to_string(),
        );
        let objects = self.objects.lock().unwrap();
        objects.get(&key).map(|o| o.view().into_owned())
    }

    /// Every mutation performed, in the SDK fake's words: "patch
    /// nodes/node-1 merge", "delete pods/default/web", "event nodes/node-1
    /// Labeled: ...".
    pub fn actions(&self) -> Vec<String> {
        self.ledger.actions()
    }

    /// Make `lease` Tend's own election Lease, as `[host.leader-election]` does (once).
    pub fn set_own_lease(&self, lease: super::grants::OwnLease) {
        assert!(
            self.own_lease.set(lease).is_ok(),
            "FakeKube::set_own_lease: already set"
        );
    }

    /// Refuse evicting pod `namespace`/`name` as PodDisruptionBudget
    /// `budget` ("<ns>/<name>") would (None: allow it again).
    pub fn block_eviction(&self, namespace: &str, name: &str, budget: Option<&str>) {
        let pod = format!("{namespace}/{name}");
        let mut blocked = self.blocked.lock().unwrap();
        match budget {
            Some(budget) => blocked.insert(pod, budget.to_string()),
            None => blocked.remove(&pod),
        };
    }

    /// Once the next `get` has answered, `object` (of `plural`) replaces the
    /// one of its name: another client deleted and recreated it between a
    /// plugin's check and its write.
    pub fn recreate_after_get(&self, plural: &str, object: Value) {
        *self.recreate.lock().unwrap() = Some((plural.to_string(), object));
    }

    pub fn fail_with(&self, error: Option<CapError>) {
        self.ledger.fail_with(error);
    }

    /// A request to the API server: counted, as the real backend counts
    /// what it sends, then failed if a failure is injected.
    fn request(&self) -> Result<(), CapError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.ledger.check()
    }

    /// "pods/default/web", "nodes/node-1": as the SDK's fake names it.
    fn target(r: &ResourceInfo, namespace: Option<&str>, name: &str) -> String {
        match namespace.filter(|_| r.namespaced) {
            Some(ns) => format!("{}/{ns}/{name}", r.plural),
            None => format!("{}/{name}", r.plural),
        }
    }

    fn key(r: &ResourceInfo, namespace: Option<&str>, name: &str) -> ObjectKey {
        (
            r.plural.clone(),
            namespace.filter(|_| r.namespaced).map(str::to_string),
            name.to_string(),
        )
    }
}

#[async_trait::async_trait]
impl KubeBackend for FakeKube {
    /// Every plugin sees the same fake: it neither throttles nor caches.
    fn for_plugin(self: Arc<Self>, _: &Arc<Call>, _: KubeLimits) -> Arc<dyn KubeBackend> {
        self
    }

    async fn resolve(&self, api_version: &str, kind: &str) -> Result<ResourceInfo, CapError> {
        self.kinds
            .iter()
            .find(|k| k.api_version() == api_version && k.kind == kind)
            .cloned()
            .ok_or_else(|| {
                CapError::NotFound(format!(
                    "the API server has no kind {kind} in {api_version}"
                ))
            })
    }

    async fn resource(&self, group: &str, plural: &str) -> Result<ResourceInfo, CapError> {
        self.kinds
            .iter()
            .find(|k| k.group == group && k.plural == plural)
            .cloned()
            .ok_or_else(|| {
                CapError::NotFound(format!(
                    "the API server has no resource {plural} in group {group:?}"
                ))
            })
    }

    async fn get(
        &self,
        r: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, CapError> {
        self.request()?;
        let answer = self
            .object(&r.plural, namespace.filter(|_| r.namespaced), name)
            .ok_or_else(|| {
                CapError::NotFound(format!(
                    "get {}/{name}: {} \"{name}\" not found (NotFound)",
                    r.plural, r.plural
                ))
            });
        if let Some((plural, object)) = self.recreate.lock().unwrap().take() {
            self.put(&plural, object);
        }
        answer
    }

    async fn list(
        &self,
        r: &ResourceInfo,
        namespace: Option<&str>,
        _: &ListParams,
    ) -> Result<ObjectList, CapError> {
        self.request()?;
        let objects = self.objects.lock().unwrap();
        let items = objects
            .iter()
            .filter(|((plural, ns, _), _)| {
                *plural == r.plural && (namespace.is_none() || ns.as_deref() == namespace)
            })
            .map(|(_, o)| o.clone())
            .collect();
        Ok(ObjectList {
            items,
            ..ObjectList::default()
        })
    }

    /// A dry run (as the API server's `dryRun=All`) answers the same and
    /// changes nothing: no object, no action.
    async fn create(
        &self,
        run: Run,
        r: &ResourceInfo,
        namespace: Option<&str>,
        object: Value,
    ) -> Result<Value, CapError> {
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        self.request()?;
        let key = Self::key(r, namespace, &name);
        let mut objects = self.objects.lock().unwrap();
        // As the API server: 409 AlreadyExists, in a dry run too.
        if objects.contains_key(&key) {
            return Err(CapError::Conflict(format!(
                "{} {name:?} already exists (AlreadyExists)",
                r.plural
            )));
        }
        if !run.dry() {
            self.ledger
                .record("create", &Self::target(r, namespace, &name));
            objects.insert(key, Listed::whole(object.clone()));
        }
        Ok(object)
    }

    async fn patch(
        &self,
        run: Run,
        r: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
        patch: PatchBody,
    ) -> Result<Value, CapError> {
        self.request()?;
        let target = Self::target(r, namespace, name);
        let mut objects = self.objects.lock().unwrap();
        let key = Self::key(r, namespace, name);
        // A JSON patch that does not apply changes nothing and is not
        // performed, as the API server answers 422.
        let patched = match objects.get(&key) {
            Some(object) => Ok(patched(&object.view(), &patch)
                .map_err(|e| CapError::Invalid(format!("kube patch {target}: {e}")))
                .and_then(|patched| {
                    uid_unchanged(&object.view(), &patched)?;
                    Ok(patched)
                })?),
            None => Err(CapError::NotFound(format!(
                "patch {}/{name}: not found (NotFound)",
                r.plural
            ))),
        };
        if !run.dry() {
            self.ledger
                .record("patch", &format!("{target} {}", patch.kind.name()));
        }
        let patched = patched?;
        if !run.dry() {
            objects.insert(key, Listed::whole(patched.clone()));
        }
        Ok(patched)
    }

    async fn delete(
        &self,
        run: Run,
        r: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
        uid: Option<&str>,
    ) -> Result<(), CapError> {
        self.request()?;
        let key = Self::key(r, namespace, name);
        let mut objects = self.objects.lock().unwrap();
        if let Some(object) = objects.get(&key) {
            uid_precondition(&object.view(), uid)?;
        }
        if !run.dry() {
            self.ledger
                .record("delete", &Self::target(r, namespace, name));
        }
        let found = if run.dry() {
            objects.contains_key(&key)
        } else {
            objects.remove(&key).is_some()
        };
        found.then_some(()).ok_or_else(|| {
            CapError::NotFound(format!("delete {}/{name}: not found (NotFound)", r.plural))
        })
    }

    /// An eviction removes the pod at once (the fake has no grace
    /// periods), unless [`FakeKube::block_eviction`] names it.
    async fn evict(
        &self,
        run: Run,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<(), CapError> {
        self.request()?;
        let pod = format!("{namespace}/{name}");
        let key = (
            "pods".to_string(),
            Some(namespace.to_string()),
            name.to_string(),
        );
        let mut objects = self.objects.lock().unwrap();
        // As the API server: the pod first, then its precondition, then its budget.
        let Some(found) = objects.get(&key) else {
            return Err(CapError::NotFound(format!(
                "evict pods/{pod}: pods \"{name}\" not found (NotFound)"
            )));
        };
        if found.view()["metadata"]["uid"].as_str().unwrap_or_default() != uid {
            return Err(CapError::NotFound(format!(
                "evict pods/{pod}: the pod checked is gone (another pod has its name now)"
            )));
        }
        if let Some(budget) = self.blocked.lock().unwrap().get(&pod) {
            return Err(CapError::BudgetExhausted(
                tend_rules::drain::blocked_message(
                    &pod,
                    Some(budget),
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                ),
            ));
        }
        if !run.dry() {
            self.ledger.record("evict", &format!("pods/{pod}"));
            objects.remove(&key);
        }
        Ok(())
    }

    async fn emit_event(
        &self,
        _: Permit,
        r: &ResourceInfo,
        object: &Value,
        note: &EventNote,
    ) -> Result<(), CapError> {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let namespace = object["metadata"]["namespace"].as_str();
        self.request()?;
        self.ledger.record(
            "event",
            &format!(
                "{} {}: {}",
                Self::target(r, namespace, name),
                note.reason,
                note.message
            ),
        );
        Ok(())
    }

    async fn watch(
        &self,
        _: &ResourceInfo,
        _: Option<&str>,
        _: Option<&str>,
        _: Option<&str>,
    ) -> Result<broadcast::Receiver<Change>, CapError> {
        Ok(self.changes.subscribe())
    }

    fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// The fake's node is "node-1".
    fn node_name(&self) -> &str {
        "node-1"
    }

    fn own_lease(&self) -> Option<&tend_rules::kube::OwnLease> {
        self.own_lease.get()
    }

    fn watches(&self) -> usize {
        self.changes.receiver_count()
    }
}

/// As the API server: a patch may not change the object's UID (422, "field
/// is immutable"): one naming another object's UID changes nothing.
fn uid_unchanged(stored: &Value, patched: &Value) -> Result<(), CapError> {
    let (was, is) = (&stored["metadata"]["uid"], &patched["metadata"]["uid"]);
    if was != is {
        return Err(CapError::Invalid(format!(
            "metadata.uid: Invalid value: {is}: field is immutable"
        )));
    }
    Ok(())
}

/// As the API server: a delete whose precondition names a UID (409) applies
/// only to the object that has it.
fn uid_precondition(stored: &Value, uid: Option<&str>) -> Result<(), CapError> {
    let has = stored["metadata"]["uid"].as_str().unwrap_or_default();
    match uid {
        Some(uid) if uid != has => Err(CapError::Conflict(format!(
            "Precondition failed: UID in precondition: {uid}, UID in object meta: {has}"
        ))),
        _ => Ok(()),
    }
}

/// `object` with `patch` applied as the API server applies it: a merge patch
/// (RFC 7386), a JSON patch (RFC 6902, all or nothing) or a server-side
/// apply, which without field managers is a merge; the error says why a JSON
/// patch does not apply, in the SDK fake's words.
fn patched(object: &Value, patch: &PatchBody) -> Result<Value, String> {
    let mut patched = object.clone();
    match patch.kind {
        PatchType::Merge | PatchType::Apply => json_patch::merge(&mut patched, &patch.body),
        PatchType::Json => {
            let operations: json_patch::Patch = serde_json::from_value(patch.body.clone())
                .map_err(|e| {
                    format!("not a JSON patch ({e}); send a list of RFC 6902 operations")
                })?;
            json_patch::patch(&mut patched, &operations).map_err(|e| {
                format!("the JSON patch does not apply ({e}); patch paths that exist, or `add` their parents first")
            })?;
        }
    }
    Ok(patched)
}
