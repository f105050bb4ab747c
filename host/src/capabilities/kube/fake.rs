//! An in-memory Kubernetes API for tests: a discovery table, objects by
//! resource, namespace and name, recorded actions, injectable failures.

use super::backend::{Change, EventNote, KubeBackend, ListQuery, ObjectList, PatchBody, PatchKind, ResourceInfo};
use crate::capabilities::call::Call;
use crate::capabilities::error::CapError;
use crate::capabilities::gate::Permit;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::broadcast;

type ObjectKey = (String, Option<String>, String);

pub struct FakeKube {
    kinds: Vec<ResourceInfo>,
    objects: Mutex<BTreeMap<ObjectKey, Value>>,
    actions: Mutex<Vec<String>>,
    failure: Mutex<Option<CapError>>,
    changes: broadcast::Sender<Change>,
    requests: AtomicU64,
    /// What [`FakeKube::set_own_lease`] set.
    own_lease: std::sync::OnceLock<super::grants::OwnLease>,
}

impl Default for FakeKube {
    /// Knows Nodes, Pods, ConfigMaps, Leases and Events.
    fn default() -> Self {
        let kind = |group: &str, version: &str, kind: &str, plural: &str, namespaced| ResourceInfo {
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
            actions: Mutex::default(),
            failure: Mutex::default(),
            changes: broadcast::channel(64).0,
            requests: AtomicU64::new(0),
            own_lease: std::sync::OnceLock::new(),
        }
    }
}

impl FakeKube {
    /// Put an object (its JSON, with metadata.name and, if namespaced, namespace).
    pub fn put(&self, plural: &str, object: Value) {
        let namespace = object["metadata"]["namespace"].as_str().map(str::to_string);
        let name = object["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let _ = self.changes.send(Change {
            resource: plural.into(),
            group: String::new(),
            namespace: namespace.clone(),
            name: name.clone(),
        });
        self.objects.lock().unwrap().insert((plural.into(), namespace, name), object);
    }

    pub fn object(&self, plural: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let key = (plural.to_string(), namespace.map(str::to_string), name.to_string());
        self.objects.lock().unwrap().get(&key).cloned()
    }

    /// Every mutation performed: "patch nodes/node-1 merge", "event nodes/node-1 Labeled".
    pub fn actions(&self) -> Vec<String> {
        self.actions.lock().unwrap().clone()
    }

    /// Make `lease` Tend's own election Lease, as `[host.leader-election]` does (once).
    pub fn set_own_lease(&self, lease: super::grants::OwnLease) {
        assert!(self.own_lease.set(lease).is_ok(), "FakeKube::set_own_lease: already set");
    }

    pub fn fail_with(&self, error: Option<CapError>) {
        *self.failure.lock().unwrap() = error;
    }

    fn check(&self) -> Result<(), CapError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        match self.failure.lock().unwrap().clone() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    fn act(&self, action: String) -> Result<(), CapError> {
        self.check()?;
        self.actions.lock().unwrap().push(action);
        Ok(())
    }

    fn key(r: &ResourceInfo, namespace: Option<&str>, name: &str) -> ObjectKey {
        (r.plural.clone(), namespace.filter(|_| r.namespaced).map(str::to_string), name.to_string())
    }
}

#[async_trait::async_trait]
impl KubeBackend for FakeKube {
    /// Every plugin sees the same fake: it neither throttles nor caches.
    fn for_plugin(self: Arc<Self>, _: &Arc<Call>) -> Arc<dyn KubeBackend> {
        self
    }

    async fn resolve(&self, api_version: &str, kind: &str) -> Result<ResourceInfo, CapError> {
        self.kinds
            .iter()
            .find(|k| k.api_version() == api_version && k.kind == kind)
            .cloned()
            .ok_or_else(|| CapError::NotFound(format!("the API server has no kind {kind} in {api_version}")))
    }

    async fn resource(&self, group: &str, plural: &str) -> Result<ResourceInfo, CapError> {
        self.kinds
            .iter()
            .find(|k| k.group == group && k.plural == plural)
            .cloned()
            .ok_or_else(|| CapError::NotFound(format!("the API server has no resource {plural} in group {group:?}")))
    }

    async fn get(&self, r: &ResourceInfo, namespace: Option<&str>, name: &str) -> Result<Value, CapError> {
        self.check()?;
        let objects = self.objects.lock().unwrap();
        objects
            .get(&Self::key(r, namespace, name))
            .cloned()
            .ok_or_else(|| CapError::NotFound(format!("get {}/{name}: {} \"{name}\" not found (NotFound)", r.plural, r.plural)))
    }

    async fn list(&self, r: &ResourceInfo, namespace: Option<&str>, _: &ListQuery) -> Result<ObjectList, CapError> {
        self.check()?;
        let objects = self.objects.lock().unwrap();
        let items = objects
            .iter()
            .filter(|((plural, ns, _), _)| *plural == r.plural && (namespace.is_none() || ns.as_deref() == namespace))
            .map(|(_, o)| o.clone())
            .collect();
        Ok(ObjectList {
            items,
            ..ObjectList::default()
        })
    }

    async fn create(&self, permit: Permit, r: &ResourceInfo, namespace: Option<&str>, object: Value) -> Result<Value, CapError> {
        let name = object["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let result = self.act(format!("create {}/{name}", r.plural)).map(|()| {
            self.objects.lock().unwrap().insert(Self::key(r, namespace, &name), object.clone());
            object
        });
        permit.finish_with(&result);
        result
    }

    async fn patch(
        &self,
        permit: Permit,
        r: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
        patch: PatchBody,
    ) -> Result<Value, CapError> {
        let result = self.act(format!("patch {}/{name} {}", r.plural, patch.kind.name())).and_then(|()| {
            let mut objects = self.objects.lock().unwrap();
            let object = objects
                .get_mut(&Self::key(r, namespace, name))
                .ok_or_else(|| CapError::NotFound(format!("patch {}/{name}: not found (NotFound)", r.plural)))?;
            if patch.kind == PatchKind::Merge {
                json_patch::merge(object, &patch.body);
            }
            Ok(object.clone())
        });
        permit.finish_with(&result);
        result
    }

    async fn delete(&self, permit: Permit, r: &ResourceInfo, namespace: Option<&str>, name: &str) -> Result<(), CapError> {
        let result = self.act(format!("delete {}/{name}", r.plural)).and_then(|()| {
            self.objects
                .lock()
                .unwrap()
                .remove(&Self::key(r, namespace, name))
                .map(drop)
                .ok_or_else(|| CapError::NotFound(format!("delete {}/{name}: not found (NotFound)", r.plural)))
        });
        permit.finish_with(&result);
        result
    }

    async fn emit_event(&self, permit: Permit, r: &ResourceInfo, object: &Value, note: &EventNote) -> Result<(), CapError> {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let result = self.act(format!("event {}/{name} {}: {}", r.plural, note.reason, note.message));
        permit.finish_with(&result);
        result
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

    fn own_lease(&self) -> Option<&super::grants::OwnLease> {
        self.own_lease.get()
    }

    fn watches(&self) -> usize {
        self.changes.receiver_count()
    }
}
