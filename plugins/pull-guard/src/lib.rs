//! pull-guard: keep big image pulls from being cancelled for slow progress,
//! and bring listed images in ahead of need.
//!
//! A pull that makes no progress for a while is cancelled by the runtime's
//! progress deadline (containerd 1.7+ `image_pull_progress_timeout`), and a
//! 3 GB image over a slow link never lands. Each reconcile:
//!
//! (a) makes the runtime's progress deadline at least `progress-timeout`:
//! the runtime version comes from CRI (`runtime-config.version = "auto"`)
//! or the config; containerd 1.7+ keeps it in its config file, in
//! `[plugins."io.containerd.grpc.v1.cri"]` of a version 2 file or
//! `[plugins."io.containerd.cri.v1.images"]` of a version 3 file (2.x). The
//! file is edited in place (comments and layout kept) only when the value
//! must be raised, never lowered ("0s", no deadline, is left alone), and
//! the runtime's unit is then restarted once (`systemd.restart`, which a host
//! budget can bound; a restart still owed after a failure or crash is done on
//! the next reconcile). containerd 1.6 has no such setting, and other
//! runtimes (CRI-O) are not handled: the outcome says so and the pre-pulls
//! below are what helps.
//!
//! (b) pulls each listed image that is absent, one after another, each with
//! the plugin's own deadline `pull-timeout`; a failed pull is retried after
//! `retry-backoff.initial`, doubled per attempt up to `retry-backoff.max`
//! (attempts kept in `state`). The host refuses a pull whose deadline does not
//! fit in what is left of the reconcile's, so set `[plugins.pull-guard.limits]
//! timeout` above `pull-timeout`; when earlier pulls used up the reconcile's
//! time, the rest is left for a reconcile asked for at once.
//!
//! The outcome says what was done to the deadline, then per image: present,
//! pulled in Ns, or failed (attempt k, next try in Ns: reason).
//!
//! ```toml
//! [plugins.pull-guard]
//! interval = "10m"
//! [plugins.pull-guard.limits]
//! timeout = "20m"   # above pull-timeout
//! [plugins.pull-guard.grants]
//! files = [{ path = "/etc/containerd", write = true }]
//! systemd = { units = ["containerd.service"], operations = ["restart"] }
//! cri = { read = true, operations = ["pull-image"], images = ["registry.example.com/ml/*", "docker.io/library/*"] }
//! [plugins.pull-guard.config]
//! progress-timeout = "10m"
//! images = ["registry.example.com/ml/trainer:2.1", "docker.io/library/busybox:1.36"]
//! pull-timeout = "15m"
//! retry-backoff = { initial = "30s", max = "30m" }
//! runtime-config = { path = "/etc/containerd/config.toml", unit = "containerd.service", version = "auto" }
//!
//! [host.budgets.runtime-restarts]
//! operations = ["systemd.restart"]
//! max = 1
//! per = "1h"
//! ```

mod images;
mod runtime;

use images::{Failures, Pacing, Status};
use runtime::{Edit, Support};
use serde::Deserialize;
use std::time::Duration;
use tend_sdk::{Context, Health, Host, JobResult, Outcome, Plugin, PluginInfo, Result};

/// State key: present while the runtime owes a restart for a raised deadline.
const RESTART_PENDING: &str = "restart-pending";
/// State key of the failed pulls ([`images::Failures`]).
const FAILURES: &str = "pull-failures";
const SETTING: &str = "image_pull_progress_timeout";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Config {
    /// The runtime's pull progress deadline is made at least this.
    #[serde(default = "default_progress_timeout", with = "humantime_serde")]
    progress_timeout: Duration,
    #[serde(default)]
    runtime_config: RuntimeConfig,
    /// Pulled when absent.
    #[serde(default)]
    images: Vec<String>,
    /// Each pull's own deadline.
    #[serde(default = "default_pull_timeout", with = "humantime_serde")]
    pull_timeout: Duration,
    #[serde(default)]
    retry_backoff: RetryBackoff,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
struct RuntimeConfig {
    path: String,
    unit: String,
    /// "auto" asks CRI; "1.7", "2.0" say which containerd reads the file.
    version: String,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            path: "/etc/containerd/config.toml".into(),
            unit: "containerd.service".into(),
            version: "auto".into(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RetryBackoff {
    #[serde(with = "humantime_serde")]
    initial: Duration,
    #[serde(with = "humantime_serde")]
    max: Duration,
}

impl Default for RetryBackoff {
    fn default() -> Self {
        RetryBackoff {
            initial: Duration::from_secs(30),
            max: Duration::from_secs(30 * 60),
        }
    }
}

fn default_progress_timeout() -> Duration {
    Duration::from_secs(10 * 60)
}
fn default_pull_timeout() -> Duration {
    Duration::from_secs(15 * 60)
}

impl Config {
    /// The plugin's config; an `invalid` error names the key that is wrong.
    fn load(ctx: &Context) -> Result<Config> {
        let invalid = |key: &str, why: &str| ctx.invalid_config(key, why);
        let config: Config = ctx.config()?;
        if config.progress_timeout < Duration::from_secs(1) {
            return Err(invalid("progress-timeout", "must be at least 1s"));
        }
        let runtime = &config.runtime_config;
        if !runtime.path.starts_with('/') {
            return Err(invalid(
                "runtime-config.path",
                "must be an absolute path such as \"/etc/containerd/config.toml\"",
            ));
        }
        if runtime.unit.is_empty()
            || runtime.unit.contains('/')
            || runtime.unit.chars().any(char::is_whitespace)
        {
            return Err(invalid(
                "runtime-config.unit",
                "must be a unit name such as \"containerd.service\"",
            ));
        }
        if runtime.version != "auto" && runtime::release(&runtime.version).is_none() {
            return Err(invalid(
                "runtime-config.version",
                &format!(
                    "{:?} is neither \"auto\" nor a containerd version such as \"1.7\" or \"2.0\"",
                    runtime.version
                ),
            ));
        }
        let mut seen: Vec<String> = Vec::new();
        for (n, image) in config.images.iter().enumerate() {
            let full = tend_rules::cri::normalize_image(image)
                .map_err(|e| invalid(&format!("images[{n}]"), e.message()))?;
            if let Some(first) = seen.iter().position(|s| *s == full) {
                return Err(invalid(
                    &format!("images[{n}]"),
                    &format!("{image:?} is images[{first}] again ({full})"),
                ));
            }
            seen.push(full);
        }
        if config.pull_timeout.is_zero() {
            return Err(invalid("pull-timeout", "must be more than 0s"));
        }
        let backoff = &config.retry_backoff;
        if backoff.initial.is_zero() {
            return Err(invalid("retry-backoff.initial", "must be more than 0s"));
        }
        if backoff.max < backoff.initial {
            return Err(invalid(
                "retry-backoff.max",
                "must be at least retry-backoff.initial",
            ));
        }
        Ok(config)
    }
}

pub struct PullGuard;

impl Plugin for PullGuard {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "pull-guard",
            env!("CARGO_PKG_VERSION"),
            "raises the runtime's image pull progress deadline and pre-pulls listed images with retries",
        )
    }

    fn reconcile(ctx: &Context, host: &dyn Host) -> Result<Outcome> {
        run(ctx, host, &tend_sdk::wall_clock_ms)
    }
}

/// One reconcile; `now_ms` reads the wall clock (milliseconds since the epoch).
pub fn run(ctx: &Context, host: &dyn Host, now_ms: &dyn Fn() -> u64) -> Result<Outcome> {
    let config = Config::load(ctx)?;
    let mut parts = vec![progress_deadline(ctx, host, &config)];
    if !config.images.is_empty() {
        parts.push(pre_pulls(ctx, host, &config, now_ms)?);
    }
    Ok(Part::combine(parts))
}

/// One part of the outcome.
struct Part {
    health: Health,
    message: String,
    requeue: Option<Duration>,
}

impl Part {
    fn new(health: Health, message: String) -> Self {
        Part {
            health,
            message,
            requeue: None,
        }
    }

    /// The worst health, every message, the soonest requeue.
    fn combine(parts: Vec<Part>) -> Outcome {
        let health = parts.iter().map(|p| p.health).fold(Health::Healthy, worse);
        let requeue = parts.iter().filter_map(|p| p.requeue).min();
        let message: Vec<String> = parts.into_iter().map(|p| p.message).collect();
        let outcome = Outcome {
            health,
            message: message.join("; "),
            requeue_after_ms: None,
        };
        match requeue {
            Some(after) => outcome.requeue_after(after),
            None => outcome,
        }
    }
}

/// Part (a): the runtime's progress deadline; any error is reported, so the
/// pre-pulls still run.
fn progress_deadline(ctx: &Context, host: &dyn Host, config: &Config) -> Part {
    ensure_progress_deadline(ctx, host, config)
        .unwrap_or_else(|e| Part::new(Health::Degraded, format!("{SETTING} not ensured: {e}")))
}

fn ensure_progress_deadline(ctx: &Context, host: &dyn Host, config: &Config) -> Result<Part> {
    let runtime = &config.runtime_config;
    let support = if runtime.version == "auto" {
        let version = host.cri().version()?;
        runtime::support(&version.runtime_name, &version.runtime_version)
    } else {
        runtime::support("containerd", &runtime.version)
    };
    let release = match support {
        Support::Setting(release) => release,
        Support::Unsupported(why) => return Ok(Part::new(Health::Healthy, why)),
    };
    let (path, unit) = (&runtime.path, &runtime.unit);
    let wanted = config.progress_timeout;
    let text = host.files().read_string(path)?.unwrap_or_default();
    let would = |done: &str, planned: &str| if ctx.dry_run { planned } else { done }.to_string();
    let mut message = match runtime::raise(&text, release, wanted) {
        Err(why) => {
            return Ok(Part::new(
                Health::Degraded,
                format!("{SETTING} not ensured: {path} {why}"),
            ));
        }
        Ok(Edit::Kept(value)) => {
            format!(
                "{SETTING} = {value:?} in {path} is at least {}",
                human(wanted)
            )
        }
        Ok(Edit::Raised { from, to, text }) => {
            // Remembered before the write: a restart still owed after a
            // crash in between is done on the next reconcile.
            host.state().set(RESTART_PENDING, unit.as_bytes())?;
            let mode = host.files().metadata(path)?.map(|m| m.mode & 0o777);
            host.files().write(path, text.as_bytes(), mode)?;
            match from {
                Some(from) => format!(
                    "{} {SETTING} from {from} to {to} in {path}",
                    would("raised", "would raise")
                ),
                None => format!(
                    "{} {SETTING} = {to:?} in {path} (was unset)",
                    would("set", "would set")
                ),
            }
        }
    };
    if host.state().get(RESTART_PENDING)?.is_some() {
        match host.systemd().restart(unit) {
            Ok(JobResult::Done) => {
                host.state().delete(RESTART_PENDING)?;
                message += &format!("; {} {unit}", would("restarted", "would restart"));
            }
            Ok(result) => {
                let result = match result {
                    JobResult::Done => "Done",
                    JobResult::Failed => "Failed",
                    JobResult::Canceled => "Canceled",
                    JobResult::Timeout => "Timeout",
                    JobResult::Dependency => "Dependency",
                    JobResult::Skipped => "Skipped",
                };
                message += &format!("; restart of {unit} ended {result}, to be retried");
                return Ok(Part::new(Health::Degraded, message));
            }
            Err(e) => {
                message += &format!("; {unit} not restarted yet: {e}");
                return Ok(Part::new(Health::Degraded, message));
            }
        }
    }
    Ok(Part::new(Health::Healthy, message))
}

/// Part (b): the listed images, pulled when absent.
fn pre_pulls(
    ctx: &Context,
    host: &dyn Host,
    config: &Config,
    now_ms: &dyn Fn() -> u64,
) -> Result<Part> {
    let pacing = Pacing {
        timeout: config.pull_timeout,
        initial_backoff: config.retry_backoff.initial,
        max_backoff: config.retry_backoff.max,
    };
    let previous: Failures = host.state().get_json(FAILURES)?.unwrap_or_default();
    let (statuses, failures) = images::pre_pull(
        host,
        &config.images,
        &pacing,
        &previous,
        now_ms,
        ctx.dry_run,
    );
    if failures != previous {
        if failures.is_empty() {
            host.state().delete(FAILURES)?;
        } else {
            host.state().set_json(FAILURES, &failures)?;
        }
    }
    let mut part = Part::new(Health::Healthy, String::new());
    let mut described = Vec::new();
    for (image, status) in &statuses {
        described.push(status.describe(image));
        let (health, requeue) = match status {
            Status::Present | Status::Pulled { .. } | Status::WouldPull => (Health::Healthy, None),
            // The next reconcile has a whole deadline: ask for it at once.
            Status::Deferred => (Health::Progressing, Some(Duration::from_secs(1))),
            Status::Failed { next_try_in, .. } => (Health::Degraded, Some(*next_try_in)),
            Status::Refused(_) | Status::Skipped { .. } | Status::Unchecked(_) => {
                (Health::Degraded, None)
            }
        };
        part.health = worse(part.health, health);
        part.requeue = part.requeue.into_iter().chain(requeue).min();
    }
    part.message = format!("images: {}", described.join(", "));
    Ok(part)
}

fn worse(a: Health, b: Health) -> Health {
    let rank = |h: Health| match h {
        Health::Healthy => 0,
        Health::Progressing => 1,
        Health::Degraded => 2,
    };
    if rank(b) > rank(a) { b } else { a }
}

/// A duration for operators, rounded up to the second: "4m 12s".
fn human(duration: Duration) -> String {
    tend_sdk::human_duration(duration)
}

/// Whole seconds, rounded up.
fn seconds_up(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

tend_sdk::export_plugin!(PullGuard, uses: [cri, files, state, systemd]);

#[cfg(test)]
mod tests;
