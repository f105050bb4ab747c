//! What the host holds of the Node's conditions, and what to write: pure, so
//! the whole lifecycle (report, renewal, TTL, recovery, owner gone,
//! heartbeat, coalescing) is tested without an API server, as
//! gardener-node-agent keeps its diff apart from its effects.
//!
//! A [`Book`] holds each condition with its owner and what the Node last
//! showed of it; [`Book::plan`] says what is due at a moment: one strategic
//! merge patch of the Node's `status.conditions` (every held condition with
//! a fresh heartbeat, and a `$patch: delete` for each whose owner is gone),
//! and the set of `tend.dev/<type>` taints the Node should carry.

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};
use tend_rules::conditions::{
    EXPIRED, Granted, TaintEffect, check_note, check_reportable, expired_message,
};

/// The shortest time between two status or reason changes of one condition
/// on the Node: a plugin flipping a condition True/False in a loop is one
/// write per gap, the flips between coalesced (the kubelet, too, writes its
/// status at most every 10 s). A condition's first change is written at
/// once, whatever the others do; a change held back rides on any earlier
/// write; an owner's removal is never held back.
pub const MIN_CHANGE_GAP: u64 = 10;

/// What a condition says: what the Node shows of it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Shown {
    pub active: bool,
    pub reason: String,
    pub message: String,
    /// lastTransitionTime, seconds since the epoch.
    pub since: u64,
}

/// One condition as the host holds it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Held {
    pub owner: String,
    pub now: Shown,
    /// Its TTL, and when it passes (seconds since the epoch).
    pub ttl: Option<u32>,
    pub expires: Option<u64>,
    /// The taint tied to it while it is active.
    pub taint: Option<TaintEffect>,
    /// What the Node showed after the last write; None: never written.
    pub written: Option<Shown>,
    /// The owner is gone (removed, disabled, or no longer granted the type):
    /// removed from the Node, then forgotten.
    #[serde(default)]
    pub orphaned: bool,
    /// When the Node last showed this condition's status or reason change.
    #[serde(default)]
    pub changed_at: Option<u64>,
}

/// Every condition Tend holds on this Node, and the taints it put there.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Book {
    pub conditions: BTreeMap<String, Held>,
    /// When conditions were last written (seconds since the epoch).
    pub last_write: Option<u64>,
    /// The taints Tend last wrote: condition type -> effect.
    pub taints: BTreeMap<String, TaintEffect>,
    /// A write of the taints was under way (saved before it is sent): the
    /// Node may carry other taints than `taints` says, so they are checked
    /// and written again, after a restart too.
    #[serde(default)]
    pub taints_unsure: bool,
}

/// What is due at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// The strategic merge patch of the Node's status, if a write is due.
    pub patch: Option<Value>,
    /// What each condition will show once `patch` is written (None: removed).
    pub shows: BTreeMap<String, Option<Shown>>,
    /// The taints the Node should carry, if they differ from those written.
    pub taints: Option<BTreeMap<String, TaintEffect>>,
    /// When something falls due next, unless a report comes first.
    pub next: Option<u64>,
}

/// A report as the adapter hands it over, already checked against the grant.
pub struct Report<'a> {
    pub owner: &'a str,
    pub granted: &'a Granted,
    pub active: bool,
    pub reason: String,
    pub message: String,
    pub ttl: Option<u32>,
}

impl Book {
    /// Drop what a book read back from disk may hold that no report could
    /// have made: a type of another shape or the kubelet's (removing an
    /// orphan is a `$patch: delete`, which must never reach `Ready`), a
    /// reason or message a report could not carry. Returns the types dropped.
    pub fn drop_foreign(&mut self) -> Vec<String> {
        let shown = |s: &Shown| {
            check_note(&s.reason, &s.message).is_ok()
                && crate::text::inert(&s.message) == s.message.as_str()
        };
        let sane = |condition: &str, held: &Held| {
            check_reportable(condition).is_ok()
                && shown(&held.now)
                && held.written.as_ref().is_none_or(shown)
        };
        let mut dropped: Vec<String> = self
            .conditions
            .iter()
            .filter(|(condition, held)| !sane(condition, held))
            .map(|(condition, _)| condition.clone())
            .collect();
        self.conditions
            .retain(|condition, _| !dropped.contains(condition));
        self.taints.retain(|condition, _| {
            let keep = check_reportable(condition).is_ok();
            if !keep {
                dropped.push(condition.clone());
            }
            keep
        });
        dropped
    }

    /// Whether `report` changes anything a write would show (a renewal of
    /// the same report only moves its expiry).
    pub fn changes(&self, report: &Report) -> bool {
        self.conditions
            .get(&report.granted.condition)
            .is_none_or(|held| {
                held.orphaned
                    || held.owner != report.owner
                    || held.now.active != report.active
                    || held.now.reason != report.reason
                    || held.now.message != report.message
            })
    }

    /// Take `report` at `now`: its status changes since when it differs.
    pub fn report(&mut self, report: Report, now: u64) {
        let condition = report.granted.condition.clone();
        let previous = self.conditions.remove(&condition);
        let since = match &previous {
            Some(held) if held.now.active == report.active => held.now.since,
            _ => now,
        };
        let ttl = report.ttl.filter(|_| report.active);
        self.conditions.insert(
            condition,
            Held {
                owner: report.owner.to_string(),
                now: Shown {
                    active: report.active,
                    reason: report.reason,
                    message: report.message,
                    since,
                },
                ttl,
                expires: ttl.map(|t| now + u64::from(t)),
                taint: report.granted.taint_on.map(|t| t.effect),
                changed_at: previous.as_ref().and_then(|held| held.changed_at),
                written: previous.and_then(|held| held.written),
                orphaned: false,
            },
        );
    }

    /// Clear every active condition whose TTL passed by `now`.
    pub fn expire(&mut self, now: u64) -> bool {
        let mut any = false;
        for held in self.conditions.values_mut() {
            // Times are whole seconds: a report made late in second `t` with a TTL
            // of `n` holds until the end of second `t + n`, never less than `n`.
            let Some(at) = held.expires.filter(|&at| held.now.active && at < now) else {
                continue;
            };
            let ttl = held.ttl.unwrap_or_default();
            // It cleared when its TTL ran out, whenever that is noticed.
            held.now = Shown {
                active: false,
                reason: EXPIRED.to_string(),
                message: expired_message(ttl, &held.now.reason, &held.now.message),
                since: at,
            };
            held.expires = None;
            any = true;
        }
        any
    }

    /// The configured plugins changed: `owns(owner, condition)` says whether
    /// `owner` is still enabled and granted `condition` (and with which
    /// taint). Conditions of owners that are gone are orphaned (removed from
    /// the Node by the next plan); one never written is forgotten at once.
    pub fn retain(&mut self, owns: impl Fn(&str, &str) -> Option<Option<TaintEffect>>) -> bool {
        let before = self.clone();
        self.conditions.retain(|condition, held| {
            match owns(&held.owner, condition) {
                Some(taint) => {
                    held.orphaned = false;
                    held.taint = taint;
                }
                None => held.orphaned = true,
            }
            !(held.orphaned && held.written.is_none())
        });
        *self != before
    }

    /// The conditions of `owner`.
    pub fn of<'a>(&'a self, owner: &'a str) -> impl Iterator<Item = (&'a String, &'a Held)> {
        self.conditions
            .iter()
            .filter(move |(_, held)| held.owner == owner && !held.orphaned)
    }

    /// What is due at `now`, with a heartbeat of `heartbeat`; `check_taints`
    /// asks for the taints even when they match those written (once after a
    /// start: the Node may have changed while Tend was down).
    pub fn plan(&self, now: u64, heartbeat: Duration, check_taints: bool) -> Plan {
        let heartbeat = heartbeat.as_secs().max(1);
        let mut plan = Plan::default();
        let mut due = false;
        let mut live = false;
        for (condition, held) in &self.conditions {
            let shows = (!held.orphaned).then(|| held.now.clone());
            match (&held.written, &shows) {
                (Some(written), Some(now)) if written == now => {}
                // A message-only change (the same status and reason) rides on
                // the next write: a plugin that puts a counter or the latest
                // line in its message cannot turn every reconcile into one.
                (Some(written), Some(now))
                    if written.active == now.active && written.reason == now.reason => {}
                (None, None) => {}
                (Some(_), None) => due = true,
                _ => match held.changed_at.map(|at| at + MIN_CHANGE_GAP) {
                    Some(until) if now < until => plan.next = earliest(plan.next, Some(until)),
                    _ => due = true,
                },
            }
            live |= shows.is_some();
            if held.now.active && !held.orphaned {
                plan.next = earliest(plan.next, held.expires.map(|at| at + 1));
            }
            plan.shows.insert(condition.clone(), shows);
        }
        let last = self.last_write;
        let heartbeat_due = live && last.is_none_or(|at| now >= at + heartbeat);
        let writing = due || heartbeat_due;
        if writing {
            plan.patch = Some(status_patch(&plan.shows, now));
            if live {
                plan.next = earliest(plan.next, Some(now + heartbeat));
            }
        } else if live {
            plan.next = earliest(plan.next, last.map(|at| at + heartbeat));
        }
        // The taints follow what the Node shows after this plan: a change
        // held back holds its taint back too, so a flipping condition does
        // not flip its taint either.
        let wanted: BTreeMap<String, TaintEffect> = self
            .conditions
            .iter()
            .filter(|(_, held)| !held.orphaned)
            .filter(|(_, held)| match writing {
                true => held.now.active,
                false => held.written.as_ref().is_some_and(|w| w.active),
            })
            .filter_map(|(condition, held)| held.taint.map(|t| (condition.clone(), t)))
            .collect();
        if check_taints || self.taints_unsure || wanted != self.taints {
            plan.taints = Some(wanted);
        }
        plan
    }

    /// `plan`'s patch was written at `now`.
    pub fn written(&mut self, plan: &Plan, now: u64) {
        for (condition, shows) in &plan.shows {
            match shows {
                None => {
                    // Removed from the Node: forget it, unless re-granted meanwhile.
                    if self.conditions.get(condition).is_some_and(|h| h.orphaned) {
                        self.conditions.remove(condition);
                    }
                }
                Some(shown) => {
                    if let Some(held) = self.conditions.get_mut(condition) {
                        let same = held
                            .written
                            .as_ref()
                            .is_some_and(|w| w.active == shown.active && w.reason == shown.reason);
                        if !same {
                            held.changed_at = Some(now);
                        }
                        held.written = Some(shown.clone());
                    }
                }
            }
        }
        self.last_write = Some(now);
    }
}

fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// RFC 3339 in seconds, as the API server writes times.
pub fn rfc3339(seconds: u64) -> String {
    humantime::format_rfc3339_seconds(SystemTime::UNIX_EPOCH + Duration::from_secs(seconds))
        .to_string()
}

/// The strategic merge patch that makes the Node show `shows` (merged by
/// `type`: the kubelet's conditions and other writers' are untouched).
fn status_patch(shows: &BTreeMap<String, Option<Shown>>, now: u64) -> Value {
    let conditions: Vec<Value> = shows
        .iter()
        .map(|(condition, shown)| match shown {
            None => json!({ "type": condition, "$patch": "delete" }),
            Some(shown) => json!({
                "type": condition,
                "status": if shown.active { "True" } else { "False" },
                "reason": shown.reason,
                "message": shown.message,
                "lastTransitionTime": rfc3339(shown.since),
                "lastHeartbeatTime": rfc3339(now),
            }),
        })
        .collect();
    json!({ "status": { "conditions": conditions } })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tend_rules::conditions::TaintOn;

    const BEAT: Duration = Duration::from_secs(300);
    const MAX_MESSAGE_FOR_TEST: usize = tend_rules::conditions::MAX_MESSAGE;

    fn granted(condition: &str, taint: bool) -> Granted {
        Granted {
            condition: condition.into(),
            taint_on: taint.then_some(TaintOn {
                effect: TaintEffect::NoSchedule,
            }),
        }
    }

    fn report<'a>(
        g: &'a Granted,
        active: bool,
        reason: &str,
        message: &str,
        ttl: Option<u32>,
    ) -> Report<'a> {
        Report {
            owner: "pd",
            granted: g,
            active,
            reason: reason.into(),
            message: message.into(),
            ttl,
        }
    }

    /// Plan at `now` and, if a patch is due, write it.
    fn write(book: &mut Book, now: u64) -> Plan {
        let plan = book.plan(now, BEAT, false);
        if plan.patch.is_some() {
            book.written(&plan, now);
        }
        if let Some(taints) = &plan.taints {
            book.taints = taints.clone();
        }
        plan
    }

    fn patched(plan: &Plan) -> Vec<Value> {
        plan.patch.as_ref().unwrap()["status"]["conditions"]
            .as_array()
            .unwrap()
            .clone()
    }

    #[test]
    fn nothing_reported_is_never_written() {
        let mut book = Book::default();
        let plan = write(&mut book, 100);
        assert_eq!(plan.patch, None);
        assert_eq!(plan.next, None);
        assert_eq!(plan.taints, None);
    }

    #[test]
    fn a_status_change_is_written_at_once_and_a_renewal_writes_nothing() {
        let g = granted("KernelDeadlock", false);
        let mut book = Book::default();
        book.report(report(&g, true, "TaskHung", "task blocked", None), 100);
        let plan = write(&mut book, 100);
        let written = patched(&plan);
        assert_eq!(written[0]["type"], "KernelDeadlock");
        assert_eq!(written[0]["status"], "True");
        assert_eq!(written[0]["reason"], "TaskHung");
        assert_eq!(written[0]["lastTransitionTime"], rfc3339(100));
        assert_eq!(plan.next, Some(100 + 300));
        let same = report(&g, true, "TaskHung", "task blocked", None);
        assert!(!book.changes(&same));
        book.report(same, 150);
        assert_eq!(write(&mut book, 150).patch, None);
        // Recovery is a status change: at once, with a new transition time.
        book.report(report(&g, false, "TaskRecovered", "ok", None), 160);
        let cleared = patched(&write(&mut book, 160));
        assert_eq!(cleared[0]["status"], "False");
        assert_eq!(cleared[0]["lastTransitionTime"], rfc3339(160));
    }

    #[test]
    fn an_unchanged_condition_is_refreshed_once_a_heartbeat() {
        let g = granted("KernelDeadlock", false);
        let mut book = Book::default();
        book.report(report(&g, true, "TaskHung", "m", None), 0);
        write(&mut book, 0);
        let mut writes = 0;
        for now in (1..3600).step_by(7) {
            if write(&mut book, now).patch.is_some() {
                writes += 1;
            }
        }
        assert_eq!(
            writes, 11,
            "an hour of 300 s heartbeats after the first write"
        );
        let beat = patched(&book.plan(3900, BEAT, false));
        assert_eq!(beat[0]["lastHeartbeatTime"], rfc3339(3900));
        assert_eq!(beat[0]["lastTransitionTime"], rfc3339(0));
    }

    #[test]
    fn a_message_only_change_rides_on_the_next_heartbeat() {
        let g = granted("KernelDeadlock", false);
        let mut book = Book::default();
        book.report(report(&g, true, "TaskHung", "1 task", None), 0);
        write(&mut book, 0);
        for now in 1..300 {
            book.report(
                report(&g, true, "TaskHung", &format!("{now} tasks"), None),
                now,
            );
            assert_eq!(write(&mut book, now).patch, None, "at {now}");
        }
        assert_eq!(patched(&write(&mut book, 300))[0]["message"], "299 tasks");
    }

    #[test]
    fn a_ttl_not_renewed_clears_the_condition() {
        let g = granted("KernelDeadlock", true);
        let mut book = Book::default();
        book.report(report(&g, true, "TaskHung", "blocked", Some(60)), 0);
        let plan = write(&mut book, 0);
        assert_eq!(plan.next, Some(61));
        assert_eq!(book.taints.len(), 1);
        assert!(!book.expire(60), "never less than its TTL");
        book.report(report(&g, true, "TaskHung", "blocked", Some(60)), 50);
        assert!(!book.expire(110));
        assert!(book.expire(111));
        let plan = write(&mut book, 111);
        let cleared = patched(&plan);
        assert_eq!(cleared[0]["status"], "False");
        assert_eq!(cleared[0]["reason"], EXPIRED);
        assert!(cleared[0]["message"].as_str().unwrap().contains("TaskHung"));
        assert_eq!(plan.taints, Some(BTreeMap::new()), "its taint goes with it");
    }

    #[test]
    fn an_owner_gone_removes_its_conditions_and_taints_and_only_those() {
        let kernel = granted("KernelDeadlock", true);
        let other = granted("Other", false);
        let mut book = Book::default();
        book.report(report(&kernel, true, "TaskHung", "m", None), 0);
        book.report(
            Report {
                owner: "x",
                ..report(&other, true, "Why", "m", None)
            },
            0,
        );
        write(&mut book, 0);
        assert!(book.retain(|owner, _| (owner == "x").then_some(None)));
        let plan = write(&mut book, 1);
        let removed = patched(&plan);
        assert_eq!(
            removed[0],
            json!({ "type": "KernelDeadlock", "$patch": "delete" })
        );
        assert_eq!(removed[1]["type"], "Other");
        assert_eq!(plan.taints, Some(BTreeMap::new()));
        assert!(!book.conditions.contains_key("KernelDeadlock"));
        assert!(!book.retain(|owner, _| (owner == "x").then_some(None)));
    }

    #[test]
    fn an_orphan_never_written_is_forgotten_without_a_write() {
        let g = granted("KernelDeadlock", false);
        let mut book = Book::default();
        book.report(report(&g, true, "TaskHung", "m", None), 0);
        book.retain(|_, _| None);
        assert!(book.conditions.is_empty());
        assert_eq!(write(&mut book, 0).patch, None);
    }

    #[test]
    fn a_taint_follows_its_condition_and_the_grant() {
        let g = granted("KernelDeadlock", true);
        let mut book = Book::default();
        book.report(report(&g, true, "TaskHung", "m", None), 0);
        let plan = write(&mut book, 0);
        assert_eq!(
            plan.taints,
            Some(BTreeMap::from([(
                "KernelDeadlock".to_string(),
                TaintEffect::NoSchedule
            )]))
        );
        assert_eq!(write(&mut book, 1).taints, None, "unchanged: not rewritten");
        assert!(
            book.plan(1, BEAT, true).taints.is_some(),
            "checked once after a start"
        );
        // The grant drops taint-on: the taint goes, the condition stays.
        book.retain(|_, _| Some(None));
        assert_eq!(write(&mut book, 2).taints, Some(BTreeMap::new()));
    }

    #[test]
    fn a_write_that_raced_a_report_still_writes_the_report() {
        let g = granted("KernelDeadlock", false);
        let mut book = Book::default();
        book.report(report(&g, true, "TaskHung", "m", None), 0);
        let plan = book.plan(0, BEAT, false);
        book.report(report(&g, false, "Recovered", "ok", None), 0);
        book.written(&plan, 0);
        let next = book.plan(0, BEAT, false).next.unwrap();
        assert_eq!(next, MIN_CHANGE_GAP);
        assert_eq!(patched(&book.plan(next, BEAT, false))[0]["status"], "False");
    }

    #[test]
    fn the_gap_is_each_conditions_own_and_a_held_change_rides_on_another_write() {
        let a = granted("KernelDeadlock", true);
        let b = granted("ReadonlyFilesystem", false);
        let mut book = Book::default();
        book.report(report(&a, true, "TaskHung", "m", None), 0);
        assert!(write(&mut book, 0).patch.is_some());
        // A's recovery within its gap waits, its taint with it...
        book.report(report(&a, false, "Recovered", "m", None), 1);
        let plan = write(&mut book, 1);
        assert_eq!(plan.patch, None);
        assert_eq!(plan.taints, None, "the taint stays with the status shown");
        assert_eq!(plan.next, Some(MIN_CHANGE_GAP));
        // ...while B's first change is written at once, and A's rides along.
        book.report(report(&b, true, "Remounted", "m", None), 2);
        let plan = write(&mut book, 2);
        let written = patched(&plan);
        assert_eq!(written[0]["status"], "False", "A rides on B's write");
        assert_eq!(written[1]["status"], "True");
        assert_eq!(plan.taints, Some(BTreeMap::new()));
    }

    #[test]
    fn a_flipping_condition_is_one_write_a_gap_and_its_taint_follows() {
        let g = granted("KernelDeadlock", true);
        let mut book = Book::default();
        let (mut writes, mut taint_writes) = (0, 0);
        // An hour of a True/False flip every second (each a status change).
        for now in 0..3600 {
            book.report(report(&g, now % 2 == 0, "Flip", "m", None), now);
            let plan = write(&mut book, now);
            writes += usize::from(plan.patch.is_some());
            taint_writes += usize::from(plan.taints.is_some());
            if plan.patch.is_none() && plan.taints.is_none() {
                assert!(plan.next.is_some_and(|at| at > now), "at {now}");
            }
        }
        // At most one a gap (fewer when a gap ends on what was written).
        let most = 3600 / MIN_CHANGE_GAP;
        assert!(
            writes as u64 <= most && writes as u64 > most / 2,
            "{writes}"
        );
        assert!(taint_writes <= writes, "{taint_writes} taint writes");
        // What the Node shows is the latest report, never older than a gap.
        book.report(report(&g, false, "Settled", "last", None), 3600);
        let at = book.plan(3600, BEAT, false).next.unwrap();
        assert!(at <= 3600 + MIN_CHANGE_GAP);
        let plan = write(&mut book, at);
        assert_eq!(patched(&plan)[0]["message"], "last");
        assert_eq!(book.taints, BTreeMap::new());
    }

    #[test]
    fn an_owners_removal_is_not_held_back_by_the_gap() {
        let g = granted("KernelDeadlock", true);
        let mut book = Book::default();
        book.report(report(&g, true, "TaskHung", "m", None), 0);
        write(&mut book, 0);
        book.retain(|_, _| None);
        let plan = write(&mut book, 1);
        assert_eq!(patched(&plan)[0]["$patch"], "delete");
        assert_eq!(plan.taints, Some(BTreeMap::new()));
    }

    #[test]
    fn a_book_read_back_never_aims_at_a_kubelet_type_or_an_impossible_report() {
        let shown = |reason: &str, message: &str| Shown {
            active: true,
            reason: reason.into(),
            message: message.into(),
            since: 0,
        };
        let held = |now: Shown| Held {
            owner: "pd".into(),
            written: Some(now.clone()),
            now,
            ttl: None,
            expires: None,
            taint: Some(TaintEffect::NoExecute),
            orphaned: false,
            changed_at: None,
        };
        let mut book = Book::default();
        for planted in ["Ready", "DiskPressure", "Re\u{0430}dy", "Ready ", "a/b"] {
            book.conditions
                .insert(planted.into(), held(shown("KubeletReady", "m")));
            book.taints.insert(planted.into(), TaintEffect::NoExecute);
        }
        book.conditions
            .insert("Escape".into(), held(shown("Why", "\u{1b}[2J")));
        book.conditions.insert(
            "Long".into(),
            held(shown("Why", &"x".repeat(MAX_MESSAGE_FOR_TEST + 1))),
        );
        book.conditions
            .insert("Mine".into(), held(shown("TaskHung", "m")));
        let dropped = book.drop_foreign();
        assert!(dropped.contains(&"Ready".to_string()), "{dropped:?}");
        assert_eq!(
            book.conditions.keys().collect::<Vec<_>>(),
            ["Mine"],
            "only what a report could have made"
        );
        assert!(book.taints.is_empty());
        // Orphaned, the survivor alone is removed: never `Ready`.
        book.retain(|_, _| None);
        let plan = book.plan(0, BEAT, true);
        assert_eq!(
            patched(&plan),
            vec![json!({ "type": "Mine", "$patch": "delete" })]
        );
        assert_eq!(plan.taints, Some(BTreeMap::new()));
    }
}
