//! What one node runs under staged rollouts: the node's side of
//! [`super::rollout`]. A change of its config or of a plugin's component is
//! a *desired* revision the node holds (stored and compiled) but runs only
//! when the leader's rollout puts it in the step, or at once when it only
//! reduces risk. Without a rollout to read (no leader yet, the API server
//! unreachable) it keeps the revision it adopted. A candidate that keeps
//! trapping or timing out is reverted by the node itself, which says so in
//! its report until the leader has marked the revision failed. Pure.

use super::cohort::Member;
use super::revision::Counters;
use super::rollout::{Rollout, State};
use crate::config::Config;
use std::collections::BTreeMap;

/// Traps and timeouts of a candidate after which its node reverts on its
/// own (issue 29). A slow peer that times every node's plugins out alike can
/// make a node give up a good candidate: the safe side (the leader then fails
/// it, and an operator retries it), taken knowingly.
pub const REVERT_AFTER: u64 = 3;

/// What the node knows of its revisions at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Holding<'a> {
    /// The revision it runs.
    pub adopted: &'a str,
    /// The stable revision as last read from the rollout (or as adopted
    /// first), when this node holds it.
    pub stable: Option<&'a str>,
    /// What its config asks for now, when it differs from `adopted`.
    pub desired: Option<&'a str>,
    /// `desired` only reduces risk against `stable` ([`reduces_risk`]): the
    /// node runs it at once, and says so in its report.
    pub reduces_risk: bool,
    /// A candidate this node reverted on its own (and in which attempt of
    /// its rollout), until the leader has seen to it.
    pub reverted: Option<(&'a str, u64)>,
}

/// The revision to switch to now, if any.
pub fn choose(node: &Holding, rollout: Option<&Rollout>, me: Option<&Member>) -> Option<String> {
    let gave_up = |revision: &str| node.reverted.is_some_and(|(r, _)| r == revision);
    let failed = |revision: &str| rollout.is_some_and(|r| r.failed.iter().any(|f| f == revision));
    if node.reduces_risk
        && let Some(desired) = node.desired
        && !gave_up(desired)
        && !failed(desired)
    {
        return Some(desired.to_string());
    }
    let (rollout, me) = (rollout?, me?);
    let target = rollout.runs(&me.uid, &me.group);
    let held = node.desired == Some(target) || node.stable == Some(target);
    (target != node.adopted && !gave_up(target) && held).then(|| target.to_string())
}

/// Whether the node should give up the candidate it runs: it has trapped or
/// timed out [`REVERT_AFTER`] times, and the stable revision is at hand.
pub fn should_revert(node: &Holding, counters: &Counters) -> bool {
    let failing = counters.traps.saturating_add(counters.timeouts) >= REVERT_AFTER;
    failing && node.stable.is_some_and(|stable| stable != node.adopted)
}

/// Whether the leader has seen to the revision this node reverted in
/// `attempt`: it is failed now, no longer the candidate, or rolling out
/// again in a later attempt (an operator's retry). A revision that became
/// stable meanwhile is not: the node keeps what it fell back to, and says so.
pub fn acknowledged((reverted, attempt): (&str, u64), rollout: &Rollout) -> bool {
    rollout.revision != reverted
        || rollout.attempt != attempt
        || (rollout.state == State::Failed && rollout.failed.iter().any(|f| f == reverted))
}

/// Whether `new` (with its components' digests by plugin) only reduces risk
/// against `old`: the same `[host]`, every plugin enabled in `new` enabled in
/// `old` with the same settings and component, and at least one plugin of
/// `old` disabled or removed. Anything else, a tightened budget or a
/// narrowed grant included, is staged like any change: the safe side.
pub fn reduces_risk(
    old: (&Config, &BTreeMap<String, String>),
    new: (&Config, &BTreeMap<String, String>),
) -> bool {
    let ((old, old_components), (new, new_components)) = (old, new);
    if old.host != new.host {
        return false;
    }
    let same = new.enabled_plugins().all(|plugin| {
        old.plugins
            .get(&plugin.name)
            .is_some_and(|before| before == plugin)
            && old_components.get(&plugin.name) == new_components.get(&plugin.name)
    });
    let dropped = old
        .enabled_plugins()
        .any(|p| !new.plugins.get(&p.name).is_some_and(|after| after.enabled));
    same && dropped
}

#[cfg(test)]
mod tests;
