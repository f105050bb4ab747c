//! `tend-bindgen c|go|rust WIT_DIR OUT_DIR` writes the bindings of world
//! `plugin` for C, Go or Rust into OUT_DIR; `tend-bindgen adapter FILE` writes the WASI
//! preview-1 reactor adapter (of the host's wasmtime version) to FILE.
//!
//! Why a generator of our own: the `wit-bindgen` CLI builds in minutes on a
//! two-core CI machine (it carries every language and a test harness), this in
//! seconds, with the same generator crates at the SDK's wit-bindgen version.
//! The generated files are committed (sdk/c/bindings, sdk/go/wit,
//! sdk/src/generated) so that a plugin author needs only clang or Go and
//! wasm-tools, and a Rust plugin's build needs no `generate!` macro (its generator,
//! wasm-tools' parsers and encoders, compiled at every cold build of every
//! Rust plugin and SDK test); `cargo xtask lang c|go|rust` checks that they
//! match the WIT.

use anyhow::{Context, Result, bail};
use std::path::Path;
use wit_bindgen_core::wit_parser::Resolve;
use wit_bindgen_core::{Files, WorldGenerator};

/// The Go import path of the generated packages (sdk/go/wit).
const GO_PACKAGE: &str = "tend/sdk/wit";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["c", wit, out] => {
            let opts = wit_bindgen_c::Opts {
                // `wasm-tools component embed` adds the world from the WIT
                // itself: no binary object to commit.
                no_object_file: true,
                ..Default::default()
            };
            generate(opts.build(), wit, out)?;
            split_c_helpers(Path::new(out))
        }
        ["go", wit, out] => {
            let opts = wit_bindgen_go::Opts {
                // gofmt runs after, from the Go toolchain the SDK is built with.
                format: wit_bindgen_go::Format::False,
                pkg_name: Some(GO_PACKAGE.into()),
                ..Default::default()
            };
            generate(opts.build(), wit, out)
        }
        ["rust", wit, out] => generate(Box::new(rust_opts().build()), wit, out),
        ["adapter", out] => std::fs::write(
            out,
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        )
        .with_context(|| format!("cannot write {out}")),
        _ => bail!("usage: tend-bindgen c|go|rust WIT_DIR OUT_DIR | adapter FILE"),
    }
}

/// The Rust SDK's bindings (sdk/src/lib.rs, `mod bindings`): their records and
/// enums are the SDK's public types, so they carry the derives plugins
/// compare, hash and default them with. rustfmt formats them after.
fn rust_opts() -> wit_bindgen_rust::Opts {
    fn on(selectors: &[&str], attribute: &str) -> Vec<(String, String)> {
        let attribute = attribute.to_string();
        let selector = |s: &&str| (format!("tend:plugin/{s}"), attribute.clone());
        selectors.iter().map(selector).collect()
    }
    wit_bindgen_rust::Opts {
        pub_export_macro: true,
        export_macro_name: Some("export_world".into()),
        default_bindings_module: Some("tend_sdk::bindings".into()),
        additional_derive_attributes: ["PartialEq", "Eq", "Hash"].map(String::from).to_vec(),
        additional_type_attributes: on(&["kube@0.1.0/object-key"], "#[derive(PartialOrd, Ord)]")
            .into_iter()
            .chain(on(
                &[
                    "kube@0.1.0/list-params",
                    "kube@0.1.0/drain-report",
                    "systemd@0.1.0/unit-status",
                    "cri@0.1.0/sandbox-filter",
                    "cri@0.1.0/container-state",
                    "cri@0.1.0/container",
                    "cri@0.1.0/image",
                    "cri@0.1.0/runtime-version",
                    "cloud@0.1.0/instance-state",
                    "cloud@0.1.0/instance",
                    "logs@0.1.0/filter",
                ],
                "#[derive(Default)]",
            ))
            .collect(),
        additional_member_attributes: on(
            &[
                "cri@0.1.0/container-state.unknown",
                "cloud@0.1.0/instance-state.unknown",
            ],
            "#[default]",
        ),
        ..Default::default()
    }
}

/// Move the portable part of plugin.c (the allocator and the `*_free` and
/// string helpers) into plugin_helpers.c, so that a plugin's unit test can
/// compile it natively beside its own stubs of the imports; plugin.c keeps
/// the wasm import and export glue.
fn split_c_helpers(out: &Path) -> Result<()> {
    const START: &str = "// Canonical ABI intrinsics\n";
    const END: &str = "// Component Adapters\n";
    let path = out.join("plugin.c");
    let code = std::fs::read_to_string(&path)?;
    let (Some(start), Some(end)) = (code.find(START), code.find(END)) else {
        bail!("wit-bindgen's plugin.c lacks {START:?} or {END:?}: update split_c_helpers");
    };
    let mut helpers = code[start..end].to_string();
    // The exports' static return area sits among the intrinsics: it stays.
    let mut glue = String::new();
    if let Some(area) = helpers.find("static uint8_t RET_AREA") {
        let from = helpers[..area].rfind("__attribute__").unwrap_or(area);
        let to = area + helpers[area..].find('\n').map_or(0, |n| n + 1);
        glue = helpers.drain(from..to).collect();
    }
    let head = "// Generated by tend-bindgen from wit-bindgen's plugin.c. DO NOT EDIT!\n\
                #include \"plugin.h\"\n#include <stdlib.h>\n#include <string.h>\n\n";
    std::fs::write(out.join("plugin_helpers.c"), format!("{head}{helpers}"))?;
    // With no object file, nothing defines the symbol that would link it in.
    const FORCE_LINK: &str = "// Ensure that the *_component_type.o object is linked in\n";
    let mut adapters = code[end..].to_string();
    if let Some(from) = adapters.find(FORCE_LINK) {
        let to = adapters[from..]
            .find("}\n")
            .map_or(adapters.len(), |n| from + n + 2);
        adapters.replace_range(from..to, "");
    }
    std::fs::write(&path, format!("{}{glue}\n{adapters}", &code[..start]))?;
    Ok(())
}

fn generate(mut generator: Box<dyn WorldGenerator>, wit: &str, out: &str) -> Result<()> {
    let mut resolve = Resolve::default();
    let (package, _) = resolve.push_path(wit)?;
    let world = resolve.select_world(&[package], Some("plugin"))?;
    let mut files = Files::default();
    generator.generate(&mut resolve, world, &mut files)?;
    for (name, contents) in files.iter() {
        let path = Path::new(out).join(name);
        std::fs::create_dir_all(path.parent().expect("a file in OUT_DIR"))?;
        std::fs::write(&path, contents)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
