//! The mutation gate: the one code path every mutating capability call takes,
//! in this order: grant check (by the adapter, before it builds the intent) ->
//! dry run (record the plan, perform nothing) -> host-wide budgets -> journal
//! intent, fsynced -> perform -> journal result, the reconcile's mutation list.
//!
//! A backend's mutating methods take a [`Permit`], and only [`Gate::admit`]
//! makes one: a capability cannot perform a mutation around the gate. A permit
//! dropped unfinished (the reconcile hit its deadline, the guest trapped)
//! journals the mutation as interrupted; after a crash the journal shows the
//! intent without a result, which `tend journal` reads as interrupted too.

mod budget;
mod budgets;
pub mod diff;

pub use budget::{BudgetRule, Ledger};
pub use budgets::{BudgetStatus, Budgets};

use super::error::CapError;
pub use crate::journal::INTERRUPTED;
use crate::journal::{Entry, Journal, Phase};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

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
        format!(" ({detail})")
    };
    let result = if result == "ok" {
        String::new()
    } else {
        format!(": {result}")
    };
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
}

/// What the gate decided.
pub enum Admission {
    /// A dry run: recorded into the plan; answer as the real call would have.
    Planned,
    /// Perform it with this permit, then [`Permit::finish`].
    Go(Permit),
}

#[derive(Clone)]
pub struct Gate(Arc<Inner>);

struct Inner {
    caller: Caller,
    /// Unique per reconcile: the journal pairs intents with results by it.
    run_id: String,
    seq: AtomicU32,
    journal: Option<Arc<Journal>>,
    budgets: Arc<Budgets>,
    mutations: Mutex<Vec<Mutation>>,
    /// (operation, target) a dry run planned: budgets count them without spending.
    planned: Mutex<Vec<(String, String)>>,
    /// Results appended without fsync since the last [`Gate::sync`].
    unsynced: AtomicBool,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

impl Gate {
    /// `journal`: None only where nothing may mutate (describe, unit tests).
    pub fn new(caller: Caller, journal: Option<Arc<Journal>>, budgets: Arc<Budgets>) -> Gate {
        let run_id = format!("{:x}-{:08x}", now_ms(), fastrand::u32(..));
        Gate(Arc::new(Inner {
            caller,
            run_id,
            seq: AtomicU32::new(0),
            journal,
            budgets,
            mutations: Mutex::default(),
            planned: Mutex::default(),
            unsynced: AtomicBool::new(false),
        }))
    }

    pub fn plugin(&self) -> &str {
        &self.0.caller.plugin
    }

    pub fn dry_run(&self) -> bool {
        self.0.caller.dry_run
    }

    /// Pass `intent` through dry run, budgets and the journal's intent record.
    pub async fn admit(&self, intent: Intent) -> Result<Admission, CapError> {
        let operation = format!("{}.{}", intent.capability, intent.operation);
        let now = now_ms();
        let inner = &self.0;
        if inner.caller.dry_run {
            let planned = inner.planned.lock().unwrap().clone();
            let check = inner
                .budgets
                .check(&operation, &intent.target, now, &planned)
                .await;
            if check.is_ok() {
                inner
                    .planned
                    .lock()
                    .unwrap()
                    .push((operation, intent.target.clone()));
            }
            self.record(&intent, Phase::Planned, super::error::outcome(&check));
            return check.map(|()| Admission::Planned);
        }
        if let Err(refusal) = inner.budgets.spend(&operation, &intent.target, now).await {
            self.record(&intent, Phase::Refused, refusal.to_string());
            return Err(refusal);
        }
        let id = format!(
            "{}-{}",
            inner.run_id,
            inner.seq.fetch_add(1, Ordering::Relaxed)
        );
        if let Some(journal) = &inner.journal {
            let entry = self.entry(&intent, &id, Phase::Intent, String::new());
            journal.append(&[entry], true).map_err(|e| {
                CapError::Unavailable(format!(
                    "cannot journal {operation} {} in {}: {e}; nothing was done (Tend does not act unrecorded)",
                    intent.target,
                    journal.dir().display()
                ))
            })?;
        }
        Ok(Admission::Go(Permit {
            gate: self.clone(),
            id,
            intent: Some(intent),
        }))
    }

    fn entry(&self, intent: &Intent, id: &str, phase: Phase, result: String) -> Entry {
        let caller = &self.0.caller;
        Entry::new(
            id.to_string(),
            phase,
            caller.plugin.clone(),
            caller.digest.clone(),
            caller.triggers.clone(),
            intent.capability.to_string(),
            intent.operation.to_string(),
            intent.target.clone(),
            intent.detail.clone(),
            caller.dry_run,
            result,
        )
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

    /// Make every result journaled so far durable (once per reconcile).
    pub fn sync(&self) {
        if self.0.unsynced.swap(false, Ordering::Relaxed)
            && let Some(journal) = &self.0.journal
            && let Err(e) = journal.sync()
        {
            tracing::error!(
                "cannot fsync the journal in {}: {e}",
                journal.dir().display()
            );
        }
    }

    /// The mutations of this reconcile so far, in call order.
    pub fn mutations(&self) -> Vec<Mutation> {
        self.0.mutations.lock().unwrap().clone()
    }
}

/// Leave to perform one admitted mutation. Finish it with its result.
pub struct Permit {
    gate: Gate,
    id: String,
    intent: Option<Intent>,
}

impl Permit {
    /// Journal the result ("ok" or the error) and list the mutation.
    pub fn finish(mut self, result: String) {
        self.close(result);
    }

    fn close(&mut self, result: String) {
        let Some(intent) = self.intent.take() else {
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
    }

    #[cfg(test)]
    pub fn for_tests() -> Permit {
        let gate = Gate::new(
            Caller::default(),
            None,
            Arc::new(Budgets::new(
                vec![],
                Arc::new(crate::capabilities::state::FakeState::default()),
            )),
        );
        Permit {
            gate,
            id: String::new(),
            intent: None,
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.intent.is_some() {
            self.close(INTERRUPTED.to_string());
        }
    }
}

#[cfg(test)]
mod tests;
