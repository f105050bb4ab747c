//! What every one-shot command sets up from a config: the runtime with its
//! compile cache, the real services (backends, journal, budgets), and the
//! enabled plugins compiled.

use crate::capabilities::Services;
use crate::config::{Config, PluginConfig};
use crate::runtime::{CompiledPlugin, LoadError, Runtime};
use std::sync::Arc;

pub struct Node {
    pub config: Config,
    pub runtime: Arc<Runtime>,
    pub services: Services,
}

/// An enabled plugin with its compiled component, or why it failed to load.
pub struct Loaded {
    pub config: PluginConfig,
    pub plugin: Result<Arc<CompiledPlugin>, LoadError>,
}

impl Node {
    pub fn new(config: Config) -> anyhow::Result<Node> {
        let runtime = Arc::new(
            Runtime::new(
                Some(&config.host.cache_dir),
                config.enabled_plugins().count(),
            )?
            .with_precompiled(config.host.precompiled_dir.as_deref()),
        );
        let services = Services::real(
            &config.host.state_dir,
            &config.host.node_name,
            &config.host.capabilities,
            config.host.budgets.clone(),
        )?;
        // A one-shot run takes fleet tickets like the daemon; the daemon on
        // this node (or, without one, the liveness window) gives them back.
        services
            .budgets
            .set_fleet(config.host.fleet.clone().map(|settings| {
                crate::fleet::member(
                    &config.host.node_name,
                    settings,
                    config.host.capabilities.kube.kubeconfig.clone(),
                    // A one-shot run publishes no revision: it runs none for long.
                    None,
                ) as Arc<dyn crate::capabilities::gate::FleetBudget>
            }));
        Ok(Node {
            config,
            runtime,
            services,
        })
    }

    /// Compile `plugins` (pulled first if from a registry), in parallel off
    /// the async executor.
    pub async fn load(&self, plugins: Vec<PluginConfig>) -> Vec<Loaded> {
        let mut jobs = Vec::new();
        for config in plugins {
            let runtime = self.runtime.clone();
            let host = self.config.host.clone();
            jobs.push(tokio::spawn(async move {
                let plugin = crate::oci::load(
                    runtime,
                    &config.file,
                    config.oci.as_ref(),
                    &host.oci,
                    &host.cache_dir,
                )
                .await;
                Loaded { config, plugin }
            }));
        }
        let mut loaded = Vec::new();
        for job in jobs {
            loaded.push(job.await.expect("plugin load task panicked"));
        }
        loaded
    }

    /// Compile every enabled plugin.
    pub async fn load_enabled(&self) -> Vec<Loaded> {
        self.load(self.config.enabled_plugins().cloned().collect())
            .await
    }
}

/// The plugin `name` of `config`, or an error listing the configured ones.
pub fn plugin_named<'a>(config: &'a Config, name: &str) -> anyhow::Result<&'a PluginConfig> {
    config.plugins.get(name).ok_or_else(|| {
        let known: Vec<&str> = config.plugins.keys().map(String::as_str).collect();
        anyhow::anyhow!(
            "no plugin {name:?} in {}; configured plugins: {}",
            config.source.display(),
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        )
    })
}
