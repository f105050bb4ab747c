//! What every fake backend shares: the mutations it performed and the
//! failure injected into its calls. Actions are recorded in the words of the
//! SDK's fakes, "<operation> <target>" with the operation named as grants,
//! budgets and the journal name it ("restart kubelet.service",
//! "pull-image docker.io/library/x:1", "daemon-reload"), so a test reads the
//! same on both sides.

use super::error::CapError;
use std::sync::Mutex;

#[derive(Default)]
pub struct FakeLedger {
    actions: Mutex<Vec<String>>,
    failure: Mutex<Option<CapError>>,
}

impl FakeLedger {
    /// Every mutation performed, in call order.
    pub fn actions(&self) -> Vec<String> {
        self.actions.lock().unwrap().clone()
    }

    /// Fail every call that checks with `error` (say, `unavailable`: the
    /// socket is gone) until cleared with None.
    pub fn fail_with(&self, error: Option<CapError>) {
        *self.failure.lock().unwrap() = error;
    }

    /// The injected failure, if any: a fake's call checks it first.
    pub fn check(&self) -> Result<(), CapError> {
        match self.failure.lock().unwrap().clone() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Record `operation` on `target` (the operation alone when `target` is
    /// empty), for a mutation that passed its own checks.
    pub fn record(&self, operation: &str, target: &str) {
        let action = if target.is_empty() {
            operation.to_string()
        } else {
            format!("{operation} {target}")
        };
        self.actions.lock().unwrap().push(action);
    }

    /// Check for an injected failure, then record `operation` on `target`.
    pub fn act(&self, operation: &str, target: &str) -> Result<(), CapError> {
        self.check()?;
        self.record(operation, target);
        Ok(())
    }
}
