//! What adding a capability takes, checked by dependency (docs/design.md,
//! "Adding a capability"): every host module outside a capability's folder
//! that depends on it (a path into `capabilities::NAME`, followed through
//! re-exports, or into the rules crate's `tend_rules::NAME`) is either the
//! registration list or a listed exception with its reason. So a capability is
//! its WIT file, its host folder, its rules file, its SDK file and one line in
//! each list, and nothing hand-written elsewhere names it unnoticed.

use crate::graph::{Module, edges, names};
use crate::root;

/// Host modules outside a capability's folder that may depend on it, and why.
pub const EXCEPTIONS: &[(&str, &str, &str)] = &[
    (
        "kube",
        "capabilities::conditions",
        "NodeConditions are written to the own Node with the kube capability's client, settings and rate bounds",
    ),
    (
        "kube",
        "capabilities::conditions::real",
        "the Node's status and taints are written with the kube capability's client and its throttle",
    ),
    (
        "conditions",
        "config",
        "a condition type has one owner across plugins (checked when the config is read), and [host.kube] is copied into the conditions settings",
    ),
    (
        "conditions",
        "cli::rbac",
        "`tend rbac` renders the access a conditions grant needs (the own nodes/status, and the own Node for taints)",
    ),
    (
        "state",
        "capabilities::gate::budgets",
        "budgets are kept in the state store, under a namespace no plugin can name",
    ),
    (
        "state",
        "capabilities::services",
        "the gate's budgets are built on the state backend (kept under a namespace no plugin can name)",
    ),
    (
        "log",
        "runtime::call",
        "a reconcile's report counts the plugin's log lines its limits dropped",
    ),
    (
        "log",
        "daemon::runner",
        "what the host logs on a plugin's behalf spends that plugin's log budget",
    ),
    (
        "systemd",
        "scheduler::trigger",
        "the scheduler's list of trigger kinds re-exports the unit trigger's",
    ),
    (
        "kube",
        "config",
        "the election Lease of [host.leader-election] is handed to the kube capability, which refuses plugin writes to it",
    ),
    (
        "kube",
        "daemon",
        "the leader elector is started with the capability's kubeconfig",
    ),
    (
        "kube",
        "daemon::leader",
        "the leader elector talks to the API server with the capability's connection settings",
    ),
    (
        "kube",
        "scheduler::trigger",
        "the scheduler's list of trigger kinds re-exports the watch trigger's",
    ),
    (
        "kube",
        "cli::rbac",
        "`tend rbac` renders the plugins whose grants name kube",
    ),
    (
        "kube",
        "cli::rbac::rules",
        "`tend rbac` renders the kube grants as the RBAC rules they need: a command about that one capability",
    ),
    (
        "kube",
        "fleet::kube",
        "the fleet's Leases and Nodes are read and written with the capability's client",
    ),
    (
        "kube",
        "daemon::fleet",
        "the fleet member is started with the capability's kubeconfig",
    ),
    (
        "kube",
        "cli::node",
        "a one-shot run's fleet member uses the capability's kubeconfig, as the daemon's does",
    ),
    (
        "kube",
        "cli::rollout",
        "`tend rollout status` reads the node Leases with the capability's kubeconfig, as the fleet member does",
    ),
    (
        "conditions",
        "fleet::settings",
        "a class's settle conditions are NodeCondition types, checked by the conditions capability's own rule",
    ),
    (
        "metrics",
        "daemon::metrics",
        "the host's own families on /metrics are the names plugin series may not take (tend_rules::metrics::HOST_FAMILIES)",
    ),
];

/// The modules that list every capability: the registration list.
const LISTS: [&str; 1] = ["capabilities::registry"];

/// (capability, host module) for every module outside the capability's
/// folder that depends on it.
pub fn sites(capabilities: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    let mut modules = names(&root().join("host/src"))?;
    // A callback of the registration list is the list at work, not a
    // dependency on each capability.
    for names in modules.values_mut() {
        names.listed.clear();
    }
    let edges = edges(&modules);
    let mut found = Vec::new();
    for capability in capabilities {
        let inside = |m: &Module| m.len() >= 2 && m[0] == "capabilities" && &m[1] == capability;
        for (module, names) in &modules {
            let name = module.join("::");
            if inside(module) || LISTS.contains(&name.as_str()) {
                continue;
            }
            let depends = edges[module].iter().any(inside)
                || names.rules.contains(capability)
                || names.fields.contains(capability);
            if depends {
                found.push((capability.clone(), name));
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capabilities() -> Vec<String> {
        crate::generate::capability_names().unwrap()
    }

    /// Each capability has its WIT file and `import` line, its host folder,
    /// its SDK file and SDK list entry, and (but `log`) its rules file.
    #[test]
    fn a_capability_is_its_wit_file_its_folders_and_a_line_in_each_list() {
        let root = root();
        let world = std::fs::read_to_string(root.join("wit/world.wit")).unwrap();
        let sdk_list = std::fs::read_to_string(root.join("sdk/src/lib.rs")).unwrap();
        let registry =
            std::fs::read_to_string(root.join("host/src/capabilities/registry.rs")).unwrap();
        for name in capabilities() {
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
            assert!(
                registry.contains(&format!("{name}: $crate::capabilities::{name}::")),
                "a line for {name} in capability_list! (host/src/capabilities/registry.rs)"
            );
            let sdk = root.join(format!("sdk/src/{name}.rs")).exists()
                || root.join(format!("sdk/src/{name}/mod.rs")).exists();
            assert!(sdk, "sdk/src/{name}.rs");
            // `log` is a method of the SDK's Host and needs no rules of its own.
            if name != "log" {
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
    fn no_host_module_outside_a_capabilitys_folder_depends_on_it_but_the_list_and_the_exceptions() {
        let found = sites(&capabilities()).unwrap();
        let allowed: Vec<(String, String)> = EXCEPTIONS
            .iter()
            .map(|(c, m, _)| (c.to_string(), m.to_string()))
            .collect();
        let unexpected: Vec<_> = found.iter().filter(|s| !allowed.contains(s)).collect();
        assert!(
            unexpected.is_empty(),
            "these depend on a capability outside its folder: move the code into the capability (a hook of its Capability impl), or add an exception with its reason: {unexpected:?}"
        );
        let stale: Vec<_> = allowed.iter().filter(|e| !found.contains(e)).collect();
        assert!(stale.is_empty(), "exceptions no longer needed: {stale:?}");
    }
}
