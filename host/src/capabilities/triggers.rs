//! A capability's trigger source: it notices changes outside the scheduler
//! (a unit's active state) and reconciles the plugins whose grant asks to
//! watch them. A capability declares one with
//! [`Capability::trigger_source`](super::Capability::trigger_source); the
//! registration list collects them ([`super::Backends::trigger_sources`]),
//! so the scheduler starts every capability's source without naming it.
//! The capability knows its grants, not the config or the scheduler: the
//! scheduler hands it each enabled plugin's grants and a [`TriggerSink`].

use super::registry::Grants;
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

/// A capability's trigger source as the scheduler holds it: told every
/// plugin's [`Grants`], it picks its own capability's grant.
pub trait GrantsSource: Send {
    /// Watch for `plugins` (every enabled plugin, with its grants).
    fn update(&mut self, plugins: &[(&str, &Grants)], sink: Arc<dyn TriggerSink>);
    /// What a plugin holding `grants` waits on from this source, in words.
    fn waits_on(&self, grants: &Grants) -> Vec<String>;
}

/// A source with the accessor of its capability's grant in [`Grants`].
pub(super) struct Picked<Grant: 'static> {
    pub source: Box<dyn TriggerSource<Grant>>,
    pub pick: fn(&Grants) -> &Grant,
}

impl<Grant: Clone + 'static> GrantsSource for Picked<Grant> {
    fn update(&mut self, plugins: &[(&str, &Grants)], sink: Arc<dyn TriggerSink>) {
        let watchers = plugins
            .iter()
            .map(|(plugin, grants)| (plugin.to_string(), (self.pick)(grants).clone()))
            .collect();
        self.source.update(watchers, sink);
    }

    fn waits_on(&self, grants: &Grants) -> Vec<String> {
        self.source.waits_on((self.pick)(grants))
    }
}
