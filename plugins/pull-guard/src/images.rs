//! Pre-pulls: each configured image pulled over CRI when absent, one after
//! another, with the plugin's own deadline; a failed pull is retried after a
//! backoff that doubles per attempt up to a cap, kept in `state`.

use crate::human;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;
use tend_sdk::{Error, Host};

/// A pull that failed, by image as configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Failure {
    pub attempts: u32,
    pub next_try_ms: u64,
    /// The last error, cut short: the state stays small.
    pub reason: String,
}

pub(crate) type Failures = BTreeMap<String, Failure>;

/// The longest reason kept.
const REASON_BYTES: usize = 200;

/// How pulls are timed.
pub(crate) struct Pacing {
    pub timeout: Duration,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

impl Pacing {
    /// The wait after failed attempt `attempts` (1, 2, ...): initial, doubled
    /// per attempt, capped.
    pub fn backoff(&self, attempts: u32) -> Duration {
        let doublings = attempts.saturating_sub(1).min(32);
        self.initial_backoff
            .saturating_mul(1 << doublings)
            .min(self.max_backoff)
    }
}

/// How one image stands after this reconcile.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Present,
    Pulled {
        took: Duration,
    },
    /// Pulls failed; the next try waits for its backoff.
    Failed {
        attempts: u32,
        next_try_in: Duration,
        reason: String,
    },
    /// Not pulled for a reason the operator must fix (a grant, a limit, a
    /// budget): retried every reconcile, not counted as an attempt.
    Refused(String),
    /// Not tried: the refusal of `after` would refuse it too.
    Skipped {
        after: String,
    },
    /// Its presence could not be checked.
    Unchecked(String),
    /// Left for the next reconcile: this one has too little time left.
    Deferred,
    /// A dry run: the pull is in the plan, not done.
    WouldPull,
}

impl Status {
    /// "busybox:1.36 pulled in 12s".
    pub fn describe(&self, image: &str) -> String {
        match self {
            Status::Present => format!("{image} present"),
            Status::Pulled { took } => format!("{image} pulled in {}", human(*took)),
            Status::Failed {
                attempts,
                next_try_in,
                reason,
            } => format!(
                "{image} failed (attempt {attempts}, next try in {}: {reason})",
                human(*next_try_in)
            ),
            Status::Refused(reason) => format!("{image} not pulled: {reason}"),
            Status::Skipped { after } => format!("{image} not tried ({after} was refused)"),
            Status::Unchecked(reason) => format!("{image} not checked: {reason}"),
            Status::Deferred => format!("{image} left for the next reconcile (deadline near)"),
            Status::WouldPull => format!("{image} would be pulled"),
        }
    }
}

/// Bring every image in, one after another; `now_ms` reads the wall clock
/// (pulls take time). Returns each image's status and the failures to
/// remember: those of images present now, or no longer configured, drop out.
pub(crate) fn pre_pull(
    host: &dyn Host,
    images: &[String],
    pacing: &Pacing,
    previous: &Failures,
    now_ms: &dyn Fn() -> u64,
    dry_run: bool,
) -> (Vec<(String, Status)>, Failures) {
    let mut failures: Failures = previous
        .iter()
        .filter(|(image, _)| images.contains(image))
        .map(|(image, failure)| (image.clone(), failure.clone()))
        .collect();
    let mut statuses = Vec::new();
    let mut pulled_any = false;
    let mut stop: Option<Stop> = None;
    for image in images {
        let status = match host.cri().image_status(image) {
            Ok(Some(_)) => {
                failures.remove(image);
                Status::Present
            }
            Err(e) => Status::Unchecked(e.to_string()),
            Ok(None) => match (&stop, failures.get(image)) {
                (Some(Stop::Deadline), _) => Status::Deferred,
                (Some(Stop::Refused(after)), _) => Status::Skipped {
                    after: after.clone(),
                },
                (None, Some(failure)) if failure.next_try_ms > now_ms() => Status::Failed {
                    attempts: failure.attempts,
                    next_try_in: Duration::from_millis(failure.next_try_ms - now_ms()),
                    reason: failure.reason.clone(),
                },
                (None, _) => {
                    let first_pull = !pulled_any;
                    pulled_any = true;
                    let started_ms = now_ms();
                    let result = host.cri().pull_image(image, pacing.timeout);
                    let finished_ms = now_ms();
                    match result {
                        Ok(_) if dry_run => Status::WouldPull,
                        Ok(_) => {
                            failures.remove(image);
                            let took = finished_ms.saturating_sub(started_ms);
                            Status::Pulled {
                                took: Duration::from_millis(took),
                            }
                        }
                        // The host refuses a pull that does not fit in what is
                        // left of the reconcile: after an earlier pull the next
                        // reconcile has the time; on the first one the limit is
                        // too low, and the message names it.
                        Err(Error::Invalid(_)) if !first_pull => {
                            stop = Some(Stop::Deadline);
                            Status::Deferred
                        }
                        Err(e @ Error::Denied(_)) => Status::Refused(e.to_string()),
                        Err(e @ (Error::Invalid(_) | Error::BudgetExhausted(_))) => {
                            stop = Some(Stop::Refused(image.clone()));
                            Status::Refused(e.to_string())
                        }
                        Err(e) => failed(&mut failures, image, pacing, &e, finished_ms),
                    }
                }
            },
        };
        statuses.push((image.clone(), status));
    }
    (statuses, failures)
}

/// Why the rest of the images are not pulled in this reconcile.
enum Stop {
    /// Too little of the reconcile's deadline is left.
    Deadline,
    /// The pull of this image was refused in a way every pull would be.
    Refused(String),
}

/// Count a failed pull of `image` at `at_ms` and schedule its next try.
fn failed(
    failures: &mut Failures,
    image: &str,
    pacing: &Pacing,
    error: &Error,
    at_ms: u64,
) -> Status {
    let attempts = failures.get(image).map_or(0, |f| f.attempts) + 1;
    let wait = pacing.backoff(attempts);
    let reason = cut(error.to_string());
    failures.insert(
        image.to_string(),
        Failure {
            attempts,
            next_try_ms: at_ms + wait.as_millis() as u64,
            reason: reason.clone(),
        },
    );
    Status::Failed {
        attempts,
        next_try_in: wait,
        reason,
    }
}

/// `text` within [`REASON_BYTES`], cut on a character boundary.
fn cut(mut text: String) -> String {
    if text.len() > REASON_BYTES {
        let mut end = REASON_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}
