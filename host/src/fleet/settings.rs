//! `[host.fleet]` as the operator writes it, and its validation into
//! [`FleetSettings`]: every error names the key and what is expected (the
//! config module adds file and line).

use super::cohort::{Step, default_steps};
use super::ledger::ClassRule;
use super::verdict::Rules;
use super::window::{WindowSpec, Windows};
use crate::units as values;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;
use tend_rules::ident::{KUBE_NAME, KUBE_NAMESPACE, check};
use toml::Spanned;

/// `[host.fleet]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RawFleet {
    /// Where Tend keeps its ledgers and node Leases.
    pub namespace: Spanned<String>,
    #[serde(default = "default_liveness", with = "values::duration")]
    pub liveness: Duration,
    #[serde(default = "default_renew_every", with = "values::duration")]
    pub renew_every: Duration,
    #[serde(default = "default_retry_every", with = "values::duration")]
    pub retry_every: Duration,
    /// How often this node publishes its revision's counters (with a renewal).
    #[serde(default = "default_publish_every", with = "values::duration")]
    pub publish_every: Duration,
    /// kured's DaemonSet ("namespace/name"): a node its lock names is disrupted.
    pub kured: Option<Spanned<String>>,
    /// Nodes under a Medik8s remediation or maintenance are disrupted.
    #[serde(default)]
    pub medik8s: bool,
    #[serde(default)]
    pub classes: BTreeMap<Spanned<String>, RawClass>,
    /// Staged rollouts of new revisions, judged by the leader.
    pub rollout: Option<Spanned<RawRollout>>,
    /// The Prometheus whose alerts a settle check asks about.
    pub prometheus: Option<Spanned<String>>,
}

/// `[host.fleet.rollout]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RawRollout {
    /// `"1"` (nodes) or `"2%"` (a share), widening.
    pub steps: Option<Spanned<Vec<String>>>,
    #[serde(default = "default_bake", with = "values::duration")]
    pub bake: Duration,
    #[serde(default = "default_min_runs")]
    pub min_runs: u64,
    #[serde(default = "default_patience", with = "values::duration")]
    pub patience: Duration,
    pub margin: Option<Spanned<f64>>,
    #[serde(default = "default_min_failures")]
    pub min_failures: u64,
    /// How often the leader reads the reports and judges.
    #[serde(default = "default_poll", with = "values::duration")]
    pub poll: Duration,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RawClass {
    pub operations: Vec<Spanned<String>>,
    pub share: Spanned<f64>,
    #[serde(default = "default_min")]
    pub min: u32,
    pub rate: Option<RawRate>,
    #[serde(default)]
    pub settle: RawSettle,
    #[serde(default)]
    pub windows: Vec<Spanned<RawWindow>>,
    #[serde(default)]
    pub exclude: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRate {
    pub max: u32,
    #[serde(with = "values::duration")]
    pub per: Duration,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RawSettle {
    #[serde(default = "default_ready_for", with = "values::duration_or_zero")]
    pub ready_for: Duration,
    #[serde(default)]
    pub conditions: Vec<String>,
    /// Prometheus alerts that must not be firing (`[host.fleet] prometheus`).
    #[serde(default)]
    pub alerts: Vec<String>,
}

impl Default for RawSettle {
    fn default() -> Self {
        RawSettle {
            ready_for: default_ready_for(),
            conditions: Vec::new(),
            alerts: Vec::new(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWindow {
    pub cron: String,
    #[serde(with = "values::duration")]
    pub duration: Duration,
    #[serde(default = "default_timezone")]
    pub timezone: String,
}

fn default_liveness() -> Duration {
    Duration::from_secs(120)
}
fn default_renew_every() -> Duration {
    Duration::from_secs(30)
}
fn default_retry_every() -> Duration {
    Duration::from_secs(10)
}
fn default_publish_every() -> Duration {
    Duration::from_secs(30)
}
fn default_ready_for() -> Duration {
    Duration::from_secs(120)
}
fn default_bake() -> Duration {
    Rules::default().bake
}
fn default_min_runs() -> u64 {
    Rules::default().min_runs
}
fn default_patience() -> Duration {
    Rules::default().patience
}
fn default_min_failures() -> u64 {
    Rules::default().min_failures
}
fn default_poll() -> Duration {
    Duration::from_secs(10)
}
fn default_min() -> u32 {
    1
}
fn default_timezone() -> String {
    "UTC".into()
}

/// `[host.fleet]`, validated.
/// Compared by what the operator wrote: a reload with the same settings
/// keeps the running fleet member.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetSettings {
    pub namespace: String,
    /// A holder whose node Lease stood still this long is pruned.
    pub liveness: Duration,
    pub renew_every: Duration,
    /// A refused class asks the API server again at most this often.
    pub retry_every: Duration,
    /// The revision's counters go out with a renewal at most this often.
    pub publish_every: Duration,
    pub kured: Option<(String, String)>,
    pub medik8s: bool,
    pub classes: Vec<Class>,
    pub rollout: Option<RolloutSettings>,
    /// Where the settle checks' alerts are asked about.
    pub prometheus: Option<reqwest::Url>,
}

/// `[host.fleet.rollout]`, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct RolloutSettings {
    pub steps: Vec<Step>,
    pub rules: Rules,
    pub poll: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Class {
    pub rule: ClassRule,
    pub windows: std::sync::Arc<Windows>,
    /// Prometheus alerts that must be quiet: before a ticket is granted,
    /// and before a holder gives its ticket back.
    pub alerts: Vec<String>,
}

/// What went wrong, and where: the span of the offending value.
pub type Invalid = (Option<std::ops::Range<usize>>, String);

/// Validate `[host.fleet]`. `known`: the mutating operations.
pub fn validate(raw: &Spanned<RawFleet>, known: &[String]) -> Result<FleetSettings, Invalid> {
    let fleet = raw.get_ref();
    let whole = Some(raw.span());
    let namespace = fleet.namespace.get_ref();
    if let Err(e) = check("namespace", namespace, &KUBE_NAMESPACE) {
        return Err((Some(fleet.namespace.span()), e.message().to_string()));
    }
    if fleet.renew_every.is_zero() || fleet.renew_every * 3 > fleet.liveness {
        return Err((
            whole,
            "expected renew-every at most a third of liveness (a live holder must renew several times before it counts as dead)".into(),
        ));
    }
    let kured = match &fleet.kured {
        None => None,
        Some(spanned) => match spanned.get_ref().split_once('/') {
            Some((ns, name))
                if check("namespace", ns, &KUBE_NAMESPACE).is_ok()
                    && check("name", name, &KUBE_NAME).is_ok() =>
            {
                Some((ns.to_string(), name.to_string()))
            }
            _ => {
                return Err((
                    Some(spanned.span()),
                    format!(
                        "kured {:?}: expected kured's DaemonSet as \"namespace/name\", as in \"kube-system/kured\"",
                        spanned.get_ref()
                    ),
                ));
            }
        },
    };
    let mut classes = Vec::new();
    let mut owner: BTreeMap<&str, &str> = BTreeMap::new();
    for (name, class) in &fleet.classes {
        let span = Some(name.span());
        let label = name.get_ref();
        // Part of a Lease's name: `tend-fleet-<class>`.
        if check("class name", label, &KUBE_NAMESPACE).is_err() || label.len() > 40 {
            return Err((
                span,
                format!(
                    "invalid class name {label:?}: expected at most 40 lowercase letters, digits and '-'"
                ),
            ));
        }
        if class.operations.is_empty() {
            return Err((
                span,
                format!(
                    "class {label:?} names no operations: expected for example operations = [\"systemd.restart\"]"
                ),
            ));
        }
        for operation in &class.operations {
            let op = operation.get_ref();
            if !known.iter().any(|k| k == op) {
                return Err((
                    Some(operation.span()),
                    format!(
                        "unknown operation {op:?}: a class can name {}",
                        known.join(", ")
                    ),
                ));
            }
            if let Some(other) = owner.insert(op, label) {
                return Err((
                    Some(operation.span()),
                    format!(
                        "operation {op:?} is in classes {other:?} and {label:?}: an operation needs the ticket of one class"
                    ),
                ));
            }
        }
        // A drain's cordon can be a no-op (the Node cordoned already): its
        // evictions must need the same ticket, or they would need none.
        let names = |op: &str| class.operations.iter().any(|o| o.get_ref() == op);
        if names("kube.cordon") != names("kube.evict") {
            return Err((
                span,
                format!(
                    "class {label:?} names one of kube.cordon and kube.evict: a drain does both, so name both (operations = [\"kube.cordon\", \"kube.evict\", ...])"
                ),
            ));
        }
        let share = *class.share.get_ref();
        if !(0.0..=1.0).contains(&share) {
            return Err((
                Some(class.share.span()),
                format!(
                    "share {share}: expected a fraction of the nodes from 0 to 1, as in 0.05 for 5 %"
                ),
            ));
        }
        if let Some(rate) = &class.rate
            && (rate.max == 0 || rate.per.is_zero())
        {
            return Err((
                span,
                format!(
                    "class {label:?}: rate needs max of at least 1 and a period, as in {{ max = 3, per = \"10m\" }}"
                ),
            ));
        }
        if !class.settle.alerts.is_empty() && fleet.prometheus.is_none() {
            return Err((
                span,
                format!(
                    "class {label:?}: settle alerts need [host.fleet] prometheus = \"http://prometheus.example:9090\", the Prometheus to ask"
                ),
            ));
        }
        if let Some(bad) = class.settle.alerts.iter().find(|a| !is_alert_name(a)) {
            return Err((
                span,
                format!(
                    "class {label:?}: settle alert {bad:?}: expected an alert's name as its rule names it (letters, digits, '_' and ':', at most 200)"
                ),
            ));
        }
        for condition in &class.settle.conditions {
            if let Err(e) = tend_rules::conditions::check_type(condition) {
                return Err((
                    span,
                    format!("class {label:?}: settle condition {condition:?}: {e}"),
                ));
            }
        }
        let specs: Vec<WindowSpec> = class
            .windows
            .iter()
            .map(|w| WindowSpec {
                cron: w.get_ref().cron.clone(),
                duration: w.get_ref().duration,
                timezone: w.get_ref().timezone.clone(),
            })
            .collect();
        let windows = Windows::parse(&specs, &class.exclude).map_err(|e| {
            let at = class.windows.first().map(|w| w.span()).or(span.clone());
            (at, format!("class {label:?}: {e}"))
        })?;
        classes.push(Class {
            rule: ClassRule {
                name: label.clone(),
                operations: class
                    .operations
                    .iter()
                    .map(|o| o.get_ref().clone())
                    .collect(),
                share,
                min: class.min,
                rate: class.rate.as_ref().map(|r| (r.max, r.per)),
                ready_for: class.settle.ready_for,
                conditions: class.settle.conditions.clone(),
            },
            windows: std::sync::Arc::new(windows),
            alerts: class.settle.alerts.clone(),
        });
    }
    Ok(FleetSettings {
        namespace: namespace.clone(),
        liveness: fleet.liveness,
        renew_every: fleet.renew_every,
        retry_every: fleet.retry_every,
        publish_every: fleet.publish_every,
        kured,
        medik8s: fleet.medik8s,
        classes,
        rollout: fleet.rollout.as_ref().map(rollout).transpose()?,
        prometheus: fleet.prometheus.as_ref().map(prometheus).transpose()?,
    })
}

/// An alert's name as a Prometheus rule gives it.
fn is_alert_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_' || b == b':')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
        && name.len() <= 200
}

/// `prometheus`: an http(s) URL with no credentials in it (it would be
/// logged); the alerts API is asked below it.
fn prometheus(raw: &Spanned<String>) -> Result<reqwest::Url, Invalid> {
    let text = raw.get_ref();
    let url = reqwest::Url::parse(text).ok().filter(|u| {
        matches!(u.scheme(), "http" | "https")
            && u.host().is_some()
            && u.username().is_empty()
            && u.password().is_none()
            && u.query().is_none()
    });
    url.ok_or_else(|| {
        (
            Some(raw.span()),
            format!(
                "prometheus {text:?}: expected the http(s) URL of a Prometheus, with no credentials or query, as in \"http://prometheus.monitoring:9090\""
            ),
        )
    })
}

/// Validate `[host.fleet.rollout]`: steps that widen, a margin that is a
/// fraction, a patience no shorter than the bake.
fn rollout(raw: &Spanned<RawRollout>) -> Result<RolloutSettings, Invalid> {
    let whole = Some(raw.span());
    let rollout = raw.get_ref();
    let steps = match &rollout.steps {
        None => default_steps(),
        Some(spanned) => {
            let at = Some(spanned.span());
            let steps = spanned
                .get_ref()
                .iter()
                .map(|s| Step::parse(s))
                .collect::<Result<Vec<Step>, String>>()
                .map_err(|e| (at.clone(), e))?;
            if steps.is_empty() || steps.len() > 20 || !widening(&steps) {
                return Err((
                    at,
                    "expected 1 to 20 steps that widen: numbers of nodes first, then shares, each above the last, as in [\"1\", \"2%\", \"10%\", \"100%\"]".into(),
                ));
            }
            steps
        }
    };
    let margin = match &rollout.margin {
        None => Rules::default().margin,
        Some(m) if (0.0..1.0).contains(m.get_ref()) => *m.get_ref(),
        Some(m) => {
            return Err((
                Some(m.span()),
                format!(
                    "margin {}: expected a fraction of runs from 0 to below 1, as in 0.05 (the candidates may fail 5 in 100 runs more than the stable nodes)",
                    m.get_ref()
                ),
            ));
        }
    };
    if rollout.bake.is_zero() || rollout.patience < rollout.bake || rollout.poll.is_zero() {
        return Err((
            whole,
            "expected a bake and a poll above zero and a patience no shorter than the bake".into(),
        ));
    }
    Ok(RolloutSettings {
        steps,
        rules: Rules {
            bake: rollout.bake,
            min_runs: rollout.min_runs,
            patience: rollout.patience,
            margin,
            min_failures: rollout.min_failures.max(1),
        },
        poll: rollout.poll,
    })
}

/// Numbers of nodes first, then shares, each above the one before.
fn widening(steps: &[Step]) -> bool {
    steps.windows(2).all(|pair| match (pair[0], pair[1]) {
        (Step::Nodes(a), Step::Nodes(b)) => a < b,
        (Step::Share(a), Step::Share(b)) => a < b,
        (Step::Nodes(_), Step::Share(_)) => true,
        (Step::Share(_), Step::Nodes(_)) => false,
    })
}
