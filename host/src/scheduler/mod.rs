//! When each plugin reconciles. Triggers (startup, interval, requeue-after, file
//! changes, manual) are coalesced per plugin: at most one reconcile runs and at
//! most one is pending, carrying every trigger that arrived meanwhile. Failures
//! back off exponentially, per plugin, without delaying any other plugin.

mod backoff;
pub mod watch;

pub use backoff::Backoff;

use crate::runtime::Trigger;
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch as signal};
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep_until};

/// What the scheduler needs to know of a finished reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunResult {
    pub ok: bool,
    pub requeue_after: Option<Duration>,
}

pub type RunFuture<'a> = Pin<Box<dyn Future<Output = RunResult> + Send + 'a>>;

/// Runs one reconcile of a plugin; the daemon's implementation calls the wasm
/// runtime, tests use a counter.
pub trait Runner: Send + Sync + 'static {
    fn run(&self, plugin: &str, triggers: Vec<Trigger>) -> RunFuture<'_>;
}

/// A plugin's own schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub plugin: String,
    pub interval: Option<Duration>,
}

/// Sends triggers to plugins; cheap to clone (the file watcher holds one).
#[derive(Clone, Default)]
pub struct Triggers {
    senders: Arc<HashMap<String, mpsc::UnboundedSender<Trigger>>>,
}

impl Triggers {
    /// Queue a trigger; false when the plugin is not scheduled.
    pub fn send(&self, plugin: &str, trigger: Trigger) -> bool {
        self.senders
            .get(plugin)
            .is_some_and(|s| s.send(trigger).is_ok())
    }
}

pub struct Scheduler {
    triggers: Triggers,
    stop: signal::Sender<bool>,
    tasks: JoinSet<()>,
}

impl Scheduler {
    /// Start one task per plugin; each reconciles once at startup.
    pub fn start(runner: Arc<dyn Runner>, schedules: Vec<Schedule>) -> Self {
        let (stop, stopped) = signal::channel(false);
        let mut senders = HashMap::new();
        let mut tasks = JoinSet::new();
        for schedule in schedules {
            let (tx, rx) = mpsc::unbounded_channel();
            tx.send(Trigger::new("startup")).expect("receiver is alive");
            senders.insert(schedule.plugin.clone(), tx);
            tasks.spawn(plugin_loop(runner.clone(), schedule, rx, stopped.clone()));
        }
        Scheduler {
            triggers: Triggers {
                senders: Arc::new(senders),
            },
            stop,
            tasks,
        }
    }

    pub fn triggers(&self) -> Triggers {
        self.triggers.clone()
    }

    /// Stop scheduling; reconciles in flight finish first.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        while self.tasks.join_next().await.is_some() {}
    }
}

async fn plugin_loop(
    runner: Arc<dyn Runner>,
    schedule: Schedule,
    mut queue: mpsc::UnboundedReceiver<Trigger>,
    mut stopped: signal::Receiver<bool>,
) {
    let mut pending = BTreeSet::new();
    let mut backoff = Backoff::default();
    let mut not_before = Instant::now();
    let mut next_interval = schedule.interval.map(|i| Instant::now() + i);
    let mut requeue_at: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if next_interval.is_some_and(|at| at <= now) {
            pending.insert(Trigger::new("interval"));
            next_interval = schedule.interval.map(|i| now + i);
        }
        if requeue_at.is_some_and(|at| at <= now) {
            pending.insert(Trigger::new("requeue"));
            requeue_at = None;
        }
        if !pending.is_empty() && not_before <= now {
            while let Ok(trigger) = queue.try_recv() {
                pending.insert(trigger);
            }
            let triggers: Vec<Trigger> = std::mem::take(&mut pending).into_iter().collect();
            let result = runner.run(&schedule.plugin, triggers).await;
            if result.ok {
                backoff.succeed();
                not_before = Instant::now();
            } else {
                not_before = Instant::now() + backoff.fail();
            }
            requeue_at = result.requeue_after.map(|after| Instant::now() + after);
            if *stopped.borrow() {
                return;
            }
            continue;
        }
        let wake = [
            next_interval,
            requeue_at,
            (!pending.is_empty()).then_some(not_before),
        ]
        .into_iter()
        .flatten()
        .min();
        tokio::select! {
            trigger = queue.recv() => match trigger {
                Some(trigger) => { pending.insert(trigger); }
                None => return,
            },
            _ = sleep_until(wake.unwrap_or_else(far_future)), if wake.is_some() => {}
            _ = stopped.changed() => return,
        }
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86400 * 365)
}

#[cfg(test)]
mod tests;
