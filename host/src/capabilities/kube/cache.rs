//! The shared watch cache: one watcher per (resource, namespace, label
//! selector, field selector), whoever asks first starts it, every plugin reads
//! from it, and it stops when nothing watches it and no list used it for
//! [`IDLE`]. So a reconcile that reads cached objects costs the API server
//! nothing, and ten plugins watching Nodes open one watch.
//!
//! A cache is memory and a watch on the API server, so it is charged: a cache
//! a plugin's list starts counts against that plugin's `kube-caches` and its
//! bytes (objects as serialized JSON, `managedFields` stripped) against its
//! `kube-cache-bytes`; all caches together against `[host.kube] caches` and
//! `cache-memory`. A list that would go beyond any of them is served by a
//! direct read instead (the plugin sees the same objects, the API server one
//! more request); a list cache that grows beyond them stops itself.
//!
//! Each object is kept as its JSON text, serialized once when the watch
//! delivers it (per resourceVersion) and shared with every list that reads
//! it, beside a small summary for the grant's re-check: a warm read copies
//! nothing and serializes nothing. Watch
//! triggers come from the operator's config and always get their cache: they
//! take the place of an idle list-only cache when the count is reached, and
//! are never stopped for their size.
//!
//! A cache serves only while its watch works: when the watch fails (the API
//! server answers errors, a re-list fails) the cache is marked failing, and
//! once that has lasted [`FAILING_GRACE`] its reads answer `unavailable`
//! instead of contents that may be minutes old (a node reaper must never act
//! on those). Each failure restarts the watch with a fresh list, after a
//! backoff: that list is what proves the API server answers again (kube's own
//! resumption re-watches silently, with no event to tell), and the objects it
//! finds changed are sent to triggers as the missed watch events would have been.

use super::backend::{Change, Listed, ResourceInfo};
use crate::capabilities::error::CapError;
use futures_util::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};
use tokio::sync::broadcast;

/// A cache no trigger needs is stopped this long after its last read.
pub const IDLE: Duration = Duration::from_secs(300);
/// How long a first read waits for the initial list.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a watch may fail before its cache stops serving: longer than
/// the usual blip (a dropped connection, one retry and a re-list take a
/// second or two), far shorter than anything acting on what it reads.
pub const FAILING_GRACE: Duration = Duration::from_secs(10);
/// The watch's retry after a failure: doubling from the first to the last.
const RETRY_FIRST: Duration = Duration::from_millis(800);
const RETRY_MAX: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CacheKey {
    pub resource: ResourceInfo,
    pub namespace: Option<String>,
    pub labels: Option<String>,
    /// "metadata.name=node-1": a plugin allowed one object watches only it.
    pub fields: Option<String>,
}

/// The host-wide bounds (`[host.kube] caches`, `cache-memory`).
#[derive(Debug, Clone, Copy)]
pub struct HostBounds {
    pub caches: usize,
    pub memory: u64,
}

/// The plugin whose list may start a cache, with its limits.
#[derive(Debug, Clone, Copy)]
pub struct Charge<'a> {
    pub plugin: &'a str,
    /// `kube-caches`.
    pub caches: u32,
    /// `kube-cache-bytes`.
    pub bytes: u64,
}

/// Why a list was read directly instead of from a cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direct {
    /// The plugin runs `kube-caches` caches already.
    PluginCaches,
    /// The plugin's caches hold `kube-cache-bytes` already.
    PluginBytes,
    /// All caches hold `[host.kube] cache-memory` already.
    HostMemory,
    /// `[host.kube] caches` run already.
    HostCaches,
    /// The cache started, then outgrew a byte bound and stopped.
    Outgrown,
}

impl Direct {
    pub fn label(self) -> &'static str {
        match self {
            Direct::PluginCaches => "kube-caches",
            Direct::PluginBytes => "kube-cache-bytes",
            Direct::HostMemory => "host-cache-memory",
            Direct::HostCaches => "host-caches",
            Direct::Outgrown => "outgrown",
        }
    }

    fn fix(self, plugin: &str) -> String {
        match self {
            Direct::PluginCaches => format!(
                "raise [plugins.{plugin}.limits] kube-caches, or list with fewer distinct selectors"
            ),
            Direct::PluginBytes | Direct::Outgrown => {
                format!(
                    "raise [plugins.{plugin}.limits] kube-cache-bytes (or [host.kube] cache-memory), or list narrower"
                )
            }
            Direct::HostMemory => "raise [host.kube] cache-memory".into(),
            Direct::HostCaches => "raise [host.kube] caches".into(),
        }
    }
}

/// A cache's objects by "namespace/name", kept by its task.
#[derive(Default)]
struct Objects {
    live: HashMap<Box<str>, Listed>,
    /// During a relist, the objects listed so far: reads see the live set
    /// until the list is done.
    relist: Option<HashMap<Box<str>, Listed>>,
}

/// Since when a cache's watch has been failing, and its last error.
#[derive(Debug, Clone)]
struct Failing {
    since: tokio::time::Instant,
    /// `since` as a wall-clock time, for the message.
    at: std::time::SystemTime,
    last_error: String,
}

/// The health of a cache's watch: None while it works.
type Health = Arc<Mutex<Option<Failing>>>;

fn failed(health: &Health, error: String) {
    let mut health = health.lock().unwrap();
    match health.as_mut() {
        Some(failing) => failing.last_error = error,
        None => {
            *health = Some(Failing {
                since: tokio::time::Instant::now(),
                at: std::time::SystemTime::now(),
                last_error: error,
            })
        }
    }
}

/// A cache's objects as lists read them, whether its first list has arrived
/// (the sender ends with its task: a waiting read then reads directly), and
/// whether its watch works.
#[derive(Clone)]
struct Store {
    objects: Arc<RwLock<Objects>>,
    ready: tokio::sync::watch::Receiver<bool>,
    health: Health,
}

impl Store {
    /// Why the contents may not be served: the watch has been failing for
    /// [`FAILING_GRACE`] or longer.
    fn stale(&self, resource: &str) -> Option<CapError> {
        let health = self.health.lock().unwrap();
        let failing = health.as_ref()?;
        (failing.since.elapsed() >= FAILING_GRACE).then(|| {
            CapError::Unavailable(format!(
                "the watch of {resource} has been failing since {} ({}); its cached contents are not served until it lists again: is the API server answering?",
                humantime::format_rfc3339_seconds(failing.at),
                failing.last_error
            ))
        })
    }
}

struct Entry {
    id: u64,
    store: Store,
    changes: broadcast::Sender<Change>,
    task: tokio::task::JoinHandle<()>,
    last_read: Instant,
    /// The plugin whose list started it (charged for it); None: a trigger.
    started_by: Option<String>,
    /// Bytes its objects take (serialized), kept by its task.
    bytes: Arc<AtomicU64>,
    /// A trigger holds it: it is never stopped for its size.
    held: Arc<AtomicBool>,
    /// It outgrew a byte bound and stopped: read directly.
    outgrown: Arc<AtomicBool>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Entry {
    /// A list-only cache nobody needs now: what a trigger may take the place of.
    fn idle(&self) -> bool {
        self.changes.receiver_count() == 0
    }
}

type Entries = Arc<Mutex<HashMap<CacheKey, Entry>>>;

/// Bytes cached, host-wide and per charged plugin.
#[derive(Default)]
struct Usage {
    host: Arc<AtomicU64>,
    plugins: Mutex<HashMap<String, Arc<AtomicU64>>>,
}

impl Usage {
    fn plugin(&self, plugin: &str) -> Arc<AtomicU64> {
        self.plugins
            .lock()
            .unwrap()
            .entry(plugin.to_string())
            .or_default()
            .clone()
    }
}

/// What `/metrics` shows of the cache.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct CacheStats {
    pub running: usize,
    pub bytes: u64,
    /// Per plugin: caches it started, their bytes.
    pub plugins: BTreeMap<String, (usize, u64)>,
    /// Lists read directly, by plugin and why.
    pub direct: BTreeMap<(String, &'static str), u64>,
    /// Idle list caches stopped to make room for a trigger's.
    pub evicted: u64,
}

pub struct WatchCache {
    entries: Entries,
    bounds: HostBounds,
    usage: Arc<Usage>,
    next_id: AtomicU64,
    sweeper: std::sync::OnceLock<()>,
    direct: Mutex<BTreeMap<(String, Direct), u64>>,
    evicted: AtomicU64,
    /// When a list cache last outgrew a bound, by the plugin charged ("" for
    /// the host's memory): no new list cache starts for it for [`IDLE`], or
    /// every list would start a cache that fills, stops, and starts again.
    outgrew: Outgrew,
}

type Outgrew = Arc<Mutex<HashMap<String, Instant>>>;

/// Drop the caches nothing needs any more, and those that outgrew a bound.
fn sweep(entries: &mut HashMap<CacheKey, Entry>) {
    entries.retain(|_, e| {
        !e.outgrown.load(Ordering::Relaxed) && (!e.idle() || e.last_read.elapsed() < IDLE)
    });
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
    pub fn new(bounds: HostBounds) -> Self {
        WatchCache {
            entries: Entries::default(),
            bounds,
            usage: Arc::default(),
            next_id: AtomicU64::new(0),
            sweeper: std::sync::OnceLock::new(),
            direct: Mutex::default(),
            evicted: AtomicU64::new(0),
            outgrew: Outgrew::default(),
        }
    }

    /// The entries, swept (and the background sweeper started).
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<CacheKey, Entry>> {
        self.sweeper.get_or_init(|| {
            // Also when nobody calls: a cache whose last watcher left stops within IDLE + a minute.
            let entries = Arc::downgrade(&self.entries);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(60));
                loop {
                    tick.tick().await;
                    let Some(entries) = entries.upgrade() else {
                        return;
                    };
                    sweep(&mut entries.lock().unwrap());
                }
            });
        });
        let mut entries = self.entries.lock().unwrap();
        sweep(&mut entries);
        entries
    }

    /// Why `charge` may not start one more cache, if it may not.
    fn refusal(
        &self,
        entries: &HashMap<CacheKey, Entry>,
        charge: Option<&Charge>,
    ) -> Option<Direct> {
        {
            let mut outgrew = self.outgrew.lock().unwrap();
            outgrew.retain(|_, at| at.elapsed() < IDLE);
            if outgrew.contains_key("") || charge.is_some_and(|c| outgrew.contains_key(c.plugin)) {
                return Some(Direct::Outgrown);
            }
        }
        if let Some(c) = charge {
            let started = entries
                .values()
                .filter(|e| e.started_by.as_deref() == Some(c.plugin))
                .count();
            if started >= c.caches as usize {
                return Some(Direct::PluginCaches);
            }
            if self.usage.plugin(c.plugin).load(Ordering::Relaxed) >= c.bytes {
                return Some(Direct::PluginBytes);
            }
        }
        if self.usage.host.load(Ordering::Relaxed) >= self.bounds.memory {
            return Some(Direct::HostMemory);
        }
        if entries.len() >= self.bounds.caches {
            return Some(Direct::HostCaches);
        }
        None
    }

    /// A list was read directly: counted, and said once per plugin and reason.
    fn directed(&self, plugin: Option<&str>, why: Direct) {
        let plugin = plugin.unwrap_or("").to_string();
        let mut direct = self.direct.lock().unwrap();
        let count = direct.entry((plugin.clone(), why)).or_default();
        *count += 1;
        if *count == 1 {
            tracing::warn!(
                plugin = %plugin,
                "kube: a list is read from the API server instead of a watch cache ({}); {}",
                why.label(),
                why.fix(&plugin)
            );
        }
    }

    /// The objects of `key`, once its initial list has arrived; None when the
    /// list is to be read from the API server instead (a bound, counted).
    pub async fn list(
        &self,
        client: &kube::Client,
        key: &CacheKey,
        charge: Option<&Charge<'_>>,
    ) -> Result<Option<Vec<Listed>>, CapError> {
        let found = {
            let mut entries = self.entries();
            match entries.get_mut(key) {
                Some(e) => {
                    e.last_read = Instant::now();
                    Ok((e.store.clone(), e.outgrown.clone()))
                }
                None => match self.refusal(&entries, charge) {
                    Some(why) => Err(why),
                    None => {
                        let e = self.start(client, key, charge);
                        let found = (e.store.clone(), e.outgrown.clone());
                        entries.insert(key.clone(), e);
                        Ok(found)
                    }
                },
            }
        };
        let (mut store, outgrown) = match found {
            Ok(found) => found,
            Err(why) => {
                self.directed(charge.map(|c| c.plugin), why);
                return Ok(None);
            }
        };
        let ready = tokio::time::timeout(READY_TIMEOUT, store.ready.wait_for(|ready| *ready))
            .await
            .map_err(|_| {
                CapError::Unavailable(format!(
                    "the watch cache of {} has not received its first list within {READY_TIMEOUT:?}: is the API server answering?",
                    key.resource.plural
                ))
            })?
            .is_ok();
        if outgrown.load(Ordering::Relaxed) {
            self.directed(charge.map(|c| c.plugin), Direct::Outgrown);
            return Ok(None);
        }
        if !ready {
            return Err(CapError::Unavailable(format!(
                "the watch cache of {} stopped before its first list",
                key.resource.plural
            )));
        }
        if let Some(stale) = store.stale(&key.resource.plural) {
            return Err(stale);
        }
        // Shared, not copied: each object's text was made when it arrived.
        Ok(Some(
            store
                .objects
                .read()
                .unwrap()
                .live
                .values()
                .cloned()
                .collect(),
        ))
    }

    /// Changes of `key`'s objects, for triggers: always started, in the place
    /// of the least recently read idle list cache when the count is reached.
    pub fn subscribe(&self, client: &kube::Client, key: &CacheKey) -> broadcast::Receiver<Change> {
        let mut entries = self.entries();
        if !entries.contains_key(key) && entries.len() >= self.bounds.caches {
            // A list-only cache first: a trigger's may be between two subscriptions (a reload).
            let idle = entries
                .iter()
                .filter(|(_, e)| e.idle())
                .min_by_key(|(_, e)| (e.held.load(Ordering::Relaxed), e.last_read))
                .map(|(k, _)| k.clone());
            match idle {
                Some(idle) => {
                    entries.remove(&idle);
                    self.evicted.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(
                        resource = %key.resource.plural,
                        "kube: stopped the idle list cache of {} to start a watch trigger's",
                        idle.resource.plural
                    );
                }
                None => tracing::warn!(
                    resource = %key.resource.plural,
                    "kube: {} watch caches run, all for triggers; starting one more (the config's triggers are the bound): raise [host.kube] caches",
                    entries.len()
                ),
            }
        }
        let entry = match entries.entry(key.clone()) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => v.insert(self.start(client, key, None)),
        };
        entry.held.store(true, Ordering::Relaxed);
        entry.changes.subscribe()
    }

    /// How many caches run (one watch on the API server each).
    pub fn running(&self) -> usize {
        self.entries.lock().unwrap().len()
    }

    pub fn stats(&self) -> CacheStats {
        let entries = self.entries.lock().unwrap();
        let mut plugins: BTreeMap<String, (usize, u64)> = BTreeMap::new();
        for e in entries.values() {
            if let Some(p) = &e.started_by {
                let s = plugins.entry(p.clone()).or_default();
                s.0 += 1;
                s.1 += e.bytes.load(Ordering::Relaxed);
            }
        }
        CacheStats {
            running: entries.len(),
            bytes: self.usage.host.load(Ordering::Relaxed),
            plugins,
            direct: self
                .direct
                .lock()
                .unwrap()
                .iter()
                .map(|((p, why), n)| ((p.clone(), why.label()), *n))
                .collect(),
            evicted: self.evicted.load(Ordering::Relaxed),
        }
    }

    fn start(&self, client: &kube::Client, key: &CacheKey, charge: Option<&Charge>) -> Entry {
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
        self.start_with(key, charge, move || {
            // Nobody reads managedFields through a plugin's list worth caching them
            // (often half an object's size), as Kubewarden's reflector does.
            watcher(api.clone(), config.clone())
                .modify(|o: &mut DynamicObject| o.metadata.managed_fields = None)
        })
    }

    /// Start the cache of `key` on the watch streams `watch` starts.
    fn start_with<S>(
        &self,
        key: &CacheKey,
        charge: Option<&Charge>,
        watch: impl Fn() -> S + Send + 'static,
    ) -> Entry
    where
        S: futures_util::Stream<Item = Result<watcher::Event<DynamicObject>, watcher::Error>>
            + Send
            + 'static,
    {
        let objects = Arc::new(RwLock::new(Objects::default()));
        let (ready, ready_rx) = tokio::sync::watch::channel(false);
        let store = Store {
            objects: objects.clone(),
            ready: ready_rx,
            health: Health::default(),
        };
        let (changes, _) = broadcast::channel(1024);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let bytes = Arc::new(AtomicU64::new(0));
        let held = Arc::new(AtomicBool::new(false));
        let outgrown = Arc::new(AtomicBool::new(false));
        let writer = Writer {
            objects,
            paths: selector_paths(key.fields.as_deref()),
            meter: Meter {
                own: bytes.clone(),
                host: self.usage.host.clone(),
                plugin: charge.map(|c| (self.usage.plugin(c.plugin), c.bytes)),
                host_memory: self.bounds.memory,
            },
        };
        let stop = Stop {
            entries: Arc::downgrade(&self.entries),
            key: key.clone(),
            id,
            outgrew: self.outgrew.clone(),
            plugin: charge.map(|c| c.plugin.to_string()).unwrap_or_default(),
        };
        let feed = Feed {
            writer,
            ready,
            health: store.health.clone(),
            changes: changes.clone(),
            resource: key.resource.plural.clone(),
            group: key.resource.group.clone(),
            held: held.clone(),
            outgrown: outgrown.clone(),
            stop,
        };
        let task = tokio::spawn(feed.run(watch));
        Entry {
            id,
            store,
            changes,
            task,
            last_read: Instant::now(),
            started_by: charge.map(|c| c.plugin.to_string()),
            bytes,
            held,
            outgrown,
        }
    }
}

/// A cache's way to remove itself (it outgrew its bound) unless replaced since.
struct Stop {
    entries: Weak<Mutex<HashMap<CacheKey, Entry>>>,
    key: CacheKey,
    id: u64,
    outgrew: Outgrew,
    /// The plugin charged for it ("" when none).
    plugin: String,
}

impl Stop {
    /// Remove the cache, holding back new ones of its plugin (or, when the
    /// host's memory was the bound, everyone's).
    fn remove(&self, host: bool) {
        let who = if host {
            String::new()
        } else {
            self.plugin.clone()
        };
        self.outgrew.lock().unwrap().insert(who, Instant::now());
        let Some(entries) = self.entries.upgrade() else {
            return;
        };
        let mut entries = entries.lock().unwrap();
        if entries.get(&self.key).is_some_and(|e| e.id == self.id) {
            let removed = entries.remove(&self.key);
            drop(entries);
            // Dropping the entry aborts this very task: harmless, it is returning.
            drop(removed);
        }
    }
}

/// A cache's task: feeds its watch's events to its objects, its readiness,
/// its health and its triggers.
struct Feed {
    writer: Writer,
    ready: tokio::sync::watch::Sender<bool>,
    health: Health,
    changes: broadcast::Sender<Change>,
    resource: String,
    group: String,
    /// A trigger holds the cache: never stopped for its size.
    held: Arc<AtomicBool>,
    outgrown: Arc<AtomicBool>,
    stop: Stop,
}

impl Feed {
    /// Watch with the streams `watch` starts, each from a fresh list: a
    /// failure marks the cache failing and, after a backoff, starts the next.
    async fn run<S>(mut self, watch: impl Fn() -> S)
    where
        S: futures_util::Stream<Item = Result<watcher::Event<DynamicObject>, watcher::Error>>,
    {
        let mut retry = RETRY_FIRST;
        loop {
            let events = watch();
            futures_util::pin_mut!(events);
            let error = loop {
                match events.next().await {
                    Some(Ok(event)) => {
                        if self.apply(event).is_break() {
                            return;
                        }
                        if self.health.lock().unwrap().is_none() {
                            retry = RETRY_FIRST;
                        }
                    }
                    Some(Err(e)) => break describe(&e),
                    None => return,
                }
            };
            let error = crate::text::inert(&error).into_owned();
            tracing::warn!(resource = %self.resource, "kube watch: {error}; listing again in {retry:?}");
            failed(&self.health, error);
            tokio::time::sleep(retry).await;
            retry = (retry * 2).min(RETRY_MAX);
        }
    }

    /// Apply one event; Break when the cache outgrew its bound and stopped.
    fn apply(&mut self, event: watcher::Event<DynamicObject>) -> std::ops::ControlFlow<()> {
        let was_ready = *self.ready.borrow();
        let changed = self.writer.apply(&event);
        if !matches!(event, watcher::Event::Init | watcher::Event::InitApply(_)) {
            // A list done or an event: the API server answers again.
            *self.health.lock().unwrap() = None;
        }
        if let Some(changed) = changed {
            self.ready.send_replace(true);
            if was_ready {
                // A re-list: what changed meanwhile, as the missed events would have said.
                for key in changed {
                    self.send(&key);
                }
            }
        }
        if let Some(host) = self
            .writer
            .meter
            .over()
            .filter(|_| !self.held.load(Ordering::Relaxed))
        {
            // Ending drops `ready`: a first read waiting for it gets a direct read.
            self.outgrown.store(true, Ordering::Relaxed);
            self.stop.remove(host);
            return std::ops::ControlFlow::Break(());
        }
        if let watcher::Event::Apply(o) | watcher::Event::Delete(o) = &event {
            self.send(&object_key(o));
        }
        std::ops::ControlFlow::Continue(())
    }

    /// Tell triggers the object at `key` ("namespace/name") changed.
    fn send(&self, key: &str) {
        let (namespace, name) = key.split_once('/').unwrap_or(("", key));
        let _ = self.changes.send(Change {
            resource: self.resource.clone(),
            group: self.group.clone(),
            namespace: (!namespace.is_empty()).then(|| namespace.to_string()),
            name: name.to_string(),
        });
    }
}

/// The paths a field selector names ("spec.nodeName=a,metadata.name!=b":
/// spec.nodeName and metadata.name), which a cached object's summary keeps.
fn selector_paths(fields: Option<&str>) -> Vec<Vec<String>> {
    fields
        .into_iter()
        .flat_map(|f| f.split(','))
        .filter_map(|term| {
            let path = term.split(['!', '=']).next()?.trim();
            (!path.is_empty()).then(|| path.split('.').map(str::to_string).collect())
        })
        .collect()
}

/// What a list's grant re-check reads of `o` (`ListScope::admits`): its
/// name, namespace and labels, and the values at `paths`, as compact JSON.
fn summary(o: &DynamicObject, paths: &[Vec<String>]) -> String {
    let meta = &o.metadata;
    let mut view = serde_json::json!({"metadata": {"name": meta.name, "namespace": meta.namespace, "labels": meta.labels}});
    let mut metadata = None;
    for path in paths {
        let (top, rest) = match path.split_first() {
            Some((top, rest)) if top == "metadata" => {
                if matches!(rest, [f] if f == "name" || f == "namespace") {
                    continue;
                }
                let whole =
                    metadata.get_or_insert_with(|| serde_json::to_value(meta).unwrap_or_default());
                (&*whole, rest)
            }
            _ => (&o.data, &path[..]),
        };
        let value = rest.iter().fold(top, |v, step| &v[step.as_str()]);
        if value.is_null() {
            continue;
        }
        let mut at = &mut view;
        for step in path {
            if !at.is_object() {
                *at = Value::Object(Default::default());
            }
            at = at
                .as_object_mut()
                .unwrap()
                .entry(step.clone())
                .or_insert(Value::Null);
        }
        *at = value.clone();
    }
    view.to_string()
}

fn object_key(o: &DynamicObject) -> Box<str> {
    format!(
        "{}/{}",
        o.metadata.namespace.as_deref().unwrap_or(""),
        o.metadata.name.as_deref().unwrap_or("")
    )
    .into()
}

/// Keeps a cache's objects from its watch's events (each serialized once, on
/// arrival) and charges their bytes.
struct Writer {
    objects: Arc<RwLock<Objects>>,
    /// What each object's summary keeps beyond its metadata.
    paths: Vec<Vec<String>>,
    meter: Meter,
}

impl Writer {
    fn cached(&self, o: &DynamicObject) -> Listed {
        let json = serde_json::to_string(o).unwrap_or_default();
        Listed::summarized(json.into(), summary(o, &self.paths).into())
    }

    /// Apply one event; when a (re)list is done, the keys of the objects it
    /// found added, changed or gone.
    fn apply(&mut self, event: &watcher::Event<DynamicObject>) -> Option<Vec<Box<str>>> {
        let held =
            |map: &HashMap<Box<str>, Listed>| map.values().map(|l| l.bytes() as i64).sum::<i64>();
        let mut objects = self.objects.write().unwrap();
        let mut changed = None;
        let delta = match event {
            watcher::Event::Apply(o) => {
                let new = self.cached(o);
                let size = new.bytes() as i64;
                size - objects
                    .live
                    .insert(object_key(o), new)
                    .map_or(0, |old| old.bytes() as i64)
            }
            watcher::Event::Delete(o) => -objects
                .live
                .remove(&object_key(o))
                .map_or(0, |old| old.bytes() as i64),
            watcher::Event::Init => -objects
                .relist
                .replace(HashMap::new())
                .as_ref()
                .map_or(0, held),
            watcher::Event::InitApply(o) => {
                let new = self.cached(o);
                let size = new.bytes() as i64;
                let relist = objects.relist.get_or_insert_with(HashMap::new);
                size - relist
                    .insert(object_key(o), new)
                    .map_or(0, |old| old.bytes() as i64)
            }
            watcher::Event::InitDone => {
                let listed = objects.relist.take().unwrap_or_default();
                let delta = -held(&objects.live);
                let old = std::mem::replace(&mut objects.live, listed);
                changed = Some(differences(&old, &objects.live));
                delta
            }
        };
        drop(objects);
        self.meter.add(delta);
        changed
    }
}

/// A watch error in one line: an API answer as its code, reason and message
/// (kube's text of it ends in a dump of the whole Status).
fn describe(e: &watcher::Error) -> String {
    use watcher::Error::{InitialListFailed, WatchError, WatchFailed, WatchStartFailed};
    let (what, status) = match e {
        InitialListFailed(kube::Error::Api(s)) => ("list", s),
        WatchStartFailed(kube::Error::Api(s))
        | WatchFailed(kube::Error::Api(s))
        | WatchError(s) => ("watch", s),
        other => return other.to_string(),
    };
    format!(
        "{what}: {} {}: {}",
        status.code, status.reason, status.message
    )
}

/// The keys of the objects added, changed or gone from `old` to `new`.
fn differences(old: &HashMap<Box<str>, Listed>, new: &HashMap<Box<str>, Listed>) -> Vec<Box<str>> {
    let changed = new
        .iter()
        .filter(|(k, l)| old.get(*k).is_none_or(|o| o.json != l.json))
        .map(|(k, _)| k);
    let gone = old.keys().filter(|k| !new.contains_key(*k));
    changed.chain(gone).cloned().collect()
}

/// Charges a cache's bytes to the host and the plugin that started it until
/// the cache ends.
struct Meter {
    own: Arc<AtomicU64>,
    host: Arc<AtomicU64>,
    /// The charged plugin's bytes and its bound.
    plugin: Option<(Arc<AtomicU64>, u64)>,
    host_memory: u64,
}

impl Meter {
    fn add(&self, delta: i64) {
        let counters = [
            Some(&self.own),
            Some(&self.host),
            self.plugin.as_ref().map(|(p, _)| p),
        ];
        for counter in counters.into_iter().flatten() {
            if delta >= 0 {
                counter.fetch_add(delta as u64, Ordering::Relaxed);
            } else {
                counter.fetch_sub(delta.unsigned_abs(), Ordering::Relaxed);
            }
        }
    }

    /// Beyond the host's memory (Some(true)) or the charged plugin's bytes (Some(false)).
    fn over(&self) -> Option<bool> {
        if self.host.load(Ordering::Relaxed) > self.host_memory {
            Some(true)
        } else if self
            .plugin
            .as_ref()
            .is_some_and(|(p, max)| p.load(Ordering::Relaxed) > *max)
        {
            Some(false)
        } else {
            None
        }
    }
}

impl Drop for Meter {
    /// The cache ended: its bytes are nobody's any more.
    fn drop(&mut self) {
        let own = self.own.load(Ordering::Relaxed) as i64;
        self.add(-own);
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

    /// Nothing answers there: the watchers retry quietly, which is enough here.
    fn client() -> kube::Client {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    const BIG: HostBounds = HostBounds {
        caches: 64,
        memory: 1 << 30,
    };

    fn charge(plugin: &str, caches: u32) -> Charge<'_> {
        Charge {
            plugin,
            caches,
            bytes: 1 << 20,
        }
    }

    /// Start the cache of `key` for `charge` without waiting for its list.
    fn started(cache: &WatchCache, key: &CacheKey, charge: &Charge) -> bool {
        let mut entries = cache.entries();
        if cache.refusal(&entries, Some(charge)).is_some() {
            return false;
        }
        let e = cache.start(&client(), key, Some(charge));
        entries.insert(key.clone(), e);
        true
    }

    /// One plugin with ever new selectors fills its own quota, not the host's:
    /// the next plugin still gets caches, and a trigger always does.
    #[tokio::test]
    async fn caches_are_charged_to_the_plugin_that_starts_them() {
        let cache = WatchCache::new(HostBounds {
            caches: 20,
            memory: 1 << 30,
        });
        let hostile = charge("hostile", 16);
        let started_count = (0..70)
            .filter(|i| started(&cache, &key(*i), &hostile))
            .count();
        assert_eq!(started_count, 16);
        assert!(
            cache
                .list(&client(), &key(100), Some(&hostile))
                .await
                .unwrap()
                .is_none(),
            "a direct read"
        );
        assert_eq!(
            cache.stats().direct[&("hostile".to_string(), "kube-caches")],
            1
        );
        let other = charge("other", 16);
        let other_count = (200..210)
            .filter(|i| started(&cache, &key(*i), &other))
            .count();
        assert_eq!(other_count, 4, "the host's 20 are reached");
        assert_eq!(cache.stats().plugins["hostile"].0, 16);
        // A trigger takes the place of the least recently read idle list cache.
        let _trigger = cache.subscribe(&client(), &key(300));
        assert_eq!(cache.running(), 20);
        assert_eq!(cache.stats().evicted, 1);
        assert!(cache.entries.lock().unwrap().contains_key(&key(300)));
    }

    #[tokio::test]
    async fn triggers_start_beyond_the_count_when_nothing_is_idle() {
        let cache = WatchCache::new(HostBounds {
            caches: 2,
            memory: 1 << 30,
        });
        let held: Vec<_> = (0..3)
            .map(|i| cache.subscribe(&client(), &key(i)))
            .collect();
        assert_eq!(cache.running(), 3);
        assert_eq!(cache.stats().evicted, 0);
        // Lists get no new cache beyond the count, but share the triggers'.
        assert_eq!(
            cache.refusal(&cache.entries(), Some(&charge("p", 16))),
            Some(Direct::HostCaches)
        );
        drop(held);
    }

    fn object(name: &str, data: usize) -> DynamicObject {
        let mut o: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default"},
            "data": {"x": "y".repeat(data)},
        }))
        .unwrap();
        o.metadata.managed_fields = None;
        o
    }

    fn writer(usage: &Usage, plugin: &str, bytes: u64, fields: Option<&str>) -> Writer {
        Writer {
            objects: Arc::default(),
            paths: selector_paths(fields),
            meter: Meter {
                own: Arc::default(),
                host: usage.host.clone(),
                plugin: Some((usage.plugin(plugin), bytes)),
                host_memory: 1 << 30,
            },
        }
    }

    fn names(w: &Writer) -> Vec<String> {
        let mut names: Vec<String> = w
            .objects
            .read()
            .unwrap()
            .live
            .keys()
            .map(|k| k.to_string())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn bytes_are_counted_through_relists_and_released_when_the_cache_ends() {
        let usage = Usage::default();
        let mut w = writer(&usage, "p", 10_000, None);
        let a = object("a", 1000);
        let one = w.cached(&a).bytes() as u64;
        assert!(one > 1000);
        assert!(w.apply(&watcher::Event::Init).is_none());
        w.apply(&watcher::Event::InitApply(a.clone()));
        w.apply(&watcher::Event::InitApply(object("b", 1000)));
        assert!(names(&w).is_empty(), "reads wait for the list to be done");
        assert!(w.apply(&watcher::Event::InitDone).is_some(), "ready");
        assert_eq!(names(&w), ["default/a", "default/b"]);
        assert_eq!(usage.plugin("p").load(Ordering::Relaxed), 2 * one);
        // A relist holds both sets until it is done.
        w.apply(&watcher::Event::Init);
        w.apply(&watcher::Event::InitApply(a.clone()));
        assert_eq!(usage.host.load(Ordering::Relaxed), 3 * one);
        assert_eq!(
            names(&w),
            ["default/a", "default/b"],
            "reads see the old set meanwhile"
        );
        w.apply(&watcher::Event::InitDone);
        assert_eq!(usage.host.load(Ordering::Relaxed), one);
        assert_eq!(names(&w), ["default/a"]);
        w.apply(&watcher::Event::Apply(object("a", 12_000)));
        assert_eq!(
            w.meter.over(),
            Some(false),
            "beyond the plugin's 10000 bytes"
        );
        w.apply(&watcher::Event::Delete(object("a", 0)));
        assert_eq!(usage.host.load(Ordering::Relaxed), 0);
        w.apply(&watcher::Event::Apply(a));
        drop(w);
        assert_eq!(
            (
                usage.host.load(Ordering::Relaxed),
                usage.plugin("p").load(Ordering::Relaxed)
            ),
            (0, 0)
        );
    }

    /// Each object's text is made once, on arrival, and shared with every
    /// read; its summary keeps what the grant's re-check reads.
    #[test]
    fn objects_are_kept_as_shared_text_with_a_summary_for_the_grant() {
        let usage = Usage::default();
        let mut w = writer(
            &usage,
            "p",
            1 << 20,
            Some("spec.nodeName=n1,metadata.name!=x"),
        );
        let mut pod = object("a", 10);
        pod.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
        pod.data["spec"] = serde_json::json!({"nodeName": "n1", "containers": [{"name": "c"}]});
        w.apply(&watcher::Event::Init);
        w.apply(&watcher::Event::InitApply(pod.clone()));
        w.apply(&watcher::Event::InitDone);
        let first = w.objects.read().unwrap().live["default/a"].clone();
        let again = w.objects.read().unwrap().live["default/a"].clone();
        assert!(Arc::ptr_eq(&first.json, &again.json), "shared, not copied");
        assert_eq!(
            serde_json::from_str::<Value>(&first.json).unwrap(),
            serde_json::to_value(&pod).unwrap()
        );
        assert_eq!(
            *first.view(),
            serde_json::json!({
                "metadata": {"name": "a", "namespace": "default", "labels": {"app": "web"}},
                "spec": {"nodeName": "n1"},
            })
        );
    }

    #[tokio::test]
    async fn a_plugin_over_its_bytes_or_the_host_over_its_memory_starts_no_cache() {
        let cache = WatchCache::new(BIG);
        cache.usage.plugin("p").store(2 << 20, Ordering::Relaxed);
        assert_eq!(
            cache.refusal(&cache.entries(), Some(&charge("p", 16))),
            Some(Direct::PluginBytes)
        );
        assert_eq!(
            cache.refusal(&cache.entries(), Some(&charge("q", 16))),
            None
        );
        cache.usage.host.store(2 << 30, Ordering::Relaxed);
        assert_eq!(
            cache.refusal(&cache.entries(), Some(&charge("q", 16))),
            Some(Direct::HostMemory)
        );
    }

    /// A cache that outgrew its plugin's bytes and stopped frees them, but the
    /// plugin's lists do not start (and fill, and stop) one again and again.
    #[tokio::test]
    async fn after_a_cache_outgrew_its_plugin_starts_none_for_a_while() {
        let cache = WatchCache::new(BIG);
        assert!(started(&cache, &key(0), &charge("p", 16)));
        let stop = Stop {
            entries: Arc::downgrade(&cache.entries),
            key: key(0),
            id: cache.entries().get(&key(0)).unwrap().id,
            outgrew: cache.outgrew.clone(),
            plugin: "p".into(),
        };
        stop.remove(false);
        assert_eq!(cache.running(), 0);
        assert_eq!(
            cache.refusal(&cache.entries(), Some(&charge("p", 16))),
            Some(Direct::Outgrown)
        );
        assert_eq!(
            cache.refusal(&cache.entries(), Some(&charge("q", 16))),
            None,
            "only p's"
        );
        stop.remove(true);
        assert_eq!(
            cache.refusal(&cache.entries(), Some(&charge("q", 16))),
            Some(Direct::Outgrown),
            "the host's memory: everyone's"
        );
    }

    type Scripted = Result<watcher::Event<DynamicObject>, watcher::Error>;

    /// A cache of `key(0)` whose watch streams all read what the test sends.
    fn scripted(cache: &WatchCache) -> tokio::sync::mpsc::UnboundedSender<Scripted> {
        let (send, receive) = tokio::sync::mpsc::unbounded_channel();
        let receive = Arc::new(tokio::sync::Mutex::new(receive));
        let entry = cache.start_with(&key(0), None, move || {
            futures_util::stream::unfold(receive.clone(), |receive| async move {
                let next = receive.lock().await.recv().await?;
                Some((next, receive))
            })
        });
        cache.entries().insert(key(0), entry);
        send
    }

    fn unavailable(message: &str) -> Scripted {
        let status = kube::core::Status::failure(message, "ServiceUnavailable").with_code(503);
        Err(watcher::Error::WatchError(Box::new(status)))
    }

    fn listing(objects: &[&str]) -> Vec<Scripted> {
        let mut events = vec![Ok(watcher::Event::Init)];
        events.extend(
            objects
                .iter()
                .map(|name| Ok(watcher::Event::InitApply(object(name, 1)))),
        );
        events.push(Ok(watcher::Event::InitDone));
        events
    }

    async fn listed(cache: &WatchCache) -> Result<Vec<String>, CapError> {
        let listed = cache.list(&client(), &key(0), None).await?.expect("cached");
        let mut names: Vec<String> = listed
            .iter()
            .map(|l| {
                let object: Value = serde_json::from_str(&l.json).unwrap();
                object["metadata"]["name"].as_str().unwrap().to_string()
            })
            .collect();
        names.sort();
        Ok(names)
    }

    /// Let the cache's task take what was sent (and its retry's backoff
    /// pass, in paused time) until `done` holds.
    async fn until(done: impl Fn() -> bool) {
        for _ in 0..1000 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the cache's task never got there");
    }

    /// A watch failing for longer than the grace makes reads unavailable,
    /// never stale; its next list serves again and tells triggers what changed.
    #[tokio::test(start_paused = true)]
    async fn a_failing_watch_is_not_served_after_the_grace_and_is_again_once_it_lists() {
        let cache = WatchCache::new(BIG);
        let send = scripted(&cache);
        let health = cache.entries()[&key(0)].store.health.clone();
        let mut changes = cache.entries()[&key(0)].changes.subscribe();
        for event in listing(&["a"]) {
            send.send(event).unwrap();
        }
        assert_eq!(listed(&cache).await.unwrap(), ["a"]);

        send.send(unavailable("the API server is down")).unwrap();
        until(|| health.lock().unwrap().is_some()).await;
        assert_eq!(
            listed(&cache).await.unwrap(),
            ["a"],
            "served within the grace"
        );
        tokio::time::sleep(FAILING_GRACE).await;
        // The re-list fails too: the same failure, its newer error.
        send.send(unavailable("still down")).unwrap();
        until(|| {
            health
                .lock()
                .unwrap()
                .as_ref()
                .unwrap()
                .last_error
                .contains("still down")
        })
        .await;
        let refused = listed(&cache).await.unwrap_err();
        assert_eq!(refused.kind(), "unavailable");
        let message = refused.to_string();
        let since = humantime::format_rfc3339_seconds(health.lock().unwrap().as_ref().unwrap().at)
            .to_string();
        assert!(
            message.contains(&format!("the watch of pods has been failing since {since}"))
                && message.contains("(watch: 503 ServiceUnavailable: still down)")
                && message.contains("cached contents are not served"),
            "{message}"
        );

        // A re-list started is not yet an answer; one done is.
        send.send(Ok(watcher::Event::Init)).unwrap();
        send.send(Ok(watcher::Event::InitApply(object("b", 1))))
            .unwrap();
        until(|| {
            cache.entries()[&key(0)]
                .store
                .objects
                .read()
                .unwrap()
                .relist
                .as_ref()
                .is_some_and(|r| !r.is_empty())
        })
        .await;
        assert_eq!(listed(&cache).await.unwrap_err().kind(), "unavailable");
        send.send(Ok(watcher::Event::InitDone)).unwrap();
        until(|| health.lock().unwrap().is_none()).await;
        assert_eq!(listed(&cache).await.unwrap(), ["b"]);
        let mut changed = vec![
            changes.try_recv().unwrap().name,
            changes.try_recv().unwrap().name,
        ];
        changed.sort();
        assert_eq!(
            changed,
            ["a", "b"],
            "a gone and b added while the watch failed"
        );
        assert!(changes.try_recv().is_err());
    }
}
