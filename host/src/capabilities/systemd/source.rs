//! Unit triggers: a plugin whose systemd grant says `watch = true` is
//! reconciled when one of its granted units changes active state (systemd's
//! PropertiesChanged), with the unit as the trigger's subject. One bus
//! subscription serves every plugin; when the bus goes away it is opened
//! again with backoff.

use super::backend::SystemdBackend;
use super::grants::SystemdGrant;
use crate::capabilities::watch::{TriggerSink, Watch};
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

/// The trigger kind: "unit", with the unit as its subject.
pub const UNIT_TRIGGER: &str = "unit";

/// Whether `grant` asks for unit triggers.
fn watches(grant: &SystemdGrant) -> bool {
    grant.watch && !grant.units.is_empty()
}

impl Watch<SystemdGrant> for UnitSource {
    fn update(&mut self, watchers: Vec<(String, SystemdGrant)>, sink: Arc<dyn TriggerSink>) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        let watchers: Vec<_> = watchers.into_iter().filter(|(_, g)| watches(g)).collect();
        if watchers.is_empty() {
            return;
        }
        let backend = self.backend.clone();
        self.task = Some(tokio::spawn(async move {
            let mut backoff = Duration::from_millis(500);
            loop {
                match backend.changes().await {
                    Ok(mut changes) => {
                        backoff = Duration::from_millis(500);
                        while let Some(change) = changes.recv().await {
                            for (plugin, grant) in &watchers {
                                if grant.covers(&change.unit) {
                                    sink.reconcile(plugin, UNIT_TRIGGER, change.unit.clone());
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

    fn waits_on(&self, grant: &SystemdGrant) -> Vec<String> {
        if !watches(grant) {
            return vec![];
        }
        let units: Vec<&str> = grant.units.iter().map(|u| u.0.as_str()).collect();
        vec![format!(
            "active-state changes of units {}",
            units.join(", ")
        )]
    }
}
