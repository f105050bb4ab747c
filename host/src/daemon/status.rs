//! `/status` (every plugin, every budget) and `/status/NAME` (why a plugin did
//! or did not do something: its state, last outcome, last mutations and budget
//! refusals, backoff and next run, the triggers it waits on, its grants).

use super::Shared;
use crate::journal::Entry;
use std::time::Duration;
use tokio::time::Instant;

fn now_ms() -> u64 {
    Entry::now().1
}

pub async fn overview(shared: &Shared) -> String {
    let budgets = shared.services.budgets.status(now_ms()).await;
    let not_ready = readiness(shared);
    let table = shared.table.read().unwrap();
    let host = shared.host.read().unwrap();
    serde_json::to_string_pretty(&serde_json::json!({
        "config": shared.config_path.display().to_string(),
        "config_error": *shared.config_error.read().unwrap(),
        "node_name": host.node_name,
        "dry_run": host.dry_run,
        "ready": not_ready.is_none(),
        "not_ready": not_ready,
        "plugins": table.status(),
        "budgets": budgets,
        "leader": *shared.leadership.borrow(),
        "fleet": shared.services.budgets.fleet().map(|f| f.status()),
        "revision": shared.running.report(),
    }))
    .expect("status serializes")
}

/// "in 4.2s" for a moment ahead, "now" for one passed.
fn from_now(at: Instant) -> String {
    let left = at.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return "now".into();
    }
    let rounded = Duration::from_millis(left.as_millis() as u64 / 100 * 100);
    format!(
        "in {}",
        humantime::format_duration(rounded.max(Duration::from_millis(100)))
    )
}

pub async fn plugin(shared: &Shared, name: &str) -> Option<String> {
    let budgets = shared.services.budgets.status(now_ms()).await;
    let config = shared.config.read().unwrap().clone();
    let plugin = config.plugins.get(name)?;
    let schedule = shared.triggers.schedule_of(name);
    let mut waits_on: Vec<String> = Vec::new();
    if let Some(interval) = plugin.interval {
        waits_on.push(format!(
            "interval every {}",
            humantime::format_duration(interval)
        ));
    }
    waits_on.extend(
        shared
            .waits_on
            .read()
            .unwrap()
            .get(name)
            .cloned()
            .unwrap_or_default(),
    );
    waits_on.push("manual (tend reconcile)".into());
    let schedule = schedule.map(|s| {
        // Pending triggers run as soon as the backoff allows; the rest wait
        // for their time, and never before the backoff ends.
        let pending_at = (!s.pending.is_empty()).then(|| s.backoff_until.unwrap_or_else(Instant::now));
        let next = [s.next_interval, s.requeue_at, pending_at]
            .into_iter()
            .flatten()
            .min()
            .map(|at| s.backoff_until.map_or(at, |b| at.max(b)));
        serde_json::json!({
            "running": s.running,
            "failures_in_a_row": s.failures,
            "backoff": s.backoff_until.map(from_now),
            "next_run": if s.running { Some("running now".to_string()) } else { next.map(from_now) },
            "requeue": s.requeue_at.map(from_now),
            "pending_triggers": s.pending.iter().map(ToString::to_string).collect::<Vec<_>>(),
        })
    });
    let table = shared.table.read().unwrap();
    let entry = table.plugins.get(name)?;
    let body = serde_json::json!({
        "name": name,
        "state": entry.state.name(),
        "enabled": plugin.enabled,
        "file": plugin.file.display().to_string(),
        "digest": entry.compiled.as_ref().map(|c| c.digest.clone()),
        "load_error": entry.load_error,
        "pinned": entry.pinned,
        "reconciles": entry.reconciles,
        "last": entry.last,
        "recent_mutations": entry.recent,
        "budget_refusals": entry.refusals,
        "schedule": schedule,
        "waits_on": waits_on,
        "grants": plugin.grants.describe(),
        "budgets": budgets,
    });
    Some(serde_json::to_string_pretty(&body).expect("status serializes"))
}

/// Why tend is not ready (`/readyz` 503), or None: the last config change
/// was rejected (the last good config keeps running, but the fleet should not
/// roll on), or an enabled plugin is loading, failed to load or is missing.
pub(super) fn readiness(shared: &Shared) -> Option<String> {
    let mut reasons: Vec<String> = shared
        .config_error
        .read()
        .unwrap()
        .iter()
        .map(|e| format!("config rejected, the last good config keeps running: {e}"))
        .collect();
    reasons.extend(shared.table.read().unwrap().not_ready());
    (!reasons.is_empty()).then(|| {
        let mut text = reasons.join("\n");
        text.push('\n');
        text
    })
}
