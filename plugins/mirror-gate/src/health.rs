//! The health of one cache whose mirror mirror-gate wrote: when to withdraw
//! the mirror (its cache failed every probe for `withdraw-after`) and when to
//! restore it (its cache answered every probe for `restore-after`).
//!
//! Pure functions of the previous [`Record`], one probe, the time and the
//! [`Thresholds`]: the record lives in `state`, so a restart or a reload
//! resumes where it stood. Each threshold needs an unbroken run of the same
//! probe result, so a flapping cache neither withdraws nor restores: that is
//! the hysteresis. A cache whose mirror was never written has no record and is
//! only waited for: its first answer writes the mirror at once.
//!
//! Times are milliseconds since the Unix epoch, from the wall clock (state
//! outlives the process); a clock that went back restarts a timer rather than
//! stretching it.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    pub withdraw_after_ms: u64,
    pub restore_after_ms: u64,
    /// How soon to probe again while a cache is not answering or recovering.
    pub probe_interval_ms: u64,
}

/// The health of a cache whose mirror mirror-gate wrote. The default is a
/// mirror in place whose probes pass (what a record of an earlier version,
/// which knew no health, means).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct Record {
    /// While the mirror is in place: when its probes started failing,
    /// continuously since.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failing_since_ms: Option<u64>,
    /// Set while the mirror is withdrawn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub withdrawn: Option<Withdrawn>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Withdrawn {
    pub since_ms: u64,
    /// When its probes started answering, continuously since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answering_since_ms: Option<u64>,
    /// Up to when the withdrawn time has been counted in the metric.
    pub counted_until_ms: u64,
}

/// Where a written mirror stands, for the outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// In place, its cache answering.
    Answering,
    /// In place, its cache failing for this long.
    Failing { for_ms: u64 },
    /// Withdrawn for this long; its cache answering again since
    /// `answering_for_ms`, if it is.
    Withdrawn {
        for_ms: u64,
        answering_for_ms: Option<u64>,
    },
}

impl Record {
    /// Withdrawn time not yet counted in the metric, up to `now`.
    pub fn uncounted_withdrawn_ms(&self, now: u64) -> u64 {
        self.withdrawn
            .as_ref()
            .map_or(0, |w| now.saturating_sub(w.counted_until_ms))
    }

    pub fn standing(&self, now: u64) -> Standing {
        match (&self.withdrawn, self.failing_since_ms) {
            (Some(withdrawn), _) => Standing::Withdrawn {
                for_ms: now.saturating_sub(withdrawn.since_ms),
                answering_for_ms: withdrawn
                    .answering_since_ms
                    .map(|since| now.saturating_sub(since)),
            },
            (None, Some(since)) => Standing::Failing {
                for_ms: now.saturating_sub(since),
            },
            (None, None) => Standing::Answering,
        }
    }
}

/// What one probe of the cache found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    Answering,
    Failing,
}

/// What to do with the cache's mirror.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Never written and not answering: write nothing yet.
    Wait,
    /// The cache answers: write the mirror (the first time, or again).
    Write,
    /// In place but failing, for less than withdraw-after: leave it.
    Keep,
    /// Failing for withdraw-after: remove the mirror.
    Withdraw,
    /// Withdrawn, and not answering for restore-after yet: leave it out.
    StayWithdrawn,
    /// Withdrawn, and answering for restore-after: write the mirror again.
    Restore,
}

/// The decision for one cache at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub action: Action,
    /// The record to keep; none while nothing was ever written.
    pub record: Option<Record>,
    /// Withdrawn time since it was last counted, for the metric.
    pub withdrawn_ms: u64,
    /// When to probe again, in milliseconds from now; none while steady.
    pub recheck_ms: Option<u64>,
}

/// Decide what to do with a cache's mirror, given what was recorded
/// (`previous`, none if its mirror was never written) and what the probe at
/// `now` found.
pub fn step(previous: Option<&Record>, probe: Probe, now: u64, thresholds: &Thresholds) -> Step {
    let interval = thresholds.probe_interval_ms;
    let Some(previous) = previous else {
        return match probe {
            Probe::Answering => Step::steady(Action::Write),
            Probe::Failing => Step {
                action: Action::Wait,
                record: None,
                withdrawn_ms: 0,
                recheck_ms: Some(interval),
            },
        };
    };
    let Some(withdrawn) = &previous.withdrawn else {
        return in_place(previous, probe, now, thresholds);
    };
    let withdrawn_ms = previous.uncounted_withdrawn_ms(now);
    let answering_since = match probe {
        Probe::Failing => None,
        Probe::Answering => Some(started(withdrawn.answering_since_ms, now)),
    };
    if let Some(since) = answering_since
        && now - since >= thresholds.restore_after_ms
    {
        return Step {
            withdrawn_ms,
            ..Step::steady(Action::Restore)
        };
    }
    let recheck = answering_since.map_or(interval, |since| {
        interval.min(since + thresholds.restore_after_ms - now)
    });
    Step {
        action: Action::StayWithdrawn,
        record: Some(Record {
            failing_since_ms: None,
            withdrawn: Some(Withdrawn {
                since_ms: withdrawn.since_ms.min(now),
                answering_since_ms: answering_since,
                counted_until_ms: now,
            }),
        }),
        withdrawn_ms,
        recheck_ms: Some(recheck),
    }
}

fn in_place(previous: &Record, probe: Probe, now: u64, thresholds: &Thresholds) -> Step {
    if probe == Probe::Answering {
        return Step::steady(Action::Write);
    }
    let failing_since = started(previous.failing_since_ms, now);
    let failing_for = now - failing_since;
    if failing_for >= thresholds.withdraw_after_ms {
        return Step {
            action: Action::Withdraw,
            record: Some(Record {
                failing_since_ms: None,
                withdrawn: Some(Withdrawn {
                    since_ms: now,
                    answering_since_ms: None,
                    counted_until_ms: now,
                }),
            }),
            withdrawn_ms: 0,
            recheck_ms: Some(thresholds.probe_interval_ms),
        };
    }
    Step {
        action: Action::Keep,
        record: Some(Record {
            failing_since_ms: Some(failing_since),
            withdrawn: None,
        }),
        withdrawn_ms: 0,
        recheck_ms: Some(
            thresholds
                .probe_interval_ms
                .min(thresholds.withdraw_after_ms - failing_for),
        ),
    }
}

/// When a run of equal probe results started: `since`, unless there is none
/// yet or the clock went back past it; then now.
fn started(since: Option<u64>, now: u64) -> u64 {
    since.filter(|&since| since <= now).unwrap_or(now)
}

impl Step {
    /// A mirror in place whose cache answers: nothing to watch.
    fn steady(action: Action) -> Step {
        Step {
            action,
            record: Some(Record::default()),
            withdrawn_ms: 0,
            recheck_ms: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Probe::{Answering, Failing};

    const T0: u64 = 1_700_000_000_000;
    const SECOND: u64 = 1000;
    const THRESHOLDS: Thresholds = Thresholds {
        withdraw_after_ms: 10 * SECOND,
        restore_after_ms: 30 * SECOND,
        probe_interval_ms: 5 * SECOND,
    };

    /// A cache probed over time, its record carried from step to step through
    /// JSON, as `state` carries it between reconciles (and restarts).
    struct Cache {
        record: Option<Record>,
        withdrawn_ms: u64,
    }

    impl Cache {
        fn never_written() -> Cache {
            Cache {
                record: None,
                withdrawn_ms: 0,
            }
        }

        fn in_place() -> Cache {
            Cache {
                record: Some(Record::default()),
                withdrawn_ms: 0,
            }
        }

        fn probe(&mut self, probe: Probe, at: u64) -> Step {
            let step = step(self.record.as_ref(), probe, at, &THRESHOLDS);
            self.record = step.record.as_ref().map(|record| {
                let text = serde_json::to_string(record).unwrap();
                serde_json::from_str(&text).unwrap()
            });
            self.withdrawn_ms += step.withdrawn_ms;
            step
        }

        fn withdrawn(&self) -> bool {
            self.record.as_ref().is_some_and(|r| r.withdrawn.is_some())
        }
    }

    #[test]
    fn a_cache_never_written_is_waited_for_never_withdrawn() {
        let mut cache = Cache::never_written();
        for at in (0..600).map(|s| T0 + s * SECOND) {
            let step = cache.probe(Failing, at);
            assert_eq!(step.action, Action::Wait);
            assert_eq!(step.recheck_ms, Some(5 * SECOND));
            assert_eq!(step.record, None);
        }
        let step = cache.probe(Answering, T0 + 600 * SECOND);
        assert_eq!(
            step.action,
            Action::Write,
            "the first answer writes at once"
        );
        assert_eq!(step.recheck_ms, None);
        assert_eq!(cache.record, Some(Record::default()));
    }

    #[test]
    fn withdraws_exactly_when_failing_for_withdraw_after() {
        let mut cache = Cache::in_place();
        let step = cache.probe(Failing, T0);
        assert_eq!(step.action, Action::Keep);
        assert_eq!(step.recheck_ms, Some(5 * SECOND));
        let step = cache.probe(Failing, T0 + 7 * SECOND);
        assert_eq!(step.action, Action::Keep);
        assert_eq!(
            step.recheck_ms,
            Some(3 * SECOND),
            "woken when the decision is due"
        );
        assert_eq!(
            cache.probe(Failing, T0 + 10 * SECOND - 1).action,
            Action::Keep
        );
        let step = cache.probe(Failing, T0 + 10 * SECOND);
        assert_eq!(step.action, Action::Withdraw);
        assert_eq!(step.recheck_ms, Some(5 * SECOND), "watching for its return");
        assert_eq!(
            cache
                .record
                .as_ref()
                .unwrap()
                .withdrawn
                .as_ref()
                .unwrap()
                .since_ms,
            T0 + 10 * SECOND
        );
        assert_eq!(
            cache.probe(Failing, T0 + 15 * SECOND).action,
            Action::StayWithdrawn
        );
    }

    #[test]
    fn an_answer_restarts_the_withdraw_timer() {
        let mut cache = Cache::in_place();
        cache.probe(Failing, T0);
        cache.probe(Failing, T0 + 9 * SECOND);
        assert_eq!(cache.probe(Answering, T0 + 9500).action, Action::Write);
        assert_eq!(cache.record, Some(Record::default()));
        assert_eq!(cache.probe(Failing, T0 + 10 * SECOND).action, Action::Keep);
        assert_eq!(cache.probe(Failing, T0 + 19 * SECOND).action, Action::Keep);
        assert_eq!(
            cache.probe(Failing, T0 + 20 * SECOND).action,
            Action::Withdraw
        );
    }

    #[test]
    fn restores_only_after_answering_continuously_for_restore_after() {
        let mut cache = Cache::in_place();
        cache.probe(Failing, T0);
        assert_eq!(
            cache.probe(Failing, T0 + 10 * SECOND).action,
            Action::Withdraw
        );
        let answering = T0 + 20 * SECOND;
        let step = cache.probe(Answering, answering);
        assert_eq!(step.action, Action::StayWithdrawn);
        assert_eq!(step.recheck_ms, Some(5 * SECOND));
        let step = cache.probe(Answering, answering + 28 * SECOND);
        assert_eq!(step.action, Action::StayWithdrawn);
        assert_eq!(step.recheck_ms, Some(2 * SECOND));
        // One failure and the run starts over.
        assert_eq!(
            cache.probe(Failing, answering + 29 * SECOND).action,
            Action::StayWithdrawn
        );
        let again = answering + 30 * SECOND;
        assert_eq!(cache.probe(Answering, again).action, Action::StayWithdrawn);
        assert_eq!(
            cache.probe(Answering, again + 30 * SECOND - 1).action,
            Action::StayWithdrawn
        );
        let step = cache.probe(Answering, again + 30 * SECOND);
        assert_eq!(step.action, Action::Restore);
        assert_eq!(step.recheck_ms, None);
        assert_eq!(cache.record, Some(Record::default()));
    }

    #[test]
    fn a_flapping_cache_never_churns() {
        // In place, failing and answering by turns: never withdrawn.
        let mut cache = Cache::in_place();
        for (i, at) in (0..200).map(|i| (i, T0 + i * 4 * SECOND)) {
            let probe = if i % 3 == 2 { Answering } else { Failing };
            let action = cache.probe(probe, at).action;
            assert!(
                matches!(action, Action::Keep | Action::Write),
                "{i}: {action:?}"
            );
        }
        // Withdrawn, answering and failing by turns: never restored.
        let mut cache = Cache::in_place();
        cache.probe(Failing, T0);
        cache.probe(Failing, T0 + 10 * SECOND);
        for (i, at) in (0..200).map(|i| (i, T0 + 10 * SECOND + i * 4 * SECOND)) {
            let probe = if i % 7 == 6 { Failing } else { Answering };
            assert_eq!(cache.probe(probe, at).action, Action::StayWithdrawn, "{i}");
        }
    }

    #[test]
    fn withdrawn_time_is_counted_once() {
        let mut cache = Cache::in_place();
        cache.probe(Failing, T0);
        cache.probe(Failing, T0 + 10 * SECOND);
        assert_eq!(cache.withdrawn_ms, 0);
        cache.probe(Failing, T0 + 17 * SECOND);
        assert_eq!(cache.withdrawn_ms, 7 * SECOND);
        cache.probe(Answering, T0 + 20 * SECOND);
        assert_eq!(
            cache.probe(Answering, T0 + 50 * SECOND).action,
            Action::Restore
        );
        assert_eq!(
            cache.withdrawn_ms,
            40 * SECOND,
            "from withdrawal to restore"
        );
        assert!(!cache.withdrawn());
        cache.probe(Answering, T0 + 90 * SECOND);
        assert_eq!(cache.withdrawn_ms, 40 * SECOND, "nothing while in place");
    }

    #[test]
    fn standing_tells_how_long_each_state_has_lasted() {
        let mut cache = Cache::in_place();
        let standing = |cache: &Cache, at| cache.record.as_ref().unwrap().standing(at);
        assert_eq!(standing(&cache, T0), Standing::Answering);
        cache.probe(Failing, T0);
        assert_eq!(
            standing(&cache, T0 + 4 * SECOND),
            Standing::Failing { for_ms: 4 * SECOND }
        );
        cache.probe(Failing, T0 + 10 * SECOND);
        cache.probe(Answering, T0 + 15 * SECOND);
        assert_eq!(
            standing(&cache, T0 + 22 * SECOND),
            Standing::Withdrawn {
                for_ms: 12 * SECOND,
                answering_for_ms: Some(7 * SECOND)
            }
        );
        cache.probe(Failing, T0 + 22 * SECOND);
        assert_eq!(
            standing(&cache, T0 + 22 * SECOND),
            Standing::Withdrawn {
                for_ms: 12 * SECOND,
                answering_for_ms: None
            }
        );
    }

    #[test]
    fn a_restart_resumes_from_the_stored_record() {
        // Failing since T0, stored by an earlier process; this one probes at
        // T0 + 10 s and withdraws without starting the timer over.
        let stored: Record =
            serde_json::from_str(&format!(r#"{{"failing-since-ms": {T0}}}"#)).unwrap();
        let step = step(Some(&stored), Failing, T0 + 10 * SECOND, &THRESHOLDS);
        assert_eq!(step.action, Action::Withdraw);
        // A record of a version that knew no health is a mirror in place.
        let old: Record = serde_json::from_str("{}").unwrap();
        assert_eq!(old, Record::default());
        assert_eq!(
            serde_json::to_string(&Record::default()).unwrap(),
            "{}",
            "a healthy record stays small"
        );
    }

    #[test]
    fn a_clock_gone_back_restarts_timers_and_counts_nothing() {
        let mut cache = Cache::in_place();
        cache.probe(Failing, T0);
        assert_eq!(cache.probe(Failing, T0 - 60 * SECOND).action, Action::Keep);
        assert_eq!(
            cache.probe(Failing, T0 - 51 * SECOND).action,
            Action::Keep,
            "failing since the clock's new now, not since T0"
        );
        assert_eq!(
            cache.probe(Failing, T0 - 50 * SECOND).action,
            Action::Withdraw
        );
        let step = cache.probe(Answering, T0 - 120 * SECOND);
        assert_eq!(step.action, Action::StayWithdrawn);
        assert_eq!(step.withdrawn_ms, 0);
        let withdrawn = cache.record.unwrap().withdrawn.unwrap();
        assert_eq!(withdrawn.since_ms, T0 - 120 * SECOND);
        assert_eq!(withdrawn.counted_until_ms, T0 - 120 * SECOND);
    }
}
