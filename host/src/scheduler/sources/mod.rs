//! Trigger sources: what reconciles a plugin when something outside the
//! scheduler changes: the host's file watches, and the source each
//! capability that can notice changes declares (systemd unit state,
//! Kubernetes watches), collected from the registration list. The supervisor
//! starts them all and hands each the config after every reload.

mod files;

pub use files::{FileSource, is_atomic_write_temp};

use super::{Trigger, Triggers};
use crate::capabilities::Backends;
use crate::capabilities::CapabilityWatch;
use crate::capabilities::watch::TriggerSink;
use crate::config::Config;
use std::sync::Arc;

pub trait TriggerSource: Send {
    /// Watch what the enabled plugins of `config` ask for, replacing what was
    /// watched before; changes are sent through `triggers`.
    fn update(&mut self, config: &Config, triggers: &Triggers);
    /// What `plugin` waits on from this source, in words, for `tend status NAME`.
    fn waits_on(&self, config: &Config, plugin: &str) -> Vec<String>;
}

/// Every trigger source: the host's own (file changes under `watch` paths),
/// then every capability's, in registration order.
pub fn all(backends: &Backends) -> Vec<Box<dyn TriggerSource>> {
    let mut sources: Vec<Box<dyn TriggerSource>> = vec![Box::new(FileSource::default())];
    for source in backends.watches() {
        sources.push(Box::new(WatchSource(source)));
    }
    sources
}

/// A capability's source, told the grants of the enabled plugins.
struct WatchSource(Box<dyn CapabilityWatch>);

impl TriggerSource for WatchSource {
    fn update(&mut self, config: &Config, triggers: &Triggers) {
        let plugins: Vec<_> = config
            .enabled_plugins()
            .map(|p| (p.name.as_str(), &p.grants))
            .collect();
        self.0.update(&plugins, Arc::new(triggers.clone()));
    }

    fn waits_on(&self, config: &Config, plugin: &str) -> Vec<String> {
        config
            .enabled_plugins()
            .find(|p| p.name == plugin)
            .map(|p| self.0.waits_on(&p.grants))
            .unwrap_or_default()
    }
}

impl TriggerSink for Triggers {
    fn reconcile(&self, plugin: &str, kind: &'static str, subject: String) {
        self.send(plugin, Trigger::with_subject(kind, subject));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capability_source_is_asked_with_the_grants_of_enabled_plugins_only() {
        let mut text = String::from("[host]\nplugins-dir = \"p\"\nstate-dir = \"s\"\n");
        for (plugin, enabled) in [("a", true), ("b", false)] {
            text += &format!(
                "[plugins.{plugin}]\nenabled = {enabled}\n[plugins.{plugin}.grants]\nsystemd = {{ units = [\"tend-*.service\"], watch = true }}\n"
            );
        }
        let config = Config::parse(std::path::Path::new("/t/tend.toml"), &text).unwrap();
        let (backends, _) = Backends::fake();
        let waits_on = |plugin: &str| -> Vec<String> {
            all(&backends)
                .iter()
                .flat_map(|source| source.waits_on(&config, plugin))
                .collect()
        };
        assert_eq!(
            waits_on("a"),
            ["active-state changes of units tend-*.service"]
        );
        assert!(
            waits_on("b").is_empty(),
            "a disabled plugin waits on nothing"
        );
    }
}
