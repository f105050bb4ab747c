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
mod settings;
pub mod sign;

pub use pull::{Pulled, fetch};
pub use reference::Reference;
pub use settings::{Settings, Source, Verify};

use crate::runtime::{CompiledPlugin, LoadError, Runtime};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// Manifests are a few hundred bytes; anything near this is not one.
pub const MAX_MANIFEST: usize = 4 << 20;

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
