//! mirror-gate: point containerd at a registry cache only while the cache answers.
//!
//! A registry mirror configured before its cache is reachable makes every pull
//! wait for a timeout per request before falling back (node bootstrap slowed by
//! 10+ minutes in the field), and so does a mirror whose cache stops answering
//! later (30 s a pull with a cache dropping SYNs; a pull hung past 120 s with
//! one that accepts connections but never answers). For each configured cache
//! this plugin probes `GET <endpoint>/v2/` (all caches at once) and writes
//! `<certs-dir>/<upstream>/hosts.toml` once the cache answers; it withdraws
//! (removes) that file when the cache has failed its probes for
//! `withdraw-after-ms` and restores it when the cache has answered again for
//! `restore-after-ms` ([`health`] decides, with hysteresis). It removes the
//! files it wrote for upstreams that leave the config, and never touches a
//! hosts.toml it did not write. Each cache's state lives in `state`, so a
//! restart resumes its timers; the time each cache spends withdrawn is
//! counted in the `cache_withdrawn_seconds` metric.

mod health;
mod hosts;

use health::{Action, Probe, Standing, Thresholds};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::time::Duration;
use tend_sdk::{Context, Error, Health, Host, Level, Outcome, Plugin, PluginInfo, Request, Result};

/// State key prefix: one [`Written`] per upstream whose hosts.toml this plugin
/// wrote, kept while its mirror is withdrawn.
const WRITTEN: &str = "written/";

/// Counter: seconds each cache's mirror spent withdrawn (exported with `_total`).
const WITHDRAWN_SECONDS: &str = "cache_withdrawn_seconds";
/// Gauge: 1 while a cache's mirror is withdrawn, else 0.
const WITHDRAWN: &str = "cache_withdrawn";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Config {
    #[serde(default = "default_certs_dir")]
    certs_dir: String,
    #[serde(default)]
    caches: Vec<Cache>,
    /// How long a probe may take.
    #[serde(default = "default_probe_timeout_ms")]
    probe_timeout_ms: u64,
    /// How soon to probe again while a cache is not answering, or answering
    /// again after a withdrawal (sooner when a decision falls due earlier).
    #[serde(default = "default_pending_requeue_ms")]
    pending_requeue_ms: u64,
    /// Withdraw a written mirror once its cache has failed every probe for this long.
    #[serde(default = "default_withdraw_after_ms")]
    withdraw_after_ms: u64,
    /// Restore a withdrawn mirror once its cache has answered every probe for
    /// this long: longer than withdraw-after, so a flapping cache stays out.
    #[serde(default = "default_restore_after_ms")]
    restore_after_ms: u64,
}

impl Config {
    fn thresholds(&self) -> Thresholds {
        Thresholds {
            withdraw_after_ms: self.withdraw_after_ms,
            restore_after_ms: self.restore_after_ms,
            probe_interval_ms: self.pending_requeue_ms,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Cache {
    /// The registry being mirrored: "docker.io", "ghcr.io", "registry.local:5000".
    upstream: String,
    /// The cache's base URL: "http://10.0.0.5:5000".
    endpoint: String,
    /// Statuses of `GET <endpoint>/v2/` that mean healthy.
    #[serde(default = "default_accept")]
    accept_status: Vec<u16>,
    #[serde(default = "default_capabilities")]
    capabilities: Vec<String>,
    /// Take over a hosts.toml that exists but was not written by mirror-gate.
    #[serde(default)]
    adopt: bool,
}

fn default_certs_dir() -> String {
    "/etc/containerd/certs.d".into()
}
fn default_probe_timeout_ms() -> u64 {
    2000
}
fn default_pending_requeue_ms() -> u64 {
    5000
}
fn default_withdraw_after_ms() -> u64 {
    10_000
}
fn default_restore_after_ms() -> u64 {
    30_000
}
fn default_accept() -> Vec<u16> {
    vec![200]
}
fn default_capabilities() -> Vec<String> {
    vec!["pull".into(), "resolve".into()]
}

/// What this plugin remembers about a hosts.toml it wrote.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Written {
    path: String,
    /// Its cache's health since (records of 0.1.0 have none: a mirror in place).
    #[serde(default)]
    health: health::Record,
}

pub struct MirrorGate;

impl Plugin for MirrorGate {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "mirror-gate",
            env!("CARGO_PKG_VERSION"),
            "writes containerd hosts.toml for a registry cache only while the cache answers",
        )
    }

    fn reconcile(ctx: &Context, host: &dyn Host) -> Result<Outcome> {
        reconcile_at(ctx, host, tend_sdk::wall_clock_ms())
    }
}

/// One reconcile at `now` (milliseconds since the Unix epoch):
/// [`MirrorGate::reconcile`] at the wall clock's time; tests pick theirs.
pub fn reconcile_at(ctx: &Context, host: &dyn Host, now: u64) -> Result<Outcome> {
    let config: Config = ctx.config()?;
    validate(&config)?;
    let probes = probe_all(host, &config);
    let mut reports = Vec::new();
    for (cache, probe) in config.caches.iter().zip(probes) {
        reports.push(settle(ctx, host, &config, cache, probe, now)?);
    }
    let removed = remove_unconfigured(ctx, host, &config, now)?;
    Ok(summarize(&reports, removed))
}

fn validate(config: &Config) -> Result<()> {
    let mut seen = BTreeSet::new();
    for cache in &config.caches {
        validate_cache(cache)?;
        if !seen.insert(cache.upstream.as_str()) {
            return Err(Error::Invalid(format!(
                "upstream {} has two caches: give each upstream one cache",
                cache.upstream
            )));
        }
    }
    Ok(())
}

fn validate_cache(cache: &Cache) -> Result<()> {
    let upstream = &cache.upstream;
    if upstream.is_empty() || upstream.contains(['/', '\\']) || upstream.starts_with('.') {
        return Err(Error::Invalid(format!(
            "cache upstream {upstream:?} must be a registry host such as \"docker.io\""
        )));
    }
    if !(cache.endpoint.starts_with("http://") || cache.endpoint.starts_with("https://")) {
        return Err(Error::Invalid(format!(
            "cache endpoint {:?} for {upstream} must start with http:// or https://",
            cache.endpoint
        )));
    }
    Ok(())
}

/// Probe every cache at once with `GET <endpoint>/v2/`: Ok when it answers
/// with an accepted status; else why not. Concurrent, so dead caches cost one
/// probe timeout per reconcile, not one each.
fn probe_all(host: &dyn Host, config: &Config) -> Vec<std::result::Result<(), String>> {
    let timeout = Duration::from_millis(config.probe_timeout_ms);
    let requests: Vec<Request> = config
        .caches
        .iter()
        .map(|cache| {
            let url = format!("{}/v2/", cache.endpoint.trim_end_matches('/'));
            Request::get(&url).timeout(timeout)
        })
        .collect();
    let responses = host.http().send_all(&requests);
    config
        .caches
        .iter()
        .zip(&requests)
        .zip(responses)
        .map(|((cache, request), response)| match response {
            Ok(response) if cache.accept_status.contains(&response.status) => Ok(()),
            Ok(response) => Err(format!("GET {} answered {}", request.url, response.status)),
            // A denied probe is a configuration error the operator must fix: say so.
            Err(e @ Error::Denied(_)) => Err(e.to_string()),
            Err(e) => Err(e.message().to_string()),
        })
        .collect()
}

fn hosts_path(certs_dir: &str, upstream: &str) -> String {
    format!("{}/{upstream}/hosts.toml", certs_dir.trim_end_matches('/'))
}

/// How one cache stands after this reconcile.
struct Report {
    /// "docker.io: mirror via http://10.0.0.5:5000 (healthy)"
    text: String,
    health: Health,
    /// Its hosts.toml is in place.
    mirrored: bool,
    /// When it should be probed again, in milliseconds from now.
    recheck_ms: Option<u64>,
}

/// Act on one cache's probe: write, keep, withdraw or restore its mirror as
/// [`health::step`] decides, and remember what was done.
fn settle(
    ctx: &Context,
    host: &dyn Host,
    config: &Config,
    cache: &Cache,
    probe: std::result::Result<(), String>,
    now: u64,
) -> Result<Report> {
    let upstream = &cache.upstream;
    let key = format!("{WRITTEN}{upstream}");
    let previous: Option<Written> = host.state().get_json(&key)?;
    let seen = if probe.is_ok() {
        Probe::Answering
    } else {
        Probe::Failing
    };
    let why = probe.err().unwrap_or_default();
    let step = health::step(
        previous.as_ref().map(|written| &written.health),
        seen,
        now,
        &config.thresholds(),
    );
    let Some(record) = step.record else {
        host.log(Level::Info, &format!("{upstream}: cache not ready: {why}"));
        publish(ctx, host, upstream, 0, false);
        return Ok(Report {
            text: format!("waiting for {upstream} ({why})"),
            health: Health::Progressing,
            mirrored: false,
            recheck_ms: step.recheck_ms,
        });
    };
    let configured_path = hosts_path(&config.certs_dir, upstream);
    let written_path = previous
        .as_ref()
        .map_or(configured_path.as_str(), |written| &written.path);
    match step.action {
        Action::Write | Action::Restore => {
            let in_place = previous
                .as_ref()
                .is_some_and(|written| written.health.withdrawn.is_none());
            if !in_place && is_foreign(host, &configured_path, cache)? {
                // What stands where a withdrawn mirror was is someone else's now.
                if previous.is_some() {
                    host.state().delete(&key)?;
                }
                publish(ctx, host, upstream, step.withdrawn_ms, false);
                return Ok(Report {
                    text: format!(
                        "{upstream}: not overwriting {configured_path} (not written by mirror-gate; set adopt = true on the cache to take it over)"
                    ),
                    health: Health::Degraded,
                    mirrored: false,
                    recheck_ms: None,
                });
            }
            // Remember before writing: a crash between the two leaves a file
            // we will still recognise as ours.
            remember(host, &key, previous.as_ref(), &configured_path, &record)?;
            write_mirror(host, cache, &configured_path, step.action)?;
        }
        Action::Withdraw => {
            // Remove before remembering: a crash between the two withdraws again.
            host.files().remove(written_path)?;
            host.log(
                Level::Warn,
                &format!("{upstream}: mirror withdrawn from {written_path}: {why}"),
            );
            remember(host, &key, previous.as_ref(), written_path, &record)?;
        }
        Action::Wait | Action::Keep | Action::StayWithdrawn => {
            remember(host, &key, previous.as_ref(), written_path, &record)?;
        }
    }
    publish(
        ctx,
        host,
        upstream,
        step.withdrawn_ms,
        record.withdrawn.is_some(),
    );
    let (text, health) = describe(config, cache, record.standing(now), &why);
    Ok(Report {
        text,
        health,
        mirrored: record.withdrawn.is_none(),
        recheck_ms: step.recheck_ms,
    })
}

/// Write the cache's hosts.toml, logging when that changed the file.
fn write_mirror(host: &dyn Host, cache: &Cache, path: &str, action: Action) -> Result<()> {
    let content = hosts::render(&cache.upstream, &cache.endpoint, &cache.capabilities);
    if host.files().write(path, content.as_bytes(), Some(0o644))? {
        let done = match action {
            Action::Restore => "restored",
            _ => "enabled",
        };
        host.log(
            Level::Info,
            &format!(
                "{}: mirror via {} {done} in {path}",
                cache.upstream, cache.endpoint
            ),
        );
    }
    Ok(())
}

/// A written mirror as it stands, for the outcome: its text and health.
fn describe(config: &Config, cache: &Cache, standing: Standing, why: &str) -> (String, Health) {
    let upstream = &cache.upstream;
    let mirror = format!("{upstream}: mirror via {}", cache.endpoint);
    match standing {
        Standing::Answering => (format!("{mirror} (healthy)"), Health::Healthy),
        Standing::Failing { for_ms } => (
            format!(
                "{mirror} (failing for {}, withdrawn after {}: {why})",
                human(for_ms),
                human(config.withdraw_after_ms)
            ),
            Health::Progressing,
        ),
        Standing::Withdrawn {
            for_ms,
            answering_for_ms: None,
        } => (
            format!(
                "{upstream}: withdrawn {} (not answering: {why})",
                human(for_ms)
            ),
            Health::Degraded,
        ),
        Standing::Withdrawn {
            for_ms,
            answering_for_ms: Some(answering_for),
        } => (
            format!(
                "{upstream}: withdrawn {} (answering for {}, restored after {})",
                human(for_ms),
                human(answering_for),
                human(config.restore_after_ms)
            ),
            Health::Degraded,
        ),
    }
}

/// A hosts.toml exists at `path` that mirror-gate would not write, and the
/// cache does not say to adopt it.
fn is_foreign(host: &dyn Host, path: &str, cache: &Cache) -> Result<bool> {
    if cache.adopt {
        return Ok(false);
    }
    let content = hosts::render(&cache.upstream, &cache.endpoint, &cache.capabilities);
    Ok(host
        .files()
        .read_string(path)?
        .is_some_and(|existing| existing != content))
}

/// Store what is known of a cache's mirror, unless that is what is stored.
fn remember(
    host: &dyn Host,
    key: &str,
    previous: Option<&Written>,
    path: &str,
    health: &health::Record,
) -> Result<()> {
    let written = Written {
        path: path.to_string(),
        health: health.clone(),
    };
    if previous != Some(&written) {
        host.state().set_json(key, &written)?;
    }
    Ok(())
}

/// Count a cache's withdrawn time and whether it is withdrawn now. Not in a
/// dry run, whose state is not kept: the next real reconcile counts the same
/// time. A dashboard number is not worth failing the gate over: a metric the
/// host refuses (say, past its series limit) is logged.
fn publish(ctx: &Context, host: &dyn Host, upstream: &str, withdrawn_ms: u64, withdrawn: bool) {
    if ctx.dry_run {
        return;
    }
    let labels = [("cache", upstream)];
    let metrics = host.metrics();
    let published = metrics
        .counter_add(WITHDRAWN_SECONDS, &labels, withdrawn_ms as f64 / 1000.0)
        .and_then(|()| metrics.gauge_set(WITHDRAWN, &labels, f64::from(u8::from(withdrawn))));
    if let Err(e) = published {
        host.log(
            Level::Warn,
            &format!("{upstream}: metrics not updated: {e}"),
        );
    }
}

/// Remove the hosts.toml this plugin wrote for upstreams no longer configured.
/// A withdrawn mirror's file is gone already: whatever stands there now is
/// someone else's and stays.
fn remove_unconfigured(ctx: &Context, host: &dyn Host, config: &Config, now: u64) -> Result<usize> {
    let mut removed = 0;
    for key in host.state().list_keys(WRITTEN)? {
        let upstream = &key[WRITTEN.len()..];
        if config.caches.iter().any(|c| c.upstream == upstream) {
            continue;
        }
        if let Some(written) = host.state().get_json::<Written>(&key)? {
            if written.health.withdrawn.is_none() {
                removed += usize::from(remove_mirror(host, upstream, &written.path)?);
            }
            let uncounted = written.health.uncounted_withdrawn_ms(now);
            publish(ctx, host, upstream, uncounted, false);
        }
        host.state().delete(&key)?;
    }
    Ok(removed)
}

/// Remove a hosts.toml mirror-gate wrote, and its directory unless someone
/// else put files there; whether the file was there.
fn remove_mirror(host: &dyn Host, upstream: &str, path: &str) -> Result<bool> {
    let removed = host.files().remove(path)?;
    if removed {
        host.log(Level::Info, &format!("{upstream}: mirror removed ({path})"));
    }
    if let Some((dir, _)) = path.rsplit_once('/') {
        match host.files().remove(dir) {
            Ok(_) | Err(Error::Conflict(_)) | Err(Error::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

/// "N mirror(s) active[, R removed]", then each cache as it stands; the worst
/// health of any cache, and the soonest recheck any asked for.
fn summarize(reports: &[Report], removed: usize) -> Outcome {
    let mirrored = reports.iter().filter(|report| report.mirrored).count();
    let mut message = format!("{mirrored} mirror(s) active");
    if removed > 0 {
        message += &format!(", {removed} removed");
    }
    for report in reports {
        message += "; ";
        message += &report.text;
    }
    let rank = |health: Health| match health {
        Health::Healthy => 0,
        Health::Progressing => 1,
        Health::Degraded => 2,
    };
    let health = reports
        .iter()
        .map(|report| report.health)
        .max_by_key(|&health| rank(health))
        .unwrap_or(Health::Healthy);
    Outcome {
        health,
        message,
        requeue_after_ms: reports.iter().filter_map(|report| report.recheck_ms).min(),
    }
}

/// A duration for operators, to the second: "0s", "45s", "1m30s", "2h5m0s".
fn human(ms: u64) -> String {
    let secs = ms / 1000;
    let (hours, minutes, seconds) = (secs / 3600, secs / 60 % 60, secs % 60);
    match (hours, minutes) {
        (0, 0) => format!("{seconds}s"),
        (0, _) => format!("{minutes}m{seconds}s"),
        _ => format!("{hours}h{minutes}m{seconds}s"),
    }
}

tend_sdk::export_plugin!(MirrorGate, uses: [files, http, metrics, state]);

#[cfg(test)]
mod tests;
