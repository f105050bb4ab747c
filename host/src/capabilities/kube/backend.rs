//! The Kubernetes backend: objects as JSON, kinds resolved by discovery.
//! Mutations consume a [`Permit`] from the mutation gate.

use crate::capabilities::call::Call;
use crate::capabilities::error::CapError;
use crate::capabilities::gate::Permit;
use serde_json::Value;
use std::sync::Arc;

/// A kind as discovery resolves it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResourceInfo {
    /// "" for the core group.
    pub group: String,
    pub version: String,
    pub kind: String,
    /// "nodes".
    pub plural: String,
    pub namespaced: bool,
}

impl ResourceInfo {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListQuery {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub limit: Option<u32>,
    pub continue_token: Option<String>,
}

impl ListQuery {
    /// A paged list goes to the API server; others can be served from a
    /// watch cache.
    pub fn cacheable(&self) -> bool {
        self.limit.is_none() && self.continue_token.is_none()
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObjectList {
    pub items: Vec<Value>,
    pub continue_token: Option<String>,
    pub resource_version: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Merge,
    Json,
    Apply,
}

impl PatchKind {
    pub fn name(self) -> &'static str {
        match self {
            PatchKind::Merge => "merge",
            PatchKind::Json => "json",
            PatchKind::Apply => "apply",
        }
    }
}

/// A patch as the plugin sent it, with the field manager for server-side apply.
#[derive(Debug, Clone, PartialEq)]
pub struct PatchBody {
    pub kind: PatchKind,
    pub body: Value,
    /// "tend-<plugin>".
    pub manager: String,
}

/// An object of a watched resource was added, changed or deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub resource: String,
    pub group: String,
    pub namespace: Option<String>,
    pub name: String,
}

/// What an Event says about an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventNote {
    pub warning: bool,
    pub reason: String,
    pub message: String,
    /// Who reports: "tend-<plugin>".
    pub reporter: String,
}

#[async_trait::async_trait]
pub trait KubeBackend: Send + Sync + 'static {
    /// The backend as one plugin's reconcile uses it: its requests wait for
    /// its own and the host's tokens (within `call`'s deadline), the caches
    /// its lists start and its Events are charged to it. The host's own calls
    /// (watch triggers) use the backend itself.
    fn for_plugin(self: Arc<Self>, call: &Arc<Call>) -> Arc<dyn KubeBackend>;
    async fn resolve(&self, api_version: &str, kind: &str) -> Result<ResourceInfo, CapError>;
    /// A resource by group and plural name (for grants and triggers).
    async fn resource(&self, group: &str, plural: &str) -> Result<ResourceInfo, CapError>;
    async fn get(&self, r: &ResourceInfo, namespace: Option<&str>, name: &str) -> Result<Value, CapError>;
    async fn list(&self, r: &ResourceInfo, namespace: Option<&str>, query: &ListQuery) -> Result<ObjectList, CapError>;
    async fn create(&self, permit: Permit, r: &ResourceInfo, namespace: Option<&str>, object: Value) -> Result<Value, CapError>;
    async fn patch(
        &self,
        permit: Permit,
        r: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
        patch: PatchBody,
    ) -> Result<Value, CapError>;
    async fn delete(&self, permit: Permit, r: &ResourceInfo, namespace: Option<&str>, name: &str) -> Result<(), CapError>;
    /// Record an Event about `object` (its JSON, for its uid and reference),
    /// raising the count of an identical recent one.
    async fn emit_event(&self, permit: Permit, r: &ResourceInfo, object: &Value, note: &EventNote) -> Result<(), CapError>;
    /// Changes of `r` (in `namespace`, matching `labels` and `fields`), from
    /// the shared watch cache; the cache lives while a receiver does.
    async fn watch(
        &self,
        r: &ResourceInfo,
        namespace: Option<&str>,
        labels: Option<&str>,
        fields: Option<&str>,
    ) -> Result<tokio::sync::broadcast::Receiver<Change>, CapError>;
    /// Requests made to the API server for plugin calls (watches not counted).
    fn requests(&self) -> u64;
    /// This host's node name: what `$NODE` in a grant stands for.
    fn node_name(&self) -> &str;
    /// `[host.leader-election]`'s Lease, which no plugin may write.
    fn own_lease(&self) -> Option<&super::grants::OwnLease> {
        None
    }
    /// Watches held open on the API server by the shared cache.
    fn watches(&self) -> usize;
    /// The series of the bounds (caches, request rate, discovery misses,
    /// Events) for `/metrics`, whole families.
    fn bounds_metrics(&self) -> String {
        String::new()
    }
}

/// The kube backend's own series for `/metrics`.
pub fn render_metrics(backend: &dyn KubeBackend) -> String {
    format!(
        "# HELP tend_kube_api_requests_total Kubernetes API requests made for plugin calls (reads served by the watch cache are none).\n\
         # TYPE tend_kube_api_requests_total counter\n\
         tend_kube_api_requests_total {}\n\
         # HELP tend_kube_watches Watches the shared cache holds open on the API server.\n\
         # TYPE tend_kube_watches gauge\n\
         tend_kube_watches {}\n",
        backend.requests(),
        backend.watches()
    ) + &backend.bounds_metrics()
}
