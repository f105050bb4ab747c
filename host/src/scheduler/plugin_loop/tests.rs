//! Each step of a plugin's loop on its own, under tokio's paused clock (time
//! moves only when the test advances it or every task waits).

use super::*;
use crate::scheduler::trigger::FILE;
use std::sync::Mutex;
use tokio::time::advance;

const PLUGIN: &str = "a";
const GENERATION: u64 = 7;

/// Answers every run with `result`; records each batch and whether the loop
/// had published itself running when the run started.
struct Scripted {
    result: RunResult,
    triggers: Triggers,
    runs: Mutex<Vec<(Vec<Trigger>, Option<bool>)>>,
}

impl Runner for Scripted {
    fn run(&self, plugin: &str, batch: Vec<Trigger>) -> super::super::RunFuture<'_> {
        let running = self.triggers.schedule_of(plugin).map(|s| s.running);
        self.runs.lock().unwrap().push((batch, running));
        Box::pin(async move { self.result })
    }
}

struct Fixture {
    plugin_loop: PluginLoop,
    queue: mpsc::UnboundedSender<Message>,
    runner: Arc<Scripted>,
    triggers: Triggers,
}

/// A loop for [`PLUGIN`] whose runs answer `result`; it owns the plugin's
/// published state (its generation is the scheduled one).
fn fixture(interval: Option<u64>, result: RunResult) -> Fixture {
    let triggers = Triggers::default();
    let (queue, rx) = mpsc::unbounded_channel();
    triggers
        .senders
        .write()
        .unwrap()
        .insert(PLUGIN.into(), (GENERATION, queue.clone()));
    let runner = Arc::new(Scripted {
        result,
        triggers: triggers.clone(),
        runs: Mutex::default(),
    });
    let schedule = Schedule {
        plugin: PLUGIN.into(),
        interval: interval.map(Duration::from_secs),
    };
    let plugin_loop = PluginLoop::new(runner.clone(), schedule, rx, (triggers.clone(), GENERATION));
    Fixture {
        plugin_loop,
        queue,
        runner,
        triggers,
    }
}

const OK: RunResult = RunResult {
    ok: true,
    requeue_after: None,
    refused: false,
};
const FAILED: RunResult = RunResult {
    ok: false,
    requeue_after: None,
    refused: false,
};
const REFUSED: RunResult = RunResult {
    ok: false,
    requeue_after: None,
    refused: true,
};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// `next` is an interval run `interval` after `now`: in its last tenth.
#[track_caller]
fn assert_interval_run(next: Option<Instant>, now: Instant, interval: Duration) {
    let next = next.expect("an interval run");
    let earliest = now + interval.mul_f64(1.0 - INTERVAL_JITTER);
    assert!(
        earliest <= next && next <= now + interval,
        "{:?} after now, for an interval of {interval:?}",
        next - now
    );
}

/// Loops started together (a fleet's nodes after a rollout) run their
/// intervals apart: each run is drawn within the interval's last tenth,
/// never later than the interval.
#[tokio::test(start_paused = true)]
async fn interval_runs_are_spread_and_never_late() {
    let now = Instant::now();
    let runs: Vec<Instant> = (0..200)
        .map(|_| fixture(Some(100), OK).plugin_loop.next_interval.unwrap())
        .collect();
    for run in &runs {
        assert_interval_run(Some(*run), now, secs(100));
    }
    let (first, last) = (runs.iter().min().unwrap(), runs.iter().max().unwrap());
    assert!(
        *last - *first >= secs(5),
        "200 loops' first interval runs within {:?} of each other",
        *last - *first
    );
}

fn kinds(pending: &BTreeSet<Trigger>) -> Vec<&str> {
    pending.iter().map(|t| t.kind.as_str()).collect()
}

#[tokio::test(start_paused = true)]
async fn due_timers_join_the_pending_triggers_once() {
    let mut f = fixture(Some(10), OK);
    let start = Instant::now();
    f.plugin_loop.fire_due_timers(start);
    assert!(f.plugin_loop.pending.is_empty(), "nothing due yet");

    advance(secs(10)).await;
    let now = Instant::now();
    f.plugin_loop.fire_due_timers(now);
    assert_eq!(kinds(&f.plugin_loop.pending), ["interval"]);
    assert_interval_run(f.plugin_loop.next_interval, now, secs(10));

    f.plugin_loop.settle(
        RunResult {
            requeue_after: Some(secs(2)),
            ..OK
        },
        now,
    );
    assert_eq!(f.plugin_loop.requeue_at, Some(now + secs(2)));
    advance(secs(2)).await;
    f.plugin_loop.fire_due_timers(Instant::now());
    assert_eq!(kinds(&f.plugin_loop.pending), ["interval", "requeue"]);
    assert_eq!(f.plugin_loop.requeue_at, None, "a requeue fires once");
}

#[tokio::test(start_paused = true)]
async fn failures_back_off_longer_each_time_and_a_success_clears_it() {
    let mut f = fixture(None, OK);
    let now = Instant::now();
    f.plugin_loop.settle(FAILED, now);
    let first = f.plugin_loop.not_before - now;
    assert!(
        first >= secs(1).mul_f64(0.8) && first <= secs(1).mul_f64(1.2),
        "{first:?}"
    );
    f.plugin_loop.settle(FAILED, now);
    let second = f.plugin_loop.not_before - now;
    assert!(
        second >= secs(2).mul_f64(0.8) && second <= secs(2).mul_f64(1.2),
        "{second:?}"
    );
    assert_eq!(f.plugin_loop.backoff.failures(), 2);

    f.plugin_loop.settle(OK, now);
    assert_eq!(f.plugin_loop.not_before, now);
    assert_eq!(f.plugin_loop.backoff.failures(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_budgets_refusal_waits_for_the_next_interval_without_backing_off() {
    let mut f = fixture(Some(10), OK);
    let now = Instant::now();
    f.plugin_loop.settle(FAILED, now);
    for _ in 0..20 {
        f.plugin_loop.settle(REFUSED, now);
        assert_eq!(
            f.plugin_loop.not_before, now,
            "a turn waited for is no fault"
        );
    }
    // Neither grown nor forgiven: a real failure after goes on from there.
    assert_eq!(f.plugin_loop.backoff.failures(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_backoff_holds_runs_back_but_lets_one_manual_trigger_through() {
    let mut f = fixture(None, OK);
    let now = Instant::now();
    assert!(!f.plugin_loop.may_run(now), "nothing pending");
    f.plugin_loop.pending.insert(Trigger::new(INTERVAL));
    assert!(f.plugin_loop.may_run(now));

    f.plugin_loop.settle(FAILED, now);
    assert!(!f.plugin_loop.may_run(now), "backing off");
    f.plugin_loop.pending.insert(Trigger::new(MANUAL));
    assert!(f.plugin_loop.may_run(now), "a manual trigger skips it");
    assert_eq!(f.plugin_loop.coalesce(now).len(), 2);
    assert!(f.plugin_loop.manual_skipped);

    f.plugin_loop.settle(FAILED, now);
    f.plugin_loop.pending.insert(Trigger::new(MANUAL));
    assert!(!f.plugin_loop.may_run(now), "not a second time");
    let end = f.plugin_loop.not_before;
    assert!(f.plugin_loop.may_run(end), "it runs when the backoff ends");
    f.plugin_loop.coalesce(end);
    assert!(
        !f.plugin_loop.manual_skipped,
        "a scheduled-time run resets it"
    );
}

#[tokio::test(start_paused = true)]
async fn coalescing_takes_everything_queued_into_one_batch() {
    let mut f = fixture(Some(60), OK);
    f.plugin_loop
        .pending
        .insert(Trigger::with_subject(FILE, "/b".into()));
    for path in ["/a", "/b"] {
        let file = Trigger::with_subject(FILE, path.into());
        f.queue.send(Message::Trigger(file)).unwrap();
    }
    f.queue
        .send(Message::Trigger(Trigger::new(MANUAL)))
        .unwrap();
    f.queue.send(Message::Interval(Some(secs(5)))).unwrap();
    let now = Instant::now();

    let batch = f.plugin_loop.coalesce(now);

    let batch: Vec<String> = batch.iter().map(Trigger::to_string).collect();
    assert_eq!(batch, ["file:/a", "file:/b", "manual"]);
    assert!(f.plugin_loop.pending.is_empty());
    assert_eq!(f.plugin_loop.interval, Some(secs(5)));
    assert_interval_run(f.plugin_loop.next_interval, now, secs(5));
}

#[tokio::test(start_paused = true)]
async fn only_a_changed_interval_restarts_the_interval_timer() {
    let mut f = fixture(Some(10), OK);
    let first = f.plugin_loop.next_interval;
    advance(secs(4)).await;
    f.plugin_loop
        .receive(Message::Interval(Some(secs(10))), Instant::now());
    assert_eq!(f.plugin_loop.next_interval, first, "a reload resends it");
    f.plugin_loop
        .receive(Message::Interval(Some(secs(3))), Instant::now());
    assert_interval_run(f.plugin_loop.next_interval, Instant::now(), secs(3));
    f.plugin_loop
        .receive(Message::Interval(None), Instant::now());
    assert_eq!(f.plugin_loop.next_interval, None);
}

#[tokio::test(start_paused = true)]
async fn a_backoff_wakes_the_loop_only_when_something_waits_for_it() {
    let mut f = fixture(None, OK);
    f.plugin_loop.settle(FAILED, Instant::now());
    assert_eq!(f.plugin_loop.wake_at(), None, "nothing pending, no timer");
    f.plugin_loop.pending.insert(Trigger::new(INTERVAL));
    assert_eq!(f.plugin_loop.wake_at(), Some(f.plugin_loop.not_before));
}

#[tokio::test(start_paused = true)]
async fn waiting_ends_at_the_earliest_timer_a_message_or_the_queue_closing() {
    let mut f = fixture(Some(10), OK);
    let start = Instant::now();
    f.plugin_loop.requeue_at = Some(start + secs(3));
    assert!(f.plugin_loop.wait().await);
    assert_eq!(Instant::now() - start, secs(3), "the requeue comes first");
    f.plugin_loop.fire_due_timers(Instant::now());
    assert_eq!(
        f.plugin_loop.coalesce(Instant::now()),
        [Trigger::new(REQUEUE)]
    );

    f.queue
        .send(Message::Trigger(Trigger::new(MANUAL)))
        .unwrap();
    let before = Instant::now();
    assert!(f.plugin_loop.wait().await);
    assert_eq!(Instant::now(), before, "a message wakes it at once");
    assert_eq!(kinds(&f.plugin_loop.pending), ["manual"]);

    // Run (the pending trigger would wake it at once), then unschedule.
    f.plugin_loop.coalesce(Instant::now());
    f.triggers.senders.write().unwrap().clear();
    drop(f.queue);
    assert!(!f.plugin_loop.wait().await, "unscheduled");
}

#[tokio::test(start_paused = true)]
async fn a_run_is_published_as_running_and_its_failure_as_a_backoff() {
    let mut f = fixture(Some(60), FAILED);
    let batch = vec![Trigger::new(MANUAL)];

    f.plugin_loop.run_batch(batch.clone()).await;

    let runs = f.runner.runs.lock().unwrap().clone();
    assert_eq!(
        runs,
        [(batch, Some(true))],
        "published running before the run"
    );
    f.plugin_loop.pending.insert(Trigger::new(INTERVAL));
    f.plugin_loop.publish(false);
    let state = f.triggers.schedule_of(PLUGIN).unwrap();
    assert!(!state.running);
    assert_eq!(state.failures, 1);
    assert_eq!(state.backoff_until, Some(f.plugin_loop.not_before));
    assert_eq!(state.interval, Some(secs(60)));
    assert_eq!(state.next_interval, f.plugin_loop.next_interval);
    assert_eq!(state.pending, [Trigger::new(INTERVAL)]);
    assert!(!state.manual_skipped_backoff);
}

#[tokio::test(start_paused = true)]
async fn a_loop_replaced_by_a_newer_one_publishes_nothing() {
    let f = fixture(None, OK);
    let (newer, _rx) = mpsc::unbounded_channel();
    f.triggers
        .senders
        .write()
        .unwrap()
        .insert(PLUGIN.into(), (GENERATION + 1, newer));
    f.plugin_loop.publish(true);
    assert!(f.triggers.schedule_of(PLUGIN).is_none());
}
