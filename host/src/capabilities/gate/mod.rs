//! The mutation gate: the one code path every mutating capability call takes,
//! in this order: grant check (by the adapter, before it builds the intent) ->
//! dry run (record the plan, perform nothing) -> host-wide budgets -> journal
//! intent, fsynced, while the plugin's state writes so far are made durable
//! (both awaited) -> perform -> journal result, the reconcile's mutation list.
//!
//! An adapter makes a mutation with one call, [`Gate::mutate`]: the gate
//! admits the intent, answers a dry run with the adapter's planned answer,
//! and otherwise hands a [`Permit`] to the backend's mutating method and
//! journals what it returns. Only the gate makes a permit and only the gate
//! finishes one, so a capability can neither mutate around the gate nor
//! journal a result of its own. A permit dropped unfinished (the reconcile
//! hit its deadline, the guest trapped) journals the mutation as interrupted;
//! after a crash the journal shows the intent without a result, which
//! `tend journal` reads as interrupted too.

mod budgets;
mod commit;
pub mod diff;
mod ledger;

pub use budgets::{BudgetStatus, Budgets, FleetBudget};
pub use commit::Commit;
pub use ledger::{BudgetRule, Ledger, target_hash};

use super::error::CapError;
use super::limits::{Limits, over_limit, raise};
pub use crate::journal::INTERRUPTED;
use crate::journal::{Entry, Journal, Phase};
use crate::text::inert;
use serde::Serialize;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A mutation a plugin asked for, as the report and the journal show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mutation {
    /// "files", "http", ...
    pub capability: &'static str,
    /// "write", "remove", "send", ...
    pub operation: &'static str,
    /// The path, URL, unit, ...
    pub target: String,
    /// One line for humans ("new file, 120 bytes, mode 644").
    pub detail: String,
    /// In a dry run, what would change (a bounded unified diff for files).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// True in a dry run: planned, not performed.
    pub dry_run: bool,
    /// "ok", "interrupted ...", or the error (a budget refusal included).
    pub result: String,
}

impl Mutation {
    /// "did files.write /path (120 bytes)", "would ...", "refused ...: budget-exhausted: ...".
    pub fn describe(&self) -> String {
        describe(
            self.dry_run,
            self.capability,
            self.operation,
            &self.target,
            &self.detail,
            &self.result,
        )
    }
}

/// One mutation in words, for reports and `tend journal`.
pub fn describe(
    dry_run: bool,
    capability: &str,
    operation: &str,
    target: &str,
    detail: &str,
    result: &str,
) -> String {
    let verb = if result.starts_with("budget-exhausted") {
        "refused"
    } else if dry_run {
        "would"
    } else {
        "did"
    };
    let detail = if detail.is_empty() {
        String::new()
    } else {
        format!(" ({})", inert(detail))
    };
    let result = if result == "ok" {
        String::new()
    } else {
        format!(": {}", inert(result))
    };
    let target = inert(target);
    format!("{verb} {capability}.{operation} {target}{detail}{result}")
}

/// What a mutating call is about to do; built by the adapter after its grant check.
#[derive(Debug, Clone)]
pub struct Intent {
    pub capability: &'static str,
    pub operation: &'static str,
    pub target: String,
    pub detail: String,
    pub diff: Option<String>,
}

/// Who is calling: the facts every journal entry carries.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    pub plugin: String,
    /// "sha256:..." of the component.
    pub digest: String,
    pub triggers: Vec<String>,
    pub dry_run: bool,
    /// A cluster-scope plugin: it acts only while this host leads, and its
    /// spends reach the Lease before it acts.
    pub cluster: bool,
}

/// What one plan (of one plugin or several) has planned so far, so budgets
/// refuse in a plan what they would refuse for real.
pub type Planned = Arc<Mutex<Vec<(String, String)>>>;

/// The answer of a performed mutation as the journal records it: "ok",
/// unless the answer says more than success (a job that ended otherwise, the
/// status an endpoint answered).
pub trait Performed {
    fn journal_result(&self) -> String {
        "ok".to_string()
    }
}

/// Removed or not, changed or not: success says it all.
impl Performed for bool {}
impl Performed for () {}

/// The journal's result column: the answer's, or the error.
fn journal_result<T: Performed>(result: &Result<T, CapError>) -> String {
    match result {
        Ok(answer) => answer.journal_result(),
        Err(e) => e.to_string(),
    }
}

/// How much of a planned call's own refusal a plan repeats.
const MAX_PLANNED_REFUSAL: usize = 1024;

/// What the gate decided.
enum Admission {
    /// A dry run: recorded into the plan; answer as the real call would have.
    Planned,
    /// Perform it under this permit.
    Go(Permit),
}

#[derive(Clone)]
pub struct Gate(Arc<Inner>);

struct Inner {
    caller: Caller,
    limits: Limits,
    /// Mutations recorded (planned, admitted, refused) and journal bytes
    /// written in this reconcile: both bounded by the plugin's limits.
    recorded: AtomicU32,
    journal_bytes: AtomicU64,
    /// Admitted mutations not finished yet, and a wake-up when one finishes.
    in_flight: AtomicUsize,
    finished: tokio::sync::Notify,
    /// Unique per reconcile: the journal pairs intents with results by it.
    run_id: String,
    seq: AtomicU32,
    journal: Option<Arc<Journal>>,
    budgets: Arc<Budgets>,
    mutations: Mutex<Vec<Mutation>>,
    /// (operation, target) a dry run planned: budgets count them without
    /// spending. Shared by every plugin of one `tend plan`.
    planned: Planned,
    /// Results appended without fsync since the last [`Gate::sync`].
    unsynced: AtomicBool,
    /// State writes the plugin was answered for, still being made durable
    /// (held while one is awaited, so concurrent effects all wait for it and a
    /// cancelled waiter leaves it listed), and the first of them that could
    /// not be: every effect waits for them.
    pending: tokio::sync::Mutex<Vec<Commit>>,
    lost: Mutex<Option<CapError>>,
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

impl Gate {
    /// `journal`: None only where nothing may mutate (describe, unit tests).
    pub fn new(
        caller: Caller,
        limits: Limits,
        journal: Option<Arc<Journal>>,
        budgets: Arc<Budgets>,
        planned: Option<Planned>,
    ) -> Gate {
        let run_id = format!("{:x}-{:08x}", now_ms(), fastrand::u32(..));
        Gate(Arc::new(Inner {
            caller,
            limits,
            recorded: AtomicU32::new(0),
            journal_bytes: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            finished: tokio::sync::Notify::new(),
            run_id,
            seq: AtomicU32::new(0),
            journal,
            budgets,
            mutations: Mutex::default(),
            planned: planned.unwrap_or_default(),
            unsynced: AtomicBool::new(false),
            pending: tokio::sync::Mutex::default(),
            lost: Mutex::default(),
        }))
    }

    pub fn plugin(&self) -> &str {
        &self.0.caller.plugin
    }

    pub fn dry_run(&self) -> bool {
        self.0.caller.dry_run
    }

    /// Refuse a mutation over the reconcile's own bounds: how many it may
    /// record, and how much journal it may write (room for intent and result).
    fn within_limits(&self, intent: &Intent) -> Result<(), CapError> {
        let inner = &self.0;
        let plugin = &inner.caller.plugin;
        if inner.recorded.fetch_add(1, Ordering::Relaxed) >= inner.limits.mutations {
            return Err(over_limit(&format!(
                "{} {}: this reconcile already made {} mutations; {}",
                intent.operation,
                inert(&intent.target),
                inner.limits.mutations,
                raise(plugin, "mutations", inner.limits.mutations)
            )));
        }
        let line =
            Journal::line(&self.entry(intent, "", Phase::Intent, String::new())).len() as u64;
        let cap = inner.limits.journal_per_reconcile;
        if inner.journal_bytes.fetch_add(2 * line, Ordering::Relaxed) + 2 * line > cap.0 {
            return Err(over_limit(&format!(
                "{} {}: this reconcile's journal entries would pass {cap}; {}",
                intent.operation,
                inert(&intent.target),
                raise(plugin, "journal-per-reconcile", cap)
            )));
        }
        Ok(())
    }

    /// Make one mutation: admit `intent` (limits, dry run, budgets, the
    /// journal's intent record), then answer a dry run with `planned`, the
    /// answer the adapter gives for a mutation it only plans, or run `perform`
    /// with the permit and journal the result it returns.
    pub async fn mutate<T, Perform, Performing>(
        &self,
        intent: Intent,
        planned: Result<T, CapError>,
        perform: Perform,
    ) -> Result<T, CapError>
    where
        T: Performed,
        Perform: FnOnce(Permit) -> Performing,
        Performing: Future<Output = Result<T, CapError>>,
    {
        // A plan shows what the real call would answer (a server's dry run
        // refusing it), once the gate itself admits it.
        let would = planned
            .as_ref()
            .err()
            .map(|e| crate::text::cut(e.to_string(), MAX_PLANNED_REFUSAL));
        let permit = match self.admit(intent, would).await? {
            Admission::Planned => return planned,
            Admission::Go(permit) => permit,
        };
        // Held here while the backend holds its own: whichever finishes first
        // journals (a blocking write finishes itself, see [`Permit::travels_with`]).
        let admitted = permit.0.clone();
        let result = perform(permit).await;
        admitted.close(journal_result(&result));
        result
    }

    /// Pass `intent` through dry run, budgets and the journal's intent record.
    async fn admit(&self, intent: Intent, would: Option<String>) -> Result<Admission, CapError> {
        self.within_limits(&intent)?;
        let operation = format!("{}.{}", intent.capability, intent.operation);
        let now = now_ms();
        let inner = &self.0;
        if inner.caller.dry_run {
            let planned = inner.planned.lock().unwrap().clone();
            let check = inner
                .budgets
                .check(&operation, &intent.target, now, &planned)
                .await;
            let check = match (check, inner.budgets.fleet()) {
                (Ok(()), Some(fleet)) if !inner.caller.cluster => {
                    fleet.admit(&operation, true).await
                }
                (check, _) => check,
            };
            if check.is_ok() {
                inner
                    .planned
                    .lock()
                    .unwrap()
                    .push((operation, intent.target.clone()));
            }
            let result = match (&check, would) {
                (Ok(()), Some(refused)) => refused,
                _ => journal_result(&check),
            };
            self.record(&intent, Phase::Planned, result);
            return check.map(|()| Admission::Planned);
        }
        // A state write already lost: refused before any budget, ticket or
        // journal intent is spent on it.
        if let Err(lost) = self.lost() {
            self.record(&intent, Phase::Refused, lost.to_string());
            return Err(lost);
        }
        let spent_at = match inner.budgets.spend(&operation, &intent.target).await {
            Ok(at) => at,
            Err(refusal) => {
                self.record(&intent, Phase::Refused, refusal.to_string());
                return Err(refusal);
            }
        };
        // The fleet's ticket, for a node's own disruptions (a cluster-scope
        // plugin is one actor: the shared host budgets bound it); then, for
        // a cluster-scope spend, sharing it with the leader's successors.
        let fleet = match (inner.budgets.fleet(), inner.caller.cluster) {
            (Some(fleet), false) => fleet.admit(&operation, false).await,
            _ => Ok(()),
        };
        let shared = match fleet {
            Ok(()) if spent_at > 0 && inner.caller.cluster => {
                inner.budgets.shared_with_successors().await
            }
            other => other,
        };
        if let Err(e) = shared {
            inner
                .budgets
                .refund(&operation, &intent.target, spent_at)
                .await;
            self.record(&intent, Phase::Refused, e.to_string());
            return Err(e);
        }
        let id = format!(
            "{}-{}",
            inner.run_id,
            inner.seq.fetch_add(1, Ordering::Relaxed)
        );
        // The intent's fsync and the state writes' commits, at once: the
        // effect waits for both.
        let (journaled, durable) = tokio::join!(
            self.journal_intent(&intent, &id, &operation),
            self.durable()
        );
        if journaled.is_err() || durable.is_err() {
            inner
                .budgets
                .refund(&operation, &intent.target, spent_at)
                .await;
        }
        journaled?;
        inner.in_flight.fetch_add(1, Ordering::SeqCst);
        let admitted = Admitted {
            gate: self.clone(),
            id,
            intent: Mutex::new(Some(intent)),
        };
        if let Err(lost) = durable {
            // Its journaled intent gets this result; it is never performed.
            admitted.close(lost.to_string());
            return Err(lost);
        }
        Ok(Admission::Go(Permit(Arc::new(admitted))))
    }

    /// Append `intent` to the journal and fsync it, on the blocking pool
    /// (never on a tokio worker); nothing to do without a journal.
    async fn journal_intent(
        &self,
        intent: &Intent,
        id: &str,
        operation: &str,
    ) -> Result<(), CapError> {
        let Some(journal) = self.0.journal.clone() else {
            return Ok(());
        };
        let dir = journal.dir().display().to_string();
        let entry = self.entry(intent, id, Phase::Intent, String::new());
        tokio::task::spawn_blocking(move || journal.append(&[entry], true))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)))
            .map_err(|e| {
                CapError::Unavailable(format!(
                    "cannot journal {operation} {} in {dir}: {e}; nothing was done (Tend does not act unrecorded)",
                    inert(&intent.target),
                ))
            })
    }

    /// Keep `commit`, a state write the plugin was answered for, until it is
    /// durable: awaited before this reconcile's next effect, its next state
    /// call and its end ([`Gate::durable`]).
    pub async fn keep_pending(&self, commit: Commit) {
        self.0.pending.lock().await.push(commit);
    }

    /// Every state write answered so far, durable. When one could not be
    /// made durable, this and every later call of the reconcile fails: the
    /// plugin was told it was written, so nothing more may act on it.
    pub async fn durable(&self) -> Result<(), CapError> {
        let mut pending = self.0.pending.lock().await;
        while let Some(commit) = pending.last_mut() {
            let finished = commit.finished().await;
            pending.pop();
            if let Err(e) = finished {
                tracing::error!(plugin = %self.0.caller.plugin, "a state write the plugin was answered for could not be made durable: {e}");
                let lost = CapError::Unavailable(format!(
                    "a state write this reconcile was answered for could not be made durable ({e}); this and every later effect and state call of this reconcile are refused"
                ));
                self.0.lost.lock().unwrap().get_or_insert(lost);
            }
        }
        self.lost()
    }

    /// The first state write of this reconcile that could not be made
    /// durable, as the error of every later call.
    fn lost(&self) -> Result<(), CapError> {
        self.0.lost.lock().unwrap().clone().map_or(Ok(()), Err)
    }

    fn entry(&self, intent: &Intent, id: &str, phase: Phase, result: String) -> Entry {
        journal_entry(&self.0.caller, intent, id, phase, result)
    }

    /// Journal (without fsync: [`Gate::sync`] does that) and list a mutation
    /// that has its result.
    fn record(&self, intent: &Intent, phase: Phase, result: String) {
        let inner = &self.0;
        if let Some(journal) = &inner.journal {
            let id = format!(
                "{}-{}",
                inner.run_id,
                inner.seq.fetch_add(1, Ordering::Relaxed)
            );
            let entry = self.entry(intent, &id, phase, result.clone());
            if let Err(e) = journal.append(&[entry], false) {
                tracing::error!(plugin = %inner.caller.plugin, "cannot append to the journal in {}: {e}", journal.dir().display());
            }
            inner.unsynced.store(true, Ordering::Relaxed);
        }
        inner.mutations.lock().unwrap().push(Mutation {
            capability: intent.capability,
            operation: intent.operation,
            target: intent.target.clone(),
            detail: intent.detail.clone(),
            diff: intent.diff.clone(),
            dry_run: inner.caller.dry_run,
            result,
        });
    }

    /// The caller is a cluster-scope plugin (no Node of its own).
    pub fn cluster(&self) -> bool {
        self.0.caller.cluster
    }

    /// Whether this node holds the fleet ticket covering `operation` (true
    /// without a fleet, or when no class covers it).
    pub async fn holds_fleet_ticket(&self, operation: &str) -> bool {
        match self.0.budgets.fleet() {
            Some(fleet) => fleet.holds(operation).await,
            None => true,
        }
    }

    /// Give back this node's fleet ticket covering `operation` (a node's own
    /// reconcile, not a plan): the disruption was undone (`why`).
    pub async fn give_back_fleet_ticket(&self, operation: &str, why: &str) {
        let inner = &self.0;
        if inner.caller.dry_run || inner.caller.cluster {
            return;
        }
        if let Some(fleet) = inner.budgets.fleet() {
            fleet.give_back(operation, why).await;
        }
    }

    /// Make every result journaled so far durable (once per reconcile, on the
    /// blocking pool).
    pub async fn sync(&self) {
        if !self.0.unsynced.swap(false, Ordering::Relaxed) {
            return;
        }
        let Some(journal) = self.0.journal.clone() else {
            return;
        };
        let plugin = self.0.caller.plugin.clone();
        let dir = journal.dir().display().to_string();
        let synced = tokio::task::spawn_blocking(move || journal.sync(&plugin))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        if let Err(e) = synced {
            tracing::error!("cannot fsync the journal in {dir}: {e}");
        }
    }

    /// Wait (at most `grace`) for admitted mutations still running, for example
    /// a large write on the blocking pool when the deadline cut the reconcile
    /// off; true when none is left.
    pub async fn settle(&self, grace: Duration) -> bool {
        let inner = &self.0;
        let wait = async {
            loop {
                let finished = inner.finished.notified();
                if inner.in_flight.load(Ordering::SeqCst) == 0 {
                    return;
                }
                finished.await;
            }
        };
        tokio::time::timeout(grace, wait).await.is_ok()
    }

    /// The mutations of this reconcile so far, in call order.
    pub fn mutations(&self) -> Vec<Mutation> {
        self.0.mutations.lock().unwrap().clone()
    }
}

/// Leave to perform one admitted mutation: a backend's mutating methods
/// require one, and only the gate makes one. The gate journals the result
/// when the backend returns; dropped unfinished (the reconcile was cut off),
/// the mutation is journaled as interrupted.
pub struct Permit(Arc<Admitted>);

/// The admitted mutation, shared by the gate and the backend's permit: the
/// first to finish it journals, and the last to let go of an unfinished one
/// journals it as interrupted.
struct Admitted {
    gate: Gate,
    id: String,
    intent: Mutex<Option<Intent>>,
}

impl Permit {
    /// `work` carrying this permit, for work that goes on when the reconcile
    /// that asked for it is cut off (a write on the blocking pool): it
    /// journals its own result when it completes, not "interrupted".
    pub fn travels_with<T: Performed>(
        self,
        work: impl FnOnce() -> Result<T, CapError>,
    ) -> impl FnOnce() -> Result<T, CapError> {
        move || {
            let result = work();
            self.0.close(journal_result(&result));
            result
        }
    }

    /// Journal the result ("ok", or the error) and list the mutation: the
    /// gate's own tests finish permits by hand.
    #[cfg(test)]
    fn finish(self, result: String) {
        self.0.close(result);
    }
}

impl Admitted {
    fn close(&self, result: String) {
        let Some(intent) = self.intent.lock().unwrap().take() else {
            return;
        };
        let gate = &self.gate;
        if let Some(journal) = &gate.0.journal {
            let entry = gate.entry(&intent, &self.id, Phase::Result, result.clone());
            if let Err(e) = journal.append(&[entry], false) {
                tracing::error!(
                    "cannot append to the journal in {}: {e}",
                    journal.dir().display()
                );
            }
            gate.0.unsynced.store(true, Ordering::Relaxed);
        }
        gate.0.mutations.lock().unwrap().push(Mutation {
            capability: intent.capability,
            operation: intent.operation,
            target: intent.target,
            detail: intent.detail,
            diff: None,
            dry_run: false,
            result,
        });
        gate.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        gate.0.finished.notify_waiters();
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.close(INTERRUPTED.to_string());
    }
}

/// The journal line recording `intent` of `caller` at `phase`, stamped now.
fn journal_entry(
    caller: &Caller,
    intent: &Intent,
    id: &str,
    phase: Phase,
    result: String,
) -> Entry {
    let (time, time_ms) = Entry::now();
    Entry {
        id: id.to_string(),
        phase,
        time,
        time_ms,
        plugin: caller.plugin.clone(),
        digest: caller.digest.clone(),
        triggers: caller.triggers.clone(),
        capability: intent.capability.to_string(),
        operation: intent.operation.to_string(),
        target: intent.target.clone(),
        detail: intent.detail.clone(),
        dry_run: caller.dry_run,
        result,
    }
}

#[cfg(test)]
mod tests;
