//! `sdk/fakes/src/dispatch.rs`: the wasm fakes' dispatch of every WIT
//! function a plugin imports. Each function's parameters are taken from the
//! call's JSON by their WIT names and types and handed to a trait method of
//! the WIT's own types, which tend-fakes implements on the SDK's `FakeHost`
//! (the behaviour: the shapes the Rust fakes take). A function added to the
//! WIT is a compile error there until it is answered.

use crate::generate::{GENERATED, rust_type_with};
use anyhow::{Context, Result};
use heck::ToSnakeCase;
use std::fmt::Write;
use wit_parser::Resolve;

/// The trait method of `function` of `interface`: `cri_pull_image`.
fn method(interface: &str, function: &str) -> String {
    format!("{}_{}", interface.to_snake_case(), function.to_snake_case())
}

/// The generated file, for `interfaces` (name and functions, WIT order).
pub fn dispatch(resolve: &Resolve, interfaces: &[(String, Vec<String>)]) -> Result<String> {
    let mut methods = String::new();
    let mut arms = String::new();
    for (interface, _) in interfaces {
        let (_, iface) = resolve
            .interfaces
            .iter()
            .find(|(_, i)| i.name.as_deref() == Some(interface.as_str()))
            .context("an interface")?;
        for function in iface.functions.values() {
            let method = method(interface, &function.name);
            let mut typed = Vec::new();
            let mut takes = String::new();
            let mut names = Vec::new();
            for param in &function.params {
                let name = param.name.to_snake_case();
                let ty = rust_type_with(resolve, &param.ty, "Bytes")?;
                let _ = writeln!(takes, "let {name}: {ty} = a.get({:?})?;", param.name);
                typed.push(format!(", {name}: {ty}"));
                names.push(name);
            }
            let _ = writeln!(
                methods,
                "    fn {method}(&self{}) -> Value;",
                typed.concat()
            );
            let _ = writeln!(
                arms,
                "        ({interface:?}, {:?}) => {{\n{takes}a.done()?;\nfunctions.{method}({})\n}}",
                function.name,
                names.join(", ")
            );
        }
    }
    // The interfaces whose types a parameter names (`types` among them).
    let modules: Vec<String> = std::iter::once("types".to_string())
        .chain(interfaces.iter().map(|(i, _)| i.to_snake_case()))
        .filter(|module| methods.contains(&format!("{module}::")))
        .collect();
    let bytes = if methods.contains("Bytes") {
        "use crate::wit::Bytes;\n"
    } else {
        ""
    };
    Ok(format!(
        "//! Every WIT function a plugin imports, by its interface and WIT name: its\n\
         //! parameters taken from the call's JSON by their WIT names and types, then\n\
         //! answered by [`Functions`]. {GENERATED}\n\n\
         use crate::Args;\n{bytes}\
         use serde_json::Value;\n\
         use tend_sdk::bindings::tend::plugin::{{{modules}}};\n\n\
         /// What the fakes answer for each function, with the WIT's own types:\n\
         /// the JSON of its WIT result (`{{\"ok\": ..}}` or `{{\"err\": ..}}`).\n\
         pub(crate) trait Functions {{\n{methods}}}\n\n\
         /// Take the arguments of `function` of `interface` from `a` and answer it;\n\
         /// `None` for a function the WIT does not have.\n\
         pub(crate) fn dispatch(\n    functions: &impl Functions,\n    interface: &str,\n    function: &str,\n    a: &mut Args,\n) -> Result<Option<Value>, String> {{\n\
         Ok(Some(match (interface, function) {{\n{arms}        _ => return Ok(None),\n    }}))\n}}\n",
        modules = modules.join(", "),
    ))
}
