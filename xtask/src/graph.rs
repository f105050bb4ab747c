//! `cargo xtask graph`: the import graph of a crate's modules, its cycles, and
//! what depends on a capability outside its folder (`footprint`)
//! (issue 27 asks for none; `the_crates_have_no_import_cycles` holds that).
//!
//! A node is a module file (`capabilities/kube/grants.rs` is
//! `capabilities::kube::grants`); an edge is a path to another module in a
//! `use` or in code (`crate::a::b::Item`, `super::b`, a `use` of a child),
//! resolved to the longest module it names and followed through re-exports
//! (`pub use`) to the module that defines the item. Edges between a module
//! and its own ancestors or descendants are left out: a `mod.rs` declares its
//! children and they use its items, which is structure, not a cycle. Test
//! code is left out: modules declared `#[cfg(test)] mod NAME;`, and each file
//! from its `#[cfg(test)] mod` on. A comment's path (a doc link) is no edge.
//! A cycle is a strongly connected component of two or more modules.

use anyhow::Result;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The crates measured: (name, source root).
pub const CRATES: [(&str, &str); 3] = [
    ("host", "host/src"),
    ("rules", "rules/src"),
    ("sdk", "sdk/src"),
];

pub type Module = Vec<String>;

/// Each crate's floors, lowest first: a module uses modules on its own floor
/// or below, never above (an arrow back up). A module is on the floor of the
/// longest entry that names it or an ancestor; `*` is every module no entry
/// names (in the SDK and the rules crate: the capabilities, so a new one
/// needs no entry).
pub const FLOORS: [(&str, &[&[&str]]); 3] = [
    (
        "host",
        &[
            // What every part uses: text, files, units, the WIT, the journal,
            // and the plain data the config holds of a registry.
            &[
                "atomic",
                "schema",
                "text",
                "units",
                "untrusted",
                "digest",
                "tls",
                "peer",
                "exposition",
                "fs_watch",
                "wit",
                "journal",
                "oci::reference",
                "oci::settings",
            ],
            &["capabilities"],
            // The fleet's pure rules, revisions, rollouts, settings and store: what the config holds of it.
            &[
                "fleet::cohort",
                "fleet::ledger",
                "fleet::observed",
                "fleet::revision",
                "fleet::rollout",
                "fleet::verdict",
                "fleet::window",
                "fleet::settings",
                "fleet::store",
            ],
            // What the operator wrote, and the words of a trigger.
            &["config", "scheduler::trigger"],
            // Compiling and calling a plugin; the fleet member on the API server.
            &["runtime", "fleet", "fleet::kube"],
            // Where plugins come from, when they run, and replays of them.
            &["oci", "scheduler", "replay"],
            &["daemon"],
            &["cli"],
            &["author", "bin"],
        ],
    ),
    (
        "rules",
        &[&["error", "ident", "reason", "text", "wit"], &["*"]],
    ),
    (
        "sdk",
        &[
            // The SDK's own types, and what every capability's fake and default share.
            &["types", "clock", "log", "fake", "not_provided"],
            &["*"],
            // What gathers every capability: the Host trait, the fakes, the wasm glue.
            &["host", "testing", "__wasm"],
        ],
    ),
];

/// The floor of `module` (its index in `floors`).
fn floor(floors: &[&[&str]], module: &Module) -> Option<usize> {
    let named = |entry: &str| {
        let entry: Vec<&str> = entry.split("::").collect();
        module.len() >= entry.len() && module.iter().zip(&entry).all(|(m, e)| m == e)
    };
    let mut best: Option<(usize, usize)> = None;
    for (index, entries) in floors.iter().enumerate() {
        for entry in entries.iter().filter(|e| **e != "*" && named(e)) {
            let length = entry.split("::").count();
            if best.is_none_or(|(_, longest)| length > longest) {
                best = Some((index, length));
            }
        }
    }
    best.map(|(index, _)| index)
        .or_else(|| floors.iter().position(|entries| entries.contains(&"*")))
}

/// Every arrow back up ("from -> to"), and every module on no floor.
pub fn arrows_up(floors: &[&[&str]], edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<String> {
    let mut found = Vec::new();
    for (from, targets) in edges.iter().filter(|(m, _)| !m.is_empty()) {
        let Some(own) = floor(floors, from) else {
            found.push(format!(
                "{} is on no floor: add it to FLOORS",
                from.join("::")
            ));
            continue;
        };
        for to in targets {
            if floor(floors, to).is_some_and(|theirs| theirs > own) {
                found.push(format!("{} -> {}", from.join("::"), to.join("::")));
            }
        }
    }
    found
}

/// Every module file under `src`, by module path, with its code (tests cut).
fn modules(src: &Path) -> Result<BTreeMap<Module, String>> {
    let mut out = BTreeMap::new();
    let mut tests: Vec<Module> = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if !name.ends_with(".rs") {
                continue;
            }
            let relative = path.strip_prefix(src)?.with_extension("");
            let mut module: Module = relative
                .iter()
                .map(|part| part.to_string_lossy().into_owned())
                .collect();
            if matches!(
                module.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                module.pop();
            }
            let text = std::fs::read_to_string(&path)?;
            // Modules declared `#[cfg(test)] mod NAME;` are tests only.
            let declared = text.replace("#[cfg(test)]\npub ", "#[cfg(test)]\n");
            for name in declared.split("#[cfg(test)]\nmod ").skip(1) {
                if let Some((name, _)) = name.split_once(';') {
                    tests.push([module.clone(), vec![name.trim().to_string()]].concat());
                }
            }
            let code = match text.find("#[cfg(test)]\nmod ") {
                Some(at) => text[..at].to_string(),
                None => text,
            };
            out.insert(module, code);
        }
    }
    for test in tests {
        out.remove(&test);
    }
    Ok(out)
}

/// The paths of one `use` tree: `a::{b, c::{d, e}}` is `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let words: Vec<&str> = tree.split_whitespace().collect();
    let mut kept = Vec::new();
    let mut skip = false;
    for word in words {
        if skip {
            skip = false;
            // `x as y,`: keep what follows the alias.
            kept.push(word.trim_start_matches(|c: char| c.is_alphanumeric() || c == '_'));
        } else if word == "as" {
            skip = true;
        } else {
            kept.push(word);
        }
    }
    let tree: String = kept.concat();
    let Some(open) = tree.find('{') else {
        return vec![tree];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| expand(p).into_iter().map(move |e| format!("{prefix}{e}")))
        .collect()
}

/// What a module's code names: every path (`crate::`, `super::`, and a `use`
/// of a child module), absolute, and what it re-exports (`pub use`), each
/// item with the absolute path it stands for.
pub struct Names {
    paths: Vec<Module>,
    /// The capability modules a callback of the registration list reaches
    /// (`capability_list!(x)`), though no path names them.
    pub listed: Vec<Module>,
    reexports: BTreeMap<String, Module>,
    /// The modules of the rules crate it names (`tend_rules::kube::...`).
    pub rules: BTreeSet<String>,
    /// The fields it reads of the registration list's structs (`grants.kube`),
    /// each named after a capability: a dependency no path shows.
    pub fields: BTreeSet<String>,
}

/// How the host names the registration list's structs (`Grants`,
/// `Settings`, `Backends`, `Fakes`, `Capabilities`, `CapabilityLimits`) where
/// it reads one capability's field: `p.grants.kube`, `caps.log`.
const LISTED_STRUCTS: [&str; 8] = [
    "caps",
    "capabilities",
    "grants",
    "capability_limits",
    "limits",
    "backends",
    "fakes",
    "settings",
];

/// The fields `code` reads of the registration list's structs.
fn listed_fields(code: &str) -> BTreeSet<String> {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let mut fields = BTreeSet::new();
    for owner in LISTED_STRUCTS {
        for (at, _) in code.match_indices(owner) {
            let before = code[..at].chars().next_back();
            let rest = &code[at + owner.len()..];
            let rest = rest.strip_prefix("()").unwrap_or(rest);
            if before.is_some_and(word) {
                continue;
            }
            if let Some(field) = rest.strip_prefix('.') {
                let name: String = field.chars().take_while(|c| word(*c)).collect();
                if !name.is_empty() && !field[name.len()..].starts_with('(') {
                    fields.insert(name);
                }
            }
        }
    }
    fields
}

/// `path` from `module`, absolute: `crate::a` and `super::a` as Rust reads
/// them, anything else (a `use` of a child, `std::...`) below `module`.
fn absolute(module: &Module, path: &str) -> Option<Module> {
    let mut parts = path.split("::").filter(|p| !p.is_empty()).peekable();
    let mut absolute: Module = match *parts.peek()? {
        "crate" => {
            parts.next();
            Vec::new()
        }
        // `super::`, `self::` and a child's name start from the module.
        _ => module.clone(),
    };
    for part in parts {
        if part == "super" {
            absolute.pop();
        } else if part != "self" && part != "*" {
            absolute.push(part.to_string());
        }
    }
    Some(absolute)
}

fn references(module: &Module, code: &str) -> Names {
    let mut paths: Vec<String> = Vec::new();
    let mut reexports = BTreeMap::new();
    let mut statement: Option<(bool, String)> = None;
    for line in code.lines().map(str::trim) {
        let line = line.split("//").next().unwrap_or_default();
        if statement.is_none() {
            let bare = line
                .strip_prefix("pub(crate) ")
                .or_else(|| line.strip_prefix("pub(super) "))
                .or_else(|| line.strip_prefix("pub "))
                .unwrap_or(line);
            if let Some(tree) = bare.strip_prefix("use ") {
                statement = Some((bare.len() < line.len(), tree.to_string()));
            }
        } else if let Some((_, open)) = statement.as_mut() {
            open.push_str(line);
        }
        if let Some((public, open)) = statement.take_if(|(_, s)| s.contains(';')) {
            for path in expand(open.split(';').next().unwrap_or_default()) {
                let item = path.rsplit("::").next().unwrap_or_default().to_string();
                if public
                    && item != "*"
                    && let Some(target) = absolute(module, &path)
                {
                    reexports.insert(item, target);
                }
                paths.push(path);
            }
        }
    }
    // Paths in code; a comment's (a doc link) is no import.
    let code: String = code
        .lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let mut rules = BTreeSet::new();
    for word in code.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')) {
        if word.starts_with("crate::") || word.starts_with("super::") {
            paths.push(word.to_string());
        } else if let Some(rest) = word.strip_prefix("tend_rules::") {
            rules.insert(rest.split("::").next().unwrap_or_default().to_string());
        }
    }
    let paths = paths.iter().filter_map(|p| absolute(module, p)).collect();
    Names {
        paths,
        listed: Vec::new(),
        reexports,
        rules,
        fields: listed_fields(&code),
    }
}

/// The module a path names: its longest prefix that is a module, followed
/// through re-exports (`capabilities::OwnLease` is `capabilities::kube::...`).
fn resolve(modules: &BTreeMap<Module, Names>, path: &Module) -> Option<Module> {
    let mut path = path.clone();
    // A re-export chain is short; a loop of them is no module.
    for _ in 0..8 {
        let n = (0..=path.len())
            .rev()
            .find(|&n| modules.contains_key(&path[..n]))?;
        let source = path
            .get(n)
            .and_then(|item| modules[&path[..n]].reexports.get(item))
            .filter(|target| target[..] != path[..=n]);
        match source {
            Some(target) => path = [target.clone(), path[n + 1..].to_vec()].concat(),
            None => return Some(path[..n].to_vec()),
        }
    }
    None
}

/// Every module of the crate at `src` and what it names.
pub fn names(src: &Path) -> Result<BTreeMap<Module, Names>> {
    let modules = modules(src)?;
    let listed = listed_capabilities(&modules)?;
    Ok(modules
        .iter()
        .map(|(module, code)| {
            let mut names = references(module, code);
            if code.contains("capability_list!(") {
                names.listed = listed.clone();
            }
            (module.clone(), names)
        })
        .collect())
}

/// The module of each capability (a WIT import with functions) in this
/// crate: `NAME` (the SDK) or `capabilities::NAME` (the host).
fn listed_capabilities(modules: &BTreeMap<Module, String>) -> Result<Vec<Module>> {
    Ok(crate::generate::capability_names()?
        .into_iter()
        .filter_map(|name| {
            [vec![name.clone()], vec!["capabilities".to_string(), name]]
                .into_iter()
                .find(|module| modules.contains_key(module))
        })
        .collect())
}

/// The module graph: each module and the modules it uses.
pub fn graph(src: &Path) -> Result<BTreeMap<Module, BTreeSet<Module>>> {
    Ok(edges(&names(src)?))
}

/// Each module and the modules it uses, from what each names.
pub fn edges(modules: &BTreeMap<Module, Names>) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut edges = BTreeMap::new();
    for (module, names) in modules {
        let targets = names
            .paths
            .iter()
            .chain(&names.listed)
            .filter_map(|path| resolve(modules, path))
            .filter(|target| !(target.starts_with(module) || module.starts_with(target)))
            .collect();
        edges.insert(module.clone(), targets);
    }
    edges
}

/// The strongly connected components of two or more modules (Tarjan).
fn cycles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct State<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on_stack: BTreeSet<&'a Module>,
        found: Vec<Vec<Module>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Module) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.edges.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !state.index.contains_key(v) {
            visit(&mut state, v);
        }
    }
    state.found.sort();
    state.found
}

/// `cargo xtask graph`: every crate's cycles, and their count.
pub fn report() -> Result<()> {
    let mut total = 0;
    for (name, src) in CRATES {
        let found = cycles(&graph(&crate::root().join(src))?);
        total += found.len();
        let edges = graph(&crate::root().join(src))?;
        for component in &found {
            let names: Vec<String> = component.iter().map(|m| m.join("::")).collect();
            println!("{name}: {}", names.join(" <-> "));
            // The arrows inside it, to cut one.
            for from in component {
                for to in edges[from].iter().filter(|to| component.contains(to)) {
                    println!("    {} -> {}", from.join("::"), to.join("::"));
                }
            }
        }
    }
    println!("{total} import cycles");
    for (name, floors) in FLOORS {
        let src = CRATES.iter().find(|(crate_name, _)| *crate_name == name);
        let edges = graph(&crate::root().join(src.map_or("", |(_, src)| *src)))?;
        let up = arrows_up(floors, &edges);
        println!("{name}: {} arrows back up the floors", up.len());
        for arrow in up {
            println!("    {arrow}");
        }
    }
    // What depends on a capability outside its folder (xtask footprint).
    let capabilities = crate::generate::capability_names()?;
    for (capability, module) in crate::footprint::sites(&capabilities)? {
        let why = crate::footprint::EXCEPTIONS
            .iter()
            .find(|(c, m, _)| *c == capability && *m == module)
            .map_or(
                "NOT LISTED: move it into the capability, or list it with its reason",
                |e| e.2,
            );
        println!("{capability} outside its folder: {module} ({why})");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// host/, rules/ and sdk/ stay free of import cycles.
    #[test]
    fn the_crates_have_no_import_cycles() {
        let mut found = Vec::new();
        for (name, src) in CRATES {
            for component in cycles(&graph(&crate::root().join(src)).unwrap()) {
                let names: Vec<String> = component.iter().map(|m| m.join("::")).collect();
                found.push(format!("{name}: {}", names.join(" <-> ")));
            }
        }
        assert!(
            found.is_empty(),
            "run `cargo xtask graph` to see the arrows: {found:?}"
        );
    }

    #[test]
    fn use_trees_expand_to_paths() {
        assert_eq!(
            expand("crate::a::{b, c::{d, e as f}, g::*}"),
            [
                "crate::a::b",
                "crate::a::c::d",
                "crate::a::c::e",
                "crate::a::g::*"
            ]
        );
    }

    /// host/, rules/ and sdk/: no module uses one on a floor above its own.
    #[test]
    fn no_module_uses_one_on_a_higher_floor() {
        for (name, floors) in FLOORS {
            let (_, src) = CRATES.iter().find(|(n, _)| *n == name).unwrap();
            let up = arrows_up(floors, &graph(&crate::root().join(src)).unwrap());
            assert!(up.is_empty(), "{name}: {up:?} (docs/design.md, \"Floors\")");
        }
    }

    #[test]
    fn an_arrow_up_and_a_module_on_no_floor_are_found_and_the_longest_entry_wins() {
        let m = |s: &str| -> Module { s.split("::").map(str::to_string).collect() };
        let floors: &[&[&str]] = &[&["text", "oci::settings"], &["config"], &["oci"]];
        let edges = BTreeMap::from([
            (m("config"), BTreeSet::from([m("oci::settings"), m("text")])),
            (m("oci::settings"), BTreeSet::from([m("config")])),
            (m("oci::pull"), BTreeSet::from([m("config")])),
            (m("stray"), BTreeSet::new()),
        ]);
        assert_eq!(
            arrows_up(floors, &edges),
            [
                "oci::settings -> config",
                "stray is on no floor: add it to FLOORS"
            ]
        );
        let with_rest: &[&[&str]] = &[&["text"], &["*"]];
        assert_eq!(floor(with_rest, &m("kube::fake")), Some(1));
    }

    #[test]
    fn fields_of_the_listed_structs_are_read_but_not_methods_or_other_owners() {
        let code = "p.grants.kube.is_empty(); store.data().caps.log.dropped(); \
                    self.grants.describe(); mygrants.cloud; settings().cri";
        assert_eq!(
            listed_fields(code),
            BTreeSet::from(["cri".to_string(), "kube".into(), "log".into()])
        );
    }

    #[test]
    fn a_path_through_the_crate_roots_reexport_reaches_the_defining_module() {
        let module = |s: &str| -> Module { s.split("::").map(str::to_string).collect() };
        let modules = BTreeMap::from([
            (
                Vec::new(),
                references(&Vec::new(), "pub use host::NotProvided;\n"),
            ),
            (
                module("host"),
                references(&module("host"), "use crate::files::Files;\n"),
            ),
            (
                module("files"),
                references(&module("files"), "use crate::NotProvided;\n"),
            ),
        ]);
        assert_eq!(
            cycles(&edges(&modules)),
            vec![vec![module("files"), module("host")]]
        );
    }

    #[test]
    fn a_cycle_of_siblings_is_found_and_parent_child_is_not() {
        let m = |s: &str| -> Module { s.split("::").map(str::to_string).collect() };
        let mut edges = BTreeMap::new();
        edges.insert(m("a::x"), BTreeSet::from([m("a::y")]));
        edges.insert(m("a::y"), BTreeSet::from([m("a::x")]));
        edges.insert(m("b"), BTreeSet::from([m("a::x")]));
        assert_eq!(cycles(&edges), vec![vec![m("a::x"), m("a::y")]]);
    }
}
