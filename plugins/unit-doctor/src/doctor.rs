//! One check, judged at one moment: probe, remember, restart or hold back.

use crate::{Check, HttpProbe, Probe, UNITS, human};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tend_sdk::{Context, Error, Health, Host, JobResult, Level, Request, Result};

/// What unit-doctor remembers about one unit, under `unit/<name>` in `state`.
/// Times are milliseconds since the Unix epoch.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub(crate) struct UnitState {
    /// When the check started failing, continuously since; none while it passes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failing_since_ms: Option<u64>,
    /// When unit-doctor restarted the unit, those within the check's window.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub restarts_ms: Vec<u64>,
    /// Not judged again before this time (after a restart).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff_until_ms: Option<u64>,
    /// Set when the unit needed more than max-restarts restarts within the
    /// window: it is not restarted again until its check passes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flapped: Option<Flapped>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct Flapped {
    pub at_ms: u64,
    /// Restarts it needed within the window, counting the one refused.
    pub restarts_needed: u32,
}

/// How one check stands after this reconcile.
#[derive(Debug)]
pub(crate) struct Verdict {
    pub unit: String,
    pub health: Health,
    pub message: String,
    /// Milliseconds from now when this check's next decision is due.
    pub requeue_ms: Option<u64>,
}

impl Verdict {
    fn new(check: &Check, health: Health, message: String) -> Self {
        Verdict {
            unit: check.unit.clone(),
            health,
            message,
            requeue_ms: None,
        }
    }
    fn requeue(mut self, ms: u64) -> Self {
        self.requeue_ms = Some(ms);
        self
    }
}

/// What the probe found.
enum Probed {
    Pass,
    /// The unit is unhealthy; why.
    Fail(String),
    /// The probe itself could not be made (not granted, systemd unreachable):
    /// nothing is known about the unit, so nothing is counted or restarted.
    Error(String),
}

/// The unit's state as stored and as it is being changed.
struct Slot {
    key: String,
    /// None when what is stored could not be read: overwritten on save.
    stored: Option<UnitState>,
    current: UnitState,
}

impl Slot {
    fn load(host: &dyn Host, unit: &str) -> Result<Slot> {
        let key = format!("{UNITS}{unit}");
        let stored = match host.state().get_json::<UnitState>(&key) {
            Ok(state) => Some(state.unwrap_or_default()),
            // Unreadable state (say, from an incompatible version): start over.
            Err(Error::Invalid(why)) => {
                host.log(Level::Warn, &format!("{unit}: forgetting state: {why}"));
                None
            }
            Err(e) => return Err(e),
        };
        let current = stored.clone().unwrap_or_default();
        Ok(Slot {
            key,
            stored,
            current,
        })
    }

    /// Write the current state if it differs from what is stored.
    fn save(&mut self, host: &dyn Host) -> Result<()> {
        if self.stored.as_ref() != Some(&self.current) {
            host.state().set_json(&self.key, &self.current)?;
            self.stored = Some(self.current.clone());
        }
        Ok(())
    }
}

/// Judge `check` at `now`: `Err` only when the plugin's own state fails.
pub(crate) fn evaluate(ctx: &Context, host: &dyn Host, check: &Check, now: u64) -> Result<Verdict> {
    let mut slot = Slot::load(host, &check.unit)?;
    slot.current
        .restarts_ms
        .retain(|&at| now.saturating_sub(at) < check.window_ms);
    let verdict = judge(ctx, host, check, now, &mut slot)?;
    slot.save(host)?;
    Ok(verdict)
}

fn judge(
    ctx: &Context,
    host: &dyn Host,
    check: &Check,
    now: u64,
    slot: &mut Slot,
) -> Result<Verdict> {
    let unit = &check.unit;
    let state = &mut slot.current;
    if let Some(until) = state.backoff_until_ms {
        if until > now {
            // Bounded by backoff-ms should the wall clock have jumped back.
            let left = (until - now).min(check.backoff_ms).max(1);
            return Ok(Verdict::new(
                check,
                Health::Progressing,
                format!("{unit} restarted; backing off for {}", human(left)),
            )
            .requeue(left));
        }
        state.backoff_until_ms = None;
    }

    let reason = match probe(ctx, host, check) {
        Probed::Error(why) => {
            return Ok(Verdict::new(
                check,
                Health::Degraded,
                format!("{unit}: {why}"),
            ));
        }
        Probed::Pass => {
            if state.failing_since_ms.is_some() || state.flapped.is_some() {
                host.log(Level::Info, &format!("{unit}: check passes again"));
            }
            state.failing_since_ms = None;
            state.flapped = None;
            return Ok(Verdict::new(
                check,
                Health::Healthy,
                format!("{unit} healthy"),
            ));
        }
        Probed::Fail(reason) => reason,
    };

    let since = *state.failing_since_ms.get_or_insert(now);
    let failing_for = now.saturating_sub(since);
    if let Some(flapped) = &state.flapped {
        return Ok(flapped_verdict(check, flapped, &reason));
    }
    if failing_for < check.fail_after_ms {
        let left = check.fail_after_ms - failing_for;
        return Ok(Verdict::new(
            check,
            Health::Progressing,
            format!(
                "{unit} {} ({reason}); restart in {}",
                failing(failing_for),
                human(left)
            ),
        )
        .requeue(left));
    }
    if state.restarts_ms.len() >= check.max_restarts as usize {
        let flapped = Flapped {
            at_ms: now,
            restarts_needed: u32::try_from(state.restarts_ms.len() + 1).unwrap_or(u32::MAX),
        };
        let verdict = flapped_verdict(check, &flapped, &reason);
        host.log(Level::Warn, &verdict.message);
        state.flapped = Some(flapped);
        return Ok(verdict);
    }
    restart(ctx, host, check, now, slot, failing_for, &reason)
}

fn flapped_verdict(check: &Check, flapped: &Flapped, reason: &str) -> Verdict {
    Verdict::new(
        check,
        Health::Degraded,
        format!(
            "{} flapped: {} restarts needed in {} (max-restarts {}); not restarting; check the unit (last failure: {reason})",
            check.unit,
            flapped.restarts_needed,
            human(check.window_ms),
            check.max_restarts
        ),
    )
}

fn restart(
    ctx: &Context,
    host: &dyn Host,
    check: &Check,
    now: u64,
    slot: &mut Slot,
    failing_for: u64,
    reason: &str,
) -> Result<Verdict> {
    let unit = &check.unit;
    let before = slot.current.clone();
    slot.current.restarts_ms.push(now);
    slot.current.backoff_until_ms = Some(now.saturating_add(check.backoff_ms));
    slot.current.failing_since_ms = None;
    // Remember before restarting: a reconcile cut short during the restart job
    // must not lead to a second restart without backoff or flap accounting.
    slot.save(host)?;
    let done = if ctx.dry_run {
        "would restart"
    } else {
        "restarted"
    };
    let after = format!("after {} ({reason})", failing(failing_for));
    match host.systemd().restart(unit) {
        Ok(result) => {
            let message = match result {
                JobResult::Done => format!(
                    "{done} {unit} {after}; backing off for {}",
                    human(check.backoff_ms)
                ),
                other => format!(
                    "restart of {unit} ended {} {after}; backing off for {}",
                    job_word(other),
                    human(check.backoff_ms)
                ),
            };
            host.log(Level::Warn, &message);
            Ok(Verdict::new(check, Health::Progressing, message).requeue(check.backoff_ms.max(1)))
        }
        Err(e) => {
            // No restart happened: no backoff, nothing counted; still failing.
            slot.current = before;
            let message = format!("{unit} needs a restart {after}, but it failed: {e}");
            host.log(Level::Error, &message);
            Ok(Verdict::new(check, Health::Degraded, message))
        }
    }
}

/// "failing", or "failing for 1m" once it has for a while.
fn failing(for_ms: u64) -> String {
    if for_ms == 0 {
        "failing".to_string()
    } else {
        format!("failing for {}", human(for_ms))
    }
}

fn job_word(result: JobResult) -> &'static str {
    match result {
        JobResult::Done => "done",
        JobResult::Failed => "failed",
        JobResult::Canceled => "canceled",
        JobResult::Timeout => "timeout",
        JobResult::Dependency => "dependency",
        JobResult::Skipped => "skipped",
    }
}

fn probe(ctx: &Context, host: &dyn Host, check: &Check) -> Probed {
    let unit = &check.unit;
    match &check.probe {
        Probe::Active => match host.systemd().status(unit) {
            Err(e) => Probed::Error(format!("cannot read its status: {e}")),
            Ok(status) if status.load_state == "not-found" => Probed::Error(
                "systemd does not know this unit (load-state not-found): check the unit name"
                    .to_string(),
            ),
            Ok(status) if status.active_state == "active" => Probed::Pass,
            Ok(status) => Probed::Fail(describe_state(&status.active_state, &status.sub_state)),
        },
        Probe::Http(http) => {
            // The host says the unit changed state: a unit that failed is
            // unhealthy whatever its endpoint would answer.
            let triggered = ctx
                .triggers
                .iter()
                .any(|t| t.kind == "unit" && t.subject.as_deref() == Some(unit.as_str()));
            if triggered {
                match host.systemd().status(unit) {
                    Ok(status) if status.active_state == "failed" => {
                        return Probed::Fail(describe_state(
                            &status.active_state,
                            &status.sub_state,
                        ));
                    }
                    Ok(_) => {}
                    Err(e) => host.log(
                        Level::Debug,
                        &format!("{unit}: status after its unit trigger: {e}"),
                    ),
                }
            }
            probe_http(host, http)
        }
    }
}

fn probe_http(host: &dyn Host, http: &HttpProbe) -> Probed {
    let request = Request::get(&http.url).timeout(Duration::from_millis(http.timeout_ms));
    match host.http().send(&request) {
        Ok(response) if http.expect_status.contains(&response.status) => Probed::Pass,
        Ok(response) => Probed::Fail(format!("GET {} answered {}", http.url, response.status)),
        // The probe is not allowed: a configuration problem, not the unit's.
        Err(e @ (Error::Denied(_) | Error::Invalid(_) | Error::BudgetExhausted(_))) => {
            Probed::Error(format!("cannot probe: {e}"))
        }
        Err(e) => Probed::Fail(format!("GET {}: {}", http.url, e.message())),
    }
}

fn describe_state(active: &str, sub: &str) -> String {
    if sub.is_empty() {
        format!("active-state {active}")
    } else {
        format!("active-state {active} ({sub})")
    }
}
