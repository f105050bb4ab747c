//! ipam-sweeper: release host-local IPAM allocations that no pod sandbox owns.
//!
//! host-local keeps one file per allocated IP in `<networks-dir>/<network>/`
//! (`10.85.0.7`, `fd00::7`), whose first line is the id of the pod sandbox
//! holding it. When a sandbox dies without a CNI DEL (a runtime crash, a
//! reboot, a failed teardown) its file stays, and the range runs dry. Each
//! pass this plugin lists the runtime's sandboxes once over CRI, lists each
//! network directory once and reads each allocation file once; an allocation
//! whose sandbox no longer exists or is not READY (or whose file names no
//! sandbox) is an orphan, and is released (its file removed through `files`,
//! so it passes the host's mutation gate, budgets and plan) once it has stayed
//! orphaned, with the same owner, for `grace`: a sandbox being created has
//! its IP before the runtime lists it. Only files named as an IP are
//! touched: host-local's `lock` and `last_reserved_ip.<n>` never are.
//!
//! Safety: when the sandboxes cannot be listed the pass releases nothing
//! (an empty answer from a failed call must not read as "no pods"); when two
//! READY sandboxes share a pod UID, the pass is aborted and both named. An
//! allocation's owner is read again just before its file is removed, so an
//! IP handed out again meanwhile is kept.
//!
//! NOTREADY sandboxes created more than `notready-max-age` ago are reported;
//! with `remove-notready = true` they are removed over CRI
//! (`cri.remove-pod-sandbox`, which a host budget can bound). Off by default:
//! removing a sandbox also removes its containers, and so the logs of a
//! completed pod.
//!
//! Orphan timers live in `state` as one JSON value (`orphans`), keyed by
//! "<network>/<ip>"; the outcome says what was released (in a dry run: would
//! be), what is waiting out its grace and how long is left, and what was
//! refused and why, and asks to run again when the next grace ends.
//!
//! ```toml
//! [plugins.ipam-sweeper]
//! interval = "1m"
//! [plugins.ipam-sweeper.grants]
//! files = [{ path = "/var/lib/cni/networks", write = true }]
//! # "remove-pod-sandbox" only with remove-notready = true, and only of
//! # NOTREADY sandboxes: the host refuses a READY one, whatever asks
//! cri = { read = true, operations = ["remove-pod-sandbox"], states = ["notready"] }
//! [plugins.ipam-sweeper.config]
//! networks-dir = "/var/lib/cni/networks"  # the default
//! networks = ["cbr0"]                     # default: every subdirectory
//! grace = "5m"
//! notready-max-age = "1h"
//! remove-notready = false
//!
//! [host.budgets.ip-releases]
//! operations = ["files.remove"]
//! max = 100
//! per = "10m"
//! [host.budgets.sandbox-removals]
//! operations = ["cri.remove-pod-sandbox"]
//! max = 5
//! per = "1h"
//! ```

mod sweep;

use serde::Deserialize;
use std::net::IpAddr;
use std::time::Duration;
use sweep::{Allocation, Orphaned, Orphans};
use tend_sdk::{
    Context, Error, FileKind, Host, Outcome, Plugin, PluginInfo, Result, SandboxFilter,
};

/// State key of the orphan timers ([`sweep::Orphans`]).
const ORPHANS: &str = "orphans";

/// At most this many items of one kind are named in the outcome (the
/// journal and the plan list every mutation).
const SHOWN: usize = 10;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Config {
    #[serde(default = "default_networks_dir")]
    networks_dir: String,
    /// Network names; every subdirectory of networks-dir when absent.
    networks: Option<Vec<String>>,
    /// How long an allocation stays orphaned before it is released.
    #[serde(default = "default_grace", with = "humantime_serde")]
    grace: Duration,
    /// NOTREADY sandboxes older than this are reported (or removed).
    #[serde(default = "default_notready_max_age", with = "humantime_serde")]
    notready_max_age: Duration,
    #[serde(default)]
    remove_notready: bool,
}

fn default_networks_dir() -> String {
    "/var/lib/cni/networks".into()
}
fn default_grace() -> Duration {
    Duration::from_secs(5 * 60)
}
fn default_notready_max_age() -> Duration {
    Duration::from_secs(60 * 60)
}

impl Config {
    /// The plugin's config; an `invalid` error names the key that is wrong.
    fn load(ctx: &Context) -> Result<Config> {
        let invalid = |key: &str, why: &str| ctx.invalid_config(key, why);
        let config: Config = ctx.config()?;
        if !config.networks_dir.starts_with('/') {
            return Err(invalid(
                "networks-dir",
                "must be an absolute path such as \"/var/lib/cni/networks\"",
            ));
        }
        let names = config.networks.as_deref().unwrap_or(&[]);
        if config.networks.is_some() && names.is_empty() {
            return Err(invalid(
                "networks",
                "lists no network: name at least one, or leave it out to sweep every network",
            ));
        }
        let not_a_name = |n: &&String| n.is_empty() || n.contains('/') || *n == "." || *n == "..";
        if let Some(bad) = names.iter().find(not_a_name) {
            return Err(invalid(
                "networks",
                &format!("{bad:?} is not a network name (a directory in networks-dir)"),
            ));
        }
        if config.grace.is_zero() {
            return Err(invalid(
                "grace",
                "must be more than 0s: a sandbox being created holds its IP before the runtime lists it",
            ));
        }
        if config.notready_max_age.is_zero() {
            return Err(invalid("notready-max-age", "must be more than 0s"));
        }
        Ok(config)
    }
}

pub struct IpamSweeper;

impl Plugin for IpamSweeper {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "ipam-sweeper",
            env!("CARGO_PKG_VERSION"),
            "releases host-local IPAM allocations whose pod sandbox is gone or not ready, after a grace period",
        )
    }

    fn reconcile(ctx: &Context, host: &dyn Host) -> Result<Outcome> {
        run(ctx, host, tend_sdk::wall_clock_ms())
    }
}

/// One pass at wall-clock time `now_ms` (milliseconds since the epoch).
pub fn run(ctx: &Context, host: &dyn Host, now_ms: u64) -> Result<Outcome> {
    let config = Config::load(ctx)?;
    let sandboxes = match host.cri().list_pod_sandboxes(&SandboxFilter::default()) {
        Ok(sandboxes) => sandboxes,
        Err(e) => {
            return Ok(Outcome::degraded(format!(
                "released nothing: listing pod sandboxes failed: {e}"
            )));
        }
    };
    let shared = sweep::shared_uids(&sandboxes);
    if !shared.is_empty() {
        let shared: Vec<String> = shared
            .iter()
            .map(|(uid, ids)| format!("pod uid {uid} has READY sandboxes {}", ids.join(", ")))
            .collect();
        return Ok(Outcome::degraded(format!(
            "aborted, released nothing: {}",
            shared.join("; ")
        )));
    }
    let scan = scan(host, &config)?;
    let previous: Orphans = host.state().get_json(ORPHANS)?.unwrap_or_default();
    let grace_ms = config.grace.as_millis() as u64;
    let (orphaned, mut orphans) =
        sweep::judge(&scan.allocations, &sandboxes, &previous, grace_ms, now_ms);

    let mut report = Report {
        dry_run: ctx.dry_run,
        allocations: scan.allocations.len(),
        networks: scan.networks,
        sandboxes: sandboxes.len(),
        notes: scan.notes,
        ..Report::default()
    };
    let mut stopped = false;
    for orphan in &orphaned {
        if orphan.left_ms > 0 {
            report.waiting.push((orphan.describe(), orphan.left_ms));
        } else if stopped {
            report.untried += 1;
        } else {
            match release(host, orphan) {
                Ok(released) => {
                    orphans.remove(&orphan.allocation.key());
                    if released {
                        report.released.push(orphan.describe());
                    }
                }
                Err(e) => {
                    stopped = stops_the_pass(&e);
                    report.refused.push(format!("{}: {e}", orphan.describe()));
                }
            }
        }
    }
    sweep_not_ready(host, &config, &sandboxes, now_ms, &mut report);

    if orphans != previous {
        if orphans.is_empty() {
            host.state().delete(ORPHANS)?;
        } else {
            host.state().set_json(ORPHANS, &orphans)?;
        }
    }
    Ok(report.outcome(&config))
}

/// The allocations found, and what could not be swept.
struct Scan {
    allocations: Vec<Allocation>,
    networks: usize,
    notes: Vec<String>,
}

/// Every allocation file of the swept networks: one listing per network
/// directory, one read per file.
fn scan(host: &dyn Host, config: &Config) -> Result<Scan> {
    let root = config.networks_dir.trim_end_matches('/');
    let mut notes = Vec::new();
    let networks = match &config.networks {
        Some(names) => names.clone(),
        None => match host.files().list(root) {
            Ok(entries) => entries
                .into_iter()
                .filter(|e| e.kind == FileKind::Directory)
                .map(|e| e.name)
                .collect(),
            Err(Error::NotFound(_)) => {
                notes.push(format!("{root} does not exist"));
                vec![]
            }
            Err(e) => return Err(e),
        },
    };
    let mut allocations = Vec::new();
    for network in &networks {
        let dir = format!("{root}/{network}");
        let entries = match host.files().list(&dir) {
            Ok(entries) => entries,
            Err(Error::NotFound(_)) => {
                notes.push(format!("{dir} does not exist"));
                continue;
            }
            Err(e) => return Err(e),
        };
        // Only files named as an IP are allocations: `lock` and
        // `last_reserved_ip.<n>` are host-local's own.
        let ips = entries
            .into_iter()
            .filter(|e| e.kind == FileKind::File && e.name.parse::<IpAddr>().is_ok());
        for entry in ips {
            let path = format!("{dir}/{}", entry.name);
            let contents = match host.files().read(&path) {
                Ok(contents) => contents,
                // Released by host-local since the listing.
                Err(Error::NotFound(_)) => continue,
                Err(e) => return Err(e),
            };
            allocations.push(Allocation {
                network: network.clone(),
                ip: entry.name,
                path,
                owner: sweep::owner_of(&contents),
            });
        }
    }
    Ok(Scan {
        allocations,
        networks: networks.len(),
        notes,
    })
}

/// Remove an orphan's file, unless the file now names another owner (the IP
/// was handed out again since it was read) or is gone: true when removed.
fn release(host: &dyn Host, orphan: &Orphaned) -> Result<bool> {
    let allocation = orphan.allocation;
    match host.files().read(&allocation.path) {
        Ok(contents) if sweep::owner_of(&contents) == allocation.owner => {
            host.files().remove(&allocation.path)
        }
        Ok(_) | Err(Error::NotFound(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// A refusal that every further mutation of this pass would meet too (a
/// missing grant, a spent budget): stop trying, rather than have each one
/// refused and journaled.
fn stops_the_pass(error: &Error) -> bool {
    matches!(error, Error::Denied(_) | Error::BudgetExhausted(_))
}

/// Report NOTREADY sandboxes older than notready-max-age, and remove them
/// when remove-notready is set.
fn sweep_not_ready(
    host: &dyn Host,
    config: &Config,
    sandboxes: &[tend_sdk::PodSandbox],
    now_ms: u64,
    report: &mut Report,
) {
    let max_age_ms = config.notready_max_age.as_millis() as u64;
    let mut stopped = false;
    for (sandbox, age_ms) in sweep::stale_not_ready(sandboxes, max_age_ms, now_ms) {
        let name = format!(
            "{} ({}/{}, {} old)",
            sweep::short(&sandbox.id),
            sandbox.namespace,
            sandbox.pod_name,
            human(age_ms)
        );
        if !config.remove_notready {
            report.stale.push(name);
        } else if stopped {
            report.untried += 1;
        } else {
            match host.cri().remove_pod_sandbox(&sandbox.id) {
                Ok(()) => report.removed.push(name),
                Err(e) => {
                    stopped = stops_the_pass(&e);
                    report.refused.push(format!("sandbox {name}: {e}"));
                }
            }
        }
    }
}

/// What one pass found and did, for the outcome.
#[derive(Default)]
struct Report {
    dry_run: bool,
    allocations: usize,
    networks: usize,
    sandboxes: usize,
    released: Vec<String>,
    /// Orphans within their grace, with the milliseconds left.
    waiting: Vec<(String, u64)>,
    refused: Vec<String>,
    /// Mutations not tried after a refusal that would refuse them too.
    untried: usize,
    /// NOTREADY sandboxes past the age limit, reported only.
    stale: Vec<String>,
    /// NOTREADY sandboxes past the age limit, removed.
    removed: Vec<String>,
    notes: Vec<String>,
}

impl Report {
    fn outcome(self, config: &Config) -> Outcome {
        let would =
            |done: &str, planned: &str| if self.dry_run { planned } else { done }.to_string();
        let mut parts = vec![format!(
            "{} allocation(s) in {} network(s), {} sandbox(es)",
            self.allocations, self.networks, self.sandboxes
        )];
        if !self.released.is_empty() {
            parts.push(format!(
                "{} {} IP(s): {}",
                would("released", "would release"),
                self.released.len(),
                shown(&self.released)
            ));
        }
        if !self.waiting.is_empty() {
            let waiting: Vec<String> = self
                .waiting
                .iter()
                .map(|(what, left_ms)| format!("{what} {} left", human(*left_ms)))
                .collect();
            parts.push(format!(
                "{} orphaned IP(s) waiting out the {} grace: {}",
                waiting.len(),
                human(config.grace.as_millis() as u64),
                shown(&waiting)
            ));
        }
        if !self.refused.is_empty() {
            let mut refused = format!("refused: {}", shown(&self.refused));
            if self.untried > 0 {
                refused += &format!(" ({} more not tried)", self.untried);
            }
            parts.push(refused);
        }
        let max_age = human(config.notready_max_age.as_millis() as u64);
        if !self.stale.is_empty() {
            parts.push(format!(
                "NOTREADY for over {max_age} (set remove-notready = true to remove them): {}",
                shown(&self.stale)
            ));
        }
        if !self.removed.is_empty() {
            parts.push(format!(
                "{} {} NOTREADY sandbox(es) older than {max_age}: {}",
                would("removed", "would remove"),
                self.removed.len(),
                shown(&self.removed)
            ));
        }
        parts.extend(self.notes);
        let message = parts.join("; ");
        let next_grace_end = self.waiting.iter().map(|(_, left_ms)| *left_ms).min();
        let outcome = if !self.refused.is_empty() {
            Outcome::degraded(message)
        } else if next_grace_end.is_some() {
            Outcome::progressing(message)
        } else {
            Outcome::healthy(message)
        };
        match next_grace_end {
            Some(left_ms) => outcome.requeue_after(Duration::from_millis(left_ms)),
            None => outcome,
        }
    }
}

/// The first [`SHOWN`] items, then how many more.
fn shown(items: &[String]) -> String {
    let mut text = items[..items.len().min(SHOWN)].join(", ");
    if items.len() > SHOWN {
        text += &format!(" and {} more", items.len() - SHOWN);
    }
    text
}

/// A duration for operators, rounded up to the second: "4m 12s".
fn human(ms: u64) -> String {
    tend_sdk::human_duration(Duration::from_millis(ms))
}

tend_sdk::export_plugin!(IpamSweeper, uses: [cri, files, state]);

#[cfg(test)]
mod tests;
