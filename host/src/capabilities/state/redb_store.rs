//! Plugin state in one redb file under the state dir: crash-safe transactions,
//! one table keyed by (plugin, key).

use super::StateBackend;
use crate::capabilities::CapError;
use redb::{Database, ReadableDatabase, TableDefinition};
use std::path::Path;

const TABLE: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("plugin-state");

pub struct RedbState {
    db: Database,
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
        Ok(RedbState { db })
    }
}

impl StateBackend for RedbState {
    fn get(&self, plugin: &str, key: &str) -> Result<Option<Vec<u8>>, CapError> {
        let txn = self.db.begin_read().map_err(unavailable)?;
        let table = txn.open_table(TABLE).map_err(unavailable)?;
        Ok(table
            .get((plugin, key))
            .map_err(unavailable)?
            .map(|v| v.value().to_vec()))
    }

    fn set(&self, plugin: &str, key: &str, value: &[u8]) -> Result<(), CapError> {
        let txn = self.db.begin_write().map_err(unavailable)?;
        txn.open_table(TABLE)
            .map_err(unavailable)?
            .insert((plugin, key), value)
            .map_err(unavailable)?;
        txn.commit().map_err(unavailable)
    }

    fn delete(&self, plugin: &str, key: &str) -> Result<bool, CapError> {
        let txn = self.db.begin_write().map_err(unavailable)?;
        let existed = txn
            .open_table(TABLE)
            .map_err(unavailable)?
            .remove((plugin, key))
            .map_err(unavailable)?
            .is_some();
        txn.commit().map_err(unavailable)?;
        Ok(existed)
    }

    fn list_keys(&self, plugin: &str, prefix: &str) -> Result<Vec<String>, CapError> {
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

    #[test]
    fn survives_reopening_and_scopes_keys_by_plugin() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        {
            let store = RedbState::open(&path).unwrap();
            store.set("a", "written/docker.io", b"1").unwrap();
            store.set("a", "written/quay.io", b"2").unwrap();
            store.set("a", "other", b"3").unwrap();
            store.set("ab", "written/x", b"4").unwrap();
            assert!(store.delete("a", "other").unwrap());
            assert!(!store.delete("a", "other").unwrap());
        }
        let store = RedbState::open(&path).unwrap();
        assert_eq!(
            store.list_keys("a", "written/").unwrap(),
            ["written/docker.io", "written/quay.io"]
        );
        assert_eq!(
            store.get("a", "written/quay.io").unwrap(),
            Some(b"2".to_vec())
        );
        assert_eq!(store.get("ab", "written/quay.io").unwrap(), None);
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
