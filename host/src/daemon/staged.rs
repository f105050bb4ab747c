//! The supervisor under staged rollouts (`[host.fleet.rollout]`): a change
//! of the operator's files is taken in as a held revision
//! ([`super::staging`]), and the running plugins change only when
//! [`crate::fleet::adoption`] says so, from the rollout the fleet member
//! last read ([`super::rollout`]), or when the node reverts a candidate on
//! its own.

use super::staging::{Held, Intake, Staging, intake};
use super::{Event, Supervisor, config_identity};
use crate::config::{Config, diff::diff};
use crate::fleet::adoption::{acknowledged, choose, should_revert};
use crate::fleet::revision::Staged;
use crate::runtime::Runtime;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How often a staged node looks at its candidate's traps and timeouts.
pub const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Whether `config` stages its changes.
pub fn wanted(config: &Config) -> bool {
    config
        .host
        .fleet
        .as_ref()
        .is_some_and(|f| f.rollout.is_some())
}

/// The node's store, and the config to start with: the adopted revision's,
/// or on the very first start what the files ask for (taken in now).
pub async fn open(
    config_path: &Path,
    config: &Config,
    runtime: &Arc<Runtime>,
) -> anyhow::Result<(Staging, Config)> {
    let mut staging = Staging::open(config_path, &config.host.state_dir)?;
    if staging.adopted().is_none() {
        let held = intake(Intake {
            config_path: config_path.to_path_buf(),
            components: staging.components_dir(),
            runtime: runtime.clone(),
        })
        .await
        .map_err(|e| anyhow::anyhow!("staged rollouts: cannot take in the first revision: {e}"))?;
        staging.offer(held)?;
    }
    let adopted = staging.adopted().expect("a first offer adopts");
    tracing::info!(revision = %adopted.record.revision, "staged rollouts: running the adopted revision");
    let config = adopted.config.clone();
    Ok((staging, config))
}

impl Supervisor {
    /// Take in what the operator's files ask for, in the background (one
    /// intake at a time; a change meanwhile takes them in again after it).
    pub(super) fn take_in(&mut self) {
        let Some(staging) = &self.staging else {
            return;
        };
        if self.intaking {
            self.intake_again = true;
            return;
        }
        self.intaking = true;
        let how = Intake {
            config_path: self.shared.config_path.clone(),
            components: staging.components_dir(),
            runtime: self.shared.runtime.clone(),
        };
        let events = self.events.clone();
        tokio::spawn(async move {
            let _ = events.send(Event::Staged(Box::new(intake(how).await)));
        });
    }

    /// Any change in a watched folder is taken in: an intake that finds
    /// the revision already held changes nothing.
    pub(super) fn changed_staged(&mut self, _paths: &BTreeSet<PathBuf>) {
        self.config_seen = config_identity(&self.shared.config_path);
        self.take_in();
    }

    /// An intake finished: hold its revision, then follow the rollout.
    pub(super) fn staged(&mut self, result: Result<Held, String>) {
        self.intaking = false;
        if std::mem::take(&mut self.intake_again) {
            return self.take_in();
        }
        let held = match result {
            Ok(held) => held,
            Err(e) => {
                return self.reject_config(format!(
                    "{e} (not taken in as a revision: the adopted one keeps running)"
                ));
            }
        };
        let restart = diff(&self.config, &held.config).needs_restart;
        if !restart.is_empty() {
            return self.reject_config(format!(
                "{}: changing [host] {} needs a restart of tend",
                self.shared.config_path.display(),
                restart.join(", ")
            ));
        }
        *self.shared.config_error.write().unwrap() = None;
        let staging = self.staging.as_mut().expect("staged");
        let revision = held.record.revision.clone();
        match staging.offer(held) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return self.take_in(),
            Err(e) => {
                return tracing::error!(%revision, "staged rollouts: cannot keep the revision: {e}");
            }
        }
        if let Some(desired) = staging.desired() {
            tracing::info!(%desired, "staged rollouts: the files ask for a new revision; it waits for this node's step");
        }
        self.follow();
    }

    /// Run what the rollout says for this node, or revert a candidate that
    /// keeps failing; then say in the report what the node holds.
    pub(super) fn follow(&mut self) {
        let Some(staging) = self.staging.as_mut() else {
            return;
        };
        let sighting = self.seen.borrow().clone();
        let kept = match &sighting.rollout {
            Some(rollout) => {
                let seen_to = staging.reverted().is_some_and(|r| acknowledged(r, rollout));
                let cleared = match seen_to {
                    true => staging.set_reverted(None),
                    false => Ok(()),
                };
                cleared.and_then(|()| staging.stable_is(&rollout.stable))
            }
            None => Ok(()),
        };
        if let Err(e) = kept {
            tracing::error!("staged rollouts: cannot save the node's book: {e}");
        }
        let Some(holding) = staging.holding() else {
            return;
        };
        let running = &self.shared.running;
        let failing = running.revision().as_deref() == Some(holding.adopted)
            && running
                .counters()
                .is_some_and(|c| should_revert(&holding, &c));
        let target = match failing {
            true => {
                let (candidate, stable) = (holding.adopted.to_string(), holding.stable);
                let stable = stable
                    .expect("should_revert needs a stable revision")
                    .to_string();
                tracing::warn!(%candidate, %stable, "staged rollouts: the candidate keeps trapping or timing out: reverting to the stable revision");
                if let Err(e) = staging.set_reverted(Some(candidate)) {
                    tracing::error!("staged rollouts: cannot save the node's book: {e}");
                }
                Some(stable)
            }
            false => choose(&holding, sighting.rollout.as_ref(), sighting.me.as_ref()),
        };
        if let Some(target) = target {
            self.switch(&target);
        }
        self.publish_staged();
    }

    /// Run the held revision `target` from now on.
    fn switch(&mut self, target: &str) {
        let staging = self.staging.as_mut().expect("staged");
        let Some(held) = staging.get(target).cloned() else {
            return;
        };
        let before = staging
            .adopted()
            .map(|a| a.record.components.clone())
            .unwrap_or_default();
        if let Err(e) = staging.adopt(target) {
            return tracing::error!(%target, "staged rollouts: cannot save the adoption, not switching: {e}");
        }
        let digest = |c: Option<&super::staging::Component>| c.map(|c| c.digest.clone());
        let changed: BTreeSet<PathBuf> = held
            .config
            .enabled_plugins()
            .filter(|p| digest(before.get(&p.name)) != digest(held.record.components.get(&p.name)))
            .map(|p| p.file.clone())
            .collect();
        tracing::info!(revision = %target, "staged rollouts: switching");
        self.apply_config(
            held.config,
            &format!("staged rollouts: {target} adopted"),
            changed,
        );
        self.evict_cache();
    }

    fn publish_staged(&self) {
        let Some(staging) = &self.staging else {
            return;
        };
        let desired = staging.desired().map(str::to_string);
        let named = desired.as_deref().or(staging.holding().map(|h| h.adopted));
        self.shared.running.stage(Staged {
            reduces_risk: named.is_some_and(|r| staging.reduces_risk(r)),
            desired,
            reverted: staging.reverted().map(str::to_string),
        });
    }
}
