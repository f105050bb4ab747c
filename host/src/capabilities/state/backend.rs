//! The state backend: keys scoped by plugin name, so a plugin can never name
//! another's keys.

use crate::capabilities::error::CapError;

#[async_trait::async_trait]
pub trait StateBackend: Send + Sync + 'static {
    async fn get(&self, plugin: &str, key: &str) -> Result<Option<Vec<u8>>, CapError>;
    async fn set(&self, plugin: &str, key: &str, value: Vec<u8>) -> Result<(), CapError>;
    async fn delete(&self, plugin: &str, key: &str) -> Result<bool, CapError>;
    /// Sorted.
    async fn list_keys(&self, plugin: &str, prefix: &str) -> Result<Vec<String>, CapError>;
}
