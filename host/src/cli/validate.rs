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
            Ok(plugin) => println!(
                "ok: {} ({}, {} ms{})",
                loaded.config.name,
                plugin.digest,
                plugin.load_time.as_millis(),
                match plugin.cache {
                    crate::runtime::CacheOutcome::Hit => ", cached",
                    _ => "",
                }
            ),
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
