//! The own Node as the conditions capability writes it: its `status`
//! subresource (conditions, by strategic merge) and Tend's own taints.
//! Host acts, not a plugin's: a plugin's report passed the gate when it was
//! made; the host's writer carries it (and heartbeats, expiries, removals)
//! to the Node.

use crate::capabilities::error::CapError;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use tend_rules::conditions::{TAINT_PREFIX, TaintEffect, taint_key};

#[async_trait::async_trait]
pub trait NodeStatus: Send + Sync + 'static {
    /// Strategic-merge `patch` into the own Node's `status` subresource.
    async fn patch_status(&self, patch: Value) -> Result<(), CapError>;
    /// Make the own Node carry exactly `wanted` of Tend's taints (keys
    /// `tend.dev/<type>`), every other taint untouched.
    async fn set_taints(&self, wanted: &BTreeMap<String, TaintEffect>) -> Result<(), CapError>;
    /// API requests made (for `/metrics`).
    fn requests(&self) -> u64;
}

/// The Node's taints `existing` with Tend's (the `tend.dev/` prefix is
/// Tend's alone) replaced by `wanted`: pure. None when nothing changes.
pub fn merged_taints(
    existing: &[Value],
    wanted: &BTreeMap<String, TaintEffect>,
) -> Option<Vec<Value>> {
    let ours = |taint: &Value| {
        taint["key"]
            .as_str()
            .is_some_and(|key| key.starts_with(TAINT_PREFIX))
    };
    let mut taints: Vec<Value> = existing.iter().filter(|t| !ours(t)).cloned().collect();
    taints.extend(wanted.iter().map(
        |(condition, effect)| json!({ "key": taint_key(condition), "effect": effect.name() }),
    ));
    let same = |a: &Value, b: &Value| {
        a["key"] == b["key"] && a["effect"] == b["effect"] && a["value"] == b["value"]
    };
    let unchanged = taints.len() == existing.len()
        && existing.iter().all(|e| taints.iter().any(|t| same(t, e)));
    (!unchanged).then_some(taints)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_tends_taints_change() {
        let theirs = json!({ "key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule" });
        let stale = json!({ "key": "tend.dev/Gone", "effect": "NoSchedule" });
        let wanted = BTreeMap::from([("KernelDeadlock".to_string(), TaintEffect::NoSchedule)]);
        let taints = merged_taints(&[theirs.clone(), stale], &wanted).unwrap();
        assert_eq!(
            taints,
            vec![
                theirs.clone(),
                json!({ "key": "tend.dev/KernelDeadlock", "effect": "NoSchedule" })
            ]
        );
        assert_eq!(merged_taints(&taints, &wanted), None, "already so");
        assert_eq!(
            merged_taints(std::slice::from_ref(&theirs), &BTreeMap::new()),
            None
        );
    }
}
