//! C plugins: the `tend-author new` template (templates/c) rendered as `c-probe`,
//! built by its build.sh (clang-19 for WASI preview 1, wasm-tools, the WASI
//! preview-1 reactor adapter) and unit-tested by its test.sh and the SDK's.
//! Its committed bindings (sdk/c/bindings) are checked against wit/
//! (bindings.rs). The tools it shares with the Go module live here.

use super::bindings::{bindgen, check_bindings};
use super::{collect, render, rendered, script, script_command};
use crate::tally::Tally;
use crate::{root, run, step, venv_bin_dir};
use anyhow::Result;
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
