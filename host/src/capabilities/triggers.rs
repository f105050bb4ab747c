//! A capability's trigger source: it notices changes outside the scheduler
//! (a unit's active state) and reconciles the plugins whose grant asks to
//! watch them. A capability declares one with
//! [`Capability::trigger_source`](super::Capability::trigger_source); the
//! registration list collects them ([`super::Backends::trigger_sources`],
//! each behind a [`super::GrantsSource`] that picks its grant),
//! so the scheduler starts every capability's source without naming it.
//! The capability knows its grants, not the config or the scheduler: the
//! scheduler hands it each enabled plugin's grants and a [`TriggerSink`].

use std::sync::Arc;

/// Where a trigger source sends a change it noticed: the scheduler.
pub trait TriggerSink: Send + Sync + 'static {
    /// Reconcile `plugin` with a trigger of `kind` about `subject` (the
    /// unit, the object): dropped when the plugin is not scheduled.
    fn reconcile(&self, plugin: &str, kind: &'static str, subject: String);
}

/// A capability's trigger source over its own grant type.
pub trait TriggerSource<Grant>: Send {
    /// Watch what `watchers` (every enabled plugin, with its grant of this
    /// capability) ask for, replacing what was watched before.
    fn update(&mut self, watchers: Vec<(String, Grant)>, sink: Arc<dyn TriggerSink>);
    /// What a plugin holding `grant` waits on from this source, in words,
    /// for `tend status NAME`.
    fn waits_on(&self, grant: &Grant) -> Vec<String>;
}
