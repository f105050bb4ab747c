//! The pure rules of a host-wide budget: how many destructive operations fit
//! in a sliding window, and how soon one target may be acted on again. Times
//! are milliseconds since the Unix epoch, passed in, so every rule is tested
//! without a clock.

use serde::{Deserialize, Serialize};
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
    fn memory_ms(&self) -> u64 {
        self.per.max(self.min_interval_per_target).as_millis() as u64
    }

    fn per_ms(&self) -> u64 {
        self.per.as_millis() as u64
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Spend {
    at_ms: u64,
    target: String,
}

/// What a budget has spent recently, oldest first; persisted between runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    spends: Vec<Spend>,
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
    /// Spends inside the sliding window ending at `now_ms`.
    pub fn used(&self, rule: &BudgetRule, now_ms: u64) -> u32 {
        self.in_window(rule, now_ms).count() as u32
    }

    fn in_window(&self, rule: &BudgetRule, now_ms: u64) -> impl Iterator<Item = &Spend> {
        self.spends
            .iter()
            .filter(move |s| s.at_ms + rule.per_ms() > now_ms)
    }

    /// When the oldest spend in the window leaves it, if the window is full.
    pub fn next_free_ms(&self, rule: &BudgetRule, now_ms: u64) -> Option<u64> {
        let in_window: Vec<&Spend> = self.in_window(rule, now_ms).collect();
        let over = (in_window.len() + 1).checked_sub(rule.max as usize)?;
        in_window
            .get(over.saturating_sub(1))
            .map(|s| s.at_ms + rule.per_ms())
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
        let last = self
            .spends
            .iter()
            .rev()
            .find(|s| s.target == target && s.at_ms + min_ms > now_ms);
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
        if let Some(i) = self
            .spends
            .iter()
            .rposition(|s| s.target == target && s.at_ms == at_ms)
        {
            self.spends.remove(i);
        }
    }

    /// The spends remembered, oldest first: (time, target).
    pub fn spends(&self) -> impl Iterator<Item = (u64, &str)> {
        self.spends.iter().map(|s| (s.at_ms, s.target.as_str()))
    }

    /// Add the spends of another ledger of the same budget (another replica's)
    /// not recorded here yet: a union, so it can only make the budget stricter.
    /// A spend dated after `now_ms` (a skewed clock, or a forged record) counts
    /// as spent now, so none holds a slot for longer than the rules do.
    pub fn merge(&mut self, rule: &BudgetRule, other: &[(u64, String)], now_ms: u64) {
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
    }

    /// Record a spend and forget what no rule needs any more.
    pub fn spend(&mut self, rule: &BudgetRule, target: &str, now_ms: u64) {
        self.spends.push(Spend {
            at_ms: now_ms,
            target: target.to_string(),
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
            (5 * MIN, "/a".to_string()),
            (2 * MIN, "/b".to_string()),
            (100 * MIN, "/future".to_string()),
        ];
        ledger.merge(&rule, &other, 6 * MIN);
        let spends: Vec<_> = ledger.spends().collect();
        assert_eq!(
            spends,
            [(2 * MIN, "/b"), (5 * MIN, "/a"), (6 * MIN, "/future")],
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
