//! The daemon's fleet member: one task per process renewing this node's
//! Lease and giving settled tickets back, restarted when `[host.fleet]`
//! changes (a reload with the same settings keeps it and what it observed).

use crate::capabilities::gate::Budgets;
use crate::config::HostConfig;
use crate::fleet::FleetSettings;

/// What the running member was made from: a change of any restarts it.
type Made = (FleetSettings, String, Option<std::path::PathBuf>);

#[derive(Default)]
pub struct Member {
    running: Option<(Made, tokio::task::JoinHandle<()>)>,
}

impl Member {
    /// Run the member `host` configures (none without `[host.fleet]`) and
    /// make the gate ask it.
    pub fn update(&mut self, host: &HostConfig, budgets: &Budgets) {
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
        let fleet = crate::fleet::for_host(host);
        if let Some(fleet) = &fleet {
            tracing::info!(namespace = %fleet.settings().namespace, classes = fleet.settings().classes.len(), "fleet budgets on");
            let task = tokio::spawn(fleet.clone().run());
            self.running = Some((made.expect("a fleet is made from settings"), task));
        }
        budgets.set_fleet(fleet);
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if let Some((_, task)) = self.running.take() {
            task.abort();
        }
    }
}
