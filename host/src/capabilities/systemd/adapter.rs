//! The `systemd` adapter of one reconcile: every unit is checked against the
//! plugin's grant (patterns and operations); every mutation passes the gate.
//!
//! Enable and disable touch links the unit's `[Install]` section chooses, so
//! those links are held to the grant as well, before anything changes: a
//! disable against systemd's own dry run of it (GetUnitFileLinks); an enable
//! (never forced) against its plan, read from the unit files of the units
//! and of their `Also=` units (systemd has no dry run of an enable, see
//! [`tend_rules::systemd::install`]), so an ungranted link or `Also=` unit is
//! refused with nothing linked. As defense in depth (a unit file rewritten
//! between the plan and the enable), the changes systemd reports are held
//! to the grant too, and an enable that linked an ungranted unit, or failed
//! half-way, is rolled back. At most one daemon-reload runs per reconcile.

use super::backend::{JobKind, JobResult, SystemdBackend, UnitFileChange, UnitStatus};
use super::grants::{Operation, SystemdGrant, check, check_operation, wildcard_match};
use crate::capabilities::call::Call;
use crate::capabilities::capability::Capability;
use crate::capabilities::error::CapError;
use crate::capabilities::gate::Intent;
use crate::capabilities::limits::over_limit;
use serde::Deserialize;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tend_rules::systemd::install::EnablePlan;

/// `[host.systemd]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SystemdSettings {
    /// A D-Bus address ("unix:path=/run/dbus/system_bus_socket"); the system bus when absent.
    pub bus: Option<String>,
}

pub struct PluginSystemd {
    pub(super) backend: Arc<dyn SystemdBackend>,
    pub(super) grant: SystemdGrant,
    pub(super) call: Arc<Call>,
    /// Whether this reconcile has had its daemon-reload (done or planned).
    pub(super) reloaded: AtomicBool,
}

/// The rules crate's bound on names per call, shared with the SDK's fake.
fn bounded(what: &str, names: &[impl AsRef<str>]) -> Result<(), CapError> {
    Ok(tend_rules::systemd::check_names(what, names)?)
}

impl PluginSystemd {
    pub async fn status(&self, unit: &str) -> Result<UnitStatus, CapError> {
        check(&self.grant, &self.call.plugin, unit, None)?;
        self.backend.status(unit).await
    }

    pub async fn list_units(&self, patterns: &[String]) -> Result<Vec<UnitStatus>, CapError> {
        bounded("list-units", patterns)?;
        let units = self.backend.list_units().await?;
        Ok(units
            .into_iter()
            .filter(|u| {
                patterns.iter().any(|p| wildcard_match(p, &u.name)) && self.grant.covers(&u.name)
            })
            .collect())
    }

    /// What the gate records of `operation` on `target`.
    fn intent(operation: Operation, target: String) -> Intent {
        Intent {
            capability: Self::NAME,
            operation: operation.name(),
            target,
            detail: String::new(),
            diff: None,
        }
    }

    pub async fn job(
        &self,
        operation: Operation,
        kind: JobKind,
        unit: &str,
    ) -> Result<JobResult, CapError> {
        check(&self.grant, &self.call.plugin, unit, Some(operation))?;
        let intent = Self::intent(operation, unit.to_string());
        self.call
            .gate
            .mutate(intent, Ok(JobResult::Done), |permit| {
                self.backend.job(permit, kind, unit)
            })
            .await
    }

    pub async fn reset_failed(&self, unit: &str) -> Result<(), CapError> {
        check(
            &self.grant,
            &self.call.plugin,
            unit,
            Some(Operation::ResetFailed),
        )?;
        let intent = Self::intent(Operation::ResetFailed, unit.to_string());
        self.call
            .gate
            .mutate(intent, Ok(()), |permit| {
                self.backend.reset_failed(permit, unit)
            })
            .await
    }

    pub async fn unit_files(
        &self,
        operation: Operation,
        units: Vec<String>,
    ) -> Result<(), CapError> {
        bounded(operation.name(), &units)?;
        for unit in &units {
            check(&self.grant, &self.call.plugin, unit, Some(operation))?;
        }
        let mut intent = Self::intent(operation, units.join(" "));
        if operation == Operation::Enable {
            // Planned from the unit files and refused before anything is
            // linked: no rollback is ever needed for what the files say.
            let links = self.plan_enable(&units).await?;
            intent.detail = planned_links(&links);
        }
        if operation == Operation::Disable {
            // systemd's own dry run of this very disable: refused before
            // anything is removed when it reaches an ungranted unit.
            let links = self.links(&units).await?;
            self.check_links(operation, &units, links.iter().map(String::as_str))?;
        }
        // The adapter performs these itself (an enable is held to the grant
        // and rolled back), under the permit.
        self.call
            .gate
            .mutate(intent, Ok(()), |_permit| async {
                if operation == Operation::Enable {
                    self.enable(&units).await
                } else {
                    self.backend.disable(&units).await.map(drop)
                }
            })
            .await
    }

    fn check_links<'a>(
        &self,
        operation: Operation,
        units: &[String],
        links: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), CapError> {
        Ok(self
            .grant
            .check_links(&self.call.plugin, operation, units, links)?)
    }

    /// The links enabling `units` would make, read from their unit files
    /// (and those of their `Also=` units) now; refused when any is outside
    /// the grant.
    async fn plan_enable(&self, units: &[String]) -> Result<BTreeSet<String>, CapError> {
        let mut plan = EnablePlan::new(&self.grant, &self.call.plugin, units);
        while let Some(unit) = plan.next_unit() {
            let text = self.backend.unit_file(&unit).await?;
            plan.add(&unit, &text)?;
        }
        Ok(plan.finish())
    }

    /// The links a disable of `units` would remove now.
    async fn links(&self, units: &[String]) -> Result<BTreeSet<String>, CapError> {
        let mut links = BTreeSet::new();
        for unit in units {
            links.extend(self.backend.unit_file_links(unit).await?);
        }
        Ok(links)
    }

    /// Enable without force, hold the links made to the grant, and roll back
    /// an enable that made an ungranted link or failed half-way.
    async fn enable(&self, units: &[String]) -> Result<(), CapError> {
        let before = self.links(units).await?;
        let (error, reported) = match self.backend.enable(units).await {
            Ok(changes) => (None, changes),
            Err(e) => (Some(e), vec![]),
        };
        let links = reported.iter().filter_map(UnitFileChange::link);
        let refused = self.check_links(Operation::Enable, units, links).err();
        let Some(error) = refused.or(error) else {
            return Ok(());
        };
        // A failed enable reports no changes: what it made is what a disable
        // would remove now and not before.
        let after = self.links(units).await?;
        let made: Vec<&str> = after.difference(&before).map(String::as_str).collect();
        let error = self
            .check_links(Operation::Enable, units, made.iter().copied())
            .err()
            .unwrap_or(error);
        if made.is_empty() {
            return Err(error);
        }
        // The rollback is a disable of the same units; it removes every link
        // in `after`, so it runs only when those that were there before are
        // the grant's own.
        let kept: Vec<&str> = before.iter().map(String::as_str).collect();
        if self
            .check_links(Operation::Enable, units, kept.iter().copied())
            .is_err()
        {
            return Err(with_note(
                error,
                &format!(
                    "not rolled back, since a disable would also remove ungranted links that were there before: remove {} by hand",
                    made.join(", ")
                ),
            ));
        }
        match self.backend.disable(units).await {
            Ok(_) => Err(with_note(
                error,
                &format!("rolled back: removed {}", made.join(", ")),
            )),
            Err(e) => Err(with_note(
                error,
                &format!(
                    "the rollback failed ({e}): remove {} by hand",
                    made.join(", ")
                ),
            )),
        }
    }

    /// At most one daemon-reload per reconcile: each reruns every generator
    /// and stalls PID 1, so a later one in the same reconcile is refused
    /// (never answered as if it ran, since a unit written after the first
    /// would then start with its old definition).
    pub async fn daemon_reload(&self) -> Result<(), CapError> {
        check_operation(
            &self.grant,
            &self.call.plugin,
            "the unit files",
            Some(Operation::DaemonReload),
        )?;
        if self.reloaded.swap(true, Ordering::SeqCst) {
            return Err(over_limit(
                "systemd daemon-reload: at most one per reconcile, and this reconcile had it already (each reload reruns systemd's generators and stalls PID 1): write every unit file first, then reload once, or requeue",
            ));
        }
        let intent = Self::intent(Operation::DaemonReload, Self::NAME.to_string());
        self.call
            .gate
            .mutate(intent, Ok(()), |permit| self.backend.daemon_reload(permit))
            .await
    }
}

/// What the journal says an enable will link: "links A, B" or "no links".
fn planned_links(links: &BTreeSet<String>) -> String {
    if links.is_empty() {
        return "no links".to_string();
    }
    let links: Vec<&str> = links.iter().map(String::as_str).collect();
    format!("links {}", links.join(", "))
}

/// `error`, with what became of the changes it made.
fn with_note(error: CapError, note: &str) -> CapError {
    error.map_message(|m| format!("{m} ({note})"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::systemd::FakeSystemd;
    use crate::capabilities::testing::call;

    fn systemd(operations: &[&str], dry_run: bool) -> (PluginSystemd, Arc<FakeSystemd>) {
        let (backend, fake) = PluginSystemd::fake();
        (adapter(&backend, operations, dry_run), fake)
    }

    fn adapter(
        backend: &Arc<dyn SystemdBackend>,
        operations: &[&str],
        dry_run: bool,
    ) -> PluginSystemd {
        let grant: SystemdGrant = toml::from_str(&format!(
            "units = [\"tend-*.service\"]\noperations = [{}]",
            operations
                .iter()
                .map(|o| format!("\"{o}\""))
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .unwrap();
        PluginSystemd::for_call(
            backend,
            &grant,
            &Default::default(),
            &call("doctor", dry_run),
        )
    }

    /// Another reconcile's adapter on the same fake systemd.
    fn systemd_on(fake: &Arc<FakeSystemd>, operations: &[&str]) -> PluginSystemd {
        let backend: Arc<dyn SystemdBackend> = fake.clone();
        adapter(&backend, operations, false)
    }

    #[tokio::test]
    async fn granted_restarts_reach_systemd_through_the_gate() {
        let (systemd, fake) = systemd(&["restart"], false);
        let result = systemd
            .job(Operation::Restart, JobKind::Restart, "tend-a.service")
            .await
            .unwrap();
        assert_eq!(result, JobResult::Done);
        assert_eq!(fake.actions(), ["restart tend-a.service"]);
        assert_eq!(
            systemd.call.gate.mutations()[0].describe(),
            "did systemd.restart tend-a.service"
        );
    }

    #[tokio::test]
    async fn ungranted_units_and_operations_are_denied_before_systemd() {
        let (systemd, fake) = systemd(&["restart"], false);
        let err = systemd
            .job(Operation::Stop, JobKind::Stop, "tend-a.service")
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("add \"stop\" to operations"),
            "{err}"
        );
        let err = systemd
            .job(Operation::Restart, JobKind::Restart, "kubelet.service")
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("add \"kubelet.service\" to units"),
            "{err}"
        );
        let err = systemd.daemon_reload().await.unwrap_err();
        assert!(
            err.to_string()
                .contains("add \"daemon-reload\" to operations"),
            "{err}"
        );
        assert!(fake.actions().is_empty());
    }

    #[tokio::test]
    async fn a_dry_run_plans_and_a_failed_job_says_how() {
        let (dry, fake) = systemd(&["restart"], true);
        assert_eq!(
            dry.job(Operation::Restart, JobKind::Restart, "tend-a.service")
                .await
                .unwrap(),
            JobResult::Done
        );
        assert!(fake.actions().is_empty());
        assert!(dry.call.gate.mutations()[0].dry_run);
        let (real, fake) = systemd(&["restart"], false);
        fake.job_result("tend-a.service", JobResult::Failed);
        assert_eq!(
            real.job(Operation::Restart, JobKind::Restart, "tend-a.service")
                .await
                .unwrap(),
            JobResult::Failed
        );
        assert_eq!(real.call.gate.mutations()[0].result, "job failed");
    }

    #[tokio::test]
    async fn a_flood_of_patterns_or_units_is_refused_before_any_matching() {
        let (systemd, fake) = systemd(&["enable"], false);
        let many: Vec<String> = (0..1000).map(|i| format!("tend-{i}.service")).collect();
        let err = systemd.list_units(&many).await.unwrap_err();
        assert_eq!(err.kind(), "invalid");
        let err = systemd
            .unit_files(Operation::Enable, many)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("split the call"), "{err}");
        assert!(fake.actions().is_empty());
    }

    /// A granted unit whose `[Install]` has `Also=victim.service`, with a
    /// link there before: one to another unit, or an alias of the victim
    /// itself (which a rollback's disable would also remove). Either way the
    /// enable is refused from its plan: systemd is never asked, no link made.
    #[tokio::test]
    async fn an_also_of_an_ungranted_unit_is_refused_before_enabling() {
        for existing in ["taken.service", "victim-alias.service"] {
            let (systemd, fake) = systemd(&["enable"], false);
            fake.unit_file(
                "tend-a.service",
                "[Install]\nWantedBy=multi-user.target\nAlso=victim.service\n",
            );
            fake.unit_file("victim.service", "[Install]\nWantedBy=multi-user.target\n");
            fake.install(
                "tend-a.service",
                &[
                    "multi-user.target.wants/tend-a.service",
                    "multi-user.target.wants/victim.service",
                ],
            );
            fake.add_link(existing);
            let before = fake.links();
            let err = systemd
                .unit_files(Operation::Enable, vec!["tend-a.service".into()])
                .await
                .unwrap_err();
            assert_eq!(err.kind(), "denied");
            assert!(
                err.to_string().contains(
                    "would also enable victim.service (Also= in the [Install] section of tend-a.service)"
                ),
                "{err}"
            );
            assert!(fake.actions().is_empty(), "{:?}", fake.actions());
            assert_eq!(fake.links(), before, "no link made or removed");
            assert!(systemd.call.gate.mutations().is_empty());
        }
    }

    #[tokio::test]
    async fn a_planned_link_outside_the_grant_is_refused_and_a_granted_plan_is_journaled() {
        let (systemd, fake) = systemd(&["enable"], false);
        fake.unit_file(
            "tend-a.service",
            "[Install]\nWantedBy=multi-user.target\nAlias=kubelet.service\n",
        );
        let err = systemd
            .unit_files(Operation::Enable, vec!["tend-a.service".into()])
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("would link /etc/systemd/system/kubelet.service"),
            "{err}"
        );
        assert!(fake.actions().is_empty());
        systemd
            .unit_files(Operation::Enable, vec!["tend-b.service".into()])
            .await
            .unwrap();
        assert_eq!(
            systemd.call.gate.mutations()[0].describe(),
            "did systemd.enable tend-b.service (links /etc/systemd/system/multi-user.target.wants/tend-b.service)"
        );
    }

    /// Defense in depth: the unit file said less than the enable did (it was
    /// rewritten in between); what systemd reports is held to the grant.
    #[tokio::test]
    async fn an_enable_linking_more_than_its_plan_is_rolled_back_and_denied() {
        let (systemd, fake) = systemd(&["enable"], false);
        fake.install(
            "tend-a.service",
            &[
                "multi-user.target.wants/tend-a.service",
                "kubelet.service",
                "multi-user.target.wants/victim.service",
            ],
        );
        let err = systemd
            .unit_files(Operation::Enable, vec!["tend-a.service".into()])
            .await
            .unwrap_err();
        assert_eq!(err.kind(), "denied");
        let text = err.to_string();
        assert!(
            text.contains("add \"kubelet.service\" to units in [plugins.doctor.grants] systemd"),
            "{text}"
        );
        assert!(
            text.contains("(rolled back: removed /etc/systemd/system/kubelet.service, "),
            "{text}"
        );
        assert!(fake.links().is_empty(), "{:?}", fake.links());
        assert_eq!(
            fake.actions(),
            ["enable tend-a.service", "disable tend-a.service"]
        );
        let journaled = &systemd.call.gate.mutations()[0];
        assert!(
            journaled
                .result
                .starts_with("denied: systemd enable of tend-a.service would link"),
            "{}",
            journaled.result
        );
    }

    #[tokio::test]
    async fn granted_links_are_enabled_and_links_there_before_are_never_rolled_back() {
        let (systemd, fake) = systemd(&["enable"], false);
        systemd
            .unit_files(Operation::Enable, vec!["tend-a.service".into()])
            .await
            .unwrap();
        assert_eq!(
            fake.links(),
            ["/etc/systemd/system/multi-user.target.wants/tend-a.service"]
        );
        // A victim's link there before: a rollback would remove it too.
        fake.install(
            "tend-b.service",
            &["multi-user.target.wants/tend-b.service", "victim.service"],
        );
        fake.add_link("victim.service");
        fake.install("tend-c.service", &["victim.service", "evil.service"]);
        let err = systemd
            .unit_files(Operation::Enable, vec!["tend-c.service".into()])
            .await
            .unwrap_err();
        assert!(err.to_string().contains("not rolled back"), "{err}");
        assert!(
            err.to_string()
                .contains("remove /etc/systemd/system/evil.service by hand"),
            "{err}"
        );
        assert!(
            fake.links()
                .contains(&"/etc/systemd/system/victim.service".to_string())
        );
    }

    #[tokio::test]
    async fn a_disable_reaching_an_ungranted_unit_is_refused_before_it_runs() {
        let (systemd, fake) = systemd(&["disable"], false);
        fake.install(
            "tend-a.service",
            &[
                "multi-user.target.wants/tend-a.service",
                "multi-user.target.wants/victim.service",
            ],
        );
        fake.add_link("multi-user.target.wants/tend-a.service");
        fake.add_link("multi-user.target.wants/victim.service");
        let err = systemd
            .unit_files(Operation::Disable, vec!["tend-a.service".into()])
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains(
                "would remove /etc/systemd/system/multi-user.target.wants/victim.service"
            ),
            "{err}"
        );
        assert!(fake.actions().is_empty());
        assert_eq!(fake.links().len(), 2);
        assert!(systemd.call.gate.mutations().is_empty());
    }

    #[tokio::test]
    async fn one_daemon_reload_per_reconcile() {
        let (systemd, fake) = systemd(&["daemon-reload"], false);
        systemd.daemon_reload().await.unwrap();
        for _ in 0..49 {
            let err = systemd.daemon_reload().await.unwrap_err();
            assert_eq!(err.kind(), "budget-exhausted");
            assert!(
                err.to_string().contains("at most one per reconcile"),
                "{err}"
            );
        }
        assert_eq!(fake.actions(), ["daemon-reload"]);
        assert_eq!(systemd.call.gate.mutations().len(), 1);
        let next_reconcile = systemd_on(&fake, &["daemon-reload"]);
        next_reconcile.daemon_reload().await.unwrap();
        assert_eq!(fake.actions(), ["daemon-reload", "daemon-reload"]);
    }

    #[tokio::test]
    async fn listing_shows_only_granted_units() {
        let (systemd, fake) = systemd(&[], false);
        fake.set_unit("tend-a.service", "active");
        fake.set_unit("kubelet.service", "active");
        let listed = systemd.list_units(&["*".to_string()]).await.unwrap();
        let names: Vec<&str> = listed.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(names, ["tend-a.service"]);
    }
}
