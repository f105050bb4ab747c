//! The effect runner: performs a plan's steps through the [`Host`], one at a
//! time, and records each in `state` (key [`APPLIED`]) before and after its
//! host call, so an apply interrupted anywhere (an error, a deadline, kill -9)
//! resumes where it stopped on the next reconcile, neither redoing a restart
//! nor skipping one.
//!
//! After every step the plan is diffed again from the updated record: the
//! record, not a stored plan, is the truth, so a declaration that changes
//! while an apply is unfinished is folded in instead of the old plan being
//! finished first (or getting stuck on a step the new declaration dropped).
//!
//! Restarts: a write that earns a restart records it as owed *before* the
//! file is written; the restart is recorded as done right after its job ends.
//! Killed between the two, `in_flight` holds the unit and its
//! ActiveEnterTimestamp from before the restart: on resume, a changed
//! timestamp means the restart took effect and it is not issued again;
//! otherwise it is issued (at least once rather than not at all, and only in
//! this window of one job).

use crate::diff::{Applied, AppliedUnit, Desired, InFlight, Kind, Step, diff};
use std::collections::BTreeSet;
use std::time::Duration;
use tend_sdk::{Context, Error, Host, JobResult, Level, Outcome, Result};

/// The state key of the [`Applied`] record.
pub const APPLIED: &str = "applied";
/// More steps than any plan can have: a plan that does not converge is a bug.
const MAX_STEPS: usize = 100_000;
/// Retries after a failed step: 5 s doubling to 5 min.
const RETRY_FIRST: Duration = Duration::from_secs(5);
const RETRY_MAX: Duration = Duration::from_secs(300);
/// Active states of a unit with a job running on it.
const IN_TRANSITION: [&str; 3] = ["activating", "deactivating", "reloading"];
/// How soon to look again at a unit still in transition after a resume.
const SETTLE: Duration = Duration::from_millis(200);

/// Restart jitter: listed units wait `offset` after their restart is first due.
pub struct Jitter {
    pub offset: Duration,
}

impl Jitter {
    /// A node's fixed offset within `window_ms`: FNV-1a of its name.
    pub fn for_node(node_name: &str, window_ms: u64) -> Jitter {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in node_name.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        let offset = if window_ms == 0 { 0 } else { hash % window_ms };
        Jitter {
            offset: Duration::from_millis(offset),
        }
    }
}

/// What one reconcile did, for its outcome.
#[derive(Default)]
struct Report {
    files: BTreeSet<String>,
    units: BTreeSet<String>,
    restarted: Vec<String>,
    notes: Vec<String>,
}

impl Report {
    fn summary(&self) -> String {
        let mut text = format!("{} files, {} units", self.files.len(), self.units.len());
        if !self.restarted.is_empty() {
            text += &format!(" (restarted: {})", self.restarted.join(", "));
        }
        text
    }
}

struct Runner<'a> {
    host: &'a dyn Host,
    desired: &'a Desired,
    applied: Applied,
    /// The record as last stored.
    saved: Vec<u8>,
    dry_run: bool,
    now_ms: u64,
    jitter: Option<Jitter>,
    report: Report,
}

/// Apply `desired`, resuming an interrupted apply first; `now_ms` is the wall
/// clock (ms since the epoch), for the jitter.
pub fn apply(
    ctx: &Context,
    host: &dyn Host,
    desired: &Desired,
    jitter: Option<Jitter>,
    now_ms: u64,
) -> Result<Outcome> {
    let saved = host.state().get(APPLIED)?.unwrap_or_default();
    let applied: Applied = if saved.is_empty() {
        Applied::default()
    } else {
        serde_json::from_slice(&saved)
            .map_err(|e| Error::Invalid(format!("state key {APPLIED:?}: {e}")))?
    };
    let plan = diff(&applied, desired).map_err(|refused| Error::Invalid(refused.0))?;
    if plan.is_empty() {
        if applied.problems.is_empty() {
            return Ok(Outcome::healthy("nothing to do"));
        }
        return Ok(Outcome::degraded(format!(
            "nothing to do; the last apply left: {}",
            applied.problems.join("; ")
        )));
    }
    let resumed = applied.interrupted() || applied.retries > 0;
    let mut runner = Runner {
        host,
        desired,
        applied,
        saved,
        dry_run: ctx.dry_run,
        now_ms,
        jitter,
        report: Report::default(),
    };
    if !resumed {
        runner.applied.problems.clear();
    }
    for _ in 0..MAX_STEPS {
        let plan = diff(&runner.applied, desired).map_err(|refused| Error::Invalid(refused.0))?;
        let Some(step) = plan.steps.into_iter().next() else {
            return runner.finished(resumed);
        };
        match runner.step(&step) {
            Ok(None) => {}
            Ok(Some(wait)) => {
                let mut message = format!(
                    "waiting {} s (restart jitter) to restart {}",
                    wait.as_secs_f64().ceil(),
                    match &step {
                        Step::Restart { unit } => unit.as_str(),
                        _ => "",
                    }
                );
                if !runner.report.files.is_empty() || !runner.report.units.is_empty() {
                    message += &format!("; applied so far: {}", runner.report.summary());
                }
                return Ok(Outcome::progressing(message).requeue_after(wait));
            }
            Err(error) => return runner.failed(&step, error),
        }
    }
    Err(Error::Other(format!(
        "unit-applier: the plan did not converge after {MAX_STEPS} steps (a bug)"
    )))
}

impl Runner<'_> {
    /// Store the record if it changed.
    fn save(&mut self) -> Result<()> {
        let bytes = serde_json::to_vec(&self.applied)
            .map_err(|e| Error::Other(format!("state key {APPLIED:?}: {e}")))?;
        if bytes != self.saved {
            self.host.state().set(APPLIED, &bytes)?;
            self.saved = bytes;
        }
        Ok(())
    }

    fn log(&self, level: Level, message: &str) {
        self.host.log(level, message);
    }

    /// A job that did not end "done": kept for the outcome.
    fn job(&mut self, step: &Step, result: JobResult) {
        if result != JobResult::Done {
            let problem = format!("{step}: job {}", job_word(result));
            self.log(Level::Warn, &problem);
            self.applied.problems.push(problem);
        }
    }

    fn done(&mut self, step: &Step) -> Result<()> {
        self.applied.finish(step, self.desired);
        self.save()
    }

    /// Perform one step; Some(wait) when a jittered restart is not due yet.
    fn step(&mut self, step: &Step) -> Result<Option<Duration>> {
        let host = self.host;
        if step.acts() && !matches!(step, Step::Restart { .. }) {
            self.log(Level::Info, &step.to_string());
        }
        match step {
            Step::Track { unit, own, enable } => {
                let rec = if *own {
                    let status = host.systemd().status(unit)?;
                    let created = status.load_state == "not-found";
                    if !created {
                        self.log(
                            Level::Info,
                            &format!(
                                "{unit} exists already: unit-applier manages it but will not stop, disable or delete it"
                            ),
                        );
                    }
                    let running = matches!(
                        status.active_state.as_str(),
                        "active" | "activating" | "reloading"
                    );
                    AppliedUnit {
                        own: true,
                        created,
                        enabled: !created && *enable && status.unit_file_state == "enabled",
                        started: !created && *enable && running,
                    }
                } else {
                    AppliedUnit::default()
                };
                self.applied.track(unit, rec);
                self.done(step)?;
            }
            Step::Write { path, new, .. } => {
                let file = &self.desired.files[path];
                let created = *new && host.files().metadata(path)?.is_none();
                if *new && !created {
                    self.log(
                        Level::Info,
                        &format!("{path} exists already: unit-applier overwrites it but will not delete it"),
                    );
                }
                self.applied.begin(step, self.desired, created);
                self.save()?;
                if let Some(owner) = &file.owner {
                    self.log(
                        Level::Warn,
                        &format!("{path}: owner {owner} recorded, not applied (the files capability cannot chown yet)"),
                    );
                }
                host.files()
                    .write(path, file.content.as_bytes(), Some(file.mode))?;
                self.touched(&file.kind, path);
                self.done(step)?;
            }
            Step::Remove { path, delete, .. } => {
                let kind = self.applied.files.get(path).map(|f| f.kind.clone());
                self.applied.begin(step, self.desired, false);
                self.save()?;
                if *delete {
                    host.files().remove(path)?;
                    if let Some(kind) = &kind {
                        self.touched(kind, path);
                        if let (Kind::DropIn(_), Some((dir, _))) = (kind, path.rsplit_once('/')) {
                            // The drop-in directory goes too when nothing else is in it.
                            match host.files().remove(dir) {
                                Ok(_) | Err(Error::Conflict(_)) | Err(Error::NotFound(_)) => {}
                                Err(e) => return Err(e),
                            }
                        }
                    }
                }
                self.done(step)?;
            }
            Step::Stop { unit } => {
                let result = host.systemd().stop(unit)?;
                self.report.units.insert(unit.clone());
                self.job(step, result);
                self.done(step)?;
            }
            Step::Disable { unit } => {
                host.systemd().disable(&[unit])?;
                self.report.units.insert(unit.clone());
                self.done(step)?;
            }
            Step::DaemonReload => {
                host.systemd().daemon_reload()?;
                self.done(step)?;
            }
            Step::Enable { unit } => {
                host.systemd().enable(&[unit])?;
                self.report.units.insert(unit.clone());
                self.done(step)?;
            }
            Step::Start { unit } => {
                let result = host.systemd().start(unit)?;
                self.report.units.insert(unit.clone());
                self.job(step, result);
                self.done(step)?;
            }
            Step::Restart { unit } => return self.restart(step, unit),
            Step::SkipRestart { .. } | Step::Forget { .. } => self.done(step)?,
        }
        Ok(None)
    }

    fn touched(&mut self, kind: &Kind, path: &str) {
        match kind.unit() {
            Some(unit) => self.report.units.insert(unit.to_string()),
            None => self.report.files.insert(path.to_string()),
        };
    }

    fn restart(&mut self, step: &Step, unit: &str) -> Result<Option<Duration>> {
        if let Some(jitter) = &self.jitter
            && self.desired.jittered.contains(unit)
            && !jitter.offset.is_zero()
        {
            let offset = jitter.offset.as_millis() as u64;
            if self.dry_run {
                let note = format!("the restart of {unit} waits {} s (jitter)", offset / 1000);
                if !self.report.notes.contains(&note) {
                    self.report.notes.push(note);
                }
            } else {
                let until = *self
                    .applied
                    .jitter_until_ms
                    .get_or_insert(self.now_ms + offset);
                self.save()?;
                if self.now_ms < until {
                    return Ok(Some(Duration::from_millis(until - self.now_ms)));
                }
            }
        }
        let systemd = self.host.systemd();
        let status = systemd.status(unit)?;
        let resumed = self.applied.in_flight.as_ref().filter(|f| f.unit == unit);
        // A restart issued just before an interruption may still be running:
        // its ActiveEnter has not moved yet. Judge once the unit has settled,
        // or it would be restarted twice.
        if resumed.is_some() && IN_TRANSITION.contains(&status.active_state.as_str()) {
            return Ok(Some(SETTLE));
        }
        if let Some(flight) = resumed
            && status.active_enter_ms != flight.active_enter_ms
        {
            self.log(
                Level::Info,
                &format!("{unit}: the restart issued before an interruption took effect; not restarting again"),
            );
            self.report.units.insert(unit.to_string());
            self.report.restarted.push(unit.to_string());
            self.done(step)?;
            return Ok(None);
        }
        let own = self.applied.units.get(unit).is_some_and(|rec| rec.own);
        if !own && (status.load_state == "not-found" || status.active_state == "inactive") {
            self.log(
                Level::Info,
                &format!(
                    "{unit} is not running ({}): not restarted (own = false: unit-applier does not start it)",
                    status.active_state
                ),
            );
            self.done(step)?;
            return Ok(None);
        }
        self.log(Level::Info, &step.to_string());
        self.applied.in_flight = Some(InFlight {
            unit: unit.to_string(),
            active_enter_ms: status.active_enter_ms,
        });
        self.save()?;
        match systemd.restart(unit) {
            Ok(result) => {
                self.report.units.insert(unit.to_string());
                self.report.restarted.push(unit.to_string());
                self.job(step, result);
                self.done(step)?;
                Ok(None)
            }
            Err(error) => {
                // Refused: the restart certainly did not happen. Otherwise
                // (timeout, bus gone) it may have: the resume decides.
                if matches!(
                    error,
                    Error::Denied(_)
                        | Error::BudgetExhausted(_)
                        | Error::Invalid(_)
                        | Error::NotFound(_)
                ) {
                    self.applied.in_flight = None;
                    self.save()?;
                }
                Err(error)
            }
        }
    }

    fn finished(mut self, resumed: bool) -> Result<Outcome> {
        self.applied.retries = 0;
        self.applied.jitter_until_ms = None;
        self.save()?;
        let mut message = format!("applied: {}", self.report.summary());
        if resumed {
            message += "; resumed an interrupted apply";
        }
        for note in &self.report.notes {
            message += &format!("; {note}");
        }
        if self.applied.problems.is_empty() {
            return Ok(Outcome::healthy(message));
        }
        Ok(Outcome::degraded(format!(
            "{message}; {}",
            self.applied.problems.join("; ")
        )))
    }

    fn failed(mut self, step: &Step, error: Error) -> Result<Outcome> {
        self.applied.retries = self.applied.retries.saturating_add(1);
        self.save()?;
        let retry = RETRY_FIRST
            .saturating_mul(1 << self.applied.retries.min(16).saturating_sub(1))
            .min(RETRY_MAX);
        let left = diff(&self.applied, self.desired)
            .map(|plan| plan.actions().len())
            .unwrap_or_default();
        self.log(Level::Error, &format!("{step}: {error}"));
        let mut message = format!(
            "{step} failed: {error}; {left} step(s) left, retrying in {} s",
            retry.as_secs()
        );
        if !self.report.files.is_empty() || !self.report.units.is_empty() {
            message += &format!("; applied so far: {}", self.report.summary());
        }
        Ok(Outcome::degraded(message).requeue_after(retry))
    }
}

fn job_word(result: JobResult) -> &'static str {
    match result {
        JobResult::Done => "done",
        JobResult::Failed => "failed",
        JobResult::Canceled => "canceled",
        JobResult::Timeout => "timed out",
        JobResult::Dependency => "failed (a dependency failed)",
        JobResult::Skipped => "skipped",
    }
}
