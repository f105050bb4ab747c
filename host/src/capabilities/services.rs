//! What every plugin's calls share host-wide: the backends, the journal and
//! the budgets. Built once per process (`tend run`, or a one-shot command).

use super::call::Call;
use super::capability::BackendEnv;
use super::gate::{BudgetRule, Budgets, Caller, Gate, Planned};
use super::limits::Limits;
use super::registry::{Backends, Fakes, Settings};
use super::tape::Tape;
use crate::journal::Journal;
use std::path::Path;
use std::sync::Arc;

pub struct Services {
    pub backends: Backends,
    /// None only for fakes: nothing journaled.
    pub journal: Option<Arc<Journal>>,
    pub budgets: Arc<Budgets>,
}

impl Services {
    /// The real backends with the state, the journal and the budget ledgers
    /// under `state_dir`.
    pub fn real(
        state_dir: &Path,
        node_name: &str,
        settings: &Settings,
        rules: Vec<BudgetRule>,
    ) -> anyhow::Result<Self> {
        let backends = Backends::real(
            settings,
            &BackendEnv {
                state_dir,
                node_name,
            },
        )?;
        let journal = Arc::new(Journal::open(state_dir)?);
        let budgets = Arc::new(Budgets::new(rules, backends.state.clone()));
        Ok(Services {
            backends,
            journal: Some(journal),
            budgets,
        })
    }

    /// Fakes of every backend, no journal, no budgets.
    pub fn fake() -> (Self, Fakes) {
        let (backends, fakes) = Backends::fake();
        let budgets = Arc::new(Budgets::new(vec![], backends.state.clone()));
        let services = Services {
            backends,
            journal: None,
            budgets,
        };
        (services, fakes)
    }

    /// What the adapters of one reconcile by `caller` share, its gate
    /// included; `planned` shares a plan's budget counts across plugins;
    /// `tape` records or replays its capability calls.
    pub fn call(
        &self,
        caller: Caller,
        limits: Limits,
        planned: Option<Planned>,
        tape: Tape,
    ) -> Arc<Call> {
        let gate = Gate::new(
            caller,
            limits,
            self.journal.clone(),
            self.budgets.clone(),
            planned,
        );
        Call::taped(gate, limits, tape)
    }
}
