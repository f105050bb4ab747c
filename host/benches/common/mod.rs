//! Shared by the bench binaries.

use std::path::{Path, PathBuf};

/// target/plugins, where `cargo xtask plugins` puts the built plugins.
pub fn plugins_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    assert!(
        dir.join("chaos.wasm").exists(),
        "run `cargo xtask plugins` first"
    );
    dir
}
