//! Revisions: what a node runs, named by its content. A revision is the
//! digest of tend's version, the config file's text and every enabled
//! plugin's component, so two nodes with one revision run the same plugins
//! with the same settings on the same tend release, and a change of any (a
//! new ConfigMap, a plugin file, a tag that resolves to another digest, a
//! new image) is a new revision. Each node publishes its revision and what
//! its plugins did under it ([`Counters`]) on its node Lease, new counts at
//! most every `publish-every`; `tend rollout status` adds them up per
//! revision ([`tally`]). Pure, apart from [`Running`]'s lock.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The annotation on a node Lease holding its [`Report`].
pub const REPORT_ANNOTATION: &str = "tend.dev/revision";
/// A report longer than this is not read (a peer's text: bounded).
pub const MAX_REPORT_BYTES: usize = 2048;
/// A revision's name: "r-" and 16 hex digits (64 bits of sha256).
const HEX_DIGITS: usize = 16;

/// The revision of a config file (`config`: its text's digest) and the
/// component digests of its enabled `plugins` (name -> "sha256:…"; a plugin
/// with no component is "unloaded": a node without it runs something
/// else), on this tend release.
pub fn revision(config: &str, plugins: &BTreeMap<String, String>) -> String {
    let mut hasher = Sha256::new();
    hasher.update(format!("tend {}\n", env!("CARGO_PKG_VERSION")));
    hasher.update(Sha256::digest(config.as_bytes()));
    // Plugin names are identifiers and digests hex: no newline or space in
    // either, so the text below names one set of plugins only.
    for (name, digest) in plugins {
        hasher.update(format!("\nplugin {name} {digest}"));
    }
    let hex = hex::encode(hasher.finalize());
    format!("r-{}", &hex[..HEX_DIGITS])
}

/// Whether `text` is a revision's name as [`revision`] writes it.
pub fn is_revision(text: &str) -> bool {
    text.strip_prefix("r-").is_some_and(|hex| {
        hex.len() == HEX_DIGITS
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// What the plugins of one revision did on one node since its tend started
/// running it. Fields a newer tend adds are ignored (a fleet mid-upgrade
/// runs both); those known must be counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Counters {
    pub runs: u64,
    /// Failed with the plugin's or the host's error.
    pub errors: u64,
    /// Trapped (a panic, an out-of-bounds access) or ran out of memory.
    pub traps: u64,
    /// Ran past the deadline.
    pub timeouts: u64,
    /// Mutations carried out (not planned, not refused).
    pub mutations: u64,
    /// Capability calls answered `denied`: by a grant, or by the peer (a
    /// 403 of the API server, a file's permissions, systemd's policy), and
    /// in a dry run every HTTP mutation, which a plan never sends.
    pub denials: u64,
    /// Mutations a budget (the host's or the fleet's) refused; a fleet that
    /// cannot reach the API server fails them `unavailable`, not counted here.
    pub refusals: u64,
}

/// How one reconcile ended, as [`Counters`] count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Ok,
    Error,
    Trap,
    Timeout,
}

impl Counters {
    /// Count one reconcile: how it `ended`, the mutations it carried out,
    /// the calls a grant denied and the mutations a budget refused.
    pub fn count(&mut self, ended: Ended, mutations: u64, denials: u64, refusals: u64) {
        let one = |ending| u64::from(ended == ending);
        self.add(&Counters {
            runs: 1,
            errors: one(Ended::Error),
            traps: one(Ended::Trap),
            timeouts: one(Ended::Timeout),
            mutations,
            denials,
            refusals,
        });
    }

    /// Runs that failed, whatever the cause (a peer's counts: saturating).
    pub fn failures(&self) -> u64 {
        self.errors
            .saturating_add(self.traps)
            .saturating_add(self.timeouts)
    }

    fn add(&mut self, other: &Counters) {
        *self = self.zip(other, u64::saturating_add);
    }

    /// What was counted after `earlier`: never below zero, whatever a
    /// report said before.
    pub fn since(&self, earlier: &Counters) -> Counters {
        self.zip(earlier, u64::saturating_sub)
    }

    fn zip(&self, other: &Counters, f: fn(u64, u64) -> u64) -> Counters {
        Counters {
            runs: f(self.runs, other.runs),
            errors: f(self.errors, other.errors),
            traps: f(self.traps, other.traps),
            timeouts: f(self.timeouts, other.timeouts),
            mutations: f(self.mutations, other.mutations),
            denials: f(self.denials, other.denials),
            refusals: f(self.refusals, other.refusals),
        }
    }
}

/// What a node publishes on its Lease: the revision it runs, a nonce of
/// the tend process (a new one after every start: a restart shows), and
/// its counters under that revision. Unknown fields are ignored, as in
/// [`Counters`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub revision: String,
    pub process: String,
    pub counters: Counters,
    /// The revision this node's config asks for, while it runs another (a
    /// change waiting for its step of a rollout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired: Option<String>,
    /// The revision it asks for (or runs, when it asks for nothing else)
    /// only reduces risk against the stable one: see [`super::adoption`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reduces_risk: bool,
    /// A candidate this node reverted on its own after it kept failing,
    /// until the leader has failed it: the leader aborts on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverted: Option<String>,
}

impl Report {
    /// A peer's report text, read only when short and well formed.
    pub fn parse(text: &str) -> Option<Report> {
        if text.len() > MAX_REPORT_BYTES {
            return None;
        }
        let report: Report = serde_json::from_str(text).ok()?;
        (is_revision(&report.revision)
            && report.desired.as_deref().is_none_or(is_revision)
            && report.reverted.as_deref().is_none_or(is_revision)
            && report.process.len() <= 32
            && report.process.bytes().all(|b| b.is_ascii_hexdigit()))
        .then_some(report)
    }
}

/// What a renewal does with the node Lease's report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publish<'a> {
    /// Whatever is there stays: a one-shot run's renewal (the daemon's
    /// report is the node's).
    Leave,
    /// Set or replace it with this text.
    Set(&'a str),
    /// Remove it: this process runs no revision yet.
    Remove,
}

/// This tend's revision and counters: set by the daemon when its plugins
/// settle, counted by the runner, read by the fleet member to publish.
pub struct Running {
    process: String,
    now: Mutex<Option<(String, Counters)>>,
    staged: Mutex<Staged>,
}

/// What a node under staged rollouts adds to its report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Staged {
    pub desired: Option<String>,
    pub reduces_risk: bool,
    pub reverted: Option<String>,
}

impl Default for Running {
    fn default() -> Self {
        Running {
            process: format!("{:016x}", fastrand::u64(..)),
            now: Mutex::new(None),
            staged: Mutex::default(),
        }
    }
}

impl Running {
    /// This node runs `revision` now (None while plugins are still loading);
    /// counters start again with a new revision.
    pub fn set(&self, revision: Option<String>) {
        let mut now = self.now.lock().unwrap();
        if now.as_ref().map(|(r, _)| r) != revision.as_ref() {
            *now = revision.map(|r| (r, Counters::default()));
        }
    }

    /// Count one reconcile that started under `revision` (what
    /// [`Running::revision`] said when it started), if that still runs: a
    /// run of the old revision ending after the new one came is not the new
    /// one's to answer for.
    pub fn count(
        &self,
        revision: Option<&str>,
        ended: Ended,
        mutations: u64,
        denials: u64,
        refusals: u64,
    ) {
        let mut now = self.now.lock().unwrap();
        if let Some((running, counters)) = now.as_mut()
            && Some(running.as_str()) == revision
        {
            counters.count(ended, mutations, denials, refusals);
        }
    }

    pub fn revision(&self) -> Option<String> {
        self.now.lock().unwrap().as_ref().map(|(r, _)| r.clone())
    }

    /// The counters of the revision running now.
    pub fn counters(&self) -> Option<Counters> {
        self.now.lock().unwrap().as_ref().map(|(_, c)| *c)
    }

    /// What staging says of this node from now on.
    pub fn stage(&self, staged: Staged) {
        *self.staged.lock().unwrap() = staged;
    }

    /// What to publish now.
    pub fn report(&self) -> Option<Report> {
        let now = self.now.lock().unwrap();
        let staged = self.staged.lock().unwrap().clone();
        now.as_ref().map(|(revision, counters)| Report {
            revision: revision.clone(),
            process: self.process.clone(),
            counters: *counters,
            desired: staged.desired.filter(|d| d != revision),
            reduces_risk: staged.reduces_risk,
            reverted: staged.reverted,
        })
    }
}

/// The fleet per revision, from every node Lease's report.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Tally {
    pub revisions: BTreeMap<String, RevisionTally>,
    /// Node Leases with no report (an older tend, plugins still loading).
    pub silent: u64,
    /// Node Leases whose report could not be read (too long, malformed).
    pub unreadable: u64,
    /// Node Leases not renewed within their duration (a tend stopped, a
    /// node gone): not added up, whatever their report says.
    pub stale: u64,
}

/// One node Lease as the tally reads it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Published {
    /// The node whose own Lease it is.
    pub node: String,
    pub report: Option<String>,
    /// Renewed within its duration, by the reader's clock.
    pub fresh: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RevisionTally {
    pub nodes: u64,
    pub counters: Counters,
}

/// Add up the reports of the node Leases that are fresh.
pub fn tally<'a>(leases: impl IntoIterator<Item = &'a Published>) -> Tally {
    let mut tally = Tally::default();
    for lease in leases {
        if !lease.fresh {
            tally.stale += 1;
            continue;
        }
        let Some(text) = lease.report.as_deref() else {
            tally.silent += 1;
            continue;
        };
        let Some(report) = Report::parse(text) else {
            tally.unreadable += 1;
            continue;
        };
        let entry = tally.revisions.entry(report.revision).or_default();
        entry.nodes += 1;
        entry.counters.add(&report.counters);
    }
    tally
}

#[cfg(test)]
mod tests;
