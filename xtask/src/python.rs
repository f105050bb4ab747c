//! `sdk/python/tend_sdk/wit.py`: the Python SDK's WIT types and function
//! table. Every record a `@dataclass` (the WIT fields in snake case, in WIT
//! order, with the type hints `to_json`/`from_json`/`to_wit`/`from_wit` in
//! `types.py` are driven by), every enum a `WitEnum`, every variant a
//! `Variant` with its `CASES`; then `FUNCTIONS`, each imported interface's
//! functions with their parameters and result, which the SDK's tests hold
//! `host.py`'s wrappers to. The runtime (`WitEnum`, `Variant`, the
//! conversions) stays by hand in `_wit_base.py` and `types.py`.

use crate::generate::GENERATED;
use anyhow::{Context, Result, bail};
use heck::{ToShoutySnakeCase, ToSnakeCase, ToUpperCamelCase};
use std::fmt::Write;
use wit_parser::{
    Docs, Function, Interface, Record, Resolve, Type, TypeDefKind, TypeOwner, WorldItem, WorldKey,
};

/// WIT types with no class here: the `error` variant is the exceptions of
/// `tend_sdk/errors.py` (a `result<_, error>` raises them).
const NOT_GENERATED: [&str; 1] = ["error"];

/// Records whose fields after the first all have defaults, so a plugin or a
/// test builds one from what it knows (`UnitStatus("a.service")`): each
/// field its type's zero unless [`DEFAULTS`] says otherwise. Elsewhere only
/// trailing `option`s and `list`s have defaults (`None`, empty).
const BUILT_FIELD_BY_FIELD: [&str; 8] = [
    "unit-status",
    "pod-sandbox",
    "container",
    "image",
    "object-list",
    "instance",
    "security-group",
    "context",
];

/// Defaults that are not their type's zero: (record, field, Python value).
/// An enum has no zero, so each enum field of a record above is here.
const DEFAULTS: [(&str, &str, &str); 7] = [
    ("request", "method", "\"GET\""),
    ("pod-sandbox", "state", "SandboxState.READY"),
    ("container", "state", "ContainerState.UNKNOWN"),
    ("instance", "state", "InstanceState.UNKNOWN"),
    ("context", "config", "\"{}\""),
    (
        "context",
        "triggers",
        "field(default_factory=lambda: [Trigger(\"manual\")])",
    ),
    ("context", "node-name", "\"test-node\""),
];

/// Records with hand-written methods: their mixin in `_wit_base.py`.
const METHODS: [(&str, &str); 4] = [
    ("object-key", "ObjectKeyMethods"),
    ("object-list", "ObjectListMethods"),
    ("context", "ContextMethods"),
    ("outcome", "OutcomeMethods"),
];

/// The generated file.
pub fn wit_py(resolve: &Resolve) -> Result<String> {
    let mut out = format!(
        "# {GENERATED}\n\
         \"\"\"The WIT records, enums and variants as Python types, and every imported\n\
         function (`FUNCTIONS`). The machinery they use is in `_wit_base.py` and\n\
         `types.py`; import them from `tend_sdk` or `tend_sdk.types`.\"\"\"\n\n\
         from __future__ import annotations\n\n\
         from dataclasses import dataclass, field\n\
         from typing import Optional, Union\n\n\
         from ._wit_base import (\n    {bases},\n    Variant,\n    WitEnum,\n    WitFunction,\n)\n\
         from .errors import TendError\n",
        bases = METHODS
            .iter()
            .map(|(_, base)| *base)
            .collect::<Vec<_>>()
            .join(",\n    "),
    );
    let interfaces = world_interfaces(resolve)?;
    let mut classes = Vec::new();
    for interface in &interfaces {
        types_of(resolve, interface, &mut out, &mut classes)?;
    }
    let _ = write!(
        out,
        "\n\n#: The WIT types, which `tend_sdk.types` re-exports.\n__all__ = [\n{}]\n",
        classes
            .iter()
            .map(|c| format!("    {c},\n"))
            .collect::<String>()
    );
    out.push_str(
        "\n#: Every function of every interface a plugin imports, in WIT order: its\n\
         #: parameters (WIT name, Python type) and the Python type of its answer (a\n\
         #: `result<T, error>` answers `T` and raises the error as a `TendError`).\n\
         FUNCTIONS: dict[str, list[WitFunction]] = {\n",
    );
    for interface in interfaces.iter().filter(|i| !i.functions.is_empty()) {
        let _ = writeln!(out, "    {:?}: [", interface.name.as_deref().unwrap_or(""));
        for function in interface.functions.values() {
            let _ = writeln!(out, "        {},", function_entry(resolve, function)?);
        }
        out.push_str("    ],\n");
    }
    out.push_str("}\n");
    Ok(out)
}

/// The interfaces world `plugin` imports, in its order (`types` among them).
fn world_interfaces(resolve: &Resolve) -> Result<Vec<&Interface>> {
    let (_, world) = resolve
        .worlds
        .iter()
        .find(|(_, w)| w.name == "plugin")
        .context("wit/ has no world `plugin`")?;
    Ok(world
        .imports
        .iter()
        .filter_map(|(key, item)| match (key, item) {
            (WorldKey::Interface(id), WorldItem::Interface { .. }) => {
                Some(&resolve.interfaces[*id])
            }
            _ => None,
        })
        .collect())
}

/// The classes of the types `interface` defines, in WIT order.
/// Adds each class's name, quoted, to `classes`.
fn types_of(
    resolve: &Resolve,
    interface: &Interface,
    out: &mut String,
    classes: &mut Vec<String>,
) -> Result<()> {
    let name = interface.name.as_deref().context("a named interface")?;
    let mut section = String::new();
    for (type_name, id) in &interface.types {
        let def = &resolve.types[*id];
        if NOT_GENERATED.contains(&type_name.as_str()) {
            continue;
        }
        let class = type_name.to_upper_camel_case();
        if !matches!(def.kind, TypeDefKind::Type(_)) {
            classes.push(format!("{class:?}"));
        }
        let docs = docstring(&def.docs);
        match &def.kind {
            TypeDefKind::Record(record) => {
                let base = METHODS
                    .iter()
                    .find(|(r, _)| r == type_name)
                    .map(|(_, base)| format!("({base})"))
                    .unwrap_or_default();
                let (fields, keyword_only) = record_fields(resolve, type_name, record)?;
                let decorator = match keyword_only {
                    true => "@dataclass(kw_only=True)",
                    false => "@dataclass",
                };
                let _ = write!(
                    section,
                    "\n\n{decorator}\nclass {class}{base}:\n{docs}{fields}"
                );
            }
            TypeDefKind::Enum(e) => {
                let members: String = e
                    .cases
                    .iter()
                    .map(|c| format!("    {} = {:?}\n", c.name.to_shouty_snake_case(), c.name))
                    .collect();
                let _ = write!(section, "\n\nclass {class}(WitEnum):\n{docs}{members}");
            }
            TypeDefKind::Variant(v) => {
                let cases: Result<Vec<String>> = v
                    .cases
                    .iter()
                    .map(|c| {
                        let payload = match &c.ty {
                            Some(t) => python_type(resolve, t)?,
                            None => "None".into(),
                        };
                        Ok(format!("{:?}: {payload}", c.name))
                    })
                    .collect();
                let _ = write!(
                    section,
                    "\n\nclass {class}(Variant):\n{docs}    CASES = {{{}}}\n",
                    cases?.join(", ")
                );
            }
            // `use types.{error}` and other aliases: defined where they come from.
            TypeDefKind::Type(_) => {}
            other => bail!("no Python class for {name}.{type_name}: {other:?}"),
        }
    }
    if !section.is_empty() {
        let _ = write!(out, "\n\n# --- {name} {}", "-".repeat(72 - name.len()));
        out.push_str(&section);
    }
    Ok(())
}

/// A docstring of the WIT's doc comment, indented for a class body.
fn docstring(docs: &Docs) -> String {
    let Some(text) = docs.contents.as_deref() else {
        return String::new();
    };
    let text = text
        .trim()
        .replace('\\', "\\\\")
        .replace("\"\"\"", "\\\"\"\"");
    let body = text.replace('\n', "\n    ");
    if text.contains('\n') {
        format!("    \"\"\"{body}\n    \"\"\"\n\n")
    } else {
        format!("    \"\"\"{body}\"\"\"\n\n")
    }
}

/// A record's field lines (`name: hint` or `name: hint = default`), and
/// whether it is keyword-only: when a default of [`DEFAULTS`] comes before a
/// required field (`request`: `method` "GET" before `url`), so no positional
/// call binds by an order the WIT does not have.
fn record_fields(resolve: &Resolve, record_name: &str, record: &Record) -> Result<(String, bool)> {
    let built = BUILT_FIELD_BY_FIELD.contains(&record_name);
    let mut lines = Vec::new();
    let mut keyword_only = false;
    // From the last field back: a default by type only where every later
    // field has one.
    let mut defaulted = true;
    for (index, f) in record.fields.iter().enumerate().rev() {
        let hint = python_type(resolve, &f.ty)?;
        let fixed = DEFAULTS
            .iter()
            .find(|(r, name, _)| *r == record_name && *name == f.name)
            .map(|(_, _, value)| value.to_string());
        let is_fixed = fixed.is_some();
        keyword_only |= is_fixed && !defaulted;
        let default = match fixed {
            Some(value) => Some(value),
            None if built && index > 0 => Some(zero(resolve, record_name, &f.name, &f.ty)?),
            None => empty(resolve, &f.ty),
        };
        let default = default.filter(|_| defaulted || is_fixed);
        defaulted = default.is_some();
        let name = f.name.to_snake_case();
        lines.push(match default {
            Some(value) => format!("    {name}: {hint} = {value}\n"),
            None => format!("    {name}: {hint}\n"),
        });
    }
    Ok((lines.into_iter().rev().collect(), keyword_only))
}

/// The default of an `option` (`None`) or a `list` (empty).
fn empty(resolve: &Resolve, ty: &Type) -> Option<String> {
    let Type::Id(id) = ty else { return None };
    let def = &resolve.types[*id];
    if def.name.is_some() {
        return None;
    }
    match &def.kind {
        TypeDefKind::Option(_) => Some("None".into()),
        TypeDefKind::List(Type::U8) => Some("b\"\"".into()),
        TypeDefKind::List(_) => Some("field(default_factory=list)".into()),
        _ => None,
    }
}

/// The zero of a type, for a record in [`BUILT_FIELD_BY_FIELD`].
fn zero(resolve: &Resolve, record: &str, field: &str, ty: &Type) -> Result<String> {
    Ok(match ty {
        Type::Bool => "False".into(),
        Type::String | Type::Char => "\"\"".into(),
        Type::F32 | Type::F64 => "0.0".into(),
        Type::Id(_) => match empty(resolve, ty) {
            Some(value) => value,
            None => bail!("{record}.{field} has no zero: give its default in DEFAULTS"),
        },
        _ => "0".into(),
    })
}

/// The Python type hint of a WIT type, as `types.py`'s conversions read it.
fn python_type(resolve: &Resolve, ty: &Type) -> Result<String> {
    Ok(match ty {
        Type::Bool => "bool".into(),
        Type::U8 | Type::U16 | Type::U32 | Type::U64 => "int".into(),
        Type::S8 | Type::S16 | Type::S32 | Type::S64 => "int".into(),
        Type::F32 | Type::F64 => "float".into(),
        Type::Char | Type::String => "str".into(),
        Type::Id(id) => {
            let def = &resolve.types[*id];
            if let (Some(name), TypeOwner::Interface(_)) = (&def.name, def.owner) {
                if NOT_GENERATED.contains(&name.as_str()) {
                    return Ok("TendError".into());
                }
                return Ok(name.to_upper_camel_case());
            }
            match &def.kind {
                TypeDefKind::Option(t) => format!("Optional[{}]", python_type(resolve, t)?),
                TypeDefKind::List(Type::U8) => "bytes".into(),
                TypeDefKind::List(t) => format!("list[{}]", python_type(resolve, t)?),
                TypeDefKind::Tuple(t) => {
                    let types: Result<Vec<String>> =
                        t.types.iter().map(|t| python_type(resolve, t)).collect();
                    format!("tuple[{}]", types?.join(", "))
                }
                // A result inside another type (`http.send-all`): each answer
                // or the error it failed with.
                TypeDefKind::Result(r) => {
                    let ok = match &r.ok {
                        Some(t) => python_type(resolve, t)?,
                        None => "None".into(),
                    };
                    let err = match &r.err {
                        Some(t) => python_type(resolve, t)?,
                        None => "None".into(),
                    };
                    format!("Union[{ok}, {err}]")
                }
                other => bail!("no Python type for {other:?}"),
            }
        }
        other => bail!("no Python type for {other:?}"),
    })
}

/// The Python type of a function's answer: a `result<T, error>` answers `T`.
fn answer(resolve: &Resolve, function: &Function) -> Result<String> {
    let Some(ty) = &function.result else {
        return Ok("None".into());
    };
    if let Type::Id(id) = ty
        && let TypeDefKind::Result(result) = &resolve.types[*id].kind
    {
        return match &result.ok {
            Some(t) => python_type(resolve, t),
            None => Ok("None".into()),
        };
    }
    python_type(resolve, ty)
}

/// `WitFunction("get", [("key", str)], Optional[bytes])`.
fn function_entry(resolve: &Resolve, function: &Function) -> Result<String> {
    let params: Result<Vec<String>> = function
        .params
        .iter()
        .map(|p| Ok(format!("({:?}, {})", p.name, python_type(resolve, &p.ty)?)))
        .collect();
    Ok(format!(
        "WitFunction({:?}, [{}], {})",
        function.name,
        params?.join(", "),
        answer(resolve, function)?
    ))
}
