//! Plugins in every language with an SDK. Each language's module builds the
//! project `tend-author new` writes for it (as target/plugins/LANG-probe.wasm, which
//! tests/e2e/languages.rs runs) and its other plugins into target/plugins/,
//! and runs its SDK's and that project's unit tests with the language's own
//! runner; its toolchain comes from Debian, PyPI (target/venv) or npm (under
//! target/).

pub(crate) mod bindings;
mod c;
mod go;
mod js;
pub(crate) mod python;
mod rust;

use crate::tally::Tally;
use crate::{root, run, step};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// One language: how its plugins are built and its SDK tested.
pub struct Lang {
    pub name: &'static str,
    /// Build the language's plugins into the given directory.
    pub plugins: fn(&Path) -> Result<()>,
    /// Run the SDK's unit tests (and the template's), each runner counted.
    pub test: fn(&mut Tally) -> Result<()>,
}

pub const ALL: &[Lang] = &[rust::LANG, python::LANG, js::LANG, c::LANG, go::LANG];

/// The `tend-author` binary that renders the templates.
static AUTHOR: OnceLock<PathBuf> = OnceLock::new();

/// Render with the `tend-author` built beside `tend` (cargo builds both
/// binaries of the host crate).
pub fn use_author_beside(tend: &Path) {
    AUTHOR.get_or_init(|| tend.with_file_name("tend-author"));
}

/// `tend-author new LANG-probe --lang LANG` into target/new/LANG (written
/// afresh), against this checkout's wit/ and sdk/: the project's directory.
pub fn render(lang: &str) -> Result<PathBuf> {
    let author = AUTHOR
        .get()
        .context("xtask: render before use_author_beside (build tend first)")?;
    let dir = root().join("target/new").join(lang);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("remove {}", dir.display()))?;
    }
    step(&format!("tend-author new {lang}-probe --lang {lang}"));
    run(Command::new(author)
        .args(["new", &format!("{lang}-probe"), "--lang", lang, "--dir"])
        .arg(&dir)
        .arg("--tend")
        .arg(root()))?;
    Ok(dir)
}

/// The Rust SDK's fakes (sdk/fakes) for wasm32-unknown-unknown, no imports:
/// what the Python and JavaScript SDKs' `FakeHost` run (sdk/fakes/README.md).
/// Built once per xtask run into target/tend-fakes.wasm, where both look by
/// default; its path.
pub fn fakes_wasm() -> Result<PathBuf> {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    if let Some(wasm) = BUILT.get() {
        return Ok(wasm.clone());
    }
    step("building the SDK fakes (tend-fakes) for wasm32-unknown-unknown");
    crate::ensure_wasm_target("wasm32-unknown-unknown")?;
    run(crate::cargo().args([
        "build",
        "-p",
        "tend-fakes",
        "--target",
        "wasm32-unknown-unknown",
        // The plugins' profile: what runs at build time (the proc macros)
        // is then the plugins' build's, not compiled again.
        "--profile",
        "plugin",
    ]))?;
    let built = root().join("target/wasm32-unknown-unknown/plugin/tend_fakes.wasm");
    let wasm = root().join("target/tend-fakes.wasm");
    std::fs::copy(&built, &wasm)
        .with_context(|| format!("copy {} to {}", built.display(), wasm.display()))?;
    Ok(BUILT.get_or_init(|| wasm).clone())
}

/// The project `render` wrote for `lang`, for its tests.
pub fn rendered(lang: &str) -> Result<PathBuf> {
    let dir = root().join("target/new").join(lang);
    if !dir.is_dir() {
        bail!(
            "{} is missing: build the plugins first (`cargo xtask plugins`)",
            dir.display()
        );
    }
    Ok(dir)
}

/// PATH with `dirs` before it: where the language's tools are found first.
pub fn path_with(dirs: &[PathBuf]) -> Result<std::ffi::OsString> {
    let mut all = dirs.to_vec();
    all.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    Ok(std::env::join_paths(all)?)
}

/// Runs a rendered project's `build.sh` or `test.sh`, with `path` before PATH
/// and the variables `env`.
pub fn script(dir: &Path, name: &str, path: &[PathBuf], env: &[(&str, &Path)]) -> Result<()> {
    run(&mut script_command(dir, name, path, env)?)
}

/// The command of a rendered project's script (for `Tally::run`).
pub fn script_command(
    dir: &Path,
    name: &str,
    path: &[PathBuf],
    env: &[(&str, &Path)],
) -> Result<Command> {
    let mut cmd = Command::new(dir.join(name));
    cmd.current_dir(dir)
        .env("PATH", path_with(path)?)
        .envs(env.iter().copied());
    Ok(cmd)
}

/// Copies the project's `LANG-probe.wasm` into `out`.
pub fn collect(dir: &Path, lang: &str, out: &Path) -> Result<()> {
    let file = format!("{lang}-probe.wasm");
    std::fs::copy(dir.join(&file), out.join(&file))
        .with_context(|| format!("{}/build.sh made no {file}", dir.display()))?;
    Ok(())
}

/// `cargo xtask lang NAME`: that language's plugins, then its tests.
pub fn one(name: Option<&str>) -> Result<()> {
    let Some(lang) = ALL.iter().find(|l| Some(l.name) == name) else {
        let names: Vec<&str> = ALL.iter().map(|l| l.name).collect();
        bail!("usage: cargo xtask lang <{}>", names.join("|"));
    };
    crate::ensure_debian_packages()?;
    use_author_beside(&crate::build_tend(true)?);
    let out = root().join("target/plugins");
    std::fs::create_dir_all(&out)?;
    (lang.plugins)(&out)?;
    let mut tally = Tally::default();
    (lang.test)(&mut tally)?;
    tally.finish()
}
