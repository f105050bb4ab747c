//! JavaScript plugins: the `tend-author new` template (templates/js) rendered as
//! `js-probe`, built by its build.sh (esbuild bundles it with the SDK,
//! componentize-qjs embeds it in QuickJS), and the same plugin built with
//! QuickJS's size-optimized runtime as js-tailcall.wasm: it uses tail calls,
//! which Winch rejects, so it tests the host's fallback to Cranelift. The
//! tools are npm packages pinned by sdk/js/tooling/package-lock.json and
//! installed with `npm ci` into target/npm, nothing global. Tests: the SDK's
//! (sdk/js, `node --test`, against target/tend-fakes.wasm) and the template's.

use super::{collect, render, rendered, script, script_command};
use crate::tally::Tally;
use crate::{root, run, step};
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const LANG: super::Lang = super::Lang {
    name: "js",
    plugins,
    test,
};

/// The manifest and lock of the build tools, copied into target/npm.
const TOOLING: [&str; 2] = ["package.json", "package-lock.json"];

/// target/npm/node_modules/.bin with the pinned tools, installed when missing
/// or when sdk/js/tooling changed.
/// (Node and npm themselves come with the Debian packages main.rs ensures.)
fn tools() -> Result<PathBuf> {
    let prefix = root().join("target/npm");
    let bin = prefix.join("node_modules/.bin");
    let source = root().join("sdk/js/tooling");
    let unchanged = TOOLING
        .iter()
        .all(|file| std::fs::read(source.join(file)).ok() == std::fs::read(prefix.join(file)).ok());
    if !unchanged || !bin.join("componentize-qjs").exists() || !bin.join("esbuild").exists() {
        step("installing esbuild and componentize-qjs into target/npm (npm ci)");
        std::fs::create_dir_all(&prefix)?;
        for file in TOOLING {
            std::fs::copy(source.join(file), prefix.join(file))?;
        }
        // --ignore-scripts: esbuild's postinstall only optimizes its launcher.
        run(Command::new("npm")
            .args([
                "ci",
                "--no-audit",
                "--no-fund",
                "--prefer-offline",
                "--ignore-scripts",
            ])
            .arg("--prefix")
            .arg(&prefix))?;
    }
    Ok(bin)
}

fn plugins(out: &Path) -> Result<()> {
    let bin = tools()?;
    let dir = render("js")?;
    script(&dir, "build.sh", std::slice::from_ref(&bin), &[])?;
    collect(&dir, "js", out)?;
    step("building js-tailcall.wasm (QuickJS --opt-size: tail calls, Cranelift only)");
    run(Command::new("node")
        .arg(root().join("sdk/js/bin/tend-js-build.mjs"))
        .arg(dir.join("js_probe.js"))
        .arg(out.join("js-tailcall.wasm"))
        .arg("--opt-size")
        .env("PATH", super::path_with(&[bin])?))
}

fn test(tally: &mut Tally) -> Result<()> {
    let bin = tools()?;
    let fakes = super::fakes_wasm()?;
    step("testing the JavaScript SDK (node --test)");
    tally.run(
        "the JavaScript SDK",
        Command::new("node")
            .current_dir(root().join("sdk/js"))
            .arg("--test")
            .env("TEND_FAKES_WASM", &fakes),
    )?;
    tally.run(
        "the JavaScript template",
        &mut script_command(
            &rendered("js")?,
            "test.sh",
            &[bin],
            &[("TEND_FAKES_WASM", &fakes)],
        )?,
    )
}
