//! Content digests, one way for everything Tend names by content: a
//! component (as OCI and `tend status` write it), a config file's text (its
//! part of a node's revision), a compiled artifact's cache key.

use sha2::{Digest, Sha256};

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", sha256_hex(bytes))
}
