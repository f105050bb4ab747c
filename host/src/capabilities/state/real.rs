//! Plugin state in one redb file under the state dir: crash-safe transactions,
//! one table keyed by (plugin, key). Reads are served from redb's cache on the
//! calling task (measured: microseconds); commits fsync, so they run on the
//! blocking pool, never on a tokio worker.

use super::backend::{StateBackend, StateLimits};
use crate::capabilities::error::CapError;
use crate::capabilities::gate::Commit;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use std::path::Path;
use std::sync::Arc;

const TABLE: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("plugin-state");
/// Per plugin: (keys, bytes of keys and values), kept in step with TABLE in
/// the same transactions, so a limits check never scans.
const USAGE: TableDefinition<&str, (u64, u64)> = TableDefinition::new("plugin-usage");
/// The store's schema version, one row under [`VERSION_KEY`] (see
/// [`crate::schema`]). A store without it is version 1, adopted on open.
const SCHEMA: TableDefinition<&str, u64> = TableDefinition::new("tend-schema");
const VERSION_KEY: &str = "version";
/// The schema this Tend writes: TABLE and USAGE as above.
pub const SCHEMA_VERSION: u64 = 1;

/// Refuse a store of a schema this Tend does not know; give an unversioned
/// one (Tend 0.1's, or a new file) the current version.
fn check_schema(txn: &redb::WriteTransaction, path: &Path) -> anyhow::Result<()> {
    let mut schema = txn.open_table(SCHEMA)?;
    let found = schema.get(VERSION_KEY)?.map(|v| v.value());
    match found {
        Some(found) if found > SCHEMA_VERSION => anyhow::bail!(crate::schema::newer(
            "state store",
            path,
            found,
            SCHEMA_VERSION
        )),
        Some(SCHEMA_VERSION) => {}
        // Version 1 is the only one yet: adopting or migrating is writing it.
        _ => {
            schema.insert(VERSION_KEY, SCHEMA_VERSION)?;
        }
    }
    Ok(())
}

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

/// Create `path` (empty, which redb initializes) or take it over as Tend's
/// own: mode 0600 whatever the umask, since it holds every plugin's state.
fn own_file(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .mode(0o600)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
}

impl RedbState {
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        if let Some(dir) = path.parent() {
            crate::atomic::create_private_dir(dir)
                .map_err(|e| anyhow::anyhow!("cannot create state dir {}: {e}", dir.display()))?;
        }
        own_file(path)
            .map_err(|e| anyhow::anyhow!("cannot create state store {}: {e}", path.display()))?;
        let db = Database::create(path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => anyhow::anyhow!(
                "state store {} is in use by another tend process: stop it, or give this one another [host] state-dir",
                path.display()
            ),
            e => anyhow::anyhow!("cannot open state store {}: {e}", path.display()),
        })?;
        let txn = db.begin_write()?;
        check_schema(&txn, path)?;
        txn.open_table(TABLE)?;
        txn.commit()?;
        Ok(RedbState { db: Arc::new(db) })
    }
}

/// Run `write` in a write transaction on the blocking pool and answer its
/// result as soon as it is known; the transaction is then committed (the
/// fsync) while the caller goes on, and the [`Commit`] answers when it is
/// durable. A write `write` refuses is rolled back, nothing to commit.
fn commit<T: Send + 'static>(
    db: &Arc<Database>,
    write: impl FnOnce(&redb::WriteTransaction) -> Result<T, CapError> + Send + 'static,
) -> impl std::future::Future<Output = Result<(T, Commit), CapError>> + Send + 'static {
    let db = db.clone();
    let (checked, answer) = tokio::sync::oneshot::channel();
    let (committed, durable) = tokio::sync::oneshot::channel();
    let task = tokio::task::spawn_blocking(move || {
        let written = db
            .begin_write()
            .map_err(unavailable)
            .and_then(|txn| Ok((write(&txn)?, txn)));
        let txn = match written {
            Ok((result, txn)) => {
                let _ = checked.send(Ok(result));
                txn
            }
            Err(e) => {
                drop(db);
                return drop(checked.send(Err(e)));
            }
        };
        let result = txn.commit().map_err(unavailable);
        // Closed before the answer: whoever awaited the commit may reopen
        // the store at once.
        drop(db);
        let _ = committed.send(result);
    });
    async move {
        match answer.await {
            Ok(result) => result.map(|result| (result, Commit::pending(durable))),
            Err(_) => Err(unavailable(match task.await {
                Err(e) => format!("commit task failed: {e}"),
                Ok(()) => "commit task ended without an answer".into(),
            })),
        }
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
        limits: Option<StateLimits>,
    ) -> Result<Commit, CapError> {
        let (plugin, key) = (plugin.to_string(), key.to_string());
        let ((), durable) = commit(&self.db, move |txn| {
            let (keys, bytes) = usage(txn, &plugin)?;
            let mut table = txn.open_table(TABLE).map_err(unavailable)?;
            let old = table
                .get((plugin.as_str(), key.as_str()))
                .map_err(unavailable)?
                .map(|v| (key.len() + v.value().len()) as u64);
            let keys = keys + u64::from(old.is_none());
            let bytes = bytes - old.unwrap_or(0) + (key.len() + value.len()) as u64;
            if let Some(limits) = limits {
                limits.check(&plugin, keys, bytes)?;
            }
            table
                .insert((plugin.as_str(), key.as_str()), value.as_slice())
                .map_err(unavailable)?;
            drop(table);
            set_usage(txn, &plugin, (keys, bytes))
        })
        .await?;
        Ok(durable)
    }

    async fn delete(&self, plugin: &str, key: &str) -> Result<(bool, Commit), CapError> {
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

    /// A write, awaited until durable.
    async fn set(
        store: &RedbState,
        plugin: &str,
        key: &str,
        value: Vec<u8>,
        limits: Option<StateLimits>,
    ) -> Result<(), CapError> {
        store.set(plugin, key, value, limits).await?.durable().await
    }

    async fn delete(store: &RedbState, plugin: &str, key: &str) -> bool {
        let (existed, commit) = store.delete(plugin, key).await.unwrap();
        commit.durable().await.unwrap();
        existed
    }

    #[tokio::test]
    async fn survives_reopening_and_scopes_keys_by_plugin() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        {
            let store = RedbState::open(&path).unwrap();
            set(&store, "a", "written/docker.io", b"1".to_vec(), None)
                .await
                .unwrap();
            set(&store, "a", "written/quay.io", b"2".to_vec(), None)
                .await
                .unwrap();
            set(&store, "a", "other", b"3".to_vec(), None)
                .await
                .unwrap();
            set(&store, "ab", "written/x", b"4".to_vec(), None)
                .await
                .unwrap();
            assert!(delete(&store, "a", "other").await);
            assert!(!delete(&store, "a", "other").await);
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
        let limits = Some(StateLimits {
            keys: 2,
            bytes: crate::units::ByteSize(100),
        });
        set(&store, "p", "a", vec![0; 40], limits).await.unwrap();
        set(&store, "p", "a", vec![0; 45], limits).await.unwrap();
        set(&store, "p", "b", vec![0; 40], limits).await.unwrap();
        let err = set(&store, "p", "c", vec![], limits).await.unwrap_err();
        assert!(
            err.to_string()
                .contains("raise [plugins.p.limits] state-keys (now 2)"),
            "{err}"
        );
        let err = set(&store, "p", "b", vec![0; 60], limits)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("state-bytes"), "{err}");
        assert_eq!(
            store.get("p", "b").await.unwrap().unwrap().len(),
            40,
            "nothing stored"
        );
        assert!(delete(&store, "p", "a").await);
        set(&store, "p", "c", vec![0; 50], limits).await.unwrap();
        // Another plugin has its own limits.
        set(&store, "q", "a", vec![0; 90], limits).await.unwrap();
    }

    #[test]
    fn a_second_process_gets_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let _first = RedbState::open(&path).unwrap();
        let err = RedbState::open(&path).err().unwrap().to_string();
        assert!(err.contains("in use by another tend process"), "{err}");
    }

    fn schema_version(path: &Path) -> Option<u64> {
        let db = Database::create(path).unwrap();
        let txn = db.begin_read().unwrap();
        let table = match txn.open_table(SCHEMA) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return None,
            Err(e) => panic!("{e}"),
        };
        table.get(VERSION_KEY).unwrap().map(|v| v.value())
    }

    #[tokio::test]
    async fn a_fresh_store_gets_the_version_and_an_unversioned_one_is_adopted_intact() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("fresh.redb");
        drop(RedbState::open(&fresh).unwrap());
        assert_eq!(schema_version(&fresh), Some(SCHEMA_VERSION));

        // A store as Tend 0.1 wrote it: its tables, no version.
        let old = dir.path().join("old.redb");
        {
            let db = Database::create(&old).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(TABLE)
                .unwrap()
                .insert(("p", "k"), b"v".as_slice())
                .unwrap();
            txn.commit().unwrap();
        }
        assert_eq!(schema_version(&old), None);
        let state = RedbState::open(&old).unwrap();
        assert_eq!(state.get("p", "k").await.unwrap(), Some(b"v".to_vec()));
        drop(state);
        assert_eq!(schema_version(&old), Some(SCHEMA_VERSION));
    }

    #[test]
    fn a_store_of_a_newer_schema_is_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        {
            let db = Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(SCHEMA)
                .unwrap()
                .insert(VERSION_KEY, 2)
                .unwrap();
            txn.commit().unwrap();
        }
        let err = RedbState::open(&path).err().unwrap().to_string();
        assert!(
            err.contains(&format!(
                "state store {} has schema version 2, written by a newer tend",
                path.display()
            )),
            "{err}"
        );
        assert!(
            err.contains("knows versions up to 1") && err.contains("docs/upgrade.md"),
            "{err}"
        );
        assert_eq!(schema_version(&path), Some(2), "not rewritten");
    }
}
