//! An in-memory state store for unit tests.

use super::StateBackend;
use crate::capabilities::CapError;
use std::collections::BTreeMap;
use std::sync::Mutex;

#[derive(Default)]
pub struct MemoryState {
    entries: Mutex<BTreeMap<(String, String), Vec<u8>>>,
}

impl StateBackend for MemoryState {
    fn get(&self, plugin: &str, key: &str) -> Result<Option<Vec<u8>>, CapError> {
        Ok(self
            .entries
            .lock()
            .unwrap()
            .get(&(plugin.into(), key.into()))
            .cloned())
    }
    fn set(&self, plugin: &str, key: &str, value: &[u8]) -> Result<(), CapError> {
        self.entries
            .lock()
            .unwrap()
            .insert((plugin.into(), key.into()), value.to_vec());
        Ok(())
    }
    fn delete(&self, plugin: &str, key: &str) -> Result<bool, CapError> {
        Ok(self
            .entries
            .lock()
            .unwrap()
            .remove(&(plugin.into(), key.into()))
            .is_some())
    }
    fn list_keys(&self, plugin: &str, prefix: &str) -> Result<Vec<String>, CapError> {
        let entries = self.entries.lock().unwrap();
        Ok(entries
            .keys()
            .filter(|(p, k)| p == plugin && k.starts_with(prefix))
            .map(|(_, k)| k.clone())
            .collect())
    }
}
