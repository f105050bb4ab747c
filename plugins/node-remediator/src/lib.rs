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
//! - `replace`: ask the cluster for a new instance (the annotation
//!   `tend.dev/replace-requested` on the Node, for the cluster scope to act
//!   on with its own breakers).
//!
//! A step is verified when every named condition has been clear for
//! `settle-ms`; one that has not verified within `verify-within-ms` is
//! taken again up to `attempts` times, then the next step is taken. After a
//! verified step the ladder watches for `quiet-ms` (the problem back within
//! it: the next step), then resets. What the ladder did is undone on
//! recovery (the Node it cordoned is uncordoned). The ladder ([`ladder`], pure and tested apart) lives in the
//! plugin's `state`, saved *before* each step: a tend killed mid-step, or
//! the node rebooting, resumes at the right step and never repeats a
//! disruptive one. Each step is a mutation through the host's gate, so it
//! takes the fleet's ticket of its class (`systemd.restart`,
//! `kube.cordon`+`kube.evict`, `systemd.start`) inside the class's
//! maintenance windows, within the host's budgets, journaled; `tend plan`
//! shows the step it would take. Each step is an Event on the Node.

pub mod ladder;

use ladder::{Ladder, Next, Rules, Seen, Waiting};
use serde::Deserialize;
use serde_json::Value;
use std::time::Duration;
use tend_sdk::{
    Context, DrainOptions, Error, EventType, Host, Level, ObjectKey, Outcome, PatchType, Plugin,
    PluginInfo, Result, human_duration, wall_clock_ms,
};

/// State key of the ladder.
const LADDER: &str = "ladder";
/// The annotation a `replace` step sets on the Node.
pub const REPLACE_ANNOTATION: &str = "tend.dev/replace-requested";

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
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "action", rename_all = "kebab-case", deny_unknown_fields)]
enum Step {
    #[serde(rename_all = "kebab-case")]
    RestartUnit {
        unit: String,
    },
    #[serde(rename_all = "kebab-case")]
    Reboot {
        #[serde(default = "default_drain_deadline_ms")]
        drain_deadline_ms: u64,
        /// The unit whose start reboots the node.
        #[serde(default = "default_reboot_target")]
        target: String,
    },
    Replace,
}

impl Step {
    fn describe(&self) -> String {
        match self {
            Step::RestartUnit { unit } => format!("restart {unit}"),
            Step::Reboot { .. } => "reboot".into(),
            Step::Replace => "replace the instance".into(),
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
    let node = view(&read_node(ctx, host)?, &config.conditions);
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
        Next::Idle => Outcome::healthy(format!(
            "no remediation needed: {} clear",
            config.conditions.join(", ")
        )),
        Next::Act { step, attempt } => {
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
                Taken::Done(what) => Outcome::progressing(what)
                    .requeue_after(Duration::from_millis(config.verify_within_ms)),
                // Nothing was done: the ladder stays as it was, asked again later.
                Taken::Held(why) => {
                    return Ok(Outcome::progressing(format!("{} held: {why}", of(step)))
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
            Outcome::progressing(format!(
                "{} taken {} ago: {waiting}",
                of(step),
                human_duration(Duration::from_millis(now.saturating_sub(ladder.acted_at)))
            ))
            .requeue_after(after(until))
        }
        Next::Verified { step } => {
            let mut undone = String::new();
            if ladder.cordoned {
                host.kube().cordon(false)?;
                ladder.cordoned = false;
                undone = "; uncordoned the Node".into();
            }
            event(
                ctx,
                host,
                EventType::Normal,
                "Remediated",
                &format!("{} verified{undone}", of(step)),
            );
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
            host.state().delete(LADDER)?;
            return Ok(Outcome::healthy("recovered; the ladder is reset"));
        }
        Next::Exhausted => {
            if !stored.exhausted {
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
    Ok(outcome)
}

/// What taking a step came to.
enum Taken {
    /// Done (or asked): what was done.
    Done(String),
    /// Not done, and why (a drain that gave up, a refusal): the ladder is
    /// not advanced.
    Held(String),
}

/// Take `step`: `ladder` is the ladder with it taken, saved before the act
/// (intent before effect); an act that fails puts `stored` back.
fn take(
    ctx: &Context,
    host: &dyn Host,
    step: &Step,
    stored: &Ladder,
    ladder: &mut Ladder,
    node: &NodeView,
    what: &str,
) -> Result<Taken> {
    if let Step::Reboot {
        drain_deadline_ms, ..
    } = step
    {
        let options = DrainOptions {
            deadline_ms: *drain_deadline_ms,
            uncordon_on_give_up: !node.cordoned,
        };
        let report = match host.kube().drain(&options) {
            Ok(report) => report,
            Err(e) => return Ok(Taken::Held(format!("the drain was refused: {e}"))),
        };
        if !report.completed() {
            return Ok(Taken::Held(format!(
                "the drain gave up: {}",
                report.remaining.join("; ")
            )));
        }
        // Read just before the reboot: cordoned still, by the drain or anyone.
        let now = view(&host.kube().get(&node_key(ctx))?, &[]);
        if !now.cordoned && !ctx.dry_run {
            return Ok(Taken::Held(
                "the Node was uncordoned after the drain (by someone else): no reboot".into(),
            ));
        }
        ladder.cordoned = stored.cordoned || !node.cordoned;
    }
    host.state().set_json(LADDER, &*ladder)?;
    let acted = match step {
        Step::RestartUnit { unit } => host.systemd().restart(unit).map(drop),
        Step::Reboot { target, .. } => host.systemd().start(target).map(drop),
        Step::Replace => host
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
        Err(e) => {
            // Not taken: the ladder as it was, so the step is asked again.
            *ladder = stored.clone();
            host.state().set_json(LADDER, stored)?;
            match e {
                Error::BudgetExhausted(_) | Error::Unavailable(_) | Error::Timeout(_) => {
                    Ok(Taken::Held(e.to_string()))
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

tend_sdk::export_plugin!(NodeRemediator);
