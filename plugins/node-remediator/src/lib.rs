//! node-remediator: an escalation ladder driven by NodeConditions, whose
//! every step is verified before the next is allowed.
//!
//! What it replaces: Medik8s' Self Node Remediation and NodeHealthCheck,
//! kured's reboot, and the scripts between them, each of which has hurt its
//! users: SNR only *assumes* the node rebooted (#258), NHC escalated on a
//! 30 s timeout while a node was still recovering (#208), kured rebooted an
//! undrained node another controller had uncordoned during its delay (#929)
//! and leaves nodes cordoned when a PodDisruptionBudget blocks (#63).
//!
//! The operator names the conditions that call for remediation (those
//! problem-detector sets: `KernelDeadlock`, `ContainerRuntimeUnhealthy`, ...)
//! and the steps, in order:
//!
//! - `restart-unit`: restart a systemd unit (the kubelet, the container
//!   runtime);
//! - `reboot`: drain the Node (PodDisruptionBudgets honoured, a deadline;
//!   see `kube.drain`), check it is still cordoned just before, then start
//!   `reboot.target`; verified only by a new boot identity and the Node
//!   Ready again, never assumed;
//! - `replace`: drain as for a reboot, then ask the cluster for a new
//!   instance: the annotation `tend.dev/replace-requested` on the Node,
//!   which node-reaper acts on (`replace-requests = true`) with its own
//!   breakers (grant that annotation alone: `fields = ["spec.unschedulable",
//!   "metadata.annotations[tend.dev/replace-requested]"]`). The last step:
//!   the node's end is its outcome.
//!
//! A step is verified when every named condition has been clear for
//! `settle-ms`; one that has not verified within `verify-within-ms` is
//! taken again up to `attempts` times, then the next step is taken. After a
//! verified step the ladder watches for `quiet-ms` (the problem back within
//! it: the next step), then resets. What the ladder did is undone on
//! recovery (the Node it cordoned is uncordoned). The ladder ([`ladder`],
//! pure and tested apart) lives in the plugin's `state`, saved *before* each step: a tend killed mid-step, or
//! the node rebooting, resumes at the right step and never repeats a
//! disruptive one. Each step is a mutation through the host's gate, so it
//! takes the fleet's ticket of its class (`systemd.restart`,
//! `kube.cordon`+`kube.evict`, `systemd.start`) inside the class's
//! maintenance windows, within the host's budgets, journaled; `tend plan`
//! shows the step it would take. Each step is an Event on the Node.
//!
//! It explains itself: an outcome held back begins with its named reasons
//! (`[pdb:<ns>/<name>]`, `[window]`, `[budget]`, `[unverified]`,
//! `[stale-state]`: [`Reason`]), which `tend plan` lists; metrics count steps
//! by outcome and say where the ladder stands (`remediation_steps_total`,
//! `remediation_step`, `remediation_overdue_timestamp_seconds`,
//! `remediation_exhausted`), for the alerts `TendRemediationStuck` (still
//! remediating `alert-after-ms` after it began) and `TendRemediationExhausted`.
//!
//! With `medik8s = { namespace = "..." }` it is also a Medik8s remediator
//! ([`medik8s`]): NodeHealthCheck's request for this node is one more
//! problem, and the request's status says where the ladder stands.

pub mod ladder;
pub mod medik8s;

use ladder::{Ladder, Next, Rules, Seen, Waiting};
use serde::Deserialize;
use serde_json::Value;
use std::time::Duration;
use tend_sdk::{
    Context, DrainOptions, Error, EventType, Host, Level, ObjectKey, Outcome, PatchType, Plugin,
    PluginInfo, REPLACE_ANNOTATION, Reason, Result, human_duration, wall_clock_ms,
};

/// State key of the ladder.
const LADDER: &str = "ladder";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Config {
    /// NodeConditions that call for remediation while True.
    conditions: Vec<String>,
    steps: Vec<Step>,
    #[serde(default = "default_settle_ms")]
    settle_ms: u64,
    #[serde(default = "default_verify_within_ms")]
    verify_within_ms: u64,
    #[serde(default = "default_attempts")]
    attempts: u32,
    #[serde(default = "default_quiet_ms")]
    quiet_ms: u64,
    /// Where the boot identity is read (it changes with every boot).
    #[serde(default = "default_boot_id_path")]
    boot_id_path: String,
    /// A remediation still under way this long after it began is overdue:
    /// the `TendRemediationStuck` alert names it.
    #[serde(default = "default_alert_after_ms")]
    alert_after_ms: u64,
    /// Act as a Medik8s remediator too ([`medik8s`]).
    medik8s: Option<Medik8s>,
}

/// Where NodeHealthCheck's `TendRemediation`s are: its template's namespace.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Medik8s {
    namespace: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "action", rename_all = "kebab-case", deny_unknown_fields)]
enum Step {
    #[serde(rename_all = "kebab-case")]
    RestartUnit { unit: String },
    #[serde(rename_all = "kebab-case")]
    Reboot {
        #[serde(default = "default_drain_deadline_ms")]
        drain_deadline_ms: u64,
        /// The unit whose start reboots the node.
        #[serde(default = "default_reboot_target")]
        target: String,
    },
    #[serde(rename_all = "kebab-case")]
    Replace {
        #[serde(default = "default_drain_deadline_ms")]
        drain_deadline_ms: u64,
    },
}

impl Step {
    /// The step's kind, as the metrics label it.
    fn action(&self) -> &'static str {
        match self {
            Step::RestartUnit { .. } => "restart-unit",
            Step::Reboot { .. } => "reboot",
            Step::Replace { .. } => "replace",
        }
    }

    fn describe(&self) -> String {
        match self {
            Step::RestartUnit { unit } => format!("restart {unit}"),
            Step::Reboot { .. } => "reboot".into(),
            Step::Replace { .. } => "replace the instance".into(),
        }
    }
}

fn default_settle_ms() -> u64 {
    120_000
}
fn default_verify_within_ms() -> u64 {
    600_000
}
fn default_attempts() -> u32 {
    1
}
fn default_quiet_ms() -> u64 {
    1_800_000
}
fn default_boot_id_path() -> String {
    "/proc/sys/kernel/random/boot_id".into()
}
fn default_alert_after_ms() -> u64 {
    7_200_000
}
fn default_drain_deadline_ms() -> u64 {
    300_000
}
fn default_reboot_target() -> String {
    "reboot.target".into()
}

pub struct NodeRemediator;

impl Plugin for NodeRemediator {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "node-remediator",
            env!("CARGO_PKG_VERSION"),
            "remediates named NodeConditions step by step (restart a unit, reboot, replace), each step verified before the next",
        )
    }

    fn reconcile(ctx: &Context, host: &dyn Host) -> Result<Outcome> {
        reconcile_at(ctx, host, wall_clock_ms())
    }
}

fn validate(ctx: &Context, config: &Config) -> Result<()> {
    if config.conditions.is_empty() {
        return Err(ctx.invalid_config(
            "conditions",
            "name at least one NodeCondition, for example [\"KernelDeadlock\"]",
        ));
    }
    if config.steps.is_empty() {
        return Err(ctx.invalid_config(
            "steps",
            "name at least one step, for example { action = \"restart-unit\", unit = \"kubelet.service\" }",
        ));
    }
    if config.attempts == 0 {
        return Err(ctx.invalid_config("attempts", "at least 1"));
    }
    if config.verify_within_ms == 0 {
        return Err(ctx.invalid_config("verify-within-ms", "more than 0"));
    }
    Ok(())
}

/// The node as the ladder sees it, from its Node object.
struct NodeView {
    problems: Vec<String>,
    ready: bool,
    cordoned: bool,
}

fn node_key(ctx: &Context) -> ObjectKey {
    ObjectKey {
        api_version: "v1".into(),
        kind: "Node".into(),
        namespace: None,
        name: ctx.node_name.clone(),
    }
}

fn view(node: &Value, conditions: &[String]) -> NodeView {
    let status = |kind: &str| {
        node["status"]["conditions"]
            .as_array()
            .and_then(|all| all.iter().find(|c| c["type"] == kind))
            .and_then(|c| c["status"].as_str())
            .map(str::to_string)
    };
    NodeView {
        problems: conditions
            .iter()
            .filter(|c| status(c).as_deref() == Some("True"))
            .cloned()
            .collect(),
        ready: status("Ready").as_deref() == Some("True"),
        cordoned: node["spec"]["unschedulable"].as_bool() == Some(true),
    }
}

/// One reconcile at `now` (wall-clock milliseconds): tests set the time.
pub fn reconcile_at(ctx: &Context, host: &dyn Host, now: u64) -> Result<Outcome> {
    let config: Config = ctx.config()?;
    validate(ctx, &config)?;
    // NodeHealthCheck's requests add to the conditions; failing to read
    // them never stops the conditions' remediation.
    let request = match &config.medik8s {
        Some(medik8s) => {
            medik8s::request(host, &medik8s.namespace, &ctx.node_name).unwrap_or_else(|e| {
                host.log(
                    Level::Warn,
                    &format!("cannot read NodeHealthCheck's requests: {e}"),
                );
                None
            })
        }
        None => None,
    };
    if let Some(request) = request.as_ref().filter(|r| r.timed_out) {
        publish(host, &load(host)?, &config);
        return Ok(Outcome::progressing(format!(
            "NodeHealthCheck timed out its remediation {} (remediation.medik8s.io/nhc-timed-out): standing down for its next remediator",
            request.key.name
        ))
        .requeue_after(Duration::from_secs(60)));
    }
    let mut node = view(&read_node(ctx, host)?, &config.conditions);
    if request.is_some() {
        node.problems.push(medik8s::PROBLEM.into());
    }
    let reboots: Vec<bool> = config
        .steps
        .iter()
        .map(|s| matches!(s, Step::Reboot { .. }))
        .collect();
    let boot = match reboots.contains(&true) {
        true => host
            .files()
            .read_string(&config.boot_id_path)?
            .unwrap_or_default()
            .trim()
            .to_string(),
        false => String::new(),
    };
    let rules = Rules {
        steps: config.steps.len(),
        reboots,
        settle_ms: config.settle_ms,
        verify_within_ms: config.verify_within_ms,
        attempts: config.attempts,
        quiet_ms: config.quiet_ms,
    };
    let stored = load(host)?;
    let seen = Seen {
        now,
        problems: node.problems.clone(),
        boot,
        ready: node.ready,
    };
    let (mut ladder, decision) = ladder::next(&stored, &rules, &seen);
    if let Some(request) = &request {
        let progress = match ladder.exhausted {
            true => medik8s::Progress::Exhausted,
            false => medik8s::Progress::Processing,
        };
        let at = std::time::UNIX_EPOCH + Duration::from_millis(now);
        let at = humantime::format_rfc3339_seconds(at).to_string();
        if let Err(e) = medik8s::report(host, request, progress, &at) {
            host.log(Level::Warn, &format!("cannot tell NodeHealthCheck: {e}"));
        }
    }
    let of = |step: usize| {
        format!(
            "step {}/{} ({})",
            step + 1,
            config.steps.len(),
            config.steps[step].describe()
        )
    };
    let problems = node.problems.join(", ");
    let after = |until: u64| Duration::from_millis(until.saturating_sub(now).max(1000));
    let outcome = match decision {
        Next::Idle => {
            // What a step held back after its drain left behind.
            let undone = undo(ctx, host, &mut ladder)?;
            Outcome::healthy(format!(
                "no remediation needed: {} clear{undone}",
                config.conditions.join(", ")
            ))
        }
        Next::Act { step, attempt } => {
            if let Some(until) = stored.held_until.filter(|until| *until > now) {
                return Ok(Outcome::progressing(Reason::StaleState.tag(&format!(
                    "{} held: the Node was uncordoned by someone else during its drain; not taken again for {}",
                    of(step),
                    human_duration(after(until))
                )))
                .requeue_after(after(until)));
            }
            let taken = take(
                ctx,
                host,
                &config.steps[step],
                &stored,
                &mut ladder,
                &node,
                &format!("{}, try {attempt}, for {problems}", of(step)),
            )?;
            match taken {
                Taken::Done(what) => {
                    count(host, &config.steps[step], "taken");
                    Outcome::progressing(what)
                        .requeue_after(Duration::from_millis(config.verify_within_ms))
                }
                // Nothing was done: the ladder stays as it was (but for when
                // remediation began), asked again later.
                Taken::Held(why, reasons) => {
                    count(host, &config.steps[step], "held");
                    let mut kept = ladder.clone();
                    kept.started_at.get_or_insert(now);
                    if reasons.contains(&Reason::StaleState) {
                        kept.held_until = Some(now.saturating_add(config.quiet_ms));
                    }
                    if kept != stored {
                        host.state().set_json(LADDER, &kept)?;
                    }
                    publish(host, &kept, &config);
                    let held = format!("{} held: {why}", of(step));
                    return Ok(Outcome::progressing(Reason::tag_all(&reasons, &held))
                        .requeue_after(Duration::from_secs(60)));
                }
            }
        }
        Next::Wait { until, why } => {
            let step = ladder.step.unwrap_or_default();
            let waiting = match why {
                Waiting::Clear => format!("waiting for {problems} to clear"),
                Waiting::Reboot => {
                    "waiting for the node to come back from its reboot (a new boot, Ready)".into()
                }
                Waiting::Settle => format!(
                    "{} cleared; verifying it stays clear for {}",
                    config.conditions.join(", "),
                    human_duration(Duration::from_millis(config.settle_ms))
                ),
            };
            Outcome::progressing(Reason::Unverified.tag(&format!(
                "{} taken {} ago: {waiting}",
                of(step),
                human_duration(Duration::from_millis(now.saturating_sub(ladder.acted_at)))
            )))
            .requeue_after(after(until))
        }
        Next::Verified { step } => {
            let undone = undo(ctx, host, &mut ladder)?;
            event(
                ctx,
                host,
                EventType::Normal,
                "Remediated",
                &format!("{} verified{undone}", of(step)),
            );
            count(host, &config.steps[step], "verified");
            Outcome::healthy(format!("{} verified{undone}", of(step)))
                .requeue_after(Duration::from_millis(config.quiet_ms))
        }
        Next::Watching { step, until } => Outcome::healthy(format!(
            "recovered by {}; the ladder resets in {} if nothing comes back",
            of(step),
            human_duration(after(until))
        ))
        .requeue_after(after(until)),
        Next::Reset => {
            undo(ctx, host, &mut ladder)?;
            host.state().delete(LADDER)?;
            publish(host, &Ladder::default(), &config);
            return Ok(Outcome::healthy("recovered; the ladder is reset"));
        }
        Next::Exhausted => {
            if !stored.exhausted {
                count(host, &config.steps[config.steps.len() - 1], "exhausted");
                event(
                    ctx,
                    host,
                    EventType::Warning,
                    "RemediationExhausted",
                    &format!("every step tried; {problems} still True"),
                );
            }
            Outcome::degraded(format!(
                "every step tried and none verified: {problems} still True; the node needs a person (or its replacement)"
            ))
            .requeue_after(Duration::from_millis(config.verify_within_ms))
        }
    };
    if ladder != stored {
        host.state().set_json(LADDER, &ladder)?;
    }
    publish(host, &ladder, &config);
    Ok(outcome)
}

/// Undo what the ladder did to the Node (its cordon, its request for a
/// replacement), each once: what was undone, for the outcome.
fn undo(ctx: &Context, host: &dyn Host, ladder: &mut Ladder) -> Result<String> {
    let mut undone = String::new();
    if ladder.cordoned {
        host.kube().cordon(false)?;
        ladder.cordoned = false;
        undone += "; uncordoned the Node";
    }
    if ladder.replace_requested {
        let withdraw = serde_json::json!({"metadata": {"annotations": {REPLACE_ANNOTATION: null}}});
        host.kube()
            .patch(&node_key(ctx), PatchType::Merge, &withdraw)?;
        ladder.replace_requested = false;
        undone += "; withdrew its replacement request";
    }
    Ok(undone)
}

/// One more `outcome` (taken, held, verified, exhausted) of `step`:
/// `tend_plugin_remediation_steps_total{step, outcome}`.
fn count(host: &dyn Host, step: &Step, outcome: &str) {
    let labels = [("step", step.action()), ("outcome", outcome)];
    if let Err(e) = host
        .metrics()
        .counter_add("remediation_steps", &labels, 1.0)
    {
        host.log(Level::Warn, &format!("cannot count a step: {e}"));
    }
}

/// Where the ladder stands, for dashboards and the alerts of a ladder stuck
/// or exhausted (examples/deploy/monitoring/tend.rules.yaml): the step it
/// is at (1-based; 0 idle), when the remediation under way becomes overdue
/// (`alert-after-ms` after it began; 0: none under way), exhausted.
fn publish(host: &dyn Host, ladder: &Ladder, config: &Config) {
    let step = ladder.step.map_or(0.0, |s| s as f64 + 1.0);
    // Exhausted is its own alert: not overdue as well.
    let overdue = match (ladder.started_at, ladder.exhausted) {
        (Some(at), false) => at.saturating_add(config.alert_after_ms) as f64 / 1000.0,
        _ => 0.0,
    };
    let exhausted = if ladder.exhausted { 1.0 } else { 0.0 };
    let metrics = host.metrics();
    let published = metrics
        .gauge_set("remediation_step", &[], step)
        .and_then(|()| metrics.gauge_set("remediation_overdue_timestamp_seconds", &[], overdue))
        .and_then(|()| metrics.gauge_set("remediation_exhausted", &[], exhausted));
    if let Err(e) = published {
        host.log(Level::Warn, &format!("cannot publish the ladder: {e}"));
    }
}

/// What taking a step came to.
enum Taken {
    /// Done (or asked): what was done.
    Done(String),
    /// Not done, why, and the reasons by name (a drain that gave up on
    /// PodDisruptionBudgets, a closed window): the ladder is not advanced.
    Held(String, Vec<Reason>),
}

/// The reasons named by a drain's pods left behind ("ns/pod: [pdb:ns/x] ..."),
/// each once.
fn drain_reasons(remaining: &[String]) -> Vec<Reason> {
    let mut reasons: Vec<Reason> = Vec::new();
    let named = remaining
        .iter()
        .filter_map(|line| line.split_once(": "))
        .flat_map(|(_, why)| Reason::all(why));
    for reason in named {
        if !reasons.contains(&reason) {
            reasons.push(reason);
        }
    }
    reasons
}

/// Take `step`: `ladder` comes as the ladder with it taken, saved before
/// the act (intent before effect). A step held back leaves it as `stored`
/// (but for a cordon its drain made, to undo on recovery).
fn take(
    ctx: &Context,
    host: &dyn Host,
    step: &Step,
    stored: &Ladder,
    ladder: &mut Ladder,
    node: &NodeView,
    what: &str,
) -> Result<Taken> {
    let mut taking = std::mem::replace(ladder, stored.clone());
    // A reboot or a replacement takes the Node's pods away: drained first.
    if let Step::Reboot {
        drain_deadline_ms, ..
    }
    | Step::Replace { drain_deadline_ms } = step
    {
        let options = DrainOptions {
            deadline_ms: *drain_deadline_ms,
            uncordon_on_give_up: !node.cordoned,
        };
        let report = match host.kube().drain(&options) {
            Ok(report) => report,
            Err(e) => {
                let reasons = e.reason().into_iter().collect();
                return Ok(Taken::Held(format!("the drain was refused: {e}"), reasons));
            }
        };
        if !report.completed() {
            return Ok(Taken::Held(
                format!("the drain gave up: {}", report.remaining.join("; ")),
                drain_reasons(&report.remaining),
            ));
        }
        // Read just before the reboot: cordoned still, by the drain or anyone.
        let now = view(&host.kube().get(&node_key(ctx))?, &[]);
        if !now.cordoned && !ctx.dry_run {
            return Ok(Taken::Held(
                "the Node was uncordoned after the drain (by someone else): not taken".into(),
                vec![Reason::StaleState],
            ));
        }
        taking.cordoned = stored.cordoned || !node.cordoned;
    }
    taking.replace_requested |= matches!(step, Step::Replace { .. });
    host.state().set_json(LADDER, &taking)?;
    let held = Ladder {
        cordoned: taking.cordoned,
        ..stored.clone()
    };
    *ladder = taking;
    let acted = match step {
        Step::RestartUnit { unit } => host.systemd().restart(unit).map(drop),
        Step::Reboot { target, .. } => host.systemd().start(target).map(drop),
        Step::Replace { .. } => host
            .kube()
            .patch(
                &node_key(ctx),
                PatchType::Merge,
                &serde_json::json!({"metadata": {"annotations": {REPLACE_ANNOTATION: "true"}}}),
            )
            .map(drop),
    };
    match acted {
        Ok(()) => {
            event(ctx, host, EventType::Warning, "Remediating", what);
            host.log(Level::Info, &format!("took {what}"));
            Ok(Taken::Done(format!("took {what}")))
        }
        // Sent, its answer lost (a reboot closes the bus it was asked on):
        // taken as far as the ladder knows, never sent again on a guess;
        // only its observed outcome verifies it. (A patch may be sent again.)
        Err(e @ Error::Timeout(_)) if !matches!(step, Step::Replace { .. }) => {
            event(ctx, host, EventType::Warning, "Remediating", what);
            host.log(
                Level::Warn,
                &format!("took {what}; its answer was lost: {e}"),
            );
            Ok(Taken::Done(format!(
                "took {what} (its answer was lost: {e})"
            )))
        }
        Err(e) => {
            // Not taken: the ladder as it was, so the step is asked again.
            *ladder = held;
            host.state().set_json(LADDER, &*ladder)?;
            match e {
                Error::BudgetExhausted(_) | Error::Unavailable(_) | Error::Timeout(_) => {
                    let reasons = e.reason().into_iter().collect();
                    Ok(Taken::Held(e.to_string(), reasons))
                }
                e => Err(e),
            }
        }
    }
}

/// This Node, by an unpaged list under the grant's rule for it: served
/// from the watch cache its `watch` starts (an idle node asks the API
/// server nothing). Acts read it fresh with `get` instead.
fn read_node(ctx: &Context, host: &dyn Host) -> Result<Value> {
    let listed = host
        .kube()
        .list("v1", "Node", None, &tend_sdk::ListParams::default())?;
    listed
        .items
        .into_iter()
        .find(|n| n["metadata"]["name"].as_str() == Some(ctx.node_name.as_str()))
        .ok_or_else(|| {
            Error::NotFound(format!(
                "Node {} is not listed: grant {{ resource = \"nodes\", verbs = [\"get\", \"list\", \"watch\", \"patch\"], names = [\"$NODE\"] }}",
                ctx.node_name
            ))
        })
}

/// The stored ladder; one that cannot be read is forgotten (and said so).
fn load(host: &dyn Host) -> Result<Ladder> {
    match host.state().get_json::<Ladder>(LADDER) {
        Ok(ladder) => Ok(ladder.unwrap_or_default()),
        Err(Error::Invalid(why)) => {
            host.log(Level::Warn, &format!("forgetting the ladder: {why}"));
            Ok(Ladder::default())
        }
        Err(e) => Err(e),
    }
}

/// An Event on this Node, best effort: the remediation does not wait on it.
fn event(ctx: &Context, host: &dyn Host, kind: EventType, reason: &str, message: &str) {
    if let Err(e) = host
        .kube()
        .emit_event(&node_key(ctx), kind, reason, message)
    {
        host.log(
            Level::Warn,
            &format!("cannot record the Event {reason}: {e}"),
        );
    }
}

#[cfg(test)]
mod tests;

tend_sdk::export_plugin!(NodeRemediator, uses: [files, kube, metrics, state, systemd]);
