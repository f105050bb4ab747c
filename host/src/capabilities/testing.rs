//! Helpers for the capabilities' unit tests: per-call facts with or without a
//! journal and budgets.

use super::call::Call;
use super::gate::{BudgetRule, Budgets, Caller, Gate};
use super::limits::Limits;
use super::state::FakeState;
use super::tape::Tape;
use crate::journal::Journal;
use std::path::Path;
use std::sync::Arc;

fn caller(plugin: &str, dry_run: bool) -> Caller {
    Caller {
        plugin: plugin.into(),
        digest: "sha256:test".into(),
        triggers: vec!["manual".into()],
        dry_run,
        cluster: false,
    }
}

/// Budgets of `rules` whose ledgers are kept in memory.
pub fn budgets_in_memory(rules: Vec<BudgetRule>) -> Arc<Budgets> {
    Arc::new(Budgets::new(rules, Arc::new(FakeState::default())))
}

/// A call with no journal and no budgets.
pub fn call(plugin: &str, dry_run: bool) -> Arc<Call> {
    call_limited(
        plugin,
        dry_run,
        Limits::default(),
        budgets_in_memory(vec![]),
    )
}

/// A call with no journal under `limits`.
pub fn call_with_limits(plugin: &str, dry_run: bool, limits: Limits) -> Arc<Call> {
    call_limited(plugin, dry_run, limits, budgets_in_memory(vec![]))
}

fn call_limited(plugin: &str, dry_run: bool, limits: Limits, budgets: Arc<Budgets>) -> Arc<Call> {
    call_taped(plugin, dry_run, limits, budgets, Tape::Off)
}

/// A call recording or replaying its capability calls on `tape`.
pub fn call_on_tape(plugin: &str, tape: Tape) -> Arc<Call> {
    call_taped(
        plugin,
        false,
        Limits::default(),
        budgets_in_memory(vec![]),
        tape,
    )
}

fn call_taped(
    plugin: &str,
    dry_run: bool,
    limits: Limits,
    budgets: Arc<Budgets>,
    tape: Tape,
) -> Arc<Call> {
    Call::taped(
        Gate::new(caller(plugin, dry_run), limits, None, budgets, None),
        limits,
        tape,
    )
}

/// A call journaling under `state_dir`, spending from `rules`.
pub fn call_journaled(
    plugin: &str,
    dry_run: bool,
    state_dir: &Path,
    rules: Vec<BudgetRule>,
) -> Arc<Call> {
    let budgets = budgets_in_memory(rules);
    let journal = Arc::new(Journal::open(state_dir).unwrap());
    let limits = Limits::default();
    Call::new(
        Gate::new(
            caller(plugin, dry_run),
            limits,
            Some(journal),
            budgets,
            None,
        ),
        limits,
    )
}
