//! The pure part of unit-doctor: from one check's remembered state, what its
//! probe found and the time, decide what to do ([`Decision`]) and how the
//! check stands ([`Verdict`]). No host calls: `lib.rs` probes, performs the
//! decision (logs, restarts) and saves the state.

use crate::{Check, human};
use serde::{Deserialize, Serialize};
use tend_sdk::{Error, Health, JobResult, Level};

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

impl UnitState {
    /// Forget restarts older than the check's window: they no longer count
    /// towards flapping.
    pub fn forget_old_restarts(&mut self, check: &Check, now: u64) {
        self.restarts_ms
            .retain(|&at| now.saturating_sub(at) < check.window_ms);
    }

    /// Record a restart made at `now`: counted, backed off from, and the
    /// failure it answers is over.
    pub fn restarted_at(&mut self, check: &Check, now: u64) {
        self.restarts_ms.push(now);
        self.backoff_until_ms = Some(now.saturating_add(check.backoff_ms));
        self.failing_since_ms = None;
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct Flapped {
    pub at_ms: u64,
    /// Restarts it needed within the window, counting the one refused.
    pub restarts_needed: u32,
}

/// How one check stands after this reconcile.
#[derive(Debug, PartialEq, Eq)]
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Probed {
    Pass,
    /// The unit is unhealthy; why.
    Fail(String),
    /// systemd is starting, reloading or stopping it: neither passing nor
    /// failing yet (systemd's own start and stop timeouts fail a job that
    /// hangs); its state.
    InTransition(String),
    /// The probe itself could not be made (not granted, systemd unreachable):
    /// nothing is known about the unit, so nothing is counted or restarted.
    Error(String),
}

/// What to do about one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Nothing but to report how the check stands.
    Report(Report),
    /// Restart the unit: it has failed for `failing_for` ms, past fail-after.
    Restart { reason: String, failing_for: u64 },
}

/// A check that needs no action, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Report {
    /// Restarted a while ago: not probed before the backoff ends in `left` ms.
    BackingOff { left: u64 },
    /// The probe could not be made.
    CannotProbe(String),
    /// The check passes; `recovered` when it had been failing or had flapped.
    Healthy { recovered: bool },
    /// systemd is in the middle of a job on it: judged again in `left` ms,
    /// its failing time (if any) neither counted on nor forgotten.
    InTransition { state: String, left: u64 },
    /// Failing, but not for fail-after yet: judged again in `left` ms.
    Waiting {
        reason: String,
        failing_for: u64,
        left: u64,
    },
    /// It flapped before and still fails: not restarted until it passes.
    StillFlapped { reason: String, flapped: Flapped },
    /// It needs a restart beyond max-restarts in the window: it flaps now.
    Flapping { reason: String, flapped: Flapped },
}

/// The decision while a restart's backoff lasts (`state` forgets a backoff
/// that is over); none when the check is due for a probe.
pub(crate) fn backing_off(state: &mut UnitState, check: &Check, now: u64) -> Option<Decision> {
    let until = state.backoff_until_ms?;
    if until > now {
        // Bounded by backoff-ms should the wall clock have jumped back.
        let left = (until - now).min(check.backoff_ms).max(1);
        return Some(Decision::Report(Report::BackingOff { left }));
    }
    state.backoff_until_ms = None;
    None
}

/// Judge what the probe found at `now`, and update `state` for it (a restart
/// is recorded by whoever performs it: [`UnitState::restarted_at`]).
pub(crate) fn judge(state: &mut UnitState, check: &Check, now: u64, probed: Probed) -> Decision {
    let reason = match probed {
        Probed::Error(why) => return Decision::Report(Report::CannotProbe(why)),
        Probed::Pass => {
            let recovered = state.failing_since_ms.is_some() || state.flapped.is_some();
            state.failing_since_ms = None;
            state.flapped = None;
            return Decision::Report(Report::Healthy { recovered });
        }
        Probed::InTransition(state) => {
            let left = check.fail_after_ms.clamp(1_000, 10_000);
            return Decision::Report(Report::InTransition { state, left });
        }
        Probed::Fail(reason) => reason,
    };
    let since = *state.failing_since_ms.get_or_insert(now);
    let failing_for = now.saturating_sub(since);
    if let Some(flapped) = &state.flapped {
        let flapped = flapped.clone();
        return Decision::Report(Report::StillFlapped { reason, flapped });
    }
    if failing_for < check.fail_after_ms {
        let left = check.fail_after_ms - failing_for;
        return Decision::Report(Report::Waiting {
            reason,
            failing_for,
            left,
        });
    }
    if state.restarts_ms.len() >= check.max_restarts as usize {
        let flapped = Flapped {
            at_ms: now,
            restarts_needed: u32::try_from(state.restarts_ms.len() + 1).unwrap_or(u32::MAX),
        };
        state.flapped = Some(flapped.clone());
        return Decision::Report(Report::Flapping { reason, flapped });
    }
    Decision::Restart {
        reason,
        failing_for,
    }
}

impl Report {
    /// How the check stands.
    pub fn verdict(&self, check: &Check) -> Verdict {
        let unit = &check.unit;
        match self {
            Report::BackingOff { left } => Verdict::new(
                check,
                Health::Progressing,
                format!("{unit} restarted; backing off for {}", human(*left)),
            )
            .requeue(*left),
            Report::CannotProbe(why) => {
                Verdict::new(check, Health::Degraded, format!("{unit}: {why}"))
            }
            Report::Healthy { .. } => {
                Verdict::new(check, Health::Healthy, format!("{unit} healthy"))
            }
            Report::InTransition { state, left } => Verdict::new(
                check,
                Health::Progressing,
                format!("{unit} in transition ({state}): systemd finishes its job first"),
            )
            .requeue(*left),
            Report::Waiting {
                reason,
                failing_for,
                left,
            } => Verdict::new(
                check,
                Health::Progressing,
                format!(
                    "{unit} {} ({reason}); restart in {}",
                    failing(*failing_for),
                    human(*left)
                ),
            )
            .requeue(*left),
            Report::StillFlapped { reason, flapped } | Report::Flapping { reason, flapped } => {
                Verdict::new(
                    check,
                    Health::Degraded,
                    format!(
                        "{unit} flapped: {} restarts needed in {} (max-restarts {}); not restarting; check the unit (last failure: {reason})",
                        flapped.restarts_needed,
                        human(check.window_ms),
                        check.max_restarts
                    ),
                )
            }
        }
    }

    /// The line worth logging about it, if any: a recovery, or flapping
    /// noticed now (not again on every reconcile after).
    pub fn log(&self, check: &Check) -> Option<(Level, String)> {
        match self {
            Report::Healthy { recovered: true } => {
                Some((Level::Info, format!("{}: check passes again", check.unit)))
            }
            Report::Flapping { .. } => Some((Level::Warn, self.verdict(check).message)),
            _ => None,
        }
    }
}

/// How the check stands after a restart (or, in a dry run, the restart that
/// would be made) answered `result`, and at which level to log it. A restart
/// that could not be made leaves the check degraded and is not backed off.
pub(crate) fn restarted(
    check: &Check,
    dry_run: bool,
    reason: &str,
    failing_for: u64,
    result: &Result<JobResult, Error>,
) -> (Level, Verdict) {
    let unit = &check.unit;
    let after = format!("after {} ({reason})", failing(failing_for));
    let backing_off = human(check.backoff_ms);
    let message = match result {
        Ok(JobResult::Done) => {
            let done = if dry_run {
                "would restart"
            } else {
                "restarted"
            };
            format!("{done} {unit} {after}; backing off for {backing_off}")
        }
        Ok(other) => format!(
            "restart of {unit} ended {} {after}; backing off for {backing_off}",
            job_word(*other)
        ),
        Err(e) => {
            let message = format!("{unit} needs a restart {after}, but it failed: {e}");
            return (Level::Error, Verdict::new(check, Health::Degraded, message));
        }
    };
    let verdict =
        Verdict::new(check, Health::Progressing, message).requeue(check.backoff_ms.max(1));
    (Level::Warn, verdict)
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

/// A unit's state as a probe failure: "active-state failed (failed)".
pub(crate) fn describe_state(active: &str, sub: &str) -> String {
    if sub.is_empty() {
        format!("active-state {active}")
    } else {
        format!("active-state {active} ({sub})")
    }
}

#[cfg(test)]
mod tests;
