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
use std::time::Duration;

/// The whole listing, every page, within this (an API server that pages
/// forever does not hold the command).
const READ_TIMEOUT: Duration = Duration::from_secs(60);

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
    let read = tokio::time::timeout(READ_TIMEOUT, store.reports()).await;
    let reports = match read {
        Ok(Ok(reports)) => reports,
        Ok(Err(e)) => anyhow::bail!(
            "cannot read the node Leases in namespace {}: {e}",
            settings.namespace
        ),
        Err(_) => anyhow::bail!(
            "the API server did not list the node Leases in namespace {} within {}s",
            settings.namespace,
            READ_TIMEOUT.as_secs()
        ),
    };
    let tally = tally(&reports);
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
    if tally.stale > 0 {
        lines.push(format!(
            "{} node Lease(s) not renewed within their duration, not added up (a tend stopped, or a node gone; by this host's clock)",
            tally.stale
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
    use crate::fleet::revision::Published;

    #[test]
    fn the_table_has_a_row_per_revision_and_says_what_it_could_not_read() {
        let a = r#"{"revision":"r-000000000000000a","process":"01","counters":{"runs":7,"traps":2,"errors":1}}"#;
        let lease = |report: Option<&str>, fresh| Published {
            report: report.map(str::to_string),
            fresh,
            ..Published::default()
        };
        let leases = [
            lease(Some(a), true),
            lease(None, true),
            lease(Some("{"), true),
            lease(Some(a), true),
            lease(Some(a), false),
        ];
        let lines = table(&tally(&leases));
        assert_eq!(lines.len(), 5, "{lines:#?}");
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
        assert!(lines[3].starts_with("1 node Lease(s) not renewed within their duration"));
        assert!(lines[4].starts_with("1 node Lease(s) with a report tend cannot read"));
        let empty = table(&Tally::default());
        assert_eq!(empty[1], "no node has published a revision yet");
    }
}
