//! A capability's watch: it notices changes outside the scheduler (a unit's
//! active state, a Kubernetes object) and reconciles the plugins whose grant
//! asks to watch them. One vocabulary: a [`Watch`] is a capability's, over its
//! own grant type; the scheduler's trigger sources (`scheduler::sources`)
//! include each capability's watch; every change reaches the scheduler as a
//! trigger through a [`TriggerSink`]. A capability declares one with
//! [`Capability::watch`](super::Capability::watch); the
//! registration list collects them ([`super::Backends::watches`],
//! each behind a [`super::CapabilityWatch`] that picks its grant),
//! so the scheduler starts every capability's watch without naming it.
//! The capability knows its grants, not the config or the scheduler: the
//! scheduler hands it each enabled plugin's grants and a [`TriggerSink`].

use std::sync::Arc;

/// Where a watch sends a change it noticed: the scheduler.
pub trait TriggerSink: Send + Sync + 'static {
    /// Reconcile `plugin` with a trigger of `kind` about `subject` (the
    /// unit, the object): dropped when the plugin is not scheduled.
    fn reconcile(&self, plugin: &str, kind: &'static str, subject: String);
}

/// A capability's watch over its own grant type.
pub trait Watch<Grant>: Send {
    /// Watch what `watchers` (every enabled plugin, with its grant of this
    /// capability) ask for, replacing what was watched before.
    fn update(&mut self, watchers: Vec<(String, Grant)>, sink: Arc<dyn TriggerSink>);
    /// What a plugin holding `grant` waits on from this source, in words,
    /// for `tend status NAME`.
    fn waits_on(&self, grant: &Grant) -> Vec<String>;
}
