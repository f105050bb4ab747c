//! `tend:plugin/state` answered by the adapter.

use super::adapter::PluginState;
use crate::capabilities::Capability;
use crate::wit::{state, types};

type WitResult<T> = Result<T, types::Error>;

impl state::Host for PluginState {
    async fn get(&mut self, key: String) -> WitResult<Option<Vec<u8>>> {
        let result = PluginState::get(self, &key).await;
        self.call.counted(Self::NAME, "get", result)
    }
    async fn set(&mut self, key: String, value: Vec<u8>) -> WitResult<()> {
        let result = PluginState::set(self, &key, value).await;
        self.call.counted(Self::NAME, "set", result)
    }
    async fn delete(&mut self, key: String) -> WitResult<bool> {
        let result = PluginState::delete(self, &key).await;
        self.call.counted(Self::NAME, "delete", result)
    }
    async fn list_keys(&mut self, prefix: String) -> WitResult<Vec<String>> {
        let result = PluginState::list_keys(self, &prefix).await;
        self.call.counted(Self::NAME, "list-keys", result)
    }
}
