//! Unit triggers: a plugin whose systemd grant says `watch = true` is
//! reconciled when one of its granted units changes active state (systemd's
//! PropertiesChanged), with the unit as the trigger's subject. One bus
//! subscription serves every plugin; when the bus goes away it is opened
//! again with backoff.

use super::TriggerSource;
use crate::capabilities::systemd::{SystemdBackend, SystemdGrant};
use crate::config::Config;
use crate::scheduler::{Trigger, Triggers, trigger};
use std::sync::Arc;
use std::time::Duration;

pub struct UnitSource {
    backend: Arc<dyn SystemdBackend>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl UnitSource {
    pub fn new(backend: Arc<dyn SystemdBackend>) -> Self {
        UnitSource {
            backend,
            task: None,
        }
    }
}

impl Drop for UnitSource {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

fn watched(config: &Config) -> Vec<(String, SystemdGrant)> {
    config
        .enabled_plugins()
        .filter(|p| p.grants.systemd.watch && !p.grants.systemd.units.is_empty())
        .map(|p| (p.name.clone(), p.grants.systemd.clone()))
        .collect()
}

impl TriggerSource for UnitSource {
    fn update(&mut self, config: &Config, triggers: &Triggers) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        let watchers = watched(config);
        if watchers.is_empty() {
            return;
        }
        let (backend, triggers) = (self.backend.clone(), triggers.clone());
        self.task = Some(tokio::spawn(async move {
            let mut backoff = Duration::from_millis(500);
            loop {
                match backend.changes().await {
                    Ok(mut changes) => {
                        backoff = Duration::from_millis(500);
                        while let Some(change) = changes.recv().await {
                            for (plugin, grant) in &watchers {
                                if grant.covers(&change.unit) {
                                    let subject = change.unit.clone();
                                    triggers.send(
                                        plugin,
                                        Trigger::with_subject(trigger::UNIT, subject),
                                    );
                                }
                            }
                        }
                        tracing::warn!(
                            "systemd unit changes ended (the bus went away); subscribing again"
                        );
                    }
                    Err(e) => {
                        tracing::warn!("cannot watch systemd units: {e}; retrying in {backoff:?}")
                    }
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }));
    }

    fn waits_on(&self, config: &Config, plugin: &str) -> Vec<String> {
        watched(config)
            .into_iter()
            .filter(|(name, _)| name == plugin)
            .map(|(_, grant)| {
                let units: Vec<&str> = grant.units.iter().map(|u| u.0.as_str()).collect();
                format!("active-state changes of units {}", units.join(", "))
            })
            .collect()
    }
}
