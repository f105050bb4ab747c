//! One pull: resolve a tag (or take the pinned digest), the manifest, the
//! component and, with a key, the cosign signature. The cache answers
//! whatever it holds intact, so a cached digest needs no registry.

use super::cache::{Cache, sha256};
use super::reference::Reference;
use super::registry::Registry;
use super::sign::{self, Verifier};
use super::{MAX_MANIFEST, Settings, Source, WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE};
use crate::runtime::{CompiledPlugin, LoadError};
use crate::text::peer_answer;
use oci_client::manifest::{IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE, OciImageManifest};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A component ready to load.
#[derive(Debug, Clone, PartialEq)]
pub struct Pulled {
    /// The cached component file.
    pub path: PathBuf,
    /// Its digest (`sha256:<hex>`), as the verified manifest names it.
    pub digest: String,
    /// `oci://REGISTRY/REPOSITORY@sha256:…`: what runs (the tag's pin).
    pub pinned: Reference,
    /// Whether the registry was reached (false: all from the cache).
    pub from_registry: bool,
}

/// Bring `source` into the cache under `cache_dir` (verified), within
/// `settings.timeout`. The error says what failed and what to do.
pub async fn fetch(
    source: &Source,
    settings: &Settings,
    cache_dir: &Path,
) -> Result<Pulled, String> {
    let what = &source.reference;
    match tokio::time::timeout(
        settings.timeout,
        fetch_unbounded(source, settings, cache_dir),
    )
    .await
    {
        Ok(result) => result.map_err(|e| format!("{what}: {e}")),
        Err(_) => Err(format!(
            "{what}: the pull did not finish within {} (raise [host.oci] timeout, or check the registry)",
            humantime::format_duration(settings.timeout)
        )),
    }
}

impl Pulled {
    /// `compiled`, if built from the verified component. The cached file was
    /// hashed by the pull and is read again to compile: one changed or
    /// removed in between must not run, nor stop the version running (a
    /// fetch error keeps it), so both are refused as fetch errors.
    pub fn checked(
        &self,
        compiled: Result<Arc<CompiledPlugin>, LoadError>,
    ) -> Result<Arc<CompiledPlugin>, LoadError> {
        let what = &self.pinned;
        match compiled {
            Ok(plugin) if plugin.digest != self.digest => Err(LoadError::Fetch(format!(
                "{what}: the cached component {} changed on disk after it was verified (digest {}, the manifest names {}): refused",
                self.path.display(),
                plugin.digest,
                self.digest
            ))),
            Err(LoadError::Read { path, source }) => Err(LoadError::Fetch(format!(
                "{what}: the cached component {} cannot be read after it was verified: {source}",
                path.display()
            ))),
            other => other,
        }
    }
}

struct Remote {
    registry: Registry,
    max_blob_size: u64,
}

async fn fetch_unbounded(
    source: &Source,
    settings: &Settings,
    cache_dir: &Path,
) -> Result<Pulled, String> {
    let cache = Cache::new(cache_dir);
    let verifier = source.key.as_deref().map(Verifier::load).transpose()?;
    let reference = &source.reference;
    let mut remote: Option<Remote> = None;
    let connect = |remote: &mut Option<Remote>| -> Result<(), String> {
        if remote.is_none() {
            let auth = super::credentials(settings, &reference.registry)?;
            *remote = Some(Remote {
                registry: Registry::new(settings, &reference.registry, auth)?,
                max_blob_size: settings.max_blob_size.0,
            });
        }
        Ok(())
    };
    // The digest to run: the reference's, or what the tag resolves to now
    // (its pin when the registry cannot say).
    let (manifest_digest, manifest) = match reference.digest() {
        Some(digest) => (digest.to_string(), None),
        None => {
            connect(&mut remote)?;
            let r = remote.as_ref().expect("connected");
            match r.manifest(reference).await {
                Ok((digest, bytes)) => (digest, Some(bytes)),
                Err(e) => match cache.pinned(reference) {
                    Some(pinned) => {
                        tracing::warn!(reference = %reference, %pinned, "cannot resolve the tag, using the digest it last resolved to: {e}");
                        (pinned, None)
                    }
                    None => return Err(e),
                },
            }
        }
    };
    let pinned = reference.at_digest(&manifest_digest);
    let manifest = match manifest.or_else(|| cache.manifest(&manifest_digest)) {
        Some(bytes) => bytes,
        None => {
            connect(&mut remote)?;
            remote
                .as_ref()
                .expect("connected")
                .manifest(&pinned)
                .await?
                .1
        }
    };
    let layer = wasm_layer(&manifest, settings)?;
    if !cache.has_blob(&layer.digest) {
        connect(&mut remote)?;
        let bytes = remote
            .as_ref()
            .expect("connected")
            .blob(&pinned, &layer)
            .await?;
        cache
            .put_blob(&layer.digest, &bytes)
            .map_err(|e| format!("cannot write the cache in {}: {e}", cache_dir.display()))?;
    }
    if let Some(verifier) = &verifier {
        let cached_ok = cache
            .signature(&manifest_digest)
            .and_then(|saved| Saved::parse(&saved))
            .is_some_and(|s| {
                verifier
                    .verify(
                        &s.payload,
                        &s.signature,
                        &manifest_digest,
                        &reference.repository_name(),
                    )
                    .is_ok()
            });
        if !cached_ok {
            connect(&mut remote)?;
            let saved = remote
                .as_ref()
                .expect("connected")
                .signature(&pinned, verifier)
                .await?;
            let _ = cache.put_signature(&manifest_digest, &saved.to_json());
        }
    }
    // The manifest last: a cached manifest means all it names was verified.
    cache
        .put_manifest(&manifest_digest, &manifest)
        .map_err(|e| format!("cannot write the cache in {}: {e}", cache_dir.display()))?;
    // And only then the tag's pin: the registry may be unreachable next
    // time, and the pin must not lead to an artifact that failed its checks.
    if reference.digest().is_none() {
        let _ = cache.pin(reference, &manifest_digest);
    }
    Ok(Pulled {
        path: cache.blob_path(&layer.digest),
        digest: layer.digest,
        pinned,
        from_registry: remote.is_some(),
    })
}

/// The one component layer of a wasm artifact manifest, checked.
fn wasm_layer(
    manifest: &[u8],
    settings: &Settings,
) -> Result<oci_client::manifest::OciDescriptor, String> {
    let parsed: OciImageManifest = serde_json::from_slice(manifest).map_err(|e| {
        format!(
            "the manifest is not an OCI image manifest: {}",
            json_error(&e)
        )
    })?;
    if parsed.config.media_type != WASM_CONFIG_MEDIA_TYPE {
        return Err(format!(
            "not a wasm artifact: its config media type is \"{}\", not {WASM_CONFIG_MEDIA_TYPE:?} (publish it with `tend-author plugins push`, `wkg oci push` or `spin registry push`)",
            peer_answer(parsed.config.media_type.as_bytes())
        ));
    }
    let [layer] = parsed.layers.as_slice() else {
        return Err(format!(
            "a wasm artifact has exactly one layer, this one has {}",
            parsed.layers.len()
        ));
    };
    if layer.media_type != WASM_LAYER_MEDIA_TYPE {
        return Err(format!(
            "its layer's media type is \"{}\", not {WASM_LAYER_MEDIA_TYPE:?}",
            peer_answer(layer.media_type.as_bytes())
        ));
    }
    super::reference::validate_digest(&layer.digest)?;
    if layer.size < 0 || layer.size as u64 > settings.max_blob_size.0 {
        return Err(format!(
            "the component is {} bytes, over [host.oci] max-blob-size ({} bytes)",
            layer.size, settings.max_blob_size.0
        ));
    }
    Ok(layer.clone())
}

/// A verified signature as cached: the payload and its base64 signature.
struct Saved {
    payload: Vec<u8>,
    signature: String,
}

impl Saved {
    fn parse(bytes: &[u8]) -> Option<Saved> {
        use base64::Engine as _;
        let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
        Some(Saved {
            payload: base64::engine::general_purpose::STANDARD
                .decode(v["payload"].as_str()?)
                .ok()?,
            signature: v["signature"].as_str()?.to_string(),
        })
    }

    fn to_json(&self) -> Vec<u8> {
        use base64::Engine as _;
        serde_json::to_vec(&serde_json::json!({
            "payload": base64::engine::general_purpose::STANDARD.encode(&self.payload),
            "signature": self.signature,
        }))
        .expect("serializes")
    }
}

impl Remote {
    /// The manifest `reference` names and its digest (the sha256 of the bytes,
    /// which must equal a digest the reference names).
    async fn manifest(&self, reference: &Reference) -> Result<(String, Vec<u8>), String> {
        let bytes = self
            .registry
            .manifest(
                reference,
                &[OCI_IMAGE_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE],
                MAX_MANIFEST as u64,
            )
            .await?;
        let digest = sha256(&bytes);
        if let Some(expected) = reference.digest()
            && expected != digest
        {
            return Err(format!(
                "the registry's manifest has digest {digest}, not {expected}: refused (a registry or proxy altered it)"
            ));
        }
        Ok((digest, bytes))
    }

    /// The blob `layer` describes, at most its size (and the cap), hashed.
    async fn blob(
        &self,
        reference: &Reference,
        layer: &oci_client::manifest::OciDescriptor,
    ) -> Result<Vec<u8>, String> {
        let cap = (layer.size.max(0) as u64).min(self.max_blob_size);
        let bytes = self.registry.blob(reference, &layer.digest, cap).await?;
        let actual = sha256(&bytes);
        if actual != layer.digest {
            return Err(format!(
                "digest mismatch: the component the registry sent has digest {actual}, the manifest names {}: refused (the registry's copy is corrupt or was tampered with; push it again)",
                layer.digest
            ));
        }
        Ok(bytes)
    }

    /// The cosign signature of `pinned` that verifies with `verifier`.
    async fn signature(&self, pinned: &Reference, verifier: &Verifier) -> Result<Saved, String> {
        let digest = pinned.digest().expect("pinned by digest");
        let tag = pinned.at_tag(&sign::signature_tag(digest));
        let missing = |why: String| {
            format!(
                "no cosign signature verifies with {}: {why}; sign it (`cosign sign --key cosign.key {}` or `tend-author plugins push … --sign-key cosign.key`) or name the right key in verify",
                verifier.path,
                pinned.to_string().trim_start_matches("oci://"),
            )
        };
        let (_, bytes) = self
            .manifest(&tag)
            .await
            .map_err(|e| missing(format!("{tag}: {e}")))?;
        let manifest: OciImageManifest = serde_json::from_slice(&bytes).map_err(|e| {
            missing(format!(
                "{tag} is not an image manifest: {}",
                json_error(&e)
            ))
        })?;
        let mut why = Vec::new();
        // cosign appends a layer per signing; a registry that lists thousands
        // gets the first few looked at.
        for layer in manifest.layers.iter().take(sign::MAX_SIGNATURES) {
            if layer.media_type != sign::PAYLOAD_MEDIA_TYPE {
                continue;
            }
            if let Err(e) = super::reference::validate_digest(&layer.digest) {
                why.push(e);
                continue;
            }
            let Some(signature) = layer
                .annotations
                .as_ref()
                .and_then(|a| a.get(sign::SIGNATURE_ANNOTATION))
            else {
                why.push("a payload without a signature annotation".to_string());
                continue;
            };
            if layer.size < 0 || layer.size as u64 > sign::MAX_PAYLOAD {
                why.push(format!("a payload of {} bytes", layer.size));
                continue;
            }
            let payload = match self.blob(&tag, layer).await {
                Ok(payload) => payload,
                Err(e) => {
                    why.push(e);
                    continue;
                }
            };
            match verifier.verify(&payload, signature, digest, &pinned.repository_name()) {
                Ok(()) => {
                    return Ok(Saved {
                        payload,
                        signature: signature.clone(),
                    });
                }
                Err(e) => why.push(e),
            }
        }
        if why.is_empty() {
            why.push(format!("{tag} holds no simple-signing payload"));
        }
        Err(missing(why.join("; ")))
    }
}

/// Why `e`'s JSON was refused, without serde's quotes of the values (a
/// manifest may come from wherever the registry redirected: what it holds is
/// never echoed).
fn json_error(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let what = match e.classify() {
        Category::Syntax => "not JSON",
        Category::Eof => "JSON cut off",
        Category::Data => "JSON of another shape",
        Category::Io => "unreadable",
    };
    format!("{what} (at line {}, column {})", e.line(), e.column())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(config: &str, layers: &[(&str, i64)]) -> Vec<u8> {
        let layers: Vec<_> = layers
            .iter()
            .map(|(t, size)| serde_json::json!({"mediaType": t, "digest": sha256(t.as_bytes()), "size": size}))
            .collect();
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_IMAGE_MEDIA_TYPE,
            "config": {"mediaType": config, "digest": sha256(b"{}"), "size": 2},
            "layers": layers,
        }))
        .unwrap()
    }

    #[test]
    fn only_the_wasm_artifact_layout_within_the_size_cap_is_accepted() {
        let s = Settings::default();
        let ok = manifest(WASM_CONFIG_MEDIA_TYPE, &[(WASM_LAYER_MEDIA_TYPE, 10)]);
        assert_eq!(wasm_layer(&ok, &s).unwrap().size, 10);
        let image = manifest(
            "application/vnd.oci.image.config.v1+json",
            &[(WASM_LAYER_MEDIA_TYPE, 10)],
        );
        assert!(
            wasm_layer(&image, &s)
                .unwrap_err()
                .contains("not a wasm artifact")
        );
        let two = manifest(
            WASM_CONFIG_MEDIA_TYPE,
            &[(WASM_LAYER_MEDIA_TYPE, 1), (WASM_LAYER_MEDIA_TYPE, 1)],
        );
        assert!(
            wasm_layer(&two, &s)
                .unwrap_err()
                .contains("exactly one layer")
        );
        let tar = manifest(
            WASM_CONFIG_MEDIA_TYPE,
            &[("application/vnd.oci.image.layer.v1.tar", 1)],
        );
        assert!(wasm_layer(&tar, &s).unwrap_err().contains("media type"));
        let big = manifest(WASM_CONFIG_MEDIA_TYPE, &[(WASM_LAYER_MEDIA_TYPE, 65 << 20)]);
        assert!(wasm_layer(&big, &s).unwrap_err().contains("max-blob-size"));
        assert!(
            wasm_layer(b"[]", &s)
                .unwrap_err()
                .contains("not an OCI image manifest")
        );
    }

    #[test]
    fn what_a_manifest_holds_is_shown_bounded_or_not_at_all() {
        let s = Settings::default();
        // serde would quote the value; the error gives only where it is.
        let e = wasm_layer(br#"{"schemaVersion": "INTERNAL-SECRET"}"#, &s).unwrap_err();
        assert!(!e.contains("INTERNAL-SECRET"), "{e}");
        assert!(
            e.ends_with("JSON of another shape (at line 1, column 35)"),
            "{e}"
        );
        let huge = "m\n".repeat(1 << 19);
        let image = manifest(&huge, &[(WASM_LAYER_MEDIA_TYPE, 10)]);
        let e = wasm_layer(&image, &s).unwrap_err();
        assert!(e.len() < 1024 && !e.contains('\n'), "{} bytes", e.len());
        let digest = format!("sha256:{}", "\n".repeat(1 << 20));
        let e = super::super::reference::validate_digest(&digest).unwrap_err();
        assert!(e.len() < 1024 && !e.contains('\n'), "{} bytes", e.len());
    }

    #[tokio::test]
    async fn a_cached_digest_needs_no_registry_and_a_missing_one_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let component = b"\0asm\x0d\0\x01\0".to_vec();
        let layer_digest = sha256(&component);
        let m = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "config": {"mediaType": WASM_CONFIG_MEDIA_TYPE, "digest": sha256(b"{}"), "size": 2},
            "layers": [{"mediaType": WASM_LAYER_MEDIA_TYPE, "digest": layer_digest, "size": component.len()}],
        }))
        .unwrap();
        let manifest_digest = sha256(&m);
        // Nothing listens on port 9 of loopback: any network use fails.
        let settings = Settings {
            insecure_registries: vec!["127.0.0.1:9".into()],
            ..Settings::default()
        };
        let source = Source {
            reference: Reference::parse(&format!("oci://127.0.0.1:9/tend/x@{manifest_digest}"))
                .unwrap(),
            key: None,
        };
        let e = fetch(&source, &settings, dir.path()).await.unwrap_err();
        assert!(
            e.contains("registry 127.0.0.1:9") && e.contains("reachable"),
            "{e}"
        );
        cache.put_blob(&layer_digest, &component).unwrap();
        cache.put_manifest(&manifest_digest, &m).unwrap();
        let pulled = fetch(&source, &settings, dir.path()).await.unwrap();
        assert!(!pulled.from_registry);
        assert_eq!(pulled.path, cache.blob_path(&layer_digest));
        assert_eq!(pulled.pinned, source.reference);
        assert_eq!(pulled.digest, layer_digest);
        // The cached file vanished before it was compiled: a fetch error
        // (the running version stays), not a missing plugin file.
        let vanished = pulled.checked(Err(LoadError::Read {
            path: pulled.path.clone(),
            source: std::io::ErrorKind::NotFound.into(),
        }));
        let Err(LoadError::Fetch(e)) = vanished else {
            panic!("not a fetch error");
        };
        assert!(e.contains("cannot be read after it was verified"), "{e}");
        // A key turns the cached pull into one that needs the signature.
        let (_, public) = sign::Signer::generate(b"").unwrap();
        let key = dir.path().join("cosign.pub");
        std::fs::write(&key, public).unwrap();
        let signed = Source {
            key: Some(key),
            ..source
        };
        let e = fetch(&signed, &settings, dir.path()).await.unwrap_err();
        assert!(
            e.contains("no cosign signature verifies with") && e.contains("cosign.pub"),
            "{e}"
        );
    }
}
