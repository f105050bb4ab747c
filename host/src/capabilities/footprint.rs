//! What adding a capability takes, checked on the tree itself (docs/design.md,
//! "Adding a capability"): for every capability of the registration list, its
//! WIT file and `import` line, its host folder, its rules file, its SDK file
//! and SDK list entry exist; and no host file outside its folder, the list and
//! the tests names it, but for the exceptions below, each with its reason. A
//! new capability has no exception: it is a WIT file, one folder, one rules
//! file, one SDK file and one line in each of the two lists.

use std::path::{Path, PathBuf};

macro_rules! names {
    ($($name:ident: $cap:ty,)*) => {
        /// Every registered capability's name.
        const NAMES: &[&str] = &[$(stringify!($name)),*];
    };
}
super::registry::capability_list!(names);

/// Host files outside a capability's folder that may name it, and why.
const EXCEPTIONS: &[(&str, &str, &str)] = &[
    (
        "state",
        "capabilities/gate/budgets.rs",
        "budgets are kept in the state store, under a namespace no plugin can name",
    ),
    (
        "log",
        "daemon/runner.rs",
        "what the host logs on a plugin's behalf spends that plugin's log budget",
    ),
    (
        "metrics",
        "daemon/runner.rs",
        "a reconcile's plugin series are recorded when it ends",
    ),
    (
        "systemd",
        "scheduler/trigger.rs",
        "the scheduler's list of trigger kinds re-exports the unit trigger's",
    ),
    (
        "kube",
        "config/mod.rs",
        "the election Lease of [host.leader-election] is handed to the kube capability, which refuses plugin writes to it",
    ),
    (
        "kube",
        "daemon/leader.rs",
        "the leader elector talks to the API server with the capability's connection settings",
    ),
    (
        "kube",
        "scheduler/trigger.rs",
        "the scheduler's list of trigger kinds re-exports the watch trigger's",
    ),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Whether `text` names the capability module `name` (`capabilities::kube`,
/// `super::kube` from a sibling, `capabilities::{files, kube}`).
fn names_module(text: &str, name: &str) -> bool {
    let bounded = |at: usize, len: usize| {
        !text[at + len..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
    };
    let direct = [format!("capabilities::{name}"), format!("super::{name}")]
        .iter()
        .any(|needle| {
            text.match_indices(needle.as_str())
                .any(|(at, m)| bounded(at, m.len()))
        });
    let grouped = text.match_indices("capabilities::{").any(|(at, m)| {
        let group = &text[at + m.len()..];
        let group = &group[..group.find('}').unwrap_or(group.len())];
        group
            .split(',')
            .any(|item| item.trim().split("::").next() == Some(name))
    });
    direct || grouped
}

#[test]
fn a_capability_is_its_wit_file_its_folders_and_a_line_in_each_list() {
    let root = root();
    let world = std::fs::read_to_string(root.join("wit/world.wit")).unwrap();
    let sdk_list = std::fs::read_to_string(root.join("sdk/src/lib.rs")).unwrap();
    for name in NAMES {
        assert!(
            root.join(format!("wit/{name}.wit")).exists(),
            "wit/{name}.wit"
        );
        assert!(
            world.contains(&format!("import {name};")),
            "import {name}; in wit/world.wit"
        );
        assert!(
            root.join(format!("host/src/capabilities/{name}/mod.rs"))
                .exists(),
            "host/src/capabilities/{name}/mod.rs: the capability's face"
        );
        let sdk = root.join(format!("sdk/src/{name}.rs")).exists()
            || root.join(format!("sdk/src/{name}/mod.rs")).exists();
        assert!(sdk, "sdk/src/{name}.rs");
        // `log` is a method of the SDK's Host and needs no rules of its own.
        if *name != "log" {
            assert!(
                sdk_list.contains(&format!("{name}: ")),
                "an entry for {name} in the SDK's capability_list!"
            );
            assert!(
                root.join(format!("rules/src/{name}.rs")).exists(),
                "rules/src/{name}.rs"
            );
        }
    }
}

#[test]
fn no_host_file_outside_a_capabilitys_folder_names_it_but_the_lists_and_the_exceptions() {
    let src = root().join("host/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found = Vec::new();
    for file in &files {
        let relative = file
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let is_test = relative.ends_with("tests.rs") || relative.ends_with("testing.rs");
        let listed = [
            "capabilities/registry.rs",
            "capabilities/conformance.rs",
            "capabilities/footprint.rs",
        ];
        if is_test || listed.contains(&relative.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        for name in NAMES {
            if !relative.starts_with(&format!("capabilities/{name}/")) && names_module(&text, name)
            {
                found.push((name.to_string(), relative.clone()));
            }
        }
    }
    let unexpected: Vec<_> = found
        .iter()
        .filter(|(name, file)| !EXCEPTIONS.iter().any(|(n, f, _)| n == name && f == file))
        .collect();
    assert!(
        unexpected.is_empty(),
        "capabilities named outside their folder and the registration list: {unexpected:?}; \
         use a hook of the Capability trait, or add the file to EXCEPTIONS with its reason"
    );
    let stale: Vec<_> = EXCEPTIONS
        .iter()
        .filter(|(n, f, _)| !found.iter().any(|(name, file)| name == n && file == f))
        .collect();
    assert!(
        stale.is_empty(),
        "exceptions that no longer hold: {stale:?}"
    );
}

#[test]
fn module_names_are_found_in_every_form_and_only_whole() {
    assert!(names_module(
        "use crate::capabilities::kube::OwnLease;",
        "kube"
    ));
    assert!(names_module("use super::kube;", "kube"));
    assert!(names_module(
        "use crate::capabilities::{files, kube::X};",
        "kube"
    ));
    assert!(!names_module("use crate::capabilities::kubelet;", "kube"));
    assert!(!names_module(
        "use crate::capabilities::{files, http};",
        "kube"
    ));
}
