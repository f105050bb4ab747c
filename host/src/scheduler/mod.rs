//! When each plugin reconciles. Triggers (startup, interval, requeue-after,
//! manual, and those of the trigger sources: file changes today) are coalesced
//! per plugin: at most one reconcile runs and at most one is pending, carrying
//! every trigger that arrived meanwhile. Failures back off exponentially, per
//! plugin, without delaying any other plugin. Each plugin's loop publishes
//! where it stands ([`Triggers::schedule_of`]) for `tend status NAME`.

mod backoff;
pub mod sources;
pub mod trigger;

pub use backoff::Backoff;
pub use trigger::Trigger;

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::mpsc;
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

enum Message {
    Trigger(Trigger),
    /// The plugin's interval changed (config reload).
    Interval(Option<Duration>),
}

/// Each scheduled plugin's queue, with the generation of the loop reading it
/// (a plugin removed and added again gets a new loop; the old one's last
/// words must not overwrite the new one's published state).
type Senders = Arc<RwLock<HashMap<String, (u64, mpsc::UnboundedSender<Message>)>>>;

/// Where one plugin's loop stands, as it last published it.
#[derive(Debug, Clone, Default)]
pub struct ScheduleState {
    pub interval: Option<Duration>,
    pub running: bool,
    /// Failed reconciles in a row (the backoff grows with them).
    pub failures: u32,
    /// Not before this (backoff after a failure), if in the future.
    pub backoff_until: Option<Instant>,
    pub next_interval: Option<Instant>,
    pub requeue_at: Option<Instant>,
    /// Triggers waiting for the next run.
    pub pending: Vec<Trigger>,
}

/// Sends triggers to plugins; cheap to clone (every trigger source holds one).
#[derive(Clone, Default)]
pub struct Triggers {
    senders: Senders,
    schedules: Arc<RwLock<HashMap<String, ScheduleState>>>,
}

impl Triggers {
    /// Queue a trigger; false when the plugin is not scheduled.
    pub fn send(&self, plugin: &str, trigger: Trigger) -> bool {
        let senders = self.senders.read().unwrap();
        senders
            .get(plugin)
            .is_some_and(|(_, s)| s.send(Message::Trigger(trigger)).is_ok())
    }

    /// Where `plugin`'s loop stands, if it is scheduled.
    pub fn schedule_of(&self, plugin: &str) -> Option<ScheduleState> {
        self.schedules.read().unwrap().get(plugin).cloned()
    }

    /// Publish `state` if the loop of `generation` still owns `plugin`.
    fn publish(&self, plugin: &str, generation: u64, state: ScheduleState) {
        let senders = self.senders.read().unwrap();
        if senders.get(plugin).is_some_and(|(g, _)| *g == generation) {
            self.schedules
                .write()
                .unwrap()
                .insert(plugin.to_string(), state);
        }
    }
}

/// One task per scheduled plugin. Plugins come and go as the config and the
/// plugins directory change.
pub struct Scheduler {
    runner: Arc<dyn Runner>,
    triggers: Triggers,
    tasks: JoinSet<()>,
    /// Of the newest plugin loop.
    generation: u64,
}

impl Scheduler {
    pub fn new(runner: Arc<dyn Runner>) -> Self {
        Self::with_triggers(runner, Triggers::default())
    }

    /// A scheduler whose plugins receive what is sent through `triggers`
    /// (handed out before the scheduler exists, for example to a server).
    pub fn with_triggers(runner: Arc<dyn Runner>, triggers: Triggers) -> Self {
        Scheduler {
            runner,
            triggers,
            tasks: JoinSet::new(),
            generation: 0,
        }
    }

    /// Schedule a plugin (it reconciles once at startup), or update the
    /// interval of one already scheduled.
    pub fn upsert(&mut self, schedule: Schedule) {
        while self.tasks.try_join_next().is_some() {}
        let mut senders = self.triggers.senders.write().unwrap();
        if let Some((_, sender)) = senders.get(&schedule.plugin)
            && sender.send(Message::Interval(schedule.interval)).is_ok()
        {
            return;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        tx.send(Message::Trigger(Trigger::new(trigger::STARTUP)))
            .expect("receiver is alive");
        self.generation += 1;
        senders.insert(schedule.plugin.clone(), (self.generation, tx));
        self.tasks.spawn(plugin_loop(
            self.runner.clone(),
            schedule,
            rx,
            (self.triggers.clone(), self.generation),
        ));
    }

    /// Stop scheduling a plugin; a reconcile in flight finishes.
    pub fn remove(&mut self, plugin: &str) {
        self.triggers.senders.write().unwrap().remove(plugin);
        self.triggers.schedules.write().unwrap().remove(plugin);
    }

    pub fn triggers(&self) -> Triggers {
        self.triggers.clone()
    }

    /// Stop scheduling everything; reconciles in flight finish first.
    pub async fn shutdown(&mut self) {
        self.triggers.senders.write().unwrap().clear();
        while self.tasks.join_next().await.is_some() {}
    }
}

async fn plugin_loop(
    runner: Arc<dyn Runner>,
    schedule: Schedule,
    mut queue: mpsc::UnboundedReceiver<Message>,
    (triggers, generation): (Triggers, u64),
) {
    let mut interval = schedule.interval;
    let mut pending = BTreeSet::new();
    let mut backoff = Backoff::default();
    let mut not_before = Instant::now();
    let mut next_interval = interval.map(|i| Instant::now() + i);
    let mut requeue_at: Option<Instant> = None;
    let publish = |running: bool,
                   interval: Option<Duration>,
                   pending: &BTreeSet<Trigger>,
                   backoff: &Backoff,
                   not_before: Instant,
                   next_interval: Option<Instant>,
                   requeue_at: Option<Instant>| {
        triggers.publish(
            &schedule.plugin,
            generation,
            ScheduleState {
                interval,
                running,
                failures: backoff.failures(),
                backoff_until: (not_before > Instant::now()).then_some(not_before),
                next_interval,
                requeue_at,
                pending: pending.iter().cloned().collect(),
            },
        )
    };
    loop {
        let now = Instant::now();
        if next_interval.is_some_and(|at| at <= now) {
            pending.insert(Trigger::new(trigger::INTERVAL));
            next_interval = interval.map(|i| now + i);
        }
        if requeue_at.is_some_and(|at| at <= now) {
            pending.insert(Trigger::new(trigger::REQUEUE));
            requeue_at = None;
        }
        // An operator's manual trigger does not wait out a failure backoff.
        let manual = pending.iter().any(|t: &Trigger| t.kind == trigger::MANUAL);
        if !pending.is_empty() && (not_before <= now || manual) {
            while let Ok(message) = queue.try_recv() {
                match message {
                    Message::Trigger(trigger) => {
                        pending.insert(trigger);
                    }
                    Message::Interval(new) => {
                        interval = new;
                        next_interval = new.map(|i| now + i);
                    }
                }
            }
            let batch: Vec<Trigger> = std::mem::take(&mut pending).into_iter().collect();
            publish(
                true,
                interval,
                &pending,
                &backoff,
                not_before,
                next_interval,
                requeue_at,
            );
            let result = runner.run(&schedule.plugin, batch).await;
            if result.ok {
                backoff.succeed();
                not_before = Instant::now();
            } else {
                not_before = Instant::now() + backoff.fail();
            }
            requeue_at = result.requeue_after.map(|after| Instant::now() + after);
            if queue.is_closed() {
                return;
            }
            continue;
        }
        publish(
            false,
            interval,
            &pending,
            &backoff,
            not_before,
            next_interval,
            requeue_at,
        );
        let wake = [
            next_interval,
            requeue_at,
            (!pending.is_empty()).then_some(not_before),
        ]
        .into_iter()
        .flatten()
        .min();
        tokio::select! {
            message = queue.recv() => match message {
                Some(Message::Trigger(trigger)) => { pending.insert(trigger); }
                Some(Message::Interval(new)) if new != interval => {
                    interval = new;
                    next_interval = new.map(|i| Instant::now() + i);
                }
                Some(Message::Interval(_)) => {}
                None => return,
            },
            _ = sleep_until(wake.unwrap_or_else(far_future)), if wake.is_some() => {}
        }
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86400 * 365)
}

#[cfg(test)]
mod tests;
