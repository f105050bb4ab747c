//! `tend check` and `tend plugins inspect`.

use super::node::Node;
use crate::capabilities::Services;
use crate::runtime::Runtime;
use std::path::Path;
use std::process::ExitCode;

/// The config parses and every enabled plugin compiles and exports the world.
pub async fn check(config_path: &Path) -> anyhow::Result<ExitCode> {
    let node = Node::new(crate::config::Config::load(config_path)?)?;
    let mut failed = false;
    let loaded = node.load_enabled().await;
    for loaded in &loaded {
        match &loaded.plugin {
            Ok(plugin) => {
                println!(
                    "ok: {} ({}, {} ms{})",
                    loaded.config.name,
                    plugin.digest,
                    plugin.load_time.as_millis(),
                    match plugin.cache {
                        crate::runtime::CacheOutcome::Hit => ", cached",
                        crate::runtime::CacheOutcome::Precompiled => ", precompiled",
                        _ => "",
                    }
                );
                let mut gated = loaded.config.grants.gated();
                // Watched paths must lie inside the files grants.
                if !loaded.config.watch.is_empty() {
                    gated.retain(|(capability, _)| *capability != "files");
                }
                for hint in unused_grants(&loaded.config.name, &plugin.imports, &gated) {
                    super::report::line(&hint);
                }
            }
            Err(e) => {
                failed = true;
                super::report::line(&format!("error: {}: {e}", loaded.config.name));
            }
        }
    }
    let disabled = node.config.plugins.values().filter(|p| !p.enabled).count();
    println!(
        "{}: {} plugin(s) enabled, {disabled} disabled",
        config_path.display(),
        loaded.len()
    );
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// A plugin's grants held against what its component imports: a grant of a
/// capability it does not import, and the host does not use for it either
/// (`gated`), is never used, privilege to take away. (The
/// other way is no sign of anything: a plugin may call a capability only in
/// some configurations, and componentize-py and QuickJS components import
/// every interface of the world.)
fn unused_grants(plugin: &str, imports: &[String], gated: &[(&str, bool)]) -> Vec<String> {
    let imported = |capability: &str| {
        imports.iter().any(|import| {
            import
                .strip_prefix("tend:plugin/")
                .and_then(|i| i.split('@').next())
                == Some(capability)
        })
    };
    gated
        .iter()
        .filter(|&&(capability, granted)| granted && !imported(capability))
        .map(|(capability, _)| {
            format!(
                "hint: {plugin}: its {capability} grant is never used (the plugin does not import tend:plugin/{capability}): remove [plugins.{plugin}.grants] {capability}"
            )
        })
        .collect()
}

/// The world, imports, exports and self-description of a component file.
pub async fn inspect(file: &Path, cache_dir: Option<&Path>) -> anyhow::Result<ExitCode> {
    let runtime = Runtime::new(cache_dir, 1)?;
    let plugin = runtime.load(file)?;
    super::bound_compile_cache(&runtime, &plugin.digest);
    let (services, _) = Services::fake();
    let info = runtime.describe(&plugin, &services).await?;
    println!("file:     {}", file.display());
    println!("digest:   {}", plugin.digest);
    // The self-description is the plugin's text: through the one printer.
    super::report::line(&format!(
        "plugin:   {} {} ({})",
        info.name, info.version, info.summary
    ));
    println!("world:    tend:plugin/plugin@0.1.0");
    match cache_dir {
        Some(dir) => println!("compiled: {} ({})", plugin.cache.label(), dir.display()),
        None => println!("compiled: now (no compile cache)"),
    }
    let capabilities: Vec<&str> = plugin
        .imports
        .iter()
        .filter_map(|i| i.strip_prefix("tend:plugin/"))
        .filter(|i| !i.starts_with("types@"))
        .collect();
    println!("capabilities: {}", capabilities.join(", "));
    println!("imports:");
    for import in &plugin.imports {
        println!("  {import}");
    }
    println!("exports:");
    for export in &plugin.exports {
        println!("  {export}");
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::Grants;

    #[test]
    fn every_gated_capability_is_named_and_nothing_is_granted_by_default() {
        let gated = Grants::default().gated();
        let names: Vec<&str> = gated.iter().map(|(name, _)| *name).collect();
        assert_eq!(
            names,
            [
                "files",
                "http",
                "systemd",
                "cri",
                "kube",
                "cloud",
                "logs",
                "conditions"
            ]
        );
        assert!(gated.iter().all(|(_, granted)| !granted), "{gated:?}");
    }

    #[test]
    fn a_grant_of_a_capability_the_plugin_does_not_import_is_hinted() {
        let grants: Grants = toml::from_str(
            r#"files = [{ path = "/etc/x", write = true }]
kube = [{ resource = "nodes", verbs = ["get"], names = ["$NODE"] }]"#,
        )
        .unwrap();
        let imports: Vec<String> = [
            "tend:plugin/log@0.1.0",
            "tend:plugin/files@0.1.0",
            "tend:plugin/http@0.1.0",
            "wasi:io/poll@0.2.6",
        ]
        .map(String::from)
        .into();
        assert_eq!(
            unused_grants("probe", &imports, &grants.gated()),
            [
                "hint: probe: its kube grant is never used (the plugin does not import tend:plugin/kube): remove [plugins.probe.grants] kube"
            ]
        );
        // http imported and not granted: no hint (it may be optional).
        let files_only: Grants = toml::from_str(r#"files = [{ path = "/etc/x" }]"#).unwrap();
        assert!(unused_grants("probe", &imports, &files_only.gated()).is_empty());
        // Grants the host uses for the plugin (its triggers, its conditions)
        // are used whatever it imports.
        let host_uses: Grants = toml::from_str(
            r#"kube = [{ resource = "nodes", verbs = ["watch"], names = ["$NODE"] }]
systemd = { units = ["kubelet.service"], watch = true }
conditions = ["KernelDeadlock"]"#,
        )
        .unwrap();
        assert!(unused_grants("probe", &imports, &host_uses.gated()).is_empty());
    }
}
