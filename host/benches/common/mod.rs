//! Shared by the bench binaries.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tend::capabilities::Services;
use tend::capabilities::tape::Tape;
use tend::config::{Config, PluginConfig};
use tend::runtime::{CallRequest, CompiledPlugin, ReconcileReport, Runtime};
use tend::scheduler::Trigger;

/// target/plugins, where `cargo xtask plugins` puts the built plugins.
pub fn plugins_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    assert!(
        dir.join("chaos.wasm").exists(),
        "run `cargo xtask plugins` first"
    );
    dir
}

/// A config of `plugins` (TOML text) under the `[host]` section every
/// in-process bench shares: plugins from target/plugins, node "bench", a state
/// dir that is never opened (the benches bring their own backends).
pub fn bench_config(plugins: &str) -> Config {
    let text = format!(
        "[host]\nplugins-dir = \"{}\"\nstate-dir = \"unused\"\nnode-name = \"bench\"\n{plugins}",
        plugins_dir().display()
    );
    Config::parse(Path::new("/bench/tend.toml"), &text).unwrap()
}

/// One reconcile on an interval trigger, as the scheduler asks for it, timed
/// around the runtime's call alone: what the host adds to the plugin's work.
pub async fn timed_reconcile(
    runtime: &Runtime,
    plugin: &CompiledPlugin,
    config: &PluginConfig,
    services: &Services,
) -> (Duration, ReconcileReport) {
    let request = CallRequest {
        services,
        planned: None,
        triggers: vec![Trigger::new("interval")],
        node_name: "bench",
        dry_run: false,
        tape: Tape::Off,
    };
    let started = Instant::now();
    let report = runtime.reconcile(plugin, config, request).await;
    (started.elapsed(), report)
}
