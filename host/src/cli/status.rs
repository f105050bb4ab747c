//! `tend status`: what a running daemon reports on `[host] listen`.

use crate::config::Config;
use std::path::Path;
use std::process::ExitCode;

pub async fn show(config_path: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_path)?;
    let Some(addr) = config.host.listen else {
        anyhow::bail!(
            "{} has no [host] listen address: set listen = \"127.0.0.1:9464\" and restart tend to query it",
            config_path.display()
        );
    };
    let url = format!("http://{addr}/status");
    let body = reqwest::get(&url)
        .await
        .and_then(|r| r.error_for_status())
        .map_err(|e| anyhow::anyhow!("cannot reach tend at {url}: {e} (is `tend run` running?)"))?
        .text()
        .await?;
    if json {
        println!("{body}");
        return Ok(ExitCode::SUCCESS);
    }
    let status: serde_json::Value = serde_json::from_str(&body)?;
    println!(
        "node {}  ready {}  dry-run {}",
        status["node_name"], status["ready"], status["dry_run"]
    );
    if let Some(error) = status["config_error"].as_str() {
        println!("config rejected (the last good one runs): {error}");
    }
    println!(
        "{:<24} {:<11} {:<20} {:>6} {:>8}  last",
        "PLUGIN", "STATE", "DIGEST", "FAILS", "RUNS"
    );
    for plugin in status["plugins"].as_array().into_iter().flatten() {
        let digest = plugin["digest"].as_str().unwrap_or("-");
        let last = &plugin["last"];
        let last = if last.is_null() {
            "-".to_string()
        } else {
            format!(
                "{} {}: {}",
                last["time"].as_str().unwrap_or(""),
                last["health"].as_str().unwrap_or("failed"),
                last["message"].as_str().unwrap_or("")
            )
        };
        println!(
            "{:<24} {:<11} {:<20} {:>6} {:>8}  {last}",
            plugin["name"].as_str().unwrap_or(""),
            plugin["state"].as_str().unwrap_or(""),
            &digest[..digest.len().min(19)],
            plugin["failures"],
            plugin["reconciles"],
        );
        if let Some(error) = plugin["load_error"].as_str() {
            println!("{:<24} load error: {error}", "");
        }
    }
    Ok(ExitCode::SUCCESS)
}
