//! The `state` adapter of one reconcile. In a dry run, writes land in an
//! overlay that this reconcile reads back and that is then dropped, so a plan
//! never changes what the next real reconcile remembers.

use super::backend::{StateBackend, StateLimits};
use crate::capabilities::call::Call;
use crate::capabilities::error::CapError;
use crate::capabilities::limits::over_limit;
use crate::capabilities::limits::raise;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tend_rules::state::{check_key, check_prefix, check_value};

pub struct PluginState {
    pub(super) backend: Arc<dyn StateBackend>,
    pub(super) limits: StateLimits,
    pub(super) call: Arc<Call>,
    pub(super) overlay: Mutex<Overlay>,
}

/// A dry run's state writes, and the bytes they hold (bounded).
#[derive(Default)]
pub(super) struct Overlay {
    entries: BTreeMap<String, Option<Vec<u8>>>,
    bytes: u64,
}

impl PluginState {
    /// Hold a dry run's write in the overlay, within `dry-run-overlay` bytes.
    fn overlay_put(&self, key: &str, value: Option<Vec<u8>>) -> Result<(), CapError> {
        let cap = self.call.limits.dry_run_overlay;
        let mut overlay = self.overlay.lock().unwrap();
        let size = (key.len() + value.as_ref().map_or(0, Vec::len)) as u64;
        if overlay.bytes + size > cap.0 {
            return Err(over_limit(&format!(
                "this dry run's state writes would hold more than {cap}; {}",
                raise(&self.call.plugin, "dry-run-overlay", cap)
            )));
        }
        overlay.bytes += size;
        overlay.entries.insert(key.to_string(), value);
        Ok(())
    }

    pub async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, CapError> {
        check_key(key)?;
        if let Some(value) = self.overlay.lock().unwrap().entries.get(key) {
            return Ok(value.clone());
        }
        self.call.gate.durable().await?;
        self.backend.get(&self.call.plugin, key).await
    }

    /// Answered once the write is checked (keys, bytes); made durable while
    /// the plugin goes on, and before anything this reconcile does next
    /// outside the guest (the gate waits for it).
    pub async fn set(&self, key: &str, value: Vec<u8>) -> Result<(), CapError> {
        check_key(key)?;
        check_value(key, &value)?;
        if self.call.dry_run {
            return self.overlay_put(key, Some(value));
        }
        self.call.gate.durable().await?;
        let commit = self
            .backend
            .set(&self.call.plugin, key, value, Some(self.limits))
            .await?;
        self.call.gate.keep_pending(commit).await;
        Ok(())
    }

    pub async fn delete(&self, key: &str) -> Result<bool, CapError> {
        check_key(key)?;
        if self.call.dry_run {
            let existed = self.get(key).await?.is_some();
            self.overlay_put(key, None)?;
            return Ok(existed);
        }
        self.call.gate.durable().await?;
        let (existed, commit) = self.backend.delete(&self.call.plugin, key).await?;
        self.call.gate.keep_pending(commit).await;
        Ok(existed)
    }

    pub async fn list_keys(&self, prefix: &str) -> Result<Vec<String>, CapError> {
        check_prefix(prefix)?;
        self.call.gate.durable().await?;
        let mut keys = self.backend.list_keys(&self.call.plugin, prefix).await?;
        let overlay = self.overlay.lock().unwrap();
        for (key, value) in overlay
            .entries
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
    use crate::capabilities::gate::Commit;
    use crate::capabilities::testing::call;
    use crate::capabilities::{Capability, capability::AlwaysGranted, state::FakeState};
    use std::future::Future;

    fn state(backend: &Arc<FakeState>, plugin: &str, dry_run: bool) -> PluginState {
        let backend: Arc<dyn StateBackend> = backend.clone();
        PluginState::for_call(
            &backend,
            &AlwaysGranted,
            &Default::default(),
            &call(plugin, dry_run),
        )
    }

    #[tokio::test]
    async fn plugins_see_only_their_own_keys() {
        let backend = Arc::new(FakeState::default());
        state(&backend, "a", false)
            .set("k", b"1".to_vec())
            .await
            .unwrap();
        assert_eq!(state(&backend, "b", false).get("k").await.unwrap(), None);
        assert_eq!(
            state(&backend, "a", false).get("k").await.unwrap(),
            Some(b"1".to_vec())
        );
    }

    #[tokio::test]
    async fn dry_run_writes_are_read_back_but_never_persisted() {
        let backend = Arc::new(FakeState::default());
        state(&backend, "a", false)
            .set("keep", b"1".to_vec())
            .await
            .unwrap();
        let dry = state(&backend, "a", true);
        dry.set("new", b"2".to_vec()).await.unwrap();
        assert!(dry.delete("keep").await.unwrap());
        assert_eq!(dry.get("new").await.unwrap(), Some(b"2".to_vec()));
        assert_eq!(dry.get("keep").await.unwrap(), None);
        assert_eq!(dry.list_keys("").await.unwrap(), ["new"]);
        let real = state(&backend, "a", false);
        assert_eq!(real.list_keys("").await.unwrap(), ["keep"]);
        assert_eq!(backend.actions(), ["set a/keep"]);
    }

    /// A store whose commits finish when the test says so.
    #[derive(Default)]
    struct HeldCommits {
        entries: FakeState,
        held: Mutex<Vec<tokio::sync::oneshot::Sender<Result<(), CapError>>>>,
    }

    #[async_trait::async_trait]
    impl StateBackend for HeldCommits {
        async fn get(&self, plugin: &str, key: &str) -> Result<Option<Vec<u8>>, CapError> {
            self.entries.get(plugin, key).await
        }
        async fn set(
            &self,
            plugin: &str,
            key: &str,
            value: Vec<u8>,
            limits: Option<StateLimits>,
        ) -> Result<Commit, CapError> {
            // The fake's write is done: held, this test decides when.
            let _in_memory = self.entries.set(plugin, key, value, limits).await?;
            let (committed, finished) = tokio::sync::oneshot::channel();
            self.held.lock().unwrap().push(committed);
            Ok(Commit::pending(finished))
        }
        async fn delete(&self, plugin: &str, key: &str) -> Result<(bool, Commit), CapError> {
            let (existed, _in_memory) = self.entries.delete(plugin, key).await?;
            let (committed, finished) = tokio::sync::oneshot::channel();
            self.held.lock().unwrap().push(committed);
            Ok((existed, Commit::pending(finished)))
        }
        async fn list_keys(&self, plugin: &str, prefix: &str) -> Result<Vec<String>, CapError> {
            self.entries.list_keys(plugin, prefix).await
        }
    }

    #[tokio::test]
    async fn a_write_is_answered_before_it_is_durable_and_read_only_after() {
        let backend = Arc::new(HeldCommits::default());
        let dynamic: Arc<dyn StateBackend> = backend.clone();
        let call = call("a", false);
        let state = PluginState::for_call(&dynamic, &AlwaysGranted, &Default::default(), &call);
        state.set("k", b"1".to_vec()).await.unwrap();
        let mut read = std::pin::pin!(state.get("k"));
        assert!(
            read.as_mut()
                .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
                .is_pending(),
            "read before the write is durable"
        );
        let committed = backend.held.lock().unwrap().pop().unwrap();
        committed.send(Ok(())).unwrap();
        assert_eq!(read.await.unwrap(), Some(b"1".to_vec()));
        // The same for a delete and a listing.
        assert!(state.delete("k").await.unwrap());
        let mut listing = std::pin::pin!(state.list_keys(""));
        assert!(
            listing
                .as_mut()
                .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
                .is_pending(),
            "listed before the delete is durable"
        );
        let committed = backend.held.lock().unwrap().pop().unwrap();
        committed.send(Ok(())).unwrap();
        assert_eq!(listing.await.unwrap(), Vec::<String>::new());
        assert!(call.gate.durable().await.is_ok());
    }

    #[tokio::test]
    async fn oversized_keys_and_values_are_invalid() {
        let backend = Arc::new(FakeState::default());
        let s = state(&backend, "a", false);
        assert!(matches!(s.set("", vec![]).await, Err(CapError::Invalid(_))));
        assert!(matches!(
            s.set("k", vec![0; super::super::MAX_VALUE + 1]).await,
            Err(CapError::Invalid(_))
        ));
    }
}
