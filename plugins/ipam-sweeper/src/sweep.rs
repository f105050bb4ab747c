//! The decisions of one pass, with no I/O: who owns each allocation, which
//! orphans have waited out their grace, which pod UIDs are ambiguous.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use tend_sdk::{PodSandbox, SandboxState};

/// One host-local allocation: the file `<networks-dir>/<network>/<ip>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Allocation {
    pub network: String,
    pub ip: String,
    pub path: String,
    /// The sandbox id on its first line; empty when that line is not an id.
    pub owner: String,
}

impl Allocation {
    /// Its key in [`Orphans`]: "<network>/<ip>".
    pub fn key(&self) -> String {
        format!("{}/{}", self.network, self.ip)
    }
}

/// The owner host-local recorded in an allocation file: its first line
/// (host-local writes the id, then the interface name), or "" when that is
/// not a container id, so garbage never matches a sandbox and is never kept
/// at length in `state`.
pub(crate) fn owner_of(contents: &[u8]) -> String {
    let first = contents.split(|&b| b == b'\n').next().unwrap_or_default();
    let id = String::from_utf8_lossy(first).trim().to_string();
    let is_id = (1..=128).contains(&id.len())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if is_id { id } else { String::new() }
}

/// When an allocation was first seen orphaned, and by which owner: the timer
/// restarts when the file names another owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Orphan {
    pub owner: String,
    pub since_ms: u64,
}

/// Every allocation orphaned now, by [`Allocation::key`]: one value in
/// `state`, rebuilt each pass, so entries of files that are gone or owned
/// again drop out.
pub(crate) type Orphans = BTreeMap<String, Orphan>;

/// Why no READY sandbox owns an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Why {
    /// No sandbox with that id exists.
    Gone,
    NotReady,
    /// The file names no readable owner.
    NoOwner,
}

/// An orphaned allocation and how long its grace still runs (0: it is due).
#[derive(Debug)]
pub(crate) struct Orphaned<'a> {
    pub allocation: &'a Allocation,
    pub why: Why,
    pub left_ms: u64,
}

impl Orphaned<'_> {
    /// "10.85.0.7 (cbr0, sandbox 4f1c2a9b8d3e gone)".
    pub fn describe(&self) -> String {
        let owner = short(&self.allocation.owner);
        let why = match self.why {
            Why::Gone => format!("sandbox {owner} gone"),
            Why::NotReady => format!("sandbox {owner} not ready"),
            Why::NoOwner => "no sandbox id in the file".to_string(),
        };
        format!(
            "{} ({}, {why})",
            self.allocation.ip, self.allocation.network
        )
    }
}

/// The first 12 characters of an id, as crictl shows them.
pub(crate) fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// Judge every allocation against the sandboxes listed now: those a READY
/// sandbox owns are kept; the others are orphans, due once they have been
/// orphaned by the same owner for `grace_ms`. Returns the orphans and the
/// bookkeeping to store.
pub(crate) fn judge<'a>(
    allocations: &'a [Allocation],
    sandboxes: &[PodSandbox],
    previous: &Orphans,
    grace_ms: u64,
    now_ms: u64,
) -> (Vec<Orphaned<'a>>, Orphans) {
    let states: HashMap<&str, SandboxState> =
        sandboxes.iter().map(|s| (s.id.as_str(), s.state)).collect();
    let mut orphaned = Vec::new();
    let mut orphans = Orphans::new();
    for allocation in allocations {
        let why = if allocation.owner.is_empty() {
            Why::NoOwner
        } else {
            match states.get(allocation.owner.as_str()) {
                Some(SandboxState::Ready) => continue,
                Some(SandboxState::NotReady) => Why::NotReady,
                None => Why::Gone,
            }
        };
        let key = allocation.key();
        let since_ms = match previous.get(&key) {
            Some(seen) if seen.owner == allocation.owner => seen.since_ms,
            _ => now_ms,
        };
        let left_ms = grace_ms.saturating_sub(now_ms.saturating_sub(since_ms));
        orphans.insert(
            key,
            Orphan {
                owner: allocation.owner.clone(),
                since_ms,
            },
        );
        orphaned.push(Orphaned {
            allocation,
            why,
            left_ms,
        });
    }
    (orphaned, orphans)
}

/// Pod UIDs shared by more than one READY sandbox, with their sandbox ids:
/// which sandbox owns which IP is then ambiguous, so the pass must not act.
/// Sandboxes without a UID are not pods and are not compared.
pub(crate) fn shared_uids(sandboxes: &[PodSandbox]) -> BTreeMap<&str, Vec<&str>> {
    let mut by_uid: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for sandbox in sandboxes {
        if sandbox.state == SandboxState::Ready && !sandbox.uid.is_empty() {
            by_uid.entry(&sandbox.uid).or_default().push(&sandbox.id);
        }
    }
    by_uid.retain(|_, ids| ids.len() > 1);
    by_uid
}

/// NOTREADY sandboxes created more than `max_age_ms` ago, with their age.
pub(crate) fn stale_not_ready(
    sandboxes: &[PodSandbox],
    max_age_ms: u64,
    now_ms: u64,
) -> Vec<(&PodSandbox, u64)> {
    sandboxes
        .iter()
        .filter(|s| s.state == SandboxState::NotReady)
        .map(|s| {
            let created_ms = u64::try_from(s.created_at_ns / 1_000_000).unwrap_or(0);
            (s, now_ms.saturating_sub(created_ms))
        })
        .filter(|(_, age_ms)| *age_ms > max_age_ms)
        .collect()
}
