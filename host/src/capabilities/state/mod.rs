//! `tend:plugin/state`: each plugin's own persistent key-value store.

mod memory;
mod redb_store;

pub use memory::MemoryState;
pub use redb_store::RedbState;

use super::{CallInfo, CapError};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

pub const MAX_KEY: usize = 512;
pub const MAX_VALUE: usize = 1 << 20;

/// Keys are scoped by plugin name: a plugin can never name another's keys.
pub trait StateBackend: Send + Sync + 'static {
    fn get(&self, plugin: &str, key: &str) -> Result<Option<Vec<u8>>, CapError>;
    fn set(&self, plugin: &str, key: &str, value: &[u8]) -> Result<(), CapError>;
    fn delete(&self, plugin: &str, key: &str) -> Result<bool, CapError>;
    /// Sorted.
    fn list_keys(&self, plugin: &str, prefix: &str) -> Result<Vec<String>, CapError>;
}

/// The `state` capability of one reconcile. In a dry run, writes land in an
/// overlay that this reconcile reads back and that is then dropped, so a plan
/// never changes what the next real reconcile remembers.
pub struct PluginState {
    backend: Arc<dyn StateBackend>,
    call: CallInfo,
    overlay: Mutex<BTreeMap<String, Option<Vec<u8>>>>,
}

impl PluginState {
    pub fn new(backend: Arc<dyn StateBackend>, call: CallInfo) -> Self {
        PluginState {
            backend,
            call,
            overlay: Mutex::default(),
        }
    }

    fn check_key(key: &str) -> Result<(), CapError> {
        if key.is_empty() || key.len() > MAX_KEY {
            return Err(CapError::Invalid(format!(
                "state keys must be 1 to {MAX_KEY} bytes long, not {}",
                key.len()
            )));
        }
        Ok(())
    }

    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, CapError> {
        Self::check_key(key)?;
        if let Some(value) = self.overlay.lock().unwrap().get(key) {
            return Ok(value.clone());
        }
        self.backend.get(&self.call.plugin, key)
    }

    pub fn set(&self, key: &str, value: Vec<u8>) -> Result<(), CapError> {
        Self::check_key(key)?;
        if value.len() > MAX_VALUE {
            return Err(CapError::Invalid(format!(
                "state value for {key:?} is {} bytes; at most {MAX_VALUE} are allowed",
                value.len()
            )));
        }
        if self.call.dry_run {
            self.overlay
                .lock()
                .unwrap()
                .insert(key.to_string(), Some(value));
            return Ok(());
        }
        self.backend.set(&self.call.plugin, key, &value)
    }

    pub fn delete(&self, key: &str) -> Result<bool, CapError> {
        Self::check_key(key)?;
        if self.call.dry_run {
            let existed = self.get(key)?.is_some();
            self.overlay.lock().unwrap().insert(key.to_string(), None);
            return Ok(existed);
        }
        self.backend.delete(&self.call.plugin, key)
    }

    pub fn list_keys(&self, prefix: &str) -> Result<Vec<String>, CapError> {
        let mut keys = self.backend.list_keys(&self.call.plugin, prefix)?;
        let overlay = self.overlay.lock().unwrap();
        for (key, value) in overlay
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
        {
            match (value, keys.binary_search(key)) {
                (Some(_), Err(at)) => keys.insert(at, key.clone()),
                (None, Ok(at)) => {
                    keys.remove(at);
                }
                _ => {}
            }
        }
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::Mutations;

    fn state(backend: &Arc<MemoryState>, plugin: &str, dry_run: bool) -> PluginState {
        let call = CallInfo {
            plugin: plugin.into(),
            dry_run,
            mutations: Mutations::default(),
        };
        PluginState::new(backend.clone(), call)
    }

    #[test]
    fn plugins_see_only_their_own_keys() {
        let backend = Arc::new(MemoryState::default());
        state(&backend, "a", false).set("k", b"1".to_vec()).unwrap();
        assert_eq!(state(&backend, "b", false).get("k").unwrap(), None);
        assert_eq!(
            state(&backend, "a", false).get("k").unwrap(),
            Some(b"1".to_vec())
        );
    }

    #[test]
    fn dry_run_writes_are_read_back_but_never_persisted() {
        let backend = Arc::new(MemoryState::default());
        state(&backend, "a", false)
            .set("keep", b"1".to_vec())
            .unwrap();
        let dry = state(&backend, "a", true);
        dry.set("new", b"2".to_vec()).unwrap();
        assert!(dry.delete("keep").unwrap());
        assert_eq!(dry.get("new").unwrap(), Some(b"2".to_vec()));
        assert_eq!(dry.get("keep").unwrap(), None);
        assert_eq!(dry.list_keys("").unwrap(), ["new"]);
        let real = state(&backend, "a", false);
        assert_eq!(real.list_keys("").unwrap(), ["keep"]);
    }

    #[test]
    fn oversized_keys_and_values_are_invalid() {
        let backend = Arc::new(MemoryState::default());
        let s = state(&backend, "a", false);
        assert!(matches!(s.set("", vec![]), Err(CapError::Invalid(_))));
        assert!(matches!(
            s.set("k", vec![0; MAX_VALUE + 1]),
            Err(CapError::Invalid(_))
        ));
    }
}
