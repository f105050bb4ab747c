//! `tend-author plugins push FILE.wasm oci://REGISTRY/REPOSITORY:TAG [--sign-key cosign.key]`
//! and `tend-author plugins keygen DIR`: publish a component in the wasm artifact
//! layout (and its cosign signature), or make a cosign key pair.

use super::cache::sha256;
use super::reference::{Reference, Target};
use super::sign::{self, Signer};
use super::{Settings, WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE};
use oci_client::client::{Config, ImageLayer};
use oci_client::manifest::{OCI_IMAGE_MEDIA_TYPE, OciImageManifest};
use std::collections::BTreeMap;
use std::path::Path;

/// Push `component` to `reference`; sign it with `signer` if given. Returns
/// the digest reference to pin.
pub async fn push(
    component: &[u8],
    reference: &Reference,
    settings: &Settings,
    signer: Option<&Signer>,
) -> anyhow::Result<Reference> {
    if !component.starts_with(b"\0asm") {
        anyhow::bail!("not a WebAssembly file (no \\0asm header)");
    }
    let layer_digest = sha256(component);
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
    }))?;
    let pinned = push_artifact(
        reference,
        settings,
        ImageLayer::new(component.to_vec(), WASM_LAYER_MEDIA_TYPE.into(), None),
        Config::new(config, WASM_CONFIG_MEDIA_TYPE.into(), None),
    )
    .await?;
    if let Some(signer) = signer {
        let digest = pinned.digest().expect("pinned by digest");
        let payload = sign::payload(&reference.repository_name(), digest);
        let signature = signer.sign(&payload)?;
        let annotations = BTreeMap::from([(sign::SIGNATURE_ANNOTATION.to_string(), signature)]);
        // cosign's signature image: an OCI image config naming the payload layer.
        let config = serde_json::to_vec(&serde_json::json!({
            "architecture": "",
            "os": "",
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": [sha256(&payload)]},
        }))?;
        push_artifact(
            &reference.at_tag(&sign::signature_tag(digest)),
            settings,
            ImageLayer::new(payload, sign::PAYLOAD_MEDIA_TYPE.into(), Some(annotations)),
            Config::new(
                config,
                oci_client::manifest::IMAGE_CONFIG_MEDIA_TYPE.into(),
                None,
            ),
        )
        .await?;
    }
    Ok(pinned)
}

/// Push one layer and its config, then the manifest (serialized here, so its
/// digest is the sha256 of exactly the bytes sent).
async fn push_artifact(
    reference: &Reference,
    settings: &Settings,
    layer: ImageLayer,
    config: Config,
) -> anyhow::Result<Reference> {
    let client = super::client(settings);
    let auth = super::credentials(settings, &reference.registry).map_err(anyhow::Error::msg)?;
    let target = reference.to_client();
    client
        .store_auth_if_needed(&reference.registry, &auth)
        .await;
    let manifest = OciImageManifest::build(std::slice::from_ref(&layer), &config, None);
    let failed = |what: &str, e: oci_client::errors::OciDistributionError| {
        let hint = plain_http_hint(settings, &reference.registry, &e);
        // With its sources (`{:#}` where the CLI prints it), not only the bare
        // "error sending request".
        anyhow::Error::new(e).context(format!("pushing {what} to {reference}{hint}"))
    };
    client
        .push_blob(&target, layer.data.clone(), &manifest.layers[0].digest)
        .await
        .map_err(|e| failed("the layer", e))?;
    client
        .push_blob(&target, config.data.clone(), &manifest.config.digest)
        .await
        .map_err(|e| failed("the config", e))?;
    let body = serde_json::to_vec(&manifest)?;
    let digest = sha256(&body);
    let tagged = match &reference.target {
        Target::Tag(_) => target,
        Target::Digest(_) => reference.at_digest(&digest).to_client(),
    };
    client
        .push_manifest_raw(&tagged, body, OCI_IMAGE_MEDIA_TYPE.parse()?)
        .await
        .map_err(|e| failed("the manifest", e))?;
    Ok(reference.at_digest(&digest))
}

/// A request that never got an answer from a registry Tend speaks TLS to is
/// most often a plain-HTTP registry: say how to reach one.
fn plain_http_hint(
    settings: &Settings,
    registry: &str,
    e: &oci_client::errors::OciDistributionError,
) -> String {
    let unanswered = matches!(e, oci_client::errors::OciDistributionError::RequestError(_));
    if unanswered && !settings.insecure_registries.iter().any(|r| r == registry) {
        format!(
            " (Tend spoke HTTPS to {registry}: if it serves plain HTTP, pass --insecure or list it in [host.oci] insecure-registries)"
        )
    } else {
        String::new()
    }
}

/// `tend-author plugins push`.
pub async fn run(
    file: &Path,
    target: &str,
    settings: &Settings,
    sign_key: Option<&Path>,
) -> anyhow::Result<()> {
    let reference = Reference::parse(target).map_err(anyhow::Error::msg)?;
    let component = crate::untrusted::read(file, crate::untrusted::MAX_COMPONENT_BYTES)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", file.display()))?;
    let signer = match sign_key {
        Some(key) => Some(Signer::load(key, cosign_password()?.as_bytes())?),
        None => None,
    };
    let pinned = push(&component, &reference, settings, signer.as_ref()).await?;
    if signer.is_some() {
        eprintln!(
            "signed: {}",
            sign::signature_tag(pinned.digest().expect("pinned"))
        );
    }
    println!("{pinned}");
    Ok(())
}

/// `tend-author plugins keygen DIR`: DIR/cosign.key (encrypted with COSIGN_PASSWORD)
/// and DIR/cosign.pub, as `cosign generate-key-pair` writes them.
pub fn keygen(dir: &Path) -> anyhow::Result<()> {
    let (private, public) = Signer::generate(cosign_password()?.as_bytes())?;
    std::fs::create_dir_all(dir)?;
    let key = dir.join("cosign.key");
    if key.exists() {
        anyhow::bail!("{} exists: not overwriting a key", key.display());
    }
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&key)?;
        file.write_all(private.as_bytes())?;
    }
    super::cache::write_atomically(&dir.join("cosign.pub"), public.as_bytes())?;
    println!(
        "private key: {}\npublic key:  {}",
        key.display(),
        dir.join("cosign.pub").display()
    );
    Ok(())
}

fn cosign_password() -> anyhow::Result<String> {
    std::env::var("COSIGN_PASSWORD").map_err(|_| {
        anyhow::anyhow!("set COSIGN_PASSWORD to the key's password (empty for none), as for cosign")
    })
}
