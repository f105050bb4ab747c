//! `cargo xtask fmt`: rustfmt over every Rust file git tracks. `cargo fmt`
//! follows `mod` declarations, so it never reaches the capability modules
//! that the host's and the SDK's registration lists declare through a macro;
//! this names each file. `cargo xtask test` runs the check first.

use crate::{root, run, step};
use anyhow::{Context, Result, ensure};
use std::path::Path;
use std::process::Command;

/// rustfmt as every file is formatted (generated code too).
pub fn rustfmt_command() -> Command {
    let mut rustfmt = Command::new("rustfmt");
    rustfmt.args(["--edition", "2024"]);
    rustfmt
}

/// Format the Rust files in `dir` (generated ones) as `cargo xtask fmt` does.
pub fn rustfmt(dir: &Path) -> Result<()> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    run(rustfmt_command().args(files)).context("rustfmt (`rustup component add rustfmt`)")
}

/// Every `.rs` file git tracks, relative to the root.
fn rust_files() -> Result<Vec<String>> {
    let out = Command::new("git")
        .current_dir(root())
        .args(["ls-files", "*.rs"])
        .output()
        .context("git ls-files")?;
    ensure!(out.status.success(), "git ls-files failed");
    Ok(String::from_utf8(out.stdout)?
        .lines()
        .map(str::to_string)
        .collect())
}

/// Format every file; with `check`, change nothing and fail naming the
/// files that differ.
pub fn fmt(check: bool) -> Result<()> {
    step(if check {
        "checking that every Rust file is formatted (rustfmt, file by file)"
    } else {
        "formatting every Rust file (rustfmt, file by file)"
    });
    let mut rustfmt = rustfmt_command();
    rustfmt.current_dir(root());
    if check {
        rustfmt.args(["--check", "--files-with-diff"]);
    }
    let status = rustfmt
        .args(rust_files()?)
        .status()
        .context("running rustfmt")?;
    ensure!(
        status.success(),
        "the files above are not formatted: run `cargo xtask fmt`"
    );
    Ok(())
}
