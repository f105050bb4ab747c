//! `tend plan` and `tend reconcile`: one reconcile, printed.

use super::node::Node;
use super::report;
use crate::runtime::Trigger;
use crate::runtime::call::CallRequest;
use std::path::Path;
use std::process::ExitCode;

/// One dry-run reconcile of every enabled plugin. Changes nothing.
pub async fn plan(config_path: &Path) -> anyhow::Result<ExitCode> {
    let node = Node::open(config_path)?;
    let mut failed = false;
    for loaded in node.load_enabled().await {
        let plugin = match loaded.plugin {
            Ok(plugin) => plugin,
            Err(e) => {
                println!("{}: FAILED to load: {e}", loaded.config.name);
                failed = true;
                continue;
            }
        };
        let request = CallRequest {
            backends: &node.backends,
            triggers: vec![Trigger::new("manual")],
            node_name: &node.config.host.node_name,
            dry_run: true,
        };
        let result = node
            .runtime
            .reconcile(&plugin, &loaded.config, request)
            .await;
        node.journal(&loaded.config.name, &plugin.digest, &result.mutations);
        failed |= result.result.is_err();
        report::print(&loaded.config.name, &result);
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// One reconcile of `name` now (a dry run if the config says so).
pub async fn reconcile(config_path: &Path, name: &str) -> anyhow::Result<ExitCode> {
    let node = Node::open(config_path)?;
    let Some(config) = node.config.plugins.get(name) else {
        let known: Vec<&str> = node.config.plugins.keys().map(String::as_str).collect();
        anyhow::bail!(
            "no plugin {name:?} in {}; configured plugins: {}",
            config_path.display(),
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        );
    };
    let runtime = node.runtime.clone();
    let file = config.file.clone();
    let plugin = tokio::task::spawn_blocking(move || runtime.load(&file)).await??;
    let dry_run = node.config.host.dry_run;
    if dry_run {
        println!("(dry run: [host] dry-run = true)");
    }
    let request = CallRequest {
        backends: &node.backends,
        triggers: vec![Trigger::new("manual")],
        node_name: &node.config.host.node_name,
        dry_run,
    };
    let result = node.runtime.reconcile(&plugin, config, request).await;
    node.journal(name, &plugin.digest, &result.mutations);
    report::print(name, &result);
    Ok(if result.result.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
