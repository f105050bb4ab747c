//! An in-memory state store for tests: records writes, injects failures.

use super::backend::{StateBackend, StateLimits};
use crate::capabilities::error::CapError;
use crate::capabilities::fakes::FakeLedger;
use crate::capabilities::gate::Commit;
use std::collections::BTreeMap;
use std::sync::Mutex;

#[derive(Default)]
pub struct FakeState {
    entries: Mutex<BTreeMap<(String, String), Vec<u8>>>,
    ledger: FakeLedger,
}

impl FakeState {
    /// Every write, as "set plugin/key" or "delete plugin/key".
    pub fn actions(&self) -> Vec<String> {
        self.ledger.actions()
    }

    /// Fail every call with `error` until cleared with None.
    pub fn fail_with(&self, error: Option<CapError>) {
        self.ledger.fail_with(error);
    }
}

#[async_trait::async_trait]
impl StateBackend for FakeState {
    async fn get(&self, plugin: &str, key: &str) -> Result<Option<Vec<u8>>, CapError> {
        self.ledger.check()?;
        let entries = self.entries.lock().unwrap();
        Ok(entries.get(&(plugin.into(), key.into())).cloned())
    }
    async fn set(
        &self,
        plugin: &str,
        key: &str,
        value: Vec<u8>,
        limits: Option<StateLimits>,
    ) -> Result<Commit, CapError> {
        self.ledger.check()?;
        if let Some(limits) = limits {
            let entries = self.entries.lock().unwrap();
            let mine = entries.iter().filter(|((p, k), _)| p == plugin && k != key);
            let (keys, bytes) = mine.fold(
                (1u64, (key.len() + value.len()) as u64),
                |(n, b), ((_, k), v)| (n + 1, b + (k.len() + v.len()) as u64),
            );
            limits.check(plugin, keys, bytes)?;
        }
        self.ledger.record("set", &format!("{plugin}/{key}"));
        self.entries
            .lock()
            .unwrap()
            .insert((plugin.into(), key.into()), value);
        Ok(Commit::done())
    }
    async fn delete(&self, plugin: &str, key: &str) -> Result<(bool, Commit), CapError> {
        self.ledger.check()?;
        self.ledger.record("delete", &format!("{plugin}/{key}"));
        let mut entries = self.entries.lock().unwrap();
        let existed = entries.remove(&(plugin.into(), key.into())).is_some();
        Ok((existed, Commit::done()))
    }
    async fn list_keys(&self, plugin: &str, prefix: &str) -> Result<Vec<String>, CapError> {
        self.ledger.check()?;
        let entries = self.entries.lock().unwrap();
        Ok(entries
            .keys()
            .filter(|(p, k)| p == plugin && k.starts_with(prefix))
            .map(|(_, k)| k.clone())
            .collect())
    }
}
