//! What the config says of registries and of a plugin from one: `[host.oci]`,
//! the plugin's source and its `verify` key. Plain data, below the config;
//! the pulls that use it are the rest of `oci`.

use super::reference::Reference;
use crate::units::ByteSize;
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

/// `[host.oci]`: how registries are reached.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Settings {
    /// A docker config file (`{"auths": {"REGISTRY": {"auth": …}}}`) with the
    /// registries' credentials; unset: `$DOCKER_CONFIG/config.json`, else
    /// none (anonymous pulls).
    pub docker_config: Option<PathBuf>,
    /// Registries (`host:port`) reached over plain HTTP; every other one over HTTPS.
    #[serde(default)]
    pub insecure_registries: Vec<String>,
    /// A component larger than this is refused before it is downloaded whole.
    #[serde(default = "default_max_blob_size")]
    pub max_blob_size: ByteSize,
    /// One pull (resolve, manifest, component, signature) gives up after this.
    #[serde(default = "default_timeout", with = "crate::units::duration")]
    pub timeout: Duration,
}

fn default_max_blob_size() -> ByteSize {
    ByteSize(64 << 20)
}
fn default_timeout() -> Duration {
    Duration::from_secs(120)
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            docker_config: None,
            insecure_registries: Vec::new(),
            max_blob_size: default_max_blob_size(),
            timeout: default_timeout(),
        }
    }
}

/// A plugin whose component comes from a registry.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    pub reference: Reference,
    /// `verify = { key = "cosign.pub" }`: the public key its signature must verify with.
    pub key: Option<PathBuf>,
}

/// `[plugins.X] verify = { key = "…" }`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Verify {
    pub key: PathBuf,
}
