//! The shared watch cache: one reflector per (resource, namespace, label
//! selector), whoever asks first starts it, every plugin reads from it, and
//! it stops when nothing watches it and no list used it for [`IDLE`]. So a
//! reconcile that reads cached objects costs the API server nothing, and ten
//! plugins watching Nodes open one watch.

use super::backend::{Change, ResourceInfo};
use crate::capabilities::error::CapError;
use futures_util::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::broadcast;

/// A cache no trigger needs is stopped this long after its last read.
pub const IDLE: Duration = Duration::from_secs(300);
/// At most this many reflectors (watches on the API server) at once: a
/// plugin listing with ever new selectors gets direct reads beyond it.
pub const MAX_CACHES: usize = 64;
/// How long a first read waits for the initial list.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CacheKey {
    pub resource: ResourceInfo,
    pub namespace: Option<String>,
    pub labels: Option<String>,
    /// "metadata.name=node-1": a plugin allowed one object watches only it.
    pub fields: Option<String>,
}

struct Entry {
    store: Store<DynamicObject>,
    changes: broadcast::Sender<Change>,
    task: tokio::task::JoinHandle<()>,
    last_read: Instant,
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Entries = Arc<Mutex<HashMap<CacheKey, Entry>>>;

#[derive(Default)]
pub struct WatchCache {
    entries: Entries,
    sweeper: std::sync::OnceLock<()>,
}

/// Drop the caches nothing needs any more.
fn sweep(entries: &mut HashMap<CacheKey, Entry>) {
    entries.retain(|_, e| e.changes.receiver_count() > 0 || e.last_read.elapsed() < IDLE);
}

fn api_resource(r: &ResourceInfo) -> ApiResource {
    ApiResource {
        group: r.group.clone(),
        version: r.version.clone(),
        api_version: r.api_version(),
        kind: r.kind.clone(),
        plural: r.plural.clone(),
    }
}

impl WatchCache {
    /// The entry for `key`, started if absent (None when [`MAX_CACHES`] run);
    /// idle entries are dropped first.
    fn entry<T>(&self, client: &kube::Client, key: &CacheKey, with: impl FnOnce(&mut Entry) -> T) -> Option<T> {
        self.sweeper.get_or_init(|| {
            // Also when nobody calls: a cache whose last watcher left stops within IDLE + a minute.
            let entries = Arc::downgrade(&self.entries);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(60));
                loop {
                    tick.tick().await;
                    let Some(entries) = entries.upgrade() else { return };
                    sweep(&mut entries.lock().unwrap());
                }
            });
        });
        let mut entries = self.entries.lock().unwrap();
        sweep(&mut entries);
        if !entries.contains_key(key) && entries.len() >= MAX_CACHES {
            return None;
        }
        Some(with(entries.entry(key.clone()).or_insert_with(|| start(client, key))))
    }

    /// The objects of `key`, once its initial list has arrived; None when no
    /// more caches may start (read from the API server instead).
    pub async fn list(&self, client: &kube::Client, key: &CacheKey) -> Result<Option<Vec<serde_json::Value>>, CapError> {
        let Some(store) = self.entry(client, key, |e| {
            e.last_read = Instant::now();
            e.store.clone()
        }) else {
            return Ok(None);
        };
        tokio::time::timeout(READY_TIMEOUT, store.wait_until_ready())
            .await
            .map_err(|_| {
                CapError::Unavailable(format!(
                    "the watch cache of {} has not received its first list within {READY_TIMEOUT:?}: is the API server answering?",
                    key.resource.plural
                ))
            })?
            .map_err(|e| CapError::Unavailable(format!("the watch cache of {} stopped: {e}", key.resource.plural)))?;
        store
            .state()
            .iter()
            .map(|o| serde_json::to_value(o.as_ref()).map_err(|e| CapError::Other(e.to_string())))
            .collect::<Result<_, _>>()
            .map(Some)
    }

    /// Changes of `key`'s objects, for triggers.
    pub fn subscribe(&self, client: &kube::Client, key: &CacheKey) -> Result<broadcast::Receiver<Change>, CapError> {
        self.entry(client, key, |e| e.changes.subscribe()).ok_or_else(|| {
            CapError::BudgetExhausted(format!("{MAX_CACHES} watch caches already run: watch fewer resources or selectors"))
        })
    }

    /// How many reflectors run (one watch on the API server each).
    pub fn running(&self) -> usize {
        self.entries.lock().unwrap().len()
    }
}

fn start(client: &kube::Client, key: &CacheKey) -> Entry {
    let ar = api_resource(&key.resource);
    let api: Api<DynamicObject> = match &key.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let mut config = watcher::Config::default();
    if let Some(labels) = &key.labels {
        config = config.labels(labels);
    }
    if let Some(fields) = &key.fields {
        config = config.fields(fields);
    }
    let writer = reflector::store::Writer::new(ar);
    let store = writer.as_reader();
    let (changes, _) = broadcast::channel(1024);
    let sender = changes.clone();
    let (group, resource) = (key.resource.group.clone(), key.resource.plural.clone());
    let task = tokio::spawn(async move {
        let stream = reflector::reflector(writer, watcher(api, config).default_backoff());
        futures_util::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            let objects = match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => vec![o],
                Ok(_) => continue,
                Err(e) => {
                    tracing::warn!(resource = %resource, "kube watch: {e}; retrying with backoff");
                    continue;
                }
            };
            for object in objects {
                let _ = sender.send(Change {
                    resource: resource.clone(),
                    group: group.clone(),
                    namespace: object.metadata.namespace.clone(),
                    name: object.metadata.name.clone().unwrap_or_default(),
                });
            }
        }
    });
    Entry {
        store,
        changes,
        task,
        last_read: Instant::now(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(labels: usize) -> CacheKey {
        CacheKey {
            resource: ResourceInfo {
                group: String::new(),
                version: "v1".into(),
                kind: "Pod".into(),
                plural: "pods".into(),
                namespaced: true,
            },
            namespace: Some("default".into()),
            labels: Some(format!("app=a{labels}")),
            fields: None,
        }
    }

    /// A plugin asking with ever new selectors cannot open unbounded watches.
    #[tokio::test]
    async fn at_most_max_caches_reflectors_run() {
        // Nothing answers there: the reflectors retry quietly, which is enough here.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let cache = WatchCache::default();
        let mut held = Vec::new();
        for i in 0..MAX_CACHES {
            held.push(cache.subscribe(&client, &key(i)).unwrap());
        }
        let err = cache.subscribe(&client, &key(MAX_CACHES)).unwrap_err();
        assert_eq!(err.kind(), "budget-exhausted");
        assert!(cache.list(&client, &key(MAX_CACHES)).await.unwrap().is_none(), "served from the API instead");
        assert_eq!(cache.running(), MAX_CACHES);
        // An existing cache is still shared.
        assert!(cache.subscribe(&client, &key(0)).is_ok());
    }
}
