//! `tend plan` and `tend reconcile`: one reconcile, printed. Both go through a
//! running daemon when one answers on `[host] listen` (it holds the state
//! store and the budgets), and otherwise run in this process.

use super::node::{Node, plugin_named};
use super::report;
use crate::capabilities::gate;
use crate::config::Config;
use crate::runtime::CallRequest;
use crate::scheduler::{Trigger, trigger};
use serde_json::Value;
use std::path::Path;
use std::process::ExitCode;

fn exit(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// One dry-run reconcile of `name`, or of every enabled plugin. Changes nothing.
pub async fn plan(config_path: &Path, name: Option<&str>) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_path)?;
    if let Some(name) = name {
        plugin_named(&config, name)?;
    }
    let path = match name {
        Some(name) => format!("/plan/{name}"),
        None => "/plan".to_string(),
    };
    if let Some(addr) = config.host.listen
        && let Some(answer) = via_daemon(addr, &path).await?
    {
        let summaries = answer.as_array().cloned().unwrap_or_default();
        let by = format!(", by the tend daemon at {addr}");
        for summary in &summaries {
            report::print(summary, &by);
        }
        return Ok(exit(summaries.iter().all(report::succeeded)));
    }
    let node = Node::new(config)?;
    let plugins = match name {
        Some(name) => vec![node.config.plugins[name].clone()],
        None => node.config.enabled_plugins().cloned().collect(),
    };
    let mut ok = true;
    let planned = gate::Planned::default();
    for loaded in node.load(plugins).await {
        let plugin = match loaded.plugin {
            Ok(plugin) => plugin,
            Err(e) => {
                println!("{}: FAILED to load: {e}", loaded.config.name);
                ok = false;
                continue;
            }
        };
        let request = CallRequest {
            services: &node.services,
            planned: Some(planned.clone()),
            triggers: vec![Trigger::new(trigger::MANUAL)],
            node_name: &node.config.host.node_name,
            dry_run: true,
        };
        let result = node
            .runtime
            .reconcile(&plugin, &loaded.config, request)
            .await;
        let summary = result.summary(&loaded.config.name);
        ok &= report::succeeded(&summary);
        report::print(&summary, "");
    }
    Ok(exit(ok))
}

/// One reconcile of `name` now (a dry run if the config says so).
pub async fn reconcile(config_path: &Path, name: &str) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_path)?;
    if let Some(addr) = config.host.listen
        && let Some(last) = via_daemon(addr, &format!("/reconcile/{name}")).await?
    {
        report::print(&last, &format!(", by the tend daemon at {addr}"));
        return Ok(exit(report::succeeded(&last)));
    }
    let plugin_config = plugin_named(&config, name)?.clone();
    let node = Node::new(config)?;
    let runtime = node.runtime.clone();
    let file = plugin_config.file.clone();
    let plugin = tokio::task::spawn_blocking(move || runtime.load(&file)).await??;
    let dry_run = node.config.host.dry_run;
    if dry_run {
        println!("(dry run: [host] dry-run = true)");
    }
    let request = CallRequest {
        services: &node.services,
        planned: None,
        triggers: vec![Trigger::new(trigger::MANUAL)],
        node_name: &node.config.host.node_name,
        dry_run,
    };
    let result = node
        .runtime
        .reconcile(&plugin, &plugin_config, request)
        .await;
    let summary = result.summary(name);
    report::print(&summary, "");
    Ok(exit(report::succeeded(&summary)))
}

/// POST `path` to the daemon on `addr`; None when no daemon answers there.
async fn via_daemon(addr: std::net::SocketAddr, path: &str) -> anyhow::Result<Option<Value>> {
    let url = format!("http://{addr}{path}");
    let response = match reqwest::Client::new().post(&url).send().await {
        Err(e) if e.is_connect() => return Ok(None),
        other => other.map_err(|e| anyhow::anyhow!("tend daemon at {addr}: {e}"))?,
    };
    let status = response.status();
    let body = response.text().await?;
    if !status.is_success() {
        anyhow::bail!("tend daemon at {addr}: {}", body.trim_end());
    }
    Ok(Some(serde_json::from_str(&body)?))
}
