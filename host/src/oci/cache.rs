//! Pulled artifacts by digest, under `<cache-dir>/oci/`: a restart, or a
//! config naming a digest already here, needs no registry. Every file is
//! written to a temporary file beside it and renamed into place, and every
//! read is hashed again, so a torn or altered file is a miss, never a plugin.
//!
//! - `manifests/<hex>`: a manifest, by its sha256.
//! - `blobs/<hex>.wasm`: a component (the manifest's one layer), by its sha256.
//! - `signatures/<hex>.json`: the cosign signature that verified a manifest,
//!   checked again (offline) against the key the config names now.
//! - `tags/<sha256 of oci://REGISTRY/REPOSITORY:TAG>`: the digest a tag last
//!   resolved to, used when the registry cannot be reached.

use super::reference::{Reference, validate_digest};
use std::path::{Path, PathBuf};

pub struct Cache {
    root: PathBuf,
}

pub(crate) use crate::runtime::sha256_digest as sha256;

fn hex_of(digest: &str) -> &str {
    digest.strip_prefix("sha256:").unwrap_or(digest)
}

impl Cache {
    pub fn new(cache_dir: &Path) -> Cache {
        Cache {
            root: cache_dir.join("oci"),
        }
    }

    /// Where the component with layer digest `digest` lives once cached.
    pub fn blob_path(&self, digest: &str) -> PathBuf {
        self.root
            .join("blobs")
            .join(format!("{}.wasm", hex_of(digest)))
    }

    fn manifest_path(&self, digest: &str) -> PathBuf {
        self.root.join("manifests").join(hex_of(digest))
    }

    fn signature_path(&self, digest: &str) -> PathBuf {
        self.root
            .join("signatures")
            .join(format!("{}.json", hex_of(digest)))
    }

    fn tag_path(&self, reference: &Reference) -> PathBuf {
        self.root
            .join("tags")
            .join(hex_of(&sha256(reference.to_string().as_bytes())))
    }

    /// The manifest with `digest`, if cached and intact.
    pub fn manifest(&self, digest: &str) -> Option<Vec<u8>> {
        read_verified(&self.manifest_path(digest), digest)
    }

    /// Whether the component with `digest` is cached and intact.
    pub fn has_blob(&self, digest: &str) -> bool {
        read_verified(&self.blob_path(digest), digest).is_some()
    }

    pub fn signature(&self, manifest_digest: &str) -> Option<Vec<u8>> {
        std::fs::read(self.signature_path(manifest_digest)).ok()
    }

    /// The digest `reference` (a tag) resolved to last time.
    pub fn pinned(&self, reference: &Reference) -> Option<String> {
        let text = std::fs::read_to_string(self.tag_path(reference)).ok()?;
        let digest = text.trim();
        validate_digest(digest).ok()?;
        Some(digest.to_string())
    }

    pub fn put_manifest(&self, digest: &str, bytes: &[u8]) -> std::io::Result<()> {
        write_atomically(&self.manifest_path(digest), bytes)
    }

    pub fn put_blob(&self, digest: &str, bytes: &[u8]) -> std::io::Result<()> {
        write_atomically(&self.blob_path(digest), bytes)
    }

    pub fn put_signature(&self, manifest_digest: &str, bytes: &[u8]) -> std::io::Result<()> {
        write_atomically(&self.signature_path(manifest_digest), bytes)
    }

    pub fn pin(&self, reference: &Reference, digest: &str) -> std::io::Result<()> {
        write_atomically(&self.tag_path(reference), digest.as_bytes())
    }
}

fn read_verified(path: &Path, digest: &str) -> Option<Vec<u8>> {
    let bytes = std::fs::read(path).ok()?;
    (sha256(&bytes) == digest).then_some(bytes)
}

/// A temporary file in the same folder, synced, then renamed over `path`.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().expect("cache paths have a folder");
    crate::atomic::create_private_dir(dir)?;
    crate::atomic::write(path, 0o600, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_a_torn_or_altered_file_is_a_miss() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let blob = b"\0asm component".to_vec();
        let digest = sha256(&blob);
        assert!(!cache.has_blob(&digest));
        cache.put_blob(&digest, &blob).unwrap();
        assert!(cache.has_blob(&digest));
        assert!(
            cache
                .blob_path(&digest)
                .starts_with(dir.path().join("oci/blobs"))
        );
        std::fs::write(cache.blob_path(&digest), b"\0asm altered").unwrap();
        assert!(!cache.has_blob(&digest));

        let manifest = br#"{"schemaVersion":2}"#;
        let m = sha256(manifest);
        cache.put_manifest(&m, manifest).unwrap();
        assert_eq!(cache.manifest(&m).as_deref(), Some(&manifest[..]));
        assert_eq!(cache.manifest(&digest), None);
        // No temporary files are left beside the entries.
        let left: Vec<_> = std::fs::read_dir(dir.path().join("oci/manifests"))
            .unwrap()
            .collect();
        assert_eq!(left.len(), 1);
    }

    #[test]
    fn tags_pin_the_digest_they_resolved_to() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let tag = Reference::parse("oci://127.0.0.1:5000/tend/chaos:v1").unwrap();
        assert_eq!(cache.pinned(&tag), None);
        let digest = sha256(b"manifest");
        cache.pin(&tag, &digest).unwrap();
        assert_eq!(cache.pinned(&tag), Some(digest.clone()));
        assert_eq!(cache.pinned(&tag.at_tag("v2")), None);
        // A pin file that is not a digest is ignored.
        std::fs::write(cache.tag_path(&tag), "../../etc/passwd").unwrap();
        assert_eq!(cache.pinned(&tag), None);
    }
}
