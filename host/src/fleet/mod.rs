//! The fleet as one: disruption budgets shared by every node, coordinated
//! through the Kubernetes API alone (Leases with compare-and-swap, as leader
//! election does; no control plane, no database).
//!
//! A class (`[host.fleet.classes.<name>]`: `runtime-restart`, `reboot`, ...)
//! maps mutating operations to a ticket: the gate admits such a mutation
//! only while this node holds the class's ticket, after the host-wide
//! budget admitted it too. A ticket is granted by a compare-and-swap on the
//! class's ledger Lease ([`ledger`] says by which rules) and given back once
//! the node has settled (Ready for `ready-for`, none of the class's
//! conditions). Every tend renews its own node Lease; a holder whose Lease
//! stands still for the liveness window, by the reader's own monotonic clock
//! ([`observed`]), is pruned, and a holder that cannot renew stops acting
//! under its ticket after half that window, before anyone may prune it.
//! Maintenance windows ([`window`]) are read on the local clock.
//!
//! Everything fails closed: without the API server, no ticket.
//!
//! - [`ledger`]: the pure rules; [`observed`]: what this host saw, when.
//! - [`store`]: the backend trait and its fake; [`kube`]: the real one.
//! - [`settings`]: `[host.fleet]` and its validation.
//! - [`revision`]: what each node runs and what it did under it, published
//!   with its renewals.

pub mod adoption;
pub mod alerts;
pub mod cohort;
pub mod kube;
pub mod ledger;
pub mod observed;
pub mod revision;
pub mod rollout;
pub mod rollout_leader;
pub mod settings;
pub mod store;
pub mod verdict;
pub mod window;

use crate::capabilities::CapError;
use ledger::{Decision, Ledger, View, decide, forget, release, settled};
use observed::Observed;
use settings::{Class, FleetSettings};
use std::collections::BTreeMap;
use std::sync::Arc;
use store::{FleetStore, Versioned};
use tend_rules::reason::Reason;
use tokio::time::{Duration, Instant};

/// How many times one admission retries a compare-and-swap another node won.
const ATTEMPTS: u32 = 8;
/// The annotation holding a ledger, on the class's Lease.
pub const LEDGER_ANNOTATION: &str = "tend.dev/tickets";
/// Every Lease Tend keeps in the fleet's namespace starts with this.
pub const LEASE_PREFIX: &str = "tend-";

/// One answer of the API server is waited for at most this long (and at
/// most a quarter of the liveness window): the exchange holds the fleet's
/// lock, and a silent server must not hold every plugin's mutations (nor
/// the member's renewals) behind it.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// A class's mutations only inside its maintenance windows.
fn window_open(class: &Class) -> Result<(), CapError> {
    class
        .windows
        .open_at(std::time::SystemTime::now())
        .map_err(|closed| {
            CapError::BudgetExhausted(Reason::Window.tag(&format!(
                "fleet budget {}: {}",
                class.rule.name, closed.message
            )))
        })
}

/// `call`'s answer within `within`, or a timeout saying so.
pub(crate) async fn bounded<T>(
    within: Duration,
    call: impl Future<Output = Result<T, CapError>>,
) -> Result<T, CapError> {
    tokio::time::timeout(within, call)
        .await
        .unwrap_or_else(|_| {
            Err(CapError::Timeout(format!(
                "the API server did not answer within {}",
                humantime::format_duration(within)
            )))
        })
}

/// The Lease of a class's ledger.
pub fn ledger_lease(class: &str) -> String {
    format!("{LEASE_PREFIX}fleet-{class}")
}

pub struct Fleet {
    me: String,
    settings: FleetSettings,
    store: Arc<dyn FleetStore>,
    /// One exchange with the API server at a time on this host.
    state: tokio::sync::Mutex<State>,
    /// What `/status` shows, readable without waiting for an exchange.
    status: std::sync::Mutex<FleetStatus>,
    /// How long one API answer is waited for.
    call_timeout: Duration,
    /// What this node runs and did, published with its renewals (none for
    /// a one-shot run, which leaves the daemon's report as it is).
    running: Option<Arc<revision::Running>>,
    /// Wakes the member when a ticket is taken: its settle check starts
    /// then, not at the next renewal.
    granted: tokio::sync::Notify,
    /// The Prometheus a settle check asks about its alerts.
    alerts: Option<alerts::Alerts>,
}

#[derive(Default)]
struct State {
    observed: Observed,
    /// This node's tickets, by class.
    held: BTreeMap<String, Held>,
    /// A refusal answered again without asking the API server, until then.
    refused: BTreeMap<String, (Instant, CapError)>,
    /// The last renewal of this node's Lease that succeeded.
    renewed_at: Option<Instant>,
    /// The last report published with a renewal.
    published: Option<(Instant, revision::Report)>,
}

#[derive(Debug, Clone)]
struct Held {
    /// The last mutation admitted under it.
    last_act: Instant,
    /// Settled (Ready, none of the class's conditions) without a break since.
    settled_since: Option<Instant>,
}

/// The fleet as `/status` shows it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct FleetStatus {
    pub namespace: String,
    /// When this node's Lease was last renewed ("never" before the first).
    pub renewed: String,
    pub classes: Vec<ClassStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ClassStatus {
    pub name: String,
    pub operations: Vec<String>,
    pub holding: bool,
    /// The last decision about this node's ticket, or why it was refused.
    pub note: String,
}

fn unavailable(class: &str, e: &CapError) -> CapError {
    // The API server's message is a peer's text: bounded and inert.
    let why = crate::text::cut(crate::text::inert(&e.to_string()).into_owned(), 300);
    CapError::Unavailable(format!(
        "fleet budget {class}: cannot read the fleet's state from the API server ({why}); no ticket without it (fail closed)"
    ))
}

/// The fleet member of node `me`, talking to the API server of
/// `kubeconfig` (`[host.kube]`'s), publishing what `running` says (a
/// daemon's; none for a one-shot run).
pub fn member(
    me: &str,
    settings: FleetSettings,
    kubeconfig: Option<std::path::PathBuf>,
    running: Option<Arc<revision::Running>>,
) -> Arc<Fleet> {
    let store = kube::KubeFleet::new(&settings, me.to_string(), kubeconfig);
    let fleet = Fleet::new(me.to_string(), settings, Arc::new(store));
    Arc::new(match running {
        Some(running) => fleet.publishing(running),
        None => fleet,
    })
}

#[async_trait::async_trait]
impl crate::capabilities::gate::FleetBudget for Fleet {
    async fn admit(&self, operation: &str, dry_run: bool) -> Result<(), CapError> {
        Fleet::admit(self, operation, dry_run).await
    }

    async fn holds(&self, operation: &str) -> bool {
        match self.class_of(operation) {
            Some(class) => self.state.lock().await.held.contains_key(&class.rule.name),
            None => true,
        }
    }

    async fn give_back(&self, operation: &str, why: &str) {
        Fleet::give_back_now(self, operation, why).await
    }

    fn status(&self) -> serde_json::Value {
        serde_json::to_value(Fleet::status(self)).expect("the status serializes")
    }
}

impl Fleet {
    pub fn new(me: String, settings: FleetSettings, store: Arc<dyn FleetStore>) -> Fleet {
        let status = FleetStatus {
            namespace: settings.namespace.clone(),
            renewed: "never".into(),
            classes: settings
                .classes
                .iter()
                .map(|c| ClassStatus {
                    name: c.rule.name.clone(),
                    operations: c.rule.operations.clone(),
                    holding: false,
                    note: "no ticket asked for yet".into(),
                })
                .collect(),
        };
        let alerts = settings.prometheus.as_ref().map(alerts::Alerts::new);
        Fleet {
            me,
            call_timeout: CALL_TIMEOUT.min(settings.liveness / 4),
            settings,
            store,
            state: tokio::sync::Mutex::default(),
            status: std::sync::Mutex::new(status),
            running: None,
            granted: tokio::sync::Notify::new(),
            alerts,
        }
    }

    /// Publish what `running` says with the renewals (a one-shot run
    /// publishes nothing: it runs no revision for long).
    pub fn publishing(mut self, running: Arc<revision::Running>) -> Fleet {
        self.running = Some(running);
        self
    }

    pub fn status(&self) -> FleetStatus {
        self.status.lock().unwrap().clone()
    }

    fn note(&self, class: &str, holding: bool, note: String) {
        let mut status = self.status.lock().unwrap();
        if let Some(c) = status.classes.iter_mut().find(|c| c.name == class) {
            c.holding = holding;
            c.note = note;
        }
    }

    fn class_of(&self, operation: &str) -> Option<&Class> {
        self.settings
            .classes
            .iter()
            .find(|c| c.rule.covers(operation))
    }

    /// Admit `operation` (`capability.operation`) for this node: Ok at once
    /// when no class covers it; else only under this node's ticket of its
    /// class, taking one if the rules allow. `dry_run`: say whether it
    /// would be admitted, writing nothing.
    pub async fn admit(&self, operation: &str, dry_run: bool) -> Result<(), CapError> {
        let Some(class) = self.class_of(operation) else {
            return Ok(());
        };
        let result = self.admit_in(class, dry_run).await;
        let name = &class.rule.name;
        match (&result, dry_run) {
            (Err(e), _) => self.note(name, false, format!("refused: {}", e.message())),
            (Ok(()), false) => self.note(
                name,
                true,
                format!("holding the ticket ({operation} admitted)"),
            ),
            (Ok(()), true) => {}
        }
        result
    }

    async fn admit_in(&self, class: &Class, dry_run: bool) -> Result<(), CapError> {
        let name = &class.rule.name;
        window_open(class)?;
        let mut state = self.state.lock().await;
        let now = Instant::now();
        if let Some((until, refusal)) = state.refused.get(name)
            && now < *until
            && !dry_run
        {
            return Err(refusal.clone());
        }
        let quiet = match state.held.contains_key(name) {
            true => Ok(()),
            false => self.alerts_quiet(class).await,
        };
        let decided = match quiet {
            Ok(()) => self.exchange(&mut state, class, dry_run).await,
            Err(firing) => Err(firing),
        };
        // Checked again at the very end: the exchange may have taken a while.
        let decided = decided
            .and_then(|()| window_open(class))
            .and_then(|()| match dry_run {
                true => Ok(()),
                false => self.still_alive(&state),
            });
        if let Err(refusal) = &decided
            && !dry_run
        {
            let until = Instant::now() + self.settings.retry_every;
            state.refused.insert(name.clone(), (until, refusal.clone()));
        }
        decided
    }

    /// Read the ledger and take (or find) this node's ticket.
    async fn exchange(
        &self,
        state: &mut State,
        class: &Class,
        dry_run: bool,
    ) -> Result<(), CapError> {
        let name = &class.rule.name;
        if !dry_run {
            self.prove_alive(state, Instant::now()).await?;
        }
        let now = Instant::now();
        let mut read = bounded(self.call_timeout, self.store.ledger(name))
            .await
            .map_err(|e| unavailable(name, &e))?;
        if read.ledger.holders.iter().any(|h| h.node == self.me) {
            if !dry_run {
                let held = state.held.entry(name.clone()).or_insert(Held {
                    last_act: now,
                    settled_since: None,
                });
                held.last_act = now;
                held.settled_since = None;
            }
            return Ok(());
        }
        state.held.remove(name);
        let (nodes, leases, others) = tokio::try_join!(
            bounded(self.call_timeout, self.store.nodes()),
            bounded(self.call_timeout, self.store.node_leases()),
            self.others()
        )
        .map_err(|e| unavailable(name, &e))?;
        // Seen now, after the answers: never earlier than the versions were.
        let now = Instant::now();
        state.observed.leases(now, &leases);
        let ticket = format!("{:016x}", fastrand::u64(..));
        let mut view = View {
            nodes,
            others,
            ..View::default()
        };
        for _ in 0..ATTEMPTS {
            let stale = self.observe(state, class, &read.ledger, &mut view, now);
            match decide(&class.rule, &read.ledger, &view, &self.me, &ticket) {
                Decision::Held => {
                    // Ours already (a write of ours that seemed to fail landed).
                    if !dry_run {
                        state.held.entry(name.clone()).or_insert(Held {
                            last_act: now,
                            settled_since: None,
                        });
                    }
                    return Ok(());
                }
                Decision::Refuse(why) => return Err(CapError::BudgetExhausted(why)),
                Decision::Grant(_) if dry_run => return Ok(()),
                Decision::Grant(mut ledger) => {
                    forget(&mut ledger, &stale);
                    match bounded(
                        self.call_timeout,
                        self.store.write(name, &ledger, read.version.as_deref()),
                    )
                    .await
                    {
                        Ok(()) => {
                            tracing::info!(class = %name, node = %self.me, ticket = %ticket, "fleet ticket granted");
                            state.held.insert(
                                name.clone(),
                                Held {
                                    last_act: now,
                                    settled_since: None,
                                },
                            );
                            self.granted.notify_one();
                            return Ok(());
                        }
                        Err(CapError::Conflict(_)) => {
                            // Someone else wrote first: decide again on what they wrote.
                            tokio::time::sleep(Duration::from_millis(fastrand::u64(5..50))).await;
                            read = bounded(self.call_timeout, self.store.ledger(name))
                                .await
                                .map_err(|e| unavailable(name, &e))?;
                        }
                        Err(e) => {
                            // The write may have landed: the member gives the
                            // ticket back once settled, if it is ours.
                            state.held.insert(
                                name.clone(),
                                Held {
                                    last_act: now,
                                    settled_since: None,
                                },
                            );
                            self.granted.notify_one();
                            return Err(unavailable(name, &e));
                        }
                    }
                }
            }
        }
        Err(CapError::Conflict(format!(
            "fleet budget {name}: the ledger changed under {ATTEMPTS} attempts in a row (many nodes asking at once); the next reconcile asks again"
        )))
    }

    /// Fill in what the rules read of `ledger` as read (who is dead, how
    /// many grants count for the rate); returns the grants nobody needs any more.
    fn observe(
        &self,
        state: &mut State,
        class: &Class,
        ledger: &Ledger,
        view: &mut View,
        now: Instant,
    ) -> std::collections::BTreeSet<String> {
        view.dead = state.observed.dead(
            now,
            self.settings.liveness,
            ledger.holders.iter().map(|h| h.node.as_str()),
        );
        let (recent, stale) = match class.rule.rate {
            Some((_, per)) => state.observed.grants(now, per, &ledger.grants),
            // Without a rate no grant needs remembering.
            None => (0, ledger.grants.iter().cloned().collect()),
        };
        view.recent_grants = recent;
        stale
    }

    async fn others(&self) -> Result<BTreeMap<String, String>, CapError> {
        match self.settings.kured.is_some() || self.settings.medik8s {
            true => bounded(self.call_timeout, self.store.others()).await,
            false => Ok(BTreeMap::new()),
        }
    }

    /// A node acts under a ticket only while its Lease is fresh: renewed
    /// within half the liveness window, so it stops before anyone may
    /// prune it.
    async fn prove_alive(&self, state: &mut State, now: Instant) -> Result<(), CapError> {
        let fresh = state
            .renewed_at
            .is_some_and(|at| now.duration_since(at) < self.settings.liveness / 2);
        if fresh {
            return Ok(());
        }
        self.renew(state).await.map_err(|e| {
            CapError::Unavailable(format!(
                "fleet: cannot renew this node's Lease ({e}); a node acts under a fleet ticket only while it proves it is alive (fail closed)"
            ))
        })
    }

    async fn renew(&self, state: &mut State) -> Result<(), CapError> {
        // Dated from before the request: others may have seen it as soon as it was sent.
        let sent = Instant::now();
        let text = self
            .report_due(state, sent)
            .map(|r| serde_json::to_string(&r).expect("a report serializes"));
        let publish = match (&self.running, &text) {
            (None, _) => revision::Publish::Leave,
            (Some(_), Some(text)) => revision::Publish::Set(text),
            (Some(_), None) => revision::Publish::Remove,
        };
        bounded(self.call_timeout, self.store.renew(&self.me, publish)).await?;
        state.renewed_at = Some(sent);
        self.status.lock().unwrap().renewed =
            k8s_openapi::jiff::Timestamp::try_from(std::time::SystemTime::now())
                .map(|t| {
                    t.round(k8s_openapi::jiff::Unit::Second)
                        .map_or_else(|_| t.to_string(), |t| t.to_string())
                })
                .unwrap_or_else(|_| "now (this host's clock is out of range)".into());
        Ok(())
    }

    /// The report every renewal at `now` carries: a new revision's at once
    /// (a rollout must see it), new counts once `publish-every` has passed
    /// since the last, else the last again (no request is added, and a
    /// report someone removed or overwrote is put back); none while this
    /// process runs no revision yet, so a restarted node does not go on
    /// showing what its last process ran.
    fn report_due(&self, state: &mut State, now: Instant) -> Option<revision::Report> {
        let Some(report) = self.running.as_ref().and_then(|r| r.report()) else {
            state.published = None;
            return None;
        };
        let due = match &state.published {
            None => true,
            Some((at, last)) => {
                last.revision != report.revision
                    || (*last != report && now.duration_since(*at) >= self.settings.publish_every)
            }
        };
        if due {
            state.published = Some((now, report));
        }
        state.published.as_ref().map(|(_, last)| last.clone())
    }

    /// Still fresh enough to act, at the very end of an admission.
    fn still_alive(&self, state: &State) -> Result<(), CapError> {
        match state
            .renewed_at
            .is_some_and(|at| at.elapsed() < self.settings.liveness / 2)
        {
            true => Ok(()),
            false => Err(CapError::Unavailable(
                "fleet: this node's Lease was not renewed within half the liveness window by the time the ticket was checked; a node acts under a fleet ticket only while it proves it is alive (fail closed)".into(),
            )),
        }
    }

    /// Give back every ticket whose node has settled. Returns whether a
    /// ticket is still held.
    async fn settle(&self, state: &mut State) -> bool {
        let classes: Vec<String> = state.held.keys().cloned().collect();
        if classes.is_empty() {
            return false;
        }
        // One read of this node serves every class it holds a ticket of.
        let node = match bounded(self.call_timeout, self.store.node(&self.me)).await {
            Ok(node) => node,
            Err(e) => {
                tracing::warn!("fleet: cannot read this node to see if it settled: {e}");
                return true;
            }
        };
        for name in classes {
            let Some(class) = self.settings.classes.iter().find(|c| c.rule.name == name) else {
                state.held.remove(&name);
                continue;
            };
            let quiet = match settled(&class.rule, &node) {
                true => self.alerts_quiet(class).await,
                false => Err(CapError::BudgetExhausted(Reason::Health.tag("not settled"))),
            };
            let now = Instant::now();
            let held = state.held.get_mut(&name).expect("listed above");
            if let Err(unsettled) = quiet {
                held.settled_since = None;
                if !class.alerts.is_empty() {
                    self.note(&name, true, format!("holding: {}", unsettled.message()));
                }
                continue;
            }
            let since = *held.settled_since.get_or_insert(now);
            if now.duration_since(since.max(held.last_act)) < class.rule.ready_for {
                continue;
            }
            match self.give_back(&name).await {
                Ok(()) => {
                    state.held.remove(&name);
                    self.released(state, &name, "the node settled");
                }
                Err(e) => tracing::warn!(class = %name, "fleet: cannot release the ticket: {e}"),
            }
        }
        !state.held.is_empty()
    }

    /// Give back at once the ticket of the class covering `operation`, if
    /// held: what it was taken for was undone (`why`), so the node need
    /// not settle first (a drain that gave up and uncordoned the Node).
    pub async fn give_back_now(&self, operation: &str, why: &str) {
        let Some(class) = self.class_of(operation) else {
            return;
        };
        let name = class.rule.name.clone();
        let mut state = self.state.lock().await;
        if !state.held.contains_key(&name) {
            return;
        }
        match self.give_back(&name).await {
            Ok(()) => {
                state.held.remove(&name);
                self.released(&mut state, &name, why);
            }
            Err(e) => {
                tracing::warn!(class = %name, "fleet: cannot give the ticket back ({why}): {e}; it goes back once the node settles")
            }
        }
    }

    /// After a ticket went back: this node lets the waiting nodes go first.
    fn released(&self, state: &mut State, name: &str, why: &str) {
        // Waiting nodes ask every retry-every: a node that just gave its
        // ticket back waits as long before asking again, or it would take
        // the next free ticket ahead of them.
        let turn = CapError::BudgetExhausted(Reason::Budget.tag(&format!(
            "fleet budget {name}: this node gave its ticket back less than retry-every ({}) ago and lets the nodes waiting go first; it asks again after that",
            humantime::format_duration(self.settings.retry_every)
        )));
        state.refused.insert(
            name.to_string(),
            (Instant::now() + self.settings.retry_every, turn),
        );
        tracing::info!(class = %name, node = %self.me, "fleet ticket released: {why}");
        self.note(name, false, format!("released: {why}"));
    }

    /// Whether none of `class`'s alerts fires: else the refusal saying which
    /// do, or that Prometheus could not say (fail closed).
    async fn alerts_quiet(&self, class: &Class) -> Result<(), CapError> {
        let name = &class.rule.name;
        let Some(alerts) = self.alerts.as_ref().filter(|_| !class.alerts.is_empty()) else {
            return Ok(());
        };
        match alerts.firing(&class.alerts, self.call_timeout).await {
            Ok(firing) if firing.is_empty() => Ok(()),
            Ok(firing) => Err(CapError::BudgetExhausted(Reason::Health.tag(&format!(
                "fleet budget {name}: alert {} firing: no ticket until it is quiet",
                firing.join(", ")
            )))),
            Err(why) => {
                // A peer's text: bounded and inert.
                let why = crate::text::cut(crate::text::inert(&why).into_owned(), 300);
                Err(CapError::Unavailable(format!(
                    "fleet budget {name}: cannot ask Prometheus whether {} fire ({why}); no ticket without it (fail closed)",
                    class.alerts.join(", ")
                )))
            }
        }
    }

    /// Remove this node from the class's holders, by compare-and-swap.
    async fn give_back(&self, class: &str) -> Result<(), CapError> {
        for _ in 0..ATTEMPTS {
            let Versioned { ledger, version } =
                bounded(self.call_timeout, self.store.ledger(class)).await?;
            let Some(released) = release(&ledger, &self.me) else {
                return Ok(());
            };
            match bounded(
                self.call_timeout,
                self.store.write(class, &released, version.as_deref()),
            )
            .await
            {
                Err(CapError::Conflict(_)) => continue,
                other => return other,
            }
        }
        Err(CapError::Conflict(format!(
            "the ledger of {class} kept changing"
        )))
    }

    /// Tickets the ledgers say this node holds are held here too (their
    /// settle check starts over).
    async fn recover(&self, state: &mut State) {
        for class in &self.settings.classes {
            let name = &class.rule.name;
            match bounded(self.call_timeout, self.store.ledger(name)).await {
                Ok(read) if read.ledger.holders.iter().any(|h| h.node == self.me) => {
                    if !state.held.contains_key(name) {
                        state.held.insert(
                            name.clone(),
                            Held {
                                last_act: Instant::now(),
                                settled_since: None,
                            },
                        );
                        self.note(
                            name,
                            true,
                            "holding the ticket (found in the ledger)".into(),
                        );
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(class = %name, "fleet: cannot read the ledger: {e}"),
            }
        }
    }

    /// The member's loop: renew this node's Lease every `renew-every`, give
    /// tickets back once settled (looked at more often while holding one,
    /// from the moment one is taken).
    pub async fn run(self: Arc<Self>) {
        let mut next_renew = Instant::now();
        loop {
            let holding = {
                let mut state = self.state.lock().await;
                if Instant::now() >= next_renew {
                    // Tickets this node holds but does not know of (taken
                    // before a restart, by a one-shot run, by a write whose
                    // answer was lost) are found here and given back in turn.
                    self.recover(&mut state).await;
                    match self.renew(&mut state).await {
                        Ok(()) => next_renew = Instant::now() + self.settings.renew_every,
                        Err(e) => {
                            tracing::warn!("fleet: cannot renew this node's Lease: {e}");
                            // Try again soon, not a whole period later.
                            next_renew = Instant::now() + self.settings.renew_every / 4;
                        }
                    }
                }
                self.settle(&mut state).await
            };
            let wait = match holding {
                true => self.settle_poll().min(self.settings.renew_every),
                false => self.settings.renew_every,
            };
            let until = (Instant::now() + wait).min(next_renew);
            tokio::select! {
                () = tokio::time::sleep_until(until) => {}
                () = self.granted.notified() => {}
            }
        }
    }

    /// How often a held ticket's settle check looks at the node.
    fn settle_poll(&self) -> Duration {
        let shortest = self
            .settings
            .classes
            .iter()
            .map(|c| c.rule.ready_for)
            .min()
            .unwrap_or_default();
        (shortest / 4).clamp(Duration::from_millis(100), Duration::from_secs(5))
    }
}

#[cfg(test)]
mod tests;
