//! `tend:plugin/state` answered by the adapter.

use super::adapter::PluginState;
use crate::capabilities::Capability;
use crate::wit::{state, types};

type WitResult<T> = wasmtime::Result<Result<T, types::Error>>;

impl state::Host for PluginState {
    async fn get(&mut self, key: String) -> WitResult<Option<Vec<u8>>> {
        let this = &*self;
        this.call
            .answer(Self::NAME, "get", (key,), |(key,)| async move {
                this.get(&key).await
            })
            .await
    }
    async fn set(&mut self, key: String, value: Vec<u8>) -> WitResult<()> {
        let this = &*self;
        this.call
            .answer(Self::NAME, "set", (key, value), |(key, value)| async move {
                this.set(&key, value).await
            })
            .await
    }
    async fn delete(&mut self, key: String) -> WitResult<bool> {
        let this = &*self;
        this.call
            .answer(Self::NAME, "delete", (key,), |(key,)| async move {
                this.delete(&key).await
            })
            .await
    }
    async fn list_keys(&mut self, prefix: String) -> WitResult<Vec<String>> {
        let this = &*self;
        this.call
            .answer(Self::NAME, "list-keys", (prefix,), |(prefix,)| async move {
                this.list_keys(&prefix).await
            })
            .await
    }
}
