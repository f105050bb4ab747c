//! `tend status`: what a running daemon reports on `[host] listen`.

use super::report;
use crate::config::Config;
use serde_json::Value;
use std::path::Path;
use std::process::ExitCode;

/// One line through the one printer (made inert).
macro_rules! say {
    ($($arg:tt)*) => { report::line(&format!($($arg)*)) };
}

/// GET `path` from the daemon of `config_path`.
async fn fetch(config_path: &Path, path: &str) -> anyhow::Result<String> {
    let config = Config::load(config_path)?;
    let Some(listen) = &config.host.listen else {
        anyhow::bail!(
            "{} has no [host] listen address: set listen = \"127.0.0.1:9464\" and restart tend to query it",
            config_path.display()
        );
    };
    let addr = listen.resolve().map_err(anyhow::Error::msg)?;
    let url = format!("http://{addr}{path}");
    crate::tls::install_ring();
    let response = reqwest::get(&url)
        .await
        .map_err(|e| anyhow::anyhow!("cannot reach tend at {url}: {e} (is `tend run` running?)"))?;
    let status = response.status();
    let body = response.text().await?;
    if !status.is_success() {
        anyhow::bail!("tend at {url}: {}", body.trim_end());
    }
    Ok(body)
}

pub async fn show(config_path: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let body = fetch(config_path, "/status").await?;
    if json {
        report::json(&body);
        return Ok(ExitCode::SUCCESS);
    }
    let status: Value = serde_json::from_str(&body)?;
    say!(
        "node {}  ready {}  dry-run {}",
        text(&status["node_name"]),
        text(&status["ready"]),
        text(&status["dry_run"])
    );
    if let Some(error) = status["config_error"].as_str() {
        say!("config rejected (the last good one runs): {error}");
    }
    print_revision(&status["revision"]);
    say!(
        "{:<24} {:<11} {:<20} {:>6} {:>8}  last",
        "PLUGIN",
        "STATE",
        "DIGEST",
        "FAILS",
        "RUNS"
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
        say!(
            "{:<24} {:<11} {:<20} {:>6} {:>8}  {last}",
            plugin["name"].as_str().unwrap_or(""),
            plugin["state"].as_str().unwrap_or(""),
            &digest[..digest.len().min(19)],
            text(&plugin["failures"]),
            text(&plugin["reconciles"]),
        );
        if let Some(pinned) = plugin["pinned"].as_str() {
            say!("{:<24} pinned: {pinned}", "");
        }
        if let Some(error) = plugin["load_error"].as_str() {
            say!("{:<24} load error: {error}", "");
        }
    }
    print_budgets(&status["budgets"]);
    print_fleet(&status["fleet"]);
    Ok(ExitCode::SUCCESS)
}

/// The revision this node runs and what its plugins did under it.
fn print_revision(revision: &Value) {
    let counters = &revision["counters"];
    match revision["revision"].as_str() {
        None => say!("revision: not yet (a plugin is still in its first load)"),
        Some(name) => say!(
            "revision {name}: {} runs, {} errors, {} traps, {} timeouts since this tend began running it",
            text(&counters["runs"]),
            text(&counters["errors"]),
            text(&counters["traps"]),
            text(&counters["timeouts"])
        ),
    }
    if let Some(desired) = revision["desired"].as_str() {
        say!("  the config asks for {desired}: held, it runs when the rollout reaches this node");
    }
    if let Some(reverted) = revision["reverted"].as_str() {
        say!(
            "  gave {reverted} up on its own after it kept trapping or timing out: the leader fails it"
        );
    }
}

/// `[host.fleet]`: each class, whether this node holds its ticket, and why not.
fn print_fleet(fleet: &Value) {
    if fleet.is_null() {
        return;
    }
    say!(
        "fleet (namespace {}): this node's Lease renewed {}",
        text(&fleet["namespace"]),
        text(&fleet["renewed"])
    );
    for class in fleet["classes"].as_array().into_iter().flatten() {
        say!(
            "fleet budget {} ({}): {}{}",
            text(&class["name"]),
            lines(&class["operations"]).join(", "),
            match class["holding"].as_bool() {
                Some(true) => "ticket held; ",
                _ => "",
            },
            text(&class["note"])
        );
    }
}

fn print_budgets(budgets: &Value) {
    for budget in budgets.as_array().into_iter().flatten() {
        let next = budget["next_free"]
            .as_str()
            .map_or(String::new(), |at| format!(", next slot at {at}"));
        say!(
            "budget {}: {} of {} per {} used{next} ({})",
            budget["name"].as_str().unwrap_or(""),
            text(&budget["used"]),
            text(&budget["max"]),
            budget["per"].as_str().unwrap_or(""),
            lines(&budget["operations"]).join(", ")
        );
    }
}

/// A value as the table shows it: a string without JSON quotes, a number or
/// bool as written, nothing as `-` (and a `String`, so widths pad it: serde_json's
/// `Display` ignores them).
fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn lines(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
        .collect()
}

/// `tend status NAME`: why the plugin did or did not do something.
pub async fn show_plugin(config_path: &Path, name: &str, json: bool) -> anyhow::Result<ExitCode> {
    let body = fetch(config_path, &format!("/status/{name}")).await?;
    if json {
        report::json(&body);
        return Ok(ExitCode::SUCCESS);
    }
    let p: Value = serde_json::from_str(&body)?;
    say!("{}: {}", name, text(&p["state"]));
    say!("  file:     {} ({})", text(&p["file"]), text(&p["digest"]));
    if let Some(pinned) = p["pinned"].as_str() {
        say!("  pinned:   {pinned}");
    }
    if let Some(error) = p["load_error"].as_str() {
        say!("  load error: {error}");
    }
    let last = &p["last"];
    if last.is_null() {
        say!("  last run: none yet");
    } else {
        say!(
            "  last run: {} [{}]: {}: {}",
            text(&last["time"]),
            lines(&last["triggers"]).join(","),
            last["health"].as_str().unwrap_or("FAILED"),
            text(&last["message"])
        );
    }
    for noted in p["recent_mutations"].as_array().into_iter().flatten() {
        say!(
            "  mutation: {} {}",
            text(&noted["time"]),
            text(&noted["mutation"])
        );
    }
    for refusal in p["budget_refusals"].as_array().into_iter().flatten() {
        say!(
            "  refused:  {} {}",
            text(&refusal["time"]),
            text(&refusal["mutation"])
        );
    }
    let schedule = &p["schedule"];
    if schedule.is_null() {
        say!("  schedule: not scheduled (not loaded, or disabled)");
    } else {
        say!(
            "  schedule: next run {}; {} failure(s) in a row{}",
            text(&schedule["next_run"]),
            text(&schedule["failures_in_a_row"]),
            schedule["backoff"]
                .as_str()
                .map_or(String::new(), |b| format!(", backing off until {b}"))
        );
        let pending = lines(&schedule["pending_triggers"]);
        if !pending.is_empty() {
            say!("  pending:  {}", pending.join(", "));
        }
    }
    say!("  waits on: {}", lines(&p["waits_on"]).join("; "));
    let grants = lines(&p["grants"]);
    say!("  grants:   {}", grants.first().map_or("-", String::as_str));
    for grant in grants.iter().skip(1) {
        say!("            {grant}");
    }
    print_budgets(&p["budgets"]);
    Ok(ExitCode::SUCCESS)
}
