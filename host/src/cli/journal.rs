//! `tend journal`: every mutation plugins made (or planned), oldest first.

use super::report;
use crate::config::Config;
use crate::journal::{self, Filter};
use std::path::Path;
use std::process::ExitCode;

pub fn show(config_path: &Path, filter: &Filter, json: bool) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_path)?;
    let (entries, skipped) = journal::read(&config.host.state_dir, filter)?;
    for entry in &entries {
        if json {
            report::json(&serde_json::to_string(entry)?);
        } else {
            let mutation = crate::capabilities::gate::describe(
                entry.dry_run,
                &entry.capability,
                &entry.operation,
                &entry.target,
                &entry.detail,
                &entry.result,
            );
            report::line(&format!(
                "{} {} {mutation} [{}; {}]",
                entry.time,
                entry.plugin,
                entry.triggers.join(","),
                short_digest(&entry.digest),
            ));
        }
    }
    if skipped > 0 {
        eprintln!("{skipped} unreadable journal line(s) skipped (a write torn by a crash)");
    }
    if entries.is_empty() && !json {
        eprintln!(
            "no journal entries{}",
            if filter.plugin.is_some() || filter.since.is_some() {
                " match"
            } else {
                ""
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn short_digest(digest: &str) -> &str {
    &digest[..digest.len().min("sha256:".len() + 12)]
}
