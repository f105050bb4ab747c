//! The escalation ladder, pure: given what the ladder remembers and what the
//! node shows now, the next thing to do. No I/O, no clock of its own: the
//! plugin reads the Node and the boot identity, asks [`next`], saves the
//! ladder it returns (before it acts), then acts.
//!
//! - A step is taken when a problem shows and nothing is under way, or when
//!   the step before it did not verify.
//! - A step **verifies** only on an observed outcome: every named condition
//!   clear, and staying clear for `settle`; after a reboot also a boot
//!   identity other than the one the step saw, and the Node Ready. A step
//!   that has not verified within `verify-within` is tried again, up to
//!   `attempts` times, then the next step is taken (Medik8s' NHC escalated
//!   on a timeout while a node was still recovering: here a step whose
//!   problem cleared is given its settle time, however late).
//! - A verified step keeps watch for `quiet`: the problem coming back within
//!   it means the step did not hold, and the ladder goes on to the next;
//!   after it the ladder resets.
//! - Past the last step the ladder is exhausted: it acts no more and says so,
//!   until the problem clears and stays clear.
//! - Times are wall-clock milliseconds (the ladder outlives reboots); a clock
//!   that goes back makes every wait longer, never shorter.

use serde::{Deserialize, Serialize};

/// What the ladder remembers between reconciles and across restarts and
/// reboots (the plugin's `state`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct Ladder {
    /// The step taken last (an index into the configured steps); none: idle.
    pub step: Option<usize>,
    /// Tries of that step so far.
    pub attempt: u32,
    /// When it was taken.
    pub acted_at: u64,
    /// The boot identity when it was taken.
    pub boot: String,
    /// Since when every named condition has been clear (after the step).
    pub clear_since: Option<u64>,
    /// When the step verified (watching for `quiet` since).
    pub verified_at: Option<u64>,
    /// Every step was tried and none verified.
    pub exhausted: bool,
    /// The ladder cordoned the Node (a reboot's drain): it uncordons on recovery.
    pub cordoned: bool,
    /// When this remediation began (its first step taken or held back);
    /// none once the node recovered.
    pub started_at: Option<u64>,
    /// The ladder asked for the instance's replacement (its annotation on
    /// the Node): it withdraws the request on recovery.
    pub replace_requested: bool,
    /// Someone else uncordoned the Node during a drain: no step is taken
    /// before this time (the operator's word stands for `quiet-ms`).
    pub held_until: Option<u64>,
}

/// The ladder's timings and shape, from the plugin's config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    /// How many steps there are.
    pub steps: usize,
    /// Which steps are reboots (verified by a new boot identity and Ready).
    pub reboots: Vec<bool>,
    pub settle_ms: u64,
    pub verify_within_ms: u64,
    pub attempts: u32,
    pub quiet_ms: u64,
}

/// What the plugin sees now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub now: u64,
    /// The named conditions that are True on the Node.
    pub problems: Vec<String>,
    pub boot: String,
    /// The Node's Ready condition is True.
    pub ready: bool,
}

/// The next thing to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// No problem, nothing under way.
    Idle,
    /// Take `step` (its `attempt`-th try).
    Act { step: usize, attempt: u32 },
    /// Wait until `until` for the step's outcome.
    Wait { until: u64, why: Waiting },
    /// The step verified now: undo what the ladder changed (uncordon).
    Verified { step: usize },
    /// Recovered; the ladder resets at `until` if the problem stays away.
    Watching { step: usize, until: u64 },
    /// Quiet long enough: forget the ladder.
    Reset,
    /// Every step tried; none verified.
    Exhausted,
}

/// What a step waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waiting {
    /// The problem to clear.
    Clear,
    /// The node to come back (a new boot identity, Ready) after a reboot.
    Reboot,
    /// The cleared problem to stay clear for the settle time.
    Settle,
}

/// The ladder after one look, and what to do.
pub fn next(ladder: &Ladder, rules: &Rules, seen: &Seen) -> (Ladder, Next) {
    let mut ladder = ladder.clone();
    let problem = !seen.problems.is_empty();
    let now = seen.now;
    let Some(step) = ladder.step else {
        return match problem {
            true => act(ladder, 0, 1, seen),
            // Nothing under way: only what is still to undo is kept (a
            // step held back began no remediation that lasts).
            false => (
                Ladder {
                    cordoned: ladder.cordoned,
                    replace_requested: ladder.replace_requested,
                    ..Ladder::default()
                },
                Next::Idle,
            ),
        };
    };
    if let Some(verified) = ladder.verified_at {
        return match (problem, since(verified, now) >= rules.quiet_ms) {
            // Back within the quiet time: the step did not hold.
            (true, _) => escalate(ladder, rules, step, seen),
            (false, true) => (Ladder::default(), Next::Reset),
            (false, false) => {
                let until = verified.saturating_add(rules.quiet_ms);
                (ladder, Next::Watching { step, until })
            }
        };
    }
    let rebooting = rules.reboots.get(step).copied().unwrap_or(false) && !ladder.exhausted;
    let back = !rebooting || (seen.boot != ladder.boot && seen.ready);
    if !problem && back {
        let clear = *ladder.clear_since.get_or_insert(now);
        if since(clear, now) >= rules.settle_ms {
            ladder.verified_at = Some(now);
            ladder.exhausted = false;
            ladder.started_at = None;
            return (ladder, Next::Verified { step });
        }
        let until = clear.saturating_add(rules.settle_ms);
        return (
            ladder,
            Next::Wait {
                until,
                why: Waiting::Settle,
            },
        );
    }
    ladder.clear_since = None;
    if ladder.exhausted {
        return (ladder, Next::Exhausted);
    }
    if since(ladder.acted_at, now) < rules.verify_within_ms {
        let until = ladder.acted_at.saturating_add(rules.verify_within_ms);
        let why = if back {
            Waiting::Clear
        } else {
            Waiting::Reboot
        };
        return (ladder, Next::Wait { until, why });
    }
    match ladder.attempt < rules.attempts {
        true => {
            let attempt = ladder.attempt + 1;
            act(ladder, step, attempt, seen)
        }
        false => escalate(ladder, rules, step, seen),
    }
}

/// Milliseconds from `then` to `now`; none when the clock went back.
fn since(then: u64, now: u64) -> u64 {
    now.saturating_sub(then)
}

fn act(mut ladder: Ladder, step: usize, attempt: u32, seen: &Seen) -> (Ladder, Next) {
    ladder.started_at.get_or_insert(seen.now);
    ladder.held_until = None;
    ladder.step = Some(step);
    ladder.attempt = attempt;
    ladder.acted_at = seen.now;
    ladder.boot = seen.boot.clone();
    ladder.clear_since = None;
    ladder.verified_at = None;
    ladder.exhausted = false;
    (ladder, Next::Act { step, attempt })
}

fn escalate(mut ladder: Ladder, rules: &Rules, step: usize, seen: &Seen) -> (Ladder, Next) {
    if step + 1 < rules.steps {
        return act(ladder, step + 1, 1, seen);
    }
    ladder.verified_at = None;
    ladder.clear_since = None;
    ladder.exhausted = true;
    (ladder, Next::Exhausted)
}

#[cfg(test)]
mod tests;
