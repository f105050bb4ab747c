//! What a plugin's `logs` grant lets it read and watch: pure, so every rule is
//! tested without a kernel or a journal.
//!
//! ```toml
//! [plugins.problem-detector.grants.logs]
//! kernel = true                                   # the kernel ring buffer
//! units = ["containerd.service", "kubelet.service"]  # journal entries of these units
//! identifiers = ["containerd", "kubelet"]         # or of these SYSLOG_IDENTIFIERs
//! [[plugins.problem-detector.grants.logs.watch]]
//! rule = "task-hung"
//! source = "kernel"
//! pattern = 'task \S+:\w+ blocked for more than \d+ seconds'
//! burst = 5                  # at most 5 matches delivered at once...
//! per-minute = 10            # ...refilled at 10 a minute; the rest are counted
//! ```
//!
//! A journal entry is granted when its unit or its identifier is (deny by
//! default: no units and no identifiers grant no journal line). A watch rule
//! reads only what the grant does: its source must be granted, and its own
//! `units`/`identifiers` narrow the grant's, never widen them (checked when
//! the config is read). Patterns are the `regex` crate's: linear time in the
//! line, whatever the pattern.

use crate::Refusal;
use crate::systemd::{UnitPattern, wildcard_match};
use serde::{Deserialize, Deserializer, de::Error as _};

/// Every function of the WIT `logs` interface, by its WIT name.
pub const CALLS: [&str; 2] = crate::wit::logs::FUNCTIONS;

/// `logs` changes nothing.
pub const MUTATIONS: &[&str] = &[];

/// The most entries one `read` answers.
pub const MAX_READ: u32 = 1000;
/// The longest message a plugin is shown, in bytes; the rest is cut (with "…").
pub const MAX_MESSAGE: usize = 4096;
/// The most extra fields of an entry a plugin is shown, and the longest each.
pub const MAX_FIELDS: usize = 32;
pub const MAX_FIELD: usize = 512;
/// The most watch rules in one grant.
pub const MAX_RULES: usize = 64;
/// The longest pattern, in bytes, and the most memory its compiled form may take.
pub const MAX_PATTERN: usize = 1024;
pub const MAX_PATTERN_MEMORY: usize = 1 << 20;

/// The source of a line, as grants and rules name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    Kernel,
    Journal,
}

impl Source {
    pub const ALL: [Source; 2] = [Source::Kernel, Source::Journal];

    pub fn name(self) -> &'static str {
        match self {
            Source::Kernel => "kernel",
            Source::Journal => "journal",
        }
    }
}

/// A `SYSLOG_IDENTIFIER` pattern: printable, no spaces, `*` for any run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentifierPattern(pub String);

impl<'de> Deserialize<'de> for IdentifierPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if text.is_empty() || text.len() > 256 || !text.chars().all(|c| c.is_ascii_graphic()) {
            return Err(D::Error::custom(format!(
                "invalid identifier pattern {:?}: expected a SYSLOG_IDENTIFIER with `*` wildcards, for example \"containerd\"",
                crate::shown(&text)
            )));
        }
        Ok(IdentifierPattern(text))
    }
}

/// A rule's regular expression, compiled once when the config is read.
#[derive(Debug, Clone)]
pub struct Pattern(pub regex::Regex);

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

impl Eq for Pattern {}

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        compile(&text).map(Pattern).map_err(D::Error::custom)
    }
}

/// `text` as a bounded regular expression, or what is wrong with it.
pub fn compile(text: &str) -> Result<regex::Regex, String> {
    if text.len() > MAX_PATTERN {
        return Err(format!(
            "a watch pattern is at most {MAX_PATTERN} bytes, not {}",
            text.len()
        ));
    }
    regex::RegexBuilder::new(text)
        .size_limit(MAX_PATTERN_MEMORY)
        .dfa_size_limit(MAX_PATTERN_MEMORY)
        .build()
        .map_err(|e| {
            format!(
                "invalid watch pattern {:?}: {}",
                crate::shown(text),
                crate::shown(&e.to_string())
            )
        })
}

/// One `[[grants.logs.watch]]` rule: lines of `source` matching `pattern`
/// (and, in the journal, the rule's units or identifiers) wake the plugin.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct WatchRule {
    /// Its name: the trigger's subject and `matched.rule`.
    pub rule: String,
    pub source: Source,
    pub pattern: Pattern,
    /// Journal only: narrow to these units or identifiers (default: every granted one).
    #[serde(default)]
    pub units: Vec<UnitPattern>,
    #[serde(default)]
    pub identifiers: Vec<IdentifierPattern>,
    /// Only lines at least this severe (0 emerg .. 7 debug).
    #[serde(default)]
    pub max_priority: Option<u8>,
    /// The most matches delivered at once; refilled at `per-minute`.
    #[serde(default = "default_burst")]
    pub burst: u32,
    #[serde(default = "default_per_minute")]
    pub per_minute: u32,
}

fn default_burst() -> u32 {
    10
}

fn default_per_minute() -> u32 {
    60
}

/// `[plugins.<name>.grants] logs`, its rules checked against it as it is read
/// (so a wrong rule is refused with its file and line).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, try_from = "RawLogsGrant")]
pub struct LogsGrant {
    /// The kernel ring buffer.
    #[serde(default)]
    pub kernel: bool,
    /// Journal entries whose `_SYSTEMD_UNIT` matches one of these...
    #[serde(default)]
    pub units: Vec<UnitPattern>,
    /// ...or whose `SYSLOG_IDENTIFIER` matches one of these.
    #[serde(default)]
    pub identifiers: Vec<IdentifierPattern>,
    /// The rules whose matches reconcile the plugin.
    #[serde(default)]
    pub watch: Vec<WatchRule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLogsGrant {
    #[serde(default)]
    kernel: bool,
    #[serde(default)]
    units: Vec<UnitPattern>,
    #[serde(default)]
    identifiers: Vec<IdentifierPattern>,
    #[serde(default)]
    watch: Vec<WatchRule>,
}

impl TryFrom<RawLogsGrant> for LogsGrant {
    type Error = String;

    fn try_from(raw: RawLogsGrant) -> Result<Self, String> {
        let grant = LogsGrant {
            kernel: raw.kernel,
            units: raw.units,
            identifiers: raw.identifiers,
            watch: raw.watch,
        };
        grant.check_rules()?;
        Ok(grant)
    }
}

/// What a line is, as far as grants and rules look at it.
#[derive(Debug, Clone, Copy)]
pub struct LineFacts<'a> {
    pub source: Source,
    pub priority: u8,
    pub unit: Option<&'a str>,
    pub identifier: Option<&'a str>,
}

/// A plugin's `read` filter, as the WIT has it.
#[derive(Debug, Clone, Default)]
pub struct Filter<'a> {
    pub units: &'a [String],
    pub identifiers: &'a [String],
    pub max_priority: Option<u8>,
}

fn any_unit(patterns: &[UnitPattern], unit: Option<&str>) -> bool {
    unit.is_some_and(|u| patterns.iter().any(|p| wildcard_match(&p.0, u)))
}

fn any_identifier(patterns: &[IdentifierPattern], identifier: Option<&str>) -> bool {
    identifier.is_some_and(|i| patterns.iter().any(|p| wildcard_match(&p.0, i)))
}

impl LogsGrant {
    pub fn grants(&self, source: Source) -> bool {
        match source {
            Source::Kernel => self.kernel,
            Source::Journal => !self.units.is_empty() || !self.identifiers.is_empty(),
        }
    }

    /// May the plugin see this line?
    pub fn covers(&self, line: &LineFacts) -> bool {
        match line.source {
            Source::Kernel => self.kernel,
            Source::Journal => {
                any_unit(&self.units, line.unit)
                    || any_identifier(&self.identifiers, line.identifier)
            }
        }
    }

    /// The rules, checked against the grant: each names a granted source,
    /// narrows and never widens it, and has a unique name.
    pub fn check_rules(&self) -> Result<(), String> {
        if self.watch.len() > MAX_RULES {
            return Err(format!(
                "at most {MAX_RULES} watch rules, not {}",
                self.watch.len()
            ));
        }
        for (i, rule) in self.watch.iter().enumerate() {
            crate::ident::check("watch rule", &rule.rule, &crate::ident::WATCH_RULE)
                .map_err(|r| r.message().to_string())?;
            if self.watch[..i].iter().any(|r| r.rule == rule.rule) {
                return Err(format!("two watch rules are named {:?}", rule.rule));
            }
            rule.check_within(self)?;
        }
        Ok(())
    }

    /// May a plugin `read` `source` with `filter`? Refused with the grant to add.
    pub fn check_read(&self, plugin: &str, source: Source, filter: &Filter) -> Result<(), Refusal> {
        if !self.grants(source) {
            let add = match source {
                Source::Kernel => "kernel = true".to_string(),
                Source::Journal => {
                    "units = [\"<unit>\"] or identifiers = [\"<identifier>\"]".into()
                }
            };
            return Err(Refusal::Denied(format!(
                "plugin {plugin:?} may not read the {} log: add {add} to [plugins.{plugin}.grants.logs]",
                source.name()
            )));
        }
        if filter.max_priority.is_some_and(|p| p > 7) {
            return Err(Refusal::Invalid(
                "max-priority is a syslog priority, 0 (emerg) to 7 (debug)".into(),
            ));
        }
        for text in filter.units.iter().chain(filter.identifiers) {
            if text.is_empty() || text.len() > 256 || !text.chars().all(|c| c.is_ascii_graphic()) {
                return Err(Refusal::Invalid(format!(
                    "filter entry {:?} is not a unit or identifier name",
                    crate::shown(text)
                )));
            }
        }
        if filter.units.len() + filter.identifiers.len() > MAX_RULES {
            return Err(Refusal::Invalid(format!(
                "a filter names at most {MAX_RULES} units and identifiers"
            )));
        }
        Ok(())
    }
}

impl LogsGrant {
    /// May `plugin` take matches? Only with watch rules to match.
    pub fn check_matches(&self, plugin: &str) -> Result<(), Refusal> {
        if self.watch.is_empty() {
            return Err(Refusal::Denied(format!(
                "plugin {plugin:?} has no watch rules, so nothing matches for it: add a [[plugins.{plugin}.grants.logs.watch]] rule"
            )));
        }
        Ok(())
    }
}

/// The cursor of line `seq` (from 1, per source) in the fakes, host and SDK
/// alike: the real shapes, in a boot named "fake".
pub fn fake_cursor(source: Source, seq: u64) -> String {
    match source {
        Source::Kernel => format!("k1;b=fake;s={seq}"),
        Source::Journal => format!("s=fake;i={seq:x};b=fake;m=0;t=0;x=0"),
    }
}

impl Filter<'_> {
    /// Does the filter let this line through (the grant is checked apart)?
    pub fn passes(&self, line: &LineFacts) -> bool {
        if self.max_priority.is_some_and(|max| line.priority > max) {
            return false;
        }
        if self.units.is_empty() && self.identifiers.is_empty() {
            return true;
        }
        line.unit.is_some_and(|u| self.units.iter().any(|f| f == u))
            || line
                .identifier
                .is_some_and(|i| self.identifiers.iter().any(|f| f == i))
    }
}

impl WatchRule {
    fn check_within(&self, grant: &LogsGrant) -> Result<(), String> {
        let name = &self.rule;
        if !grant.grants(self.source) {
            return Err(format!(
                "watch rule {name:?} reads the {} log, which the grant does not: grant it in the same table",
                self.source.name()
            ));
        }
        if self.source == Source::Kernel && !(self.units.is_empty() && self.identifiers.is_empty())
        {
            return Err(format!(
                "watch rule {name:?}: units and identifiers narrow journal rules only"
            ));
        }
        for unit in &self.units {
            if !any_unit(&grant.units, Some(&unit.0)) {
                return Err(format!(
                    "watch rule {name:?} names unit {:?}, which the grant's units do not cover",
                    unit.0
                ));
            }
        }
        for identifier in &self.identifiers {
            if !any_identifier(&grant.identifiers, Some(&identifier.0)) {
                return Err(format!(
                    "watch rule {name:?} names identifier {:?}, which the grant's identifiers do not cover",
                    identifier.0
                ));
            }
        }
        if self.max_priority.is_some_and(|p| p > 7) {
            return Err(format!(
                "watch rule {name:?}: max-priority is 0 (emerg) to 7 (debug)"
            ));
        }
        if self.burst == 0 || self.burst > 1000 || self.per_minute > 60_000 {
            return Err(format!(
                "watch rule {name:?}: burst is 1 to 1000 and per-minute at most 60000"
            ));
        }
        Ok(())
    }

    /// Does this rule take this line (granted, narrowed, severe enough, and
    /// matching)? The pattern runs last: it is the expensive part.
    pub fn matches(&self, grant: &LogsGrant, line: &LineFacts, message: &str) -> bool {
        line.source == self.source
            && grant.covers(line)
            && (self.units.is_empty() && self.identifiers.is_empty()
                || any_unit(&self.units, line.unit)
                || any_identifier(&self.identifiers, line.identifier))
            && self.max_priority.is_none_or(|max| line.priority <= max)
            && self.pattern.0.is_match(message)
    }
}

/// A token bucket per rule: `burst` matches at once, refilled at
/// `per_minute`. Time is the caller's (milliseconds of a monotonic clock), so
/// a wall clock that jumps cannot refill it.
#[derive(Debug, Clone, PartialEq)]
pub struct Rate {
    tokens: f64,
    at_ms: u64,
}

impl Rate {
    pub fn full(rule: &WatchRule, now_ms: u64) -> Rate {
        Rate {
            tokens: rule.burst as f64,
            at_ms: now_ms,
        }
    }

    /// Take one match if the rule's rate allows it.
    pub fn take(&mut self, rule: &WatchRule, now_ms: u64) -> bool {
        let elapsed = now_ms.saturating_sub(self.at_ms) as f64;
        self.at_ms = self.at_ms.max(now_ms);
        self.tokens =
            (self.tokens + elapsed * rule.per_minute as f64 / 60_000.0).min(rule.burst as f64);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// A cursor a plugin hands back, of [`crate::ident::LOG_CURSOR`]'s shape.
pub fn check_cursor(cursor: &str) -> Result<(), Refusal> {
    crate::ident::check("logs cursor", cursor, &crate::ident::LOG_CURSOR)
}

/// `max` for `read`: 1 to [`MAX_READ`].
pub fn check_max(max: u32) -> Result<(), Refusal> {
    if max == 0 || max > MAX_READ {
        return Err(Refusal::Invalid(format!(
            "read returns 1 to {MAX_READ} entries at a time, not {max}; page with the cursor"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(text: &str) -> Result<LogsGrant, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    fn kernel(priority: u8) -> LineFacts<'static> {
        LineFacts {
            source: Source::Kernel,
            priority,
            unit: None,
            identifier: None,
        }
    }

    fn journal<'a>(unit: Option<&'a str>, identifier: Option<&'a str>) -> LineFacts<'a> {
        LineFacts {
            source: Source::Journal,
            priority: 3,
            unit,
            identifier,
        }
    }

    const HUNG: &str = "[[watch]]\nrule = \"hung\"\nsource = \"kernel\"\npattern = 'task \\S+ blocked for more than \\d+ seconds'\n";

    #[test]
    fn nothing_is_granted_by_default() {
        let grant = LogsGrant::default();
        for source in Source::ALL {
            assert!(!grant.grants(source));
            assert!(grant.check_read("p", source, &Filter::default()).is_err());
        }
        assert!(!grant.covers(&journal(Some("kubelet.service"), Some("kubelet"))));
    }

    #[test]
    fn a_journal_line_is_granted_by_its_unit_or_its_identifier() {
        let grant =
            grant("units = [\"containerd*.service\"]\nidentifiers = [\"kubelet\"]").unwrap();
        assert!(grant.covers(&journal(Some("containerd.service"), None)));
        assert!(grant.covers(&journal(Some("other.service"), Some("kubelet"))));
        assert!(!grant.covers(&journal(Some("sshd.service"), Some("sshd"))));
        assert!(
            !grant.covers(&kernel(0)),
            "the journal grant is not the kernel's"
        );
    }

    #[test]
    fn a_read_of_an_ungranted_source_names_the_grant() {
        let grant = grant("units = [\"kubelet.service\"]").unwrap();
        let refused = grant
            .check_read("pd", Source::Kernel, &Filter::default())
            .unwrap_err();
        assert_eq!(refused.kind(), "denied");
        assert!(refused.message().contains("kernel = true"), "{refused:?}");
        assert!(refused.message().contains("[plugins.pd.grants.logs]"));
        assert!(
            grant
                .check_read("pd", Source::Journal, &Filter::default())
                .is_ok()
        );
    }

    #[test]
    fn a_rule_matches_its_source_grant_priority_and_pattern() {
        let grant = grant(&format!("kernel = true\n{HUNG}max-priority = 4\n")).unwrap();
        let rule = &grant.watch[0];
        let line = "INFO: task kworker/0:1 blocked for more than 120 seconds.";
        assert!(rule.matches(&grant, &kernel(3), line));
        assert!(!rule.matches(&grant, &kernel(6), line), "not severe enough");
        assert!(!rule.matches(&grant, &kernel(3), "task ran"));
        assert!(!rule.matches(&grant, &journal(None, Some("k")), line));
    }

    #[test]
    fn rules_are_held_to_the_grant() {
        for (text, expected) in [
            (HUNG.to_string(), "reads the kernel log, which the grant does not"),
            (
                "units = [\"containerd.service\"]\n[[watch]]\nrule = \"r\"\nsource = \"journal\"\npattern = \"x\"\nunits = [\"kubelet.service\"]\n".into(),
                "which the grant's units do not cover",
            ),
            (
                "identifiers = [\"containerd\"]\n[[watch]]\nrule = \"r\"\nsource = \"journal\"\npattern = \"x\"\nidentifiers = [\"*\"]\n".into(),
                "which the grant's identifiers do not cover",
            ),
            (format!("kernel = true\n{HUNG}{HUNG}"), "two watch rules are named \"hung\""),
            ("kernel = true\n[[watch]]\nrule = \"r\"\nsource = \"kernel\"\npattern = \"(\"\n".into(), "invalid watch pattern"),
            ("kernel = true\n[[watch]]\nrule = \"r\"\nsource = \"kernel\"\npattern = \"x\"\nburst = 0\n".into(), "burst is 1 to 1000"),
            ("kernel = true\n[[watch]]\nrule = \"r\"\nsource = \"kernel\"\npattern = \"x\"\nunits = [\"a.service\"]\n".into(), "narrow journal rules only"),
            ("kernel = true\n[[watch]]\nrule = \"../r\"\nsource = \"kernel\"\npattern = \"x\"\n".into(), "watch rule"),
        ] {
            let error = grant(&text).unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }

    #[test]
    fn a_pattern_that_would_compile_to_a_huge_automaton_is_refused() {
        let error = compile(r"\w{1000}\w{1000}\w{1000}").unwrap_err();
        assert!(error.contains("invalid watch pattern"), "{error}");
        assert!(compile(&"a".repeat(MAX_PATTERN + 1)).is_err());
    }

    #[test]
    fn a_rule_narrowed_to_a_unit_takes_only_that_unit() {
        let grant = grant("units = [\"*.service\"]\n[[watch]]\nrule = \"r\"\nsource = \"journal\"\npattern = \"fail\"\nunits = [\"containerd.service\"]\n").unwrap();
        let rule = &grant.watch[0];
        assert!(rule.matches(
            &grant,
            &journal(Some("containerd.service"), None),
            "it fail"
        ));
        assert!(!rule.matches(&grant, &journal(Some("kubelet.service"), None), "it fail"));
    }

    #[test]
    fn the_rate_delivers_a_burst_then_refills_with_time_only() {
        let grant = grant(&format!(
            "kernel = true\n{HUNG}burst = 2\nper-minute = 60\n"
        ))
        .unwrap();
        let rule = &grant.watch[0];
        let mut rate = Rate::full(rule, 1_000);
        assert!(rate.take(rule, 1_000));
        assert!(rate.take(rule, 1_000));
        assert!(!rate.take(rule, 1_500), "a burst of two, then one a second");
        assert!(rate.take(rule, 2_000));
        assert!(!rate.take(rule, 500), "a clock going back refills nothing");
        assert!(!rate.take(rule, 2_100));
        assert!(rate.take(rule, 3_000 + 60_000));
        assert!(rate.take(rule, 3_000 + 60_000));
        assert!(
            !rate.take(rule, 3_000 + 60_000),
            "never more than the burst"
        );
    }

    #[test]
    fn filters_pass_priority_and_names() {
        let units = ["kubelet.service".to_string()];
        let filter = Filter {
            units: &units,
            identifiers: &[],
            max_priority: Some(3),
        };
        assert!(filter.passes(&journal(Some("kubelet.service"), None)));
        assert!(!filter.passes(&journal(Some("containerd.service"), None)));
        assert!(!filter.passes(&LineFacts {
            priority: 6,
            ..journal(Some("kubelet.service"), None)
        }));
        assert!(Filter::default().passes(&kernel(7)));
    }

    #[test]
    fn matches_need_a_watch_rule() {
        let refused = grant("kernel = true")
            .unwrap()
            .check_matches("pd")
            .unwrap_err();
        assert!(
            refused
                .message()
                .contains("[[plugins.pd.grants.logs.watch]]")
        );
        assert!(
            grant(&format!("kernel = true\n{HUNG}"))
                .unwrap()
                .check_matches("pd")
                .is_ok()
        );
    }

    #[test]
    fn cursors_and_max_are_bounded() {
        assert!(check_cursor("k1;b=1;s=2").is_ok());
        for bad in [
            "",
            "a b",
            "x\n",
            "--file=/etc/shadow",
            "a/b",
            &"c".repeat(257),
        ] {
            assert_eq!(check_cursor(bad).unwrap_err().kind(), "invalid");
        }
        assert!(check_max(0).is_err() && check_max(MAX_READ + 1).is_err() && check_max(1).is_ok());
    }
}
