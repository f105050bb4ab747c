//! The verdict on a step of a rollout: the leader compares what the
//! candidate's nodes did with what the stable nodes did in the same window
//! (counter deltas from the reports on their node Leases), so a failure
//! both share (an API server that is down, a bad day for the cloud) holds
//! the rollout back instead of blaming the candidate. Pure.

use super::revision::Counters;
use std::collections::BTreeMap;
use std::time::Duration;

/// What the leader judges by; `[host.fleet.rollout]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Rules {
    /// How long a step runs before it may be promoted.
    pub bake: Duration,
    /// Candidate runs a step needs (over all its nodes) to be promoted.
    pub min_runs: u64,
    /// How long a step may wait for `min_runs` before it pauses.
    pub patience: Duration,
    /// How far the candidates' failure rate may exceed the stable nodes'
    /// (0.05: five failed runs in a hundred).
    pub margin: f64,
    /// Failures that must be seen before a rate counts at all.
    pub min_failures: u64,
}

impl Default for Rules {
    fn default() -> Rules {
        Rules {
            bake: Duration::from_secs(600),
            min_runs: 10,
            patience: Duration::from_secs(1800),
            margin: 0.05,
            min_failures: 3,
        }
    }
}

/// One node as the leader saw it at one poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// Its tend process (a new one: the agent restarted).
    pub process: String,
    pub revision: String,
    pub counters: Counters,
    pub ready: bool,
}

/// Runs and failures of one side, over a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Side {
    pub nodes: u64,
    pub runs: u64,
    pub failures: u64,
}

impl Side {
    pub fn rate(&self) -> f64 {
        match self.runs {
            0 => 0.0,
            runs => self.failures as f64 / runs as f64,
        }
    }

    fn add(&mut self, delta: &Counters) {
        self.nodes += 1;
        self.runs = self.runs.saturating_add(delta.runs);
        self.failures = self.failures.saturating_add(delta.failures());
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The step did its time and its runs, no worse than the stable nodes.
    Promote,
    /// Not yet: why.
    Hold(String),
    /// Stop widening and keep what runs (the baseline degraded as well, or
    /// the candidate does not run enough to judge): why.
    Pause(String),
    /// The candidate is worse: every node goes back to stable. Why.
    Abort(String),
}

/// Everything a verdict reads: each node's sample when the step's window
/// began, when its failure rates count from, and now (by node name), and how
/// long the step has run.
pub struct Window<'a> {
    pub candidate: &'a str,
    pub stable: &'a str,
    /// When the step began: a candidate node restarted or turned NotReady
    /// since then aborts.
    pub start: &'a BTreeMap<String, Sample>,
    /// Where both sides' runs and failures count from: the step's start, or
    /// the last time a node began running the candidate (the leader's
    /// `open`), so both sides count over the same span.
    pub counted_from: &'a BTreeMap<String, Sample>,
    pub now: &'a BTreeMap<String, Sample>,
    pub baked: Duration,
    /// The stable nodes' failure rate before the rollout began, if known:
    /// the baseline degrades when it fails more than that by the margin.
    pub baseline_before: Option<f64>,
}

/// The candidate's and the stable nodes' runs and failures in the window.
pub fn sides(window: &Window) -> (Side, Side) {
    let (mut candidate, mut stable) = (Side::default(), Side::default());
    for (node, now) in window.now {
        let side = match now.revision.as_str() {
            r if r == window.candidate => &mut candidate,
            r if r == window.stable => &mut stable,
            _ => continue,
        };
        side.add(&delta(window.counted_from.get(node), now));
    }
    (candidate, stable)
}

/// What `now` counted since `start`: all of it when the node began running
/// this revision (or this process) within the window.
fn delta(start: Option<&Sample>, now: &Sample) -> Counters {
    match start {
        Some(s) if s.process == now.process && s.revision == now.revision => {
            now.counters.since(&s.counters)
        }
        _ => now.counters,
    }
}

pub fn judge(rules: &Rules, window: &Window) -> Verdict {
    for (node, now) in window.now {
        let Some(start) = window.start.get(node) else {
            continue;
        };
        let candidate = now.revision == window.candidate || start.revision == window.candidate;
        if !candidate {
            continue;
        }
        if start.process != now.process {
            return Verdict::Abort(format!(
                "tend restarted on {node} while it ran the candidate"
            ));
        }
        if start.ready && !now.ready {
            return Verdict::Abort(format!("{node} turned NotReady while it ran the candidate"));
        }
    }
    let (candidate, stable) = sides(window);
    let counts = |side: &Side| {
        format!(
            "{} of {} runs failed on {} nodes ({:.1} %)",
            side.failures,
            side.runs,
            side.nodes,
            side.rate() * 100.0
        )
    };
    if candidate.failures >= rules.min_failures && candidate.rate() > stable.rate() + rules.margin {
        return Verdict::Abort(format!(
            "the candidate fails more than the stable nodes: {} against {}",
            counts(&candidate),
            counts(&stable)
        ));
    }
    if let Some(before) = window.baseline_before
        && stable.failures >= rules.min_failures
        && stable.rate() > before + rules.margin
    {
        return Verdict::Pause(format!(
            "the stable nodes degrade as well ({}, against {:.1} % before the rollout): not the candidate's doing, so nothing widens and nothing reverts until they recover or an operator resumes",
            counts(&stable),
            before * 100.0
        ));
    }
    if candidate.nodes == 0 {
        let why = "no node reports running the candidate yet";
        return match window.baked >= rules.patience {
            true => Verdict::Pause(format!(
                "{why} after {}; an operator may resume it (tend rollout resume)",
                minutes(window.baked)
            )),
            false => Verdict::Hold(why.into()),
        };
    }
    if window.baked < rules.bake {
        return Verdict::Hold(format!(
            "baking: {} of {}",
            minutes(window.baked),
            minutes(rules.bake)
        ));
    }
    if candidate.runs < rules.min_runs {
        let why = format!(
            "{} candidate runs in {}, {} needed",
            candidate.runs,
            minutes(window.baked),
            rules.min_runs
        );
        return match window.baked >= rules.patience {
            true => Verdict::Pause(format!(
                "too few runs to judge: {why}; an operator may resume it (tend rollout resume)"
            )),
            false => Verdict::Hold(why),
        };
    }
    Verdict::Promote
}

fn minutes(d: Duration) -> String {
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

#[cfg(test)]
mod tests;
