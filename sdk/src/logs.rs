//! `tend:plugin/logs`: the node's kernel log and journal, read only, within
//! the sources, units and identifiers granted to the plugin; and the matches
//! of the grant's watch rules that woke it.

use crate::{NotProvided, Result};
use std::cell::RefCell;
use tend_rules::logs::{LineFacts, LogsGrant, Source};

/// The WIT records themselves: the host answers with these very types.
pub use crate::bindings::tend::plugin::logs::{
    Entry as LogEntry, Filter as LogFilter, Matched, Page as LogPage, Source as LogSource,
};

/// The node's logs, within the plugin's grant.
pub trait Logs {
    /// The matches of the grant's watch rules not taken yet (the ones that
    /// woke this reconcile among them); taken by this call, except in a dry run.
    fn matches(&self) -> Result<Vec<Matched>>;
    /// Up to `max` (1 to 1000) entries of `source` after `since`, filtered,
    /// oldest first; page on with the answer's `cursor`.
    fn read(
        &self,
        source: LogSource,
        since: Option<&str>,
        filter: &LogFilter,
        max: u32,
    ) -> Result<LogPage>;
}

impl Logs for NotProvided {
    fn matches(&self) -> Result<Vec<Matched>> {
        Err(NotProvided::denied("logs"))
    }
    fn read(&self, _: LogSource, _: Option<&str>, _: &LogFilter, _: u32) -> Result<LogPage> {
        Err(NotProvided::denied("logs"))
    }
}

/// The wasm glue: the host's `logs` imports.
#[cfg(target_arch = "wasm32")]
pub(crate) mod wasm {
    use super::{LogFilter, LogPage, LogSource, Matched};
    use crate::Result;
    use crate::bindings::tend::plugin::logs as wit;
    use crate::types::from_wit_error;

    pub(crate) struct WasmLogs;

    impl crate::Logs for WasmLogs {
        fn matches(&self) -> Result<Vec<Matched>> {
            wit::matches().map_err(from_wit_error)
        }
        fn read(
            &self,
            source: LogSource,
            since: Option<&str>,
            filter: &LogFilter,
            max: u32,
        ) -> Result<LogPage> {
            wit::read(source, since, filter, max).map_err(from_wit_error)
        }
    }
}

fn rules_source(source: LogSource) -> Source {
    match source {
        LogSource::Kernel => Source::Kernel,
        LogSource::Journal => Source::Journal,
    }
}

fn facts(entry: &LogEntry) -> LineFacts<'_> {
    LineFacts {
        source: rules_source(entry.source),
        priority: entry.priority,
        unit: entry.unit.as_deref(),
        identifier: entry.identifier.as_deref(),
    }
}

/// The fake: lines a test writes, behind the host's grant rules (nothing
/// granted until [`FakeLogs::grant`]); each written line runs the grant's
/// watch rules as the host does, so `matches` answers what the host would
/// (each rule keeps at most its burst untaken; the rest is counted missed).
pub struct FakeLogs {
    plugin: String,
    grant: RefCell<LogsGrant>,
    lines: RefCell<Vec<LogEntry>>,
    pending: RefCell<Vec<Matched>>,
}

impl crate::fake::Fake for FakeLogs {
    fn for_plugin(plugin: &str) -> Self {
        FakeLogs {
            plugin: plugin.to_string(),
            grant: RefCell::default(),
            lines: RefCell::default(),
            pending: RefCell::default(),
        }
    }
}

impl Default for FakeLogs {
    /// For a plugin named "test".
    fn default() -> Self {
        crate::fake::Fake::for_plugin("test")
    }
}

impl FakeLogs {
    /// Grant what `[plugins.NAME.grants] logs` would, given as its TOML's
    /// JSON twin: `{"kernel": true, "watch": [{"rule": "hung", ...}]}`.
    pub fn grant(&self, grant: serde_json::Value) -> &Self {
        let grant: LogsGrant =
            serde_json::from_value(grant).unwrap_or_else(|e| panic!("FakeLogs::grant: {e}"));
        self.extend_grant(&grant)
    }

    /// Add what `grant` grants (a grant already parsed).
    pub fn extend_grant(&self, grant: &LogsGrant) -> &Self {
        let mut current = self.grant.borrow_mut();
        current.kernel |= grant.kernel;
        current.units.extend(grant.units.iter().cloned());
        current
            .identifiers
            .extend(grant.identifiers.iter().cloned());
        current.watch.extend(grant.watch.iter().cloned());
        self
    }

    /// A kernel line.
    pub fn kernel(&self, priority: u8, message: &str) -> &Self {
        self.write(LogSource::Kernel, priority, None, None, message)
    }

    /// A journal entry of `unit` (or none) with `identifier` (or none).
    pub fn journal(
        &self,
        unit: Option<&str>,
        identifier: Option<&str>,
        priority: u8,
        message: &str,
    ) -> &Self {
        self.write(LogSource::Journal, priority, unit, identifier, message)
    }

    fn write(
        &self,
        source: LogSource,
        priority: u8,
        unit: Option<&str>,
        identifier: Option<&str>,
        message: &str,
    ) -> &Self {
        let seq = self
            .lines
            .borrow()
            .iter()
            .filter(|l| l.source == source)
            .count() as u64
            + 1;
        let entry = LogEntry {
            source,
            cursor: tend_rules::logs::fake_cursor(rules_source(source), seq),
            boot_id: "fake".into(),
            monotonic_us: seq,
            realtime_us: None,
            priority,
            facility: if source == LogSource::Kernel { 0 } else { 3 },
            unit: unit.map(str::to_string),
            identifier: identifier.map(str::to_string),
            message: message.to_string(),
            fields: vec![],
        };
        let grant = self.grant.borrow();
        for rule in grant
            .watch
            .iter()
            .filter(|r| r.matches(&grant, &facts(&entry), message))
        {
            let mut pending = self.pending.borrow_mut();
            let at = match pending.iter().position(|m| m.rule == rule.rule) {
                Some(at) => at,
                None => {
                    pending.push(Matched {
                        rule: rule.rule.clone(),
                        entries: vec![],
                        missed: 0,
                        gap: 0,
                    });
                    pending.len() - 1
                }
            };
            let matched = &mut pending[at];
            if matched.entries.len() < rule.burst as usize {
                matched.entries.push(entry.clone());
            } else {
                matched.missed += 1;
            }
        }
        self.lines.borrow_mut().push(entry);
        self
    }
}

impl Logs for FakeLogs {
    fn matches(&self) -> Result<Vec<Matched>> {
        self.grant.borrow().check_matches(&self.plugin)?;
        Ok(std::mem::take(&mut *self.pending.borrow_mut()))
    }

    fn read(
        &self,
        source: LogSource,
        since: Option<&str>,
        filter: &LogFilter,
        max: u32,
    ) -> Result<LogPage> {
        tend_rules::logs::check_max(max)?;
        let wanted = tend_rules::logs::Filter {
            units: &filter.units,
            identifiers: &filter.identifiers,
            max_priority: filter.max_priority,
        };
        let grant = self.grant.borrow();
        grant.check_read(&self.plugin, rules_source(source), &wanted)?;
        let lines = self.lines.borrow();
        let start = match since {
            None => 0,
            Some(cursor) => {
                tend_rules::logs::check_cursor(cursor)?;
                1 + lines
                    .iter()
                    .position(|l| l.cursor == cursor)
                    .ok_or_else(|| {
                        crate::Error::Invalid(format!(
                            "cursor {cursor:?} was not given by this fake"
                        ))
                    })?
            }
        };
        let mut page = LogPage {
            entries: vec![],
            cursor: since.map(str::to_string),
            gap: 0,
        };
        for line in lines[start..].iter().filter(|l| l.source == source) {
            page.cursor = Some(line.cursor.clone());
            if grant.covers(&facts(line)) && wanted.passes(&facts(line)) {
                page.entries.push(line.clone());
                if page.entries.len() == max as usize {
                    break;
                }
            }
        }
        Ok(page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_written_line_a_rule_matches_is_answered_once_within_the_burst() {
        let logs = FakeLogs::default();
        logs.grant(json!({"kernel": true, "watch": [
            {"rule": "hung", "source": "kernel", "pattern": "blocked for more than", "burst": 2}
        ]}));
        logs.kernel(3, "ok")
            .kernel(3, "task a blocked for more than 120 seconds");
        logs.kernel(3, "task b blocked for more than 120 seconds")
            .kernel(3, "task c blocked for more than 120 seconds");
        let matched = logs.matches().unwrap();
        assert_eq!(matched.len(), 1);
        assert_eq!(matched[0].rule, "hung");
        assert_eq!(matched[0].entries.len(), 2);
        assert_eq!(matched[0].missed, 1);
        assert!(logs.matches().unwrap().is_empty(), "taken");
    }

    #[test]
    fn reads_hold_to_the_grant_and_page_on() {
        let logs = FakeLogs::default();
        logs.grant(json!({"units": ["containerd.service"]}));
        logs.journal(Some("containerd.service"), Some("containerd"), 3, "one")
            .journal(Some("sshd.service"), Some("sshd"), 3, "secret")
            .journal(Some("containerd.service"), Some("containerd"), 6, "two");
        let filter = LogFilter::default();
        let page = logs.read(LogSource::Journal, None, &filter, 1).unwrap();
        assert_eq!(page.entries[0].message, "one");
        let rest = logs
            .read(LogSource::Journal, page.cursor.as_deref(), &filter, 10)
            .unwrap();
        let messages: Vec<_> = rest.entries.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(messages, ["two"], "sshd is not granted");
        let err = logs.read(LogSource::Kernel, None, &filter, 1).unwrap_err();
        assert!(matches!(err, crate::Error::Denied(_)), "{err:?}");
    }
}
