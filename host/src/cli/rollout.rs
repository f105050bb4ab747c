//! `tend rollout status -c FILE`: the fleet by revision. Every tend with
//! `[host.fleet]` publishes the revision it runs and what its plugins did
//! under it on its node Lease ([`crate::fleet::revision`]); this reads them
//! all from the API server, with the config's kubeconfig, and adds them up
//! per revision: which revisions run where, and how each fares.

use super::report;
use crate::config::Config;
use crate::fleet::kube::KubeFleet;
use crate::fleet::revision::{Tally, tally};
use crate::fleet::store::FleetStore;
use std::path::Path;
use std::process::ExitCode;

pub async fn status(config_path: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_path)?;
    let Some(settings) = &config.host.fleet else {
        anyhow::bail!(
            "{}: no [host.fleet]: nodes publish their revisions on their Leases in the fleet's namespace only with [host.fleet] set (README, \"Fleet budgets\")",
            config_path.display()
        );
    };
    let store = KubeFleet::new(
        settings,
        config.host.node_name.clone(),
        config.host.capabilities.kube.kubeconfig.clone(),
    );
    let reports = store.reports().await.map_err(|e| {
        anyhow::anyhow!(
            "cannot read the node Leases in namespace {}: {e}",
            settings.namespace
        )
    })?;
    let tally = tally(reports.iter().map(Option::as_deref));
    if json {
        report::json(&serde_json::to_string_pretty(&tally)?);
    } else {
        for line in table(&tally) {
            report::line(&line);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The tally for people: one row per revision, then the Leases that said
/// nothing readable.
fn table(tally: &Tally) -> Vec<String> {
    let mut lines = vec![format!(
        "{:<20} {:>6} {:>8} {:>8} {:>7} {:>7} {:>9} {:>10} {:>8} {:>9}",
        "REVISION",
        "NODES",
        "RUNS",
        "FAILED",
        "ERRORS",
        "TRAPS",
        "TIMEOUTS",
        "MUTATIONS",
        "DENIALS",
        "REFUSALS"
    )];
    for (revision, t) in &tally.revisions {
        let c = &t.counters;
        lines.push(format!(
            "{revision:<20} {:>6} {:>8} {:>8} {:>7} {:>7} {:>9} {:>10} {:>8} {:>9}",
            t.nodes,
            c.runs,
            c.failures(),
            c.errors,
            c.traps,
            c.timeouts,
            c.mutations,
            c.denials,
            c.refusals
        ));
    }
    if tally.revisions.is_empty() {
        lines.push("no node has published a revision yet".into());
    }
    if tally.silent > 0 {
        lines.push(format!(
            "{} node Lease(s) with no revision yet (a plugin still in its first load, or a tend before revisions)",
            tally.silent
        ));
    }
    if tally.unreadable > 0 {
        lines.push(format!(
            "{} node Lease(s) with a report tend cannot read (too long or malformed: not written by tend)",
            tally.unreadable
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_a_row_per_revision_and_says_what_it_could_not_read() {
        let a = r#"{"revision":"r-000000000000000a","process":"01","counters":{"runs":7,"traps":2,"errors":1}}"#;
        let lines = table(&tally([Some(a), None, Some("{"), Some(a)]));
        assert_eq!(lines.len(), 4, "{lines:#?}");
        let row: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            row,
            [
                "r-000000000000000a",
                "2",
                "14",
                "6",
                "2",
                "4",
                "0",
                "0",
                "0",
                "0"
            ]
        );
        assert!(lines[2].starts_with("1 node Lease(s) with no revision"));
        assert!(lines[3].starts_with("1 node Lease(s) with a report tend cannot read"));
        let empty = table(&Tally::default());
        assert_eq!(empty[1], "no node has published a revision yet");
    }
}
