//! `tend run`: the daemon. A supervisor owns the plugin table and reacts to
//! plugin files landing or changing (compiled in the background, swapped in
//! between reconciles), config changes and SIGHUP (validated, then applied as a
//! diff), and SIGTERM/SIGINT (reconciles in flight finish, then exit 0).

pub mod control;
mod fleet;
mod http;
mod leader;
mod listen;
mod metrics;
mod plan;
mod rollout;
mod runner;
mod sd_notify;
mod staged;
mod staging;
mod status;
pub mod table;

use crate::capabilities::Services;
use crate::config::{Config, diff::diff};
use crate::fleet::revision::Running;
use crate::fs_watch::{self, Watch};
use crate::oci;
use crate::runtime::{CompiledPlugin, Compiler, LoadError, Runtime};
use crate::scheduler::sources::{self, TriggerSource};
use crate::scheduler::{Schedule, Scheduler, Trigger, Triggers, trigger};
use metrics::Metrics;
use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use table::{Lifecycle, PluginEntry, PluginTable};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

/// Quiet time after changes in the plugins dir or to the config file. Short,
/// because it is part of every reload's latency; a file caught half-written
/// fails to load, its next write event loads it again, and the last content wins.
const RELOAD_QUIET: Duration = Duration::from_millis(25);

/// `[host]` settings that apply without a restart.
pub struct LiveHost {
    pub node_name: String,
    pub dry_run: bool,
}

/// What the supervisor, the runner and the status server share.
pub struct Shared {
    pub runtime: Arc<Runtime>,
    pub services: Services,
    metrics: Metrics,
    pub table: RwLock<PluginTable>,
    pub host: RwLock<LiveHost>,
    /// Manual triggers from `POST /reconcile/NAME` reach the scheduler here.
    triggers: Triggers,
    /// When each plugin's last manual reconcile was asked for (rate limit).
    manual: std::sync::Mutex<std::collections::HashMap<String, tokio::time::Instant>>,
    /// `tend reconcile NAME --record` waiting for NAME's next run, recorded.
    recordings: std::sync::Mutex<
        std::collections::HashMap<
            String,
            tokio::sync::oneshot::Sender<crate::replay::RecordedAnswer>,
        >,
    >,
    config_path: PathBuf,
    /// Why the newest config was rejected (the last good one keeps running).
    config_error: RwLock<Option<String>>,
    /// The last good config, for what `/status/NAME` explains.
    config: RwLock<Arc<Config>>,
    /// What each trigger source watches, for `/status/NAME`.
    waits_on: RwLock<std::collections::HashMap<String, Vec<String>>>,
    /// Held while `/plan` runs: one plan at a time.
    planning: tokio::sync::Mutex<()>,
    /// Whether this host leads (runs cluster-scope plugins).
    leadership: tokio::sync::watch::Receiver<leader::Leadership>,
    /// The revision this node runs and what its plugins did under it.
    running: Arc<Running>,
}

enum Event {
    /// Paths changed in a watched directory (plugins, config).
    Changed(BTreeSet<PathBuf>),
    /// A background load of a component file finished.
    Loaded(Load),
    /// The Cranelift build of a file first loaded with Winch is ready.
    Optimized(PathBuf, Result<Arc<CompiledPlugin>, LoadError>),
    /// What the operator's files ask for, taken in (staged rollouts).
    Staged(Box<Result<staging::Held, String>>),
}

/// A finished load: the config's `file` (for a plugin from a registry, its
/// `oci://` reference), the file compiled (pulled, or kept by staging), the
/// reference a tag was pinned to, and the compiled component.
struct Load {
    file: PathBuf,
    path: PathBuf,
    pinned: Option<String>,
    /// Whether a pull reached the registry (None: nothing was pulled).
    from_registry: Option<bool>,
    result: Result<Arc<CompiledPlugin>, LoadError>,
}

impl Load {
    /// A load that failed before anything was compiled.
    fn failed(file: PathBuf, error: LoadError) -> Load {
        Load {
            path: file.clone(),
            pinned: None,
            from_registry: None,
            result: Err(error),
            file,
        }
    }
}

pub async fn run(config_path: &Path) -> anyhow::Result<ExitCode> {
    let config_path = std::path::absolute(config_path)?;
    let config_seen = config_identity(&config_path);
    let mut config = Config::load(&config_path)?;
    // Compiled components are native code Tend runs: their directory is Tend's alone.
    crate::atomic::create_private_dir(&config.host.cache_dir)?;
    crate::atomic::check_own_dir(
        &config.host.cache_dir,
        "cache dir",
        "another user could replace the compiled components there, native code tend runs",
    )?;
    let runtime = Arc::new(
        Runtime::new(
            Some(&config.host.cache_dir),
            config.enabled_plugins().count(),
        )?
        .with_precompiled(config.host.precompiled_dir.as_deref()),
    );
    let staging = match staged::wanted(&config) {
        true => {
            let (staging, running) = staged::open(&config_path, &config)?;
            config = running;
            Some(staging)
        }
        false => None,
    };
    let (leading, leadership) = tokio::sync::watch::channel(leader::Leadership::default());
    let shared = Arc::new(Shared {
        services: Services::real(
            &config.host.state_dir,
            &config.host.node_name,
            &config.host.capabilities,
            config.host.budgets.clone(),
        )?,
        metrics: Metrics::new(),
        table: RwLock::new(PluginTable {
            plugins: config
                .plugins
                .iter()
                .map(|(n, p)| (n.clone(), PluginEntry::new(p.clone())))
                .collect(),
        }),
        host: RwLock::new(LiveHost {
            node_name: config.host.node_name.clone(),
            dry_run: config.host.dry_run,
        }),
        config_path: config_path.clone(),
        config_error: RwLock::new(None),
        config: RwLock::new(Arc::new(config.clone())),
        waits_on: RwLock::default(),
        planning: tokio::sync::Mutex::const_new(()),
        runtime: runtime.clone(),
        triggers: Triggers::default(),
        manual: Default::default(),
        recordings: Default::default(),
        leadership,
        running: Arc::default(),
    });
    tracing::info!(
        config = %config_path.display(),
        node = %config.host.node_name,
        dry_run = config.host.dry_run,
        pooling = runtime.pooling,
        "tend starting"
    );
    let _server = match &config.host.listen {
        Some(listen) => {
            let addr = listen.resolve().map_err(anyhow::Error::msg)?;
            Some(http::serve(addr, shared.clone()).await?)
        }
        None => None,
    };
    let state_dir = config.host.state_dir.clone();
    let _control = control::serve(&state_dir, shared.clone())?;
    crate::atomic::create_private_dir(&config.host.plugins_dir)?;
    let (events, inbox) = mpsc::unbounded_channel();
    let runner = Arc::new(runner::DaemonRunner {
        shared: shared.clone(),
    });
    let mut trigger_sources = sources::all(&shared.services.backends);
    // Unique per process: two replicas may share a node.
    let identity = format!("{}/{}", config.host.node_name, std::process::id());
    let kubeconfig = config.host.capabilities.kube.kubeconfig.clone();
    trigger_sources.push(Box::new(leader::LeaderSource::new(
        identity,
        kubeconfig,
        leading,
        shared.services.budgets.clone(),
    )));
    let (seen_tx, seen) = tokio::sync::watch::channel(rollout::Sighting::default());
    let mut fleet = fleet::Member::new(shared.leadership.clone(), seen_tx);
    fleet.update(&config.host, &shared.services.budgets, &shared.running);
    let mut supervisor = Supervisor {
        fleet,
        scheduler: Scheduler::with_triggers(runner, shared.triggers.clone()),
        shared,
        config,
        events,
        loading: HashSet::new(),
        dirty: HashSet::new(),
        dir_watch: None,
        sources: trigger_sources,
        config_seen,
        staging,
        seen,
        intaking: false,
        intake_again: false,
        waiting: None,
    };
    supervisor.start();
    let _watchdog = sd_notify::spawn_watchdog();
    let served = supervisor.serve(inbox).await;
    control::remove(&state_dir);
    served?;
    Ok(ExitCode::SUCCESS)
}

struct Supervisor {
    shared: Arc<Shared>,
    /// `[host.fleet]`'s member task, restarted when its settings change.
    fleet: fleet::Member,
    /// The last good config.
    config: Config,
    scheduler: Scheduler,
    events: mpsc::UnboundedSender<Event>,
    /// Component files being compiled, and those that changed again meanwhile.
    loading: HashSet<PathBuf>,
    dirty: HashSet<PathBuf>,
    dir_watch: Option<Watch>,
    sources: Vec<Box<dyn TriggerSource>>,
    /// What the config path led to when it was last read (see [`config_identity`]).
    config_seen: Option<ConfigIdentity>,
    /// The revisions this node holds, under staged rollouts (None: changes
    /// apply as they come).
    staging: Option<staging::Staging>,
    /// The rollout as the fleet member last read it.
    seen: tokio::sync::watch::Receiver<rollout::Sighting>,
    /// An intake runs, and the files changed again meanwhile.
    intaking: bool,
    intake_again: bool,
    /// Why a node that never adopted a revision waits (logged once).
    waiting: Option<String>,
}

/// The file the config path resolves to, through any symlinks, and its
/// identity. A ConfigMap volume's `tend.toml` is a link to `..data/tend.toml`
/// and kubelet updates it by renaming a new `..data` link over the old one:
/// `tend.toml` itself never changes, only the file it leads to.
type ConfigIdentity = (PathBuf, u64, u64, Option<std::time::SystemTime>, u64);

fn config_identity(path: &Path) -> Option<ConfigIdentity> {
    use std::os::unix::fs::MetadataExt;
    let target = std::fs::canonicalize(path).ok()?;
    let meta = std::fs::metadata(&target).ok()?;
    Some((
        target,
        meta.dev(),
        meta.ino(),
        meta.modified().ok(),
        meta.len(),
    ))
}

impl Supervisor {
    fn start(&mut self) {
        let files: BTreeSet<PathBuf> = self
            .config
            .enabled_plugins()
            .map(|p| p.file.clone())
            .collect();
        for file in files {
            self.load(file);
        }
        self.rewatch();
        // The files may have moved on while tend was down.
        self.take_in();
    }

    async fn serve(&mut self, mut inbox: mpsc::UnboundedReceiver<Event>) -> anyhow::Result<()> {
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let mut hup = signal(SignalKind::hangup())?;
        let mut notified_ready = false;
        // How often a staged node looks at its candidate's traps.
        let mut look = tokio::time::interval(staged::LOOK_EVERY);
        loop {
            // A staged node that adopted nothing yet runs no revision.
            let adopted = self.staging.as_ref().is_none_or(|s| s.adopted().is_some());
            let revision = self.shared.table.read().unwrap().revision(&self.config);
            self.shared.running.set(revision.filter(|_| adopted));
            if !notified_ready && self.shared.table.read().unwrap().is_ready() {
                notified_ready = true;
                tracing::info!("every enabled plugin is loaded or failed to load: ready");
                sd_notify::ready();
            }
            tokio::select! {
                Some(event) = inbox.recv() => match event {
                    Event::Changed(paths) => self.changed(paths),
                    Event::Loaded(load) => self.loaded(load),
                    Event::Optimized(path, result) => self.optimized(path, result),
                    Event::Staged(result) => self.staged(*result),
                },
                Ok(()) = self.seen.changed(), if self.staging.is_some() => self.follow(),
                _ = look.tick(), if self.staging.is_some() => self.follow(),
                _ = hup.recv() => self.reload_config("SIGHUP"),
                _ = term.recv() => break,
                _ = int.recv() => break,
            }
        }
        tracing::info!("stopping: letting reconciles in flight finish");
        sd_notify::stopping();
        self.scheduler.shutdown().await;
        tracing::info!("stopped");
        Ok(())
    }

    /// Watch the plugins dir, the folders of plugin files outside it, and the
    /// config file's folder (editors replace files by rename, so watch folders).
    fn rewatch(&mut self) {
        let mut dirs: BTreeSet<(PathBuf, bool)> = BTreeSet::new();
        dirs.insert((self.config.host.plugins_dir.clone(), false));
        for plugin in self.config.plugins.values().filter(|p| p.oci.is_none()) {
            if let Some(parent) = plugin.file.parent() {
                dirs.insert((parent.to_path_buf(), false));
            }
        }
        if let Some(parent) = self.shared.config_path.parent() {
            dirs.insert((parent.to_path_buf(), false));
        }
        let events = self.events.clone();
        self.dir_watch = fs_watch::debounced(
            &dirs,
            RELOAD_QUIET,
            |_| false,
            move |paths| {
                let _ = events.send(Event::Changed(paths));
            },
        )
        .inspect_err(|e| tracing::error!("cannot watch for plugin and config changes: {e}"))
        .ok();

        let triggers = self.scheduler.triggers();
        let mut waits_on: std::collections::HashMap<String, Vec<String>> = Default::default();
        for source in &mut self.sources {
            source.update(&self.config, &triggers);
            for plugin in self.config.plugins.keys() {
                waits_on
                    .entry(plugin.clone())
                    .or_default()
                    .extend(source.waits_on(&self.config, plugin));
            }
        }
        *self.shared.waits_on.write().unwrap() = waits_on;
    }

    /// Whether `paths` hold the config file itself, or something beside it
    /// (a `..data` link swap) that changed what the config path leads to.
    fn config_changed(&self, paths: &BTreeSet<PathBuf>) -> bool {
        let config = &self.shared.config_path;
        let beside = paths.iter().any(|p| p.parent() == config.parent());
        paths.contains(config) || (beside && config_identity(config) != self.config_seen)
    }

    fn changed(&mut self, paths: BTreeSet<PathBuf>) {
        if self.staging.is_some() {
            return self.changed_staged(&paths);
        }
        if self.config_changed(&paths) {
            self.reload_config("config file changed");
        }
        let in_use: BTreeSet<PathBuf> = self
            .config
            .enabled_plugins()
            .map(|p| p.file.clone())
            .collect();
        for path in paths.into_iter().filter(|p| in_use.contains(p)) {
            self.load(path);
        }
    }

    /// Compile `file` off the executor (pulled first, for a plugin from a
    /// registry). A change during a compile marks it dirty: it is compiled
    /// again when this one finishes, so the last content wins.
    fn load(&mut self, file: PathBuf) {
        if !self.loading.insert(file.clone()) {
            self.dirty.insert(file);
            return;
        }
        tracing::info!(file = %file.display(), "loading component");
        let runtime = self.shared.runtime.clone();
        let events = self.events.clone();
        // Under staged rollouts, what the adopted revision keeps, and nothing else.
        let kept = self.staging.as_ref().map(|s| s.component(&file));
        let source = self
            .config
            .enabled_plugins()
            .find(|p| p.file == file)
            .and_then(|p| p.oci.clone());
        let settings = self.config.host.oci.clone();
        let cache_dir = self.config.host.cache_dir.clone();
        tokio::spawn(async move {
            let compile = |path: PathBuf| async move {
                tokio::task::spawn_blocking(move || runtime.load_quick(&path).map(Arc::new))
                    .await
                    .expect("component load task panicked")
            };
            let load = match (kept, source) {
                (Some(None), _) => Load::failed(
                    file,
                    LoadError::Fetch("the adopted revision keeps no component for it".into()),
                ),
                (Some(Some(kept)), _) => {
                    let result = compile(kept.path.clone()).await;
                    Load {
                        result: kept.checked(result),
                        path: kept.path,
                        pinned: kept.pinned,
                        from_registry: None,
                        file,
                    }
                }
                (None, None) => Load {
                    result: compile(file.clone()).await,
                    path: file.clone(),
                    pinned: None,
                    from_registry: None,
                    file,
                },
                (None, Some(source)) => match oci::fetch(&source, &settings, &cache_dir).await {
                    Ok(pulled) => {
                        let result = compile(pulled.path.clone()).await;
                        Load {
                            result: pulled.checked(result),
                            path: pulled.path,
                            pinned: Some(pulled.pinned.to_string()),
                            from_registry: Some(pulled.from_registry),
                            file,
                        }
                    }
                    Err(e) => Load::failed(file, LoadError::Fetch(e)),
                },
            };
            let _ = events.send(Event::Loaded(load));
        });
    }

    /// Build `path` with Cranelift (and cache it) in the background; `file`
    /// is the config's name for it.
    fn optimize(&self, file: PathBuf, path: PathBuf) {
        let runtime = self.shared.runtime.clone();
        let events = self.events.clone();
        tokio::task::spawn_blocking(move || {
            let result = runtime.load(&path).map(Arc::new);
            let _ = events.send(Event::Optimized(file, result));
        });
    }

    /// Swap the Cranelift build in wherever the Winch build of the same content runs.
    fn optimized(&mut self, file: PathBuf, result: Result<Arc<CompiledPlugin>, LoadError>) {
        let plugin = match result {
            Ok(plugin) => plugin,
            Err(e) => {
                tracing::warn!(file = %file.display(), "Cranelift build failed, the Winch build keeps running: {e}");
                return;
            }
        };
        let mut table = self.shared.table.write().unwrap();
        for (name, entry) in table.plugins.iter_mut() {
            let running = entry.compiled.as_ref();
            if entry.config.file == file
                && running
                    .is_some_and(|c| c.digest == plugin.digest && c.compiler == Compiler::Winch)
            {
                tracing::info!(plugin = %name, load_ms = plugin.load_time.as_millis() as u64, "optimized (Cranelift) build swapped in");
                entry.compiled = Some(plugin.clone());
            }
        }
        drop(table);
        self.shared
            .metrics
            .compile_cache
            .with_label_values(&[plugin.cache.label()])
            .inc();
        self.evict_cache();
    }

    fn schedule(&mut self, name: &str) {
        if let Some(plugin) = self.config.plugins.get(name) {
            self.scheduler.upsert(Schedule {
                plugin: name.to_string(),
                interval: plugin.interval,
            });
        }
    }

    fn loaded(
        &mut self,
        Load {
            file,
            path,
            pinned,
            from_registry,
            result,
        }: Load,
    ) {
        self.loading.remove(&file);
        if self.dirty.remove(&file) {
            self.load(file);
            return;
        }
        let names: Vec<String> = self
            .shared
            .table
            .read()
            .unwrap()
            .using_file(&file)
            .cloned()
            .collect();
        let metrics = &self.shared.metrics;
        match result {
            Ok(plugin) => {
                // A Winch build bypasses the cache; its Cranelift build is counted later.
                if plugin.compiler == Compiler::Cranelift {
                    metrics
                        .compile_cache
                        .with_label_values(&[plugin.cache.label()])
                        .inc();
                }
                for name in names {
                    self.swap_in(&name, plugin.clone());
                    if let Some(entry) = self.shared.table.write().unwrap().plugins.get_mut(&name) {
                        entry.pinned = pinned.clone();
                    }
                }
                if let (Some(pinned), Some(from_registry)) = (&pinned, from_registry) {
                    tracing::info!(file = %file.display(), %pinned, from_registry, "component from a registry ready");
                }
                if plugin.compiler == Compiler::Winch {
                    self.optimize(file, path);
                }
                self.evict_cache();
            }
            Err(LoadError::Read { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                for name in names {
                    tracing::warn!(plugin = %name, file = %file.display(), "component file is missing: plugin stopped");
                    self.scheduler.remove(&name);
                    if let Some(entry) = self.shared.table.write().unwrap().plugins.get_mut(&name) {
                        entry.compiled = None;
                        entry.state = Lifecycle::Missing;
                    }
                }
            }
            Err(error) => {
                for name in names {
                    metrics
                        .load_errors
                        .with_label_values(&[name.as_str()])
                        .inc();
                    metrics
                        .reloads
                        .with_label_values(&["plugin", "error"])
                        .inc();
                    let mut table = self.shared.table.write().unwrap();
                    let Some(entry) = table.plugins.get_mut(&name) else {
                        continue;
                    };
                    entry.load_error = Some(error.to_string());
                    if entry.compiled.is_some() {
                        tracing::error!(plugin = %name, "{error}; the previous version keeps running");
                    } else {
                        tracing::error!(plugin = %name, "{error}; the plugin is not running");
                        entry.state = Lifecycle::LoadError;
                    }
                }
            }
        }
    }

    fn swap_in(&mut self, name: &str, plugin: Arc<CompiledPlugin>) {
        let previous = {
            let mut table = self.shared.table.write().unwrap();
            let Some(entry) = table.plugins.get_mut(name) else {
                return;
            };
            entry.load_error = None;
            let previous = entry.compiled.replace(plugin.clone());
            if matches!(
                entry.state,
                Lifecycle::Loading | Lifecycle::LoadError | Lifecycle::Missing
            ) {
                entry.state = Lifecycle::Ready;
            }
            previous
        };
        match previous {
            None => {
                tracing::info!(
                    plugin = %name,
                    digest = %plugin.digest,
                    load_ms = plugin.load_time.as_millis() as u64,
                    cache = ?plugin.cache,
                    compiler = ?plugin.compiler,
                    "plugin loaded"
                );
                self.schedule(name);
            }
            Some(old) if old.digest == plugin.digest => {}
            Some(old) => {
                tracing::info!(plugin = %name, from = %old.digest, to = %plugin.digest, load_ms = plugin.load_time.as_millis() as u64, "plugin reloaded");
                self.shared
                    .metrics
                    .reloads
                    .with_label_values(&["plugin", "ok"])
                    .inc();
                self.schedule(name);
                self.scheduler
                    .triggers()
                    .send(name, Trigger::new(trigger::RELOAD));
            }
        }
    }

    /// Evict compiled builds no plugin runs, nor a held revision names.
    fn evict_cache(&self) {
        let table = self.shared.table.read().unwrap();
        let held = self.staging.iter().flat_map(|s| s.digests_held());
        let in_use: HashSet<String> = table
            .plugins
            .values()
            .filter_map(|e| e.compiled.as_ref().map(|c| c.digest.clone()))
            .chain(held)
            .collect();
        drop(table);
        self.shared
            .runtime
            .evict_cache(&in_use, self.config.host.cache_max_size.0);
    }

    /// Keep the last good config: log why, count it, show it in `/status`.
    fn reject_config(&self, message: String) {
        tracing::error!("config rejected, the last good config keeps running: {message}");
        self.shared
            .metrics
            .reloads
            .with_label_values(&["config", "error"])
            .inc();
        *self.shared.config_error.write().unwrap() = Some(message);
    }

    /// Validate the config file; apply it as a diff, or keep the last good one.
    fn reload_config(&mut self, why: &str) {
        self.config_seen = config_identity(&self.shared.config_path);
        if self.staging.is_some() {
            return self.take_in();
        }
        match Config::load(&self.shared.config_path) {
            Ok(new) => self.apply_config(new, why, BTreeSet::new()),
            Err(e) => self.reject_config(format!("{e} ({why})")),
        }
    }

    /// Apply `new` as a diff against the running config, or keep the
    /// running one; `components_changed`: plugin files whose component
    /// changed without their name changing (staged: loaded again).
    fn apply_config(&mut self, new: Config, why: &str, components_changed: BTreeSet<PathBuf>) {
        let shared = self.shared.clone();
        let metrics = &shared.metrics;
        let changes = diff(&self.config, &new);
        if !changes.needs_restart.is_empty() {
            return self.reject_config(format!(
                "{}: changing [host] {} needs a restart of tend",
                self.shared.config_path.display(),
                changes.needs_restart.join(", ")
            ));
        }
        *self.shared.config_error.write().unwrap() = None;
        *self.shared.host.write().unwrap() = LiveHost {
            node_name: new.host.node_name.clone(),
            dry_run: new.host.dry_run,
        };
        self.shared
            .services
            .budgets
            .set_rules(new.host.budgets.clone());
        self.fleet.update(
            &new.host,
            &self.shared.services.budgets,
            &self.shared.running,
        );
        *self.shared.config.write().unwrap() = Arc::new(new.clone());
        let old = std::mem::replace(&mut self.config, new);
        {
            let mut table = self.shared.table.write().unwrap();
            for name in &changes.removed {
                self.scheduler.remove(name);
                match self.config.plugins.get(name) {
                    Some(disabled) => {
                        table
                            .plugins
                            .insert(name.clone(), PluginEntry::new(disabled.clone()));
                    }
                    None => {
                        table.plugins.remove(name);
                    }
                }
            }
            for name in &changes.added {
                table.plugins.insert(
                    name.clone(),
                    PluginEntry::new(self.config.plugins[name].clone()),
                );
            }
            // Everything else keeps its component and state; new settings apply
            // from the next reconcile on.
            for (name, plugin) in &self.config.plugins {
                if old.plugins.get(name) == Some(plugin) {
                    continue;
                }
                match table.plugins.get_mut(name) {
                    Some(entry) => entry.config = plugin.clone(),
                    None => {
                        table
                            .plugins
                            .insert(name.clone(), PluginEntry::new(plugin.clone()));
                    }
                }
            }
        }
        let reload_files: BTreeSet<PathBuf> = changes
            .added
            .iter()
            .chain(&changes.file_changed)
            .map(|name| self.config.plugins[name].file.clone())
            .chain(components_changed)
            .collect();
        for file in reload_files {
            self.load(file);
        }
        for name in &changes.settings_changed {
            self.schedule(name);
            self.scheduler
                .triggers()
                .send(name, Trigger::new(trigger::CONFIG));
        }
        self.rewatch();
        metrics.reloads.with_label_values(&["config", "ok"]).inc();
        tracing::info!(
            added = ?changes.added,
            removed = ?changes.removed,
            file_changed = ?changes.file_changed,
            settings_changed = ?changes.settings_changed,
            "config reloaded ({why})"
        );
    }
}
