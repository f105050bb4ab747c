//! What a config reload changes: pure, so every rule is tested without a daemon.

use super::{Config, PluginConfig};

/// How the plugins of a new config differ from the running one.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ConfigDiff {
    /// Enabled now and not before (new, or re-enabled).
    pub added: Vec<String>,
    /// Enabled before and not now (gone, or disabled).
    pub removed: Vec<String>,
    /// Enabled before and now, with another component file (or, from a
    /// registry, another reference or signing key: pulled and checked again).
    pub file_changed: Vec<String>,
    /// Enabled before and now, same file, other settings (grants, limits,
    /// triggers, plugin config).
    pub settings_changed: Vec<String>,
    /// `[host]` keys that differ and only take effect on restart.
    pub needs_restart: Vec<&'static str>,
}

impl ConfigDiff {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.file_changed.is_empty()
            && self.settings_changed.is_empty()
    }
}

pub fn diff(old: &Config, new: &Config) -> ConfigDiff {
    let enabled = |config: &Config, name: &str| -> Option<PluginConfig> {
        config.plugins.get(name).filter(|p| p.enabled).cloned()
    };
    let mut result = ConfigDiff::default();
    let names: std::collections::BTreeSet<&String> =
        old.plugins.keys().chain(new.plugins.keys()).collect();
    for name in names {
        match (enabled(old, name), enabled(new, name)) {
            (None, Some(_)) => result.added.push(name.clone()),
            (Some(_), None) => result.removed.push(name.clone()),
            (Some(before), Some(after)) if before.file != after.file || before.oci != after.oci => {
                result.file_changed.push(name.clone())
            }
            (Some(before), Some(after)) if before != after => {
                result.settings_changed.push(name.clone())
            }
            _ => {}
        }
    }
    let (a, b) = (&old.host, &new.host);
    // The keys [`with_restart_settings_of`] carries over.
    for (key, differs) in [
        ("plugins-dir", a.plugins_dir != b.plugins_dir),
        ("state-dir", a.state_dir != b.state_dir),
        ("cache-dir", a.cache_dir != b.cache_dir),
        ("precompiled-dir", a.precompiled_dir != b.precompiled_dir),
        ("listen", a.listen != b.listen),
        ("capability settings", a.capabilities != b.capabilities),
    ] {
        if differs {
            result.needs_restart.push(key);
        }
    }
    result
}

/// `new` with the `[host]` settings that take effect only on restart (those
/// [`diff`] lists in `needs_restart`) taken from `running`: what a reload can
/// apply of `new` at once.
pub fn with_restart_settings_of(mut new: Config, running: &Config) -> Config {
    let (host, from) = (&mut new.host, &running.host);
    host.plugins_dir = from.plugins_dir.clone();
    host.state_dir = from.state_dir.clone();
    host.cache_dir = from.cache_dir.clone();
    host.precompiled_dir = from.precompiled_dir.clone();
    host.listen = from.listen.clone();
    host.capabilities = from.capabilities.clone();
    new
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config(plugins: &str) -> Config {
        let text = format!("[host]\nplugins-dir = \"p\"\nstate-dir = \"s\"\n{plugins}");
        Config::parse(Path::new("/etc/tend/tend.toml"), &text).unwrap()
    }

    #[test]
    fn classifies_each_plugin_change() {
        let old = config(
            "[plugins.same]\n[plugins.gone]\n[plugins.disabled-now]\n[plugins.was-off]\nenabled = false\n\
             [plugins.moved]\n[plugins.tuned]\ninterval = \"10s\"\n",
        );
        let new = config(
            "[plugins.same]\n[plugins.disabled-now]\nenabled = false\n[plugins.was-off]\n[plugins.fresh]\n\
             [plugins.moved]\nfile = \"elsewhere.wasm\"\n[plugins.tuned]\ninterval = \"20s\"\n",
        );
        let d = diff(&old, &new);
        assert_eq!(d.added, ["fresh", "was-off"]);
        assert_eq!(d.removed, ["disabled-now", "gone"]);
        assert_eq!(d.file_changed, ["moved"]);
        assert_eq!(d.settings_changed, ["tuned"]);
        assert!(d.needs_restart.is_empty());
    }

    #[test]
    fn plugin_config_and_grants_are_settings_changes() {
        let old = config("[plugins.a.config]\nx = 1\n");
        let new = config("[plugins.a.config]\nx = 2\n");
        assert_eq!(diff(&old, &new).settings_changed, ["a"]);
        let new =
            config("[plugins.a.grants]\nhttp = [\"http://x/*\"]\n[plugins.a.config]\nx = 1\n");
        assert_eq!(diff(&old, &new).settings_changed, ["a"]);
        assert!(diff(&old, &old).is_empty());
    }

    #[test]
    fn another_digest_or_signing_key_is_a_file_change() {
        let digest = |n: &str| format!("sha256:{}", n.repeat(64));
        let at = |d: &str, verify: &str| {
            config(&format!(
                "[plugins.a]\nfile = \"oci://127.0.0.1:5000/tend/a@{d}\"\n{verify}"
            ))
        };
        let old = at(&digest("1"), "");
        assert_eq!(diff(&old, &at(&digest("2"), "")).file_changed, ["a"]);
        let keyed = at(&digest("1"), "verify = { key = \"cosign.pub\" }\n");
        assert_eq!(diff(&old, &keyed).file_changed, ["a"]);
        assert!(diff(&keyed, &keyed).is_empty());
    }

    #[test]
    fn host_paths_and_listen_need_a_restart() {
        let old = config("");
        let text = "[host]\nplugins-dir = \"q\"\nstate-dir = \"s\"\nprecompiled-dir = \"p\"\nlisten = \"127.0.0.1:9464\"\n";
        let new = Config::parse(Path::new("/etc/tend/tend.toml"), text).unwrap();
        assert_eq!(
            diff(&old, &new).needs_restart,
            ["plugins-dir", "precompiled-dir", "listen"]
        );
        // What a reload can apply of it at once needs no restart.
        let now = with_restart_settings_of(new, &old);
        assert!(diff(&old, &now).needs_restart.is_empty());
    }
}
