//! `tend:plugin/conditions`: NodeConditions on the plugin's own Node, each a
//! condition type its grant names; the host owns their lifecycle (writes,
//! heartbeats, TTLs, the taints tied to them).

use crate::{Error, NotProvided, Result};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::time::Duration;
use tend_rules::conditions::{
    CALLS, ConditionsGrant, EXPIRED, check_condition, check_list, check_note, check_ttl,
    expired_message,
};

/// The WIT records themselves: the host answers with these very types.
pub use crate::bindings::tend::plugin::conditions::{
    Held as HeldCondition, Report as ConditionReport,
};

impl ConditionReport {
    /// The problem `condition` is present, because of `reason` (CamelCase),
    /// told to people by `message`; held until cleared.
    pub fn new(condition: &str, reason: &str, message: &str) -> Self {
        ConditionReport {
            condition: condition.to_string(),
            reason: reason.to_string(),
            message: message.to_string(),
            ttl_seconds: None,
        }
    }

    /// Held for `seconds` only: not reported again within them, the host
    /// clears it (reason "Expired").
    pub fn with_ttl(mut self, seconds: u32) -> Self {
        self.ttl_seconds = Some(seconds);
        self
    }
}

/// The plugin's conditions on its own Node, within its grant.
pub trait Conditions {
    /// Report the problem present (status True); reporting it again renews
    /// its TTL.
    fn set(&self, report: &ConditionReport) -> Result<()>;
    /// The problem is gone (status False), with why; clearing a condition
    /// never reported holds it False.
    fn clear(&self, condition: &str, reason: &str, message: &str) -> Result<()>;
    /// This plugin's conditions as the host holds them, by condition type.
    fn list(&self) -> Result<Vec<HeldCondition>>;
}

impl Conditions for NotProvided {
    fn set(&self, _: &ConditionReport) -> Result<()> {
        Err(NotProvided::denied("conditions"))
    }
    fn clear(&self, _: &str, _: &str, _: &str) -> Result<()> {
        Err(NotProvided::denied("conditions"))
    }
    fn list(&self) -> Result<Vec<HeldCondition>> {
        Err(NotProvided::denied("conditions"))
    }
}

/// The wasm glue: the host's `conditions` imports.
#[cfg(target_arch = "wasm32")]
pub(crate) mod wasm {
    use super::{ConditionReport, HeldCondition};
    use crate::Result;
    use crate::bindings::tend::plugin::conditions as wit;
    use crate::types::from_wit_error;

    pub(crate) struct WasmConditions;

    impl crate::Conditions for WasmConditions {
        fn set(&self, report: &ConditionReport) -> Result<()> {
            wit::set(report).map_err(from_wit_error)
        }
        fn clear(&self, condition: &str, reason: &str, message: &str) -> Result<()> {
            wit::clear(condition, reason, message).map_err(from_wit_error)
        }
        fn list(&self) -> Result<Vec<HeldCondition>> {
            wit::list().map_err(from_wit_error)
        }
    }
}

/// Where [`FakeConditions`]' clock starts: 2026-01-01T00:00:00Z, in
/// seconds since the epoch.
pub const FAKE_CLOCK_START: u64 = 1_767_225_600;

/// One condition as the fake holds it.
#[derive(Debug, Clone)]
struct Holding {
    active: bool,
    reason: String,
    message: String,
    /// When its status last changed, in seconds of the fake clock.
    since: u64,
    /// The report's TTL and when it passes, in seconds of the fake clock.
    expiry: Option<(u32, u64)>,
}

/// The fake: the host's lifecycle of this plugin's conditions, behind the
/// host's grant rules (nothing granted until [`FakeConditions::grant`]), on
/// a clock of its own that starts at [`FAKE_CLOCK_START`] and moves only by
/// [`FakeConditions::advance`] (the same in every language's fakes, which
/// run without a wall clock). A report whose TTL passed is cleared as the
/// host clears it (reason "Expired"); every condition listed is `written`
/// (the fake has no API server to wait for). `set` and `clear` are recorded
/// ([`FakeConditions::actions`]: "set KernelDeadlock"); failures are
/// injected with [`FakeConditions::fail_with`] and
/// [`FakeConditions::fail_call`] (`budget-exhausted` on "set" is what a spent
/// host budget answers), after the grant checks, as on the host.
pub struct FakeConditions {
    grant: RefCell<ConditionsGrant>,
    held: RefCell<BTreeMap<String, Holding>>,
    now: Cell<u64>,
    actions: RefCell<Vec<String>>,
    failures: crate::fake::ScriptedFailures,
}

impl crate::fake::Fake for FakeConditions {
    fn for_plugin(_plugin: &str) -> Self {
        FakeConditions {
            grant: RefCell::default(),
            held: RefCell::default(),
            now: Cell::new(FAKE_CLOCK_START),
            actions: RefCell::default(),
            failures: crate::fake::ScriptedFailures::new("FakeConditions", &CALLS),
        }
    }
}

impl Default for FakeConditions {
    /// For a plugin named "test".
    fn default() -> Self {
        crate::fake::Fake::for_plugin("test")
    }
}

impl FakeConditions {
    /// Grant what `[plugins.NAME.grants] conditions` would, given as its
    /// TOML's JSON twin: `["KernelDeadlock", {"condition":
    /// "ReadonlyFilesystem", "taint-on": {"effect": "NoSchedule"}}]`. Panics
    /// on a grant the host would reject: a test setup error.
    pub fn grant(&self, grant: serde_json::Value) -> &Self {
        let grant: ConditionsGrant =
            serde_json::from_value(grant).unwrap_or_else(|e| panic!("FakeConditions::grant: {e}"));
        self.extend_grant(&grant)
    }

    /// Add what `grant` grants (a grant already parsed); a type granted
    /// again takes the new taint.
    pub fn extend_grant(&self, grant: &ConditionsGrant) -> &Self {
        let mut current = self.grant.borrow_mut();
        for granted in &grant.0 {
            current.0.retain(|g| g.condition != granted.condition);
            current.0.push(granted.clone());
        }
        self
    }

    /// The fake clock, in seconds since the epoch: what `since` is written in.
    pub fn now(&self) -> u64 {
        self.now.get()
    }

    /// Move the fake clock on by `by` (whole seconds): TTLs pass with it.
    pub fn advance(&self, by: Duration) -> &Self {
        self.now.set(self.now.get().saturating_add(by.as_secs()));
        self
    }

    /// Every call fails with `error` until cleared with None. Grant checks
    /// come first.
    pub fn fail_with(&self, error: Option<Error>) -> &Self {
        self.failures.fail_with(error);
        self
    }

    /// The call named `call` as in the WIT ("set", "clear", "list") fails
    /// with `error` until cleared with None.
    pub fn fail_call(&self, call: &str, error: Option<Error>) -> &Self {
        self.failures.fail_call(call, error);
        self
    }

    /// Every `set` and `clear` made, in order: "set KernelDeadlock",
    /// "clear KernelDeadlock".
    pub fn actions(&self) -> Vec<String> {
        self.actions.borrow().clone()
    }

    /// Hold `condition` as the host would after an earlier run reported it
    /// (its store outlives restarts): no grant check, no TTL.
    pub fn hold(&self, condition: &str, active: bool, reason: &str, message: &str) -> &Self {
        self.expire();
        self.put(condition, active, reason, message, None);
        self
    }

    /// A `set` or `clear` past its checks: fails as scripted, else is
    /// recorded and held.
    fn apply(
        &self,
        call: &str,
        condition: &str,
        active: bool,
        reason: &str,
        message: &str,
        ttl: Option<u32>,
    ) -> Result<()> {
        self.failures.check(call)?;
        self.actions
            .borrow_mut()
            .push(format!("{call} {condition}"));
        self.expire();
        self.put(condition, active, reason, message, ttl);
        Ok(())
    }

    /// Hold `condition` with this status: `since` moves only when the
    /// status changes; a TTL restarts now.
    fn put(&self, condition: &str, active: bool, reason: &str, message: &str, ttl: Option<u32>) {
        let now = self.now.get();
        let mut held = self.held.borrow_mut();
        let since = match held.get(condition) {
            Some(old) if old.active == active => old.since,
            _ => now,
        };
        let holding = Holding {
            active,
            reason: reason.to_string(),
            message: message.to_string(),
            since,
            expiry: ttl.map(|ttl| (ttl, now + u64::from(ttl))),
        };
        held.insert(condition.to_string(), holding);
    }

    /// Clear every report whose TTL has passed, as of when it passed.
    fn expire(&self) {
        let now = self.now.get();
        for holding in self.held.borrow_mut().values_mut() {
            let Some((ttl, at)) = holding.expiry else {
                continue;
            };
            // Whole seconds, as the host: never less than the TTL.
            if at < now {
                *holding = Holding {
                    active: false,
                    reason: EXPIRED.to_string(),
                    message: expired_message(ttl, &holding.reason, &holding.message),
                    since: at,
                    expiry: None,
                };
            }
        }
    }
}

impl Conditions for FakeConditions {
    fn set(&self, report: &ConditionReport) -> Result<()> {
        check_condition(&self.grant.borrow(), &report.condition)?;
        check_note(&report.reason, &report.message)?;
        check_ttl(report.ttl_seconds)?;
        self.apply(
            "set",
            &report.condition,
            true,
            &report.reason,
            &report.message,
            report.ttl_seconds,
        )
    }

    fn clear(&self, condition: &str, reason: &str, message: &str) -> Result<()> {
        check_condition(&self.grant.borrow(), condition)?;
        check_note(reason, message)?;
        self.apply("clear", condition, false, reason, message, None)
    }

    fn list(&self) -> Result<Vec<HeldCondition>> {
        check_list(&self.grant.borrow())?;
        self.failures.check("list")?;
        self.expire();
        let now = self.now.get();
        let held = self.held.borrow();
        Ok(held
            .iter()
            .map(|(condition, h)| HeldCondition {
                condition: condition.clone(),
                active: h.active,
                reason: h.reason.clone(),
                message: h.message.clone(),
                since: h.since,
                expires_in: h
                    .expiry
                    .map(|(_, at)| u32::try_from(at - now).unwrap_or(u32::MAX)),
                written: true,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn granted() -> FakeConditions {
        let conditions = FakeConditions::default();
        conditions.grant(json!(["KernelDeadlock", {"condition": "ReadonlyFilesystem", "taint-on": {"effect": "NoSchedule"}}]));
        conditions
    }

    fn only(conditions: &FakeConditions) -> HeldCondition {
        let mut held = conditions.list().unwrap();
        assert_eq!(held.len(), 1, "{held:?}");
        held.remove(0)
    }

    #[test]
    fn a_report_is_checked_in_the_hosts_order() {
        let conditions = granted();
        let kind = |report: ConditionReport| conditions.set(&report).unwrap_err().kind();
        assert_eq!(kind(ConditionReport::new("Other", "x y", "")), "denied");
        assert_eq!(kind(ConditionReport::new("Ready", "A", "")), "denied");
        assert_eq!(kind(ConditionReport::new("a-b", "A", "")), "invalid");
        let long = "x".repeat(1025);
        assert_eq!(
            kind(ConditionReport::new("KernelDeadlock", "A", &long)),
            "invalid"
        );
        assert_eq!(
            kind(ConditionReport::new("KernelDeadlock", "A", "").with_ttl(0)),
            "invalid"
        );
        let err = conditions
            .clear("KernelDeadlock", "no reason", "")
            .unwrap_err();
        assert!(matches!(err, Error::Invalid(_)), "{err:?}");
        assert_eq!(
            FakeConditions::default().list().unwrap_err().kind(),
            "denied"
        );
        assert!(
            conditions.list().unwrap().is_empty(),
            "nothing refused is held"
        );
    }

    #[test]
    fn since_moves_only_when_the_status_changes() {
        let conditions = granted();
        let start = conditions.now();
        assert_eq!(start, FAKE_CLOCK_START);
        let report = ConditionReport::new("KernelDeadlock", "TaskHung", "task blocked");
        conditions.set(&report).unwrap();
        conditions.advance(Duration::from_secs(30));
        conditions
            .set(&ConditionReport::new("KernelDeadlock", "TaskHung", "again"))
            .unwrap();
        let held = only(&conditions);
        assert!(held.active && held.written && held.expires_in.is_none());
        assert_eq!((held.since, held.message.as_str()), (start, "again"));
        conditions.advance(Duration::from_secs(5));
        conditions
            .clear("KernelDeadlock", "TaskRecovered", "ok")
            .unwrap();
        let held = only(&conditions);
        assert!(!held.active);
        assert_eq!(
            (held.since, held.reason.as_str()),
            (start + 35, "TaskRecovered")
        );
    }

    #[test]
    fn clearing_a_condition_never_reported_holds_it_false() {
        let conditions = granted();
        conditions
            .clear("ReadonlyFilesystem", "Writable", "")
            .unwrap();
        let held = only(&conditions);
        assert_eq!(
            (held.condition.as_str(), held.active),
            ("ReadonlyFilesystem", false)
        );
        assert_eq!(held.since, conditions.now());
    }

    #[test]
    fn a_report_not_renewed_within_its_ttl_is_cleared_as_expired() {
        let conditions = granted();
        let report = ConditionReport::new("KernelDeadlock", "TaskHung", "blocked").with_ttl(60);
        conditions.set(&report).unwrap();
        conditions.advance(Duration::from_secs(40));
        assert_eq!(only(&conditions).expires_in, Some(20));
        conditions.set(&report).unwrap();
        conditions.advance(Duration::from_secs(59));
        assert_eq!(only(&conditions).expires_in, Some(1), "renewed by the set");
        let expired_at = conditions.now() + 1;
        conditions.advance(Duration::from_secs(5));
        let held = only(&conditions);
        assert!(!held.active && held.expires_in.is_none());
        assert_eq!(held.reason, EXPIRED);
        assert_eq!(
            held.message,
            "not reported again within 60s: was TaskHung: blocked"
        );
        assert_eq!(held.since, expired_at);
        conditions.set(&report).unwrap();
        let held = only(&conditions);
        assert!(held.active);
        assert_eq!(held.since, conditions.now(), "False to True again");
    }

    #[test]
    fn mutations_are_recorded_and_fail_as_scripted_after_the_checks() {
        let conditions = granted();
        let report = ConditionReport::new("KernelDeadlock", "TaskHung", "");
        conditions.fail_call("set", Some(Error::BudgetExhausted("spent".into())));
        let other = ConditionReport::new("Other", "TaskHung", "");
        assert_eq!(conditions.set(&other).unwrap_err().kind(), "denied");
        assert_eq!(
            conditions.set(&report).unwrap_err().kind(),
            "budget-exhausted"
        );
        conditions
            .clear("KernelDeadlock", "TaskRecovered", "")
            .unwrap();
        conditions.fail_call("set", None).set(&report).unwrap();
        assert_eq!(
            conditions.actions(),
            ["clear KernelDeadlock", "set KernelDeadlock"]
        );
        conditions.fail_with(Some(Error::Unavailable("down".into())));
        assert_eq!(conditions.list().unwrap_err().kind(), "unavailable");
    }

    #[test]
    fn held_conditions_list_by_type() {
        let conditions = granted();
        conditions.hold("ReadonlyFilesystem", false, "Writable", "");
        conditions
            .set(&ConditionReport::new("KernelDeadlock", "TaskHung", ""))
            .unwrap();
        let types: Vec<_> = conditions
            .list()
            .unwrap()
            .into_iter()
            .map(|h| (h.condition, h.active))
            .collect();
        assert_eq!(
            types,
            [
                ("KernelDeadlock".to_string(), true),
                ("ReadonlyFilesystem".to_string(), false)
            ]
        );
    }
}
