//! Leader election for cluster-scope plugins, on a coordination.k8s.io Lease,
//! the way client-go does it: the holder renews every `retry-period`; another
//! host takes the Lease once it has seen the same record unchanged for
//! `lease-duration` (its own clock, so clock skew does not matter); a holder
//! that has not renewed for `renew-deadline` (< lease-duration) stops leading
//! at once, so its cluster plugins stop before anyone else may start them.
//!
//! It trusts only what it wrote itself: a record naming this host that this
//! process did not write (another writer forged or changed it) makes it stop
//! leading at once and wait for that record to lapse like anyone else's, so
//! no writer but the elector itself can make a host lead, or two hosts lead.
//!
//! The leader also shares the host's budget ledgers in the Lease's
//! [`BUDGETS_ANNOTATION`], written with every renewal and at once after a
//! spend; a host taking the Lease over merges them into its own before it
//! leads, so a fail-over does not refill a budget. The merge is a union of
//! spends: a forged annotation can only make budgets stricter (for at most
//! one period), and, being part of the record, it makes the holder that did
//! not write it stop leading like any other rewrite.
//!
//! It runs as a trigger source: on becoming the leader it reconciles every
//! cluster-scope plugin (trigger "leader"); the runner asks [`Leadership`]
//! before each reconcile of one and cuts a reconcile in flight when
//! leadership is lost.

use crate::capabilities::CapError;
use crate::capabilities::gate::Budgets;
use crate::capabilities::kube::{connect, map_error, user_agent};
use crate::config::{Config, LeaderElection, Scope};
use crate::scheduler::sources::TriggerSource;
use crate::scheduler::{Trigger, Triggers, trigger};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use std::sync::Arc;
use tokio::sync::watch;
use tokio::time::{Duration, Instant};

/// The Lease annotation holding the leader's budget ledgers ([`Budgets::shared`]).
pub const BUDGETS_ANNOTATION: &str = "tend.dev/budgets";

/// Who leads, as `/status` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Leadership {
    /// This host holds the Lease and renewed it within the renew deadline.
    pub leading: bool,
    /// This host's identity in the Lease.
    pub identity: String,
    /// "<namespace>/<name>".
    pub lease: String,
    /// The holder as last seen.
    pub holder: Option<String>,
    /// Why this host is not leading, or stopped leading.
    pub note: String,
}

/// The parts of a Lease the election reads and writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRecord {
    pub holder: String,
    pub duration: Duration,
    /// The holder's last renewal as written (compared, never trusted as time).
    pub renewed: String,
    /// When the holder acquired the Lease: set when it changes hands (or is
    /// created), kept on renewal (client-go's rule).
    pub acquired: String,
    pub transitions: i32,
    /// The budget ledgers in [`BUDGETS_ANNOTATION`] ("" when none).
    pub budgets: String,
    pub resource_version: String,
}

#[async_trait::async_trait]
pub trait LeaseStore: Send + Sync + 'static {
    async fn get(&self) -> Result<Option<LeaseRecord>, CapError>;
    /// Create the Lease; the resourceVersion the server gave it.
    async fn create(&self, record: &LeaseRecord) -> Result<String, CapError>;
    /// Replace the Lease if it is still at `record.resource_version` (else
    /// `conflict`); the resourceVersion the server gave the new record.
    async fn replace(&self, record: &LeaseRecord) -> Result<String, CapError>;
}

/// What the election does next, from what it saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Create,
    Renew,
    /// The holder let it lapse (or none holds it): take it.
    Take,
    /// Someone else holds it.
    Follow(String),
}

/// The pure rule: `seen` is the record and when this host first saw it
/// unchanged; `ours`: this elector wrote that very record. Only a record it
/// wrote is renewed: one that names it but was written by someone else is
/// followed until it lapses, like anyone else's.
pub fn decide(seen: Option<&(LeaseRecord, Instant)>, ours: bool, now: Instant) -> Step {
    match seen {
        None => Step::Create,
        Some(_) if ours => Step::Renew,
        Some((record, _)) if record.holder.is_empty() => Step::Take,
        Some((record, since)) if now.duration_since(*since) >= record.duration => Step::Take,
        Some((record, _)) => Step::Follow(record.holder.clone()),
    }
}

pub struct Elector {
    me: String,
    settings: LeaderElection,
    store: Arc<dyn LeaseStore>,
    /// The host's budgets, shared through the Lease.
    budgets: Arc<Budgets>,
    /// The resourceVersion of the last record whose budgets were merged: a
    /// take retried on the same record merges it once.
    merged: Option<String>,
    seen: Option<(LeaseRecord, Instant)>,
    /// The last record this elector wrote, with the resourceVersion the server gave it.
    written: Option<LeaseRecord>,
    /// A write whose outcome is unknown (it failed or timed out: it may have
    /// landed); recognised by its contents, whatever its resourceVersion.
    attempted: Option<LeaseRecord>,
    renewed_at: Option<Instant>,
    /// The time written as renewTime and acquireTime.
    clock: Box<dyn Fn() -> Timestamp + Send + Sync>,
    pub state: Leadership,
}

/// `at` as a Lease's MicroTime holds it (microseconds), so that what this
/// host wrote compares equal to what it reads back.
fn micro(at: Timestamp) -> String {
    Timestamp::from_microsecond(at.as_microsecond())
        .expect("a microsecond of a timestamp is a timestamp")
        .to_string()
}

impl Elector {
    pub fn new(
        me: String,
        settings: LeaderElection,
        store: Arc<dyn LeaseStore>,
        budgets: Arc<Budgets>,
    ) -> Self {
        let state = Leadership {
            identity: me.clone(),
            lease: format!("{}/{}", settings.namespace, settings.name),
            note: "not elected yet".into(),
            ..Leadership::default()
        };
        Elector {
            me,
            settings,
            store,
            budgets,
            merged: None,
            seen: None,
            written: None,
            attempted: None,
            renewed_at: None,
            clock: Box::new(Timestamp::now),
            state,
        }
    }

    /// This elector wrote `record`: its last write as the server stored it,
    /// or a write whose answer it never got.
    fn wrote(&self, record: &LeaseRecord) -> bool {
        self.written.as_ref() == Some(record)
            || self.attempted.as_ref().is_some_and(|a| {
                LeaseRecord {
                    resource_version: record.resource_version.clone(),
                    ..a.clone()
                } == *record
            })
    }

    /// Give up leading once the last renewal is `renew-deadline` old.
    fn check_deadline(&mut self, now: Instant) {
        if self.state.leading
            && self
                .renewed_at
                .is_some_and(|at| now.duration_since(at) >= self.settings.renew_deadline)
        {
            self.state.leading = false;
            self.state.note = format!(
                "stopped leading: could not renew the Lease for {:?} (renew-deadline)",
                self.settings.renew_deadline
            );
            tracing::warn!(lease = %self.state.lease, "{}", self.state.note);
        }
    }

    /// One round: read the Lease, then create, renew, take or follow. Every
    /// call is bounded by the retry period, so a silent API server cannot
    /// hold the round past the renew deadline.
    pub async fn round(&mut self) {
        let bound = self.settings.retry_period;
        let read = tokio::time::timeout(bound, self.store.get()).await;
        let now = Instant::now();
        let record = match read {
            Ok(Ok(record)) => record,
            Ok(Err(e)) => return self.failed(now, &e.to_string()),
            Err(_) => return self.failed(now, "the API server did not answer"),
        };
        let ours = record.as_ref().is_some_and(|r| self.wrote(r));
        if ours {
            self.written = record.clone();
            self.attempted = None;
        }
        let stopped = self.state.leading && !ours;
        if stopped {
            // client-go stops on a changed record too; here at once, before
            // anyone the record names may start.
            self.state.leading = false;
            self.state.note = match &record {
                Some(r) => format!(
                    "stopped leading: the Lease was rewritten by someone else (holder {:?})",
                    r.holder
                ),
                None => "stopped leading: the Lease was deleted".into(),
            };
            tracing::warn!(lease = %self.state.lease, "{}", self.state.note);
        }
        self.seen = match (record, self.seen.take()) {
            (None, _) => None,
            (Some(record), Some((old, since))) if old == record => Some((old, since)),
            (Some(record), _) => Some((record, now)),
        };
        self.state.holder = self
            .seen
            .as_ref()
            .map(|(r, _)| r.holder.clone())
            .filter(|h| !h.is_empty());
        let step = decide(self.seen.as_ref(), ours, now);
        let at = micro((self.clock)());
        let mut record = LeaseRecord {
            holder: self.me.clone(),
            duration: self.settings.lease_duration,
            renewed: at.clone(),
            acquired: at,
            transitions: 0,
            budgets: String::new(),
            resource_version: String::new(),
        };
        match (&step, &self.seen) {
            (Step::Follow(holder), _) => {
                if !stopped {
                    self.state.note = match *holder == self.me {
                        true => "not leading: the Lease names this host but was not written \
                                 by it; waiting for it to lapse"
                            .into(),
                        false => format!("following {holder}"),
                    };
                }
                return self.check_deadline(now);
            }
            (Step::Renew, Some((old, _))) => {
                record.acquired = old.acquired.clone();
                record.transitions = old.transitions;
                record.resource_version = old.resource_version.clone();
            }
            (Step::Take, Some((old, _))) => {
                record.transitions = old.transitions + 1;
                record.resource_version = old.resource_version.clone();
                // Before the first write, so the record carries both ledgers,
                // and before leading, so no reconcile spends from a refilled budget.
                if !old.budgets.is_empty() && self.merged.as_ref() != Some(&old.resource_version) {
                    self.merged = Some(old.resource_version.clone());
                    if let Err(e) = self.budgets.merge_shared(&old.budgets).await {
                        tracing::warn!(lease = %self.state.lease, "cannot merge the budgets of the Lease's {BUDGETS_ANNOTATION}: {e}");
                    }
                }
            }
            _ => {}
        }
        let carried = self.budgets.spends_made();
        record.budgets = self.budgets.shared().await;
        self.attempted = Some(record.clone());
        let write = match step {
            Step::Create => tokio::time::timeout(bound, self.store.create(&record)).await,
            _ => tokio::time::timeout(bound, self.store.replace(&record)).await,
        };
        match write {
            Ok(Ok(resource_version)) => {
                self.budgets.sharing(true, true, Some(carried));
                self.written = Some(LeaseRecord {
                    resource_version,
                    ..record
                });
                self.attempted = None;
                if !self.state.leading {
                    tracing::info!(lease = %self.state.lease, identity = %self.me, "leading: cluster-scope plugins run here");
                }
                self.state.leading = true;
                self.state.holder = Some(self.me.clone());
                self.state.note = "leading".into();
                self.renewed_at = Some(now);
            }
            Ok(Err(e)) => self.failed(now, &e.to_string()),
            Err(_) => self.failed(now, "the API server did not answer"),
        }
    }

    fn failed(&mut self, now: Instant, why: &str) {
        // Keep saying why leading stopped while the API stays unreachable.
        if !self.state.leading && !self.state.note.starts_with("stopped leading") {
            self.state.note = format!("not leading: {why}");
        }
        self.check_deadline(now);
    }
}

/// The Lease through the Kubernetes API.
pub struct KubeLeases {
    settings: LeaderElection,
    identity: String,
    kubeconfig: Option<std::path::PathBuf>,
    client: tokio::sync::OnceCell<kube::Client>,
}

impl KubeLeases {
    pub fn new(
        settings: LeaderElection,
        identity: String,
        kubeconfig: Option<std::path::PathBuf>,
    ) -> Self {
        KubeLeases {
            settings,
            identity,
            kubeconfig,
            client: tokio::sync::OnceCell::new(),
        }
    }

    async fn api(&self) -> Result<Api<Lease>, CapError> {
        let agent = user_agent(&self.identity);
        let client = self
            .client
            .get_or_try_init(|| connect(self.kubeconfig.as_deref(), &agent, true))
            .await?;
        Ok(Api::namespaced(client.clone(), &self.settings.namespace))
    }

    fn lease(&self, record: &LeaseRecord) -> Result<Lease, CapError> {
        let time = |text: &str, what: &str| {
            text.parse::<Timestamp>()
                .map(MicroTime)
                .map_err(|e| CapError::Other(format!("{what}: {e}")))
        };
        Ok(Lease {
            metadata: ObjectMeta {
                name: Some(self.settings.name.clone()),
                namespace: Some(self.settings.namespace.clone()),
                resource_version: Some(record.resource_version.clone()).filter(|v| !v.is_empty()),
                annotations: (!record.budgets.is_empty())
                    .then(|| [(BUDGETS_ANNOTATION.to_string(), record.budgets.clone())].into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(record.holder.clone()),
                lease_duration_seconds: Some(record.duration.as_secs() as i32),
                renew_time: Some(time(&record.renewed, "renew time")?),
                acquire_time: Some(time(&record.acquired, "acquire time")?),
                lease_transitions: Some(record.transitions),
                ..LeaseSpec::default()
            }),
        })
    }
}

#[async_trait::async_trait]
impl LeaseStore for KubeLeases {
    async fn get(&self) -> Result<Option<LeaseRecord>, CapError> {
        let lease = self
            .api()
            .await?
            .get_opt(&self.settings.name)
            .await
            .map_err(|e| map_error("get lease", e))?;
        Ok(lease.map(|mut lease| {
            let spec = lease.spec.unwrap_or_default();
            let budgets = lease
                .metadata
                .annotations
                .as_mut()
                .and_then(|a| a.remove(BUDGETS_ANNOTATION))
                .unwrap_or_default();
            LeaseRecord {
                holder: spec.holder_identity.unwrap_or_default(),
                duration: Duration::from_secs(
                    spec.lease_duration_seconds.unwrap_or(0).max(0) as u64
                ),
                renewed: spec.renew_time.map(|t| t.0.to_string()).unwrap_or_default(),
                acquired: spec
                    .acquire_time
                    .map(|t| t.0.to_string())
                    .unwrap_or_default(),
                transitions: spec.lease_transitions.unwrap_or(0),
                budgets,
                resource_version: lease.metadata.resource_version.unwrap_or_default(),
            }
        }))
    }

    async fn create(&self, record: &LeaseRecord) -> Result<String, CapError> {
        let lease = self.lease(record)?;
        self.api()
            .await?
            .create(&PostParams::default(), &lease)
            .await
            .map(|l| l.metadata.resource_version.unwrap_or_default())
            .map_err(|e| map_error("create lease", e))
    }

    async fn replace(&self, record: &LeaseRecord) -> Result<String, CapError> {
        let lease = self.lease(record)?;
        self.api()
            .await?
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
            .map(|l| l.metadata.resource_version.unwrap_or_default())
            .map_err(|e| map_error("replace lease", e))
    }
}

/// The election as a trigger source: it runs while the config has
/// `[host.leader-election]`, publishes [`Leadership`], and reconciles the
/// cluster-scope plugins when this host starts leading.
pub struct LeaderSource {
    identity: String,
    kubeconfig: Option<std::path::PathBuf>,
    state: watch::Sender<Leadership>,
    running: Option<(LeaderElection, tokio::task::JoinHandle<()>)>,
    cluster_plugins: watch::Sender<Vec<String>>,
    budgets: Arc<Budgets>,
}

impl LeaderSource {
    pub fn new(
        identity: String,
        kubeconfig: Option<std::path::PathBuf>,
        state: watch::Sender<Leadership>,
        budgets: Arc<Budgets>,
    ) -> Self {
        LeaderSource {
            identity,
            kubeconfig,
            state,
            running: None,
            cluster_plugins: watch::channel(Vec::new()).0,
            budgets,
        }
    }
}

impl Drop for LeaderSource {
    fn drop(&mut self) {
        if let Some((_, task)) = self.running.take() {
            task.abort();
        }
    }
}

fn cluster_plugins(config: &Config) -> Vec<String> {
    config
        .enabled_plugins()
        .filter(|p| p.scope == Scope::Cluster)
        .map(|p| p.name.clone())
        .collect()
}

impl TriggerSource for LeaderSource {
    fn update(&mut self, config: &Config, triggers: &Triggers) {
        self.cluster_plugins.send_replace(cluster_plugins(config));
        let wanted = config.host.leader_election.clone();
        if self.running.as_ref().map(|(s, _)| s) == wanted.as_ref() {
            return;
        }
        if let Some((_, task)) = self.running.take() {
            task.abort();
            self.budgets.sharing(false, false, None);
            self.state.send_replace(Leadership::default());
        }
        let Some(settings) = wanted else { return };
        let store = Arc::new(KubeLeases::new(
            settings.clone(),
            self.identity.clone(),
            self.kubeconfig.clone(),
        ));
        let budgets = self.budgets.clone();
        let mut elector = Elector::new(
            self.identity.clone(),
            settings.clone(),
            store,
            budgets.clone(),
        );
        let (state, triggers, plugins) = (
            self.state.clone(),
            triggers.clone(),
            self.cluster_plugins.subscribe(),
        );
        let period = settings.retry_period;
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                // A spend while leading is shared at once, not at the next renewal.
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = budgets.spent(), if elector.state.leading => {}
                }
                let was_leading = elector.state.leading;
                elector.round().await;
                budgets.sharing(true, elector.state.leading, None);
                state.send_replace(elector.state.clone());
                if elector.state.leading && !was_leading {
                    for plugin in plugins.borrow().iter() {
                        triggers.send(plugin, Trigger::new(trigger::LEADER));
                    }
                }
            }
        });
        self.running = Some((settings, task));
    }

    fn waits_on(&self, config: &Config, plugin: &str) -> Vec<String> {
        match (&config.host.leader_election, config.plugins.get(plugin)) {
            (Some(e), Some(p)) if p.scope == Scope::Cluster => {
                vec![format!(
                    "holding the Lease {}/{} (cluster scope)",
                    e.namespace, e.name
                )]
            }
            _ => vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::gate::{BudgetRule, target_hash};
    use crate::capabilities::testing::budgets_in_memory;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// One Lease shared by several electors; each elector's view can go silent.
    #[derive(Default)]
    struct Shared {
        lease: Mutex<Option<LeaseRecord>>,
        version: Mutex<u64>,
    }

    struct View {
        shared: Arc<Shared>,
        silent: AtomicBool,
    }

    impl View {
        async fn answer(&self) {
            if self.silent.load(Ordering::Relaxed) {
                std::future::pending::<()>().await;
            }
        }
    }

    #[async_trait::async_trait]
    impl LeaseStore for View {
        async fn get(&self) -> Result<Option<LeaseRecord>, CapError> {
            self.answer().await;
            Ok(self.shared.lease.lock().unwrap().clone())
        }
        async fn create(&self, record: &LeaseRecord) -> Result<String, CapError> {
            self.answer().await;
            if self.shared.lease.lock().unwrap().is_some() {
                return Err(CapError::Conflict("exists".into()));
            }
            Ok(self.shared.store(record))
        }
        async fn replace(&self, record: &LeaseRecord) -> Result<String, CapError> {
            self.answer().await;
            let current = self.shared.lease.lock().unwrap().clone();
            if current.map(|l| l.resource_version) != Some(record.resource_version.clone()) {
                return Err(CapError::Conflict("the object has been modified".into()));
            }
            Ok(self.shared.store(record))
        }
    }

    impl Shared {
        /// Store `record` at the next resourceVersion (returned), as any writer
        /// of the Lease does.
        fn store(&self, record: &LeaseRecord) -> String {
            let mut version = self.version.lock().unwrap();
            *version += 1;
            *self.lease.lock().unwrap() = Some(LeaseRecord {
                resource_version: version.to_string(),
                ..record.clone()
            });
            version.to_string()
        }

        fn lease(&self) -> LeaseRecord {
            self.lease.lock().unwrap().clone().expect("a Lease")
        }
    }

    fn settings() -> LeaderElection {
        LeaderElection {
            namespace: "tend-system".into(),
            name: "tend".into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// An elector on `shared` whose clock is tokio's (paused) clock, so that
    /// the times it writes differ as the test's time passes.
    fn elector(name: &str, shared: &Arc<Shared>) -> (Elector, Arc<View>) {
        elector_with(name, shared, vec![])
    }

    /// The same, its host with the budgets `rules`.
    fn elector_with(
        name: &str,
        shared: &Arc<Shared>,
        rules: Vec<BudgetRule>,
    ) -> (Elector, Arc<View>) {
        let view = Arc::new(View {
            shared: shared.clone(),
            silent: AtomicBool::new(false),
        });
        let budgets = budgets_in_memory(rules);
        let mut elector = Elector::new(name.into(), settings(), view.clone(), budgets);
        let start = Instant::now();
        elector.clock = Box::new(move || {
            Timestamp::UNIX_EPOCH
                .checked_add(start.elapsed())
                .expect("a time after 1970")
        });
        (elector, view)
    }

    async fn rounds(electors: &mut [&mut Elector], seconds: u64) -> Vec<(Duration, Vec<bool>)> {
        let start = Instant::now();
        let mut log = Vec::new();
        while start.elapsed() < Duration::from_secs(seconds) {
            for e in electors.iter_mut() {
                e.round().await;
            }
            log.push((
                start.elapsed(),
                electors.iter().map(|e| e.state.leading).collect(),
            ));
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        log
    }

    #[tokio::test(start_paused = true)]
    async fn one_leader_and_a_takeover_after_the_lease_lapses() {
        let shared = Arc::new(Shared::default());
        let (mut a, _) = elector("a", &shared);
        let (mut b, _) = elector("b", &shared);
        let log = rounds(&mut [&mut a, &mut b], 30).await;
        assert!(log.iter().all(|(_, l)| l == &[true, false]), "{log:?}");
        assert_eq!(b.state.note, "following a");
        // a dies (stops renewing): b takes over once it has seen a's last
        // renewal (at most one retry period before) unchanged for 15 s.
        let log = rounds(&mut [&mut b], 30).await;
        let took = log.iter().find(|(_, l)| l[0]).map(|(t, _)| *t).unwrap();
        assert!(
            took >= Duration::from_secs(13) && took <= Duration::from_secs(17),
            "took over {took:?} after a died"
        );
        assert_eq!(
            shared.lease.lock().unwrap().as_ref().unwrap().transitions,
            1
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_holder_that_cannot_renew_stops_before_anyone_else_may_start() {
        let shared = Arc::new(Shared::default());
        let (mut a, a_view) = elector("a", &shared);
        let (mut b, _) = elector("b", &shared);
        rounds(&mut [&mut a, &mut b], 6).await;
        assert!(a.state.leading);
        a_view.silent.store(true, Ordering::Relaxed);
        let cut = Instant::now();
        let mut a_stopped = None;
        let mut b_started = None;
        while b_started.is_none() {
            a.round().await;
            b.round().await;
            if !a.state.leading && a_stopped.is_none() {
                a_stopped = Some(cut.elapsed());
            }
            if b.state.leading {
                b_started = Some(cut.elapsed());
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let (stopped, started) = (a_stopped.unwrap(), b_started.unwrap());
        assert!(
            stopped <= Duration::from_secs(12),
            "a stopped after {stopped:?}"
        );
        assert!(
            stopped < started,
            "a stopped at {stopped:?}, b started at {started:?}"
        );
        assert!(a.state.note.contains("could not renew"), "{}", a.state.note);
    }

    /// Hole 2 of issue 15: a third writer (a plugin with a `leases` grant)
    /// hands the Lease to the follower. The holder stops at once, the record's
    /// namesake does not start, and the Lease goes to whoever takes it once
    /// the forged record has lapsed.
    #[tokio::test(start_paused = true)]
    async fn a_record_the_elector_did_not_write_never_makes_it_leader() {
        let shared = Arc::new(Shared::default());
        let (mut a, _) = elector("a", &shared);
        let (mut b, _) = elector("b", &shared);
        rounds(&mut [&mut a, &mut b], 6).await;
        assert!(a.state.leading && !b.state.leading);
        let forged = LeaseRecord {
            holder: "b".into(),
            ..shared.lease()
        };
        shared.store(&forged);
        // Each sees the forged record in its next round: a stops at once, b
        // does not start.
        a.round().await;
        b.round().await;
        assert!(!a.state.leading, "{:?}", a.state);
        assert!(
            a.state.note.contains("rewritten by someone else"),
            "{:?}",
            a.state
        );
        assert!(!b.state.leading, "{:?}", b.state);
        assert!(b.state.note.contains("not written by it"), "{:?}", b.state);
        let log = rounds(&mut [&mut a, &mut b], 30).await;
        assert!(log.iter().all(|(_, l)| l != &[true, true]), "{log:?}");
        // Nobody leads until the forged record has been seen unchanged for
        // lease-duration; then exactly one takes it (a rounds first).
        let first = log.iter().find(|(_, l)| l.contains(&true)).unwrap();
        assert!(
            first.0 >= Duration::from_secs(15) && first.0 <= Duration::from_secs(17),
            "someone led {:?} after the forgery: {log:?}",
            first.0
        );
        assert_eq!(first.1, [true, false], "{log:?}");
        assert!(log.last().unwrap().1 == [true, false], "{log:?}");
        let taken = shared.lease();
        assert_eq!((taken.holder.as_str(), taken.transitions), ("a", 1));

        // The holder's own record rewritten in place (same holder, a later
        // renewTime): it is not the holder's any more either.
        let rewritten = LeaseRecord {
            renewed: "2100-01-01T00:00:00Z".into(),
            ..shared.lease()
        };
        shared.store(&rewritten);
        a.round().await;
        assert!(!a.state.leading, "{:?}", a.state);
        assert!(
            a.state.note.contains("rewritten by someone else"),
            "{:?}",
            a.state
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        a.round().await;
        assert!(!a.state.leading, "{:?}", a.state);
        assert!(
            a.state.note.contains("waiting for it to lapse"),
            "{:?}",
            a.state
        );
    }

    /// acquireTime is when the Lease changed hands: kept on every renewal,
    /// set anew by the host that takes it.
    #[tokio::test(start_paused = true)]
    async fn acquire_time_changes_only_when_the_lease_changes_hands() {
        let shared = Arc::new(Shared::default());
        let (mut a, _) = elector("a", &shared);
        let (mut b, _) = elector("b", &shared);
        a.round().await;
        let created = shared.lease();
        assert_eq!(created.acquired, created.renewed);
        rounds(&mut [&mut a, &mut b], 10).await;
        let renewed = shared.lease();
        assert_eq!(renewed.holder, "a");
        assert_ne!(renewed.renewed, created.renewed);
        assert_eq!(
            renewed.acquired, created.acquired,
            "a renewal moved acquireTime"
        );
        // a dies; b takes the Lease: a new acquireTime, then kept again.
        rounds(&mut [&mut b], 20).await;
        let taken = shared.lease();
        assert_eq!((taken.holder.as_str(), taken.transitions), ("b", 1));
        let time = |text: &str| text.parse::<Timestamp>().unwrap();
        assert!(
            time(&taken.acquired) > time(&renewed.renewed),
            "{taken:?} after {renewed:?}"
        );
        assert_ne!(
            taken.acquired, taken.renewed,
            "b renewed since it took the Lease"
        );
        b.round().await;
        assert_eq!(shared.lease().acquired, taken.acquired);
    }

    /// The leader's spends are in the Lease as soon as it renews after them;
    /// the host taking the Lease over merges them before it leads, so its
    /// budget is as used up as the dead leader's, and it shares both.
    #[tokio::test(start_paused = true)]
    async fn a_takeover_keeps_the_budget_the_leader_spent() {
        let rules = vec![BudgetRule {
            name: "deletes".into(),
            operations: vec!["kube.delete".into()],
            max: 2,
            per: Duration::from_secs(3600),
            min_interval_per_target: Duration::ZERO,
        }];
        let shared = Arc::new(Shared::default());
        let (mut a, _) = elector_with("a", &shared, rules.clone());
        let (mut b, _) = elector_with("b", &shared, rules);
        rounds(&mut [&mut a, &mut b], 4).await;
        assert!(a.state.leading && !b.state.leading);
        b.budgets.spend("kube.delete", "follower's").await.unwrap();
        a.budgets.spend("kube.delete", "x").await.unwrap();
        a.round().await;
        let lease = shared.lease();
        let spend = |target| format!(r#""{}"]"#, target_hash(target));
        assert!(lease.budgets.contains(r#""deletes":[["#), "{lease:?}");
        assert!(lease.budgets.contains(&spend("x")), "{lease:?}");
        assert!(
            !lease.budgets.contains(&spend("follower's")),
            "only the leader writes"
        );
        // a dies; b takes over with a's spend merged before it leads.
        let log = rounds(&mut [&mut b], 20).await;
        assert!(log.last().unwrap().1 == [true], "{log:?}");
        let err = b.budgets.spend("kube.delete", "z").await.unwrap_err();
        assert_eq!(err.kind(), "budget-exhausted", "{err}");
        let lease = shared.lease();
        for spend in [spend("x"), spend("follower's")] {
            assert!(lease.budgets.contains(&spend), "{spend} in {lease:?}");
        }
    }

    /// A forged annotation is a rewrite like any other: the holder stops
    /// leading; and whoever takes the Lease merges it, which only adds spends.
    #[tokio::test(start_paused = true)]
    async fn a_forged_budget_annotation_makes_nobody_leader() {
        let shared = Arc::new(Shared::default());
        let (mut a, _) = elector("a", &shared);
        let (mut b, _) = elector("b", &shared);
        rounds(&mut [&mut a, &mut b], 4).await;
        assert!(a.state.leading);
        let forged = LeaseRecord {
            budgets: r#"{"deletes":[[0,"forged"]]}"#.into(),
            ..shared.lease()
        };
        shared.store(&forged);
        a.round().await;
        b.round().await;
        assert!(
            !a.state.leading && !b.state.leading,
            "{:?} {:?}",
            a.state,
            b.state
        );
        assert!(
            a.state.note.contains("rewritten by someone else"),
            "{:?}",
            a.state
        );
    }

    #[test]
    fn the_rule() {
        let now = Instant::now();
        let record = |holder: &str| LeaseRecord {
            holder: holder.into(),
            duration: Duration::from_secs(15),
            renewed: String::new(),
            acquired: String::new(),
            transitions: 0,
            budgets: String::new(),
            resource_version: "1".into(),
        };
        assert_eq!(decide(None, false, now), Step::Create);
        assert_eq!(decide(Some(&(record("a"), now)), true, now), Step::Renew);
        assert_eq!(decide(Some(&(record(""), now)), false, now), Step::Take);
        assert_eq!(
            decide(Some(&(record("b"), now)), false, now),
            Step::Follow("b".into())
        );
        // A record naming "a" that "a" did not write: followed, not renewed.
        assert_eq!(
            decide(Some(&(record("a"), now)), false, now),
            Step::Follow("a".into())
        );
        assert_eq!(
            decide(
                Some(&(record("b"), now)),
                false,
                now + Duration::from_secs(15)
            ),
            Step::Take
        );
    }
}
