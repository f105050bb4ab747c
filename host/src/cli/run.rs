//! `tend run`: the daemon.

use super::node::{Loaded, Node};
use super::report;
use crate::capabilities::Backends;
use crate::config::PluginConfig;
use crate::runtime::call::CallRequest;
use crate::runtime::{CompiledPlugin, Runtime, Trigger};
use crate::scheduler::watch::{self, WatchPath};
use crate::scheduler::{RunFuture, RunResult, Runner, Schedule, Scheduler};
use std::collections::HashMap;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use tracing::Instrument;

pub async fn run(config_path: &Path) -> anyhow::Result<ExitCode> {
    let node = Node::open(config_path)?;
    tracing::info!(
        config = %config_path.display(),
        node = %node.config.host.node_name,
        dry_run = node.config.host.dry_run,
        pooling = node.runtime.pooling,
        "tend starting"
    );
    let mut plugins = HashMap::new();
    for Loaded { config, plugin } in node.load_enabled().await {
        match plugin {
            Ok(plugin) => {
                tracing::info!(
                    plugin = %config.name,
                    digest = %plugin.digest,
                    load_ms = plugin.load_time.as_millis() as u64,
                    cache = ?plugin.cache,
                    "plugin loaded"
                );
                plugins.insert(config.name.clone(), (plugin, config));
            }
            Err(e) => tracing::error!(plugin = %config.name, "plugin not loaded: {e}"),
        }
    }
    let schedules = plugins
        .values()
        .map(|(_, c)| Schedule {
            plugin: c.name.clone(),
            interval: c.interval,
        })
        .collect();
    let watches: Vec<WatchPath> = plugins
        .values()
        .flat_map(|(_, c)| {
            c.watch.iter().map(|p| WatchPath {
                plugin: c.name.clone(),
                path: p.clone(),
            })
        })
        .collect();
    let runner = Arc::new(DaemonRunner {
        runtime: node.runtime.clone(),
        backends: node.backends.clone(),
        plugins,
        node_name: node.config.host.node_name.clone(),
        dry_run: node.config.host.dry_run,
    });
    let scheduler = Scheduler::start(runner, schedules);
    let _watch = if watches.is_empty() {
        None
    } else {
        Some(watch::start(watches, scheduler.triggers())?)
    };

    wait_for_stop_signal().await?;
    tracing::info!("stopping: letting reconciles in flight finish");
    scheduler.shutdown().await;
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}

async fn wait_for_stop_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

/// Runs reconciles for the scheduler and logs what they did.
struct DaemonRunner {
    runtime: Arc<Runtime>,
    backends: Backends,
    plugins: HashMap<String, (Arc<CompiledPlugin>, PluginConfig)>,
    node_name: String,
    dry_run: bool,
}

impl Runner for DaemonRunner {
    fn run(&self, name: &str, triggers: Vec<Trigger>) -> RunFuture<'_> {
        let (plugin, config) = self.plugins[name].clone();
        let trigger_list = triggers
            .iter()
            .map(Trigger::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let span = tracing::info_span!("reconcile", plugin = %name, trigger = %trigger_list);
        Box::pin(
            async move {
                let request = CallRequest {
                    backends: &self.backends,
                    triggers,
                    node_name: &self.node_name,
                    dry_run: self.dry_run,
                };
                let report = self.runtime.reconcile(&plugin, &config, request).await;
                for mutation in &report.mutations {
                    tracing::info!("{}", report::describe(mutation));
                }
                if report.logs_dropped > 0 {
                    tracing::warn!(
                        dropped = report.logs_dropped,
                        "plugin log lines dropped (over the per-reconcile budget)"
                    );
                }
                let elapsed_ms = report.elapsed.as_secs_f64() * 1000.0;
                match report.result {
                    Ok(outcome) => {
                        tracing::info!(
                            health = report::health_word(outcome.health),
                            elapsed_ms,
                            "{}",
                            outcome.message
                        );
                        RunResult {
                            ok: true,
                            requeue_after: outcome.requeue_after,
                        }
                    }
                    Err(failure) => {
                        tracing::error!(elapsed_ms, "reconcile failed: {failure}");
                        RunResult {
                            ok: false,
                            requeue_after: None,
                        }
                    }
                }
            }
            .instrument(span),
        )
    }
}
