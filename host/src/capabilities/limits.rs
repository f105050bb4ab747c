//! `[plugins.<name>.limits]`: everything a plugin can make the host spend has
//! a bound, with safe defaults. Going over one fails the call with `invalid`
//! (one call too large) or `budget-exhausted` (a reconcile's or a minute's
//! total), naming the key to raise.

use crate::units::{self, ByteSize};
use serde::Deserialize;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Limits {
    /// Total linear memory of the instance.
    pub memory: ByteSize,
    /// Wall clock of one reconcile, host calls included.
    #[serde(with = "units::duration")]
    pub timeout: Duration,
    /// Bytes one `files.read` may return.
    pub read_per_call: ByteSize,
    /// Bytes all reads of one reconcile may return.
    pub read_per_reconcile: ByteSize,
    /// Mutations (performed, planned or refused) one reconcile may record.
    pub mutations: u32,
    /// Journal bytes one reconcile may write.
    pub journal_per_reconcile: ByteSize,
    /// Keys the plugin may keep in `state`.
    pub state_keys: u32,
    /// Bytes (keys and values) the plugin may keep in `state`.
    pub state_bytes: ByteSize,
    /// Bytes of state a dry run may hold in its overlay.
    pub dry_run_overlay: ByteSize,
    /// Log lines and bytes per reconcile, and per minute across reconciles.
    pub log_lines: u32,
    pub log_bytes: ByteSize,
    pub log_lines_per_minute: u32,
    pub log_bytes_per_minute: ByteSize,
    /// The shortest `requeue-after` honoured; shorter requests wait this long.
    #[serde(with = "units::duration")]
    pub min_requeue: Duration,
    /// Kubernetes API requests per second (a token bucket kept across
    /// reconciles; a call waits for a token, within the reconcile's deadline).
    pub kube_qps: u32,
    /// Requests the bucket holds: a reconcile may make this many at once.
    pub kube_burst: u32,
    /// Watch caches this plugin's lists may start (beyond: direct reads).
    pub kube_caches: u32,
    /// Bytes (serialized objects) of the watch caches this plugin started
    /// (beyond: no new caches, direct reads).
    pub kube_cache_bytes: ByteSize,
    /// Cloud API requests per second (every page counts; a token bucket kept
    /// across reconciles, waited for as `kube-qps`).
    pub cloud_qps: u32,
    /// Cloud requests the bucket holds.
    pub cloud_burst: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory: ByteSize(64 << 20),
            timeout: Duration::from_secs(30),
            read_per_call: ByteSize(16 << 20),
            read_per_reconcile: ByteSize(64 << 20),
            mutations: 256,
            journal_per_reconcile: ByteSize(1 << 20),
            state_keys: 1000,
            state_bytes: ByteSize(16 << 20),
            dry_run_overlay: ByteSize(16 << 20),
            log_lines: 1000,
            log_bytes: ByteSize(64 << 10),
            log_lines_per_minute: 3000,
            log_bytes_per_minute: ByteSize(256 << 10),
            min_requeue: Duration::from_secs(1),
            // client-go's defaults for a whole client, here per plugin.
            kube_qps: 5,
            kube_burst: 10,
            kube_caches: 16,
            kube_cache_bytes: ByteSize(32 << 20),
            cloud_qps: 5,
            cloud_burst: 10,
        }
    }
}

/// "raise [plugins.NAME.limits] KEY (now VALUE) if the work is legitimate".
pub fn raise(plugin: &str, key: &str, now: impl std::fmt::Display) -> String {
    format!("raise [plugins.{plugin}.limits] {key} (now {now}) if the work is legitimate")
}
