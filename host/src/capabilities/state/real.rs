//! Plugin state in one redb file under the state dir: crash-safe transactions,
//! one table keyed by (plugin, key). Reads are served from redb's cache on the
//! calling task (measured: microseconds); commits fsync, so they run on the
//! blocking pool, never on a tokio worker.

use super::backend::{Quota, StateBackend};
use crate::capabilities::error::CapError;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use std::path::Path;
use std::sync::Arc;

const TABLE: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("plugin-state");
/// Per plugin: (keys, bytes of keys and values), kept in step with TABLE in
/// the same transactions, so a quota check never scans.
const USAGE: TableDefinition<&str, (u64, u64)> = TableDefinition::new("plugin-usage");

/// The plugin's usage, computed once from TABLE when USAGE has no row yet
/// (state written before quotas existed).
fn usage(txn: &redb::WriteTransaction, plugin: &str) -> Result<(u64, u64), CapError> {
    if let Some(row) = txn
        .open_table(USAGE)
        .map_err(unavailable)?
        .get(plugin)
        .map_err(unavailable)?
    {
        return Ok(row.value());
    }
    let table = txn.open_table(TABLE).map_err(unavailable)?;
    let mut totals = (0u64, 0u64);
    for entry in table.range((plugin, "")..).map_err(unavailable)? {
        let (k, v) = entry.map_err(unavailable)?;
        let (p, key) = k.value();
        if p != plugin {
            break;
        }
        totals = (
            totals.0 + 1,
            totals.1 + (key.len() + v.value().len()) as u64,
        );
    }
    Ok(totals)
}

fn set_usage(
    txn: &redb::WriteTransaction,
    plugin: &str,
    usage: (u64, u64),
) -> Result<(), CapError> {
    txn.open_table(USAGE)
        .map_err(unavailable)?
        .insert(plugin, usage)
        .map_err(unavailable)?;
    Ok(())
}

pub struct RedbState {
    db: Arc<Database>,
}

fn unavailable(e: impl std::fmt::Display) -> CapError {
    CapError::Unavailable(format!("state store: {e}"))
}

impl RedbState {
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| anyhow::anyhow!("cannot create state dir {}: {e}", dir.display()))?;
        }
        let db = Database::create(path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => anyhow::anyhow!(
                "state store {} is in use by another tend process: stop it, or give this one another [host] state-dir",
                path.display()
            ),
            e => anyhow::anyhow!("cannot open state store {}: {e}", path.display()),
        })?;
        let txn = db.begin_write()?;
        txn.open_table(TABLE)?;
        txn.commit()?;
        Ok(RedbState { db: Arc::new(db) })
    }
}

fn commit<T: Send + 'static>(
    db: &Arc<Database>,
    write: impl FnOnce(&redb::WriteTransaction) -> Result<T, CapError> + Send + 'static,
) -> impl std::future::Future<Output = Result<T, CapError>> + Send + 'static {
    let db = db.clone();
    async move {
        tokio::task::spawn_blocking(move || {
            let txn = db.begin_write().map_err(unavailable)?;
            let result = write(&txn)?;
            txn.commit().map_err(unavailable)?;
            Ok(result)
        })
        .await
        .map_err(|e| unavailable(format!("commit task failed: {e}")))?
    }
}

#[async_trait::async_trait]
impl StateBackend for RedbState {
    async fn get(&self, plugin: &str, key: &str) -> Result<Option<Vec<u8>>, CapError> {
        let txn = self.db.begin_read().map_err(unavailable)?;
        let table = txn.open_table(TABLE).map_err(unavailable)?;
        Ok(table
            .get((plugin, key))
            .map_err(unavailable)?
            .map(|v| v.value().to_vec()))
    }

    async fn set(
        &self,
        plugin: &str,
        key: &str,
        value: Vec<u8>,
        quota: Option<Quota>,
    ) -> Result<(), CapError> {
        let (plugin, key) = (plugin.to_string(), key.to_string());
        commit(&self.db, move |txn| {
            let (keys, bytes) = usage(txn, &plugin)?;
            let mut table = txn.open_table(TABLE).map_err(unavailable)?;
            let old = table
                .get((plugin.as_str(), key.as_str()))
                .map_err(unavailable)?
                .map(|v| (key.len() + v.value().len()) as u64);
            let keys = keys + u64::from(old.is_none());
            let bytes = bytes - old.unwrap_or(0) + (key.len() + value.len()) as u64;
            if let Some(quota) = quota {
                quota.check(&plugin, keys, bytes)?;
            }
            table
                .insert((plugin.as_str(), key.as_str()), value.as_slice())
                .map_err(unavailable)?;
            drop(table);
            set_usage(txn, &plugin, (keys, bytes))
        })
        .await
    }

    async fn delete(&self, plugin: &str, key: &str) -> Result<bool, CapError> {
        let (plugin, key) = (plugin.to_string(), key.to_string());
        commit(&self.db, move |txn| {
            let (keys, bytes) = usage(txn, &plugin)?;
            let removed = txn
                .open_table(TABLE)
                .map_err(unavailable)?
                .remove((plugin.as_str(), key.as_str()))
                .map_err(unavailable)?
                .map(|v| (key.len() + v.value().len()) as u64);
            if let Some(size) = removed {
                set_usage(txn, &plugin, (keys - 1, bytes - size))?;
            }
            Ok(removed.is_some())
        })
        .await
    }

    async fn list_keys(&self, plugin: &str, prefix: &str) -> Result<Vec<String>, CapError> {
        let txn = self.db.begin_read().map_err(unavailable)?;
        let table = txn.open_table(TABLE).map_err(unavailable)?;
        let mut keys = Vec::new();
        for entry in table.range((plugin, prefix)..).map_err(unavailable)? {
            let (k, _) = entry.map_err(unavailable)?;
            let (p, key) = k.value();
            if p != plugin || !key.starts_with(prefix) {
                break;
            }
            keys.push(key.to_string());
        }
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn survives_reopening_and_scopes_keys_by_plugin() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        {
            let store = RedbState::open(&path).unwrap();
            store
                .set("a", "written/docker.io", b"1".to_vec(), None)
                .await
                .unwrap();
            store
                .set("a", "written/quay.io", b"2".to_vec(), None)
                .await
                .unwrap();
            store.set("a", "other", b"3".to_vec(), None).await.unwrap();
            store
                .set("ab", "written/x", b"4".to_vec(), None)
                .await
                .unwrap();
            assert!(store.delete("a", "other").await.unwrap());
            assert!(!store.delete("a", "other").await.unwrap());
        }
        let store = RedbState::open(&path).unwrap();
        assert_eq!(
            store.list_keys("a", "written/").await.unwrap(),
            ["written/docker.io", "written/quay.io"]
        );
        assert_eq!(
            store.get("a", "written/quay.io").await.unwrap(),
            Some(b"2".to_vec())
        );
        assert_eq!(store.get("ab", "written/quay.io").await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_quota_bounds_keys_and_bytes_and_deletes_give_room_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbState::open(&dir.path().join("state.redb")).unwrap();
        let quota = Some(Quota {
            keys: 2,
            bytes: crate::units::ByteSize(100),
        });
        store.set("p", "a", vec![0; 40], quota).await.unwrap();
        store.set("p", "a", vec![0; 45], quota).await.unwrap();
        store.set("p", "b", vec![0; 40], quota).await.unwrap();
        let err = store.set("p", "c", vec![], quota).await.unwrap_err();
        assert!(
            err.to_string()
                .contains("raise [plugins.p.limits] state-keys (now 2)"),
            "{err}"
        );
        let err = store.set("p", "b", vec![0; 60], quota).await.unwrap_err();
        assert!(err.to_string().contains("state-bytes"), "{err}");
        assert_eq!(
            store.get("p", "b").await.unwrap().unwrap().len(),
            40,
            "nothing stored"
        );
        assert!(store.delete("p", "a").await.unwrap());
        store.set("p", "c", vec![0; 50], quota).await.unwrap();
        // Another plugin has its own quota.
        store.set("q", "a", vec![0; 90], quota).await.unwrap();
    }

    #[test]
    fn a_second_process_gets_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let _first = RedbState::open(&path).unwrap();
        let err = RedbState::open(&path).err().unwrap().to_string();
        assert!(err.contains("in use by another tend process"), "{err}");
    }
}
