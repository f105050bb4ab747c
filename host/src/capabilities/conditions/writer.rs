//! The host's side of the conditions: one [`Book`] for the Node, saved in
//! `<state-dir>/conditions.json` (mode 0600, replaced atomically) so no
//! restart resets a condition, and one writer task that carries the book to
//! the Node: at once on a change, once a heartbeat, when a TTL passes, when
//! an owner goes. A failed write is retried with a backoff of 1 s to 30 s,
//! never dropped. The writer starts with the scheduler's first list of
//! plugins (its [`Watch`]): before that nobody knows whose conditions are
//! orphans, so nothing is removed.

use super::backend::NodeStatus;
use super::book::{Book, Plan, Report};
use crate::capabilities::watch::TriggerSink;
use crate::capabilities::watch::Watch;
use crate::exposition::{Exposition, Kind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tend_rules::conditions::ConditionsGrant;
use tokio::sync::Notify;

/// The longest wait before a failed write is tried again.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

pub struct ConditionsHost {
    pub node: Arc<dyn NodeStatus>,
    pub book: Mutex<Book>,
    /// None: in memory only (fakes).
    file: Option<PathBuf>,
    pub heartbeat: Duration,
    wake: Notify,
    /// The book changed since it was last saved.
    dirty: std::sync::atomic::AtomicBool,
    saving: tokio::sync::Mutex<()>,
    writes: AtomicU64,
    failures: AtomicU64,
}

/// Seconds since the epoch.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl ConditionsHost {
    /// The host over `node`, with the book saved in `file` (read back if it
    /// is there; an unreadable one is said and started again).
    pub fn new(node: Arc<dyn NodeStatus>, file: Option<PathBuf>, heartbeat: Duration) -> Self {
        let book = file.as_deref().map(load).unwrap_or_default();
        ConditionsHost {
            node,
            book: Mutex::new(book),
            file,
            heartbeat,
            wake: Notify::new(),
            dirty: std::sync::atomic::AtomicBool::new(false),
            saving: tokio::sync::Mutex::new(()),
            writes: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        }
    }

    /// Take a report the gate admitted (or a renewal) and wake the writer,
    /// which saves the book before it writes the Node: the Node never shows
    /// what the saved book does not know, and 256 reports of one reconcile
    /// are one save, not 256.
    pub fn take(&self, report: Report<'_>, now: u64) {
        self.book.lock().unwrap().report(report, now);
        self.dirty.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// Hold `condition` for `owner` as an earlier run left it (a fixture).
    #[cfg(test)]
    pub fn hold(&self, owner: &str, condition: &str, active: bool, reason: &str, message: &str) {
        let granted = tend_rules::conditions::Granted {
            condition: condition.to_string(),
            taint_on: None,
        };
        let report = Report {
            owner,
            granted: &granted,
            active,
            reason: reason.to_string(),
            message: message.to_string(),
            ttl: None,
        };
        self.book.lock().unwrap().report(report, now());
    }

    /// Write the book as it is now. Saves take turns, each snapshotting the
    /// book when its turn comes, so an older snapshot never lands last.
    async fn save(self: &Arc<Self>) {
        let Some(file) = self.file.clone() else {
            return;
        };
        let _turn = self.saving.lock().await;
        let bytes = serde_json::to_vec(&*self.book.lock().unwrap()).expect("the book serializes");
        let saved =
            tokio::task::spawn_blocking(move || crate::atomic::write(&file, 0o600, &bytes)).await;
        if let Ok(Err(e)) | Err(e) = saved.map_err(std::io::Error::other) {
            tracing::error!("cannot save the conditions book: {e}");
        }
    }

    /// Carry the book to the Node, for ever.
    /// `check_taints`: put the Node's `tend.dev/` taints right once first
    /// (the Node may have changed while Tend was down).
    async fn run(self: Arc<Self>, mut check_taints: bool) {
        let mut backoff = Duration::from_secs(1);
        loop {
            let now = now();
            let plan = {
                let mut book = self.book.lock().unwrap();
                book.expire(now);
                book.plan(now, self.heartbeat, check_taints)
            };
            if self.dirty.swap(false, Ordering::AcqRel) {
                self.save().await;
            }
            match self.perform(&plan, now).await {
                Ok(()) => {
                    check_taints &= plan.taints.is_none();
                    backoff = Duration::from_secs(1);
                    let wait = plan
                        .next
                        .map(|at| Duration::from_secs(at.saturating_sub(now)));
                    match wait {
                        Some(wait) => {
                            let _ = tokio::time::timeout(wait, self.wake.notified()).await;
                        }
                        None => self.wake.notified().await,
                    }
                }
                Err(e) => {
                    self.failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(retry_in = ?backoff, "cannot write the Node's conditions: {e}");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    async fn perform(
        self: &Arc<Self>,
        plan: &Plan,
        now: u64,
    ) -> Result<(), crate::capabilities::CapError> {
        if let Some(patch) = &plan.patch {
            self.node.patch_status(patch.clone()).await?;
            self.writes.fetch_add(1, Ordering::Relaxed);
            self.book.lock().unwrap().written(plan, now);
            self.save().await;
        }
        if let Some(taints) = &plan.taints {
            // Saved ahead: a stop between the write and its record (a kill,
            // a reload dropping the writer) must not leave a taint on the
            // Node that the book does not know of.
            let ahead = !std::mem::replace(&mut self.book.lock().unwrap().taints_unsure, true);
            if ahead {
                self.save().await;
            }
            self.node.set_taints(taints).await?;
            {
                let mut book = self.book.lock().unwrap();
                book.taints = taints.clone();
                book.taints_unsure = false;
            }
            self.save().await;
        }
        Ok(())
    }

    /// `/metrics`: writes of the Node's conditions, failed ones, and the
    /// conditions held, by owner, type and status.
    pub fn render(&self, configured: &dyn Fn(&str) -> bool) -> String {
        let families = Exposition::default();
        families.scalar(
            Kind::Counter,
            "tend_conditions_writes_total",
            "Writes of the Node's conditions (status patches).",
            self.writes.load(Ordering::Relaxed) as f64,
        );
        families.scalar(
            Kind::Counter,
            "tend_conditions_write_failures_total",
            "Writes of the Node's conditions or taints that failed (retried).",
            self.failures.load(Ordering::Relaxed) as f64,
        );
        let book = self.book.lock().unwrap();
        let rows: Vec<(Vec<&str>, f64)> = book
            .conditions
            .iter()
            .filter(|(_, held)| !held.orphaned && configured(&held.owner))
            .map(|(condition, held)| {
                let status = if held.now.active { "True" } else { "False" };
                (vec![held.owner.as_str(), condition.as_str(), status], 1.0)
            })
            .collect();
        families.family(
            Kind::Gauge,
            "tend_conditions",
            "The Node's conditions Tend holds, by owner plugin, type and status.",
            &["plugin", "condition", "status"],
            rows,
        );
        families.text()
    }
}

/// The book read back: bounded, and only what a report could have made
/// (the file is trusted to say what Tend wrote, never to aim a write or a
/// removal at a condition no plugin may report).
fn load(file: &std::path::Path) -> Book {
    let read = crate::untrusted::read(file, crate::untrusted::MAX_TEXT_BYTES)
        .map_err(|e| e.to_string())
        .and_then(|bytes| serde_json::from_slice::<Book>(&bytes).map_err(|e| e.to_string()));
    let mut book = match read {
        Ok(book) => book,
        Err(_) if !file.exists() => return Book::default(),
        Err(e) => {
            tracing::error!(file = %file.display(), "unreadable conditions book, starting empty (Tend's taints are still put right): {e}");
            return Book::default();
        }
    };
    let dropped = book.drop_foreign();
    if !dropped.is_empty() {
        tracing::error!(file = %file.display(), ?dropped, "the conditions book held types no plugin may report: dropped, never written nor removed");
    }
    book
}

/// The writer, started by the scheduler's first list of plugins; each list
/// orphans the conditions of owners no longer there.
pub struct ConditionsWatch {
    host: Arc<ConditionsHost>,
    writer: Option<tokio::task::JoinHandle<()>>,
}

impl ConditionsWatch {
    pub fn new(host: Arc<ConditionsHost>) -> Self {
        ConditionsWatch { host, writer: None }
    }
}

impl Drop for ConditionsWatch {
    fn drop(&mut self) {
        if let Some(writer) = self.writer.take() {
            writer.abort();
        }
    }
}

impl Watch<ConditionsGrant> for ConditionsWatch {
    fn update(&mut self, watchers: Vec<(String, ConditionsGrant)>, _: Arc<dyn TriggerSink>) {
        let changed = self.host.book.lock().unwrap().retain(|owner, condition| {
            let (_, grant) = watchers.iter().find(|(plugin, _)| plugin == owner)?;
            grant.get(condition).map(|g| g.taint_on.map(|t| t.effect))
        });
        if changed {
            self.host.dirty.store(true, Ordering::Release);
        }
        if self.writer.is_none() {
            // Only a host with taints to keep right asks for the Node at
            // start: one without conditions makes no API request at all.
            let tainting = {
                let book = self.host.book.lock().unwrap();
                !book.taints.is_empty() || book.taints_unsure
            } || watchers
                .iter()
                .any(|(_, grant)| grant.0.iter().any(|g| g.taint_on.is_some()));
            self.writer = Some(tokio::spawn(self.host.clone().run(tainting)));
        }
        self.host.wake.notify_one();
    }

    fn waits_on(&self, _: &ConditionsGrant) -> Vec<String> {
        vec![]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::conditions::fake::FakeNode;
    use tend_rules::conditions::{Granted, TaintEffect, TaintOn};

    struct NoSink;
    impl TriggerSink for NoSink {
        fn reconcile(&self, _: &str, _: &'static str, _: String) {}
    }

    async fn until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn grant() -> ConditionsGrant {
        ConditionsGrant(vec![Granted {
            condition: "KernelDeadlock".into(),
            taint_on: Some(TaintOn {
                effect: TaintEffect::NoSchedule,
            }),
        }])
    }

    /// Plugin "pd" reports KernelDeadlock.
    async fn report_hung(host: &Arc<ConditionsHost>) {
        let granted = grant().0.remove(0);
        let report = Report {
            owner: "pd",
            granted: &granted,
            active: true,
            reason: "TaskHung".into(),
            message: "blocked".into(),
            ttl: None,
        };
        host.take(report, now());
    }

    #[tokio::test]
    async fn a_report_reaches_the_node_survives_a_restart_and_goes_with_its_owner() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("conditions.json");
        let node = Arc::new(FakeNode::default());
        let host = Arc::new(ConditionsHost::new(
            node.clone(),
            Some(file.clone()),
            Duration::from_secs(300),
        ));
        let mut watch = ConditionsWatch::new(host.clone());
        watch.update(vec![("pd".into(), grant())], Arc::new(NoSink));
        report_hung(&host).await;
        until("the condition and its taint", || {
            node.conditions().len() == 1 && node.taints().len() == 1
        })
        .await;
        assert_eq!(node.conditions()[0]["status"], "True");
        drop(watch);

        // A restart: the book is read back, nothing is written before the
        // plugins are known, and an owner gone takes its condition and taint.
        let again = Arc::new(ConditionsHost::new(
            node.clone(),
            Some(file),
            Duration::from_secs(300),
        ));
        assert_eq!(again.book.lock().unwrap().conditions.len(), 1);
        let writes = node.writes();
        let mut watch = ConditionsWatch::new(again.clone());
        watch.update(vec![], Arc::new(NoSink));
        until("the orphan removed", || {
            node.conditions().is_empty() && node.taints().is_empty()
        })
        .await;
        assert!(node.writes() > writes);
        until("the book saved empty", || {
            again.book.lock().unwrap().conditions.is_empty()
        })
        .await;
    }

    #[tokio::test]
    async fn a_taint_written_but_not_recorded_before_a_stop_is_removed_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("conditions.json");
        let node = Arc::new(FakeNode::default());
        let mut stray = std::collections::BTreeMap::new();
        stray.insert("KernelDeadlock".to_string(), TaintEffect::NoSchedule);
        node.set_taints(&stray).await.unwrap();
        assert_eq!(node.taints().len(), 1);
        // What the book says when tend stopped between a taint's write and
        // its record: no taints known, a write under way.
        let book = Book {
            taints_unsure: true,
            ..Book::default()
        };
        std::fs::write(&file, serde_json::to_vec(&book).unwrap()).unwrap();
        let host = Arc::new(ConditionsHost::new(
            node.clone(),
            Some(file),
            Duration::from_secs(300),
        ));
        let mut watch = ConditionsWatch::new(host.clone());
        watch.update(vec![], Arc::new(NoSink));
        until("the stray taint removed", || node.taints().is_empty()).await;
        until("the book sure again", || {
            !host.book.lock().unwrap().taints_unsure
        })
        .await;
    }

    #[tokio::test]
    async fn a_failed_write_is_retried_not_dropped() {
        let node = Arc::new(FakeNode::default());
        node.failing.store(true, Ordering::Relaxed);
        let host = Arc::new(ConditionsHost::new(
            node.clone(),
            None,
            Duration::from_secs(300),
        ));
        let mut watch = ConditionsWatch::new(host.clone());
        watch.update(vec![("pd".into(), grant())], Arc::new(NoSink));
        report_hung(&host).await;
        until("a failure counted", || {
            host.failures.load(Ordering::Relaxed) > 0
        })
        .await;
        node.failing.store(false, Ordering::Relaxed);
        until("the retry written", || node.conditions().len() == 1).await;
        let metrics = host.render(&|_| true);
        assert!(
            metrics.contains(
                "tend_conditions{condition=\"KernelDeadlock\",plugin=\"pd\",status=\"True\"} 1"
            ),
            "{metrics}"
        );
    }
}
