//! What a matched line means: pure, so every rule is tested without a host.
//!
//! The host matches the lines (the grant's `logs.watch` rules carry the
//! patterns); a [`Rule`] here says what a match of one watch rule does: an
//! Event on the Node, or a condition set with a reason and a TTL, once the
//! rule has matched `count` times within `within`. [`defaults`] are
//! node-problem-detector's shipped rules, as the README's config names them.

use serde::{Deserialize, Deserializer, de::Error as _};
use std::collections::BTreeMap;

/// `[plugins.problem-detector.config]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    /// What each watch rule's match does; the defaults when absent.
    #[serde(default = "defaults")]
    pub rules: Vec<Rule>,
    /// More rules on top of the defaults (or of `rules`): an operator's own.
    #[serde(default)]
    pub extra_rules: Vec<Rule>,
    /// The clock check: a time-sync unit must be active.
    #[serde(default)]
    pub clock: Option<ClockCheck>,
}

impl Config {
    /// Every rule, the operator's extra rules last (a later rule for the same
    /// watch rule replaces an earlier one).
    pub fn all_rules(&self) -> BTreeMap<&str, &Rule> {
        self.rules
            .iter()
            .chain(&self.extra_rules)
            .map(|r| (r.watch.as_str(), r))
            .collect()
    }

    /// Each condition type and the rules that set it.
    pub fn conditions(&self) -> Vec<&str> {
        let mut types: Vec<&str> = self
            .all_rules()
            .values()
            .filter_map(|r| r.condition.as_deref())
            .chain(self.clock.as_ref().map(|c| c.condition.as_str()))
            .collect();
        types.sort();
        types.dedup();
        types
    }
}

/// One watch rule's meaning.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Rule {
    /// The name of a `[[grants.logs.watch]]` rule.
    pub watch: String,
    /// Set this condition (True) when the rule fires; absent: an Event only.
    #[serde(default)]
    pub condition: Option<String>,
    /// The Event's or the condition's reason, CamelCase: "TaskHung".
    pub reason: String,
    /// A condition clears when the rule has not fired again for this long.
    #[serde(default, deserialize_with = "optional_duration")]
    pub ttl: Option<u64>,
    /// Fire once `count` matches fell within `within` (a repeated restart).
    #[serde(default = "one")]
    pub count: u32,
    #[serde(default, deserialize_with = "optional_duration")]
    pub within: Option<u64>,
}

/// `[plugins.problem-detector.config.clock]`: no time-sync unit active is a
/// clock that drifts.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ClockCheck {
    #[serde(default = "time_sync_units")]
    pub units: Vec<String>,
    #[serde(default = "ntp_problem")]
    pub condition: String,
}

fn one() -> u32 {
    1
}

fn time_sync_units() -> Vec<String> {
    [
        "systemd-timesyncd.service",
        "chrony.service",
        "chronyd.service",
        "ntp.service",
    ]
    .map(String::from)
    .to_vec()
}

fn ntp_problem() -> String {
    "NTPProblem".into()
}

/// "90s", "10m", "1h", "2d" in seconds.
pub fn seconds(text: &str) -> Result<u64, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => 0,
    };
    match number.parse::<u64>() {
        Ok(n) if scale > 0 && n > 0 => Ok(n * scale),
        _ => Err(format!(
            "duration {text:?}: expected a whole number of s, m, h or d, for example \"10m\""
        )),
    }
}

fn optional_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let text = String::deserialize(d)?;
    seconds(&text).map(Some).map_err(D::Error::custom)
}

fn rule(watch: &str, condition: Option<&str>, reason: &str, ttl: Option<u64>) -> Rule {
    Rule {
        watch: watch.into(),
        condition: condition.map(String::from),
        reason: reason.into(),
        ttl,
        count: 1,
        within: None,
    }
}

const HOUR: u64 = 3600;

/// node-problem-detector's shipped rules (kernel-monitor, readonly-monitor,
/// systemd-monitor-counter), with two choices of Tend's: a hung task, a
/// stuck `unregister_netdevice` and a kernel oops set `KernelDeadlock` (NPD
/// sends only an Event), and every condition has a TTL, so none is
/// permanent: one that stops recurring clears itself.
pub fn defaults() -> Vec<Rule> {
    let restarts = |watch: &str, condition: &str| Rule {
        count: 5,
        within: Some(20 * 60),
        ..rule(watch, Some(condition), condition, Some(HOUR))
    };
    vec![
        rule("oom-kill", None, "OOMKilling", None),
        rule("task-hung", Some("KernelDeadlock"), "TaskHung", Some(HOUR)),
        rule(
            "unregister-netdevice",
            Some("KernelDeadlock"),
            "UnregisterNetDevice",
            Some(HOUR),
        ),
        rule(
            "kernel-oops",
            Some("KernelDeadlock"),
            "KernelOops",
            Some(HOUR),
        ),
        rule("ext4-error", None, "Ext4Error", None),
        rule("io-error", None, "IOError", None),
        rule(
            "xfs-shutdown",
            Some("XfsShutdown"),
            "XfsHasShutdown",
            Some(24 * HOUR),
        ),
        rule(
            "readonly-filesystem",
            Some("ReadonlyFilesystem"),
            "FilesystemIsReadOnly",
            Some(24 * HOUR),
        ),
        restarts("containerd-restart", "FrequentContainerdRestart"),
        rule(
            "containerd-failed",
            Some("ContainerRuntimeUnhealthy"),
            "ContainerdFailed",
            Some(10 * 60),
        ),
        restarts("kubelet-restart", "FrequentKubeletRestart"),
        rule(
            "pleg-unhealthy",
            Some("KubeletUnhealthy"),
            "PLEGNotHealthy",
            Some(10 * 60),
        ),
    ]
}

/// The config's own mistakes, said before anything is done.
pub fn validate(config: &Config) -> Result<(), String> {
    let camel = |t: &str| {
        t.starts_with(|c: char| c.is_ascii_uppercase())
            && t.chars().all(|c| c.is_ascii_alphanumeric())
    };
    for r in config.rules.iter().chain(&config.extra_rules) {
        if !camel(&r.reason) {
            return Err(format!(
                "rule {}: reason {:?} must be CamelCase, for example \"TaskHung\"",
                r.watch, r.reason
            ));
        }
        if r.count == 0 {
            return Err(format!("rule {}: count must be at least 1", r.watch));
        }
        if r.count > 1 && r.within.is_none() {
            return Err(format!(
                "rule {}: count = {} needs within (\"20m\"): the matches are counted within it",
                r.watch, r.count
            ));
        }
        if r.condition.is_none() && r.ttl.is_some() {
            return Err(format!(
                "rule {}: ttl is for a condition: add condition = \"...\" or remove ttl",
                r.watch
            ));
        }
    }
    Ok(())
}

/// A line a watch rule matched, as the rules read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub watch: String,
    pub message: String,
    /// When, in seconds (the line's own time if it has one).
    pub at: u64,
}

/// What to do about the lines seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Act {
    Event {
        reason: String,
        message: String,
    },
    Set {
        condition: String,
        reason: String,
        message: String,
        ttl: Option<u64>,
    },
}

/// Each counting rule's recent matches (seconds), kept between reconciles.
pub type Recent = BTreeMap<String, Vec<u64>>;

/// What `seen` calls for at `now`, given and updating `recent`; a line of a
/// watch rule no rule names is returned apart, to be said. A condition is
/// set once per reconcile per type (the latest line's message).
pub fn decide(
    config: &Config,
    seen: &[Seen],
    recent: &mut Recent,
    now: u64,
) -> (Vec<Act>, Vec<String>) {
    let rules = config.all_rules();
    let mut acts: Vec<Act> = vec![];
    let mut unknown = vec![];
    for line in seen {
        let Some(rule) = rules.get(line.watch.as_str()) else {
            if !unknown.contains(&line.watch) {
                unknown.push(line.watch.clone());
            }
            continue;
        };
        if !fires(rule, line, recent) {
            continue;
        }
        let act = match &rule.condition {
            None => Act::Event {
                reason: rule.reason.clone(),
                message: line.message.clone(),
            },
            Some(condition) => Act::Set {
                condition: condition.clone(),
                reason: rule.reason.clone(),
                message: line.message.clone(),
                ttl: rule.ttl,
            },
        };
        if let Act::Set { condition, .. } = &act {
            acts.retain(|a| !matches!(a, Act::Set { condition: c, .. } if c == condition));
        }
        acts.push(act);
    }
    // Forget what fell out of every window.
    for (watch, times) in recent.iter_mut() {
        let within = rules
            .get(watch.as_str())
            .and_then(|r| r.within)
            .unwrap_or(0);
        times.retain(|&at| at + within > now);
    }
    recent.retain(|_, times| !times.is_empty());
    (acts, unknown)
}

/// Whether `line` makes `rule` fire: at once for a rule of one match, else
/// when its count is reached within its window (then it starts again).
fn fires(rule: &Rule, line: &Seen, recent: &mut Recent) -> bool {
    if rule.count <= 1 {
        return true;
    }
    let within = rule.within.unwrap_or(0);
    let times = recent.entry(rule.watch.clone()).or_default();
    times.retain(|&at| at + within > line.at);
    times.push(line.at);
    if times.len() >= rule.count as usize {
        times.clear();
        return true;
    }
    false
}

/// The clock check's verdict from the time-sync units' active states: the
/// reason and message of the condition, and whether it is a problem.
pub fn clock_verdict(active: &[(String, bool)]) -> (bool, &'static str, String) {
    match active.iter().find(|(_, up)| *up) {
        Some((unit, _)) => (false, "NTPIsUp", format!("{unit} is active")),
        None => (
            true,
            "NTPIsDown",
            format!(
                "no time-sync unit is active ({})",
                active
                    .iter()
                    .map(|(u, _)| u.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Result<Config, String> {
        let config: Config = toml_like(text)?;
        validate(&config)?;
        Ok(config)
    }

    /// The plugin reads its config as JSON (the host hands the TOML table over as JSON).
    fn toml_like(json: &str) -> Result<Config, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    fn seen(watch: &str, at: u64) -> Seen {
        Seen {
            watch: watch.into(),
            message: format!("line of {watch} at {at}"),
            at,
        }
    }

    #[test]
    fn the_defaults_map_npds_rules() {
        let c = config("{}").unwrap();
        assert_eq!(
            c.conditions(),
            [
                "ContainerRuntimeUnhealthy",
                "FrequentContainerdRestart",
                "FrequentKubeletRestart",
                "KernelDeadlock",
                "KubeletUnhealthy",
                "ReadonlyFilesystem",
                "XfsShutdown"
            ]
        );
        let (acts, unknown) = decide(
            &c,
            &[seen("task-hung", 10), seen("oom-kill", 11)],
            &mut Recent::new(),
            11,
        );
        assert!(unknown.is_empty());
        assert_eq!(
            acts,
            [
                Act::Set {
                    condition: "KernelDeadlock".into(),
                    reason: "TaskHung".into(),
                    message: "line of task-hung at 10".into(),
                    ttl: Some(HOUR)
                },
                Act::Event {
                    reason: "OOMKilling".into(),
                    message: "line of oom-kill at 11".into()
                }
            ]
        );
    }

    #[test]
    fn a_counting_rule_fires_on_the_count_within_its_window_only() {
        let c = config("{}").unwrap();
        let mut recent = Recent::new();
        let four: Vec<Seen> = (0..4).map(|i| seen("containerd-restart", i * 60)).collect();
        assert!(decide(&c, &four, &mut recent, 240).0.is_empty());
        assert_eq!(
            recent["containerd-restart"].len(),
            4,
            "kept for the next reconcile"
        );
        let (acts, _) = decide(&c, &[seen("containerd-restart", 300)], &mut recent, 300);
        assert!(
            matches!(&acts[..], [Act::Set { condition, .. }] if condition == "FrequentContainerdRestart")
        );
        // Spread over more than the window: never.
        let mut recent = Recent::new();
        for i in 0..10 {
            assert!(
                decide(
                    &c,
                    &[seen("containerd-restart", i * 600)],
                    &mut recent,
                    i * 600
                )
                .0
                .is_empty()
            );
        }
        // Old matches are forgotten.
        assert!(decide(&c, &[], &mut recent, 100_000).0.is_empty());
        assert!(recent.is_empty());
    }

    #[test]
    fn one_set_per_condition_a_reconcile_and_unknown_rules_said() {
        let c = config("{}").unwrap();
        let (acts, unknown) = decide(
            &c,
            &[
                seen("task-hung", 1),
                seen("kernel-oops", 2),
                seen("mystery", 3),
            ],
            &mut Recent::new(),
            3,
        );
        assert_eq!(acts.len(), 1);
        assert!(matches!(&acts[0], Act::Set { reason, .. } if reason == "KernelOops"));
        assert_eq!(unknown, ["mystery"]);
    }

    #[test]
    fn an_operator_adds_or_replaces_a_rule_in_config() {
        let c = config(
            r#"{"extra-rules": [
                {"watch": "my-driver", "condition": "GpuFailed", "reason": "XidError", "ttl": "30m"},
                {"watch": "task-hung", "reason": "TaskHung"}
            ]}"#,
        )
        .unwrap();
        let (acts, _) = decide(
            &c,
            &[seen("my-driver", 1), seen("task-hung", 2)],
            &mut Recent::new(),
            2,
        );
        assert_eq!(
            acts[0],
            Act::Set {
                condition: "GpuFailed".into(),
                reason: "XidError".into(),
                message: "line of my-driver at 1".into(),
                ttl: Some(1800)
            }
        );
        assert!(
            matches!(&acts[1], Act::Event { reason, .. } if reason == "TaskHung"),
            "replaced: an Event now"
        );
    }

    #[test]
    fn mistakes_in_config_are_said() {
        let bad = |json: &str| config(json).unwrap_err();
        assert!(bad(r#"{"rules": [{"watch": "a", "reason": "task hung"}]}"#).contains("CamelCase"));
        assert!(
            bad(r#"{"rules": [{"watch": "a", "reason": "A", "count": 3}]}"#).contains("within")
        );
        assert!(
            bad(r#"{"rules": [{"watch": "a", "reason": "A", "ttl": "1h"}]}"#).contains("condition")
        );
        assert!(
            bad(r#"{"rules": [{"watch": "a", "reason": "A", "ttl": "soon"}]}"#).contains("10m")
        );
        assert!(
            bad(r#"{"rules": [{"watch": "a", "reason": "A", "colour": 1}]}"#).contains("colour")
        );
        assert_eq!(seconds("90s"), Ok(90));
        assert_eq!(seconds("2d"), Ok(172_800));
        assert!(seconds("0m").is_err() && seconds("m").is_err() && seconds("5").is_err());
    }

    #[test]
    fn the_clock_is_fine_while_one_time_sync_unit_is_active() {
        let units = |states: &[bool]| -> Vec<(String, bool)> {
            ["chrony.service", "systemd-timesyncd.service"]
                .iter()
                .zip(states)
                .map(|(u, s)| (u.to_string(), *s))
                .collect()
        };
        assert!(!clock_verdict(&units(&[false, true])).0);
        let (problem, reason, message) = clock_verdict(&units(&[false, false]));
        assert!(
            problem && reason == "NTPIsDown" && message.contains("chrony.service"),
            "{message}"
        );
    }
}
