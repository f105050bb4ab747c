//! The Kubernetes backend: objects as JSON, kinds resolved by discovery.
//! Mutations require a [`Permit`] from the mutation gate, or run as the API
//! server's dry run ([`Run`]).

use crate::capabilities::call::Call;
use crate::capabilities::error::CapError;
use crate::capabilities::gate::{Performed, Permit};
use crate::exposition::{Exposition, Kind};
use crate::wit::kube as wit_kube;
use serde_json::Value;
use std::sync::Arc;

/// `[plugins.<name>.limits] kube-*`: one plugin's API requests and watch caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubeLimits {
    /// Requests per second (a token bucket kept across reconciles; a call
    /// waits for a token, within the reconcile's deadline).
    #[serde(rename = "kube-qps")]
    pub qps: u32,
    /// Requests the bucket holds: a reconcile may make this many at once.
    #[serde(rename = "kube-burst")]
    pub burst: u32,
    /// Watch caches this plugin's lists may start (beyond: direct reads).
    #[serde(rename = "kube-caches")]
    pub caches: u32,
    /// Bytes (serialized objects) of the watch caches this plugin started
    /// (beyond: no new caches, direct reads).
    #[serde(rename = "kube-cache-bytes")]
    pub cache_bytes: crate::units::ByteSize,
}

impl Default for KubeLimits {
    fn default() -> Self {
        // client-go's defaults for a whole client, here per plugin.
        KubeLimits {
            qps: 5,
            burst: 10,
            caches: 16,
            cache_bytes: crate::units::ByteSize(32 << 20),
        }
    }
}

// The plugin's own words, as the WIT generates them.
pub use crate::wit::kube::{EventType, ListParams, ObjectKey, PatchType};

/// A kind as discovery resolves it (host-only: plugins name kinds by
/// api-version and kind, never by resource).
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

/// The unfiltered, unpaged list (the generated record has no `Default` of
/// its own).
impl Default for ListParams {
    fn default() -> Self {
        ListParams {
            label_selector: None,
            field_selector: None,
            limit: None,
            continue_token: None,
        }
    }
}

impl ListParams {
    /// A paged list goes to the API server; others can be served from a
    /// watch cache.
    pub fn cacheable(&self) -> bool {
        self.limit.is_none() && self.continue_token.is_none()
    }
}

/// One listed object: its JSON text, shared (not copied) with the watch cache
/// that holds it, and what the grant's re-check of a list reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    pub json: Arc<str>,
    view: View,
}

#[derive(Debug, Clone, PartialEq)]
enum View {
    /// Read from the API server: the object itself, parsed already (shared:
    /// a list handed out again costs no deep copy).
    Whole(Arc<Value>),
    /// From a watch cache: compact JSON of its metadata (name, namespace,
    /// labels) and the fields its cache's field selector names, parsed when
    /// a list re-checks it (a parsed copy of every cached object would take
    /// more memory than its text).
    Summary(Arc<str>),
}

impl Listed {
    /// An object read from the API server (serialized here, once).
    pub fn whole(object: Value) -> Listed {
        Listed {
            json: object.to_string().into(),
            view: View::Whole(Arc::new(object)),
        }
    }

    /// A cached object: its text and its summary (see [`View::Summary`]).
    pub fn summarized(json: Arc<str>, summary: Arc<str>) -> Listed {
        Listed {
            json,
            view: View::Summary(summary),
        }
    }

    /// What the grant's re-check reads: the object, or its summary.
    pub fn view(&self) -> std::borrow::Cow<'_, Value> {
        match &self.view {
            View::Whole(object) => std::borrow::Cow::Borrowed(object),
            View::Summary(text) => {
                std::borrow::Cow::Owned(serde_json::from_str(text).unwrap_or_default())
            }
        }
    }

    /// Bytes held: the text, and the summary if any.
    pub fn bytes(&self) -> usize {
        self.json.len()
            + match &self.view {
                View::Whole(_) => 0,
                View::Summary(text) => text.len(),
            }
    }
}

/// A list as the backend answers it. Host-only, unlike the WIT's
/// `object-list`: its items share the watch cache's text and carry what the
/// grant's re-check reads, where the generated list owns plain strings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObjectList {
    pub items: Vec<Listed>,
    pub continue_token: Option<String>,
    pub resource_version: String,
}

// The WIT patch type as the rules read its body: `patch_shape`, written once
// in the rules crate for both bindings.
tend_rules::patch_shape_of!(wit_kube);

impl PatchType {
    /// As the plan's detail and the fake's actions spell it.
    pub fn name(self) -> &'static str {
        patch_shape(self).name()
    }
}

impl EventType {
    /// The Event's `type` as Kubernetes spells it.
    pub fn name(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// A patch as the plugin sent it, parsed, with the field manager for
/// server-side apply: host-only, as the WIT passes the body as text and
/// knows no manager.
#[derive(Debug, Clone, PartialEq)]
pub struct PatchBody {
    pub kind: PatchType,
    pub body: Value,
    /// "tend-<plugin>".
    pub manager: String,
}

/// How a mutation goes to the API server: performed under the gate's permit
/// (the gate journals its result), or sent with Kubernetes' server-side dry
/// run (`dryRun=All`): validated and answered as it would be, nothing
/// persisted, no permit needed.
pub enum Run {
    Perform(Permit),
    DryRun,
}

impl Run {
    pub fn dry(&self) -> bool {
        matches!(self, Run::DryRun)
    }
}

/// A performed create or patch answers the object; the journal says "ok".
impl Performed for Value {}

/// An object of a watched resource was added, changed or deleted (host-only:
/// plugins see it as a trigger, not as a WIT record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub resource: String,
    pub group: String,
    pub namespace: Option<String>,
    pub name: String,
}

/// What an Event says about an object, with who reports it (the WIT's
/// `emit-event` passes these as arguments, not as one record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventNote {
    pub event_type: EventType,
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
    fn for_plugin(self: Arc<Self>, call: &Arc<Call>, limits: KubeLimits) -> Arc<dyn KubeBackend>;
    async fn resolve(&self, api_version: &str, kind: &str) -> Result<ResourceInfo, CapError>;
    /// A resource by group and plural name (for grants and triggers).
    async fn resource(&self, group: &str, plural: &str) -> Result<ResourceInfo, CapError>;
    async fn get(
        &self,
        r: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, CapError>;
    async fn list(
        &self,
        r: &ResourceInfo,
        namespace: Option<&str>,
        query: &ListParams,
    ) -> Result<ObjectList, CapError>;
    /// The object as created (or, in a dry run, as it would be).
    async fn create(
        &self,
        run: Run,
        r: &ResourceInfo,
        namespace: Option<&str>,
        object: Value,
    ) -> Result<Value, CapError>;
    /// The object as patched (or, in a dry run, as it would be).
    async fn patch(
        &self,
        run: Run,
        r: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
        patch: PatchBody,
    ) -> Result<Value, CapError>;
    /// In a dry run: not-found when the object does not exist. `uid`: the
    /// object the grant was checked on, a precondition (conflict when the
    /// object under the name is another one now).
    async fn delete(
        &self,
        run: Run,
        r: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
        uid: Option<&str>,
    ) -> Result<(), CapError>;
    /// Evict pod `namespace`/`name` through the Eviction API (policy/v1).
    /// A PodDisruptionBudget's refusal (429) is `budget-exhausted`, its
    /// message starting "[pdb:<ns>/<name>] blocked by PodDisruptionBudget <ns>/<name>"
    /// ([`tend_rules::drain::blocked_message`]); in a dry run the server
    /// checks the same and changes nothing.
    /// `uid`: the pod that was checked, as the eviction's precondition (a
    /// pod recreated under the name since is another pod: not-found).
    async fn evict(&self, run: Run, namespace: &str, name: &str, uid: &str)
    -> Result<(), CapError>;
    /// Record an Event about `object` (its JSON, for its uid and reference),
    /// raising the count of an identical recent one.
    async fn emit_event(
        &self,
        permit: Permit,
        r: &ResourceInfo,
        object: &Value,
        note: &EventNote,
    ) -> Result<(), CapError>;
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
    fn own_lease(&self) -> Option<&tend_rules::kube::OwnLease> {
        None
    }
    /// `[host.fleet] namespace`: its `tend-` Leases no plugin may write.
    fn fleet_namespace(&self) -> Option<&str> {
        None
    }
    /// Watches held open on the API server by the shared cache.
    fn watches(&self) -> usize;
    /// The series of the bounds (caches, request rate, discovery misses,
    /// Events) for `/metrics`, whole families.
    fn bounds_metrics(&self, _families: &Exposition) {}
}

/// The kube backend's own series for `/metrics`.
pub fn render_metrics(backend: &dyn KubeBackend) -> String {
    let families = Exposition::default();
    families.scalar(
        Kind::Counter,
        "tend_kube_api_requests_total",
        "Kubernetes API requests made for plugin calls (reads served by the watch cache are none).",
        backend.requests() as f64,
    );
    families.scalar(
        Kind::Gauge,
        "tend_kube_watches",
        "Watches the shared cache holds open on the API server.",
        backend.watches() as f64,
    );
    backend.bounds_metrics(&families);
    families.text()
}
