//! `tend rollout status -c FILE`: the fleet by revision. Every tend with
//! `[host.fleet]` publishes the revision it runs and what its plugins did
//! under it on its node Lease ([`crate::fleet::revision`]); this reads them
//! all from the API server, with the config's kubeconfig, and adds them up
//! per revision: which revisions run where, and how each fares; then the
//! staged rollout as the leader last published it.
//!
//! `tend rollout pause | resume | retry -c FILE`: an order for the leader,
//! left on the rollout Lease for the revision it names, and waited for
//! until the leader has taken it.

use super::report;
use crate::config::Config;
use crate::fleet::kube::KubeFleet;
use crate::fleet::revision::{Tally, tally};
use crate::fleet::rollout::{Command, Order, Rollout, State};
use crate::fleet::store::FleetStore;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

/// The whole listing, every page, within this (an API server that pages
/// forever does not hold the command).
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// The fleet's store as `config_path` reaches it, and its namespace.
fn store(config_path: &Path) -> anyhow::Result<(KubeFleet, Config)> {
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
    Ok((store, config))
}

/// `call`'s answer within [`READ_TIMEOUT`]; its error after `failing`.
async fn answered<T>(
    call: impl Future<Output = Result<T, crate::capabilities::CapError>>,
    failing: &str,
) -> anyhow::Result<T> {
    tokio::time::timeout(READ_TIMEOUT, call)
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "the API server did not answer within {}s",
                READ_TIMEOUT.as_secs()
            )
        })?
        .map_err(|e| anyhow::anyhow!("{failing}: {e}"))
}

/// The rollout as the leader last published it (None: none yet).
async fn read_rollout(store: &KubeFleet) -> anyhow::Result<Option<(Rollout, Option<String>)>> {
    let lease = answered(store.rollout(), "cannot read the rollout Lease").await?;
    match lease.rollout {
        None => Ok(None),
        Some(text) => match Rollout::parse(&text) {
            Some(rollout) => Ok(Some((rollout, lease.command))),
            None => anyhow::bail!(
                "the Lease {} holds no rollout Tend wrote: fix it, or delete it: the leader then starts over from what most nodes run, and rolls out what they ask for from the first step",
                crate::fleet::rollout::ROLLOUT_LEASE
            ),
        },
    }
}

pub async fn status(config_path: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let (store, config) = store(config_path)?;
    let settings = config.host.fleet.as_ref().expect("store() checked");
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
    let rollout = match settings.rollout {
        Some(_) => read_rollout(&store).await?.map(|(r, _)| r),
        None => None,
    };
    if json {
        let mut out = serde_json::to_value(&tally)?;
        out["rollout"] = serde_json::to_value(&rollout)?;
        report::json(&serde_json::to_string_pretty(&out)?);
    } else {
        for line in table(&tally)
            .into_iter()
            .chain(rollout.as_ref().map(described))
        {
            report::line(&line);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The rollout in a line, for people.
fn described(rollout: &Rollout) -> String {
    let state = serde_json::to_value(rollout.state).expect("a state serializes");
    let state = state.as_str().unwrap_or_default();
    match rollout.state {
        State::Done => format!("rollout: {} is stable ({})", rollout.stable, rollout.reason),
        _ => format!(
            "rollout: {} over {}, step {}, {state}: {}",
            rollout.revision,
            rollout.stable,
            rollout.step + 1,
            rollout.reason
        ),
    }
}

/// Leave `command` for the leader, for the revision it concerns, and wait
/// until the leader has taken it.
pub async fn order(
    config_path: &Path,
    command: Command,
    revision: Option<String>,
) -> anyhow::Result<ExitCode> {
    let (store, config) = store(config_path)?;
    let Some(rollout_settings) = config.host.fleet.as_ref().and_then(|f| f.rollout.clone()) else {
        anyhow::bail!(
            "{}: no [host.fleet.rollout]: without staged rollouts there is nothing to pause, resume or retry",
            config_path.display()
        );
    };
    let Some((rollout, _)) = read_rollout(&store).await? else {
        anyhow::bail!(
            "no rollout yet: the leader publishes one once the nodes report what they run"
        );
    };
    let revision = match (command, revision) {
        (_, Some(revision)) if crate::fleet::revision::is_revision(&revision) => revision,
        (_, Some(revision)) => anyhow::bail!(
            "{revision:?} is not a revision: expected \"r-\" and 16 hex digits, as tend rollout status shows them"
        ),
        (Command::Retry, None) if rollout.state != State::Failed => match rollout.failed.last() {
            Some(last) => last.clone(),
            None => anyhow::bail!("no revision has failed: nothing to retry"),
        },
        (Command::Pause | Command::Resume, None) if rollout.state == State::Done => {
            anyhow::bail!("nothing is rolling out: {} is stable", rollout.stable)
        }
        (_, None) => rollout.revision.clone(),
    };
    let text = serde_json::to_string(&Order {
        command,
        revision: revision.clone(),
    })?;
    answered(
        store.order(&text),
        "cannot leave the order on the rollout Lease",
    )
    .await?;
    // The leader takes it at its next poll: wait for three of them.
    let deadline = tokio::time::Instant::now() + (rollout_settings.poll * 3).min(READ_TIMEOUT);
    loop {
        tokio::time::sleep(rollout_settings.poll.min(Duration::from_secs(1))).await;
        let taken = read_rollout(&store).await?;
        if let Some((rollout, None)) = taken {
            report::line(&described(&rollout));
            // The leader takes every order; it obeys one that fits.
            let obeyed = match command {
                Command::Pause => rollout.state == State::Paused,
                Command::Resume => rollout.state == State::Rolling,
                Command::Retry => rollout.revision == revision && rollout.state == State::Rolling,
            };
            if !obeyed {
                report::line(&format!(
                    "the leader did not {command:?} {revision}: the order fits a rollout that is rolling (pause), paused (resume) or failed and still asked for by most nodes (retry)"
                ));
                return Ok(ExitCode::FAILURE);
            }
            return Ok(ExitCode::SUCCESS);
        }
        if tokio::time::Instant::now() >= deadline {
            report::line(&format!(
                "the order ({command:?} {revision}) waits on the rollout Lease: no leader took it within three polls (is a tend leading? tend status shows it)"
            ));
            return Ok(ExitCode::from(2));
        }
    }
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
