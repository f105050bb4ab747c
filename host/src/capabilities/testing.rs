//! Helpers for the capabilities' unit tests: per-call facts with or without a
//! journal and budgets.

use super::call::Call;
use super::gate::{BudgetRule, Budgets, Caller, Gate};
use super::limits::Limits;
use super::state::FakeState;
use crate::journal::Journal;
use std::path::Path;
use std::sync::Arc;

fn caller(plugin: &str, dry_run: bool) -> Caller {
    Caller {
        plugin: plugin.into(),
        digest: "sha256:test".into(),
        triggers: vec!["manual".into()],
        dry_run,
    }
}

/// A call with no journal and no budgets.
pub fn call(plugin: &str, dry_run: bool) -> Arc<Call> {
    let budgets = Arc::new(Budgets::new(vec![], Arc::new(FakeState::default())));
    call_limited(plugin, dry_run, Limits::default(), budgets)
}

/// A call with no journal under `limits`.
pub fn call_with_limits(plugin: &str, dry_run: bool, limits: Limits) -> Arc<Call> {
    let budgets = Arc::new(Budgets::new(vec![], Arc::new(FakeState::default())));
    call_limited(plugin, dry_run, limits, budgets)
}

fn call_limited(plugin: &str, dry_run: bool, limits: Limits, budgets: Arc<Budgets>) -> Arc<Call> {
    Call::new(
        Gate::new(caller(plugin, dry_run), limits, None, budgets, None),
        limits,
    )
}

/// A call journaling under `state_dir`, spending from `rules`.
pub fn call_journaled(
    plugin: &str,
    dry_run: bool,
    state_dir: &Path,
    rules: Vec<BudgetRule>,
) -> Arc<Call> {
    let budgets = Arc::new(Budgets::new(rules, Arc::new(FakeState::default())));
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
