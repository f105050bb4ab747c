//! An in-memory state store for tests: records writes, injects failures.

use super::backend::{Quota, StateBackend};
use crate::capabilities::error::CapError;
use std::collections::BTreeMap;
use std::sync::Mutex;

#[derive(Default)]
pub struct FakeState {
    entries: Mutex<BTreeMap<(String, String), Vec<u8>>>,
    actions: Mutex<Vec<String>>,
    failure: Mutex<Option<CapError>>,
}

impl FakeState {
    /// Every write, as "set plugin/key" or "delete plugin/key".
    pub fn actions(&self) -> Vec<String> {
        self.actions.lock().unwrap().clone()
    }

    /// Fail every call with `error` until cleared with None.
    pub fn fail_with(&self, error: Option<CapError>) {
        *self.failure.lock().unwrap() = error;
    }

    fn check(&self) -> Result<(), CapError> {
        match self.failure.lock().unwrap().clone() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

#[async_trait::async_trait]
impl StateBackend for FakeState {
    async fn get(&self, plugin: &str, key: &str) -> Result<Option<Vec<u8>>, CapError> {
        self.check()?;
        let entries = self.entries.lock().unwrap();
        Ok(entries.get(&(plugin.into(), key.into())).cloned())
    }
    async fn set(
        &self,
        plugin: &str,
        key: &str,
        value: Vec<u8>,
        quota: Option<Quota>,
    ) -> Result<(), CapError> {
        self.check()?;
        if let Some(quota) = quota {
            let entries = self.entries.lock().unwrap();
            let mine = entries.iter().filter(|((p, k), _)| p == plugin && k != key);
            let (keys, bytes) = mine.fold((1u64, (key.len() + value.len()) as u64), |(n, b), ((_, k), v)| {
                (n + 1, b + (k.len() + v.len()) as u64)
            });
            quota.check(plugin, keys, bytes)?;
        }
        self.actions
            .lock()
            .unwrap()
            .push(format!("set {plugin}/{key}"));
        self.entries
            .lock()
            .unwrap()
            .insert((plugin.into(), key.into()), value);
        Ok(())
    }
    async fn delete(&self, plugin: &str, key: &str) -> Result<bool, CapError> {
        self.check()?;
        self.actions
            .lock()
            .unwrap()
            .push(format!("delete {plugin}/{key}"));
        let mut entries = self.entries.lock().unwrap();
        Ok(entries.remove(&(plugin.into(), key.into())).is_some())
    }
    async fn list_keys(&self, plugin: &str, prefix: &str) -> Result<Vec<String>, CapError> {
        self.check()?;
        let entries = self.entries.lock().unwrap();
        Ok(entries
            .keys()
            .filter(|(p, k)| p == plugin && k.starts_with(prefix))
            .map(|(_, k)| k.clone())
            .collect())
    }
}
