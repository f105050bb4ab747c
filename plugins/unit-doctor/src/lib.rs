//! unit-doctor: restart a systemd unit whose health check keeps failing, and
//! stop restarting it when it flaps.
//!
//! Each configured check probes one unit (an HTTP endpoint answering with an
//! expected status, or the unit's active state being "active"). A unit systemd
//! is starting, reloading or stopping is in transition: neither failing nor
//! passing (systemd's own timeouts fail a job that hangs), but waiting between
//! two starts of a crash loop ("activating (auto-restart)") is failing. A unit
//! that has failed its check continuously for `fail-after-ms` is restarted; after a
//! restart the check is not judged for `backoff-ms`. When a unit needs more than
//! `max-restarts` restarts within `window-ms` it has flapped: it is not
//! restarted again (until its check passes) and the outcome is degraded, saying
//! why. All timing state lives in the plugin's `state`, one key per unit, since
//! every reconcile runs in a fresh instance. The plugin asks to be run again at
//! the moment its next decision is due (fail-after elapsing, a backoff ending),
//! and a `unit` trigger for a checked unit is judged at once.

mod clock;
mod doctor;
mod probe;

pub use clock::{Clock, SystemClock};

use doctor::{Decision, UnitState, Verdict};
use serde::Deserialize;
use std::collections::BTreeSet;
use std::time::Duration;
use tend_sdk::{Context, Error, Health, Host, Level, Outcome, Plugin, PluginInfo, Result};

/// State key prefix: one JSON value per checked unit ([`doctor::UnitState`]).
const UNITS: &str = "unit/";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Config {
    #[serde(default)]
    checks: Vec<Check>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Check {
    /// The unit to probe and restart: "kubelet.service".
    unit: String,
    probe: Probe,
    /// Restart once the check has failed continuously for this long.
    #[serde(default = "default_fail_after_ms")]
    fail_after_ms: u64,
    /// After a restart, wait this long before judging the check again.
    #[serde(default = "default_backoff_ms")]
    backoff_ms: u64,
    /// At most this many restarts within `window-ms`; a unit needing more has flapped.
    #[serde(default = "default_max_restarts")]
    max_restarts: u32,
    #[serde(default = "default_window_ms")]
    window_ms: u64,
}

/// How a check decides whether its unit is healthy.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Probe {
    /// `GET url` answers with one of `expect-status`.
    Http(HttpProbe),
    /// The unit's active state is "active".
    Active,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct HttpProbe {
    url: String,
    #[serde(default = "default_expect_status")]
    expect_status: Vec<u16>,
    #[serde(default = "default_timeout_ms")]
    timeout_ms: u64,
}

fn default_fail_after_ms() -> u64 {
    60_000
}
fn default_backoff_ms() -> u64 {
    30_000
}
fn default_max_restarts() -> u32 {
    3
}
fn default_window_ms() -> u64 {
    600_000
}
fn default_expect_status() -> Vec<u16> {
    vec![200]
}
fn default_timeout_ms() -> u64 {
    2000
}

pub struct UnitDoctor;

impl Plugin for UnitDoctor {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "unit-doctor",
            env!("CARGO_PKG_VERSION"),
            "restarts systemd units whose health check keeps failing, and stops when they flap",
        )
    }

    fn reconcile(ctx: &Context, host: &dyn Host) -> Result<Outcome> {
        reconcile_with(ctx, host, &SystemClock)
    }
}

/// One reconcile at the time `clock` tells: [`UnitDoctor::reconcile`] with the
/// system clock; tests inject theirs.
pub fn reconcile_with(ctx: &Context, host: &dyn Host, clock: &dyn Clock) -> Result<Outcome> {
    let config: Config = ctx.config()?;
    validate(&config)?;
    let now = clock.now_ms();
    let mut verdicts = Vec::new();
    for check in &config.checks {
        verdicts.push(evaluate(ctx, host, check, now)?);
    }
    forget_unchecked(host, &config)?;
    Ok(summarize(&verdicts))
}

/// Judge `check` at `now` and do what the judgement says: `Err` only when
/// the plugin's own state fails.
fn evaluate(ctx: &Context, host: &dyn Host, check: &Check, now: u64) -> Result<Verdict> {
    let mut slot = Slot::load(host, &check.unit)?;
    slot.current.forget_old_restarts(check, now);
    let decision = match doctor::backing_off(&mut slot.current, check, now) {
        Some(decision) => decision,
        None => {
            let probed = probe::probe(ctx, host, check);
            doctor::judge(&mut slot.current, check, now, probed)
        }
    };
    let verdict = match decision {
        Decision::Report(report) => {
            if let Some((level, line)) = report.log(check) {
                host.log(level, &line);
            }
            report.verdict(check)
        }
        Decision::Restart {
            reason,
            failing_for,
        } => restart(ctx, host, check, now, &mut slot, &reason, failing_for)?,
    };
    slot.save(host)?;
    Ok(verdict)
}

/// Restart the unit, remembered before it is made: a reconcile cut short
/// during the restart job must not lead to a second restart without backoff
/// or flap accounting. A restart that fails is forgotten again.
fn restart(
    ctx: &Context,
    host: &dyn Host,
    check: &Check,
    now: u64,
    slot: &mut Slot,
    reason: &str,
    failing_for: u64,
) -> Result<Verdict> {
    let before = slot.current.clone();
    slot.current.restarted_at(check, now);
    slot.save(host)?;
    let result = host.systemd().restart(&check.unit);
    if result.is_err() {
        slot.current = before;
    }
    let (level, verdict) = doctor::restarted(check, ctx.dry_run, reason, failing_for, &result);
    host.log(level, &verdict.message);
    Ok(verdict)
}

/// A unit's state as stored and as it is being changed.
struct Slot {
    key: String,
    /// None when what is stored could not be read: overwritten on save.
    stored: Option<UnitState>,
    current: UnitState,
}

impl Slot {
    fn load(host: &dyn Host, unit: &str) -> Result<Slot> {
        let key = format!("{UNITS}{unit}");
        let stored = match host.state().get_json::<UnitState>(&key) {
            Ok(state) => Some(state.unwrap_or_default()),
            // Unreadable state (say, from an incompatible version): start over.
            Err(Error::Invalid(why)) => {
                host.log(Level::Warn, &format!("{unit}: forgetting state: {why}"));
                None
            }
            Err(e) => return Err(e),
        };
        let current = stored.clone().unwrap_or_default();
        Ok(Slot {
            key,
            stored,
            current,
        })
    }

    /// Write the current state if it differs from what is stored.
    fn save(&mut self, host: &dyn Host) -> Result<()> {
        if self.stored.as_ref() != Some(&self.current) {
            host.state().set_json(&self.key, &self.current)?;
            self.stored = Some(self.current.clone());
        }
        Ok(())
    }
}

fn validate(config: &Config) -> Result<()> {
    let mut seen = BTreeSet::new();
    for check in &config.checks {
        let unit = &check.unit;
        if unit.is_empty() || unit.contains(['/', '\\']) || unit.chars().any(char::is_whitespace) {
            return Err(Error::Invalid(format!(
                "check unit {unit:?} must be a unit name such as \"kubelet.service\""
            )));
        }
        if !seen.insert(unit.as_str()) {
            return Err(Error::Invalid(format!(
                "unit {unit} is checked twice: give each unit one check"
            )));
        }
        if check.max_restarts == 0 {
            return Err(Error::Invalid(format!(
                "check of {unit}: max-restarts must be at least 1"
            )));
        }
        if check.window_ms == 0 {
            return Err(Error::Invalid(format!(
                "check of {unit}: window-ms must be more than 0"
            )));
        }
        if let Probe::Http(http) = &check.probe {
            if !(http.url.starts_with("http://") || http.url.starts_with("https://")) {
                return Err(Error::Invalid(format!(
                    "check of {unit}: probe url {:?} must start with http:// or https://",
                    http.url
                )));
            }
            if http.expect_status.is_empty() {
                return Err(Error::Invalid(format!(
                    "check of {unit}: expect-status must list at least one status"
                )));
            }
            if http.timeout_ms == 0 {
                return Err(Error::Invalid(format!(
                    "check of {unit}: timeout-ms must be more than 0"
                )));
            }
        }
    }
    Ok(())
}

/// Drop the timing state of units no longer checked.
fn forget_unchecked(host: &dyn Host, config: &Config) -> Result<()> {
    for key in host.state().list_keys(UNITS)? {
        let unit = &key[UNITS.len()..];
        if !config.checks.iter().any(|c| c.unit == unit) {
            host.state().delete(&key)?;
        }
    }
    Ok(())
}

/// The worst health of all checks, the messages of those not healthy, and the
/// earliest requeue any of them asked for.
fn summarize(verdicts: &[Verdict]) -> Outcome {
    if verdicts.is_empty() {
        return Outcome::healthy("no checks configured");
    }
    let rank = |h: Health| match h {
        Health::Healthy => 0,
        Health::Progressing => 1,
        Health::Degraded => 2,
    };
    let health = verdicts
        .iter()
        .map(|v| v.health)
        .max_by_key(|h| rank(*h))
        .unwrap_or(Health::Healthy);
    let healthy: Vec<&str> = verdicts
        .iter()
        .filter(|v| v.health == Health::Healthy)
        .map(|v| v.unit.as_str())
        .collect();
    let mut parts: Vec<String> = verdicts
        .iter()
        .filter(|v| v.health != Health::Healthy)
        .map(|v| v.message.clone())
        .collect();
    if !healthy.is_empty() {
        parts.push(format!("healthy: {}", healthy.join(", ")));
    }
    let message = parts.join("; ");
    let mut outcome = match health {
        Health::Healthy => Outcome::healthy(message),
        Health::Progressing => Outcome::progressing(message),
        Health::Degraded => Outcome::degraded(message),
    };
    if let Some(ms) = verdicts.iter().filter_map(|v| v.requeue_ms).min() {
        outcome = outcome.requeue_after(Duration::from_millis(ms.max(1)));
    }
    outcome
}

/// A duration for operators: "10m", "1m30s", "45s", "500ms".
fn human(ms: u64) -> String {
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let secs = ms / 1000;
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut text = String::new();
    if h > 0 {
        text += &format!("{h}h");
    }
    if m > 0 {
        text += &format!("{m}m");
    }
    if s > 0 {
        text += &format!("{s}s");
    }
    text
}

tend_sdk::export_plugin!(UnitDoctor, uses: [http, state, systemd]);

#[cfg(test)]
mod tests;
