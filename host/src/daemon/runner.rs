//! Runs reconciles for the scheduler in three steps: [`fetch`] the plugin's
//! current component and settings from the table, [`DaemonRunner::reconcile`]
//! it (a cluster-scope plugin only while this host leads), and [`record`] what
//! happened in the log, the metrics and the table (the mutation gate has
//! journaled every mutation already).

use super::Shared;
use super::metrics::{Metrics, mutation_result};
use super::table::{LastRun, Lifecycle, PluginTable};
use crate::capabilities::Mutation;
use crate::capabilities::log::{LogLimits, charge_host_line};
use crate::capabilities::tape::Tape;
use crate::config::{PluginConfig, Scope};
use crate::fleet::revision::{Ended, Running};
use crate::journal::Entry;
use crate::replay::RecordedAnswer;
use crate::runtime::{CallRequest, CompiledPlugin, Compiler, Failure, Outcome, ReconcileReport};
use crate::scheduler::{RunFuture, RunResult, Runner, Trigger};
use crate::text::inert;
use std::sync::{Arc, RwLock};
use tracing::Instrument;

pub struct DaemonRunner {
    pub shared: Arc<Shared>,
}

/// What the scheduler hears when there was nothing to run here (the plugin is
/// not loaded, or is cluster-scope on a host that does not lead): not a
/// failure, so no backoff.
const NOTHING_TO_RUN: RunResult = RunResult {
    ok: true,
    requeue_after: None,
    refused: false,
};

/// What one reconcile runs, taken from the table when it starts: a component
/// swapped in meanwhile serves the next reconcile, not this one.
struct Fetched {
    plugin: Arc<CompiledPlugin>,
    config: PluginConfig,
}

/// Who ran and with what: everything [`record`] needs besides the report.
struct Ran {
    plugin: String,
    digest: String,
    compiler: Compiler,
    triggers: Vec<String>,
    /// What the host's lines about the plugin may spend of its log budget.
    log: LogLimits,
}

impl Runner for DaemonRunner {
    fn run(&self, name: &str, triggers: Vec<Trigger>) -> RunFuture<'_> {
        let name = name.to_string();
        let trigger_list: Vec<String> = triggers.iter().map(Trigger::to_string).collect();
        // Trigger subjects are plugin-controlled (a file a plugin created in its
        // watched directory): inert like any other plugin text in a log line.
        let span = tracing::info_span!("reconcile", plugin = %name, trigger = %inert(&trigger_list.join(",")));
        Box::pin(
            async move {
                let shared = &self.shared;
                let Some(fetched) = fetch(&shared.table.read().unwrap(), &name) else {
                    return NOTHING_TO_RUN;
                };
                // The revision this run belongs to: the one running as it starts.
                let revision = shared.running.revision();
                // A `tend reconcile --record` waits for this run's recording.
                let recorder = shared.recordings.lock().unwrap().remove(&name);
                let tape = match recorder {
                    Some(_) => Tape::record(),
                    None => Tape::Off,
                };
                let mut report = match self.reconcile(&fetched, triggers, tape).await {
                    Ok(report) => report,
                    Err(result) => return result,
                };
                if let Some(recorder) = recorder {
                    let answer = RecordedAnswer::of(&fetched.plugin, &fetched.config, &mut report);
                    let _ = recorder.send(answer);
                }
                let ran = Ran {
                    plugin: name,
                    digest: fetched.plugin.digest.clone(),
                    compiler: fetched.plugin.compiler,
                    triggers: trigger_list,
                    log: fetched.config.capability_limits.log,
                };
                count_under_revision(&shared.running, revision.as_deref(), &report);
                record(&shared.table, &shared.metrics, ran, report)
            }
            .instrument(span),
        )
    }
}

/// The plugin's current component and settings; none while it has no
/// component loaded (loading, disabled, removed).
fn fetch(table: &PluginTable, name: &str) -> Option<Fetched> {
    let entry = table.plugins.get(name)?;
    Some(Fetched {
        plugin: entry.compiled.clone()?,
        config: entry.config.clone(),
    })
}

impl DaemonRunner {
    /// Run one reconcile of `fetched` in the runtime. `Err` is what the
    /// scheduler hears instead of a report: a cluster-scope plugin runs only
    /// while this host leads, and is stopped in flight when it stops leading.
    async fn reconcile(
        &self,
        fetched: &Fetched,
        triggers: Vec<Trigger>,
        tape: Tape,
    ) -> Result<ReconcileReport, RunResult> {
        let shared = &self.shared;
        let (node_name, dry_run) = {
            let host = shared.host.read().unwrap();
            (host.node_name.clone(), host.dry_run)
        };
        let request = CallRequest {
            services: &shared.services,
            planned: None,
            triggers,
            node_name: &node_name,
            dry_run,
            tape,
        };
        let cluster = fetched.config.scope == Scope::Cluster;
        if cluster && !shared.leadership.borrow().leading {
            tracing::debug!("not leading: cluster-scope plugin not run here");
            return Err(NOTHING_TO_RUN);
        }
        let mut leadership = shared.leadership.clone();
        let lost = async {
            let _ = leadership.wait_for(|l| !l.leading).await;
        };
        tokio::select! {
            report = shared.runtime.reconcile(&fetched.plugin, &fetched.config, request) => Ok(report),
            () = lost, if cluster => {
                tracing::warn!("stopped a cluster-scope reconcile in flight: this host stopped leading");
                Err(RunResult {
                    ok: false,
                    requeue_after: None,
                    refused: false,
                })
            }
        }
    }
}

/// Log, count and note in the plugin's table entry what one reconcile did,
/// and tell the scheduler how it went.
fn record(
    table: &RwLock<PluginTable>,
    metrics: &Metrics,
    ran: Ran,
    report: ReconcileReport,
) -> RunResult {
    let (time, time_ms) = Entry::now();
    log_mutations(&ran, &report);
    count(metrics, &ran.plugin, &report, time_ms);
    log_outcome(&ran, &report);
    let result = RunResult {
        ok: report.result.is_ok(),
        requeue_after: report.result.as_ref().ok().and_then(|o| o.requeue_after),
        refused: matches!(report.result, Err(Failure::Plugin(_)))
            && report
                .mutations
                .iter()
                .any(|m| mutation_result(m) == "refused"),
    };
    note(&mut table.write().unwrap(), ran, time, report);
    result
}

/// One line per mutation while the plugin's log budget per minute lasts
/// (the host logs them on its behalf); past it, one warning that the journal
/// has the rest.
fn log_mutations(ran: &Ran, report: &ReconcileReport) {
    let mut unlogged = 0;
    for mutation in &report.mutations {
        let line = mutation.describe();
        if charge_host_line(&ran.plugin, &ran.log, line.len()) {
            tracing::info!("{line}");
        } else {
            unlogged += 1;
        }
    }
    if unlogged > 0 {
        tracing::warn!(
            unlogged,
            "mutations not logged (the plugin's log budget per minute is spent); tend journal --plugin {} has them",
            ran.plugin
        );
    }
    if report.logs_dropped > 0 {
        tracing::warn!(
            dropped = report.logs_dropped,
            "plugin log lines dropped (over the per-reconcile budget)"
        );
    }
}

/// The reconcile's metrics: its result and time, trap cause, mutations,
/// capability calls, and the time of the last success.
fn count(metrics: &Metrics, plugin: &str, report: &ReconcileReport, time_ms: u64) {
    let (result, trap) = result_label(&report.result);
    metrics
        .reconciles
        .with_label_values(&[plugin, result])
        .inc();
    metrics
        .reconcile_seconds
        .with_label_values(&[plugin])
        .observe(report.elapsed.as_secs_f64());
    if let Some(cause) = trap {
        metrics.traps.with_label_values(&[plugin, cause]).inc();
    }
    for mutation in &report.mutations {
        let result = mutation_result(mutation);
        metrics
            .mutations
            .with_label_values(&[plugin, mutation.capability, mutation.operation, result])
            .inc();
        if result == "refused" {
            metrics.budget_refusals.with_label_values(&[plugin]).inc();
        }
    }
    for call in &report.calls {
        metrics
            .capability_calls
            .with_label_values(&[plugin, call.capability, call.operation, call.result])
            .inc_by(call.count);
    }
    if report.result.is_ok() {
        metrics
            .last_success
            .with_label_values(&[plugin])
            .set((time_ms / 1000) as i64);
    }
}

/// Count the reconcile for the revision it started under (what the fleet
/// member publishes for a rollout to judge).
fn count_under_revision(running: &Running, revision: Option<&str>, report: &ReconcileReport) {
    let ended = match result_label(&report.result).0 {
        "ok" => Ended::Ok,
        "error" => Ended::Error,
        "deadline" => Ended::Timeout,
        // "trap", "memory"
        _ => Ended::Trap,
    };
    let results = report.mutations.iter().map(mutation_result);
    let (mutations, refusals) = results.fold((0, 0), |(done, refused), result| match result {
        "ok" => (done + 1, refused),
        "refused" => (done, refused + 1),
        _ => (done, refused),
    });
    let denials = report
        .calls
        .iter()
        .filter(|c| c.result == "denied")
        .map(|c| c.count)
        .sum();
    running.count(revision, ended, mutations, denials, refusals);
}

/// The `result` label of `tend_reconciles_total`, and the trap cause if any.
fn result_label(result: &Result<Outcome, Failure>) -> (&'static str, Option<&'static str>) {
    match result {
        Ok(_) => ("ok", None),
        Err(Failure::Plugin(_)) | Err(Failure::Host(_)) => ("error", None),
        Err(Failure::Trap(_)) => ("trap", Some("trap")),
        Err(Failure::Deadline { .. }) => ("deadline", Some("deadline")),
        Err(Failure::Memory { .. }) => ("memory", Some("memory")),
    }
}

/// The reconcile's outcome, or why it failed, in one line.
fn log_outcome(ran: &Ran, report: &ReconcileReport) {
    let elapsed_ms = report.elapsed.as_secs_f64() * 1000.0;
    match &report.result {
        Ok(outcome) => tracing::info!(
            health = outcome.health.word(),
            elapsed_ms,
            compiler = ?ran.compiler,
            "{}",
            logged_text(ran, &outcome.message)
        ),
        Err(failure) => {
            let message = failure.to_string();
            // The plugin's error or panic message is its text; a deadline or
            // memory failure is the host's own.
            let shown = match failure {
                Failure::Plugin(_) | Failure::Trap(_) => logged_text(ran, &message),
                _ => inert(&message),
            };
            tracing::error!(elapsed_ms, compiler = ?ran.compiler, "reconcile failed: {shown}");
        }
    }
}

/// Plugin text for a line the host logs: inert, and charged to the plugin's
/// log budget per minute; once that is spent, a note in its place.
fn logged_text<'a>(ran: &Ran, text: &'a str) -> std::borrow::Cow<'a, str> {
    if charge_host_line(&ran.plugin, &ran.log, text.len()) {
        inert(text)
    } else {
        format!(
            "({} bytes not logged: the plugin's log budget per minute is spent; tend status {} shows it)",
            text.len(),
            ran.plugin
        )
        .into()
    }
}

/// The plugin's table entry after the reconcile: counts, lifecycle (a loaded
/// plugin is ready or failing by its last run), recent mutations and the last
/// run as `/status` shows it. A plugin removed meanwhile is left out.
fn note(table: &mut PluginTable, ran: Ran, time: String, report: ReconcileReport) {
    let Some(entry) = table.plugins.get_mut(&ran.plugin) else {
        return;
    };
    let ok = report.result.is_ok();
    entry.reconciles += 1;
    entry.failures = if ok { 0 } else { entry.failures + 1 };
    if matches!(entry.state, Lifecycle::Ready | Lifecycle::Failing) {
        entry.state = if ok {
            Lifecycle::Ready
        } else {
            Lifecycle::Failing
        };
    }
    entry.note(&time, &report.mutations);
    let (health, message) = match report.result {
        Ok(outcome) => (Some(outcome.health), outcome.message),
        Err(failure) => (None, failure.to_string()),
    };
    entry.last = Some(LastRun {
        plugin: ran.plugin,
        time,
        digest: ran.digest,
        triggers: ran.triggers,
        health,
        message,
        elapsed_ms: report.elapsed.as_secs_f64() * 1000.0,
        // Diffs are for plans; /status holds no file contents.
        mutations: report
            .mutations
            .into_iter()
            .map(|m| Mutation { diff: None, ..m })
            .collect(),
    });
}

#[cfg(test)]
mod tests;
