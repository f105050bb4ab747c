//! The Kubernetes API through kube-rs: one client, discovery cached per kind,
//! reads of cacheable lists from the shared watch cache, counted requests.

use super::backend::{Change, EventNote, KubeBackend, ListQuery, ObjectList, PatchBody, PatchKind, ResourceInfo};
use super::cache::{CacheKey, WatchCache};
use crate::capabilities::error::CapError;
use crate::capabilities::gate::Permit;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::OnceCell;

pub struct RealKube {
    kubeconfig: Option<PathBuf>,
    client: OnceCell<kube::Client>,
    kinds: Mutex<HashMap<(String, String), ResourceInfo>>,
    cache: WatchCache,
    requests: AtomicU64,
    node: String,
}

impl RealKube {
    pub fn new(kubeconfig: Option<PathBuf>, node: &str) -> Self {
        RealKube {
            kubeconfig,
            client: OnceCell::new(),
            kinds: Mutex::default(),
            cache: WatchCache::default(),
            requests: AtomicU64::new(0),
            node: node.to_string(),
        }
    }

    async fn client(&self) -> Result<kube::Client, CapError> {
        let agent = user_agent(&self.node);
        self.client.get_or_try_init(|| connect(self.kubeconfig.as_deref(), &agent)).await.cloned()
    }

    fn counted(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    async fn api(&self, r: &ResourceInfo, namespace: Option<&str>) -> Result<Api<DynamicObject>, CapError> {
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
}

/// A client: `kubeconfig` (`[host.kube] kubeconfig`), else in-cluster, else
/// `KUBECONFIG` (or ~/.kube/config). `agent` says who calls in the API
/// server's audit log ("tend/0.1.0 (node-1)").
pub async fn connect(kubeconfig: Option<&std::path::Path>, agent: &str) -> Result<kube::Client, CapError> {
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
            let message = format!("{what}: {} ({})", status.message, status.reason);
            match status.code {
                404 => CapError::NotFound(message),
                409 => CapError::Conflict(message),
                410 => CapError::Conflict(format!("{message}: the resource version is too old; list again")),
                400 | 422 => CapError::Invalid(message),
                401 | 403 => CapError::Denied(format!("{message}: the API server refused Tend's own credentials (check its RBAC: `tend rbac`)")),
                408 | 504 => CapError::Timeout(message),
                _ => CapError::Other(message),
            }
        }
        other => CapError::Unavailable(format!("{what}: the Kubernetes API did not answer: {other}")),
    }
}

fn to_value(object: DynamicObject) -> Result<Value, CapError> {
    serde_json::to_value(object).map_err(|e| CapError::Other(e.to_string()))
}

fn from_value(object: Value) -> Result<DynamicObject, CapError> {
    serde_json::from_value(object).map_err(|e| CapError::Invalid(format!("not a Kubernetes object: {e}")))
}

fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

#[async_trait::async_trait]
impl KubeBackend for RealKube {
    async fn resolve(&self, api_version: &str, kind: &str) -> Result<ResourceInfo, CapError> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(info) = self.kinds.lock().unwrap().get(&key) {
            return Ok(info.clone());
        }
        let (group, version) = split_api_version(api_version);
        let client = self.client().await?;
        self.counted();
        let (ar, caps) = kube::discovery::pinned_kind(&client, &GroupVersionKind::gvk(group, version, kind))
            .await
            .map_err(|e| match e {
                kube::Error::Discovery(_) => CapError::NotFound(format!("the API server has no kind {kind} in {api_version}")),
                other => map_error("discovery", other),
            })?;
        let info = ResourceInfo {
            group: ar.group,
            version: ar.version,
            kind: ar.kind,
            plural: ar.plural,
            namespaced: caps.scope == Scope::Namespaced,
        };
        self.kinds.lock().unwrap().insert(key, info.clone());
        Ok(info)
    }

    async fn resource(&self, group: &str, plural: &str) -> Result<ResourceInfo, CapError> {
        if let Some(info) = self.kinds.lock().unwrap().values().find(|i| i.group == group && i.plural == plural) {
            return Ok(info.clone());
        }
        let client = self.client().await?;
        self.counted();
        let api_group = kube::discovery::group(&client, group).await.map_err(|e| map_error("discovery", e))?;
        let (ar, caps) = api_group
            .recommended_resources()
            .into_iter()
            .find(|(ar, _)| ar.plural == plural)
            .ok_or_else(|| CapError::NotFound(format!("the API server has no resource {plural} in group {group:?}")))?;
        let info = ResourceInfo {
            group: ar.group,
            version: ar.version,
            kind: ar.kind,
            plural: ar.plural,
            namespaced: caps.scope == Scope::Namespaced,
        };
        let key = (info.api_version(), info.kind.clone());
        self.kinds.lock().unwrap().insert(key, info.clone());
        Ok(info)
    }

    async fn get(&self, r: &ResourceInfo, namespace: Option<&str>, name: &str) -> Result<Value, CapError> {
        let api = self.api(r, namespace).await?;
        self.counted();
        to_value(api.get(name).await.map_err(|e| map_error(&format!("get {}/{name}", r.plural), e))?)
    }

    async fn list(&self, r: &ResourceInfo, namespace: Option<&str>, query: &ListQuery) -> Result<ObjectList, CapError> {
        if query.cacheable() {
            let key = CacheKey {
                resource: r.clone(),
                namespace: namespace.map(str::to_string),
                labels: query.label_selector.clone(),
                fields: query.field_selector.clone(),
            };
            let client = self.client().await?;
            if let Some(items) = self.cache.list(&client, &key).await? {
                return Ok(ObjectList {
                    items,
                    continue_token: None,
                    resource_version: String::new(),
                });
            }
        }
        let api = self.api(r, namespace).await?;
        let params = ListParams {
            label_selector: query.label_selector.clone(),
            field_selector: query.field_selector.clone(),
            limit: query.limit,
            continue_token: query.continue_token.clone(),
            ..ListParams::default()
        };
        self.counted();
        let list = api.list(&params).await.map_err(|e| map_error(&format!("list {}", r.plural), e))?;
        Ok(ObjectList {
            continue_token: list.metadata.continue_.clone().filter(|c| !c.is_empty()),
            resource_version: list.metadata.resource_version.clone().unwrap_or_default(),
            items: list.items.into_iter().map(to_value).collect::<Result<_, _>>()?,
        })
    }

    async fn create(&self, permit: Permit, r: &ResourceInfo, namespace: Option<&str>, object: Value) -> Result<Value, CapError> {
        let result = async {
            let api = self.api(r, namespace).await?;
            self.counted();
            let created = api
                .create(&PostParams::default(), &from_value(object)?)
                .await
                .map_err(|e| map_error(&format!("create {}", r.plural), e))?;
            to_value(created)
        }
        .await;
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
        let result = async {
            let api = self.api(r, namespace).await?;
            let (params, patch) = match patch.kind {
                PatchKind::Merge => (PatchParams::default(), Patch::Merge(patch.body)),
                PatchKind::Apply => (PatchParams::apply(&patch.manager), Patch::Apply(patch.body)),
                PatchKind::Json => {
                    let operations: json_patch::Patch = serde_json::from_value(patch.body)
                        .map_err(|e| CapError::Invalid(format!("not a JSON patch: {e}")))?;
                    (PatchParams::default(), Patch::Json(operations))
                }
            };
            self.counted();
            let patched = api
                .patch(name, &params, &patch)
                .await
                .map_err(|e| map_error(&format!("patch {}/{name}", r.plural), e))?;
            to_value(patched)
        }
        .await;
        permit.finish_with(&result);
        result
    }

    async fn delete(&self, permit: Permit, r: &ResourceInfo, namespace: Option<&str>, name: &str) -> Result<(), CapError> {
        let result = async {
            let api = self.api(r, namespace).await?;
            self.counted();
            api.delete(name, &DeleteParams::default())
                .await
                .map(drop)
                .map_err(|e| map_error(&format!("delete {}/{name}", r.plural), e))
        }
        .await;
        permit.finish_with(&result);
        result
    }

    async fn emit_event(&self, permit: Permit, r: &ResourceInfo, object: &Value, note: &EventNote) -> Result<(), CapError> {
        let result = async {
            let client = self.client().await?;
            let meta = &object["metadata"];
            let name = meta["name"].as_str().unwrap_or_default();
            // Cluster-scoped objects' events live in "default", as the kubelet's do.
            let namespace = meta["namespace"].as_str().unwrap_or("default");
            let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client, namespace);
            let event_name = super::grants::event_name(name, meta["uid"].as_str().unwrap_or_default(), note);
            let now = k8s_openapi::jiff::Timestamp::now();
            self.counted();
            match events.get_opt(&event_name).await.map_err(|e| map_error("get event", e))? {
                Some(existing) => {
                    let count = existing.series.as_ref().map_or(1, |s| s.count) + 1;
                    let patch = json!({"series": {"count": count, "lastObservedTime": now}});
                    self.counted();
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
                        "reportingInstance": format!("{}/{}", note.reporter, self.node),
                        "action": note.reason,
                        "reason": note.reason,
                        "note": note.message,
                        "type": if note.warning { "Warning" } else { "Normal" },
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
                    self.counted();
                    events
                        .create(&PostParams::default(), &event)
                        .await
                        .map(drop)
                        .map_err(|e| map_error("create event", e))
                }
            }
        }
        .await;
        permit.finish_with(&result);
        result
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
        self.cache.subscribe(&client, &key)
    }

    fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    fn node_name(&self) -> &str {
        &self.node
    }

    fn watches(&self) -> usize {
        self.cache.running()
    }
}
