//! The state backend: keys scoped by plugin name, so a plugin can never name
//! another's keys.

use crate::capabilities::error::CapError;
use crate::capabilities::gate::Commit;
use crate::capabilities::limits::over_limit;
use crate::capabilities::limits::raise;
use crate::units::ByteSize;

/// `[plugins.<name>.limits] state-*`: how much one plugin may keep. Keys and
/// values both count as bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StateLimits {
    #[serde(rename = "state-keys")]
    pub keys: u32,
    #[serde(rename = "state-bytes")]
    pub bytes: ByteSize,
}

impl Default for StateLimits {
    fn default() -> Self {
        StateLimits {
            keys: 1000,
            bytes: ByteSize(16 << 20),
        }
    }
}

impl StateLimits {
    /// Check what the plugin would hold after a write; the error names the
    /// limit to raise.
    pub fn check(&self, plugin: &str, keys: u64, bytes: u64) -> Result<(), CapError> {
        if keys > self.keys as u64 {
            return Err(over_limit(&format!(
                "state would hold {keys} keys; {}",
                raise(plugin, "state-keys", self.keys)
            )));
        }
        if bytes > self.bytes.0 {
            return Err(over_limit(&format!(
                "state would hold {bytes} bytes; {}",
                raise(plugin, "state-bytes", self.bytes)
            )));
        }
        Ok(())
    }
}

#[async_trait::async_trait]
pub trait StateBackend: Send + Sync + 'static {
    async fn get(&self, plugin: &str, key: &str) -> Result<Option<Vec<u8>>, CapError>;
    /// Store a value; with limits, refuse (storing nothing) when the plugin
    /// would hold more than it allows. Answers once the write is checked and
    /// applied; the [`Commit`] says when it is durable.
    async fn set(
        &self,
        plugin: &str,
        key: &str,
        value: Vec<u8>,
        limits: Option<StateLimits>,
    ) -> Result<Commit, CapError>;
    /// Whether the key existed; the [`Commit`] as for `set`.
    async fn delete(&self, plugin: &str, key: &str) -> Result<(bool, Commit), CapError>;
    /// Sorted.
    async fn list_keys(&self, plugin: &str, prefix: &str) -> Result<Vec<String>, CapError>;
}
