//! What every capability's fake shares: how [`crate::testing::FakeHost`]
//! makes one for a plugin, and scripted failures. Below the capability
//! modules, which implement and use it; `testing.rs` gathers the fakes.

/// What [`crate::testing::FakeHost::named`] needs of each capability's fake: one for the
/// plugin `plugin`, with nothing granted (the name appears in denial messages).
pub(crate) trait Fake {
    fn for_plugin(plugin: &str) -> Self;
}

/// Scripted failures of a fake: every call, or one call by its WIT name,
/// fails with a given error until cleared. Shared by the fakes that offer
/// `fail_with` and `fail_call`.
pub(crate) struct ScriptedFailures {
    /// The fake's name and its calls, for the message of an unknown call.
    fake: &'static str,
    calls: &'static [&'static str],
    all: std::cell::RefCell<Option<crate::Error>>,
    by_call: std::cell::RefCell<std::collections::BTreeMap<String, crate::Error>>,
}

impl ScriptedFailures {
    pub(crate) fn new(fake: &'static str, calls: &'static [&'static str]) -> Self {
        ScriptedFailures {
            fake,
            calls,
            all: Default::default(),
            by_call: Default::default(),
        }
    }

    pub(crate) fn fail_with(&self, error: Option<crate::Error>) {
        *self.all.borrow_mut() = error;
    }

    pub(crate) fn fail_call(&self, call: &str, error: Option<crate::Error>) {
        assert!(
            self.calls.contains(&call),
            "{}::fail_call: no call {call:?}, expected one of {:?}",
            self.fake,
            self.calls
        );
        let mut failures = self.by_call.borrow_mut();
        match error {
            Some(error) => failures.insert(call.to_string(), error),
            None => failures.remove(call),
        };
    }

    /// The scripted failure of `call`, if any.
    pub(crate) fn check(&self, call: &str) -> crate::Result<()> {
        match self.all.borrow().clone() {
            Some(error) => Err(error),
            None => self.by_call.borrow().get(call).cloned().map_or(Ok(()), Err),
        }
    }
}
