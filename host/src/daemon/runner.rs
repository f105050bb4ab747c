//! Runs reconciles for the scheduler: takes the plugin's current component and
//! settings from the table, then measures and logs what happened (the mutation
//! gate has journaled every mutation already).

use super::Shared;
use super::table::{LastRun, Lifecycle};
use crate::capabilities::Mutation;
use crate::config::Scope;
use crate::journal::Entry;
use crate::runtime::{CallRequest, Failure};
use crate::scheduler::{RunFuture, RunResult, Runner, Trigger};
use crate::text::inert;
use std::sync::Arc;
use tracing::Instrument;

pub struct DaemonRunner {
    pub shared: Arc<Shared>,
}

/// The `result` label of `tend_reconciles_total`, and the trap cause if any.
fn result_label(
    result: &Result<crate::runtime::Outcome, Failure>,
) -> (&'static str, Option<&'static str>) {
    match result {
        Ok(_) => ("ok", None),
        Err(Failure::Plugin(_)) | Err(Failure::Host(_)) => ("error", None),
        Err(Failure::Trap(_)) => ("trap", Some("trap")),
        Err(Failure::Deadline { .. }) => ("deadline", Some("deadline")),
        Err(Failure::Memory { .. }) => ("memory", Some("memory")),
    }
}

impl Runner for DaemonRunner {
    fn run(&self, name: &str, triggers: Vec<Trigger>) -> RunFuture<'_> {
        let name = name.to_string();
        let trigger_list: Vec<String> = triggers.iter().map(Trigger::to_string).collect();
        let span =
            tracing::info_span!("reconcile", plugin = %name, trigger = %trigger_list.join(","));
        Box::pin(
            async move {
                let shared = &self.shared;
                let current = {
                    let table = shared.table.read().unwrap();
                    table
                        .plugins
                        .get(&name)
                        .and_then(|e| Some((e.compiled.clone()?, e.config.clone())))
                };
                let Some((plugin, config)) = current else {
                    return RunResult {
                        ok: true,
                        requeue_after: None,
                    };
                };
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
                };
                let cluster = config.scope == Scope::Cluster;
                if cluster && !shared.leadership.borrow().leading {
                    tracing::debug!("not leading: cluster-scope plugin not run here");
                    return RunResult {
                        ok: true,
                        requeue_after: None,
                    };
                }
                let mut leadership = shared.leadership.clone();
                let lost = async {
                    let _ = leadership.wait_for(|l| !l.leading).await;
                };
                let report = tokio::select! {
                    report = shared.runtime.reconcile(&plugin, &config, request) => report,
                    () = lost, if cluster => {
                        tracing::warn!("stopped a cluster-scope reconcile in flight: this host stopped leading");
                        return RunResult { ok: false, requeue_after: None };
                    }
                };

                let (time, time_ms) = Entry::now();
                for mutation in &report.mutations {
                    tracing::info!("{}", mutation.describe());
                }
                if report.logs_dropped > 0 {
                    tracing::warn!(
                        dropped = report.logs_dropped,
                        "plugin log lines dropped (over the per-reconcile budget)"
                    );
                }

                let metrics = &shared.metrics;
                let (result, trap) = result_label(&report.result);
                metrics
                    .reconciles
                    .with_label_values(&[name.as_str(), result])
                    .inc();
                metrics
                    .reconcile_seconds
                    .with_label_values(&[name.as_str()])
                    .observe(report.elapsed.as_secs_f64());
                if let Some(cause) = trap {
                    metrics
                        .traps
                        .with_label_values(&[name.as_str(), cause])
                        .inc();
                }
                for mutation in &report.mutations {
                    metrics
                        .mutations
                        .with_label_values(&[
                            name.as_str(),
                            mutation.capability,
                            mutation.operation,
                            super::metrics::mutation_result(mutation),
                        ])
                        .inc();
                }
                for call in &report.calls {
                    metrics
                        .capability_calls
                        .with_label_values(&[
                            name.as_str(),
                            call.capability,
                            call.operation,
                            call.result,
                        ])
                        .inc_by(call.count);
                }
                if report.result.is_ok() {
                    metrics
                        .last_success
                        .with_label_values(&[name.as_str()])
                        .set((time_ms / 1000) as i64);
                }

                let elapsed_ms = report.elapsed.as_secs_f64() * 1000.0;
                let (ok, requeue_after, health, message) = match &report.result {
                    Ok(outcome) => {
                        tracing::info!(
                            health = outcome.health.word(),
                            elapsed_ms,
                            compiler = ?plugin.compiler,
                            "{}",
                            inert(&outcome.message)
                        );
                        (
                            true,
                            outcome.requeue_after,
                            Some(outcome.health),
                            outcome.message.clone(),
                        )
                    }
                    Err(failure) => {
                        tracing::error!(elapsed_ms, compiler = ?plugin.compiler, "reconcile failed: {}", inert(&failure.to_string()));
                        (false, None, None, failure.to_string())
                    }
                };
                if let Some(entry) = shared.table.write().unwrap().plugins.get_mut(&name) {
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
                    entry.last = Some(LastRun {
                        plugin: name.clone(),
                        time,
                        digest: plugin.digest.clone(),
                        triggers: trigger_list,
                        health,
                        message,
                        elapsed_ms,
                        // Diffs are for plans; /status holds no file contents.
                        mutations: report
                            .mutations
                            .into_iter()
                            .map(|m| Mutation { diff: None, ..m })
                            .collect(),
                    });
                }
                RunResult { ok, requeue_after }
            }
            .instrument(span),
        )
    }
}
