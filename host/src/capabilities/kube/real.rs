//! The Kubernetes API through kube-rs: one client, discovery cached per kind
//! (misses for a window), reads of cacheable lists from the shared watch
//! cache, counted requests. Each plugin's calls go through its own view of
//! the backend ([`KubeBackend::for_plugin`]), which waits for the plugin's and
//! the host's request tokens and charges the caches its lists start.

use super::adapter::KubeSettings;
use super::backend::{
    Change, EventNote, KubeBackend, KubeLimits, ListParams, Listed, ObjectList, PatchBody,
    PatchType, ResourceInfo, Run,
};
use super::cache::{CacheKey, CacheStats, Charge, HostBounds, WatchCache};
use super::discovery::{Discovery, Known};
use super::events::Correlator;
use crate::capabilities::call::Call;
use crate::capabilities::error::CapError;
use crate::capabilities::gate::Permit;
use crate::capabilities::rate::{Asker, Throttle, Waits};
use crate::exposition::{Exposition, Kind};
use crate::units::ByteSize;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions,
};
use kube::discovery::Scope;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::OnceCell;

impl Default for KubeSettings {
    /// The host-wide bounds of plugin traffic (docs/security.md): client-go
    /// gives a whole client 5 QPS / burst 10; each plugin gets that, and all
    /// plugins together 20 / 40, so a node's share of the API server stays
    /// small at fleet scale. 64 caches (one watch each) and 256 MiB of cached
    /// objects for all plugins.
    fn default() -> Self {
        KubeSettings {
            kubeconfig: None,
            cache_memory: ByteSize(256 << 20),
            caches: 64,
            qps: 20,
            burst: 40,
            own_lease: None,
            fleet_namespace: None,
        }
    }
}

/// What every plugin's view shares.
struct Shared {
    kubeconfig: Option<PathBuf>,
    /// Plugin calls and the watch caches: it does not retry a failing API
    /// server itself, so a call answers `unavailable` at once (the plugin's
    /// next pass, or the watch's own backoff, retries) instead of waiting
    /// out its deadline, and a cache learns at once that its watch fails.
    client: OnceCell<kube::Client>,
    kinds: Mutex<HashMap<(String, String), ResourceInfo>>,
    discovery: Discovery,
    cache: WatchCache,
    throttle: Throttle,
    events: Correlator,
    requests: AtomicU64,
    node: String,
    /// `[host.leader-election]`'s Lease (no plugin writes it).
    own_lease: Option<tend_rules::kube::OwnLease>,
    fleet_namespace: Option<String>,
}

/// The backend, as the host (triggers) or as one plugin's reconcile (`call`).
pub struct RealKube {
    shared: Arc<Shared>,
    call: Option<Arc<Call>>,
    /// The plugin's `kube-*` limits (with `call`).
    limits: KubeLimits,
}

/// Objects a page of a direct read of a whole list holds.
const DIRECT_PAGE: u32 = 500;

impl RealKube {
    pub fn new(settings: &KubeSettings, node: &str) -> Self {
        RealKube {
            shared: Arc::new(Shared {
                kubeconfig: settings.kubeconfig.clone(),
                client: OnceCell::new(),
                kinds: Mutex::default(),
                discovery: Discovery::default(),
                cache: WatchCache::new(HostBounds {
                    caches: settings.caches as usize,
                    memory: settings.cache_memory.0,
                }),
                throttle: Throttle::new("kube", settings.qps, settings.burst),
                events: Correlator::default(),
                requests: AtomicU64::new(0),
                node: node.to_string(),
                own_lease: settings.own_lease.clone(),
                fleet_namespace: settings.fleet_namespace.clone(),
            }),
            call: None,
            limits: KubeLimits::default(),
        }
    }

    pub(crate) async fn client(&self) -> Result<kube::Client, CapError> {
        let agent = user_agent(&self.shared.node);
        let kubeconfig = self.shared.kubeconfig.as_deref();
        self.shared
            .client
            .get_or_try_init(|| connect(kubeconfig, &agent, false))
            .await
            .cloned()
    }

    /// Before each request to the API server: wait for a token (the plugin's
    /// and the host's), then count it.
    pub(crate) async fn request(&self) -> Result<(), CapError> {
        let asker = self.call.as_ref().map(|call| Asker {
            plugin: &call.plugin,
            qps: self.limits.qps,
            burst: self.limits.burst,
            within: call.remaining(),
        });
        self.shared.throttle.acquire(asker.as_ref()).await?;
        self.shared.requests.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn charge(&self) -> Option<Charge<'_>> {
        self.call.as_ref().map(|call| Charge {
            plugin: &call.plugin,
            caches: self.limits.caches,
            bytes: self.limits.cache_bytes.0,
        })
    }

    async fn api(
        &self,
        r: &ResourceInfo,
        namespace: Option<&str>,
    ) -> Result<Api<DynamicObject>, CapError> {
        let client = self.client().await?;
        let ar = ApiResource {
            group: r.group.clone(),
            version: r.version.clone(),
            api_version: r.api_version(),
            kind: r.kind.clone(),
            plural: r.plural.clone(),
        };
        Ok(match namespace {
            Some(ns) if r.namespaced => Api::namespaced_with(client, ns, &ar),
            _ => Api::all_with(client, &ar),
        })
    }

    /// The kinds `api_version` serves (None: the API server has no such group version).
    async fn discover(
        &self,
        client: &kube::Client,
        api_version: &str,
    ) -> Result<Option<Vec<ResourceInfo>>, CapError> {
        self.request().await?;
        let (group, version) = split_api_version(api_version);
        let listed = if group.is_empty() {
            client.list_core_api_resources(version).await
        } else {
            client.list_api_group_resources(api_version).await
        };
        let list = match listed {
            Ok(list) => list,
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(None),
            Err(e) => return Err(map_error("discovery", e)),
        };
        Ok(Some(
            list.resources
                .iter()
                .filter(|r| !r.name.contains('/'))
                .map(|r| ResourceInfo {
                    group: r.group.clone().unwrap_or_else(|| group.to_string()),
                    version: r.version.clone().unwrap_or_else(|| version.to_string()),
                    kind: r.kind.clone(),
                    plural: r.name.clone(),
                    namespaced: r.namespaced,
                })
                .collect(),
        ))
    }

    /// Every group version the API server serves ("v1", "apps/v1").
    async fn group_versions(
        &self,
        client: &kube::Client,
    ) -> Result<std::collections::HashSet<String>, CapError> {
        self.request().await?;
        let core = client
            .list_core_api_versions()
            .await
            .map_err(|e| map_error("discovery", e))?;
        self.request().await?;
        let groups = client
            .list_api_groups()
            .await
            .map_err(|e| map_error("discovery", e))?;
        Ok(core
            .versions
            .into_iter()
            .chain(
                groups
                    .groups
                    .into_iter()
                    .flat_map(|g| g.versions.into_iter().map(|v| v.group_version)),
            )
            .collect())
    }
}

/// A client: `kubeconfig` (`[host.kube] kubeconfig`), else in-cluster, else
/// `KUBECONFIG` (or ~/.kube/config). `agent` says who calls in the API
/// server's audit log ("tend/0.1.0 (node-1)").
/// A client of the API server; `retry_unavailable`: it retries requests
/// answered 429, 503 or 504 itself, with a backoff (kube's default), so the
/// caller sees them only once that gives up, minutes later.
pub async fn connect(
    kubeconfig: Option<&std::path::Path>,
    agent: &str,
    retry_unavailable: bool,
) -> Result<kube::Client, CapError> {
    let mut config = match kubeconfig {
        Some(path) => {
            let unreadable = |e: &dyn std::fmt::Display| CapError::Unavailable(format!("[host.kube] kubeconfig {}: {e}", path.display()));
            let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|e| unreadable(&e))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(|e| unreadable(&e))?
        }
        None => match kube::Config::incluster() {
            Ok(config) => config,
            Err(_) => kube::Config::from_kubeconfig(&Default::default()).await.map_err(|e| {
                CapError::Unavailable(format!(
                    "no Kubernetes API: not in a cluster, and no kubeconfig ({e}); set [host.kube] kubeconfig"
                ))
            })?,
        },
    };
    if let Ok(agent) = http::HeaderValue::from_str(agent) {
        config.headers.push((http::header::USER_AGENT, agent));
    }
    config.default_retry = retry_unavailable;
    kube::Client::try_from(config).map_err(|e| CapError::Unavailable(format!("kube client: {e}")))
}

/// The User-Agent of this host's requests.
pub fn user_agent(node: &str) -> String {
    format!("tend/{} ({node})", env!("CARGO_PKG_VERSION"))
}

/// kube's error as the one error variant, with the API's own reason.
pub fn map_error(what: &str, e: kube::Error) -> CapError {
    match e {
        kube::Error::Api(status) => {
            // A server's words: inert and bounded.
            let said = crate::text::cut(
                crate::text::inert(&format!("{} ({})", status.message, status.reason)).into_owned(),
                tend_rules::drain::MAX_SERVER_TEXT,
            );
            let message = format!("{what}: {said}");
            match status.code {
                404 => CapError::NotFound(message),
                409 => CapError::Conflict(message),
                410 => CapError::Conflict(format!(
                    "{message}: the resource version is too old; list again"
                )),
                400 | 422 => CapError::Invalid(message),
                401 | 403 => CapError::Denied(format!(
                    "{message}: the API server refused Tend's own credentials (check its RBAC: `tend rbac`)"
                )),
                408 | 504 => CapError::Timeout(message),
                _ => CapError::Other(message),
            }
        }
        other => CapError::Unavailable(format!(
            "{what}: the Kubernetes API did not answer: {other}"
        )),
    }
}

fn to_value(object: DynamicObject) -> Result<Value, CapError> {
    serde_json::to_value(object).map_err(|e| CapError::Other(e.to_string()))
}

fn from_value(object: Value) -> Result<DynamicObject, CapError> {
    serde_json::from_value(object)
        .map_err(|e| CapError::Invalid(format!("not a Kubernetes object: {e}")))
}

fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

#[async_trait::async_trait]
impl KubeBackend for RealKube {
    fn for_plugin(self: Arc<Self>, call: &Arc<Call>, limits: KubeLimits) -> Arc<dyn KubeBackend> {
        Arc::new(RealKube {
            shared: self.shared.clone(),
            call: Some(call.clone()),
            limits,
        })
    }

    async fn resolve(&self, api_version: &str, kind: &str) -> Result<ResourceInfo, CapError> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(info) = self.shared.kinds.lock().unwrap().get(&key) {
            return Ok(info.clone());
        }
        let absent = || {
            CapError::NotFound(format!(
                "the API server has no kind {kind} in {api_version}"
            ))
        };
        let discovery = &self.shared.discovery;
        let info = match discovery.known(api_version, kind, Instant::now()) {
            Known::Found(info) => info,
            Known::Absent => return Err(absent()),
            Known::Ask => {
                let client = self.client().await?;
                let kinds = self.discover(&client, api_version).await?;
                let found = kinds.iter().flatten().find(|r| r.kind == kind).cloned();
                let missing_version = kinds.is_none();
                discovery.listed(api_version, kinds, Instant::now());
                if missing_version && discovery.versions_due(Instant::now()) {
                    // One unknown group version: list them all, so the next ones cost nothing.
                    let versions = self.group_versions(&client).await?;
                    discovery.versions_listed(versions, Instant::now());
                }
                found.ok_or_else(absent)?
            }
        };
        self.shared.kinds.lock().unwrap().insert(key, info.clone());
        Ok(info)
    }

    async fn resource(&self, group: &str, plural: &str) -> Result<ResourceInfo, CapError> {
        if let Some(info) = self
            .shared
            .kinds
            .lock()
            .unwrap()
            .values()
            .find(|i| i.group == group && i.plural == plural)
        {
            return Ok(info.clone());
        }
        let client = self.client().await?;
        self.request().await?;
        let api_group = kube::discovery::group(&client, group)
            .await
            .map_err(|e| map_error("discovery", e))?;
        let (ar, caps) = api_group
            .recommended_resources()
            .into_iter()
            .find(|(ar, _)| ar.plural == plural)
            .ok_or_else(|| {
                CapError::NotFound(format!(
                    "the API server has no resource {plural} in group {group:?}"
                ))
            })?;
        let info = ResourceInfo {
            group: ar.group,
            version: ar.version,
            kind: ar.kind,
            plural: ar.plural,
            namespaced: caps.scope == Scope::Namespaced,
        };
        let key = (info.api_version(), info.kind.clone());
        self.shared.kinds.lock().unwrap().insert(key, info.clone());
        Ok(info)
    }

    async fn get(
        &self,
        r: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, CapError> {
        let api = self.api(r, namespace).await?;
        self.request().await?;
        to_value(
            api.get(name)
                .await
                .map_err(|e| map_error(&format!("get {}/{name}", r.plural), e))?,
        )
    }

    async fn list(
        &self,
        r: &ResourceInfo,
        namespace: Option<&str>,
        query: &ListParams,
    ) -> Result<ObjectList, CapError> {
        if query.cacheable() {
            let key = CacheKey {
                resource: r.clone(),
                namespace: namespace.map(str::to_string),
                labels: query.label_selector.clone(),
                fields: query.field_selector.clone(),
            };
            let client = self.client().await?;
            if let Some(items) = self
                .shared
                .cache
                .list(&client, &key, self.charge().as_ref())
                .await?
            {
                return Ok(ObjectList {
                    items,
                    continue_token: None,
                    resource_version: String::new(),
                });
            }
        }
        let api = self.api(r, namespace).await?;
        // The plugin's parameters as kube-rs takes them.
        let mut params = kube::api::ListParams {
            label_selector: query.label_selector.clone(),
            field_selector: query.field_selector.clone(),
            limit: query.limit,
            continue_token: query.continue_token.clone(),
            ..kube::api::ListParams::default()
        };
        // A whole list read directly (no cache for it) comes in pages, each
        // held only while the plugin's read allowance still covers it: a list
        // of large objects cannot make the host hold more than the plugin may
        // read.
        let whole = query.cacheable();
        if whole {
            params.limit = Some(DIRECT_PAGE);
        }
        let mut out = ObjectList::default();
        let mut held = 0u64;
        loop {
            self.request().await?;
            let list = api
                .list(&params)
                .await
                .map_err(|e| map_error(&format!("list {}", r.plural), e))?;
            let continue_token = list.metadata.continue_.clone().filter(|c| !c.is_empty());
            out.resource_version = list.metadata.resource_version.clone().unwrap_or_default();
            for item in list.items {
                let item = Listed::whole(to_value(item)?);
                if let Some(call) = &self.call {
                    held += item.json.len() as u64;
                    call.check_read(&format!("kube list {}", r.plural), held)?;
                }
                out.items.push(item);
            }
            match continue_token {
                Some(token) if whole => params.continue_token = Some(token),
                token => {
                    out.continue_token = token;
                    return Ok(out);
                }
            }
        }
    }

    async fn create(
        &self,
        run: Run,
        r: &ResourceInfo,
        namespace: Option<&str>,
        object: Value,
    ) -> Result<Value, CapError> {
        async {
            let api = self.api(r, namespace).await?;
            let params = PostParams {
                dry_run: run.dry(),
                ..PostParams::default()
            };
            self.request().await?;
            let created = api
                .create(&params, &from_value(object)?)
                .await
                .map_err(|e| map_error(&format!("create {}", r.plural), e))?;
            to_value(created)
        }
        .await
    }

    async fn patch(
        &self,
        run: Run,
        r: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
        patch: PatchBody,
    ) -> Result<Value, CapError> {
        async {
            let api = self.api(r, namespace).await?;
            let (params, patch) = match patch.kind {
                PatchType::Merge => (PatchParams::default(), Patch::Merge(patch.body)),
                PatchType::Apply => (PatchParams::apply(&patch.manager), Patch::Apply(patch.body)),
                PatchType::Json => {
                    let operations: json_patch::Patch = serde_json::from_value(patch.body)
                        .map_err(|e| CapError::Invalid(format!("not a JSON patch: {e}")))?;
                    (PatchParams::default(), Patch::Json(operations))
                }
            };
            let params = if run.dry() { params.dry_run() } else { params };
            self.request().await?;
            let patched = api
                .patch(name, &params, &patch)
                .await
                .map_err(|e| map_error(&format!("patch {}/{name}", r.plural), e))?;
            to_value(patched)
        }
        .await
    }

    async fn delete(
        &self,
        run: Run,
        r: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
        uid: Option<&str>,
    ) -> Result<(), CapError> {
        async {
            let api = self.api(r, namespace).await?;
            let params = DeleteParams {
                dry_run: run.dry(),
                preconditions: uid.map(|uid| Preconditions {
                    uid: Some(uid.to_string()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            self.request().await?;
            api.delete(name, &params)
                .await
                .map(drop)
                .map_err(|e| map_error(&format!("delete {}/{name}", r.plural), e))
        }
        .await
    }

    async fn evict(
        &self,
        run: Run,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<(), CapError> {
        let client = self.client().await?;
        // kubectl's body (kube's own `evict` sends its options in snake case,
        // which the API server ignores), with the checked pod's UID.
        let body = serde_json::json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": {"preconditions": {"uid": uid}},
        });
        let dry = if run.dry() { "?dryRun=All" } else { "" };
        // Both names passed the shared validator: they are whole path parts.
        let request = http::Request::post(format!(
            "/api/v1/namespaces/{namespace}/pods/{name}/eviction{dry}"
        ))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body.to_string().into_bytes())
        .map_err(|e| CapError::Other(format!("evict: {e}")))?;
        self.request().await?;
        let pod = format!("{namespace}/{name}");
        match client.request_text(request).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 429 => {
                let shown = serde_json::to_value(&*status).unwrap_or_default();
                let budget = tend_rules::drain::blocking_budget(namespace, &shown);
                Err(CapError::BudgetExhausted(
                    tend_rules::drain::blocked_message(&pod, budget.as_deref(), &status.message),
                ))
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Err(CapError::NotFound(
                format!("evict pods/{pod}: the pod checked is gone (another pod has its name now)"),
            )),
            Err(e) => Err(map_error(&format!("evict pods/{pod}"), e)),
        }
    }

    async fn emit_event(
        &self,
        _: Permit,
        r: &ResourceInfo,
        object: &Value,
        note: &EventNote,
    ) -> Result<(), CapError> {
        async {
            let client = self.client().await?;
            let meta = &object["metadata"];
            let name = meta["name"].as_str().unwrap_or_default();
            // An object that does not exist (yet) has no uid: its name stands in.
            let uid = meta["uid"]
                .as_str()
                .map_or_else(|| format!("absent:{name}"), str::to_string);
            let uid = uid.as_str();
            // Cluster-scoped objects' events live in "default", as the kubelet's do.
            let namespace = meta["namespace"].as_str().unwrap_or("default");
            let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client, namespace);
            // Beyond the object's burst, similar Events collapse into one.
            let (event_name, note) = if self.shared.events.as_asked(uid, note) {
                (super::grants::event_name(name, uid, note), note.clone())
            } else {
                super::events::combined(name, uid, note)
            };
            let now = k8s_openapi::jiff::Timestamp::now();
            self.request().await?;
            match events.get_opt(&event_name).await.map_err(|e| map_error("get event", e))? {
                Some(existing) => {
                    let count = existing.series.as_ref().map_or(1, |s| s.count) + 1;
                    // A combined Event says its latest message.
                    let patch = json!({"series": {"count": count, "lastObservedTime": now}, "note": note.message});
                    self.request().await?;
                    events
                        .patch(&event_name, &PatchParams::default(), &Patch::Merge(patch))
                        .await
                        .map(drop)
                        .map_err(|e| map_error("patch event", e))
                }
                None => {
                    let event = json!({
                        "apiVersion": "events.k8s.io/v1",
                        "kind": "Event",
                        "metadata": {"name": event_name, "namespace": namespace},
                        "eventTime": now,
                        "reportingController": "tend.dev/tend",
                        "reportingInstance": format!("{}/{}", note.reporter, self.shared.node),
                        "action": note.reason,
                        "reason": note.reason,
                        "note": note.message,
                        "type": note.event_type.name(),
                        "regarding": {
                            "apiVersion": r.api_version(),
                            "kind": r.kind,
                            "name": name,
                            "namespace": meta["namespace"],
                            "uid": meta["uid"],
                            "resourceVersion": meta["resourceVersion"],
                        },
                    });
                    let event = serde_json::from_value(event).map_err(|e| CapError::Other(e.to_string()))?;
                    self.request().await?;
                    events
                        .create(&PostParams::default(), &event)
                        .await
                        .map(drop)
                        .map_err(|e| map_error("create event", e))
                }
            }
        }
        .await
    }

    async fn watch(
        &self,
        r: &ResourceInfo,
        namespace: Option<&str>,
        labels: Option<&str>,
        fields: Option<&str>,
    ) -> Result<tokio::sync::broadcast::Receiver<Change>, CapError> {
        let client = self.client().await?;
        let key = CacheKey {
            resource: r.clone(),
            namespace: namespace.map(str::to_string),
            labels: labels.map(str::to_string),
            fields: fields.map(str::to_string),
        };
        Ok(self.shared.cache.subscribe(&client, &key))
    }

    fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::Relaxed)
    }

    fn node_name(&self) -> &str {
        &self.shared.node
    }

    fn own_lease(&self) -> Option<&tend_rules::kube::OwnLease> {
        self.shared.own_lease.as_ref()
    }

    fn fleet_namespace(&self) -> Option<&str> {
        self.shared.fleet_namespace.as_deref()
    }

    fn watches(&self) -> usize {
        self.shared.cache.running()
    }

    fn bounds_metrics(&self, families: &Exposition) {
        let shared = &self.shared;
        cache_families(families, &shared.cache.stats());
        rate_families(families, &shared.throttle.waits());
        saved_request_families(
            families,
            shared.discovery.saved(),
            &shared.events.combined(),
        );
    }
}

/// The watch caches' families: bytes held in all and per plugin, caches per
/// plugin, lists read directly because a bound was reached, evictions.
fn cache_families(families: &Exposition, cache: &CacheStats) {
    families.scalar(
        Kind::Gauge,
        "tend_kube_cache_bytes",
        "Bytes (serialized objects) the watch caches hold; bounded by [host.kube] cache-memory.",
        cache.bytes as f64,
    );
    let per_plugin = |value: fn(&(usize, u64)) -> f64| {
        let plugins = cache.plugins.iter();
        plugins.map(move |(plugin, stats)| (vec![plugin.as_str()], value(stats)))
    };
    families.family(
        Kind::Gauge,
        "tend_kube_plugin_caches",
        "Watch caches a plugin's lists started (kube-caches) and their bytes (kube-cache-bytes).",
        &["plugin"],
        per_plugin(|(caches, _)| *caches as f64),
    );
    families.family(
        Kind::Gauge,
        "tend_kube_plugin_cache_bytes",
        "Bytes of the watch caches a plugin's lists started.",
        &["plugin"],
        per_plugin(|(_, bytes)| *bytes as f64),
    );
    families.family(
        Kind::Counter,
        "tend_kube_direct_lists_total",
        "Lists read from the API server because a cache bound was reached, by the bound.",
        &["plugin", "bound"],
        cache
            .direct
            .iter()
            .map(|((plugin, bound), n)| (vec![plugin.as_str(), *bound], *n as f64)),
    );
    families.scalar(
        Kind::Counter,
        "tend_kube_cache_evictions_total",
        "Idle list caches stopped to make room for a watch trigger's.",
        cache.evicted as f64,
    );
}

/// The request rate's families: plugin requests that waited for a token,
/// how long, and those refused at the reconcile's deadline.
fn rate_families(families: &Exposition, waits: &BTreeMap<String, Waits>) {
    let per_plugin = |value: fn(&Waits) -> f64| {
        let waits = waits.iter();
        waits.map(move |(plugin, w)| (vec![plugin.as_str()], value(w)))
    };
    families.family(
        Kind::Counter,
        "tend_kube_rate_waits_total",
        "Plugin requests that waited for a token (kube-qps, kube-burst; [host.kube] qps, burst).",
        &["plugin"],
        per_plugin(|w| w.count as f64),
    );
    families.family(
        Kind::Counter,
        "tend_kube_rate_wait_seconds_total",
        "Seconds plugin requests waited for a token.",
        &["plugin"],
        per_plugin(|w| w.seconds),
    );
    families.family(
        Kind::Counter,
        "tend_kube_rate_refused_total",
        "Plugin requests refused because their token came after the reconcile's deadline.",
        &["plugin"],
        per_plugin(|w| w.refused as f64),
    );
}

/// The requests not sent: discovery misses answered from memory, and Events
/// combined by their reporter (`tend-<plugin>`).
fn saved_request_families(families: &Exposition, misses: u64, combined: &BTreeMap<String, u64>) {
    families.scalar(
        Kind::Counter,
        "tend_kube_discovery_misses_cached_total",
        "Lookups of kinds the API server lacks answered from the discovery cache, without a request.",
        misses as f64,
    );
    families.family(
        Kind::Counter,
        "tend_kube_events_combined_total",
        "Events beyond the burst of 25 per object, combined into one Event per type and reason.",
        &["plugin"],
        combined.iter().map(|(reporter, n)| {
            (
                vec![reporter.strip_prefix("tend-").unwrap_or(reporter)],
                *n as f64,
            )
        }),
    );
}

#[cfg(test)]
mod metrics_tests {
    use super::*;
    use crate::exposition::declared;

    fn family(name: &str, kind: &str, help: &str) -> (String, String, String) {
        (name.into(), kind.into(), help.into())
    }

    #[test]
    fn every_bounds_family_keeps_its_name_type_and_help() {
        let families = Exposition::default();
        let cache = CacheStats {
            running: 2,
            bytes: 10,
            plugins: [("p".to_string(), (2, 10))].into(),
            direct: [(("p".to_string(), "plugin-caches"), 3)].into(),
            evicted: 1,
        };
        cache_families(&families, &cache);
        let waits = Waits {
            count: 2,
            seconds: 0.5,
            refused: 1,
        };
        rate_families(&families, &[("p".to_string(), waits)].into());
        saved_request_families(&families, 4, &[("tend-p".to_string(), 5)].into());
        let text = families.text();
        assert_eq!(
            declared(&text),
            [
                family(
                    "tend_kube_cache_bytes",
                    "gauge",
                    "Bytes (serialized objects) the watch caches hold; bounded by [host.kube] cache-memory."
                ),
                family(
                    "tend_kube_cache_evictions_total",
                    "counter",
                    "Idle list caches stopped to make room for a watch trigger's."
                ),
                family(
                    "tend_kube_direct_lists_total",
                    "counter",
                    "Lists read from the API server because a cache bound was reached, by the bound."
                ),
                family(
                    "tend_kube_discovery_misses_cached_total",
                    "counter",
                    "Lookups of kinds the API server lacks answered from the discovery cache, without a request."
                ),
                family(
                    "tend_kube_events_combined_total",
                    "counter",
                    "Events beyond the burst of 25 per object, combined into one Event per type and reason."
                ),
                family(
                    "tend_kube_plugin_cache_bytes",
                    "gauge",
                    "Bytes of the watch caches a plugin's lists started."
                ),
                family(
                    "tend_kube_plugin_caches",
                    "gauge",
                    "Watch caches a plugin's lists started (kube-caches) and their bytes (kube-cache-bytes)."
                ),
                family(
                    "tend_kube_rate_refused_total",
                    "counter",
                    "Plugin requests refused because their token came after the reconcile's deadline."
                ),
                family(
                    "tend_kube_rate_wait_seconds_total",
                    "counter",
                    "Seconds plugin requests waited for a token."
                ),
                family(
                    "tend_kube_rate_waits_total",
                    "counter",
                    "Plugin requests that waited for a token (kube-qps, kube-burst; [host.kube] qps, burst)."
                ),
            ]
        );
        for line in [
            "tend_kube_cache_bytes 10",
            "tend_kube_plugin_caches{plugin=\"p\"} 2",
            "tend_kube_plugin_cache_bytes{plugin=\"p\"} 10",
            "tend_kube_direct_lists_total{bound=\"plugin-caches\",plugin=\"p\"} 3",
            "tend_kube_cache_evictions_total 1",
            "tend_kube_rate_waits_total{plugin=\"p\"} 2",
            "tend_kube_rate_wait_seconds_total{plugin=\"p\"} 0.5",
            "tend_kube_rate_refused_total{plugin=\"p\"} 1",
            "tend_kube_discovery_misses_cached_total 4",
            "tend_kube_events_combined_total{plugin=\"p\"} 5",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from:\n{text}"
            );
        }
    }

    #[test]
    fn the_unlabelled_families_are_present_from_the_start() {
        let kube = RealKube::new(&KubeSettings::default(), "node-1");
        let text = super::super::backend::render_metrics(&kube);
        let names: Vec<String> = declared(&text)
            .into_iter()
            .map(|(name, _, _)| name)
            .collect();
        assert_eq!(
            names,
            [
                "tend_kube_api_requests_total",
                "tend_kube_cache_bytes",
                "tend_kube_cache_evictions_total",
                "tend_kube_discovery_misses_cached_total",
                "tend_kube_watches",
            ]
        );
        assert!(
            text.lines().any(|l| l == "tend_kube_api_requests_total 0"),
            "{text}"
        );
        assert!(text.contains("# HELP tend_kube_watches Watches the shared cache holds open on the API server.\n# TYPE tend_kube_watches gauge\n"), "{text}");
    }
}
