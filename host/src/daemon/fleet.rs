//! The daemon's fleet member: one task per process renewing this node's
//! Lease and giving settled tickets back, restarted when `[host.fleet]`
//! changes (a reload with the same settings keeps it and what it observed).

use crate::capabilities::gate::Budgets;
use crate::config::HostConfig;
use crate::fleet::revision::Running;
use crate::fleet::settings::FleetSettings;
use std::sync::Arc;

/// What the running member was made from: a change of any restarts it.
type Made = (FleetSettings, String, Option<std::path::PathBuf>);

#[derive(Default)]
pub struct Member {
    running: Option<(Made, tokio::task::JoinHandle<()>)>,
}

impl Member {
    /// Run the member `host` configures (none without `[host.fleet]`),
    /// publishing what `running` says, and make the gate ask it.
    pub fn update(&mut self, host: &HostConfig, budgets: &Budgets, running: &Arc<Running>) {
        let made = host.fleet.clone().map(|settings| {
            (
                settings,
                host.node_name.clone(),
                host.capabilities.kube.kubeconfig.clone(),
            )
        });
        if self.running.as_ref().map(|(m, _)| m) == made.as_ref() {
            return;
        }
        if let Some((_, task)) = self.running.take() {
            task.abort();
        }
        let Some(made) = made else {
            budgets.set_fleet(None);
            return;
        };
        let (settings, node, kubeconfig) = made.clone();
        tracing::info!(namespace = %settings.namespace, classes = settings.classes.len(), "fleet budgets on");
        let fleet = crate::fleet::member(&node, settings, kubeconfig, Some(running.clone()));
        self.running = Some((made, tokio::spawn(fleet.clone().run())));
        budgets.set_fleet(Some(
            fleet as Arc<dyn crate::capabilities::gate::FleetBudget>,
        ));
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if let Some((_, task)) = self.running.take() {
            task.abort();
        }
    }
}
