//! Plugins as OCI artifacts: `file = "oci://REGISTRY/REPOSITORY@sha256:…"`
//! (or `:TAG`, resolved and pinned). The CNCF wasm artifact layout (config
//! `application/vnd.wasm.config.v0+json`, one `application/wasm` layer) is
//! pulled with oci-client, every digest checked here (manifest and layer,
//! sha256 of the bytes), sizes and time bounded, the result cached by digest
//! beside the compile cache; with `verify = { key = … }`, a keyed cosign
//! signature is required. See docs/design.md, "Plugins from OCI registries".

mod auth;
pub mod cache;
mod pull;
pub mod push;
pub mod reference;
mod registry;
pub mod sign;

pub use pull::{Pulled, fetch};
pub use reference::Reference;

use crate::runtime::{CompiledPlugin, LoadError, Runtime};
use crate::units::ByteSize;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// Manifests are a few hundred bytes; anything near this is not one.
pub const MAX_MANIFEST: usize = 4 << 20;

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

/// An oci-client client for `settings`: plain HTTP only to the insecure
/// registries, bounded connect and read times.
pub fn client(settings: &Settings) -> oci_client::Client {
    crate::tls::install_ring();
    oci_client::Client::new(oci_client::client::ClientConfig {
        protocol: oci_client::client::ClientProtocol::HttpsExcept(
            settings.insecure_registries.clone(),
        ),
        connect_timeout: Some(Duration::from_secs(10)),
        read_timeout: Some(Duration::from_secs(30)),
        user_agent: concat!("tend/", env!("CARGO_PKG_VERSION")),
        ..Default::default()
    })
}

pub use auth::credentials;

/// Compile a plugin's component off the async executor: `file`, or for a
/// plugin from a registry (`source`) the cached component after a pull (see
/// [`fetch`]), refused unless the bytes compiled are the verified ones.
pub async fn load(
    runtime: Arc<Runtime>,
    file: &Path,
    source: Option<&Source>,
    settings: &Settings,
    cache_dir: &Path,
) -> Result<Arc<CompiledPlugin>, LoadError> {
    let compile = |file: PathBuf| async move {
        tokio::task::spawn_blocking(move || runtime.load(&file).map(Arc::new))
            .await
            .expect("plugin load task panicked")
    };
    match source {
        None => compile(file.to_path_buf()).await,
        Some(source) => {
            let pulled = fetch(source, settings, cache_dir)
                .await
                .map_err(LoadError::Fetch)?;
            pulled.checked(compile(pulled.path.clone()).await)
        }
    }
}
