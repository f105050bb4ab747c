//! Host-wide budgets for destructive operations, shared by every plugin
//! because one engine runs every actor on the node. Each budget's ledger is
//! persisted with the plugin state, so a restart or a `tend reconcile` run
//! outside the daemon spends from the same budget. With leader election, the
//! leader also shares them through the election Lease ([`Budgets::shared`]),
//! and a replica that takes the Lease over merges them into its own
//! ([`Budgets::merge_shared`]): a fail-over does not refill a budget.

use super::ledger::{BudgetRule, Ledger, target_hash};
use crate::capabilities::error::CapError;
use crate::capabilities::state::StateBackend;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use tend_rules::reason::Reason;

/// The state namespace of the ledgers: not a valid plugin name, so no plugin
/// can ever read or write it.
const LEDGERS: &str = "tend/budgets";

/// At most this much of the ledgers is shared (a Lease's annotations may
/// hold 256 KiB in all), split between the budgets so that none can push
/// another's spends out: about 1,800 spends for one budget, 36 bytes each.
pub const SHARED_BYTES: usize = 64 * 1024;

/// The shared form of the ledgers (see [`Budgets::shared`]): per budget, its
/// spends as [time in ms, target hash]; and two keys no budget can be named
/// (budget names have no '/'), so a replica of the first format reads the
/// rest and ignores them: [`FORMAT_KEY`] and [`FULL_KEY`].
type Shared = BTreeMap<String, Vec<(u64, String)>>;

/// `[[2, "sha256-64"]]`: targets are [`target_hash`]es. Absent in the first
/// format, whose targets are in clear (hashed when merged).
const FORMAT_KEY: &str = "tend/format";
const FORMAT: u64 = 2;
/// `[[until ms, budget], ...]`: budgets whose spends did not all fit in
/// their share, each to count as used up until then.
const FULL_KEY: &str = "tend/full";

/// One budget's part of the shared form, planned before it is written.
struct Share {
    name: String,
    /// Newest first.
    spends: Vec<(u64, String)>,
    /// The encoded size of each spend in `spends`, separator included.
    sizes: Vec<usize>,
    /// The budget counts as used up until then (carried over from a merge).
    full_until_ms: Option<u64>,
    /// How long a spend matters to the budget's rules.
    memory_ms: u64,
}

impl Share {
    fn needs(&self) -> usize {
        self.sizes.iter().sum()
    }

    /// Keep the newest spends that fit in `bytes`; the budget counts as used
    /// up until the last dropped spend stops mattering. Returns (spends,
    /// full until).
    fn fit(self, bytes: usize) -> (Vec<(u64, String)>, Option<u64>) {
        let mut used = 0;
        let kept = self
            .sizes
            .iter()
            .take_while(|&&size| {
                used += size;
                used <= bytes
            })
            .count();
        let dropped_until = self.spends.get(kept).map(|(at, _)| at + self.memory_ms);
        let mut spends = self.spends;
        spends.truncate(kept);
        spends.reverse();
        (spends, self.full_until_ms.max(dropped_until))
    }
}

/// The encoded size of `value` in JSON.
fn json_len(value: &impl Serialize) -> usize {
    serde_json::to_string(value).expect("serializes").len()
}

/// The budgets every node shares (`[host.fleet]`, in `crate::fleet`), as
/// the gate asks them: after the host-wide budgets, for a node's own
/// disruptions.
#[async_trait::async_trait]
pub trait FleetBudget: Send + Sync {
    /// Admit `operation` (`capability.operation`); `dry_run`: only say
    /// whether it would be, taking nothing.
    async fn admit(&self, operation: &str, dry_run: bool) -> Result<(), CapError>;
    /// Whether this node holds the ticket of the class covering `operation`
    /// (true when no class covers it: nothing to take).
    async fn holds(&self, operation: &str) -> bool;
    /// Give back now this node's ticket of the class covering `operation`,
    /// if it holds one: the disruption it was taken for was undone (`why`).
    async fn give_back(&self, operation: &str, why: &str);
    /// What `/status` shows of it.
    fn status(&self) -> serde_json::Value;
}

pub struct Budgets {
    rules: RwLock<Arc<Vec<BudgetRule>>>,
    ledgers: Mutex<HashMap<String, Ledger>>,
    store: Arc<dyn StateBackend>,
    /// Persisting takes turns, so the newest ledger is what is written last.
    persist: tokio::sync::Mutex<()>,
    /// Notified on every spend, for sharing it at once.
    spent: tokio::sync::Notify,
    /// Spends made so far: the sequence number of the newest.
    spends_made: AtomicU64,
    /// What the Lease carries, for [`Budgets::shared_with_successors`].
    sharing: tokio::sync::watch::Sender<Sharing>,
    /// A budget outgrew its share of [`SHARED_BYTES`] (said once until all fit again).
    trimmed: AtomicBool,
    /// `[host.fleet]`: the budgets shared by every node, asked after these.
    fleet: RwLock<Option<Arc<dyn FleetBudget>>>,
}

/// How far the leader election shares this host's spends.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sharing {
    /// The elector runs: cluster-scope plugins act only while it leads.
    pub electing: bool,
    pub leading: bool,
    /// The spends up to this sequence number are in the Lease.
    pub shared_through: u64,
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
            spends_made: AtomicU64::new(0),
            sharing: tokio::sync::watch::Sender::new(Sharing::default()),
            trimmed: AtomicBool::new(false),
            fleet: RwLock::new(None),
        }
    }

    /// Ask `fleet` too from now on (None: no fleet budgets).
    pub fn set_fleet(&self, fleet: Option<Arc<dyn FleetBudget>>) {
        *self.fleet.write().unwrap() = fleet;
    }

    pub fn fleet(&self) -> Option<Arc<dyn FleetBudget>> {
        self.fleet.read().unwrap().clone()
    }

    /// Wait for the next spend (or the one since the last wait).
    pub async fn spent(&self) {
        self.spent.notified().await
    }

    /// The sequence number of the newest spend: a Lease record built after
    /// reading it carries that spend and every earlier one.
    pub fn spends_made(&self) -> u64 {
        self.spends_made.load(Ordering::SeqCst)
    }

    /// The elector's news: whether it runs and leads, and which spends a
    /// record it wrote carries (`through`, from [`Budgets::spends_made`]).
    pub fn sharing(&self, electing: bool, leading: bool, through: Option<u64>) {
        self.sharing.send_modify(|s| {
            s.electing = electing;
            s.leading = leading;
            s.shared_through = s.shared_through.max(through.unwrap_or(0));
        });
    }

    /// Write-ahead for a cluster-scope plugin: return once the Lease carries
    /// every spend made so far, so that a leader killed just after it acts
    /// leaves its successor the spend. While the elector runs but this host
    /// does not lead (it stopped leading before the record was written),
    /// the act must not happen: `unavailable`. Without leader election there
    /// is no successor to tell.
    pub async fn shared_with_successors(&self) -> Result<(), CapError> {
        let newest = self.spends_made();
        let mut sharing = self.sharing.subscribe();
        loop {
            let now = *sharing.borrow_and_update();
            if !now.electing || now.shared_through >= newest {
                return Ok(());
            }
            if !now.leading {
                return Err(CapError::Unavailable(
                    "this host stopped leading before its budget spend reached the Lease the other replicas read; nothing was done (the new leader acts once it holds the Lease)".into(),
                ));
            }
            if sharing.changed().await.is_err() {
                return Ok(());
            }
        }
    }

    /// The ledgers of the configured budgets as JSON, at most
    /// [`SHARED_BYTES`]: `{"budget": [[ms, "target hash"], ...], ...,
    /// "tend/format": [[2, "sha256-64"]], "tend/full": [[until ms, "budget"]]}`.
    /// Each budget has its own share of the bound, so one budget's spends
    /// never push out another's: the bound split evenly, what a budget does
    /// not need going to those that need more. A budget whose spends exceed
    /// its share keeps its newest and is listed under "tend/full" until its
    /// last dropped spend stops mattering: a successor counts it as used up
    /// until then rather than spend what it cannot see (said once).
    pub async fn shared(&self) -> String {
        let rules = self.rules.read().unwrap().clone();
        let now_ms = super::now_ms();
        let mut shares = Vec::new();
        for rule in rules.iter() {
            if let Err(e) = self.load(&rule.name).await {
                tracing::warn!(budget = %rule.name, "cannot read budget ledger to share it: {e}");
                continue;
            }
            let ledgers = self.ledgers.lock().unwrap();
            let ledger = &ledgers[&rule.name];
            let memory_ms = rule.memory_ms();
            let spends: Vec<(u64, String)> = ledger
                .spends()
                .rev()
                .take_while(|(at, _)| at + memory_ms > now_ms)
                .map(|(at, target)| (at, target.to_string()))
                .collect();
            shares.push(Share {
                name: rule.name.clone(),
                sizes: spends.iter().map(|s| json_len(s) + 1).collect(),
                spends,
                full_until_ms: ledger.full_until(now_ms),
                memory_ms,
            });
        }
        let mut shared = Shared::new();
        let mut full = Vec::new();
        let mut left = SHARED_BYTES.saturating_sub(Self::overhead(&shares));
        shares.sort_by_key(Share::needs);
        let mut budgets_left = shares.len();
        for share in shares {
            let bytes = share.needs().min(left / budgets_left);
            left -= bytes;
            budgets_left -= 1;
            let name = share.name.clone();
            let (spends, full_until) = share.fit(bytes);
            if let Some(until) = full_until {
                full.push((until, name.clone()));
            }
            if !spends.is_empty() {
                shared.insert(name, spends);
            }
        }
        self.say_full(&full);
        if !full.is_empty() {
            shared.insert(FULL_KEY.into(), full);
        }
        shared.insert(FORMAT_KEY.into(), vec![(FORMAT, "sha256-64".into())]);
        serde_json::to_string(&shared).expect("ledgers serialize")
    }

    /// What the shared form takes besides the spends themselves, at most:
    /// the braces, [`FORMAT_KEY`], [`FULL_KEY`] and per budget its key and
    /// its entry under [`FULL_KEY`].
    fn overhead(shares: &[Share]) -> usize {
        let format = json_len(&(FORMAT_KEY, [(FORMAT, "sha256-64")])) + 1;
        let full = json_len(&FULL_KEY) + 4;
        let budgets: usize = shares
            .iter()
            .map(|share| {
                let key = json_len(&share.name) + 4;
                let marker = json_len(&(u64::MAX, &share.name)) + 1;
                key + marker
            })
            .sum();
        2 + format + full + budgets
    }

    /// Warn once (until every budget fits again) that some did not fit.
    fn say_full(&self, full: &[(u64, String)]) {
        if full.is_empty() {
            self.trimmed.store(false, Ordering::Relaxed);
            return;
        }
        if !self.trimmed.swap(true, Ordering::Relaxed) {
            let names: Vec<&str> = full.iter().map(|(_, name)| name.as_str()).collect();
            tracing::warn!(
                "budget(s) {} hold more spends than their share of the election Lease's {SHARED_BYTES} bytes: a replica taking over counts them as used up until their oldest spends have left the window; lower max (or per) of [host.budgets]",
                names.join(", ")
            );
        }
    }

    /// Add the spends of `shared` (another replica's [`Budgets::shared`], of
    /// this format or the first) to the ledgers of the budgets configured
    /// here, and persist them. A union: whatever `shared` says can only make
    /// a budget stricter, for at most one period.
    pub async fn merge_shared(&self, shared: &str) -> Result<(), CapError> {
        let mut shared: Shared = serde_json::from_str(shared).map_err(|e| {
            CapError::Other(format!(
                "the shared budget ledgers are unreadable ({e}): the spends of the previous leader are not known here"
            ))
        })?;
        let hashed = shared.remove(FORMAT_KEY).is_some();
        let full: HashMap<String, u64> = shared
            .remove(FULL_KEY)
            .unwrap_or_default()
            .into_iter()
            .map(|(until, name)| (name, until))
            .collect();
        if !hashed {
            for spends in shared.values_mut() {
                for (_, target) in spends.iter_mut() {
                    *target = target_hash(target);
                }
            }
        }
        let rules: Vec<BudgetRule> = self
            .rules
            .read()
            .unwrap()
            .iter()
            .filter(|r| shared.contains_key(&r.name) || full.contains_key(&r.name))
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
                let spends = shared.get(&rule.name).map_or(&[][..], Vec::as_slice);
                ledger.merge(rule, spends, full.get(&rule.name).copied(), now_ms);
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
                .map_err(|r| CapError::BudgetExhausted(Reason::Budget.tag(&r.message)))?;
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
                    .map_err(|r| CapError::BudgetExhausted(Reason::Budget.tag(&r.message)))?;
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
        self.spends_made.fetch_add(1, Ordering::SeqCst);
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
            self.store
                .set(LEDGERS, &rule.name, bytes, None)
                .await?
                .durable()
                .await?;
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
    async fn a_leaders_spend_waits_for_the_lease_and_fails_when_leadership_goes_first() {
        let budgets = Arc::new(Budgets::new(rules(), Arc::new(FakeState::default())));
        budgets.spend("files.remove", "/a").await.unwrap();
        // No leader election: nobody to tell.
        budgets.shared_with_successors().await.unwrap();

        budgets.sharing(true, true, Some(0));
        let waiting = tokio::spawn({
            let budgets = budgets.clone();
            async move { budgets.shared_with_successors().await }
        });
        tokio::task::yield_now().await;
        assert!(
            !waiting.is_finished(),
            "returned before the Lease carried the spend"
        );
        budgets.sharing(true, true, Some(budgets.spends_made()));
        waiting.await.unwrap().unwrap();

        budgets.spend("files.remove", "/b").await.unwrap();
        let waiting = tokio::spawn({
            let budgets = budgets.clone();
            async move { budgets.shared_with_successors().await }
        });
        tokio::task::yield_now().await;
        budgets.sharing(true, false, None);
        let err = waiting.await.unwrap().unwrap_err();
        assert_eq!(err.kind(), "unavailable", "{err}");
        assert!(err.to_string().contains("stopped leading"), "{err}");
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

    fn rule(name: &str, operation: &str, max: u32, per_secs: u64) -> BudgetRule {
        BudgetRule {
            name: name.into(),
            operations: vec![operation.into()],
            max,
            per: Duration::from_secs(per_secs),
            min_interval_per_target: Duration::ZERO,
        }
    }

    /// `count` spends of `operation` on long, distinct targets.
    async fn flood(budgets: &Budgets, operation: &str, count: usize) {
        let long = "x".repeat(300);
        for i in 0..count {
            budgets
                .spend(operation, &format!("/{i}/{long}"))
                .await
                .unwrap();
        }
    }

    fn parse(text: &str) -> Shared {
        serde_json::from_str(text).unwrap()
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
        let shared = parse(&successor.shared().await);
        let targets: Vec<&str> = shared["removals"].iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(targets.len(), 3);
        for target in ["/a", "/b", "/own"] {
            assert!(
                targets.contains(&target_hash(target).as_str()),
                "{targets:?}"
            );
        }
        assert!(successor.merge_shared("not json").await.is_err());
    }

    /// The attack of issue 25: a second budget's flood of spends on long
    /// targets, newer than a 1-per-hour budget's one spend, does not push
    /// that spend out of the Lease; the successor refuses a second one.
    #[tokio::test]
    async fn one_budget_flooding_cannot_evict_anothers_spend() {
        let rules = vec![
            rule("deletes", "kube.delete", 1, 3600),
            rule("writes", "files.write", 100_000, 3600),
        ];
        let leader = Budgets::new(rules.clone(), Arc::new(FakeState::default()));
        leader.spend("kube.delete", "instance-1").await.unwrap();
        flood(&leader, "files.write", 3000).await;
        let text = leader.shared().await;
        assert!(text.len() <= SHARED_BYTES, "{}", text.len());
        let shared = parse(&text);
        assert_eq!(shared["deletes"].len(), 1, "the deletion is shared");
        let successor = Budgets::new(rules, Arc::new(FakeState::default()));
        successor.merge_shared(&text).await.unwrap();
        let err = successor
            .spend("kube.delete", "instance-2")
            .await
            .unwrap_err();
        assert_eq!(err.kind(), "budget-exhausted", "{err}");
        assert!(err.to_string().contains("1 used"), "{err}");
    }

    /// A budget whose spends in its window exceed its share keeps the newest
    /// and is marked full: a successor refuses it until the last dropped
    /// spend has left the window, and says so; through a second fail-over too.
    #[tokio::test]
    async fn an_over_full_budget_is_treated_as_spent_after_merge() {
        let rules = vec![rule("writes", "files.write", 100_000, 3600)];
        let leader = Budgets::new(rules.clone(), Arc::new(FakeState::default()));
        flood(&leader, "files.write", 3000).await;
        let text = leader.shared().await;
        assert!(text.len() <= SHARED_BYTES, "{}", text.len());
        let shared = parse(&text);
        let kept = &shared["writes"];
        assert!(kept.len() > 1000 && kept.len() < 3000, "{}", kept.len());
        assert!(kept.windows(2).all(|w| w[0].0 <= w[1].0), "oldest first");
        let full = &shared[FULL_KEY];
        assert_eq!(full.len(), 1, "{full:?}");
        assert_eq!(full[0].1, "writes");
        let first_kept = kept[0].0;
        assert!(
            full[0].0 > first_kept && full[0].0 <= first_kept + 3_600_000,
            "until the newest dropped spend leaves the window: {} vs {first_kept}",
            full[0].0
        );

        let successor = Budgets::new(rules.clone(), Arc::new(FakeState::default()));
        successor.merge_shared(&text).await.unwrap();
        let err = successor.spend("files.write", "/new").await.unwrap_err();
        assert_eq!(err.kind(), "budget-exhausted", "{err}");
        assert!(err.to_string().contains("counts as used up until"), "{err}");
        let status = &successor.status(super::super::now_ms()).await[0];
        assert_eq!(status.used, status.max, "{status:?}");
        assert!(status.next_free.is_some(), "{status:?}");

        // The successor shares the mark on: a second fail-over keeps it.
        let third = Budgets::new(rules, Arc::new(FakeState::default()));
        third.merge_shared(&successor.shared().await).await.unwrap();
        let err = third.spend("files.write", "/new").await.unwrap_err();
        assert_eq!(err.kind(), "budget-exhausted", "{err}");
    }

    /// Targets travel as hashes: the successor hashes its own targets the
    /// same way, so `min-interval-per-target` holds across a merge, from
    /// this format and from the first (targets in clear).
    #[tokio::test]
    async fn hashed_targets_still_enforce_min_interval_per_target_across_a_merge() {
        let mut rules = rules();
        rules[0].max = 100;
        rules[0].min_interval_per_target = Duration::from_secs(300);
        let leader = Budgets::new(rules.clone(), Arc::new(FakeState::default()));
        let at = leader.spend("files.remove", "/a").await.unwrap();
        let text = leader.shared().await;
        assert!(
            !text.contains(r#""/a""#),
            "the target travels hashed: {text}"
        );
        let first_format = format!(r#"{{"removals":[[{at},"/c"]]}}"#);
        for (shared, again) in [(&text, "/a"), (&first_format, "/c")] {
            let successor = Budgets::new(rules.clone(), Arc::new(FakeState::default()));
            successor.merge_shared(shared).await.unwrap();
            let err = successor.spend("files.remove", again).await.unwrap_err();
            assert!(err.to_string().contains("at most once per 5m"), "{err}");
            successor.spend("files.remove", "/b").await.unwrap();
        }
    }

    /// With many budgets each holding many spends, the shared form stays
    /// within the bound and every budget keeps a share; a budget that needs
    /// little keeps all of it whatever the others hold.
    #[tokio::test]
    async fn the_wire_size_stays_under_the_bound_with_many_budgets_and_spends() {
        let operations = ["files.write", "files.remove", "http.send", "kube.delete"];
        let mut rules: Vec<BudgetRule> = (0..40)
            .map(|i| rule(&format!("budget-{i}"), operations[i % 4], 100_000, 3600))
            .collect();
        rules.push(rule("small", "systemd.restart", 5, 3600));
        let budgets = Budgets::new(rules, Arc::new(FakeState::default()));
        budgets.spend("systemd.restart", "a").await.unwrap();
        budgets.spend("systemd.restart", "b").await.unwrap();
        for operation in operations {
            flood(&budgets, operation, 600).await;
        }
        let text = budgets.shared().await;
        assert!(text.len() <= SHARED_BYTES, "{}", text.len());
        let shared = parse(&text);
        assert_eq!(shared["small"].len(), 2, "the small budget keeps all");
        for i in 0..40 {
            let kept = shared[&format!("budget-{i}")].len();
            assert!((30..600).contains(&kept), "budget-{i}: {kept}");
        }
        assert_eq!(shared[FULL_KEY].len(), 40);
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
