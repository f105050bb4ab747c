//! A config mounted from a ConfigMap hot-reloads like a plain file: the real
//! `tend run -c <dir>/tend.toml` on a directory laid out and updated exactly
//! as kubelet does it (`..<timestamp>/tend.toml`, `..data` -> it, `tend.toml`
//! -> `..data/tend.toml`; an update swaps `..data` by rename and deletes the
//! old timestamped dir, so `tend.toml` itself never changes).

use std::time::Duration;
use tend_e2e::{ConfigMapVolume, Sandbox, free_port, plugin_status, wait_for_plugin, wait_until};

fn runs(status: &serde_json::Value) -> u64 {
    status["reconciles"].as_u64().unwrap_or(0)
}

/// The config, with absolute paths: relative ones would resolve next to
/// `tend.toml`, inside the ConfigMap volume.
fn config(sandbox: &Sandbox, port: u16, second_enabled: bool, second_mode: &str) -> String {
    format!(
        "[host]\nplugins-dir = \"{plugins}\"\nstate-dir = \"{state}\"\ncache-dir = \"{cache}\"\n\
         node-name = \"e2e-node\"\nlisten = \"127.0.0.1:{port}\"\n\
         [plugins.first]\nfile = \"{plugins}/chaos.wasm\"\ninterval = \"100ms\"\n[plugins.first.config]\nmode = \"ok\"\n\
         [plugins.second]\nfile = \"{plugins}/chaos.wasm\"\nenabled = {second_enabled}\ninterval = \"100ms\"\n\
         [plugins.second.config]\nmode = \"{second_mode}\"\n",
        plugins = sandbox.path("plugins").display(),
        state = sandbox.path("state").display(),
        cache = tend_e2e::workspace_root()
            .join("target/e2e-cache")
            .display(),
    )
}

#[test]
fn a_configmap_volume_swap_reloads_the_config_each_time() {
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "chaos");
    let port = free_port();
    let mut volume = ConfigMapVolume::new(&sandbox.path("etc-tend"));
    volume.publish(&[("tend.toml", &config(&sandbox, port, false, "ok"))]);
    let tend_toml = volume.path("tend.toml");
    assert!(tend_toml.is_symlink());
    assert_eq!(
        std::fs::read_link(&tend_toml).unwrap(),
        std::path::Path::new("..data/tend.toml")
    );

    let daemon = sandbox.daemon_for(&tend_toml);
    wait_for_plugin(port, "first", "running", |p| runs(p) >= 2);
    assert_eq!(plugin_status(port, "second")["state"], "disabled");

    // Swap 1: enable `second`. tend.toml is untouched; ..data now points elsewhere
    // and the old timestamped dir is gone.
    let before = volume.data_dir().unwrap();
    volume.publish(&[("tend.toml", &config(&sandbox, port, true, "ok"))]);
    assert_ne!(volume.data_dir().unwrap(), before);
    assert!(!before.exists(), "kubelet deletes the old timestamped dir");
    assert_eq!(volume.timestamped_dirs().len(), 1);
    wait_for_plugin(port, "second", "enabled by the first swap", |p| {
        p["state"] == "ready" && runs(p) >= 1
    });

    // Swap 2: change `second`'s plugin config; the old dir goes again.
    let before = volume.data_dir().unwrap();
    volume.publish(&[("tend.toml", &config(&sandbox, port, true, "fail"))]);
    assert!(!before.exists());
    assert_eq!(volume.timestamped_dirs().len(), 1);
    wait_for_plugin(
        port,
        "second",
        "new plugin config from the second swap",
        |p| {
            p["state"] == "failing"
                && p["last"]["message"]
                    .as_str()
                    .unwrap_or("")
                    .contains("chaos was asked to fail")
        },
    );

    // Swap 3: back to healthy, and within the same deadline as a plain edit.
    volume.publish(&[("tend.toml", &config(&sandbox, port, true, "ok"))]);
    wait_until(Duration::from_secs(10), "the third swap to apply", || {
        plugin_status(port, "second")["state"] == "ready"
    });

    // No reload was rejected, nothing restarted, `first` was never disturbed.
    assert!(tend_e2e::status(port)["config_error"].is_null());
    assert_eq!(daemon.count(&["tend starting"]), 1, "{}", daemon.log());
    assert_eq!(
        daemon.count(&["plugin=first", "trigger=startup", "healthy"]),
        1,
        "{}",
        daemon.log()
    );
    assert!(daemon.terminate(Duration::from_secs(10)));
}
