//! `tend plan` and `tend reconcile`: one reconcile, printed.

use super::node::Node;
use super::report;
use crate::config::Config;
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

/// One reconcile of `name` now (a dry run if the config says so): by the
/// running daemon when one answers on `[host] listen`, else in this process.
pub async fn reconcile(config_path: &Path, name: &str) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_path)?;
    if let Some(addr) = config.host.listen
        && let Some(code) = via_daemon(addr, name).await?
    {
        return Ok(code);
    }
    let node = Node::new(config)?;
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

/// Ask the daemon on `addr` to reconcile `name` and print its result; None when
/// no daemon answers there.
async fn via_daemon(addr: std::net::SocketAddr, name: &str) -> anyhow::Result<Option<ExitCode>> {
    let url = format!("http://{addr}/reconcile/{name}");
    let response = match reqwest::Client::new().post(&url).send().await {
        Err(e) if e.is_connect() => return Ok(None),
        other => other.map_err(|e| anyhow::anyhow!("tend daemon at {addr}: {e}"))?,
    };
    let status = response.status();
    let body = response.text().await?;
    if !status.is_success() {
        eprint!("tend daemon at {addr}: {body}");
        return Ok(Some(ExitCode::FAILURE));
    }
    let last: serde_json::Value = serde_json::from_str(&body)?;
    let message = last["message"].as_str().unwrap_or_default();
    let took = format!(
        "{:.0} ms, by the tend daemon at {addr}",
        last["elapsed_ms"].as_f64().unwrap_or(0.0)
    );
    let ok = match last["health"].as_str() {
        Some(health) => {
            println!("{name}: {health}: {message} ({took})");
            true
        }
        None => {
            println!("{name}: FAILED: {message} ({took})");
            false
        }
    };
    let mutations = last["mutations"].as_array().cloned().unwrap_or_default();
    for mutation in &mutations {
        println!("  {}", mutation.as_str().unwrap_or_default());
    }
    if mutations.is_empty() && ok {
        println!("  no changes");
    }
    Ok(Some(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }))
}
