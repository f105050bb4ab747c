//! node-reaper: delete cloud instances that never became Kubernetes Nodes.
//!
//! An instance that boots but never registers (a broken image, a bootstrap
//! token expired, a network that never came up) costs money and a place in
//! its pool's quota forever; one in ERROR that never registered too. Reapers
//! have also deleted what they should not: Kubernikus deleted pool `ab`'s
//! nodes while managing pool `a` (membership by a name prefix),
//! cluster-autoscaler's unhealthy-cluster breaker counted unregistered
//! instances as unhealthy and so blocked its own repair, and reapers acting
//! on a stale or empty Node list deleted healthy nodes. So:
//!
//! - **Membership** is the cluster's ownership tag, key and value (`owner`:
//!   AWS `kubernetes.io/cluster/<name> = owned`, an OpenStack metadata key),
//!   never a name prefix: the host lists only instances carrying it.
//! - **Matching**: an instance is a Node's when a Node's `spec.providerID`
//!   names its ID (every form: `aws:///zone/i-x`, `aws:///i-x`,
//!   `openstack:///uuid`, `openstack:///region/uuid`), else its name is a
//!   Node's name, else one of its private addresses is a Node's InternalIP.
//!   Any match keeps it: extra keys only ever protect.
//! - **Order and freshness**: the cloud is listed first, then the Nodes (from
//!   the host's watch cache: any error, such as `unavailable` from a watch not
//!   synced, is "the Node listing failed"). The first pass after a start or a
//!   leader change (triggers "startup", "leader") never deletes, and a
//!   candidate is deleted only once it has been one in two passes at least
//!   `confirm-after` apart (at least 1m: less is refused as `invalid`).
//! - **Timeouts count on the reaper's own clock**: "without a Node since" is
//!   the first pass that saw the instance so (kept in state, as
//!   cluster-autoscaler keeps `UnregisteredSince`; pruned when the instance
//!   is no longer listed or has a Node; at most 4096 kept, the others wait).
//!   An instance that never matched a Node is a candidate after
//!   `registration-timeout` (per pool: `[pools.<pool-tag value>]`), counted
//!   from the latest of that first sighting, its creation (a cloud clock
//!   behind ours never makes a booting instance look old; one ahead delays)
//!   and the moment the Node listing became healthy again after failing (an
//!   API server outage it saw never counts). One that was once a Node
//!   (remembered in state while listed) is a candidate only after its Node
//!   has been gone for `lost-node-grace` (default: its registration
//!   timeout) from the first pass that missed it: a Node listing briefly
//!   missing Nodes costs no healthy instance. The first pass after a start
//!   or a leader change starts every such clock anew: a sighting from before
//!   the gap says nothing of the time in between (another replica may have
//!   seen its Node meanwhile). An instance in
//!   ERROR that never matched a Node is a candidate after `error-grace`
//!   (from when it was first seen in error); one that ever matched (remembered
//!   in state) is reported, not deleted, unless `delete-errored = "all"`. An
//!   instance with a Node is never deleted. Instances deleting, terminated,
//!   rebooting, stopped by an operator or in a state the provider's words do
//!   not tell (`unknown`) are skipped.
//! - **Breakers**, before any deletion, each reported: nothing is deleted
//!   when the Node listing fails or is empty while instances exist, when more
//!   than `max-fraction` of the cluster's instances are candidates (and more
//!   than `min-breaker-candidates`), or when more than `max-not-ready` of the
//!   Nodes are NotReady (unregistered instances are not Nodes, so they never
//!   count), or when the cloud's listing names an instance more than once
//!   (each ID is counted once, but a listing that contradicts itself may
//!   also have lost instances: that pass deletes nothing; it does not latch).
//!   The churn guard stops deletions in a pool where most of the
//!   `churn-window` most recent launches never registered (at least
//!   `churn-min-failures`): replacing instances does not fix a broken image
//!   or network. The max-fraction breaker and the churn guard **latch**: they
//!   stay open until the operator looks and changes `breaker-reset` to any new
//!   value (say, the date), then reloads the config.
//! - **Rate**: at most `max-deletions-per-pass` deletions a pass and one in
//!   flight per pool (until its victim is gone from the listing: a delete is
//!   never re-sent), by instance ID only. The host budget on
//!   `cloud.delete-instance` has the last word: `budget-exhausted` stops the
//!   pass's deletions, and is reported.
//! - **Report mode** (the default, `mode = "report"`) decides everything and
//!   deletes nothing; `mode = "enforce"` deletes. A report lists every
//!   confirmed candidate as one it would delete (nothing is in flight and
//!   the cap does not apply; breakers still hold), so report mode is the way
//!   to vet a config: `tend plan` on a fresh state sees only unconfirmed
//!   candidates, and says when each would go. An instance tagged
//!   `protect-tag` (any value) is never deleted.
//!
//! - **Replacement on request** (`replace-requests = true`; off by
//!   default): a Node annotated `tend.dev/replace-requested = "true"`
//!   (node-remediator's last step, on a node its other steps could not
//!   repair) makes the instance its `spec.providerID` names a candidate
//!   (never one matched by a name or an address only). It is held while
//!   the Node is schedulable (node-remediator drains and cordons first;
//!   deleting an undrained node strands its pods), and otherwise passes
//!   every rule above: confirmation, breakers, protect tag, cap, one in
//!   flight per pool, the host budget, report mode.
//!
//! It says what it did: the outcome counts instances, candidates, deletions
//! and skips by reason (young, unconfirmed, breaker, budget, cap, in flight,
//! protected) in one bounded line; the log names each instance and its
//! reason, and the outcome names every candidate by ID with its reason and
//! what holds it back ("held: ..."); each deletion is an Event
//! (`InstanceDeleted`, or `InstanceWouldDelete` in report mode or a dry run)
//! about the object `events-about` names (an instance that never registered
//! has no Node to carry it; the leader election's Lease always exists while
//! the reaper runs); metrics: `instances{state}`
//! (registered, unregistered, long_unregistered, error),
//! `deletions_total{reason}` (registration_timeout, node_lost, error,
//! replace_requested) and
//! `breaker_open{breaker}`. A Node deletion reconciles it (its kube grant
//! watches Nodes). Its memory is one JSON value in `state` (`reaper`).
//!
//! ```toml
//! [plugins.node-reaper]
//! scope = "cluster"                     # runs on the leader only
//! interval = "1m"
//! [plugins.node-reaper.grants]
//! cloud = { operations = ["list-instances", "delete-instance"], instances = [{ tag = "kubernetes.io/cluster/demo", value = "owned" }] }
//! kube = [
//!   { resource = "nodes", verbs = ["get", "list", "watch"] },
//!   { group = "coordination.k8s.io", resource = "leases", verbs = ["get"], namespaces = ["tend-system"], names = ["tend-cluster"] },
//! ]
//! [plugins.node-reaper.config]
//! owner = { tag = "kubernetes.io/cluster/demo", value = "owned" }
//! mode = "enforce"                      # default "report"
//! registration-timeout = "25m"          # default "20m"
//! lost-node-grace = "25m"               # default: the registration timeout
//! error-grace = "5m"
//! delete-errored = "never-registered"   # or "all"
//! confirm-after = "1m"                  # default and floor "1m"
//! max-fraction = 0.5
//! min-breaker-candidates = 3
//! max-not-ready = 0.5
//! max-deletions-per-pass = 1
//! protect-tag = "tend.dev/protect"
//! pool-tag = "pool"                     # default: none, one pool
//! churn-window = 6
//! churn-min-failures = 3
//! breaker-reset = "2024-05-01"          # change to clear latched breakers
//! replace-requests = true               # default false
//! # default: no Events
//! events-about = { api-version = "coordination.k8s.io/v1", kind = "Lease", namespace = "tend-system", name = "tend-cluster" }
//! [plugins.node-reaper.config.pools.gpu]
//! registration-timeout = "45m"
//!
//! [host.budgets.instance-deletions]
//! operations = ["cloud.delete-instance"]
//! max = 5
//! per = "1h"
//! ```

pub mod decide;
pub mod nodes;

use decide::{Action, BreakerKind, Decision, Memory, Nodes, Pass, Policy, Skip, Verdict, Why};
use nodes::NodeInfo;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;
use tend_sdk::{
    Context, Error, EventType, Health, Host, Instance, ListParams, ObjectKey, Outcome, OwnerTag,
    Plugin, PluginInfo, Reason, Result,
};

/// State key of the [`Memory`].
const MEMORY: &str = "reaper";
/// The longest outcome message: one line, counts only.
const MAX_MESSAGE: usize = 4096;
/// The shortest `confirm-after`: a candidate must still be one a minute
/// later, so a Node missing from one listing or a clock that jumps costs no
/// instance.
const MIN_CONFIRM_AFTER: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Mode {
    #[default]
    Report,
    Enforce,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum DeleteErrored {
    #[default]
    NeverRegistered,
    All,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct PoolConfig {
    #[serde(with = "humantime_serde")]
    registration_timeout: Duration,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Config {
    owner: OwnerTag,
    #[serde(default)]
    mode: Mode,
    #[serde(default = "default_registration_timeout", with = "humantime_serde")]
    registration_timeout: Duration,
    #[serde(default = "default_error_grace", with = "humantime_serde")]
    error_grace: Duration,
    #[serde(default)]
    delete_errored: DeleteErrored,
    #[serde(default, with = "humantime_serde")]
    lost_node_grace: Option<Duration>,
    #[serde(default = "default_confirm_after", with = "humantime_serde")]
    confirm_after: Duration,
    #[serde(default = "half")]
    max_fraction: f64,
    #[serde(default = "three")]
    min_breaker_candidates: usize,
    #[serde(default = "half")]
    max_not_ready: f64,
    #[serde(default = "one")]
    max_deletions_per_pass: usize,
    #[serde(default = "default_protect_tag")]
    protect_tag: String,
    pool_tag: Option<String>,
    #[serde(default)]
    pools: BTreeMap<String, PoolConfig>,
    #[serde(default = "six")]
    churn_window: usize,
    #[serde(default = "three")]
    churn_min_failures: usize,
    #[serde(default)]
    breaker_reset: String,
    #[serde(default)]
    replace_requests: bool,
    events_about: Option<EventsAbout>,
}

/// The object node-reaper's Events are about: one that exists (an instance
/// that never registered has no Node to carry them), such as the leader
/// election's Lease; its kube grant must allow `get` on it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct EventsAbout {
    api_version: String,
    kind: String,
    namespace: String,
    name: String,
}

impl EventsAbout {
    fn key(&self) -> ObjectKey {
        ObjectKey::namespaced(&self.api_version, &self.kind, &self.namespace, &self.name)
    }
}

fn default_registration_timeout() -> Duration {
    Duration::from_secs(20 * 60)
}
fn default_error_grace() -> Duration {
    Duration::from_secs(5 * 60)
}
fn default_confirm_after() -> Duration {
    MIN_CONFIRM_AFTER
}
fn default_protect_tag() -> String {
    "tend.dev/protect".into()
}
fn half() -> f64 {
    0.5
}
fn one() -> usize {
    1
}
fn three() -> usize {
    3
}
fn six() -> usize {
    6
}

fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl Config {
    /// The config checked; an `invalid` error names the key that is wrong.
    fn load(ctx: &Context) -> Result<(Config, Policy)> {
        let config: Config = ctx.config()?;
        let invalid = |key: &str, why: &str| Err(ctx.invalid_config(key, why));
        for (key, value) in [
            ("max-fraction", config.max_fraction),
            ("max-not-ready", config.max_not_ready),
        ] {
            if !(value > 0.0 && value <= 1.0) {
                return invalid(key, "must be a fraction above 0 and at most 1, such as 0.5");
            }
        }
        if config.confirm_after < MIN_CONFIRM_AFTER {
            return invalid(
                "confirm-after",
                "must be at least 1m: a candidate is deleted only when a pass a minute later at least still finds it one",
            );
        }
        if config.max_deletions_per_pass == 0 {
            return invalid(
                "max-deletions-per-pass",
                "must be at least 1: to delete nothing, set mode = \"report\"",
            );
        }
        if config.churn_window == 0 || config.churn_min_failures == 0 {
            return invalid(
                "churn-window",
                "churn-window and churn-min-failures must be at least 1",
            );
        }
        if !config.pools.is_empty() && config.pool_tag.is_none() {
            return invalid(
                "pools",
                "pools are named by the value of a tag: set pool-tag (for example \"pool\")",
            );
        }
        let policy = Policy {
            owner: config.owner.clone(),
            registration_timeout_ms: ms(config.registration_timeout),
            pool_tag: config.pool_tag.clone(),
            pool_timeouts_ms: (config.pools.iter())
                .map(|(pool, c)| (pool.clone(), ms(c.registration_timeout)))
                .collect(),
            error_grace_ms: ms(config.error_grace),
            delete_errored_all: config.delete_errored == DeleteErrored::All,
            lost_node_grace_ms: config.lost_node_grace.map(ms),
            confirm_after_ms: ms(config.confirm_after),
            max_fraction: config.max_fraction,
            min_breaker_candidates: config.min_breaker_candidates,
            max_not_ready: config.max_not_ready,
            max_deletions_per_pass: config.max_deletions_per_pass,
            protect_tag: config.protect_tag.clone(),
            breaker_reset: config.breaker_reset.clone(),
            churn_window: config.churn_window,
            churn_min_failures: config.churn_min_failures,
            replace_requests: config.replace_requests,
            report_only: config.mode == Mode::Report,
        };
        Ok((config, policy))
    }
}

pub struct NodeReaper;

impl Plugin for NodeReaper {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "node-reaper",
            env!("CARGO_PKG_VERSION"),
            "deletes cloud instances of the cluster that never registered as Nodes, behind breakers",
        )
    }

    fn reconcile(ctx: &Context, host: &dyn Host) -> Result<Outcome> {
        run(ctx, host, tend_sdk::wall_clock_ms())
    }
}

/// One pass at wall-clock time `now_ms` (milliseconds since the epoch).
pub fn run(ctx: &Context, host: &dyn Host, now_ms: u64) -> Result<Outcome> {
    let (config, policy) = Config::load(ctx)?;
    let memory: Memory = host.state().get_json(MEMORY)?.unwrap_or_default();
    // The cloud first: a Node registered meanwhile is then in the Node list.
    let instances = match host.cloud().list_instances(&policy.owner) {
        Ok(instances) => instances,
        Err(e) => {
            return Ok(Outcome::degraded(format!(
                "deleted nothing: listing the cluster's instances failed: {e}"
            )));
        }
    };
    let listed = list_nodes(host);
    let nodes = match &listed {
        Ok(nodes) => Nodes::Listed(nodes),
        Err(e) => Nodes::Failed(e.message()),
    };
    let pass = Pass {
        now_ms,
        first: ctx.triggered_by("startup") || ctx.triggered_by("leader"),
    };
    let mut decision = decide::decide(&policy, &memory, &instances, nodes, pass);
    let mut report = Report {
        mode: config.mode,
        dry_run: ctx.dry_run,
        confirm_after: config.confirm_after,
        instances: decision.instances,
        nodes: listed.as_ref().map_or(0, Vec::len),
        ..Report::default()
    };
    execute(
        host,
        &config,
        &instances,
        &mut decision,
        &mut report,
        now_ms,
    );
    for verdict in &decision.verdicts {
        log_verdict(host, &instances[verdict.index], verdict, &report);
    }
    record_metrics(host, &decision)?;
    if decision.memory != memory {
        host.state().set_json(MEMORY, &decision.memory)?;
    }
    Ok(report.outcome(&decision, &instances))
}

/// Every Node, all pages; any error is the listing's failure.
fn list_nodes(host: &dyn Host) -> Result<Vec<NodeInfo>> {
    let mut nodes = Vec::new();
    let mut params = ListParams::default();
    loop {
        let page = host.kube().list_texts("v1", "Node", None, &params)?;
        nodes.extend(page.read(NodeInfo::from_text)?.into_iter().flatten());
        match page.continue_token {
            Some(token) => params.continue_token = Some(token),
            None => return Ok(nodes),
        }
    }
}

/// Delete what the decision allows (in enforce mode), in order, until the
/// host's budget or a denial stops the pass.
fn execute(
    host: &dyn Host,
    config: &Config,
    instances: &[Instance],
    decision: &mut Decision,
    report: &mut Report,
    now_ms: u64,
) {
    let mut stopped = false;
    for verdict in &mut decision.verdicts {
        let Action::Delete { why } = verdict.action else {
            continue;
        };
        let instance = &instances[verdict.index];
        if config.mode == Mode::Report {
            report.deleted.push(listed(instance, why));
            emit_event(host, config, instance, "InstanceWouldDelete", why, report);
            continue;
        }
        if stopped {
            verdict.action = Action::Candidate {
                why,
                skip: Skip::Budget,
            };
            continue;
        }
        match host.cloud().delete_instance(&instance.id) {
            // A dry run's gate deleted nothing: no deletion to count or wait
            // for, and the plan lists the event it would send.
            Ok(()) if report.dry_run => {
                report.deleted.push(listed(instance, why));
                emit_event(host, config, instance, "InstanceWouldDelete", why, report);
            }
            Ok(()) => {
                let flight = decide::InFlight {
                    id: instance.id.clone(),
                    since_ms: now_ms,
                };
                (decision.memory.in_flight).insert(verdict.pool.clone(), flight);
                report.deleted.push(listed(instance, why));
                let labels = [("reason", why.label())];
                if let Err(e) = host.metrics().counter_add("deletions", &labels, 1.0) {
                    report.failures.push(format!("metric deletions: {e}"));
                }
                emit_event(host, config, instance, "InstanceDeleted", why, report);
            }
            Err(Error::BudgetExhausted(m)) => {
                stopped = true;
                report.budget = Some(m);
                verdict.action = Action::Candidate {
                    why,
                    skip: Skip::Budget,
                };
            }
            Err(e) => {
                stopped = matches!(e, Error::Denied(_));
                report
                    .failures
                    .push(format!("deleting {}: {e}", instance.id));
            }
        }
    }
}

/// An instance in the outcome: its ID and why it is a candidate.
fn listed(instance: &Instance, why: Why) -> String {
    format!("{} ({})", instance.id, why.label())
}

/// An Event about `events-about`, when set. A failure is logged, never the
/// pass's: the log and the outcome already name every instance.
fn emit_event(
    host: &dyn Host,
    config: &Config,
    instance: &Instance,
    reason: &str,
    why: Why,
    report: &Report,
) {
    let Some(about) = &config.events_about else {
        return;
    };
    let message = format!(
        "{} instance {} ({}): {}",
        report.verb(),
        instance.id,
        instance.name,
        describe_why(why)
    );
    let sent = (host.kube()).emit_event(&about.key(), EventType::Normal, reason, &message);
    if let Err(e) = sent {
        host.log(
            tend_sdk::Level::Warn,
            &format!(
                "event {reason} about {} {}/{}: {e}",
                about.kind, about.namespace, about.name
            ),
        );
    }
}

/// When an instance still within its timeout (grace) would go.
fn describe_young(why: Why, left_ms: u64, confirm_after: Duration) -> String {
    let what = match why {
        Why::RegistrationTimeout => "no Node yet",
        Why::NodeLost => "its Node is gone",
        Why::Errored => "in error",
        Why::ReplaceRequested => "its Node asks to be replaced",
    };
    format!(
        "{what}: a candidate in {} if none appears, then confirmed by a pass {} later",
        human(left_ms),
        human(ms(confirm_after))
    )
}

fn describe_why(why: Why) -> &'static str {
    match why {
        Why::RegistrationTimeout => "it never registered as a Node within its registration timeout",
        Why::NodeLost => "its Node has been gone for its lost-node grace",
        Why::Errored => "it is in error and never registered as a Node",
        Why::ReplaceRequested => {
            "its Node asked to be replaced (tend.dev/replace-requested) and is cordoned"
        }
    }
}

/// One line per instance that is not plainly registered: the reasons the
/// outcome only counts.
fn log_verdict(host: &dyn Host, instance: &Instance, verdict: &Verdict, report: &Report) {
    use tend_sdk::Level;
    let (level, what) = match &verdict.action {
        Action::Registered(_) => return, // most of a cluster: nothing formatted
        Action::Young { why, left_ms } => (
            Level::Debug,
            format!("{} left before it counts ({why:?})", human(*left_ms)),
        ),
        Action::Skipped(state) => (Level::Debug, format!("skipped: it is {}", state.name())),
        Action::ErroredOnceRegistered => (
            Level::Warn,
            "in error, once a Node: reported, not deleted (delete-errored = \"all\" deletes it)"
                .to_string(),
        ),
        Action::Candidate { why, skip } => (
            Level::Info,
            format!(
                "candidate ({}), not deleted: {}",
                why.label(),
                describe_skip(skip)
            ),
        ),
        Action::Delete { why } => (Level::Info, format!("{}: {}", report.verb(), why.label())),
    };
    let name = format!(
        "instance {} ({}, pool {})",
        instance.id,
        instance.name,
        decide::shown_pool(&verdict.pool)
    );
    host.log(level, &format!("{name}: {what}"));
}

fn describe_skip(skip: &Skip) -> String {
    match skip {
        // A start or a leader change: this pass only looks.
        Skip::FirstPass => {
            "first seen now: it goes if a pass confirm-after later still finds it one".into()
        }
        Skip::Unconfirmed { left_ms } => {
            format!(
                "unconfirmed: it goes if a pass in {} still finds it one",
                human(*left_ms)
            )
        }
        Skip::Protected => "protected by its protect tag".into(),
        Skip::Breaker(kind) => format!("breaker {} is open", kind.name()),
        Skip::InFlight(id) => format!("its pool's deletion of {id} is in flight"),
        Skip::Cap => "max-deletions-per-pass reached".into(),
        Skip::Budget => "the host's deletion budget is spent".into(),
        Skip::NotCordoned => {
            "its Node asks to be replaced but is schedulable: cordon and drain it first".into()
        }
    }
}

/// The gauges of this pass (breakers: 1 open, 0 closed).
fn record_metrics(host: &dyn Host, decision: &Decision) -> Result<()> {
    let metrics = host.metrics();
    let counts = decision.counts;
    if !decision.verdicts.is_empty() {
        for (state, count) in [
            ("registered", counts.registered),
            ("unregistered", counts.unregistered),
            ("long_unregistered", counts.long_unregistered),
            ("error", counts.error),
        ] {
            metrics.gauge_set("instances", &[("state", state)], count as f64)?;
        }
    }
    for kind in BreakerKind::ALL {
        let open = decision.breakers.iter().any(|b| b.kind == kind);
        metrics.gauge_set(
            "breaker_open",
            &[("breaker", kind.name())],
            f64::from(u8::from(open)),
        )?;
    }
    Ok(())
}

/// What the pass did, for the outcome.
#[derive(Default)]
struct Report {
    mode: Mode,
    dry_run: bool,
    confirm_after: Duration,
    instances: usize,
    nodes: usize,
    /// Deleted (or, in report mode or a dry run, would be).
    deleted: Vec<String>,
    /// The budget's refusal, when it stopped the pass.
    budget: Option<String>,
    failures: Vec<String>,
}

impl Report {
    fn verb(&self) -> &'static str {
        if self.mode == Mode::Report || self.dry_run {
            "would delete"
        } else {
            "deleted"
        }
    }

    fn outcome(&self, decision: &Decision, instances: &[Instance]) -> Outcome {
        let mode = match self.mode {
            Mode::Report => "report mode",
            Mode::Enforce => "enforce mode",
        };
        let c = decision.counts;
        let mut parts = vec![format!(
            "{mode}: {} instance(s), {} Node(s)",
            self.instances, self.nodes
        )];
        if !decision.verdicts.is_empty() {
            parts.push(format!(
                "{} registered, {} unregistered, {} long-unregistered, {} in error",
                c.registered, c.unregistered, c.long_unregistered, c.error
            ));
        }
        let mut skips: BTreeMap<&str, usize> = BTreeMap::new();
        let mut held = Vec::new();
        let mut waiting = Vec::new();
        let mut candidates = 0;
        let mut errored_once = 0;
        for verdict in &decision.verdicts {
            match &verdict.action {
                Action::Candidate { why, skip } => {
                    candidates += 1;
                    *skips.entry(skip.name()).or_default() += 1;
                    let id = &instances[verdict.index].id;
                    held.push(format!("{id} ({}: {})", why.label(), describe_skip(skip)));
                }
                Action::Delete { .. } => candidates += 1,
                Action::Young { why, left_ms } => {
                    let id = &instances[verdict.index].id;
                    waiting.push(format!(
                        "{id} ({})",
                        describe_young(*why, *left_ms, self.confirm_after)
                    ));
                }
                Action::ErroredOnceRegistered => errored_once += 1,
                _ => {}
            }
        }
        if candidates > 0 {
            let mut text = format!("{candidates} candidate(s)");
            if !self.deleted.is_empty() {
                text += &format!(", {} {}", self.verb(), self.deleted.join(", "));
            }
            if !skips.is_empty() {
                let skips: Vec<String> = skips.iter().map(|(k, n)| format!("{n} {k}")).collect();
                text += &format!(", skipped: {}", skips.join(", "));
            }
            parts.push(text);
        }
        if !held.is_empty() {
            parts.push(format!("held: {}", held.join(", ")));
        }
        if !waiting.is_empty() {
            parts.push(format!("waiting: {}", waiting.join(", ")));
        }
        if decision.untracked > 0 {
            parts.push(format!(
                "{} without a Node beyond the {} whose clocks are kept: they wait",
                decision.untracked,
                decide::MAX_ABSENT
            ));
        }
        if errored_once > 0 {
            parts.push(format!(
                "{errored_once} in error that once were Nodes (reported, not deleted)"
            ));
        }
        let breakers: Vec<String> = (decision.breakers.iter())
            .map(|b| format!("{}: {}", b.kind.name(), b.detail))
            .collect();
        if !breakers.is_empty() {
            parts.push(format!("breakers open: {}", breakers.join("; ")));
        }
        if let Some(budget) = &self.budget {
            parts.push(format!("deletions stopped by the host budget: {budget}"));
        }
        if !self.failures.is_empty() {
            parts.push(format!("failed: {}", self.failures.join("; ")));
        }
        // Named first, for `tend plan` and alerts: what held deletions back.
        let mut reasons = Vec::new();
        if !breakers.is_empty() {
            reasons.push(Reason::Breaker);
        }
        if self.budget.is_some() {
            reasons.push(Reason::Budget);
        }
        let message = bounded(Reason::tag_all(&reasons, &parts.join("; ")));
        let waiting = decision.next_due_in_ms;
        let health = if !breakers.is_empty() || !self.failures.is_empty() || self.budget.is_some() {
            Health::Degraded
        } else if candidates > self.deleted.len() || errored_once > 0 {
            Health::Progressing
        } else {
            Health::Healthy
        };
        let outcome = Outcome {
            health,
            message,
            requeue_after_ms: None,
        };
        match waiting {
            Some(ms) => outcome.requeue_after(Duration::from_millis(ms)),
            None => outcome,
        }
    }
}

/// One line of at most [`MAX_MESSAGE`] bytes.
fn bounded(message: String) -> String {
    let line = message.replace(['\n', '\r'], " ");
    if line.len() <= MAX_MESSAGE {
        return line;
    }
    let mut end = MAX_MESSAGE - 3;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &line[..end])
}

/// A duration for operators, rounded up to the second: "4m 12s".
fn human(ms: u64) -> String {
    tend_sdk::human_duration(Duration::from_millis(ms))
}

tend_sdk::export_plugin!(NodeReaper, uses: [cloud, kube, metrics, state]);

#[cfg(test)]
mod tests;
