//! What every adapter of one reconcile shares: who calls, whether it is a dry
//! run, the mutation gate, and how often each operation was called.

use super::error::CapError;
use super::gate::Gate;
use crate::wit::types;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// How often a reconcile called one capability operation with one result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallCount {
    pub capability: &'static str,
    pub operation: &'static str,
    /// "ok" or the error case.
    pub result: &'static str,
    pub count: u64,
}

type CountKey = (&'static str, &'static str, &'static str);

pub struct Call {
    pub plugin: String,
    pub dry_run: bool,
    pub gate: Gate,
    counts: Mutex<BTreeMap<CountKey, u64>>,
}

impl Call {
    pub fn new(gate: Gate) -> Arc<Call> {
        Arc::new(Call {
            plugin: gate.plugin().to_string(),
            dry_run: gate.dry_run(),
            gate,
            counts: Mutex::default(),
        })
    }

    /// Count a capability call by its result and hand the result to the guest.
    pub fn counted<T>(
        &self,
        capability: &'static str,
        operation: &'static str,
        result: Result<T, CapError>,
    ) -> Result<T, types::Error> {
        let label = result.as_ref().map_or_else(CapError::kind, |_| "ok");
        *self
            .counts
            .lock()
            .unwrap()
            .entry((capability, operation, label))
            .or_default() += 1;
        result.map_err(types::Error::from)
    }

    pub fn counts(&self) -> Vec<CallCount> {
        self.counts
            .lock()
            .unwrap()
            .iter()
            .map(|(&(capability, operation, result), &count)| CallCount {
                capability,
                operation,
                result,
                count,
            })
            .collect()
    }
}
