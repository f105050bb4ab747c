//! Maintenance windows: when a fleet disruption class allows disruptive operations.
//!
//! A window is a 5-field cron expression read in an IANA time zone, open for a fixed
//! duration from each fire time. Cron matching (including DST gaps and overlaps) is
//! croner's; this module adds durations, exclusion dates and the "when next" search.

use std::time::{Duration, SystemTime};

use chrono::{DateTime, NaiveDate, NaiveTime, Offset, SecondsFormat, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

const EXPECTED_CRON: &str = "expected 5 fields: minute hour day-of-month month day-of-week, \
                             as in \"0 2 * * 1-5\"";
/// Field names and value ranges, to name the field croner rejected.
const FIELDS: [(&str, u32, u32); 5] = [
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 7),
];
const MAX_DURATION: Duration = Duration::from_secs(31 * 24 * 3600);
/// How far `open_at` looks for the next opening; bounds the cost of a closed answer.
const HORIZON_DAYS: i64 = 400;

/// One `[[host.fleet.classes.<name>.windows]]` entry as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowSpec {
    pub cron: String,
    pub duration: Duration,
    pub timezone: String,
}

/// A class's maintenance windows, parsed once when the config is read.
#[derive(Debug, Clone)]
pub struct Windows {
    windows: Vec<Window>,
    /// Sorted, so a lookup is a binary search.
    exclude: Vec<NaiveDate>,
}

/// Equal when written alike: each window's text names its cron, duration and zone.
impl PartialEq for Windows {
    fn eq(&self, other: &Self) -> bool {
        self.exclude == other.exclude
            && self.windows.len() == other.windows.len()
            && self
                .windows
                .iter()
                .zip(&other.windows)
                .all(|(a, b)| a.text == b.text)
    }
}

/// Why the windows are closed at an instant, and when they open next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed {
    pub next_open: Option<SystemTime>,
    pub message: String,
}

#[derive(Debug, Clone)]
struct Window {
    cron: Cron,
    duration: TimeDelta,
    tz: Tz,
    /// "0 2 * * 1-5 for 3h in Europe/Berlin", for messages.
    text: String,
}

/// Vixie semantics: exactly 5 fields, and day-of-month OR day-of-week when both are
/// restricted (croner's default; `dom_and_dow(true)` would make it AND).
fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .dom_and_dow(false)
        .build()
}

/// Parses a cron expression, or says what is wrong with it (without the "expected" part).
fn parse_cron(text: &str) -> Result<Cron, String> {
    let fields: Vec<&str> = text.split_whitespace().collect();
    match fields.len() {
        0 => return Err("it is empty".into()),
        // Vixie's @daily and friends; croner expands them to 5 fields.
        1 if fields[0].starts_with('@') => {
            return parser()
                .parse(text)
                .map_err(|_| "it is not a known @nickname".into());
        }
        5 => {}
        6 | 7 => return Err("seconds and years are not supported".into()),
        n => return Err(format!("it has {n} fields")),
    }
    // croner's "+" prefix turns day-of-month/day-of-week into AND, which Vixie cron lacks.
    if fields[4].starts_with('+') {
        return Err(format!(
            "day-of-week \"{}\" uses a non-standard \"+\"",
            fields[4]
        ));
    }
    let cron = parser().parse(text).map_err(|e| {
        // Probe one field at a time so the message can name the bad one.
        for (i, &(name, lo, hi)) in FIELDS.iter().enumerate() {
            let mut probe = ["*"; 5];
            probe[i] = fields[i];
            if parser().parse(&probe.join(" ")).is_ok() {
                continue;
            }
            // Values are the numbers outside steps ("1-9/2" has values 1 and 9).
            let values = fields[i]
                .split(',')
                .flat_map(|p| p.split('/').next().unwrap_or("").split('-'));
            return match values
                .filter_map(|v| v.parse::<u32>().ok())
                .find(|v| *v < lo || *v > hi)
            {
                Some(v) => format!("{name} {v} is out of range"),
                None => format!("{name} \"{}\" is not valid ({e})", fields[i]),
            };
        }
        e.to_string()
    })?;
    // "0 0 30 2 *" parses but never fires; a window that never opens is a config mistake.
    let epoch = Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).unwrap();
    if cron.find_next_occurrence(&epoch, true).is_err() {
        return Err("it never fires".into());
    }
    Ok(cron)
}

/// Strict YYYY-MM-DD: chrono's `%Y-%m-%d` also takes "2026-1-5" and "+2026-01-05".
fn parse_date(s: &str) -> Option<NaiveDate> {
    let d = NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()?;
    (d.format("%Y-%m-%d").to_string() == s).then_some(d)
}

/// "3h", "90m", "45s" style, for messages.
fn human(d: Duration) -> String {
    match d.as_secs() {
        _ if d.subsec_nanos() != 0 => format!("{d:?}"),
        s if s > 0 && s % 3600 == 0 => format!("{}h", s / 3600),
        s if s > 0 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The first instant whose local date in `tz` is `d`.
fn day_start(tz: &Tz, d: NaiveDate) -> DateTime<Utc> {
    let midnight = d.and_time(NaiveTime::MIN);
    if let Some(t) = tz.from_local_datetime(&midnight).earliest() {
        return t.with_timezone(&Utc);
    }
    // Midnight is inside a DST gap (e.g. America/Santiago): the day starts when the
    // gap does, i.e. when the offset in force the day before would reach midnight.
    let before = tz
        .offset_from_local_datetime(&(midnight - TimeDelta::days(1)))
        .earliest();
    let secs = before.map_or(0, |o| o.fix().local_minus_utc());
    (midnight - TimeDelta::seconds(secs.into())).and_utc()
}

impl Window {
    /// Whether `t` lies in `[s, s + duration)` for a fire time `s`. The latest fire at or
    /// before `t` is the only one to check: earlier fires end no later than it does.
    fn is_open(&self, t: DateTime<Utc>) -> bool {
        let local = t.with_timezone(&self.tz);
        match self.cron.find_previous_occurrence(&local, true) {
            Ok(s) => s.with_timezone(&Utc) + self.duration > t,
            Err(_) => false,
        }
    }

    fn excluded(&self, t: DateTime<Utc>, exclude: &[NaiveDate]) -> Option<NaiveDate> {
        let d = t.with_timezone(&self.tz).date_naive();
        exclude.binary_search(&d).is_ok().then_some(d)
    }

    /// The first instant in `[from, until)` where this window is open on a date that is
    /// not excluded: either a fire time or the local midnight after an excluded date.
    fn next_allowed(
        &self,
        from: DateTime<Utc>,
        until: DateTime<Utc>,
        exclude: &[NaiveDate],
    ) -> Option<DateTime<Utc>> {
        let mut t = from;
        while t < until {
            let next = if !self.is_open(t) {
                // Not open, so no fire at `t` itself: search strictly after it.
                let s = self
                    .cron
                    .find_next_occurrence(&t.with_timezone(&self.tz), false)
                    .ok()?;
                s.with_timezone(&Utc)
            } else if let Some(d) = self.excluded(t, exclude) {
                day_start(&self.tz, d.succ_opt()?)
            } else {
                return Some(t);
            };
            if next <= t {
                return None; // no progress: never loop forever on a surprise from the calendar
            }
            t = next;
        }
        None
    }
}

impl Windows {
    /// Parse windows and exclusion dates ("YYYY-MM-DD", each read in every window's own zone).
    /// Errors are one line that says what is wrong and what is expected.
    pub fn parse(specs: &[WindowSpec], exclude: &[String]) -> Result<Windows, String> {
        let mut windows = Vec::with_capacity(specs.len());
        for (i, spec) in specs.iter().enumerate() {
            let n = i + 1;
            let cron = parse_cron(&spec.cron)
                .map_err(|p| format!("window {n}: cron \"{}\": {p}; {EXPECTED_CRON}", spec.cron))?;
            let tz: Tz = spec.timezone.parse().map_err(|_| {
                format!(
                    "window {n}: unknown time zone \"{}\"; expected an IANA name such as \
                     \"Europe/Berlin\" or \"UTC\"",
                    spec.timezone
                )
            })?;
            let d = spec.duration;
            if d.is_zero() || d > MAX_DURATION {
                let what = if d.is_zero() { "zero" } else { "over 31 days" };
                return Err(format!(
                    "window {n}: duration {} is {what}; expected more than zero and at most 31 days",
                    human(d)
                ));
            }
            let cron_text = spec.cron.split_whitespace().collect::<Vec<_>>().join(" ");
            let text = format!("{cron_text} for {} in {tz}", human(d));
            let duration = TimeDelta::from_std(d).expect("at most 31 days");
            windows.push(Window {
                cron,
                duration,
                tz,
                text,
            });
        }
        let mut dates = exclude
            .iter()
            .map(|s| {
                parse_date(s).ok_or_else(|| format!("exclude \"{s}\": expected a date YYYY-MM-DD"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        dates.sort_unstable();
        dates.dedup();
        Ok(Windows {
            windows,
            exclude: dates,
        })
    }

    /// No windows: always open.
    pub fn always(&self) -> bool {
        self.windows.is_empty()
    }

    /// Ok when open at `at`; otherwise when the windows open next (within 400 days) and why.
    pub fn open_at(&self, at: SystemTime) -> Result<(), Closed> {
        if self.always() {
            return Ok(());
        }
        let t = DateTime::<Utc>::from(at);
        let mut excluded = None;
        for w in &self.windows {
            if w.is_open(t) {
                match w.excluded(t, &self.exclude) {
                    None => return Ok(()),
                    Some(d) => _ = excluded.get_or_insert((d, w.tz)),
                }
            }
        }
        let until = t
            .checked_add_signed(TimeDelta::days(HORIZON_DAYS))
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        let next = self
            .windows
            .iter()
            .filter_map(|w| w.next_allowed(t, until, &self.exclude))
            .min();
        let when = |what: &str| match next {
            Some(n) => format!("the next {what}opens at {}", rfc3339(n)),
            None => format!("no window opens within {HORIZON_DAYS} days"),
        };
        let message = match excluded {
            Some((d, tz)) => format!("{d} is an excluded date ({tz}); {}", when("window ")),
            None => {
                let all: Vec<&str> = self.windows.iter().map(|w| w.text.as_str()).collect();
                format!(
                    "outside every maintenance window ({}); {}",
                    all.join(", "),
                    when("")
                )
            }
        };
        Err(Closed {
            next_open: next.map(SystemTime::from),
            message,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WEEKDAYS: &str = "0 2 * * 1-5";

    fn at(s: &str) -> SystemTime {
        DateTime::parse_from_rfc3339(s).unwrap().into()
    }
    fn spec(cron: &str, minutes: u64, tz: &str) -> WindowSpec {
        let (cron, timezone) = (cron.into(), tz.into());
        WindowSpec {
            cron,
            duration: Duration::from_secs(minutes * 60),
            timezone,
        }
    }
    fn parse(specs: &[WindowSpec], exclude: &[&str]) -> Result<Windows, String> {
        let exclude: Vec<String> = exclude.iter().map(|s| s.to_string()).collect();
        Windows::parse(specs, &exclude)
    }
    /// A weekday window in Berlin and a Saturday one in UTC.
    fn typical(exclude: &[&str]) -> Windows {
        let berlin = spec(WEEKDAYS, 180, "Europe/Berlin");
        parse(&[berlin, spec("0 12 * * 6", 60, "UTC")], exclude).unwrap()
    }
    fn one(cron: &str, minutes: u64, tz: &str, exclude: &[&str]) -> Windows {
        parse(&[spec(cron, minutes, tz)], exclude).unwrap()
    }
    /// `open_at(t)` as "open", the RFC 3339 next opening, or "never".
    fn state(w: &Windows, t: &str) -> String {
        match w.open_at(at(t)) {
            Ok(()) => "open".into(),
            Err(c) => c.next_open.map_or("never".into(), |n| rfc3339(n.into())),
        }
    }
    impl Windows {
        fn check(&self, cases: &[(&str, &str)]) {
            for (t, want) in cases {
                assert_eq!(state(self, t), *want, "at {t}");
            }
        }
    }
    fn message(w: &Windows, t: &str) -> String {
        w.open_at(at(t)).expect_err(t).message
    }

    #[test]
    fn weekday_window_edges_in_berlin() {
        // December is CET (UTC+1), so 02:00 local is 01:00Z; 2026-12-01 is a Tuesday.
        let w = one(WEEKDAYS, 180, "Europe/Berlin", &[]);
        w.check(&[
            ("2026-12-01T00:59:59.999Z", "2026-12-01T01:00:00Z"),
            ("2026-12-01T01:00:00Z", "open"), // start inclusive
            ("2026-12-01T03:59:59.999Z", "open"),
            ("2026-12-01T04:00:00Z", "2026-12-02T01:00:00Z"), // end exclusive
            ("2026-12-05T01:30:00Z", "2026-12-07T01:00:00Z"), // Saturday: Monday next
        ]);
        let want = "outside every maintenance window (0 2 * * 1-5 for 3h in Europe/Berlin); \
                    the next opens at 2026-12-01T01:00:00Z";
        assert_eq!(message(&w, "2026-11-30T12:00:00Z"), want);
    }

    #[test]
    fn window_spanning_midnight() {
        let w = one("0 23 * * *", 180, "Europe/Berlin", &[]);
        w.check(&[
            ("2026-12-02T00:00:00Z", "open"), // 01:00 local the next day
            ("2026-12-02T00:59:59Z", "open"),
            ("2026-12-02T01:00:00Z", "2026-12-02T22:00:00Z"), // 02:00 local: closed
        ]);
    }

    /// Spring forward in Berlin, 2026-03-29: 02:00 CET jumps to 03:00 CEST. croner runs a
    /// fixed-time job that falls in the gap once, at the gap's end (03:00 CEST = 01:00Z);
    /// a wildcard hour-2 job has no fire time that day.
    #[test]
    fn dst_spring_forward_gap() {
        one("30 2 * * *", 60, "Europe/Berlin", &[]).check(&[
            ("2026-03-28T01:30:00Z", "open"), // 02:30 CET the day before
            ("2026-03-29T00:59:59Z", "2026-03-29T01:00:00Z"),
            ("2026-03-29T01:59:59Z", "open"),
            ("2026-03-29T02:00:00Z", "2026-03-30T00:30:00Z"),
        ]);
        // croner 3.x also fired this one at 03:00 CEST that day (croner-rust #67).
        let before_gap = one("0 1 * * *", 30, "Europe/Berlin", &[]);
        before_gap.check(&[("2026-03-29T01:00:00Z", "2026-03-29T23:00:00Z")]);
        let every_minute = one("* 2 * * *", 1, "Europe/Berlin", &[]);
        every_minute.check(&[("2026-03-29T00:00:00Z", "2026-03-30T00:00:00Z")]);
    }

    /// Fall back in Berlin, 2026-10-25: 02:00-03:00 local happens twice (00:00Z-01:00Z
    /// CEST, then 01:00Z-02:00Z CET). A fixed-time job fires only in the first pass, a
    /// wildcard job in both. Durations are elapsed time, not wall-clock time.
    #[test]
    fn dst_fall_back_repeated_hour() {
        one("30 2 * * *", 60, "Europe/Berlin", &[]).check(&[
            ("2026-10-25T00:29:59Z", "2026-10-25T00:30:00Z"),
            ("2026-10-25T01:29:59Z", "open"),
            ("2026-10-25T01:30:00Z", "2026-10-26T01:30:00Z"), // the second 02:30
        ]);
        one("* 2 * * *", 1, "Europe/Berlin", &[]).check(&[
            ("2026-10-25T00:30:00Z", "open"),
            ("2026-10-25T01:30:00Z", "open"),
        ]);
    }

    #[test]
    fn excluded_dates_close_the_whole_local_day() {
        let w = one("0 0 * * *", 24 * 60, "Europe/Berlin", &["2026-12-24"]);
        w.check(&[
            ("2026-12-23T22:59:59Z", "open"),
            ("2026-12-23T23:00:00Z", "2026-12-24T23:00:00Z"), // local midnight
            ("2026-12-24T22:59:59Z", "2026-12-24T23:00:00Z"),
            ("2026-12-24T23:00:00Z", "open"),
        ]);
        let want = "2026-12-24 is an excluded date (Europe/Berlin); \
                    the next window opens at 2026-12-24T23:00:00Z";
        assert_eq!(message(&w, "2026-12-24T12:00:00Z"), want);
        // Each window reads the date in its own zone: 23:30Z is still the 23rd in UTC.
        let utc = one("0 0 * * *", 24 * 60, "UTC", &["2026-12-24"]);
        utc.check(&[("2026-12-23T23:30:00Z", "open")]);
        let weekdays = one(WEEKDAYS, 180, "Europe/Berlin", &["2026-12-01"]);
        weekdays.check(&[("2026-12-01T01:30:00Z", "2026-12-02T01:00:00Z")]);
    }

    /// A window that starts on an excluded day and runs past local midnight opens then.
    #[test]
    fn excluded_start_day_opens_at_local_midnight() {
        one("0 23 * * *", 180, "Europe/Berlin", &["2026-12-01"]).check(&[
            ("2026-12-01T22:00:00Z", "2026-12-01T23:00:00Z"),
            ("2026-12-01T23:00:00Z", "open"),
        ]);
        // Santiago has no 2026-09-06 00:00 (clocks go from 24:00 -04 to 01:00 -03):
        // that day starts at 04:00Z, where the gap is.
        let gap = NaiveDate::from_ymd_opt(2026, 9, 6)
            .unwrap()
            .and_time(NaiveTime::MIN);
        let santiago = chrono_tz::America::Santiago;
        assert!(santiago.from_local_datetime(&gap).earliest().is_none());
        let w = one("0 12 * * *", 24 * 60, "America/Santiago", &["2026-09-05"]);
        w.check(&[("2026-09-05T20:00:00Z", "2026-09-06T04:00:00Z")]);
    }

    /// croner's default is Vixie's: when both day fields are restricted, either matches.
    #[test]
    fn next_open_across_a_month_with_dom_or_dow() {
        one("0 3 1 * *", 120, "UTC", &[]).check(&[
            ("2026-01-15T00:00:00Z", "2026-02-01T03:00:00Z"),
            ("2026-12-15T00:00:00Z", "2027-01-01T03:00:00Z"),
        ]);
        one("0 3 1 * 1", 120, "UTC", &[]).check(&[
            ("2026-02-23T03:00:00Z", "open"), // a Monday, not the 1st
            ("2026-02-24T00:00:00Z", "2026-03-01T03:00:00Z"), // a Sunday, the 1st
        ]);
        // The next 29 February, 2028-02-29, is past the 400-day horizon.
        let leap_day = one("0 0 29 2 *", 60, "UTC", &[]);
        leap_day.check(&[("2026-03-01T00:00:00Z", "never")]);
        assert!(
            message(&leap_day, "2026-03-01T00:00:00Z")
                .ends_with("; no window opens within 400 days")
        );
    }

    #[test]
    fn no_windows_is_always_open() {
        let w = parse(&[], &["2026-12-24"]).unwrap();
        assert!(w.always());
        w.check(&[("2026-12-24T12:00:00Z", "open")]);
        assert!(!one("0 2 * * *", 60, "UTC", &[]).always());
    }

    #[test]
    fn either_of_two_windows_opens() {
        let w = typical(&[]);
        w.check(&[
            ("2026-12-01T01:00:00Z", "open"),
            ("2026-12-05T12:30:00Z", "open"),
            ("2026-12-05T13:00:00Z", "2026-12-07T01:00:00Z"),
        ]);
        let want = "outside every maintenance window (0 2 * * 1-5 for 3h in Europe/Berlin, \
                    0 12 * * 6 for 1h in UTC); the next opens at 2026-12-07T01:00:00Z";
        assert_eq!(message(&w, "2026-12-05T13:00:00Z"), want);
    }

    #[test]
    fn parse_errors_say_what_is_wrong_and_what_is_expected() {
        let ok = spec("0 2 * * *", 60, "UTC");
        let err = |s: WindowSpec| parse(&[ok.clone(), s], &[]).expect_err("rejected");
        let cron = |c: &str| err(spec(c, 60, "UTC"));
        let expected = "expected 5 fields: minute hour day-of-month month day-of-week, \
                        as in \"0 2 * * 1-5\"";
        for (c, problem) in [
            ("0 25 * * *", "hour 25 is out of range"),
            ("", "it is empty"),
            ("0 0 2 * * *", "seconds and years are not supported"),
            ("0 0 2 * * * 2027", "seconds and years are not supported"),
            ("0 2 * *", "it has 4 fields"),
            ("0 2 * * 1-9", "day-of-week 9 is out of range"),
            ("0 0 30 2 *", "it never fires"),
            ("0 0 1 * +1", "day-of-week \"+1\" uses a non-standard \"+\""),
            ("@reboot", "it is not a known @nickname"),
        ] {
            assert_eq!(
                cron(c),
                format!("window 2: cron \"{c}\": {problem}; {expected}")
            );
        }
        assert!(
            cron("x 2 * * *")
                .starts_with("window 2: cron \"x 2 * * *\": minute \"x\" is not valid (")
        );
        assert!(parse(&[spec("@daily", 60, "UTC")], &[]).is_ok());

        let want = "window 2: unknown time zone \"Europe/Berln\"; \
                    expected an IANA name such as \"Europe/Berlin\" or \"UTC\"";
        assert_eq!(err(spec("0 2 * * *", 60, "Europe/Berln")), want);
        let limits = "expected more than zero and at most 31 days";
        let zero = WindowSpec {
            duration: Duration::ZERO,
            ..ok.clone()
        };
        assert_eq!(
            err(zero),
            format!("window 2: duration 0s is zero; {limits}")
        );
        let long = format!("window 2: duration 745h is over 31 days; {limits}");
        assert_eq!(err(spec("0 2 * * *", 745 * 60, "UTC")), long);
        assert!(parse(&[spec("0 2 * * *", 744 * 60, "UTC")], &[]).is_ok());

        for bad in ["2026-13-01", "2026-02-30", "2026-1-05", "tomorrow"] {
            let want = format!("exclude \"{bad}\": expected a date YYYY-MM-DD");
            assert_eq!(parse(std::slice::from_ref(&ok), &[bad]).err(), Some(want));
        }
    }

    /// Not asserted (machines differ): prints the cost of a typical config's `open_at`.
    #[test]
    fn open_at_speed() {
        let w = typical(&["2026-12-24", "2026-12-25", "2026-12-31"]);
        let (start, n) = (at("2026-11-30T00:00:00Z"), 2000u32);
        let begin = std::time::Instant::now();
        let closed = (0..n)
            .filter(|i| {
                w.open_at(start + Duration::from_secs(u64::from(*i) * 1020))
                    .is_err()
            })
            .count();
        let per_call = begin.elapsed() / n;
        println!("open_at: {per_call:?} per call over {n} calls, {closed} of them closed");
        assert!(
            closed > 0 && closed < n as usize,
            "the loop covers both answers"
        );
    }
}
