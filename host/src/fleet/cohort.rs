//! Which nodes run a candidate revision at each step of its rollout. A node's
//! place in line is a hash of its node UID and the revision, so it is the
//! same on every node and after every restart, and another revision draws
//! another line (the same unlucky node is not every revision's canary). The
//! leader takes the first nodes of the line, spread over the groups (zone
//! and pool) in proportion to their sizes, and publishes one cut per group:
//! a node runs the candidate iff its hash is at most its group's cut. A cut
//! only ever grows while a revision rolls out, so a node that adopted the
//! candidate keeps it until the rollout ends or aborts. Pure.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// A node's place in a revision's line: 64 bits of sha256(uid, revision).
pub fn place(uid: &str, revision: &str) -> u64 {
    // A UID has no newline: the text below names one (uid, revision) pair.
    let digest = Sha256::digest(format!("{uid}\n{revision}").as_bytes());
    u64::from_be_bytes(digest[..8].try_into().expect("sha256 has 32 bytes"))
}

/// How many nodes a step reaches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step {
    /// This many nodes (at least one group gets one).
    Nodes(u32),
    /// This share of the nodes, rounded up: never none.
    Share(f64),
}

impl Step {
    /// `"1"` (nodes) or `"2%"` (a share, above 0 and at most 100).
    pub fn parse(text: &str) -> Result<Step, String> {
        let expected = || {
            format!(
                "a step is a number of nodes (\"1\") or a share of them (\"2%\", above 0 and at most 100%), not {text:?}"
            )
        };
        match text.strip_suffix('%') {
            Some(percent) => match percent.trim().parse::<f64>() {
                Ok(p) if p > 0.0 && p <= 100.0 => Ok(Step::Share(p / 100.0)),
                _ => Err(expected()),
            },
            None => match text.trim().parse::<u32>() {
                Ok(n) if n > 0 => Ok(Step::Nodes(n)),
                _ => Err(expected()),
            },
        }
    }

    /// Of `total` nodes, how many the step reaches.
    pub fn reach(self, total: usize) -> usize {
        let wanted = match self {
            Step::Nodes(n) => n as usize,
            Step::Share(share) => (share * total as f64).ceil() as usize,
        };
        wanted.max(1).min(total)
    }

    /// Whether the step reaches every node, however many.
    pub fn is_everyone(self) -> bool {
        matches!(self, Step::Share(share) if share >= 1.0)
    }
}

/// The default steps: one node, then 2 %, 10 %, 25 %, 50 % and all.
pub fn default_steps() -> Vec<Step> {
    vec![
        Step::Nodes(1),
        Step::Share(0.02),
        Step::Share(0.10),
        Step::Share(0.25),
        Step::Share(0.50),
        Step::Share(1.0),
    ]
}

/// One node as the leader lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub uid: String,
    /// Its zone and pool ("zone/pool", either may be empty).
    pub group: String,
}

/// Each group's cut: the highest place in line that runs the candidate.
/// Groups with no node in the step are absent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Cuts(pub BTreeMap<String, Cut>);

/// A place in line, written as 16 hex digits: JSON readers that hold
/// numbers as doubles (kubectl's jsonpath, JavaScript) would round it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cut(pub u64);

impl Serialize for Cut {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format!("{:016x}", self.0))
    }
}

impl<'de> Deserialize<'de> for Cut {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Cut, D::Error> {
        let text = String::deserialize(deserializer)?;
        match text.len() == 16 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            true => u64::from_str_radix(&text, 16)
                .map(Cut)
                .map_err(serde::de::Error::custom),
            false => Err(serde::de::Error::custom("a cut is 16 hex digits")),
        }
    }
}

impl Cuts {
    /// Whether the node `uid` of `group` runs `revision` under these cuts.
    pub fn runs_candidate(&self, uid: &str, group: &str, revision: &str) -> bool {
        self.0
            .get(group)
            .is_some_and(|cut| place(uid, revision) <= cut.0)
    }

    /// The cuts that reach `step` of `nodes` for `revision`, never below
    /// `before` (nodes already running the candidate keep it).
    pub fn widen(before: &Cuts, nodes: &[Member], revision: &str, step: Step) -> Cuts {
        let mut groups: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        for node in nodes {
            groups
                .entry(&node.group)
                .or_default()
                .push(place(&node.uid, revision));
        }
        // Each node's quantile in its group ((rank + 1) / size): taking the
        // smallest first spreads a step over the groups in proportion to
        // their sizes, and a bigger step takes a superset of a smaller one.
        let mut line: Vec<(f64, u64, &str)> = Vec::with_capacity(nodes.len());
        for (group, places) in &mut groups {
            places.sort_unstable();
            let size = places.len() as f64;
            for (rank, place) in places.iter().enumerate() {
                line.push(((rank + 1) as f64 / size, *place, group));
            }
        }
        line.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut cuts = before.clone();
        for (_, place, group) in line.into_iter().take(step.reach(nodes.len())) {
            let cut = cuts.0.entry(group.to_string()).or_insert(Cut(place));
            cut.0 = cut.0.max(place);
        }
        cuts
    }

    /// How many of `nodes` run the candidate under these cuts.
    pub fn reached(&self, nodes: &[Member], revision: &str) -> usize {
        nodes
            .iter()
            .filter(|n| self.runs_candidate(&n.uid, &n.group, revision))
            .count()
    }
}

#[cfg(test)]
mod tests;
