//! Trigger sources: what reconciles a plugin when something outside the
//! scheduler changes. Each capability that can notice changes provides one
//! (file changes, systemd unit state, Kubernetes watches); the
//! supervisor starts them all and hands each the config after every reload.

mod files;
mod kube;
mod units;

pub use files::{FileSource, is_atomic_write_temp};
pub use kube::KubeSource;
pub use units::UnitSource;

use super::Triggers;
use crate::capabilities::Backends;
use crate::config::Config;

pub trait TriggerSource: Send {
    /// Watch what the enabled plugins of `config` ask for, replacing what was
    /// watched before; changes are sent through `triggers`.
    fn update(&mut self, config: &Config, triggers: &Triggers);
    /// What `plugin` waits on from this source, in words, for `tend status NAME`.
    fn waits_on(&self, config: &Config, plugin: &str) -> Vec<String>;
}

/// Every trigger source, in registration order.
pub fn all(backends: &Backends) -> Vec<Box<dyn TriggerSource>> {
    vec![
        Box::new(FileSource::default()),
        Box::new(UnitSource::new(backends.systemd.clone())),
        Box::new(KubeSource::new(backends.kube.clone())),
    ]
}
