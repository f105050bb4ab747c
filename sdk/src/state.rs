//! `tend:plugin/state`: the plugin's own persistent key-value store.

use crate::{NotProvided, Result};
use serde::{Serialize, de::DeserializeOwned};
use std::cell::RefCell;
use std::collections::BTreeMap;
use tend_rules::state::{check_key, check_prefix, check_value};

/// The plugin's own persistent key-value store.
pub trait State {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>>;
    fn set(&self, key: &str, value: &[u8]) -> Result<()>;
    fn delete(&self, key: &str) -> Result<bool>;
    fn list_keys(&self, prefix: &str) -> Result<Vec<String>>;
}

impl dyn State + '_ {
    /// The JSON value under `key`, or none; a value that does not parse is `invalid`.
    pub fn get_json<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>> {
        match self.get(key)? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| crate::Error::Invalid(format!("state key {key:?}: {e}"))),
        }
    }

    pub fn set_json<T: Serialize>(&self, key: &str, value: &T) -> Result<()> {
        let bytes = serde_json::to_vec(value)
            .map_err(|e| crate::Error::Invalid(format!("state key {key:?}: {e}")))?;
        self.set(key, &bytes)
    }
}

impl State for NotProvided {
    fn get(&self, _key: &str) -> Result<Option<Vec<u8>>> {
        Err(NotProvided::denied("state"))
    }
    fn set(&self, _key: &str, _value: &[u8]) -> Result<()> {
        Err(NotProvided::denied("state"))
    }
    fn delete(&self, _key: &str) -> Result<bool> {
        Err(NotProvided::denied("state"))
    }
    fn list_keys(&self, _prefix: &str) -> Result<Vec<String>> {
        Err(NotProvided::denied("state"))
    }
}

/// The wasm glue: the host's `state` imports.
#[cfg(target_arch = "wasm32")]
pub(crate) mod wasm {
    use crate::Result;
    use crate::bindings::tend::plugin::state;
    use crate::types::from_wit_error;

    pub(crate) struct WasmState;

    impl crate::State for WasmState {
        fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
            state::get(key).map_err(from_wit_error)
        }
        fn set(&self, key: &str, value: &[u8]) -> Result<()> {
            state::set(key, value).map_err(from_wit_error)
        }
        fn delete(&self, key: &str) -> Result<bool> {
            state::delete(key).map_err(from_wit_error)
        }
        fn list_keys(&self, prefix: &str) -> Result<Vec<String>> {
            state::list_keys(prefix).map_err(from_wit_error)
        }
    }
}

/// The fake: an in-memory store (state needs no grant), with the host's
/// bounds on keys and values.
#[derive(Default)]
pub struct FakeState {
    entries: RefCell<BTreeMap<String, Vec<u8>>>,
}

impl crate::fake::Fake for FakeState {
    /// State needs no grant, so nothing names the plugin.
    fn for_plugin(_plugin: &str) -> Self {
        FakeState::default()
    }
}

impl State for FakeState {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        check_key(key).map_err(crate::Error::from)?;
        Ok(self.entries.borrow().get(key).cloned())
    }
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        check_key(key).map_err(crate::Error::from)?;
        check_value(key, value).map_err(crate::Error::from)?;
        self.entries
            .borrow_mut()
            .insert(key.to_string(), value.to_vec());
        Ok(())
    }
    fn delete(&self, key: &str) -> Result<bool> {
        check_key(key).map_err(crate::Error::from)?;
        Ok(self.entries.borrow_mut().remove(key).is_some())
    }
    fn list_keys(&self, prefix: &str) -> Result<Vec<String>> {
        check_prefix(prefix).map_err(crate::Error::from)?;
        Ok(self
            .entries
            .borrow()
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect())
    }
}
