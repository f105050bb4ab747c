//! When each plugin reconciles. Triggers (startup, interval, requeue-after,
//! manual, and those of the trigger sources: file changes today) are coalesced
//! per plugin: at most one reconcile runs and at most one is pending, carrying
//! every trigger that arrived meanwhile. Failures back off exponentially, per
//! plugin, without delaying any other plugin. Each plugin's loop publishes
//! where it stands ([`Triggers::schedule_of`]) for `tend status NAME`.

mod backoff;
mod plugin_loop;
pub mod sources;
pub mod trigger;

pub use backoff::Backoff;
use plugin_loop::PluginLoop;
pub use trigger::Trigger;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// What the scheduler needs to know of a finished reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunResult {
    pub ok: bool,
    pub requeue_after: Option<Duration>,
    /// It failed on a budget's refusal (a fleet ticket, a local budget):
    /// waiting for a turn is not a fault, so the backoff does not grow and
    /// the next interval asks again. A node backed off for minutes would
    /// miss every ticket freed meanwhile to nodes that asked sooner.
    pub refused: bool,
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
    /// A manual trigger already skipped the current backoff: the next one
    /// waits for it ([`PluginLoop`]).
    pub manual_skipped_backoff: bool,
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
        let plugin_loop = PluginLoop::new(
            self.runner.clone(),
            schedule,
            rx,
            (self.triggers.clone(), self.generation),
        );
        self.tasks.spawn(plugin_loop.run());
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

#[cfg(test)]
mod tests;
