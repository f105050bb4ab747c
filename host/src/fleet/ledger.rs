//! One disruption class's ticket ledger and the pure rule that grants a
//! ticket: how many nodes may be disrupted at once (a share of the eligible
//! nodes, per zone as well, never under a floor), who is disrupted already
//! (ticket holders, NotReady and cordoned nodes, nodes another remediator
//! holds), how fast tickets are granted, and whether the last holder has
//! settled. No I/O and no clock: the caller passes what it read and what it
//! observed, so every rule is tested with plain values.
//!
//! The ledger lives on a Lease only Tend writes and every write is a
//! compare-and-swap on the Lease's resourceVersion, so each version the API
//! server stores was decided on the version before it: the share holds on
//! every version, however many nodes race.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tend_rules::reason::Reason;

/// At most this many grants are remembered for the rate: a ledger stays far
/// below a Lease's size limit, and a full one refuses rather than forgets.
pub const MAX_GRANTS: usize = 512;
/// How many disrupted nodes a refusal names.
const NAMED: usize = 5;

/// The ledger as the Lease's annotation holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ledger {
    /// The nodes holding a ticket now.
    #[serde(default)]
    pub holders: Vec<Holder>,
    /// Grants still counted by the rate, oldest first: ticket ids. They
    /// carry no time: each reader counts a grant from when it first saw it
    /// (its own monotonic clock), so no clock needs to agree with another.
    #[serde(default)]
    pub grants: Vec<String>,
    /// The node that released a ticket last: the next ticket waits until it
    /// has settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Holder {
    pub node: String,
    /// Unique per grant, so a grant is counted once by the rate.
    pub ticket: String,
}

/// `[host.fleet.classes.<name>]`, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassRule {
    pub name: String,
    /// "capability.operation": the mutations that need a ticket of this class.
    pub operations: Vec<String>,
    /// The share of eligible nodes that may be disrupted at once (0..=1).
    pub share: f64,
    /// Never fewer than this many at once, whatever the share (small pools).
    pub min: u32,
    /// At most `max` tickets granted fleet-wide per `per`.
    pub rate: Option<(u32, Duration)>,
    /// The settle check: a holder releases once its node has been Ready this long ...
    pub ready_for: Duration,
    /// ... with none of these NodeConditions True; and no ticket is granted
    /// while the last holder's node is NotReady or has one of them.
    pub conditions: Vec<String>,
}

impl ClassRule {
    pub fn covers(&self, operation: &str) -> bool {
        self.operations.iter().any(|o| o == operation)
    }
}

/// The labels naming a node's pool, by provider (Karpenter, EKS, GKE, AKS),
/// and a neutral one for the rest: a rollout spreads over pools as over zones.
pub const POOL_LABELS: [&str; 5] = [
    "karpenter.sh/nodepool",
    "eks.amazonaws.com/nodegroup",
    "cloud.google.com/gke-nodepool",
    "kubernetes.azure.com/agentpool",
    "node.kubernetes.io/pool",
];

/// What a node looks like to the rules, read from its Node object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFacts {
    pub name: String,
    /// `metadata.uid`: a node's place in a rollout's line.
    pub uid: String,
    /// Its node pool, from the first of [`POOL_LABELS`] it carries.
    pub pool: String,
    /// `topology.kubernetes.io/zone` ("" when unlabelled: one zone of its own).
    pub zone: String,
    pub ready: bool,
    /// `spec.unschedulable`.
    pub cordoned: bool,
    /// The types of the NodeConditions that are True.
    pub conditions: BTreeSet<String>,
}

/// Everything but the ledger that the decision reads, fresh.
#[derive(Debug, Clone, Default)]
pub struct View {
    pub nodes: Vec<NodeFacts>,
    /// Nodes another remediator holds (kured's lock, Medik8s), with who.
    pub others: BTreeMap<String, String>,
    /// Holders whose tend stopped renewing its node Lease for the liveness window.
    pub dead: BTreeSet<String>,
    /// Grants of the ledger this host has seen for less than the rate's period.
    pub recent_grants: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// `me` holds a ticket already.
    Held,
    /// Write this ledger to take the ticket.
    Grant(Ledger),
    /// Why not, saying what to wait for.
    Refuse(String),
}

/// How many nodes of `eligible` may be disrupted at once.
pub fn allowed(rule: &ClassRule, eligible: usize) -> usize {
    ((rule.share * eligible as f64).ceil() as usize).max(rule.min as usize)
}

/// Why a node counts as disrupted, if it does.
fn disrupted_why(
    node: &str,
    facts: Option<&NodeFacts>,
    holders: &BTreeSet<&str>,
    others: &BTreeMap<String, String>,
) -> Option<String> {
    if holders.contains(node) {
        return Some("holds a ticket".into());
    }
    if let Some(by) = others.get(node) {
        return Some(format!("held by {by}"));
    }
    match facts {
        Some(f) if !f.ready => Some("NotReady".into()),
        Some(f) if f.cordoned => Some("cordoned".into()),
        _ => None,
    }
}

/// Drop the holders the view found dead. A pruned holder becomes the last
/// one, so the next ticket still waits for its node to settle (a long
/// reboot outlasts the liveness window).
pub fn prune(ledger: &Ledger, dead: &BTreeSet<String>) -> Ledger {
    let mut pruned = ledger.clone();
    if let Some(gone) = ledger.holders.iter().find(|h| dead.contains(&h.node)) {
        pruned.last = Some(gone.node.clone());
    }
    pruned.holders.retain(|h| !dead.contains(&h.node));
    pruned
}

/// Forget grants nobody needs for the rate any more: those this host has
/// seen for a whole period (`stale`).
pub fn forget(ledger: &mut Ledger, stale: &BTreeSet<String>) {
    ledger.grants.retain(|g| !stale.contains(g));
}

/// The disrupted nodes among `nodes` (all of them, or one zone's), but `me`:
/// a node asking for a ticket may already be NotReady, which is what it
/// means to repair; its own state never blocks it.
fn disrupted<'a>(
    nodes: impl Iterator<Item = &'a str>,
    view: &View,
    holders: &BTreeSet<&str>,
    me: &str,
) -> Vec<(String, String)> {
    let facts: BTreeMap<&str, &NodeFacts> =
        view.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    nodes
        .filter(|n| *n != me)
        .filter_map(|n| {
            disrupted_why(n, facts.get(n).copied(), holders, &view.others)
                .map(|why| (n.to_string(), why))
        })
        .collect()
}

fn named(disrupted: &[(String, String)]) -> String {
    // Names come from peers (the ledger, kured's annotation): bounded, inert.
    let mut names: Vec<String> = disrupted
        .iter()
        .take(NAMED)
        .map(|(n, why)| {
            format!(
                "{} ({why})",
                crate::text::cut(crate::text::inert(n).into_owned(), 64)
            )
        })
        .collect();
    if disrupted.len() > NAMED {
        names.push(format!("{} more", disrupted.len() - NAMED));
    }
    names.join(", ")
}

/// Decide whether `me` gets a ticket of `rule`'s class, on `ledger` as read
/// and `view` as read just before; `ticket` names the grant if it is made.
pub fn decide(rule: &ClassRule, ledger: &Ledger, view: &View, me: &str, ticket: &str) -> Decision {
    let class = &rule.name;
    let ledger = prune(ledger, &view.dead);
    if ledger.holders.iter().any(|h| h.node == me) {
        return Decision::Held;
    }
    let Some(mine) = view.nodes.iter().find(|n| n.name == me) else {
        return Decision::Refuse(Reason::Budget.tag(&format!(
            "fleet budget {class}: this node ({me}) is not among the cluster's Nodes, so its share cannot be counted"
        )));
    };
    let holders: BTreeSet<&str> = ledger.holders.iter().map(|h| h.node.as_str()).collect();
    // Holders whose Node is gone still count: they may be mid-disruption.
    // Another remediator's claims count only for Nodes that exist: made-up
    // names in its objects must not block every ticket.
    let every: BTreeSet<&str> = view
        .nodes
        .iter()
        .map(|n| n.name.as_str())
        .chain(holders.iter().copied())
        .collect();
    let fleet_allowed = allowed(rule, view.nodes.len());
    let down = disrupted(every.iter().copied(), view, &holders, me);
    if down.len() >= fleet_allowed {
        return Decision::Refuse(Reason::Budget.tag(&format!(
            "fleet budget {class}: {} of {} nodes may be disrupted at once and {} are: {}; a ticket frees when a holder settles",
            fleet_allowed,
            view.nodes.len(),
            down.len(),
            named(&down)
        )));
    }
    let zone: Vec<&str> = view
        .nodes
        .iter()
        .filter(|n| n.zone == mine.zone)
        .map(|n| n.name.as_str())
        .collect();
    let zone_allowed = allowed(rule, zone.len());
    let zone_down = disrupted(zone.iter().copied(), view, &holders, me);
    if zone_down.len() >= zone_allowed {
        let label = match mine.zone.as_str() {
            "" => "without a zone label".to_string(),
            z => format!("in zone {z}"),
        };
        return Decision::Refuse(Reason::Budget.tag(&format!(
            "fleet budget {class}: {zone_allowed} of the {} nodes {label} may be disrupted at once and {} are: {}",
            zone.len(),
            zone_down.len(),
            named(&zone_down)
        )));
    }
    if let Some((max, per)) = rule.rate
        && view.recent_grants >= max as usize
    {
        return Decision::Refuse(Reason::Budget.tag(&format!(
            "fleet budget {class}: its rate allows {max} tickets per {} and {} were granted within it",
            humantime::format_duration(per),
            view.recent_grants
        )));
    }
    if let Some(last) = ledger.last.as_deref().filter(|l| *l != me) {
        let facts = view.nodes.iter().find(|n| n.name == last);
        let unsettled = match facts {
            None => None,
            Some(f) if !f.ready => Some("is NotReady".to_string()),
            Some(f) => rule
                .conditions
                .iter()
                .find(|c| f.conditions.contains(*c))
                .map(|c| format!("has {c}")),
        };
        if let Some(why) = unsettled {
            return Decision::Refuse(Reason::Health.tag(&format!(
                "fleet budget {class}: the last node disrupted, {last}, {why}; the next ticket waits until it settles"
            )));
        }
    }
    if ledger.grants.len() >= MAX_GRANTS {
        return Decision::Refuse(Reason::Budget.tag(&format!(
            "fleet budget {class}: the ledger remembers {MAX_GRANTS} recent grants already; wait for the rate's period to pass"
        )));
    }
    let mut granted = ledger;
    granted.holders.push(Holder {
        node: me.to_string(),
        ticket: ticket.to_string(),
    });
    granted.grants.push(ticket.to_string());
    Decision::Grant(granted)
}

/// `me` gives its ticket back: the ledger without it, `me` the last holder.
/// None when `me` holds none.
pub fn release(ledger: &Ledger, me: &str) -> Option<Ledger> {
    if !ledger.holders.iter().any(|h| h.node == me) {
        return None;
    }
    let mut released = ledger.clone();
    released.holders.retain(|h| h.node != me);
    released.last = Some(me.to_string());
    Some(released)
}

/// Whether `node` has settled: Ready, with none of the class's conditions.
pub fn settled(rule: &ClassRule, node: &NodeFacts) -> bool {
    node.ready && !rule.conditions.iter().any(|c| node.conditions.contains(c))
}

#[cfg(test)]
mod tests;
