//! The cluster leader's side of a staged rollout. Once per poll it reads the
//! rollout Lease, every node's report and every Node, decides with
//! [`advance`], and writes the result back by compare-and-swap: a write
//! another leader (or an operator's command) got in first fails `conflict`
//! and the next poll decides again on what is there then.
//!
//! The verdict's window lives in this leader's memory: a new leader opens a
//! new one, so a fail-over restarts a step's bake and never shortens it. So
//! does the baseline the stable nodes are held to: their failure rate before
//! the rollout began, from two snapshots of the quiet fleet at most two
//! bakes apart (a leader that saw no quiet fleet judges without it).
//! Everything it reads is a peer's text: reports and the Lease are parsed
//! bounded, and what does not parse counts for nothing.

use super::cohort::{Member, Step};
use super::ledger::NodeFacts;
use super::revision::Report;
use super::rollout::{Command, Order, Rollout, Seen, State, advance};
use super::store::FleetStore;
use super::verdict::{Rules, Sample, Verdict, Window, judge, sides};
use crate::capabilities::CapError;
use std::collections::BTreeMap;
use tokio::time::Instant;

/// Every node's last sample, by node name.
type Samples = BTreeMap<String, Sample>;

pub struct RolloutLeader {
    rules: Rules,
    steps: Vec<Step>,
    /// The window of the step being judged.
    window: Option<Opened>,
    /// Snapshots of the fleet while nothing rolled: the older at least a
    /// bake old once there are two, for the baseline.
    quiet: Quiet,
}

type Quiet = (Option<(Instant, Samples)>, Option<(Instant, Samples)>);

struct Opened {
    revision: String,
    step: usize,
    at: Instant,
    start: Samples,
    /// Where the failure rates count from: `start`, taken again whenever a
    /// node began running the candidate ([`open`]).
    counted_from: Samples,
    /// The stable nodes' failure rate before this revision began rolling.
    baseline_before: Option<f64>,
}

/// What one poll saw and did.
#[derive(Debug, Clone, PartialEq)]
pub struct Polled {
    /// The rollout as published after the poll (None: no node says what it
    /// asks for yet).
    pub rollout: Option<Rollout>,
    /// Whether the poll wrote the Lease.
    pub wrote: bool,
}

impl RolloutLeader {
    pub fn new(rules: Rules, steps: Vec<Step>) -> RolloutLeader {
        RolloutLeader {
            rules,
            steps,
            window: None,
            quiet: (None, None),
        }
    }

    /// Forget the window of the step being judged: a leader that leads
    /// again after a gap judges the step from then.
    pub fn forget(&mut self) {
        self.window = None;
    }

    /// One poll at `now`: read, decide, write if anything changed.
    pub async fn poll(&mut self, store: &dyn FleetStore, now: Instant) -> Result<Polled, CapError> {
        let lease = store.rollout().await?;
        let current = match &lease.rollout {
            None => None,
            Some(text) => Some(Rollout::parse(text).ok_or_else(|| {
                CapError::Invalid(format!(
                    "the Lease {} holds no rollout Tend wrote: nothing rolls out until it is fixed or deleted (deleting it starts over from what most nodes run, and rolls out what they ask for from the first step)",
                    super::rollout::ROLLOUT_LEASE
                ))
            })?),
        };
        let nodes = store.nodes().await?;
        let names: BTreeMap<&str, &NodeFacts> =
            nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        // Only a Node's own tend counts: a Lease with no Node behind it
        // (anyone's, in the namespace) neither votes nor is judged.
        let reports: Vec<(String, Report)> = store
            .reports()
            .await?
            .into_iter()
            .filter(|p| p.fresh && names.contains_key(p.node.as_str()))
            .filter_map(|p| Some((p.node, Report::parse(p.report.as_deref()?)?)))
            .collect();
        let samples = samples(&names, &reports);
        // Steps are shares of the nodes that run tend, not of every Node (a
        // control-plane node, or one the DaemonSet skips, would never run
        // its step's candidate).
        let members: Vec<Member> = reports
            .iter()
            .filter_map(|(node, _)| member(names[node.as_str()]))
            .collect();
        let asked = majority(
            reports
                .iter()
                .map(|(_, r)| r.desired.as_deref().unwrap_or(&r.revision)),
        );
        let running = majority(reports.iter().map(|(_, r)| r.revision.as_str()));
        let (desired, reduces_risk) = match asked {
            Some(d) => {
                let only_less = reduces_risk(&reports, &d);
                (Some(d), only_less)
            }
            None => (None, false),
        };
        let order = lease.command.as_deref().and_then(Order::parse);
        let command = match (&order, desired.as_deref()) {
            (Some(order), Some(desired)) => order.for_revision(desired),
            _ => None,
        };
        if command == Some(Command::Resume) {
            // A resumed step bakes again from now, on what happens from now.
            self.window = None;
        }
        let seen = Seen {
            desired: desired.as_deref(),
            running: running.as_deref(),
            reduces_risk,
            nodes: &members,
            steps: &self.steps,
            command,
        };
        let (window, quiet, rules) = (&mut self.window, &self.quiet, &self.rules);
        let next = advance(current.as_ref(), &seen, || {
            let current = current
                .as_ref()
                .expect("advance asks a verdict of a rolling candidate only");
            let reverted = reports
                .iter()
                .find(|(_, r)| r.reverted.as_deref() == Some(current.revision.as_str()));
            if let Some((node, _)) = reverted {
                return Verdict::Abort(format!(
                    "{node} reverted it on its own after it kept trapping or timing out"
                ));
            }
            let opened = open(window, quiet, current, &samples, now);
            judge(
                rules,
                &Window {
                    candidate: &current.revision,
                    stable: &current.stable,
                    start: &opened.start,
                    counted_from: &opened.counted_from,
                    now: &samples,
                    baked: now.saturating_duration_since(opened.at),
                    baseline_before: opened.baseline_before,
                },
            )
        });
        self.remember(next.as_ref(), &samples, now);
        let changed = next != current || lease.command.is_some();
        let wrote = match (&next, changed) {
            (Some(rollout), true) => {
                let text = serde_json::to_string(rollout).expect("a rollout serializes");
                store.write_rollout(&text, lease.version.as_deref()).await?;
                true
            }
            _ => false,
        };
        Ok(Polled {
            rollout: next,
            wrote,
        })
    }

    /// Keep quiet snapshots while nothing rolls; forget the window once the
    /// rollout stops rolling or pausing.
    fn remember(&mut self, next: Option<&Rollout>, samples: &Samples, now: Instant) {
        let rolling = next.is_some_and(|r| matches!(r.state, State::Rolling | State::Paused));
        if rolling {
            return;
        }
        self.window = None;
        let due = self
            .quiet
            .1
            .as_ref()
            .is_none_or(|(at, _)| now.saturating_duration_since(*at) >= self.rules.bake);
        if due {
            self.quiet.0 = self.quiet.1.take();
            self.quiet.1 = Some((now, samples.clone()));
        }
    }
}

/// The window of `current`'s step: kept while it is the same step of the
/// same revision, else opened now. A node counts the candidate's runs from
/// its switch, the stable nodes from the window's start: so whenever a node
/// began running the candidate, both sides count again from now (a failure
/// both shared from just after a late switch, counted over the candidate's
/// shorter span, once blamed the candidate). The step's start, what a
/// restart or NotReady is judged against, and its bake stay; a node missing
/// from this poll keeps where it counted from, so only a real switch (at
/// most one a node a step: cuts only grow) counts again.
fn open<'w>(
    window: &'w mut Option<Opened>,
    quiet: &Quiet,
    current: &Rollout,
    samples: &Samples,
    now: Instant,
) -> &'w Opened {
    let same = |o: &Opened| o.revision == current.revision && o.step == current.step;
    match window {
        Some(opened) if same(opened) => {
            let runs_candidate = |sample: &Sample| sample.revision == current.revision;
            let switched = samples.iter().any(|(node, sample)| {
                runs_candidate(sample) && !opened.counted_from.get(node).is_some_and(runs_candidate)
            });
            if switched {
                opened.counted_from.extend(samples.clone());
            }
        }
        _ => {
            let baseline_before = match window.take() {
                Some(earlier) if earlier.revision == current.revision => earlier.baseline_before,
                _ => baseline(quiet, &current.stable, samples),
            };
            *window = Some(Opened {
                revision: current.revision.clone(),
                step: current.step,
                at: now,
                start: samples.clone(),
                counted_from: samples.clone(),
                baseline_before,
            });
        }
    }
    window.as_ref().expect("opened above")
}

/// The stable nodes' failure rate from the oldest quiet snapshot to now.
fn baseline(quiet: &Quiet, stable: &str, samples: &Samples) -> Option<f64> {
    let (_, start) = quiet.0.as_ref().or(quiet.1.as_ref())?;
    let window = Window {
        candidate: "",
        stable,
        start,
        counted_from: start,
        now: samples,
        baked: Default::default(),
        baseline_before: None,
    };
    let (_, stable) = sides(&window);
    (stable.runs > 0).then(|| stable.rate())
}

/// A Node as a rollout places it (none without a UID).
pub fn member(node: &NodeFacts) -> Option<Member> {
    (!node.uid.is_empty()).then(|| Member {
        uid: node.uid.clone(),
        group: format!("{}/{}", node.zone, node.pool),
    })
}

/// Each reporting node's sample, with its Node's readiness (`reports` come
/// from Nodes in `nodes` only).
fn samples(nodes: &BTreeMap<&str, &NodeFacts>, reports: &[(String, Report)]) -> Samples {
    reports
        .iter()
        .map(|(node, report)| {
            let sample = Sample {
                process: report.process.clone(),
                revision: report.revision.clone(),
                counters: report.counters,
                ready: nodes[node.as_str()].ready,
            };
            (node.clone(), sample)
        })
        .collect()
}

/// The revision more than half of `revisions` name.
fn majority<'a>(revisions: impl Iterator<Item = &'a str>) -> Option<String> {
    let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
    let mut total = 0;
    for revision in revisions {
        *votes.entry(revision).or_default() += 1;
        total += 1;
    }
    votes
        .into_iter()
        .find(|(_, n)| 2 * n > total)
        .map(|(revision, _)| revision.to_string())
}

/// Whether `desired` only reduces risk against the stable revision: every
/// node that runs it or asks for it says so, and at least one does (a node
/// judges by the stable revision it holds; see [`super::adoption`]).
fn reduces_risk(reports: &[(String, Report)], desired: &str) -> bool {
    let mut naming = reports
        .iter()
        .map(|(_, r)| r)
        .filter(|r| r.desired.as_deref().unwrap_or(&r.revision) == desired)
        .peekable();
    let reverted = reports
        .iter()
        .any(|(_, r)| r.reverted.as_deref() == Some(desired));
    naming.peek().is_some() && naming.all(|r| r.reduces_risk) && !reverted
}

#[cfg(test)]
mod tests;
