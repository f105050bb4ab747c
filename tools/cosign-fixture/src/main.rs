//! The cosign interoperability fixtures of tests/fixtures/cosign/, made and
//! checked with sigstore-rs 0.13.0 (crate `sigstore`, feature `cosign`): its
//! key generation in cosign's formats, its cosign signing code
//! (`SignatureLayer` + `PrivateKeySigner`, pushed by `Client::push_signature`)
//! and its cosign verification flow (`trusted_signature_layers` +
//! `verify_constraints` with `PublicKeyVerifier`). Talks plain HTTP to a local
//! registry. See README.md for the commands.
//!
//!   cosign-fixture keygen DIR                  DIR/cosign.key (password below), DIR/cosign.pub
//!   cosign-fixture sign KEY IMAGE OUT          sign IMAGE, push its signature, save what was pushed in OUT
//!   cosign-fixture verify PUB IMAGE [OUT]      verify IMAGE's signature with PUB; save it in OUT

use anyhow::{Context, bail};
use oci_client::manifest::OciImageManifest;
use sha2::Digest as _;
use sigstore::cosign::constraint::PrivateKeySigner;
use sigstore::cosign::verification_constraint::{PublicKeyVerifier, VerificationConstraintVec};
use sigstore::cosign::{Constraint, CosignCapabilities, SignatureLayer, verify_constraints};
use sigstore::crypto::SigningScheme;
use sigstore::registry::{Auth, ClientConfig, ClientProtocol, OciReference};
use std::path::{Path, PathBuf};
use zeroize::Zeroizing;

/// The fixture key's password (as COSIGN_PASSWORD): a test key, not a secret.
const PASSWORD: &str = "tend-fixture";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["keygen", dir] => keygen(Path::new(dir)),
        ["sign", key, image, out] => sign(Path::new(key), &image.parse()?, Path::new(out)).await,
        ["verify", public, image] => verify(Path::new(public), &image.parse()?, None).await,
        ["verify", public, image, out] => {
            verify(Path::new(public), &image.parse()?, Some(Path::new(out))).await
        }
        _ => {
            bail!("usage: cosign-fixture keygen DIR | sign KEY IMAGE OUT | verify PUB IMAGE [OUT]")
        }
    }
}

/// An ECDSA P-256 pair (cosign's default) in cosign's formats.
fn keygen(dir: &Path) -> anyhow::Result<()> {
    let signer = SigningScheme::ECDSA_P256_SHA256_ASN1.create_signer()?;
    let keys = signer.to_sigstore_keypair()?;
    let private = keys.private_key_to_encrypted_pem(PASSWORD.as_bytes())?;
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("cosign.key"), private.as_bytes())?;
    std::fs::write(dir.join("cosign.pub"), keys.public_key_to_pem()?)?;
    println!(
        "wrote {0}/cosign.key (password {PASSWORD:?}) and {0}/cosign.pub",
        dir.display()
    );
    Ok(())
}

fn client() -> anyhow::Result<sigstore::cosign::Client> {
    let config = ClientConfig {
        protocol: ClientProtocol::Http,
        ..ClientConfig::default()
    };
    Ok(sigstore::cosign::ClientBuilder::default()
        .with_oci_client_config(config)
        .build()?)
}

/// What `examples/cosign/sign` of sigstore-rs does: the simple-signing
/// payload for IMAGE's manifest digest, signed by `PrivateKeySigner`, pushed
/// as the signature image; then what the registry holds under that tag is
/// saved in `out`.
async fn sign(key: &Path, image: &OciReference, out: &Path) -> anyhow::Result<()> {
    let mut client = client()?;
    let auth = Auth::Anonymous;
    let (signature_image, digest) = client.triangulate(image, &auth).await?;
    let mut layer = SignatureLayer::new_unsigned(image, &digest)?;
    let signer = PrivateKeySigner::new_with_raw(
        Zeroizing::new(std::fs::read(key).with_context(|| format!("reading {}", key.display()))?),
        Zeroizing::new(PASSWORD.as_bytes().to_vec()),
        &SigningScheme::ECDSA_P256_SHA256_ASN1,
    )?;
    signer.add_constraint(&mut layer)?;
    client
        .push_signature(None, &auth, &signature_image, vec![layer])
        .await?;
    println!("signed {image} (manifest {digest}): pushed {signature_image}");
    save(&signature_image, out).await
}

/// sigstore-rs's cosign verification: the signature image's layers that
/// are trusted (payload digest checked, its manifest digest the image's),
/// then the `PublicKeyVerifier` constraint over them.
async fn verify(public: &Path, image: &OciReference, out: Option<&Path>) -> anyhow::Result<()> {
    let mut client = client()?;
    let auth = Auth::Anonymous;
    let (signature_image, digest) = client.triangulate(image, &auth).await?;
    let layers = client
        .trusted_signature_layers(&auth, &digest, &signature_image)
        .await?;
    println!(
        "{image}: manifest {digest}, signature image {signature_image}, {} layer(s)",
        layers.len()
    );
    for layer in &layers {
        println!("  payload: {}", String::from_utf8_lossy(&layer.raw_data));
        println!(
            "  signature: {}",
            layer.signature.as_deref().unwrap_or("(none)")
        );
    }
    let pem = std::fs::read(public).with_context(|| format!("reading {}", public.display()))?;
    let constraints: VerificationConstraintVec = vec![Box::new(PublicKeyVerifier::new(
        &pem,
        &SigningScheme::ECDSA_P256_SHA256_ASN1,
    )?)];
    match verify_constraints(&layers, constraints.iter()) {
        Ok(()) => println!(
            "verified with {}: sigstore-rs's PublicKeyVerifier is satisfied",
            public.display()
        ),
        Err(e) => bail!(
            "NOT verified with {}: {} unsatisfied constraint(s)",
            public.display(),
            e.unsatisfied_constraints.len()
        ),
    }
    if let Some(out) = out {
        save(&signature_image, out).await?;
    }
    Ok(())
}

/// Save the signature image as the registry serves it: `manifest.json` (the
/// exact bytes) and each blob it names under `blobs/sha256-<hex>`.
async fn save(signature_image: &OciReference, out: &Path) -> anyhow::Result<()> {
    let reference: oci_client::Reference = signature_image.to_string().parse()?;
    let client = oci_client::Client::new(oci_client::client::ClientConfig {
        protocol: oci_client::client::ClientProtocol::Http,
        ..Default::default()
    });
    let auth = oci_client::secrets::RegistryAuth::Anonymous;
    let (manifest, digest) = client
        .pull_manifest_raw(
            &reference,
            &auth,
            &[
                oci_client::manifest::OCI_IMAGE_MEDIA_TYPE,
                oci_client::manifest::IMAGE_MANIFEST_MEDIA_TYPE,
            ],
        )
        .await?;
    std::fs::create_dir_all(out.join("blobs"))?;
    std::fs::write(out.join("manifest.json"), &manifest)?;
    println!("saved {reference} (manifest {digest}) in {}", out.display());
    let parsed: OciImageManifest = serde_json::from_slice(&manifest)?;
    for descriptor in std::iter::once(&parsed.config).chain(&parsed.layers) {
        let mut blob = Vec::new();
        client.pull_blob(&reference, descriptor, &mut blob).await?;
        let actual = format!("sha256:{:x}", sha2::Sha256::digest(&blob));
        if actual != descriptor.digest {
            bail!("blob {} has digest {actual}", descriptor.digest);
        }
        let file: PathBuf = out
            .join("blobs")
            .join(descriptor.digest.replacen(':', "-", 1));
        std::fs::write(&file, &blob)?;
        println!(
            "  {} {} ({} bytes)",
            descriptor.media_type,
            file.display(),
            blob.len()
        );
    }
    Ok(())
}
