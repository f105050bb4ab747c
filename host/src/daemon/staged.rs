//! The supervisor under staged rollouts (`[host.fleet.rollout]`): a change
//! of the operator's files is taken in as a held revision
//! ([`super::staging`]), and the running plugins change only when
//! [`crate::fleet::adoption`] says so, from the rollout the fleet member
//! last read ([`super::rollout`]), or when the node reverts a candidate on
//! its own.

use super::staging::{Component, Held, Intake, Staging, intake};
use super::{Event, Supervisor, config_identity};
use crate::config::Config;
use crate::config::diff::{diff, with_restart_settings_of};
use crate::fleet::adoption::{acknowledged, choose, should_revert};
use crate::fleet::revision::Staged;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
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

/// The node's store, and the config to start with: the adopted revision's;
/// for a node that never adopted one, the files' `[host]` with no plugin,
/// until the rollout says what runs here (see [`Supervisor::follow`]).
/// Either way `[host]`'s settings that need a restart are the files' (a
/// restart is when they apply: the DaemonSet's own rolling update).
pub fn open(config_path: &Path, files: &Config) -> anyhow::Result<(Staging, Config)> {
    let staging = Staging::open(config_path, &files.host.state_dir)?;
    let config = match staging.adopted() {
        Some(adopted) => {
            tracing::info!(revision = %adopted.record.revision, "staged rollouts: running the adopted revision");
            with_restart_settings_of(adopted.config.clone(), files)
        }
        None => {
            tracing::info!(
                "staged rollouts: no revision adopted yet: no plugin runs until the rollout says what runs on this node"
            );
            Config {
                plugins: Default::default(),
                ..files.clone()
            }
        }
    };
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

    /// A change of the config (or what its path leads to), of a plugin file
    /// a held revision names, or in the plugins dir is taken in; so is any
    /// change while the last intake failed (a file it missed may have come).
    /// Other files beside the config (a log) are not.
    pub(super) fn changed_staged(&mut self, paths: &BTreeSet<PathBuf>) {
        let plugins_dir = &self.config.host.plugins_dir;
        let files = self
            .staging
            .as_ref()
            .map(|s| s.plugin_files())
            .unwrap_or_default();
        let plugin = paths
            .iter()
            .any(|p| files.contains(p) || p.parent() == Some(plugins_dir.as_path()));
        let failed = self.shared.config_error.read().unwrap().is_some();
        if self.config_changed(paths) || plugin || failed {
            self.config_seen = config_identity(&self.shared.config_path);
            self.take_in();
        }
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
            tracing::warn!(
                "staged rollouts: the change of [host] {} applies when tend restarts (the DaemonSet's rolling update), not with this node's step",
                restart.join(", ")
            );
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
        if staging.adopted().is_none() {
            return self.adopt_first(&sighting);
        }
        let staging = self.staging.as_mut().expect("staged");
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
                let attempt = sighting.rollout.as_ref().map_or(0, |r| r.attempt);
                if let Err(e) = staging.set_reverted(Some((candidate, attempt))) {
                    tracing::error!("staged rollouts: cannot save the node's book: {e}");
                }
                Some(stable)
            }
            false => choose(&holding, sighting.rollout.as_ref(), sighting.me.as_ref()),
        };
        if let Some(target) = target {
            self.switch(&target);
        }
        self.publish_staged(&sighting);
    }

    /// A node that never adopted a revision takes the one the rollout runs
    /// here, once it holds it, or, when there is no rollout at all, what its
    /// files ask for (the first revision of the fleet). Until the rollout is
    /// read, and while it names a revision this node does not hold (a node
    /// that joined during a rollout or after an abort), no plugin runs.
    fn adopt_first(&mut self, sighting: &super::rollout::Sighting) {
        let staging = self.staging.as_mut().expect("staged");
        let Some(desired) = staging.desired().map(str::to_string) else {
            return;
        };
        let target = match (&sighting.rollout, &sighting.me) {
            _ if !sighting.known => return,
            (None, _) => Some((desired.clone(), true)),
            (Some(rollout), Some(me)) => {
                let target = rollout.runs(&me.uid, &me.group);
                (target == desired).then(|| (desired.clone(), target == rollout.stable))
            }
            (Some(_), None) => None,
        };
        let Some((target, stable)) = target else {
            let note = format!(
                "waiting: the rollout runs another revision than {desired} on this node, or this node's place is not read yet"
            );
            if self.waiting.as_deref() != Some(note.as_str()) {
                tracing::warn!("staged rollouts: {note}");
                self.waiting = Some(note);
            }
            return;
        };
        if let Err(e) = staging.adopt_first(&target, stable) {
            return tracing::error!("staged rollouts: cannot save the adoption: {e}");
        }
        self.waiting = None;
        tracing::info!(revision = %target, "staged rollouts: the first revision this node runs");
        self.run_held(&target, BTreeMap::new());
        self.publish_staged(sighting);
    }

    /// Run the held revision `target` from now on.
    fn switch(&mut self, target: &str) {
        let staging = self.staging.as_mut().expect("staged");
        if staging.get(target).is_none() {
            return;
        }
        let before = staging
            .adopted()
            .map(|a| a.record.components.clone())
            .unwrap_or_default();
        if let Err(e) = staging.adopt(target) {
            return tracing::error!(%target, "staged rollouts: cannot save the adoption, not switching: {e}");
        }
        tracing::info!(revision = %target, "staged rollouts: switching");
        self.run_held(target, before);
    }

    /// Apply the adopted `target` as a config reload (its `[host]` settings
    /// that need a restart stay as they run), loading again every plugin
    /// whose component differs from `before`'s.
    fn run_held(&mut self, target: &str, before: BTreeMap<String, Component>) {
        let staging = self.staging.as_ref().expect("staged");
        let held = staging
            .get(target)
            .expect("adopted revisions are held")
            .clone();
        let digest = |c: Option<&Component>| c.map(|c| c.digest.clone());
        let changed: BTreeSet<PathBuf> = held
            .config
            .enabled_plugins()
            .filter(|p| digest(before.get(&p.name)) != digest(held.record.components.get(&p.name)))
            .map(|p| p.file.clone())
            .collect();
        let config = with_restart_settings_of(held.config, &self.config);
        self.apply_config(
            config,
            &format!("staged rollouts: {target} adopted"),
            changed,
        );
        self.evict_cache();
    }

    /// Say in the report what this node asks for, and a revert the leader
    /// has not seen to (only once the rollout is read: an old revert must
    /// not abort a later attempt before this node has seen it).
    fn publish_staged(&self, sighting: &super::rollout::Sighting) {
        let Some(staging) = &self.staging else {
            return;
        };
        let desired = staging.desired().map(str::to_string);
        let named = desired.as_deref().or(staging.holding().map(|h| h.adopted));
        let reverted = match (&sighting.rollout, staging.reverted()) {
            (Some(rollout), Some(reverted)) if !acknowledged(reverted, rollout) => {
                Some(reverted.0.to_string())
            }
            _ => None,
        };
        self.shared.running.stage(Staged {
            reduces_risk: named.is_some_and(|r| staging.reduces_risk(r)),
            desired,
            reverted,
        });
    }
}
