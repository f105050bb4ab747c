//! The Rust project `tend-author new` writes (the built-in plugins are workspace
//! members, built by `plugins` in main.rs). It is a workspace of its own: it
//! gets this workspace's lock file and target directory, so the dependencies
//! it shares with the workspace are the same versions, compiled once. The
//! SDK's committed bindings (sdk/src/generated) are checked against wit/
//! first (bindings.rs).

use super::bindings;
use super::{collect, render, rendered, script, script_command};
use crate::root;
use crate::tally::Tally;
use anyhow::Result;
use std::path::Path;

pub const LANG: super::Lang = super::Lang {
    name: "rust",
    plugins,
    test,
};

fn plugins(out: &Path) -> Result<()> {
    bindings::check_rust()?;
    let dir = render("rust")?;
    std::fs::copy(root().join("Cargo.lock"), dir.join("Cargo.lock"))?;
    script(
        &dir,
        "build.sh",
        &[],
        &[("CARGO_TARGET_DIR", &root().join("target"))],
    )?;
    collect(&dir, "rust", out)
}

fn test(tally: &mut Tally) -> Result<()> {
    tally.run(
        "the Rust template",
        &mut script_command(
            &rendered("rust")?,
            "test.sh",
            &[],
            &[("CARGO_TARGET_DIR", &root().join("target"))],
        )?,
    )
}
