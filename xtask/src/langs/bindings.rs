//! The committed bindings of world `plugin` (sdk/c/bindings, sdk/go/wit,
//! sdk/src/generated): a plugin author needs no bindings generator, and no
//! workspace build of a Rust plugin compiles one. This module checks them
//! against wit/ with sdk/c/bindgen, a small generator on the wit-bindgen
//! crates that builds in well under a minute where the wit-bindgen CLI takes
//! minutes, and that also carries the WASI preview-1 reactor adapter.

use crate::{cargo, fmt, root, run};
use anyhow::{Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Check the Rust SDK's bindings (sdk/src/generated, formatted as `cargo
/// xtask fmt` formats) once per xtask run: `cargo xtask test` does so beside
/// its build, where stale ones would only show as the SDK's compile errors.
pub fn check_rust() -> Result<()> {
    static CHECKED: OnceLock<()> = OnceLock::new();
    if CHECKED.get().is_none() {
        crate::step("checking the Rust SDK's committed bindings against wit/ (sdk/c/bindgen)");
        rust_bindings(bless_asked())?;
        let _ = CHECKED.set(());
    }
    Ok(())
}

/// Write the Rust SDK's bindings anew (`cargo xtask gen`).
pub fn write_rust() -> Result<()> {
    rust_bindings(true)
}

fn rust_bindings(bless: bool) -> Result<()> {
    let committed = Path::new("sdk/src/generated");
    compare_or_write("rust", committed, None, fmt::rustfmt, bless)
}

/// TEND_BLESS=1: write fresh bindings over the committed ones.
fn bless_asked() -> bool {
    std::env::var_os("TEND_BLESS").is_some_and(|v| v == "1")
}

/// sdk/c/bindgen, built into target/tools/bindgen: its binary.
pub(super) fn bindgen() -> Result<PathBuf> {
    run(cargo().args([
        "build",
        "--quiet",
        "--locked",
        "--manifest-path",
        "sdk/c/bindgen/Cargo.toml",
        "--target-dir",
        "target/tools/bindgen",
    ]))?;
    Ok(root().join("target/tools/bindgen/debug/tend-bindgen"))
}

/// Generate LANG's bindings of wit/ afresh (then `finish` them, say with
/// gofmt) and compare them with the committed ones in `committed` (relative
/// to the root): every file, both ways, but those under `handwritten`
/// (relative to `committed`). With TEND_BLESS=1 set, write the fresh ones
/// over the committed ones instead.
pub(super) fn check_bindings(
    lang: &str,
    committed: &Path,
    handwritten: Option<&str>,
    finish: impl Fn(&Path) -> Result<()>,
) -> Result<()> {
    compare_or_write(lang, committed, handwritten, finish, bless_asked())
}

fn compare_or_write(
    lang: &str,
    committed: &Path,
    handwritten: Option<&str>,
    finish: impl Fn(&Path) -> Result<()>,
    bless: bool,
) -> Result<()> {
    let fresh = root().join("target/tools/bindings").join(lang);
    if fresh.exists() {
        std::fs::remove_dir_all(&fresh)?;
    }
    run(Command::new(bindgen()?)
        .arg(lang)
        .arg(root().join("wit"))
        .arg(&fresh))?;
    finish(&fresh)?;
    let mut stale = Vec::new();
    for file in files_under(&fresh)? {
        let rel = file.strip_prefix(&fresh)?;
        let target = root().join(committed).join(rel);
        let new = std::fs::read(&file)?;
        if std::fs::read(&target).ok().as_deref() == Some(new.as_slice()) {
            continue;
        }
        if bless {
            std::fs::create_dir_all(target.parent().unwrap())?;
            std::fs::write(&target, new)?;
        } else {
            stale.push(committed.join(rel).display().to_string());
        }
    }
    let kept = root().join(committed);
    for file in files_under(&kept)? {
        let rel = file.strip_prefix(&kept)?;
        if handwritten.is_some_and(|h| rel.starts_with(h)) || fresh.join(rel).exists() {
            continue;
        }
        if bless {
            std::fs::remove_file(&file)?;
        } else {
            stale.push(committed.join(rel).display().to_string());
        }
    }
    if !stale.is_empty() {
        bail!(
            "the committed {lang} bindings do not match wit/: {}; regenerate them with `TEND_BLESS=1 cargo xtask lang {lang}`",
            stale.join(", ")
        );
    }
    Ok(())
}

fn files_under(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            files.extend(files_under(&path)?);
        } else {
            files.push(path);
        }
    }
    Ok(files)
}
