//! Scheduler behaviour under tokio's paused clock: time advances only when every
//! task is idle, so these tests are exact and never sleep for real.

use super::*;
use std::sync::Mutex;

/// Records each run (time, triggers); fails while `failing` is set; each run
/// takes `busy` of (virtual) time.
#[derive(Default)]
struct Recorder {
    runs: Mutex<Vec<(String, Instant, Vec<Trigger>)>>,
    failing: Mutex<HashMap<String, bool>>,
    requeue: Mutex<Option<Duration>>,
    busy: Duration,
}

impl Runner for Recorder {
    fn run(&self, plugin: &str, triggers: Vec<Trigger>) -> RunFuture<'_> {
        let plugin = plugin.to_string();
        Box::pin(async move {
            self.runs
                .lock()
                .unwrap()
                .push((plugin.clone(), Instant::now(), triggers));
            tokio::time::sleep(self.busy).await;
            let ok = !self
                .failing
                .lock()
                .unwrap()
                .get(&plugin)
                .copied()
                .unwrap_or(false);
            RunResult {
                ok,
                requeue_after: self.requeue.lock().unwrap().take(),
                refused: false,
            }
        })
    }
}

impl Recorder {
    fn runs_of(&self, plugin: &str) -> Vec<(Instant, Vec<Trigger>)> {
        let runs = self.runs.lock().unwrap();
        runs.iter()
            .filter(|(p, _, _)| p == plugin)
            .map(|(_, at, t)| (*at, t.clone()))
            .collect()
    }
}

fn schedule(plugin: &str, interval: Option<u64>) -> Schedule {
    Schedule {
        plugin: plugin.into(),
        interval: interval.map(Duration::from_secs),
    }
}

fn start(runner: Arc<Recorder>, schedules: Vec<Schedule>) -> Scheduler {
    let mut scheduler = Scheduler::new(runner);
    for schedule in schedules {
        scheduler.upsert(schedule);
    }
    scheduler
}

/// Every run of `runs` after the first came an interval of `secs` after the
/// one before, or up to [`plugin_loop::INTERVAL_JITTER`] of it earlier.
#[track_caller]
fn assert_every_interval(runs: &[(Instant, Vec<Trigger>)], secs: f64) {
    for pair in runs.windows(2) {
        let gap = (pair[1].0 - pair[0].0).as_secs_f64();
        assert!(
            (secs * (1.0 - plugin_loop::INTERVAL_JITTER)..=secs).contains(&gap),
            "a gap of {gap} s for an interval of {secs} s"
        );
    }
}

fn kinds(triggers: &[Trigger]) -> Vec<&str> {
    triggers.iter().map(|t| t.kind.as_str()).collect()
}

#[tokio::test(start_paused = true)]
async fn runs_at_startup_then_every_interval() {
    let recorder = Arc::new(Recorder::default());
    let mut scheduler = start(recorder.clone(), vec![schedule("a", Some(10))]);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(35)).await;
    let runs = recorder.runs_of("a");
    assert_eq!(runs.len(), 4, "{runs:?}");
    assert_eq!(runs[0].0, start);
    assert_every_interval(&runs, 10.0);
    assert_eq!(kinds(&runs[0].1), ["startup"]);
    assert_eq!(kinds(&runs[1].1), ["interval"]);
    scheduler.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn triggers_during_a_run_coalesce_into_one_pending_run() {
    let recorder = Arc::new(Recorder {
        busy: Duration::from_secs(5),
        ..Default::default()
    });
    let mut scheduler = start(recorder.clone(), vec![schedule("a", None)]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let triggers = scheduler.triggers();
    for path in ["/a", "/b", "/a"] {
        assert!(triggers.send("a", Trigger::with_subject(trigger::FILE, path.to_string())));
    }
    assert!(triggers.send("a", Trigger::new("manual")));
    assert!(!triggers.send("unknown", Trigger::new("manual")));
    tokio::time::sleep(Duration::from_secs(30)).await;
    let runs = recorder.runs_of("a");
    assert_eq!(runs.len(), 2, "one running, one pending: {runs:?}");
    let subjects: Vec<_> = runs[1].1.iter().map(|t| t.to_string()).collect();
    assert_eq!(subjects, ["file:/a", "file:/b", "manual"]);
    scheduler.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn failures_back_off_without_delaying_other_plugins() {
    let recorder = Arc::new(Recorder::default());
    recorder.failing.lock().unwrap().insert("bad".into(), true);
    let mut scheduler = start(
        recorder.clone(),
        vec![schedule("bad", Some(1)), schedule("good", Some(1))],
    );
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let bad = recorder.runs_of("bad");
    let gaps: Vec<f64> = bad
        .windows(2)
        .map(|w| (w[1].0 - w[0].0).as_secs_f64())
        .collect();
    assert!(gaps.windows(2).all(|g| g[1] > g[0]), "gaps grow: {gaps:?}");
    assert!(
        bad.len() <= 7,
        "{} runs of a failing plugin in 60 s",
        bad.len()
    );
    let good = recorder.runs_of("good");
    assert!(
        good.len() >= 60,
        "{} runs of the healthy plugin",
        good.len()
    );
    assert_every_interval(&good, 1.0);
    assert_eq!(good[0].0, start);
    scheduler.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn requeue_after_schedules_one_more_run() {
    let recorder = Arc::new(Recorder::default());
    *recorder.requeue.lock().unwrap() = Some(Duration::from_secs(2));
    let mut scheduler = start(recorder.clone(), vec![schedule("a", None)]);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let runs = recorder.runs_of("a");
    assert_eq!(runs.len(), 2);
    assert_eq!((runs[1].0 - start).as_secs(), 2);
    assert_eq!(kinds(&runs[1].1), ["requeue"]);
    scheduler.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_the_run_in_flight() {
    let recorder = Arc::new(Recorder {
        busy: Duration::from_secs(5),
        ..Default::default()
    });
    let mut scheduler = start(recorder.clone(), vec![schedule("a", Some(1))]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let start = Instant::now();
    scheduler.shutdown().await;
    assert!(
        Instant::now() - start >= Duration::from_millis(4900),
        "finished the in-flight run"
    );
    assert_eq!(recorder.runs_of("a").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn upsert_changes_the_interval_and_remove_stops_the_plugin() {
    let recorder = Arc::new(Recorder::default());
    let mut scheduler = start(recorder.clone(), vec![schedule("a", Some(10))]);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(15)).await;
    scheduler.upsert(schedule("a", Some(2)));
    tokio::time::sleep(Duration::from_secs(5)).await;
    let runs = recorder.runs_of("a");
    let offsets: Vec<f64> = runs
        .iter()
        .map(|(at, _)| (*at - start).as_secs_f64())
        .collect();
    assert_eq!(offsets.len(), 4, "no second startup run: {offsets:?}");
    assert_every_interval(&runs[..2], 10.0);
    assert!(
        (16.8..=17.0).contains(&offsets[2]),
        "the new interval applies from the change: {offsets:?}"
    );
    assert_every_interval(&runs[2..], 2.0);
    scheduler.remove("a");
    assert!(!scheduler.triggers().send("a", Trigger::new("manual")));
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(recorder.runs_of("a").len(), 4);
    scheduler.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_manual_trigger_skips_the_backoff() {
    let recorder = Arc::new(Recorder::default());
    recorder.failing.lock().unwrap().insert("bad".into(), true);
    let mut scheduler = start(recorder.clone(), vec![schedule("bad", None)]);
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_secs(70)).await;
        scheduler.triggers().send("bad", Trigger::new("interval"));
    }
    // Six failures in: the next interval-like trigger would wait ~64 s.
    let runs = recorder.runs_of("bad").len();
    let asked = Instant::now();
    assert!(scheduler.triggers().send("bad", Trigger::new("manual")));
    tokio::time::sleep(Duration::from_millis(10)).await;
    let after = recorder.runs_of("bad");
    assert_eq!(after.len(), runs + 1, "ran at once");
    assert!(after.last().unwrap().0 - asked < Duration::from_millis(10));
    scheduler.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn manual_triggers_skip_a_backoff_only_once_between_scheduled_runs() {
    let recorder = Arc::new(Recorder::default());
    recorder.failing.lock().unwrap().insert("bad".into(), true);
    let mut scheduler = start(recorder.clone(), vec![schedule("bad", None)]);
    let triggers = scheduler.triggers();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_secs(70)).await;
        triggers.send("bad", Trigger::new("interval"));
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    let before = recorder.runs_of("bad").len();
    let state = triggers.schedule_of("bad").unwrap();
    let backoff_until = state.backoff_until.expect("backing off after 4 failures");
    assert!(!state.manual_skipped_backoff);
    // 20 manual triggers in 0.2 s: the first skips the backoff, the rest wait.
    for _ in 0..20 {
        assert!(triggers.send("bad", Trigger::new("manual")));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(recorder.runs_of("bad").len(), before + 1, "one skip");
    let state = triggers.schedule_of("bad").unwrap();
    assert!(state.manual_skipped_backoff, "{state:?}");
    assert!(
        state.backoff_until.unwrap() > backoff_until,
        "a longer backoff"
    );
    // The waiting manual trigger runs when the new backoff ends, not before.
    let next = state.backoff_until.unwrap();
    tokio::time::sleep_until(next - Duration::from_millis(50)).await;
    assert_eq!(recorder.runs_of("bad").len(), before + 1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let runs = recorder.runs_of("bad");
    assert_eq!(runs.len(), before + 2);
    assert!(runs.last().unwrap().0 >= next);
    // That was a scheduled-time run: the next backoff may be skipped once again.
    assert!(!triggers.schedule_of("bad").unwrap().manual_skipped_backoff);
    assert!(triggers.send("bad", Trigger::new("manual")));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(recorder.runs_of("bad").len(), before + 3);
    scheduler.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn each_plugin_publishes_its_backoff_and_next_run() {
    let runner = Arc::new(Recorder::default());
    runner.failing.lock().unwrap().insert("bad".into(), true);
    let scheduler = start(runner.clone(), vec![schedule("bad", Some(60))]);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let state = scheduler.triggers().schedule_of("bad").unwrap();
    assert!(!state.running);
    assert_eq!(state.failures, 1);
    assert_eq!(state.interval, Some(Duration::from_secs(60)));
    let backoff = state.backoff_until.unwrap() - Instant::now();
    assert!(
        backoff >= Duration::from_millis(700) && backoff <= Duration::from_millis(1200),
        "{backoff:?}"
    );
    assert!(state.next_interval.is_some());
    assert!(scheduler.triggers().schedule_of("unknown").is_none());
}
