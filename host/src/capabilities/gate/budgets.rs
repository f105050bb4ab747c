//! Host-wide budgets for destructive operations, shared by every plugin
//! because one engine runs every actor on the node. Each budget's ledger is
//! persisted with the plugin state, so a restart or a `tend reconcile` run
//! outside the daemon spends from the same budget. With leader election, the
//! leader also shares them through the election Lease ([`Budgets::shared`]),
//! and a replica that takes the Lease over merges them into its own
//! ([`Budgets::merge_shared`]): a fail-over does not refill a budget.

use super::budget::{BudgetRule, Ledger};
use crate::capabilities::error::CapError;
use crate::capabilities::state::StateBackend;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// The state namespace of the ledgers: not a valid plugin name, so no plugin
/// can ever read or write it.
const LEDGERS: &str = "tend/budgets";

/// At most this much of the ledgers is shared (a Lease's annotations may
/// hold 256 KiB in all): about a thousand spends with short targets.
pub const SHARED_BYTES: usize = 64 * 1024;

/// The shared form of the ledgers: per budget, its spends as [time in ms, target].
type Shared = BTreeMap<String, Vec<(u64, String)>>;

pub struct Budgets {
    rules: RwLock<Arc<Vec<BudgetRule>>>,
    ledgers: Mutex<HashMap<String, Ledger>>,
    store: Arc<dyn StateBackend>,
    /// Persisting takes turns, so the newest ledger is what is written last.
    persist: tokio::sync::Mutex<()>,
    /// Notified on every spend, for sharing it at once.
    spent: tokio::sync::Notify,
    /// The ledgers outgrew [`SHARED_BYTES`] (said once until they fit again).
    trimmed: AtomicBool,
}

/// One budget as `/status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct BudgetStatus {
    pub name: String,
    pub operations: Vec<String>,
    pub max: u32,
    pub per: String,
    pub used: u32,
    /// When the next slot frees, if the budget is used up (RFC 3339).
    pub next_free: Option<String>,
}

impl Budgets {
    pub fn new(rules: Vec<BudgetRule>, store: Arc<dyn StateBackend>) -> Self {
        Budgets {
            rules: RwLock::new(Arc::new(rules)),
            ledgers: Mutex::default(),
            store,
            persist: tokio::sync::Mutex::const_new(()),
            spent: tokio::sync::Notify::new(),
            trimmed: AtomicBool::new(false),
        }
    }

    /// Wait for the next spend (or the one since the last wait).
    pub async fn spent(&self) {
        self.spent.notified().await
    }

    /// The ledgers of the configured budgets as JSON, `{"budget": [[ms,
    /// "target"], ...]}`, at most [`SHARED_BYTES`]: beyond it, the oldest
    /// spends are left out (said once), as they free first anyway.
    pub async fn shared(&self) -> String {
        let rules = self.rules.read().unwrap().clone();
        let mut spends = Vec::new();
        for rule in rules.iter() {
            if let Err(e) = self.load(&rule.name).await {
                tracing::warn!(budget = %rule.name, "cannot read budget ledger to share it: {e}");
                continue;
            }
            let ledgers = self.ledgers.lock().unwrap();
            spends.extend(
                ledgers[&rule.name]
                    .spends()
                    .map(|(at, target)| (at, rule.name.clone(), target.to_string())),
            );
        }
        // Newest first (a ledger is oldest first), to keep the newest.
        spends.reverse();
        spends.sort_by_key(|s| std::cmp::Reverse(s.0));
        let mut shared = Shared::new();
        let mut size = 2;
        let total = spends.len();
        for (at, name, target) in spends {
            let entry = serde_json::to_string(&(at, &target)).expect("a spend serializes");
            let budget = match shared.contains_key(&name) {
                true => 0,
                false => {
                    serde_json::to_string(&name)
                        .expect("a name serializes")
                        .len()
                        + 4
                }
            };
            if size + budget + entry.len() + 1 > SHARED_BYTES {
                break;
            }
            size += budget + entry.len() + 1;
            shared.entry(name).or_default().push((at, target));
        }
        for spends in shared.values_mut() {
            spends.reverse();
        }
        let kept: usize = shared.values().map(Vec::len).sum();
        let trimmed = kept < total;
        if trimmed && !self.trimmed.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "the budgets hold {total} spends, more than the election Lease's {SHARED_BYTES} bytes share: the oldest {} are not shared, so a replica taking over may spend them again; lower max (or per) of [host.budgets]",
                total - kept
            );
        }
        if !trimmed {
            self.trimmed.store(false, Ordering::Relaxed);
        }
        serde_json::to_string(&shared).expect("ledgers serialize")
    }

    /// Add the spends of `shared` (another replica's [`Budgets::shared`]) to
    /// the ledgers of the budgets configured here, and persist them. A union:
    /// whatever `shared` says can only make a budget stricter, for at most
    /// one period.
    pub async fn merge_shared(&self, shared: &str) -> Result<(), CapError> {
        let shared: Shared = serde_json::from_str(shared).map_err(|e| {
            CapError::Other(format!(
                "the shared budget ledgers are unreadable ({e}): the spends of the previous leader are not known here"
            ))
        })?;
        let rules: Vec<BudgetRule> = self
            .rules
            .read()
            .unwrap()
            .iter()
            .filter(|r| shared.contains_key(&r.name))
            .cloned()
            .collect();
        for rule in &rules {
            self.load(&rule.name).await?;
        }
        {
            let now_ms = super::now_ms();
            let mut ledgers = self.ledgers.lock().unwrap();
            for rule in &rules {
                let ledger = ledgers.get_mut(&rule.name).expect("loaded above");
                ledger.merge(rule, &shared[&rule.name], now_ms);
            }
        }
        self.persist(&rules).await
    }

    /// Apply a reloaded config; ledgers of kept budgets keep their spends.
    pub fn set_rules(&self, rules: Vec<BudgetRule>) {
        *self.rules.write().unwrap() = Arc::new(rules);
    }

    fn applicable(&self, operation: &str) -> Vec<BudgetRule> {
        let rules = self.rules.read().unwrap().clone();
        rules
            .iter()
            .filter(|r| r.covers(operation))
            .cloned()
            .collect()
    }

    async fn load(&self, name: &str) -> Result<(), CapError> {
        if self.ledgers.lock().unwrap().contains_key(name) {
            return Ok(());
        }
        let _turn = self.persist.lock().await;
        let ledger = match self.store.get(LEDGERS, name).await? {
            Some(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(
                    budget = name,
                    "unreadable budget ledger, starting empty: {e}"
                );
                Ledger::default()
            }),
            None => Ledger::default(),
        };
        self.ledgers
            .lock()
            .unwrap()
            .entry(name.to_string())
            .or_insert(ledger);
        Ok(())
    }

    /// Check every budget covering `operation` without spending; `planned` are
    /// (operation, target) pairs a dry run already planned.
    pub async fn check(
        &self,
        operation: &str,
        target: &str,
        now_ms: u64,
        planned: &[(String, String)],
    ) -> Result<(), CapError> {
        for rule in self.applicable(operation) {
            self.load(&rule.name).await?;
            let planned: Vec<&str> = planned
                .iter()
                .filter(|(op, _)| rule.covers(op))
                .map(|(_, t)| t.as_str())
                .collect();
            let ledgers = self.ledgers.lock().unwrap();
            ledgers[&rule.name]
                .check(&rule, operation, target, now_ms, &planned)
                .map_err(|r| CapError::BudgetExhausted(r.message))?;
        }
        Ok(())
    }

    /// Spend from every budget covering `operation`, all or nothing, and
    /// persist before the mutation is allowed to happen. The clock is read
    /// under the ledgers' lock, so spends are recorded in time order. Returns
    /// the spend's time, for [`Budgets::refund`].
    pub async fn spend(&self, operation: &str, target: &str) -> Result<u64, CapError> {
        let rules = self.applicable(operation);
        if rules.is_empty() {
            return Ok(0);
        }
        for rule in &rules {
            self.load(&rule.name).await?;
        }
        let now_ms = {
            let mut ledgers = self.ledgers.lock().unwrap();
            let now_ms = super::now_ms();
            for rule in &rules {
                ledgers[&rule.name]
                    .check(rule, operation, target, now_ms, &[])
                    .map_err(|r| CapError::BudgetExhausted(r.message))?;
            }
            for rule in &rules {
                let ledger = ledgers.get_mut(&rule.name).expect("loaded above");
                ledger.spend(rule, target, now_ms);
            }
            now_ms
        };
        if let Err(e) = self.persist(&rules).await {
            self.refund(operation, target, now_ms).await;
            return Err(e);
        }
        self.spent.notify_one();
        Ok(now_ms)
    }

    /// Give back a spend whose mutation never started (its intent could not
    /// be journaled): a slot is not lost to nothing.
    pub async fn refund(&self, operation: &str, target: &str, at_ms: u64) {
        let rules = self.applicable(operation);
        {
            let mut ledgers = self.ledgers.lock().unwrap();
            for rule in &rules {
                if let Some(ledger) = ledgers.get_mut(&rule.name) {
                    ledger.refund(target, at_ms);
                }
            }
        }
        if let Err(e) = self.persist(&rules).await {
            tracing::warn!("cannot persist a budget refund: {e}");
        }
    }

    async fn persist(&self, rules: &[BudgetRule]) -> Result<(), CapError> {
        let _turn = self.persist.lock().await;
        for rule in rules {
            let bytes = {
                let ledgers = self.ledgers.lock().unwrap();
                serde_json::to_vec(&ledgers[&rule.name]).expect("a ledger serializes")
            };
            self.store.set(LEDGERS, &rule.name, bytes, None).await?;
        }
        Ok(())
    }

    pub async fn status(&self, now_ms: u64) -> Vec<BudgetStatus> {
        let rules = self.rules.read().unwrap().clone();
        let mut status = Vec::new();
        for rule in rules.iter() {
            if let Err(e) = self.load(&rule.name).await {
                tracing::warn!(budget = %rule.name, "cannot read budget ledger: {e}");
            }
            let ledgers = self.ledgers.lock().unwrap();
            let ledger = ledgers.get(&rule.name).cloned().unwrap_or_default();
            let used = ledger.used(rule, now_ms);
            status.push(BudgetStatus {
                name: rule.name.clone(),
                operations: rule.operations.clone(),
                max: rule.max,
                per: humantime::format_duration(rule.per).to_string(),
                used,
                next_free: (used >= rule.max)
                    .then(|| ledger.next_free_ms(rule, now_ms))
                    .flatten()
                    .map(|ms| {
                        let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
                        humantime::format_rfc3339_seconds(at).to_string()
                    }),
            });
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::state::FakeState;
    use std::time::Duration;

    fn rules() -> Vec<BudgetRule> {
        vec![BudgetRule {
            name: "removals".into(),
            operations: vec!["files.remove".into()],
            max: 2,
            per: Duration::from_secs(600),
            min_interval_per_target: Duration::ZERO,
        }]
    }

    #[tokio::test]
    async fn spends_are_shared_persisted_and_reloaded() {
        let store = Arc::new(FakeState::default());
        let budgets = Budgets::new(rules(), store.clone());
        budgets.spend("files.remove", "/a").await.unwrap();
        budgets.spend("files.write", "/w").await.unwrap();
        let at = budgets.spend("files.remove", "/b").await.unwrap();
        let err = budgets.spend("files.remove", "/c").await.unwrap_err();
        assert_eq!(err.kind(), "budget-exhausted");
        // A new process over the same store sees the same spends.
        let again = Budgets::new(rules(), store);
        assert!(again.check("files.remove", "/c", at, &[]).await.is_err());
        let status = again.status(at).await;
        assert_eq!((status[0].used, status[0].max), (2, 2));
        assert!(status[0].next_free.is_some());
    }

    #[tokio::test]
    async fn a_refused_spend_spends_nothing() {
        let store = Arc::new(FakeState::default());
        let mut rules = rules();
        rules.push(BudgetRule {
            name: "one".into(),
            operations: vec!["files.remove".into()],
            max: 1,
            per: Duration::from_secs(600),
            min_interval_per_target: Duration::ZERO,
        });
        let budgets = Budgets::new(rules, store);
        let at = budgets.spend("files.remove", "/a").await.unwrap();
        assert!(budgets.spend("files.remove", "/b").await.is_err());
        let status = budgets.status(at).await;
        assert_eq!(
            status[0].used, 1,
            "the larger budget was not charged for the refusal"
        );
        budgets.refund("files.remove", "/a", at).await;
        assert_eq!(budgets.status(at).await[0].used, 0);
    }

    /// What one replica shares, another merges: its budget is used up too,
    /// and what it shares next carries both replicas' spends.
    #[tokio::test]
    async fn shared_ledgers_merge_into_another_replicas() {
        let leader = Budgets::new(rules(), Arc::new(FakeState::default()));
        leader.spend("files.remove", "/a").await.unwrap();
        let at = leader.spend("files.remove", "/b").await.unwrap();
        let successor = Budgets::new(rules(), Arc::new(FakeState::default()));
        let own = successor.spend("files.remove", "/own").await.unwrap();
        successor
            .merge_shared(&leader.shared().await)
            .await
            .unwrap();
        let err = successor.spend("files.remove", "/c").await.unwrap_err();
        assert_eq!(err.kind(), "budget-exhausted");
        assert_eq!(successor.status(at.max(own)).await[0].used, 3);
        let shared: Shared = serde_json::from_str(&successor.shared().await).unwrap();
        let targets: Vec<&str> = shared["removals"].iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(targets.len(), 3);
        for target in ["/a", "/b", "/own"] {
            assert!(targets.contains(&target), "{targets:?}");
        }
        assert!(successor.merge_shared("not json").await.is_err());
    }

    /// Beyond the bound, the newest spends are shared, the oldest left out.
    #[tokio::test]
    async fn the_shared_ledgers_keep_the_newest_spends_within_the_bound() {
        let mut rules = rules();
        rules[0].max = 100_000;
        let budgets = Budgets::new(rules, Arc::new(FakeState::default()));
        let long = "x".repeat(1000);
        for i in 0..100 {
            budgets
                .spend("files.remove", &format!("/{i}/{long}"))
                .await
                .unwrap();
        }
        let text = budgets.shared().await;
        assert!(text.len() <= SHARED_BYTES, "{}", text.len());
        let shared: Shared = serde_json::from_str(&text).unwrap();
        let kept = &shared["removals"];
        assert!(kept.len() >= 60 && kept.len() < 100, "{}", kept.len());
        assert!(
            kept.last().unwrap().1.starts_with("/99/"),
            "the newest is kept"
        );
        assert!(kept.windows(2).all(|w| w[0].0 <= w[1].0), "oldest first");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_spends_never_exceed_the_budget() {
        let mut rules = rules();
        rules[0].max = 7;
        let budgets = Arc::new(Budgets::new(rules, Arc::new(FakeState::default())));
        let tasks: Vec<_> = (0..40)
            .map(|i| {
                let budgets = budgets.clone();
                tokio::spawn(async move { budgets.spend("files.remove", &format!("/{i}")).await })
            })
            .collect();
        let mut granted = 0;
        for task in tasks {
            granted += usize::from(task.await.unwrap().is_ok());
        }
        assert_eq!(granted, 7);
    }
}
