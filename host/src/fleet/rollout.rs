//! A staged rollout as the cluster leader runs it and every node reads it:
//! `{revision, stable, step, state, reason, cuts}` on the `tend-rollout`
//! Lease (Tend's own: the kube capability refuses plugins any write to it).
//! [`advance`] is the leader's one decision per poll, from the Lease as read,
//! the revision the nodes' config asks for, an operator's command and the
//! step's [`Verdict`]; [`Rollout::runs`] is what one node runs under it.
//! Pure.

use super::cohort::{Cuts, Member, Step};
use super::revision::is_revision;
use super::verdict::Verdict;
use serde::{Deserialize, Serialize};

/// The Lease every node reads and only the leader writes.
pub const ROLLOUT_LEASE: &str = "tend-rollout";
/// Its annotation holding the [`Rollout`].
pub const ROLLOUT_ANNOTATION: &str = "tend.dev/rollout";
/// Its annotation holding an operator's command (`tend rollout pause`),
/// which the leader consumes with its next write.
pub const COMMAND_ANNOTATION: &str = "tend.dev/rollout-command";
/// A command longer than this is not read.
pub const MAX_COMMAND_BYTES: usize = 256;
/// A rollout longer than this is not read: the cuts of a few thousand
/// groups, not more (a peer's text: bounded).
pub const MAX_ROLLOUT_BYTES: usize = 128 * 1024;
/// Revisions remembered as failed: a re-apply of one of them stays failed.
const FAILED_KEPT: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// Widening step by step, each one baked and judged.
    Rolling,
    /// Neither widening nor reverting: the candidate's nodes keep it.
    Paused,
    /// Aborted: every node runs the stable revision until an operator
    /// retries the candidate.
    Failed,
    /// The candidate became the stable revision everywhere.
    Done,
}

/// Fields a newer tend adds are ignored, as in a report: a fleet mid-upgrade
/// runs both.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rollout {
    /// The candidate (the stable revision itself once done).
    pub revision: String,
    pub stable: String,
    /// The step reached, an index into the configured steps.
    pub step: usize,
    pub state: State,
    /// Why it stands where it stands, for `tend rollout status`.
    pub reason: String,
    /// Which nodes of each group run the candidate.
    #[serde(default)]
    pub cuts: Cuts,
    /// Revisions aborted and not retried since, newest last.
    #[serde(default)]
    pub failed: Vec<String>,
    /// Counts the rollouts started (a retry is a new one): a node's own
    /// revert belongs to one attempt, and a later one is not aborted by it.
    #[serde(default)]
    pub attempt: u64,
}

/// What an operator asked of the rollout (`tend rollout pause|resume|retry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Command {
    Pause,
    Resume,
    Retry,
}

/// A command as the CLI leaves it on the rollout Lease: for one revision,
/// so an order given for one candidate never applies to the next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    pub command: Command,
    pub revision: String,
}

impl Order {
    /// The annotation's text, if it is an order at all (bounded).
    pub fn parse(text: &str) -> Option<Order> {
        let order: Order = (text.len() <= MAX_COMMAND_BYTES)
            .then(|| serde_json::from_str(text).ok())
            .flatten()?;
        is_revision(&order.revision).then_some(order)
    }

    /// The command, if it was given for `revision`.
    pub fn for_revision(&self, revision: &str) -> Option<Command> {
        (self.revision == revision).then_some(self.command)
    }
}

impl Rollout {
    /// The Lease's text, if it is a rollout at all: bounded, every revision
    /// it names a revision, its step and reason of a sane size.
    pub fn parse(text: &str) -> Option<Rollout> {
        if text.len() > MAX_ROLLOUT_BYTES {
            return None;
        }
        let rollout: Rollout = serde_json::from_str(text).ok()?;
        let revisions = [&rollout.revision, &rollout.stable]
            .into_iter()
            .chain(&rollout.failed);
        let sane = revisions.into_iter().all(|r| is_revision(r))
            && rollout.failed.len() <= FAILED_KEPT
            && rollout.step < 1024
            && rollout.reason.len() <= 1024;
        sane.then_some(rollout)
    }

    /// The revision the node `uid` of `group` runs.
    pub fn runs(&self, uid: &str, group: &str) -> &str {
        let staged = matches!(self.state, State::Rolling | State::Paused)
            && self.cuts.runs_candidate(uid, group, &self.revision);
        match staged || self.state == State::Done {
            true => &self.revision,
            false => &self.stable,
        }
    }

    /// A rollout that has nothing to do: every node runs `revision`.
    fn settled(revision: &str, failed: Vec<String>, reason: String) -> Rollout {
        Rollout {
            revision: revision.into(),
            stable: revision.into(),
            step: 0,
            state: State::Done,
            reason,
            cuts: Cuts::default(),
            failed,
            attempt: 0,
        }
    }

    /// Settled at `revision`, counting attempts on from this one.
    fn settled_after(&self, revision: &str, failed: Vec<String>, reason: String) -> Rollout {
        Rollout {
            attempt: self.attempt,
            ..Rollout::settled(revision, failed, reason)
        }
    }

    fn failed_with(&self, revision: &str) -> Vec<String> {
        let mut failed = self.without_failed(revision);
        failed.push(revision.to_string());
        let excess = failed.len().saturating_sub(FAILED_KEPT);
        failed.drain(..excess);
        failed
    }

    fn without_failed(&self, revision: &str) -> Vec<String> {
        self.failed
            .iter()
            .filter(|r| *r != revision)
            .cloned()
            .collect()
    }
}

/// What the leader sees at one poll.
pub struct Seen<'a> {
    /// The revision the nodes' config asks for (most fresh nodes agree),
    /// if any.
    pub desired: Option<&'a str>,
    /// The revision most fresh nodes run, if any: what a leader that finds
    /// no rollout takes as stable (a deleted Lease starts over from it).
    pub running: Option<&'a str>,
    /// It differs from the stable revision only in what reduces risk (a
    /// plugin disabled, a budget tightened, a grant narrowed): every node
    /// applies it at once, and it becomes the stable revision.
    pub reduces_risk: bool,
    /// Every node, for the cuts of a step.
    pub nodes: &'a [Member],
    pub steps: &'a [Step],
    /// An operator's command, if one is pending.
    pub command: Option<Command>,
}

/// The rollout after one poll of the leader (None: nothing to publish yet,
/// no node says what it asks for). `verdict` judges the current step; it
/// is asked only of a rolling candidate.
pub fn advance(
    current: Option<&Rollout>,
    seen: &Seen,
    verdict: impl FnOnce() -> Verdict,
) -> Option<Rollout> {
    let desired = seen.desired;
    let Some(current) = current else {
        // The first leader (or one that found the Lease deleted) takes what
        // most nodes run as stable; what they ask for then rolls out from
        // the first step like any change.
        return seen.running.or(desired).map(|r| {
            Rollout::settled(
                r,
                vec![],
                "what most nodes run, adopted as the stable revision".into(),
            )
        });
    };
    Some(match desired {
        None => current.clone(),
        Some(desired) => decide(current, desired, seen, verdict),
    })
}

fn decide(
    current: &Rollout,
    desired: &str,
    seen: &Seen,
    verdict: impl FnOnce() -> Verdict,
) -> Rollout {
    let mut next = current.clone();
    let failed_before = current.failed.iter().any(|f| f == desired);
    if desired != current.stable && seen.reduces_risk && !failed_before {
        return current.settled_after(
            desired,
            current.failed.clone(),
            format!("{desired} only reduces risk: applied on every node at once"),
        );
    }
    if desired == current.stable {
        // Back where the fleet was (a reverted ConfigMap): nothing to roll.
        if current.revision != current.stable {
            next = current.settled_after(
                desired,
                current.failed.clone(),
                format!(
                    "the config asks for the stable revision again: {} dropped",
                    current.revision
                ),
            );
        }
        return next;
    }
    if desired != current.revision {
        // A new candidate supersedes the last, from the first step.
        if failed_before && seen.command != Some(Command::Retry) {
            return current.settled_after(
                &current.stable,
                current.failed.clone(),
                format!("{desired} failed before: tend rollout retry rolls it out again"),
            );
        }
        return start(current, desired, seen);
    }
    match (current.state, seen.command) {
        (State::Failed, Some(Command::Retry)) => return start(current, desired, seen),
        (State::Failed | State::Done, _) => return next,
        (State::Rolling, Some(Command::Pause)) => {
            next.state = State::Paused;
            next.reason = "paused by an operator (tend rollout resume goes on)".into();
            return next;
        }
        (State::Paused, Some(Command::Resume)) => {
            next.state = State::Rolling;
            next.reason = "resumed by an operator: the step bakes again".into();
            return next;
        }
        (State::Paused, _) => return next,
        (State::Rolling, _) => {}
    }
    match verdict() {
        Verdict::Hold(why) => next.reason = why,
        Verdict::Pause(why) => {
            next.state = State::Paused;
            next.reason = why;
        }
        Verdict::Abort(why) => {
            next.state = State::Failed;
            next.failed = current.failed_with(desired);
            next.cuts = Cuts::default();
            next.reason = format!("aborted at step {}: {why}", current.step + 1);
        }
        Verdict::Promote => {
            let last = seen.steps.len().saturating_sub(1);
            let everyone = seen.steps.get(current.step).is_none_or(|s| s.is_everyone());
            if current.step >= last || everyone {
                next = current.settled_after(
                    desired,
                    current.without_failed(desired),
                    format!("{desired} is stable on every node"),
                );
            } else {
                next.step = current.step + 1;
                next.cuts = Cuts::widen(&current.cuts, seen.nodes, desired, seen.steps[next.step]);
                next.reason = format!("promoted to step {} of {}", next.step + 1, seen.steps.len());
            }
        }
    }
    next
}

/// `desired` at the first step, staged against the current stable revision.
fn start(current: &Rollout, desired: &str, seen: &Seen) -> Rollout {
    let first = seen.steps.first().copied().unwrap_or(Step::Nodes(1));
    Rollout {
        revision: desired.into(),
        stable: current.stable.clone(),
        step: 0,
        state: State::Rolling,
        reason: format!("step 1 of {}: {} started", seen.steps.len(), desired),
        cuts: Cuts::widen(&Cuts::default(), seen.nodes, desired, first),
        failed: current.without_failed(desired),
        attempt: current.attempt + 1,
    }
}

#[cfg(test)]
mod tests;
