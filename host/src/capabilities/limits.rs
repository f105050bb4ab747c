//! `[plugins.<name>.limits]`: everything a plugin can make the host spend has
//! a bound, with safe defaults. Going over one fails the call with `invalid`
//! (one call too large) or `budget-exhausted` (a reconcile's or a minute's
//! total), naming the key to raise.

use crate::units::{self, ByteSize};
use serde::Deserialize;
use std::time::Duration;

/// What bounds the plugin itself, whatever it is granted: memory, time,
/// reads, mutations, the journal, the dry run, requeues. Each capability's
/// own bounds (`kube-qps`) are its `Capability::Limits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Limits {
    /// Total linear memory of the instance.
    pub memory: ByteSize,
    /// Wall clock of one reconcile, host calls included.
    #[serde(with = "units::duration")]
    pub timeout: Duration,
    /// Bytes one read (`files.read`) may return.
    pub read_per_call: ByteSize,
    /// Bytes all reads of one reconcile may return (files, cloud listings).
    pub read_per_reconcile: ByteSize,
    /// Mutations (performed, planned or refused) one reconcile may record.
    pub mutations: u32,
    /// Journal bytes one reconcile may write.
    pub journal_per_reconcile: ByteSize,
    /// Bytes of state a dry run may hold in its overlay.
    pub dry_run_overlay: ByteSize,
    /// The shortest `requeue-after` honoured; shorter requests wait this long.
    #[serde(with = "units::duration")]
    pub min_requeue: Duration,
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
            dry_run_overlay: ByteSize(16 << 20),
            min_requeue: Duration::from_secs(1),
        }
    }
}

/// A call refused at one of the reconcile's own bounds: `budget-exhausted`,
/// named `[limit]`; `why` says which bound and how to raise it ([`raise`]).
pub fn over_limit(why: &str) -> super::error::CapError {
    super::error::CapError::BudgetExhausted(tend_rules::reason::Reason::Limit.tag(why))
}

/// "raise [plugins.NAME.limits] KEY (now VALUE) if the work is legitimate".
pub fn raise(plugin: &str, key: &str, now: impl std::fmt::Display) -> String {
    format!("raise [plugins.{plugin}.limits] {key} (now {now}) if the work is legitimate")
}
