//! Every configured plugin, its compiled component and where it is in its
//! lifecycle: what `/status` and `tend status` show, and what the runner reads
//! at the start of each reconcile (so a swapped component serves the next one
//! while a reconcile in flight finishes on the old).

use crate::capabilities::Mutation;
use crate::config::PluginConfig;
use crate::runtime::{CompiledPlugin, Compiler, Health};
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    /// First compile in progress; nothing to run yet.
    Loading,
    /// Loaded; the last reconcile (if any) succeeded.
    Ready,
    /// Loaded; the last reconcile failed and the plugin backs off.
    Failing,
    /// No version could be loaded (see `load_error`).
    LoadError,
    /// `enabled = false` in the config.
    Disabled,
    /// The component file does not exist.
    Missing,
}

impl Lifecycle {
    pub const ALL: [Lifecycle; 6] = [
        Lifecycle::Loading,
        Lifecycle::Ready,
        Lifecycle::Failing,
        Lifecycle::LoadError,
        Lifecycle::Disabled,
        Lifecycle::Missing,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Lifecycle::Loading => "loading",
            Lifecycle::Ready => "ready",
            Lifecycle::Failing => "failing",
            Lifecycle::LoadError => "load-error",
            Lifecycle::Disabled => "disabled",
            Lifecycle::Missing => "missing",
        }
    }
}

/// The last reconcile's result, in the shape of [`crate::runtime::ReconcileReport::summary`].
#[derive(Debug, Clone, Serialize)]
pub struct LastRun {
    pub plugin: String,
    pub time: String,
    pub digest: String,
    pub triggers: Vec<String>,
    pub health: Option<Health>,
    pub message: String,
    pub elapsed_ms: f64,
    /// What it changed, planned or was refused.
    pub mutations: Vec<Mutation>,
}

pub struct PluginEntry {
    pub config: PluginConfig,
    pub compiled: Option<Arc<CompiledPlugin>>,
    pub state: Lifecycle,
    /// Why the newest file could not be loaded (the previous version may still serve).
    pub load_error: Option<String>,
    /// For a plugin from a registry: `oci://…@sha256:…`, the digest running
    /// (what a tag resolved to).
    pub pinned: Option<String>,
    pub last: Option<LastRun>,
    /// Failed reconciles in a row.
    pub failures: u32,
    pub reconciles: u64,
    /// The newest mutations and, apart, budget refusals (at most [`KEPT`]
    /// each), oldest first: what `tend status NAME` shows.
    pub recent: VecDeque<Noted>,
    pub refusals: VecDeque<Noted>,
}

/// Mutations and refusals kept per plugin for `tend status NAME`.
pub const KEPT: usize = 10;

/// A mutation in words, and when.
#[derive(Debug, Clone, Serialize)]
pub struct Noted {
    pub time: String,
    pub mutation: String,
}

fn keep(list: &mut VecDeque<Noted>, time: &str, mutation: &Mutation) {
    if list.len() == KEPT {
        list.pop_front();
    }
    list.push_back(Noted {
        time: time.to_string(),
        mutation: mutation.describe(),
    });
}

impl PluginEntry {
    pub fn new(config: PluginConfig) -> Self {
        let state = if config.enabled {
            Lifecycle::Loading
        } else {
            Lifecycle::Disabled
        };
        PluginEntry {
            config,
            compiled: None,
            state,
            load_error: None,
            pinned: None,
            last: None,
            failures: 0,
            reconciles: 0,
            recent: Default::default(),
            refusals: Default::default(),
        }
    }

    /// Remember a reconcile's mutations and budget refusals (bounded).
    pub fn note(&mut self, time: &str, mutations: &[Mutation]) {
        for mutation in mutations {
            match mutation.result.starts_with("budget-exhausted") {
                true => keep(&mut self.refusals, time, mutation),
                false => keep(&mut self.recent, time, mutation),
            }
        }
    }
}

/// One plugin as `/status` shows it.
#[derive(Debug, Serialize)]
pub struct PluginStatus<'a> {
    pub name: &'a str,
    pub state: &'static str,
    pub file: String,
    pub digest: Option<&'a str>,
    pub compiler: Option<Compiler>,
    pub load_error: Option<&'a str>,
    pub pinned: Option<&'a str>,
    pub failures: u32,
    pub reconciles: u64,
    pub last: Option<&'a LastRun>,
}

#[derive(Default)]
pub struct PluginTable {
    pub plugins: BTreeMap<String, PluginEntry>,
}

impl PluginTable {
    pub fn status(&self) -> Vec<PluginStatus<'_>> {
        self.plugins
            .iter()
            .map(|(name, e)| PluginStatus {
                name,
                state: e.state.name(),
                file: e.config.file.display().to_string(),
                digest: e.compiled.as_ref().map(|c| c.digest.as_str()),
                compiler: e.compiled.as_ref().map(|c| c.compiler),
                load_error: e.load_error.as_deref(),
                pinned: e.pinned.as_deref(),
                failures: e.failures,
                reconciles: e.reconciles,
                last: e.last.as_ref(),
            })
            .collect()
    }

    /// Started: no enabled plugin is still in its first load (what systemd's
    /// READY=1 waits for).
    pub fn is_ready(&self) -> bool {
        !self.plugins.values().any(|e| e.state == Lifecycle::Loading)
    }

    /// The revision this node runs under `config`: its text and the
    /// component each enabled plugin runs ("unloaded" for one that has
    /// none); None while a plugin is still in its first load.
    pub fn revision(&self, config: &crate::config::Config) -> Option<String> {
        if !self.is_ready() {
            return None;
        }
        let plugins = self
            .plugins
            .iter()
            .filter(|(_, e)| e.config.enabled)
            .map(|(name, e)| {
                let digest = e.compiled.as_ref().map(|c| c.digest.clone());
                (name.clone(), digest.unwrap_or_else(|| "unloaded".into()))
            })
            .collect();
        Some(crate::fleet::revision::revision(&config.digest, &plugins))
    }

    /// Why `/readyz` answers 503, one line per enabled plugin that is still in
    /// its first load, whose newest file failed to load (even while a previous
    /// version serves: the file the config names is not running) or whose file
    /// is missing. Empty when every enabled plugin runs what the config names.
    pub fn not_ready(&self) -> Vec<String> {
        self.plugins
            .iter()
            .filter(|(_, e)| e.config.enabled)
            .filter_map(|(name, e)| {
                let file = e.config.file.display();
                match (&e.load_error, e.state) {
                    (Some(error), Lifecycle::LoadError) => {
                        Some(format!("plugin {name} failed to load: {error}"))
                    }
                    (Some(error), _) => Some(format!(
                        "plugin {name}: its newest file failed to load, the previous version keeps running: {error}"
                    )),
                    (None, Lifecycle::Loading) => Some(format!("plugin {name}: loading {file}")),
                    (None, Lifecycle::Missing) => Some(format!(
                        "plugin {name}: its component file {file} does not exist (install it, or remove or disable the plugin in the config)"
                    )),
                    _ => None,
                }
            })
            .collect()
    }

    /// Enabled plugins whose component is `path`.
    pub fn using_file<'a>(
        &'a self,
        path: &'a std::path::Path,
    ) -> impl Iterator<Item = &'a String> + 'a {
        self.plugins
            .iter()
            .filter(move |(_, e)| e.config.enabled && e.config.file == path)
            .map(|(name, _)| name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(states: &[(&str, Lifecycle, Option<&str>, bool)]) -> PluginTable {
        let mut table = PluginTable::default();
        for (name, state, error, enabled) in states {
            let text = format!(
                "[host]\nplugins-dir = '/p'\nstate-dir = '/s'\n[plugins.{name}]\nenabled = {enabled}\n"
            );
            let config =
                crate::config::Config::parse(std::path::Path::new("/etc/tend.toml"), &text)
                    .unwrap();
            let mut entry = PluginEntry::new(config.plugins[*name].clone());
            entry.state = *state;
            entry.load_error = error.map(String::from);
            table.plugins.insert(name.to_string(), entry);
        }
        table
    }

    #[test]
    fn ready_when_every_enabled_plugin_runs_what_the_config_names() {
        let t = table(&[
            ("a", Lifecycle::Ready, None, true),
            ("b", Lifecycle::Failing, None, true),
            ("c", Lifecycle::Disabled, None, false),
        ]);
        assert!(t.is_ready());
        assert_eq!(t.not_ready(), Vec::<String>::new());
    }

    #[test]
    fn load_errors_missing_files_and_first_loads_are_not_ready_and_say_why() {
        let t = table(&[
            (
                "a",
                Lifecycle::LoadError,
                Some("not a component: bad magic"),
                true,
            ),
            ("b", Lifecycle::Ready, Some("validation failed"), true),
            ("c", Lifecycle::Missing, None, true),
            ("d", Lifecycle::Loading, None, true),
            ("e", Lifecycle::Ready, None, true),
        ]);
        let reasons = t.not_ready();
        assert_eq!(reasons.len(), 4, "{reasons:?}");
        assert_eq!(
            reasons[0],
            "plugin a failed to load: not a component: bad magic"
        );
        assert!(reasons[1].starts_with("plugin b: its newest file failed to load, the previous version keeps running: validation failed"));
        assert!(
            reasons[2].starts_with("plugin c: its component file /p/c.wasm does not exist"),
            "{}",
            reasons[2]
        );
        assert_eq!(reasons[3], "plugin d: loading /p/d.wasm");
        assert!(!t.is_ready());
    }
}
