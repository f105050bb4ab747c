//! problem-detector: see the node's problems in its kernel log and journal,
//! and report them as NodeConditions and Events that clear themselves.
//!
//! What it replaces: node-problem-detector, whose log-derived conditions
//! never clear (NPD #215, #673, #936), reset to their defaults on every
//! restart (#304), stay for weeks after their rule is removed, and patch
//! node status thousands of times a second at scale (#124). Here the host
//! does the hard parts: it matches the lines (the grant's `logs.watch`
//! rules, linear-time patterns, a rate per rule) and wakes this plugin only
//! for a match; it owns each condition's lifecycle (written at once on a
//! change, refreshed once a heartbeat, cleared when its TTL passes, removed
//! when this plugin is disabled, kept across restarts). The plugin says what
//! a match means ([`rules`]):
//!
//! - a kernel hung task, stuck `unregister_netdevice` or oops sets
//!   `KernelDeadlock`; a read-only remount `ReadonlyFilesystem`; an XFS
//!   shutdown `XfsShutdown`; an OOM kill, an ext4 or I/O error is an Event
//!   on the Node;
//! - containerd or the kubelet restarted 5 times within 20 minutes sets
//!   `FrequentContainerdRestart` / `FrequentKubeletRestart`; containerd
//!   logging a fatal error sets `ContainerRuntimeUnhealthy`; "PLEG is not
//!   healthy" sets `KubeletUnhealthy`;
//! - the clock check (optional): no time-sync unit active sets `NTPProblem`,
//!   one active clears it.
//!
//! Every condition has a TTL: a problem that stops recurring clears itself.
//! An operator adds a rule without a rebuild: a `logs.watch` rule in the
//! grant (the pattern) and an `extra-rules` entry in the config (what it
//! means). Matches over a rule's rate are counted by the host and said in
//! the outcome. The rules are pure and tested apart ([`rules`]); this file
//! only reads the matches and carries out what the rules decide.

pub mod rules;

use rules::{Act, Config, Recent, Seen};
use std::time::{SystemTime, UNIX_EPOCH};
use tend_sdk::{
    ConditionReport, Context, Error, EventType, Host, Level, ObjectKey, Outcome, Plugin,
    PluginInfo, Result,
};

/// State key: each counting rule's recent matches ([`rules::Recent`]).
const RECENT: &str = "recent";
/// The longest message the plugin passes on (the host's bound for a
/// condition's message is 1024 bytes).
const MAX_MESSAGE: usize = 1000;

pub struct ProblemDetector;

impl Plugin for ProblemDetector {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "problem-detector",
            env!("CARGO_PKG_VERSION"),
            "reports kernel, container runtime, kubelet and clock problems as NodeConditions and Events that clear themselves",
        )
    }

    fn reconcile(ctx: &Context, host: &dyn Host) -> Result<Outcome> {
        reconcile_at(ctx, host, now())
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One reconcile at `now` (seconds since the epoch): tests set the time.
pub fn reconcile_at(ctx: &Context, host: &dyn Host, now: u64) -> Result<Outcome> {
    let config: Config = ctx.config()?;
    rules::validate(&config).map_err(Error::Invalid)?;
    let (seen, lost) = read_matches(host, now)?;
    let mut recent: Recent = host.state().get_json(RECENT)?.unwrap_or_default();
    let (acts, unknown) = rules::decide(&config, &seen, &mut recent, now);
    for watch in &unknown {
        host.log(
            Level::Warn,
            &format!(
                "watch rule {watch} matched but no rule says what it means: add it to extra-rules"
            ),
        );
    }
    for act in acts {
        act_on(ctx, host, act)?;
    }
    host.state().set_json(RECENT, &recent)?;
    if let Some(clock) = &config.clock {
        check_clock(host, clock)?;
    }
    summarize(host, lost)
}

/// The matches that woke this reconcile, as the rules read them, and how
/// many lines were lost (over a rule's rate, or gone from the source).
fn read_matches(host: &dyn Host, now: u64) -> Result<(Vec<Seen>, u64)> {
    let mut seen = vec![];
    let mut lost = 0;
    for matched in host.logs().matches()? {
        lost += matched.missed + matched.gap;
        for entry in matched.entries {
            seen.push(Seen {
                watch: matched.rule.clone(),
                message: bounded(entry.message),
                at: entry.realtime_us.map_or(now, |us| us / 1_000_000),
            });
        }
    }
    Ok((seen, lost))
}

fn bounded(mut text: String) -> String {
    text.truncate(text.floor_char_boundary(MAX_MESSAGE));
    text
}

fn act_on(ctx: &Context, host: &dyn Host, act: Act) -> Result<()> {
    match act {
        Act::Event { reason, message } => {
            let node = ObjectKey::cluster("v1", "Node", &ctx.node_name);
            host.kube()
                .emit_event(&node, EventType::Warning, &reason, &message)
        }
        Act::Set {
            condition,
            reason,
            message,
            ttl,
        } => host.conditions().set(&ConditionReport {
            condition,
            reason,
            message,
            ttl_seconds: ttl.map(|t| t.min(u64::from(u32::MAX)) as u32),
        }),
    }
}

/// Set the clock condition while no time-sync unit is active, clear it
/// once one is (a unit systemd does not know counts as inactive).
fn check_clock(host: &dyn Host, clock: &rules::ClockCheck) -> Result<()> {
    let mut active = vec![];
    for unit in &clock.units {
        let up = match host.systemd().status(unit) {
            Ok(status) => status.active_state == "active",
            Err(Error::NotFound(_)) => false,
            Err(e) => return Err(e),
        };
        active.push((unit.clone(), up));
    }
    let (problem, reason, message) = rules::clock_verdict(&active);
    if problem {
        host.conditions().set(&ConditionReport {
            condition: clock.condition.clone(),
            reason: reason.into(),
            message,
            ttl_seconds: None,
        })
    } else {
        host.conditions().clear(&clock.condition, reason, &message)
    }
}

/// Degraded while a condition of this plugin is True, naming each; the
/// lines lost are said.
fn summarize(host: &dyn Host, lost: u64) -> Result<Outcome> {
    let active: Vec<String> = host
        .conditions()
        .list()?
        .into_iter()
        .filter(|held| held.active)
        .map(|held| format!("{} ({})", held.condition, held.reason))
        .collect();
    let mut message = if active.is_empty() {
        "no problem seen".to_string()
    } else {
        active.join(", ")
    };
    if lost > 0 {
        message += &format!(
            "; {lost} matching lines not delivered (over a rule's rate or lost by the log)"
        );
    }
    Ok(if active.is_empty() {
        Outcome::healthy(message)
    } else {
        Outcome::degraded(message)
    })
}

tend_sdk::export_plugin!(ProblemDetector, uses: [conditions, kube, logs, state, systemd]);

#[cfg(test)]
mod tests;
