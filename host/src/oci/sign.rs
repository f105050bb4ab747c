//! Keyed cosign signatures, as cosign writes them: a simple-signing payload
//! (JSON naming the repository and the manifest digest) signed with the key,
//! stored as the one layer of an artifact tagged `sha256-<hex>.sig` beside
//! the signed manifest, the signature in the layer's
//! `dev.cosignproject.cosign/signature` annotation. Keys are sigstore's
//! (cosign's formats): an encrypted private key (`ENCRYPTED SIGSTORE PRIVATE
//! KEY`, scrypt + secretbox, password from COSIGN_PASSWORD) and a PEM public
//! key.

use base64::Engine as _;
use sigstore::crypto::signing_key::SigStoreKeyPair;
use sigstore::crypto::{CosignVerificationKey, Signature, SigningScheme};
use std::path::Path;

pub const PAYLOAD_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
const PAYLOAD_TYPE: &str = "cosign container image signature";
/// A simple-signing payload is a few hundred bytes.
pub const MAX_PAYLOAD: u64 = 64 * 1024;
/// Signature layers looked at per artifact (each one a payload download).
pub const MAX_SIGNATURES: usize = 16;

/// The tag cosign stores the signature of `manifest_digest` under.
pub fn signature_tag(manifest_digest: &str) -> String {
    manifest_digest.replacen(':', "-", 1) + ".sig"
}

/// The payload cosign signs for `repository` (`registry/repo`) at `manifest_digest`.
pub fn payload(repository: &str, manifest_digest: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "critical": {
            "identity": { "docker-reference": repository },
            "image": { "docker-manifest-digest": manifest_digest },
            "type": PAYLOAD_TYPE,
        },
        "optional": null,
    }))
    .expect("a payload serializes")
}

/// A public key to verify with, and the file it came from (for messages).
pub struct Verifier {
    key: CosignVerificationKey,
    pub path: String,
}

impl Verifier {
    pub fn load(path: &Path) -> Result<Verifier, String> {
        let shown = path.display().to_string();
        let pem = crate::untrusted::read(path, crate::untrusted::MAX_TEXT_BYTES)
            .map_err(|e| format!("cannot read the cosign public key {shown}: {e}"))?;
        let key = CosignVerificationKey::try_from_pem(&pem).map_err(|e| {
            format!("{shown} is not a cosign public key (PEM, as `cosign generate-key-pair` writes cosign.pub): {e}")
        })?;
        Ok(Verifier { key, path: shown })
    }

    /// Check that `signature` (base64, as in the annotation) signs `payload`
    /// with this key and that the payload names `manifest_digest` in
    /// `repository` (`registry/repo`): without the repository, a signature
    /// made for one artifact would vouch for the same bytes anywhere.
    pub fn verify(
        &self,
        payload_bytes: &[u8],
        signature: &str,
        manifest_digest: &str,
        repository: &str,
    ) -> Result<(), String> {
        self.key
            .verify_signature(
                Signature::Base64Encoded(signature.as_bytes()),
                payload_bytes,
            )
            .map_err(|e| format!("the signature does not verify with {}: {e}", self.path))?;
        let parsed: serde_json::Value = serde_json::from_slice(payload_bytes)
            .map_err(|e| format!("the signed payload is not JSON: {e}"))?;
        let critical = &parsed["critical"];
        if critical["type"] != PAYLOAD_TYPE {
            return Err(format!(
                "the signed payload's type is {}, not {PAYLOAD_TYPE:?}",
                critical["type"]
            ));
        }
        let signed = critical["image"]["docker-manifest-digest"].as_str();
        if signed != Some(manifest_digest) {
            return Err(format!(
                "the signature (valid for {}) signs manifest {}, not {manifest_digest}",
                self.path,
                signed.unwrap_or("(none)")
            ));
        }
        let signed = critical["identity"]["docker-reference"].as_str();
        if !signed.is_some_and(|signed| same_repository(signed, repository)) {
            return Err(format!(
                "the signature (valid for {}) was made for repository {}, not {repository} (sign the artifact where it is pulled from)",
                self.path,
                signed.unwrap_or("(none)")
            ));
        }
        Ok(())
    }
}

/// Whether the payload's `signed` docker-reference names `repository`
/// (`registry/repo`). The cosign CLI writes the repository alone;
/// sigstore-rs writes the reference it was asked to sign, with its `:tag` or
/// `@digest` (tests/fixtures/cosign): either names the repository before it.
/// cosign names Docker Hub `index.docker.io/…`, a reference may say `docker.io/…`.
fn same_repository(signed: &str, repository: &str) -> bool {
    let hub = |r: &str| {
        r.strip_prefix("index.docker.io/")
            .map_or_else(|| r.to_string(), |rest| format!("docker.io/{rest}"))
    };
    hub(repository_of(signed)) == hub(repository)
}

/// `registry/repo` of a `registry/repo[:tag][@digest]` reference (a port's
/// colon is before the last `/`, a tag's after it).
fn repository_of(reference: &str) -> &str {
    let name = reference
        .split_once('@')
        .map_or(reference, |(name, _)| name);
    let last = name.rfind('/').map_or(0, |slash| slash + 1);
    match name[last..].find(':') {
        Some(colon) => &name[..last + colon],
        None => name,
    }
}

/// A private key to sign with (cosign's encrypted format).
pub struct Signer {
    keys: SigStoreKeyPair,
}

impl Signer {
    /// Read `path`, decrypted with `password` (COSIGN_PASSWORD for cosign).
    pub fn load(path: &Path, password: &[u8]) -> anyhow::Result<Signer> {
        let pem = crate::untrusted::read(path, crate::untrusted::MAX_TEXT_BYTES)
            .map_err(|e| anyhow::anyhow!("cannot read the signing key {}: {e}", path.display()))?;
        let keys = SigStoreKeyPair::from_encrypted_pem(&pem, password).map_err(|e| {
            anyhow::anyhow!(
                "{} is not a cosign private key that COSIGN_PASSWORD decrypts: {e}",
                path.display()
            )
        })?;
        Ok(Signer { keys })
    }

    /// A new ECDSA P-256 key pair (cosign's default): (encrypted private PEM, public PEM).
    pub fn generate(password: &[u8]) -> anyhow::Result<(String, String)> {
        let signer = SigningScheme::ECDSA_P256_SHA256_ASN1.create_signer()?;
        let keys = signer.to_sigstore_keypair()?;
        let private = keys.private_key_to_encrypted_pem(password)?;
        Ok((private.to_string(), keys.public_key_to_pem()?))
    }

    /// The public key, PEM.
    #[cfg(test)]
    pub fn public_pem(&self) -> anyhow::Result<String> {
        Ok(self.keys.public_key_to_pem()?)
    }

    /// The base64 signature of `payload`, as the annotation carries it.
    pub fn sign(&self, payload: &[u8]) -> anyhow::Result<String> {
        let scheme = match &self.keys {
            SigStoreKeyPair::ED25519(_) => SigningScheme::ED25519,
            SigStoreKeyPair::RSA(_) => SigningScheme::RSA_PKCS1_SHA256(0),
            SigStoreKeyPair::ECDSA(_) => SigningScheme::ECDSA_P256_SHA256_ASN1,
        };
        let signer = self.keys.to_sigstore_signer(&scheme)?;
        Ok(base64::engine::general_purpose::STANDARD.encode(signer.sign(payload)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const N: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";
    const R: &str = "127.0.0.1:5000/tend/chaos";

    fn verifier(public: &str) -> (tempfile::TempDir, Verifier) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cosign.pub");
        std::fs::write(&path, public).unwrap();
        let v = Verifier::load(&path).unwrap();
        (dir, v)
    }

    #[test]
    fn a_signature_verifies_only_with_its_key_and_for_its_manifest() {
        let (private, public) = Signer::generate(b"pw").unwrap();
        assert!(private.contains("ENCRYPTED SIGSTORE PRIVATE KEY"));
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("cosign.key");
        std::fs::write(&key, &private).unwrap();
        assert!(Signer::load(&key, b"wrong").is_err());
        let signer = Signer::load(&key, b"pw").unwrap();
        assert_eq!(signer.public_pem().unwrap(), public);

        let body = payload(R, M);
        let signature = signer.sign(&body).unwrap();
        let (_d, right) = verifier(&public);
        right.verify(&body, &signature, M, R).unwrap();
        // The payload names another manifest: a valid signature, the wrong artifact.
        let e = right.verify(&body, &signature, N, R).unwrap_err();
        assert!(e.contains("signs manifest") && e.contains(N), "{e}");
        // Another key.
        let (_, other) = Signer::generate(b"").unwrap();
        let (_d, wrong) = verifier(&other);
        let e = wrong.verify(&body, &signature, M, R).unwrap_err();
        assert!(
            e.contains("does not verify with") && e.contains("cosign.pub"),
            "{e}"
        );
        // An altered payload.
        let altered = payload("127.0.0.1:5000/tend/other", M);
        assert!(right.verify(&altered, &signature, M, R).is_err());
        // Signed for another repository: the same bytes, not this artifact.
        let elsewhere = payload("127.0.0.1:5000/tend/other", M);
        let signature = signer.sign(&elsewhere).unwrap();
        let e = right.verify(&elsewhere, &signature, M, R).unwrap_err();
        assert!(
            e.contains(
                "made for repository 127.0.0.1:5000/tend/other, not 127.0.0.1:5000/tend/chaos"
            ),
            "{e}"
        );
        // cosign's name for Docker Hub is the same repository as docker.io.
        let hub = payload("index.docker.io/tend/chaos", M);
        let signature = signer.sign(&hub).unwrap();
        right
            .verify(&hub, &signature, M, "docker.io/tend/chaos")
            .unwrap();
        assert_eq!(signature_tag(M), format!("sha256-{}.sig", &M[7..]));
    }

    #[test]
    fn a_docker_reference_with_a_tag_or_digest_names_its_repository() {
        for signed in [
            "127.0.0.1:5000/tend/chaos",
            "127.0.0.1:5000/tend/chaos:v1",
            "127.0.0.1:5000/tend/chaos@sha256:11",
            "127.0.0.1:5000/tend/chaos:v1@sha256:11",
        ] {
            assert!(same_repository(signed, R), "{signed}");
        }
        for signed in [
            "127.0.0.1:5000/tend/chaos-other:v1",
            "127.0.0.1:5000/tend:chaos",
            "127.0.0.1:5001/tend/chaos",
            "127.0.0.1:5000/tend/chaos/sub:v1",
            "",
        ] {
            assert!(!same_repository(signed, R), "{signed}");
        }
        assert!(same_repository(
            "index.docker.io/tend/chaos:1",
            "docker.io/tend/chaos"
        ));
        assert_eq!(repository_of("localhost:5000/a:b"), "localhost:5000/a");
    }

    #[test]
    fn a_public_key_file_that_is_not_a_key_names_the_file() {
        let (_d, _) = verifier(&Signer::generate(b"").unwrap().1);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cosign.pub");
        std::fs::write(&path, "not a key").unwrap();
        let e = Verifier::load(&path).err().unwrap();
        assert!(
            e.contains("cosign.pub") && e.contains("not a cosign public key"),
            "{e}"
        );
        let e = Verifier::load(&dir.path().join("absent.pub"))
            .err()
            .unwrap();
        assert!(e.contains("cannot read"), "{e}");
    }

    /// tests/fixtures/cosign, made with sigstore-rs 0.13.0 by tools/cosign-fixture.
    fn interop_dir() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/cosign")
    }

    fn interop_fixture(rel: &str) -> Vec<u8> {
        std::fs::read(interop_dir().join(rel)).unwrap()
    }

    /// The payload and signature annotation of a committed signature image.
    fn committed_signature(image: &str) -> (Vec<u8>, String) {
        let manifest: serde_json::Value =
            serde_json::from_slice(&interop_fixture(&format!("{image}/manifest.json"))).unwrap();
        let layer = &manifest["layers"][0];
        assert_eq!(layer["mediaType"], PAYLOAD_MEDIA_TYPE);
        let blob = layer["digest"].as_str().unwrap().replacen(':', "-", 1);
        let signature = layer["annotations"][SIGNATURE_ANNOTATION].as_str().unwrap();
        (
            interop_fixture(&format!("{image}/blobs/{blob}")),
            signature.to_string(),
        )
    }

    /// sigstore-rs's signature verifies here; Tend's, which sigstore-rs's
    /// `PublicKeyVerifier` accepted, is still what Tend signs (RFC 6979
    /// ECDSA is deterministic); the encrypted key sigstore-rs wrote loads.
    #[test]
    fn the_signatures_exchanged_with_sigstore_rs_verify_and_tend_still_signs_the_same() {
        const DIGEST: &str =
            "sha256:a27663016214a9ef8c740884f2f160b709db40d23aa0923cd036cec004af2c3e";
        let dir = interop_dir();
        let verifier = Verifier::load(&dir.join("cosign.pub")).unwrap();
        let (theirs, signature) = committed_signature("sigstore-rs-signed");
        verifier
            .verify(
                &theirs,
                &signature,
                DIGEST,
                "127.0.0.1:5917/tend/mirror-gate",
            )
            .unwrap();
        let repository = "127.0.0.1:5917/tend/tend-signed";
        let (ours, signature) = committed_signature("tend-signed");
        verifier
            .verify(&ours, &signature, DIGEST, repository)
            .unwrap();
        assert_eq!(payload(repository, DIGEST), ours);
        let signer = Signer::load(&dir.join("cosign.key"), b"tend-fixture").unwrap();
        assert_eq!(signer.sign(&ours).unwrap(), signature);
        assert_eq!(
            signer.public_pem().unwrap().as_bytes(),
            interop_fixture("cosign.pub")
        );
    }

    /// Fidelity with the real cosign CLI: a key `cosign generate-key-pair`
    /// wrote (empty password), from sigstore-rs's test data
    /// (tests/data/keys/cosign_generated_encrypted_empty_private.key). The
    /// file is not vendored here; point TEND_COSIGN_GENERATED_KEY at it.
    #[test]
    #[ignore = "needs TEND_COSIGN_GENERATED_KEY: a key pair written by the cosign CLI"]
    fn reads_a_key_the_cosign_cli_generated() {
        let path = std::env::var("TEND_COSIGN_GENERATED_KEY").expect("TEND_COSIGN_GENERATED_KEY");
        let signer = Signer::load(Path::new(&path), b"").unwrap();
        let body = payload(R, M);
        let signature = signer.sign(&body).unwrap();
        let (_d, v) = verifier(&signer.public_pem().unwrap());
        v.verify(&body, &signature, M, R).unwrap();
    }
}
