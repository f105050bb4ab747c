//! mirror-gate: point containerd at a registry cache only while the cache answers.
//!
//! A registry mirror configured before its cache is reachable makes every pull
//! wait for a timeout per request before falling back (node bootstrap slowed by
//! 10+ minutes in the field). For each configured cache this plugin probes
//! `GET <endpoint>/v2/` and writes `<certs-dir>/<upstream>/hosts.toml` only once
//! the cache answers; it removes the files it wrote for upstreams that leave
//! the config, and never touches a hosts.toml it did not write.

mod hosts;

use serde::Deserialize;
use std::time::Duration;
use tend_sdk::{Context, Error, Host, Level, Outcome, Plugin, PluginInfo, Request, Result};

/// State key prefix: one key per upstream whose hosts.toml this plugin wrote.
const WRITTEN: &str = "written/";

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
    /// How soon to look again while a cache is not answering yet.
    #[serde(default = "default_pending_requeue_ms")]
    pending_requeue_ms: u64,
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
fn default_accept() -> Vec<u16> {
    vec![200]
}
fn default_capabilities() -> Vec<String> {
    vec!["pull".into(), "resolve".into()]
}

/// What this plugin remembers about a hosts.toml it wrote.
#[derive(Debug, serde::Serialize, Deserialize)]
struct Written {
    path: String,
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
        let config: Config = ctx.config()?;
        for cache in &config.caches {
            validate(cache)?;
        }
        let mut active = Vec::new();
        let mut pending = Vec::new();
        let mut refused = Vec::new();
        for cache in &config.caches {
            match probe(host, cache, Duration::from_millis(config.probe_timeout_ms)) {
                Ok(()) => match apply(host, &config.certs_dir, cache)? {
                    Applied::Active => active.push(cache.upstream.clone()),
                    Applied::Foreign(path) => refused.push(path),
                },
                Err(why) => {
                    host.log(
                        Level::Info,
                        &format!("{}: cache not ready: {why}", cache.upstream),
                    );
                    pending.push(format!("{} ({why})", cache.upstream));
                }
            }
        }
        let removed = remove_unconfigured(host, &config)?;
        let mut message = format!("{} mirror(s) active", active.len());
        if removed > 0 {
            message += &format!(", {removed} removed");
        }
        if !refused.is_empty() {
            return Ok(Outcome::degraded(format!(
                "{message}; not overwriting {} (not written by mirror-gate; set adopt = true on the cache to take it over)",
                refused.join(", ")
            )));
        }
        if pending.is_empty() {
            return Ok(Outcome::healthy(message));
        }
        Ok(
            Outcome::progressing(format!("{message}; waiting for {}", pending.join(", ")))
                .requeue_after(Duration::from_millis(config.pending_requeue_ms)),
        )
    }
}

fn validate(cache: &Cache) -> Result<()> {
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

/// Ok when `GET <endpoint>/v2/` answers with an accepted status; else why not.
fn probe(host: &dyn Host, cache: &Cache, timeout: Duration) -> std::result::Result<(), String> {
    let url = format!("{}/v2/", cache.endpoint.trim_end_matches('/'));
    match host.http().send(&Request::get(&url).timeout(timeout)) {
        Ok(response) if cache.accept_status.contains(&response.status) => Ok(()),
        Ok(response) => Err(format!("GET {url} answered {}", response.status)),
        // A denied probe is a configuration error the operator must fix: fail loudly.
        Err(e @ Error::Denied(_)) => Err(e.to_string()),
        Err(e) => Err(e.message().to_string()),
    }
}

enum Applied {
    Active,
    /// A hosts.toml exists that mirror-gate did not write; left alone.
    Foreign(String),
}

fn apply(host: &dyn Host, certs_dir: &str, cache: &Cache) -> Result<Applied> {
    let path = format!(
        "{}/{}/hosts.toml",
        certs_dir.trim_end_matches('/'),
        cache.upstream
    );
    let key = format!("{WRITTEN}{}", cache.upstream);
    let ours = host.state().get(&key)?.is_some();
    let content = hosts::render(&cache.upstream, &cache.endpoint, &cache.capabilities);
    if !ours && !cache.adopt {
        match host.files().read_string(&path)? {
            Some(existing) if existing != content => return Ok(Applied::Foreign(path)),
            _ => {}
        }
    }
    // Remember before writing: a crash between the two leaves a file we will
    // still recognise as ours.
    host.state()
        .set_json(&key, &Written { path: path.clone() })?;
    if host.files().write(&path, content.as_bytes(), Some(0o644))? {
        host.log(
            Level::Info,
            &format!(
                "{}: mirror {} enabled in {path}",
                cache.upstream, cache.endpoint
            ),
        );
    }
    Ok(Applied::Active)
}

/// Remove the hosts.toml this plugin wrote for upstreams no longer configured.
fn remove_unconfigured(host: &dyn Host, config: &Config) -> Result<usize> {
    let mut removed = 0;
    for key in host.state().list_keys(WRITTEN)? {
        let upstream = &key[WRITTEN.len()..];
        if config.caches.iter().any(|c| c.upstream == upstream) {
            continue;
        }
        if let Some(written) = host.state().get_json::<Written>(&key)? {
            if host.files().remove(&written.path)? {
                host.log(
                    Level::Info,
                    &format!("{upstream}: mirror removed ({})", written.path),
                );
                removed += 1;
            }
            // The upstream's directory goes too, unless someone else put files there.
            if let Some((dir, _)) = written.path.rsplit_once('/') {
                match host.files().remove(dir) {
                    Ok(_) | Err(Error::Conflict(_)) | Err(Error::NotFound(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        host.state().delete(&key)?;
    }
    Ok(removed)
}

tend_sdk::export_plugin!(MirrorGate);

#[cfg(test)]
mod tests;
