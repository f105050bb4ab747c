//! One budget: its rule (how many destructive operations fit in a sliding
//! window, how soon one target may be acted on again) and its ledger of spends.
//! Times are milliseconds since the Unix epoch, passed in, so every rule is tested
//! without a clock.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::time::Duration;

/// `[host.budgets.<name>]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetRule {
    pub name: String,
    /// "capability.operation", each a mutating operation of a registered capability.
    pub operations: Vec<String>,
    pub max: u32,
    pub per: Duration,
    /// The same target at most this often (zero: no such limit).
    pub min_interval_per_target: Duration,
}

impl BudgetRule {
    pub fn covers(&self, operation: &str) -> bool {
        self.operations.iter().any(|o| o == operation)
    }

    /// How long a spend must be remembered for either rule.
    pub fn memory_ms(&self) -> u64 {
        self.per.max(self.min_interval_per_target).as_millis() as u64
    }

    fn per_ms(&self) -> u64 {
        self.per.as_millis() as u64
    }
}

/// How a ledger remembers a target: 64 bits of its SHA-256, in hex. Targets
/// only matter for `min-interval-per-target`, which compares them; a short
/// hash of fixed size keeps every spend the same small size in the Lease
/// however long its target (a path, a URL), and is what every replica
/// compares, its own spends and merged ones alike.
pub fn target_hash(target: &str) -> String {
    hex::encode(&Sha256::digest(target.as_bytes())[..8])
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Spend {
    at_ms: u64,
    /// The [`target_hash`] of the target.
    target: String,
}

/// What a budget has spent recently, oldest first; persisted between runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "StoredLedger", into = "StoredLedger")]
pub struct Ledger {
    spends: Vec<Spend>,
    /// The budget counts as used up until then: a previous leader's spends
    /// did not all fit in its share of the Lease, so how many it made in the
    /// window is unknown here (fail closed).
    full_until_ms: Option<u64>,
}

/// A ledger as persisted. Ledgers written before targets were hashed hold
/// them in clear (`hashed` absent); they are hashed on load, so a
/// `min-interval-per-target` holds across the upgrade.
#[derive(Serialize, Deserialize)]
struct StoredLedger {
    spends: Vec<Spend>,
    #[serde(default)]
    hashed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    full_until_ms: Option<u64>,
}

impl From<StoredLedger> for Ledger {
    fn from(stored: StoredLedger) -> Self {
        let mut spends = stored.spends;
        if !stored.hashed {
            for spend in &mut spends {
                spend.target = target_hash(&spend.target);
            }
        }
        Ledger {
            spends,
            full_until_ms: stored.full_until_ms,
        }
    }
}

impl From<Ledger> for StoredLedger {
    fn from(ledger: Ledger) -> Self {
        StoredLedger {
            spends: ledger.spends,
            hashed: true,
            full_until_ms: ledger.full_until_ms,
        }
    }
}

/// Why a budget refuses, with the time a retry can succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub message: String,
    pub retry_at_ms: Option<u64>,
}

fn human(ms: u64) -> String {
    // Whole seconds read better than "9m 58s 123ms 456us".
    let secs = ms.div_ceil(1000).max(1);
    humantime::format_duration(Duration::from_secs(secs)).to_string()
}

fn rfc3339(ms: u64) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(at).to_string()
}

impl Ledger {
    /// Spends inside the sliding window ending at `now_ms` (all of them while
    /// the budget counts as full).
    pub fn used(&self, rule: &BudgetRule, now_ms: u64) -> u32 {
        match self.full_until(now_ms) {
            Some(_) => rule.max,
            None => self.in_window(rule, now_ms).count() as u32,
        }
    }

    /// Until when the budget counts as used up whatever its spends say
    /// (see [`Ledger::merge`]), if that is still ahead of `now_ms`.
    pub fn full_until(&self, now_ms: u64) -> Option<u64> {
        self.full_until_ms.filter(|&until| until > now_ms)
    }

    fn in_window(&self, rule: &BudgetRule, now_ms: u64) -> impl Iterator<Item = &Spend> {
        self.spends
            .iter()
            .filter(move |s| s.at_ms + rule.per_ms() > now_ms)
    }

    /// When the oldest spend in the window leaves it, if the window is full.
    pub fn next_free_ms(&self, rule: &BudgetRule, now_ms: u64) -> Option<u64> {
        let in_window: Vec<&Spend> = self.in_window(rule, now_ms).collect();
        let by_count = (in_window.len() + 1)
            .checked_sub(rule.max as usize)
            .and_then(|over| in_window.get(over.saturating_sub(1)))
            .map(|s| s.at_ms + rule.per_ms());
        match (self.full_until(now_ms), by_count) {
            (Some(until), by_count) => Some(by_count.map_or(until, |at| at.max(until))),
            (None, by_count) => by_count,
        }
    }

    /// Would one more `operation` on `target` fit? `planned` are the targets this
    /// dry run already planned under the same rule (checked, never spent).
    pub fn check(
        &self,
        rule: &BudgetRule,
        operation: &str,
        target: &str,
        now_ms: u64,
        planned: &[&str],
    ) -> Result<(), Refusal> {
        let table = format!("[host.budgets.{}]", rule.name);
        if let Some(until) = self.full_until(now_ms) {
            return Err(Refusal {
                message: format!(
                    "budget \"{}\" counts as used up until {} (in {}): the previous leader's spends of it did not all fit in its share of the election Lease, so how many it made is unknown here. Wait, or lower max (or per) in {table} so its spends fit",
                    rule.name,
                    rfc3339(until),
                    human(until - now_ms),
                ),
                retry_at_ms: Some(until),
            });
        }
        let used = self.used(rule, now_ms);
        if used as usize + planned.len() >= rule.max as usize {
            let retry_at_ms = self.next_free_ms(rule, now_ms);
            let when = match retry_at_ms {
                Some(at) => format!(
                    "the next slot frees in {} (at {})",
                    human(at.saturating_sub(now_ms)),
                    rfc3339(at)
                ),
                None => "no slot frees before this plan's earlier mutations are done".to_string(),
            };
            let planned = match planned.len() {
                0 => String::new(),
                n => format!(" and {n} planned earlier in this dry run"),
            };
            return Err(Refusal {
                message: format!(
                    "budget \"{}\" allows {} of {} per {}; {used} used{planned}: {when}. Wait, or raise max in {table}",
                    rule.name,
                    rule.max,
                    rule.operations.join(", "),
                    humantime::format_duration(rule.per),
                ),
                retry_at_ms,
            });
        }
        if rule.min_interval_per_target.is_zero() {
            return Ok(());
        }
        let min_ms = rule.min_interval_per_target.as_millis() as u64;
        let hash = target_hash(target);
        let last = self
            .spends
            .iter()
            .rev()
            .find(|s| s.target == hash && s.at_ms + min_ms > now_ms);
        let again = match last {
            Some(last) => Some((
                last.at_ms + min_ms,
                human(now_ms.saturating_sub(last.at_ms)),
            )),
            None if planned.contains(&target) => None,
            None => return Ok(()),
        };
        let interval = humantime::format_duration(rule.min_interval_per_target);
        let (retry_at_ms, detail) = match again {
            Some((at, ago)) => (
                Some(at),
                format!(
                    "the last was {ago} ago: next allowed in {}",
                    human(at.saturating_sub(now_ms))
                ),
            ),
            None => (None, "it is already planned in this dry run".to_string()),
        };
        Err(Refusal {
            message: format!(
                "budget \"{}\" allows {operation} on {target} at most once per {interval}; {detail}. Wait, or lower min-interval-per-target in {table}",
                rule.name
            ),
            retry_at_ms,
        })
    }

    /// Forget the spend on `target` at `at_ms` (its mutation never started).
    pub fn refund(&mut self, target: &str, at_ms: u64) {
        let hash = target_hash(target);
        if let Some(i) = self
            .spends
            .iter()
            .rposition(|s| s.target == hash && s.at_ms == at_ms)
        {
            self.spends.remove(i);
        }
    }

    /// The spends remembered, oldest first: (time, [`target_hash`]).
    pub fn spends(&self) -> impl DoubleEndedIterator<Item = (u64, &str)> {
        self.spends.iter().map(|s| (s.at_ms, s.target.as_str()))
    }

    /// Add the spends of another ledger of the same budget (another replica's:
    /// times and [`target_hash`]es) not recorded here yet, and its
    /// `full_until_ms` (the budget counts as used up until then): a union, so
    /// it can only make the budget stricter. A spend dated after `now_ms` (a
    /// skewed clock, or a forged record) counts as spent now, and a full
    /// budget is full for at most what the rules remember from now, so
    /// neither holds a slot for longer than the rules do.
    pub fn merge(
        &mut self,
        rule: &BudgetRule,
        other: &[(u64, String)],
        full_until_ms: Option<u64>,
        now_ms: u64,
    ) {
        for (at_ms, target) in other {
            let spend = Spend {
                at_ms: (*at_ms).min(now_ms),
                target: target.clone(),
            };
            if !self.spends.contains(&spend) {
                self.spends.push(spend);
            }
        }
        self.spends.sort_by_key(|s| s.at_ms);
        let memory = rule.memory_ms();
        self.spends.retain(|s| s.at_ms + memory > now_ms);
        if let Some(until) = full_until_ms.map(|u| u.min(now_ms + memory)) {
            self.full_until_ms = self.full_until_ms.max(Some(until));
        }
    }

    /// Record a spend and forget what no rule needs any more.
    pub fn spend(&mut self, rule: &BudgetRule, target: &str, now_ms: u64) {
        self.spends.push(Spend {
            at_ms: now_ms,
            target: target_hash(target),
        });
        let memory = rule.memory_ms();
        self.spends.retain(|s| s.at_ms + memory > now_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60_000;

    fn rule(max: u32, per_min: u64, min_interval_min: u64) -> BudgetRule {
        BudgetRule {
            name: "file-removals".into(),
            operations: vec!["files.remove".into()],
            max,
            per: Duration::from_millis(per_min * MIN),
            min_interval_per_target: Duration::from_millis(min_interval_min * MIN),
        }
    }

    #[test]
    fn a_full_window_refuses_until_its_oldest_spend_leaves() {
        let rule = rule(2, 10, 0);
        let mut ledger = Ledger::default();
        let t0 = 1_000_000_000;
        for (i, target) in ["/a", "/b"].iter().enumerate() {
            ledger
                .check(&rule, "files.remove", target, t0 + i as u64, &[])
                .unwrap();
            ledger.spend(&rule, target, t0 + i as u64);
        }
        let refusal = ledger
            .check(&rule, "files.remove", "/c", t0 + MIN, &[])
            .unwrap_err();
        assert_eq!(refusal.retry_at_ms, Some(t0 + 10 * MIN));
        assert!(
            refusal.message.starts_with(
                "budget \"file-removals\" allows 2 of files.remove per 10m; 2 used: the next slot frees in 9m"
            ),
            "{}",
            refusal.message
        );
        assert!(
            refusal
                .message
                .ends_with("raise max in [host.budgets.file-removals]")
        );
        // One millisecond after the oldest spend leaves the window, one slot is free.
        assert!(
            ledger
                .check(&rule, "files.remove", "/c", t0 + 10 * MIN, &[])
                .is_ok()
        );
        assert_eq!(ledger.used(&rule, t0 + 10 * MIN), 1);
    }

    #[test]
    fn the_same_target_waits_out_its_minimum_interval() {
        let rule = rule(100, 1, 5);
        let mut ledger = Ledger::default();
        ledger.spend(&rule, "/a", 0);
        let refusal = ledger
            .check(&rule, "files.remove", "/a", 2 * MIN, &[])
            .unwrap_err();
        assert_eq!(refusal.retry_at_ms, Some(5 * MIN));
        assert!(
            refusal
                .message
                .contains("at most once per 5m; the last was 2m ago: next allowed in 3m"),
            "{}",
            refusal.message
        );
        assert!(
            ledger
                .check(&rule, "files.remove", "/b", 2 * MIN, &[])
                .is_ok()
        );
        assert!(
            ledger
                .check(&rule, "files.remove", "/a", 5 * MIN, &[])
                .is_ok()
        );
    }

    #[test]
    fn a_dry_run_counts_what_it_already_planned() {
        let rule = rule(2, 10, 1);
        let ledger = Ledger::default();
        assert!(
            ledger
                .check(&rule, "files.remove", "/a", 0, &["/b"])
                .is_ok()
        );
        let refusal = ledger
            .check(&rule, "files.remove", "/c", 0, &["/a", "/b"])
            .unwrap_err();
        assert!(
            refusal
                .message
                .contains("0 used and 2 planned earlier in this dry run"),
            "{}",
            refusal.message
        );
        let refusal = ledger
            .check(&rule, "files.remove", "/a", 0, &["/a"])
            .unwrap_err();
        assert!(
            refusal.message.contains("already planned"),
            "{}",
            refusal.message
        );
    }

    #[test]
    fn a_merge_is_a_union_that_never_reaches_past_now() {
        let rule = rule(3, 10, 0);
        let mut ledger = Ledger::default();
        ledger.spend(&rule, "/a", 5 * MIN);
        let other = [
            (5 * MIN, target_hash("/a")),
            (2 * MIN, target_hash("/b")),
            (100 * MIN, target_hash("/future")),
        ];
        ledger.merge(&rule, &other, None, 6 * MIN);
        let spends: Vec<_> = ledger.spends().map(|(at, t)| (at, t.to_string())).collect();
        assert_eq!(
            spends,
            [
                (2 * MIN, target_hash("/b")),
                (5 * MIN, target_hash("/a")),
                (6 * MIN, target_hash("/future"))
            ],
            "the same spend once, the future one now"
        );
        assert!(
            ledger
                .check(&rule, "files.remove", "/c", 6 * MIN, &[])
                .is_err()
        );
        // The future spend leaves the window one period after now, not after 100 minutes.
        assert_eq!(ledger.used(&rule, 16 * MIN), 0);
    }

    /// A budget whose spends did not all fit in the Lease counts as used up
    /// until the given time, but never longer than its rules remember.
    #[test]
    fn a_merged_full_budget_refuses_until_its_end_and_no_longer_than_its_memory() {
        let rule = rule(5, 10, 0);
        let mut ledger = Ledger::default();
        ledger.merge(&rule, &[], Some(4 * MIN), MIN);
        assert_eq!(ledger.used(&rule, MIN), 5);
        assert_eq!(ledger.next_free_ms(&rule, MIN), Some(4 * MIN));
        let refusal = ledger
            .check(&rule, "files.remove", "/a", 2 * MIN, &[])
            .unwrap_err();
        assert_eq!(refusal.retry_at_ms, Some(4 * MIN));
        assert!(
            refusal
                .message
                .contains("counts as used up until 1970-01-01T00:04:00Z (in 2m)"),
            "{}",
            refusal.message
        );
        assert!(
            ledger
                .check(&rule, "files.remove", "/a", 4 * MIN, &[])
                .is_ok()
        );
        // A forged end a day away holds for one period (10 minutes) at most.
        ledger.merge(&rule, &[], Some(24 * 60 * MIN), 5 * MIN);
        assert_eq!(ledger.full_until(5 * MIN), Some(15 * MIN));
        // Persisted and reloaded, it still holds.
        let again: Ledger = serde_json::from_slice(&serde_json::to_vec(&ledger).unwrap()).unwrap();
        assert_eq!(again, ledger);
    }

    /// A ledger persisted before targets were hashed holds them in clear:
    /// loaded, they are hashed, so the minimum interval still holds.
    #[test]
    fn a_ledger_persisted_with_clear_targets_is_hashed_on_load() {
        let rule = rule(100, 1, 5);
        let old = r#"{"spends":[{"at_ms":60000,"target":"/a"}]}"#;
        let ledger: Ledger = serde_json::from_str(old).unwrap();
        assert_eq!(
            ledger.spends().next(),
            Some((MIN, target_hash("/a").as_str()))
        );
        assert!(
            ledger
                .check(&rule, "files.remove", "/a", 2 * MIN, &[])
                .is_err()
        );
        let stored = serde_json::to_string(&ledger).unwrap();
        assert!(stored.contains(r#""hashed":true"#), "{stored}");
        let again: Ledger = serde_json::from_str(&stored).unwrap();
        assert_eq!(again, ledger, "hashed once, not twice");
    }

    #[test]
    fn spends_no_rule_needs_are_forgotten() {
        let rule = rule(1000, 1, 3);
        let mut ledger = Ledger::default();
        for i in 0..100 {
            ledger.spend(&rule, &format!("/{i}"), i * MIN);
        }
        // Only what the longer of the two rules (3 minutes) still needs.
        assert_eq!(ledger.spends.len(), 3);
    }
}
