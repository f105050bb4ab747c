//! The daemon's fleet member: one task per process renewing this node's
//! Lease and giving settled tickets back, and with `[host.fleet.rollout]`
//! the rollout task ([`super::rollout`]); both restarted when `[host.fleet]`
//! changes (a reload with the same settings keeps them and what they observed).

use crate::capabilities::gate::Budgets;
use crate::config::HostConfig;
use crate::fleet::revision::Running;
use crate::fleet::settings::FleetSettings;
use std::sync::Arc;

/// What the running member was made from: a change of any restarts it.
type Made = (FleetSettings, String, Option<std::path::PathBuf>);

pub struct Member {
    running: Option<(Made, Tasks)>,
    leadership: tokio::sync::watch::Receiver<super::leader::Leadership>,
    seen: tokio::sync::watch::Sender<super::rollout::Sighting>,
}

/// The member's task, and the rollout's.
struct Tasks(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

impl Member {
    /// A member that follows `leadership` and tells what it sees of a
    /// rollout to `seen`.
    pub fn new(
        leadership: tokio::sync::watch::Receiver<super::leader::Leadership>,
        seen: tokio::sync::watch::Sender<super::rollout::Sighting>,
    ) -> Member {
        Member {
            running: None,
            leadership,
            seen,
        }
    }

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
        self.running = None;
        let Some(made) = made else {
            budgets.set_fleet(None);
            return;
        };
        let (settings, node, kubeconfig) = made.clone();
        tracing::info!(namespace = %settings.namespace, classes = settings.classes.len(), "fleet budgets on");
        let fleet = crate::fleet::member(
            &node,
            settings.clone(),
            kubeconfig.clone(),
            Some(running.clone()),
        );
        let mut tasks = vec![tokio::spawn(fleet.clone().run())];
        tasks.extend(super::rollout::spawn(
            settings,
            node,
            kubeconfig,
            self.leadership.clone(),
            self.seen.clone(),
        ));
        self.running = Some((made, Tasks(tasks)));
        budgets.set_fleet(Some(
            fleet as Arc<dyn crate::capabilities::gate::FleetBudget>,
        ));
    }
}
