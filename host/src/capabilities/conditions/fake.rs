//! The own Node in memory: conditions merged by type as the API server's
//! strategic merge does, taints replaced, every write counted; a write can
//! be made to fail.

use super::backend::{NodeStatus, merged_taints};
use crate::capabilities::error::CapError;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tend_rules::conditions::TaintEffect;

#[derive(Default)]
pub struct FakeNode {
    conditions: Mutex<Vec<Value>>,
    taints: Mutex<Vec<Value>>,
    writes: AtomicU64,
    /// While set, every write answers `unavailable`.
    pub failing: AtomicBool,
}

impl FakeNode {
    pub fn conditions(&self) -> Vec<Value> {
        self.conditions.lock().unwrap().clone()
    }

    pub fn taints(&self) -> Vec<Value> {
        self.taints.lock().unwrap().clone()
    }

    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    fn write(&self) -> Result<(), CapError> {
        if self.failing.load(Ordering::Relaxed) {
            return Err(CapError::Unavailable("the fake API server is down".into()));
        }
        self.writes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

#[async_trait::async_trait]
impl NodeStatus for FakeNode {
    async fn patch_status(&self, patch: Value) -> Result<(), CapError> {
        self.write()?;
        let mut conditions = self.conditions.lock().unwrap();
        for item in patch["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
        {
            conditions.retain(|c| c["type"] != item["type"]);
            if item.get("$patch").is_none() {
                conditions.push(item.clone());
            }
        }
        Ok(())
    }

    async fn set_taints(&self, wanted: &BTreeMap<String, TaintEffect>) -> Result<(), CapError> {
        let mut taints = self.taints.lock().unwrap();
        if let Some(merged) = merged_taints(&taints, wanted) {
            self.write()?;
            *taints = merged;
        }
        Ok(())
    }

    fn requests(&self) -> u64 {
        self.writes()
    }
}
