//! Python plugins, built with componentize-py from the venv, and the Python
//! SDK (sdk/python), tested with pytest against the Rust SDK's fakes
//! compiled to wasm (super::fakes_wasm).

use super::{collect, render, rendered, script, script_command};
use crate::tally::Tally;
use crate::{newest_mtime, root, run, step, venv_bin, venv_bin_dir};
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const LANG: super::Lang = super::Lang {
    name: "python",
    plugins,
    test,
};

fn plugins(out: &Path) -> Result<()> {
    super::fakes_wasm()?;
    examples(out)?;
    let dir = render("python")?;
    script(&dir, "build.sh", &[venv_bin_dir()?], &[])?;
    collect(&dir, "python", out)
}

/// The example plugins in examples/plugins (python-http-check), built when
/// their sources are newer: what the demo runs.
pub fn examples(out: &Path) -> Result<()> {
    let wit: Vec<PathBuf> = std::fs::read_dir(root().join("wit"))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    for entry in std::fs::read_dir(root().join("examples/plugins"))? {
        let dir = entry?.path();
        if !dir.join("app.py").exists() {
            continue;
        }
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let target = out.join(format!("{name}.wasm"));
        let sources = wit.iter().cloned().chain([dir.join("app.py")]);
        if target.exists() && newest_mtime([target.clone()]) >= newest_mtime(sources) {
            continue;
        }
        step(&format!(
            "building Python plugin {name} with componentize-py"
        ));
        run(Command::new(venv_bin("componentize-py")?)
            .current_dir(&dir)
            .arg("-d")
            .arg(root().join("wit"))
            .args(["-w", "plugin", "componentize", "app", "-o"])
            .arg(&target))?;
    }
    Ok(())
}

/// pytest on sdk/python: the wrappers, config, the adapter against
/// componentize-py's bindings (the venv on PATH), and every case of
/// sdk/conformance.json against the fakes.
fn test(tally: &mut Tally) -> Result<()> {
    step("pytest sdk/python (the Python SDK against the wasm fakes)");
    tally.run(
        "the Python SDK",
        Command::new(venv_bin("pytest")?)
            .current_dir(root().join("sdk/python"))
            .args(["-q", "-p", "no:cacheprovider"])
            .env("PATH", super::path_with(&[venv_bin_dir()?])?)
            .env("TEND_FAKES_WASM", super::fakes_wasm()?),
    )?;
    tally.run(
        "the Python template",
        &mut script_command(
            &rendered("python")?,
            "test.sh",
            &[venv_bin_dir()?],
            &[("TEND_FAKES_WASM", &super::fakes_wasm()?)],
        )?,
    )
}
