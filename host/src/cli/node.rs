//! What every command sets up from a config: the runtime with its compile
//! cache, the real backends, and the enabled plugins compiled.

use crate::capabilities::Backends;
use crate::config::{Config, PluginConfig};
use crate::journal::{self, Journal};
use crate::runtime::{CompiledPlugin, LoadError, Runtime};
use std::path::Path;
use std::sync::Arc;

pub struct Node {
    pub config: Config,
    pub runtime: Arc<Runtime>,
    pub backends: Backends,
    journal: Journal,
}

/// An enabled plugin with its compiled component, or why it failed to load.
pub struct Loaded {
    pub config: PluginConfig,
    pub plugin: Result<Arc<CompiledPlugin>, LoadError>,
}

impl Node {
    pub fn open(config_path: &Path) -> anyhow::Result<Node> {
        Self::new(Config::load(config_path)?)
    }

    pub fn new(config: Config) -> anyhow::Result<Node> {
        let runtime = Arc::new(Runtime::new(Some(&config.host.cache_dir))?);
        let backends = Backends::real(&config.host.state_dir)?;
        let journal = Journal::open(&config.host.state_dir)?;
        Ok(Node {
            config,
            runtime,
            backends,
            journal,
        })
    }

    /// Append what a manual reconcile did (or planned) to the journal.
    pub fn journal(&self, plugin: &str, digest: &str, mutations: &[crate::capabilities::Mutation]) {
        let entries = journal::entries(
            &journal::Entry::now(),
            plugin,
            digest,
            &["manual".to_string()],
            mutations,
        );
        if let Err(e) = self.journal.append(&entries) {
            eprintln!(
                "warning: cannot append to the journal under {}: {e}",
                self.config.host.state_dir.display()
            );
        }
    }

    /// Compile every enabled plugin, in parallel off the async executor.
    pub async fn load_enabled(&self) -> Vec<Loaded> {
        let mut jobs = Vec::new();
        for config in self.config.enabled_plugins().cloned() {
            let runtime = self.runtime.clone();
            jobs.push(tokio::task::spawn_blocking(move || {
                let plugin = runtime.load(&config.file).map(Arc::new);
                Loaded { config, plugin }
            }));
        }
        let mut loaded = Vec::new();
        for job in jobs {
            loaded.push(job.await.expect("plugin load task panicked"));
        }
        loaded
    }
}
