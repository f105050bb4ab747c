//! One plugin's loop: it waits for the next trigger or timer, coalesces what
//! arrived into one batch, runs it, backs off after a failure, and publishes
//! where it stands after each step. One task per scheduled plugin.

use super::trigger::{INTERVAL, MANUAL, REQUEUE};
use super::{Backoff, Message, RunResult, Runner, Schedule, ScheduleState, Trigger, Triggers};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};

pub(super) struct PluginLoop {
    runner: Arc<dyn Runner>,
    plugin: String,
    queue: mpsc::UnboundedReceiver<Message>,
    /// Where the loop publishes its state, and the generation it publishes as.
    triggers: Triggers,
    generation: u64,
    interval: Option<Duration>,
    /// Triggers for the next run, coalesced (each at most once).
    pending: BTreeSet<Trigger>,
    backoff: Backoff,
    /// No run before this (a failure's backoff), but for one manual trigger.
    not_before: Instant,
    next_interval: Option<Instant>,
    requeue_at: Option<Instant>,
    /// Whether a manual trigger skipped the backoff since the last scheduled
    /// run: an operator may cut one backoff short, not every one (each manual
    /// run that fails starts a longer backoff, which it may not skip again).
    manual_skipped: bool,
}

impl PluginLoop {
    pub(super) fn new(
        runner: Arc<dyn Runner>,
        schedule: Schedule,
        queue: mpsc::UnboundedReceiver<Message>,
        (triggers, generation): (Triggers, u64),
    ) -> Self {
        let now = Instant::now();
        PluginLoop {
            runner,
            plugin: schedule.plugin,
            queue,
            triggers,
            generation,
            interval: schedule.interval,
            pending: BTreeSet::new(),
            backoff: Backoff::default(),
            not_before: now,
            next_interval: schedule.interval.map(|i| interval_run(now, i)),
            requeue_at: None,
            manual_skipped: false,
        }
    }

    /// Run until the plugin is unscheduled (its queue closes); a reconcile in
    /// flight then finishes first.
    pub(super) async fn run(mut self) {
        loop {
            let now = Instant::now();
            self.fire_due_timers(now);
            if self.may_run(now) {
                let batch = self.coalesce(now);
                self.run_batch(batch).await;
                if self.queue.is_closed() {
                    return;
                }
            } else {
                self.publish(false);
                if !self.wait().await {
                    return;
                }
            }
        }
    }

    /// The interval or requeue time passed: their triggers join the pending ones.
    fn fire_due_timers(&mut self, now: Instant) {
        if self.next_interval.is_some_and(|at| at <= now) {
            self.pending.insert(Trigger::new(INTERVAL));
            self.next_interval = self.interval.map(|i| interval_run(now, i));
        }
        if self.requeue_at.is_some_and(|at| at <= now) {
            self.pending.insert(Trigger::new(REQUEUE));
            self.requeue_at = None;
        }
    }

    /// Something is pending and no backoff holds it back. An operator's manual
    /// trigger does not wait out a failure backoff, once: after it skipped one,
    /// manual triggers wait like the others until a run at the scheduled time.
    fn may_run(&self, now: Instant) -> bool {
        let manual = self.pending.iter().any(|t| t.kind == MANUAL);
        let skip = manual && !self.manual_skipped;
        !self.pending.is_empty() && (self.not_before <= now || skip)
    }

    /// Everything that arrived up to now, as one batch for one run.
    fn coalesce(&mut self, now: Instant) -> Vec<Trigger> {
        self.manual_skipped = self.not_before > now;
        while let Ok(message) = self.queue.try_recv() {
            self.receive(message, now);
        }
        std::mem::take(&mut self.pending).into_iter().collect()
    }

    async fn run_batch(&mut self, batch: Vec<Trigger>) {
        self.publish(true);
        let result = self.runner.run(&self.plugin, batch).await;
        self.settle(result, Instant::now());
    }

    /// After a run: a failure backs off (longer each time in a row), a
    /// success clears the backoff, a budget's refusal leaves it as it was (the
    /// interval paces the asking); a requested requeue is timed from now.
    fn settle(&mut self, result: RunResult, now: Instant) {
        self.not_before = match (result.ok, result.refused) {
            (true, _) => {
                self.backoff.succeed();
                now
            }
            (false, true) => now,
            (false, false) => now + self.backoff.fail(),
        };
        self.requeue_at = result.requeue_after.map(|after| now + after);
    }

    /// One message from the queue: a trigger waits for the next run; a
    /// changed interval restarts the interval timer (an unchanged one, resent
    /// by a config reload, leaves it running).
    fn receive(&mut self, message: Message, now: Instant) {
        match message {
            Message::Trigger(trigger) => {
                self.pending.insert(trigger);
            }
            Message::Interval(new) if new != self.interval => {
                self.interval = new;
                self.next_interval = new.map(|i| interval_run(now, i));
            }
            Message::Interval(_) => {}
        }
    }

    /// When the loop must wake by itself: the next timer, or the end of the
    /// backoff that holds pending triggers back.
    fn wake_at(&self) -> Option<Instant> {
        [
            self.next_interval,
            self.requeue_at,
            (!self.pending.is_empty()).then_some(self.not_before),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Wait for the next message or [`Self::wake_at`]; false when the queue
    /// closed (the plugin was unscheduled).
    async fn wait(&mut self) -> bool {
        let wake = self.wake_at();
        let sleep = sleep_until(wake.unwrap_or_else(far_future));
        tokio::select! {
            message = self.queue.recv() => match message {
                Some(message) => self.receive(message, Instant::now()),
                None => return false,
            },
            () = sleep, if wake.is_some() => {}
        }
        true
    }

    /// Where the loop stands, as `tend status NAME` shows it.
    fn state(&self, running: bool) -> ScheduleState {
        let backing_off = self.not_before > Instant::now();
        ScheduleState {
            interval: self.interval,
            running,
            failures: self.backoff.failures(),
            backoff_until: backing_off.then_some(self.not_before),
            next_interval: self.next_interval,
            requeue_at: self.requeue_at,
            pending: self.pending.iter().cloned().collect(),
            manual_skipped_backoff: self.manual_skipped && backing_off,
        }
    }

    fn publish(&self, running: bool) {
        self.triggers
            .publish(&self.plugin, self.generation, self.state(running));
    }
}

/// How much earlier than a whole interval an interval run may come.
pub(super) const INTERVAL_JITTER: f64 = 0.1;

/// The next interval run after `now`: within the last tenth of `interval`,
/// drawn afresh each time. Never later than the interval the operator wrote,
/// and a fleet of nodes started together (a DaemonSet's rollout) drifts apart
/// instead of asking the API server and the cloud in lockstep every interval.
fn interval_run(now: Instant, interval: Duration) -> Instant {
    now + interval - interval.mul_f64(INTERVAL_JITTER * fastrand::f64())
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86400 * 365)
}

#[cfg(test)]
mod tests;
