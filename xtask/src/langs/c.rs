//! C plugins: the `tend-author new` template (templates/c) rendered as `c-probe`,
//! built by its build.sh (clang-19 for WASI preview 1, wasm-tools, the WASI
//! preview-1 reactor adapter) and unit-tested by its test.sh and the SDK's.
//!
//! The bindings of world `plugin` are committed (sdk/c/bindings, and
//! sdk/go/wit for Go) so a plugin author needs no bindings generator; this
//! module checks them against wit/ with sdk/c/bindgen, a small generator on
//! the wit-bindgen crates that builds in about half a minute where the
//! wit-bindgen CLI takes minutes, and that also carries the adapter. The
//! helpers shared with the Go module live here.

use super::{collect, render, rendered, script, script_command};
use crate::tally::Tally;
use crate::{cargo, root, run, step, venv_bin_dir};
use anyhow::{Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

pub const LANG: super::Lang = super::Lang {
    name: "c",
    plugins,
    test,
};

fn plugins(out: &Path) -> Result<()> {
    check_bindings("c", Path::new("sdk/c/bindings"), None, |_| Ok(()))?;
    let dir = render("c")?;
    script(&dir, "build.sh", &tools()?, &[])?;
    collect(&dir, "c", out)
}

fn test(tally: &mut Tally) -> Result<()> {
    step("testing the C SDK");
    tally.run("the C SDK", &mut Command::new(root().join("sdk/c/test.sh")))?;
    tally.run(
        "the C template",
        &mut script_command(&rendered("c")?, "test.sh", &[], &[])?,
    )
}

/// The directories the templates' scripts find their tools in, before PATH:
/// target/venv/bin (wasm-tools, go). Extracts the WASI adapter they read
/// from target/tools first.
pub(super) fn tools() -> Result<Vec<PathBuf>> {
    let adapter = root().join("target/tools/wasi_snapshot_preview1.reactor.wasm");
    if !adapter.exists() {
        step("extracting the WASI preview-1 reactor adapter");
        run(Command::new(bindgen()?).arg("adapter").arg(&adapter))?;
    }
    Ok(vec![venv_bin_dir()?])
}

/// sdk/c/bindgen, built into target/tools/bindgen: its binary.
fn bindgen() -> Result<PathBuf> {
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
    let fresh = root().join("target/tools/bindings").join(lang);
    if fresh.exists() {
        std::fs::remove_dir_all(&fresh)?;
    }
    run(Command::new(bindgen()?)
        .arg(lang)
        .arg(root().join("wit"))
        .arg(&fresh))?;
    finish(&fresh)?;
    let bless = std::env::var_os("TEND_BLESS").is_some_and(|v| v == "1");
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
