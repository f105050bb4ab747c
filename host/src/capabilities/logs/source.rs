//! Log triggers: the host follows each source some plugin watches (one
//! reader per source, however many plugins), runs every watch rule on each
//! line, keeps the matches within each rule's rate (the rest counted), saves
//! them, then reconciles the plugin with a "log" trigger whose subject is the
//! rule. A plugin never runs for a line no rule of its matched.
//!
//! Each rule resumes after its own cursor: a source is followed from the
//! oldest cursor of its rules, and a rule skips what it already saw. A rule
//! with no cursor yet starts at the newest line of the source (the present);
//! a cursor of another boot, at the start of this boot's log.

use super::backend::{Followed, Line, LogReader, Position};
use super::counts::Counts;
use super::grants::LogsGrant;
use super::store::MatchStore;
use crate::capabilities::watch::{TriggerSink, Watch};
use std::cmp::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tend_rules::logs::{LineFacts, Rate, Source, WatchRule};

/// The trigger kind: "log", with the rule as its subject.
pub const LOG_TRIGGER: &str = "log";

/// The most lines taken from a source before the matches are saved and
/// their plugins woken: bounds the latency of a wake-up under a flood, and
/// the number of saves.
const BATCH: usize = 512;

/// How often a rule's progress over lines it did not match is saved.
const SAVE_PROGRESS: Duration = Duration::from_secs(5);

pub struct LogSource {
    reader: Arc<dyn LogReader>,
    store: Arc<MatchStore>,
    counts: Arc<Counts>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl LogSource {
    pub fn new(reader: Arc<dyn LogReader>, store: Arc<MatchStore>, counts: Arc<Counts>) -> Self {
        LogSource {
            reader,
            store,
            counts,
            tasks: vec![],
        }
    }
}

impl Drop for LogSource {
    fn drop(&mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
    }
}

/// One rule of one plugin, as it runs.
struct Active {
    plugin: String,
    grant: Arc<LogsGrant>,
    rule: usize,
    cursor: Option<Position>,
    rate: Rate,
}

impl Active {
    fn rule(&self) -> &WatchRule {
        &self.grant.watch[self.rule]
    }
}

impl Watch<LogsGrant> for LogSource {
    fn update(&mut self, watchers: Vec<(String, LogsGrant)>, sink: Arc<dyn TriggerSink>) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
        let watching: Vec<(String, Arc<LogsGrant>)> = watchers
            .into_iter()
            .filter(|(_, g)| !g.watch.is_empty())
            .map(|(p, g)| (p, Arc::new(g)))
            .collect();
        self.store
            .retain(&watching.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>());
        for source in Source::ALL {
            let rules: Vec<(String, Arc<LogsGrant>, usize)> = watching
                .iter()
                .flat_map(|(plugin, grant)| {
                    (0..grant.watch.len())
                        .filter(|&i| grant.watch[i].source == source)
                        .map(|i| (plugin.clone(), grant.clone(), i))
                })
                .collect();
            if rules.is_empty() {
                continue;
            }
            let follower = Follower {
                source,
                reader: self.reader.clone(),
                store: self.store.clone(),
                counts: self.counts.clone(),
                sink: sink.clone(),
                started: Instant::now(),
            };
            self.tasks.push(tokio::spawn(follower.run(rules)));
        }
    }

    fn waits_on(&self, grant: &LogsGrant) -> Vec<String> {
        grant
            .watch
            .iter()
            .map(|rule| {
                format!(
                    "{} log lines matching rule {} ({:?})",
                    rule.source.name(),
                    rule.rule,
                    rule.pattern.0.as_str()
                )
            })
            .collect()
    }
}

/// One source's reader and its rules.
struct Follower {
    source: Source,
    reader: Arc<dyn LogReader>,
    store: Arc<MatchStore>,
    counts: Arc<Counts>,
    sink: Arc<dyn TriggerSink>,
    started: Instant,
}

impl Follower {
    async fn run(self, rules: Vec<(String, Arc<LogsGrant>, usize)>) {
        let mut active = match self.start(rules).await {
            Ok(active) => active,
            Err(e) => {
                tracing::error!(source = self.source.name(), "cannot watch the log: {e}");
                return;
            }
        };
        let mut backoff = Duration::from_millis(500);
        loop {
            let after = oldest(&active);
            let reader = self.reader.clone();
            let source = self.source;
            let following = tokio::task::spawn_blocking(move || reader.follow(source, after)).await;
            match following {
                Ok(Ok(mut following)) => {
                    backoff = Duration::from_millis(500);
                    tracing::info!(
                        rules = active.len(),
                        from = oldest(&active)
                            .map(|p| p.cursor())
                            .unwrap_or_else(|| "the start of this boot".into()),
                        "following the {} log",
                        source.name()
                    );
                    loop {
                        // A quiet log still saves progress and hands over
                        // counted misses, every SAVE_PROGRESS.
                        let first =
                            match tokio::time::timeout(SAVE_PROGRESS, following.lines.recv()).await
                            {
                                Ok(Some(first)) => first,
                                Ok(None) => break,
                                Err(_) => {
                                    let taken = self.take(&mut active, vec![]);
                                    self.commit(taken).await;
                                    continue;
                                }
                            };
                        let mut batch = vec![first];
                        while batch.len() < BATCH {
                            match following.lines.try_recv() {
                                Ok(item) => batch.push(item),
                                Err(_) => break,
                            }
                        }
                        let taken = self.take(&mut active, batch);
                        self.commit(taken).await;
                    }
                    tracing::warn!(
                        source = source.name(),
                        "the log reader stopped; following again"
                    );
                }
                Ok(Err(e)) => tracing::warn!(
                    source = source.name(),
                    "cannot follow the log: {e}; retrying in {backoff:?}"
                ),
                Err(e) => tracing::error!("the log reader panicked: {e}"),
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(30));
        }
    }

    /// Each rule with its saved cursor, or the present for a new one (saved,
    /// so a restart right after does not move it).
    async fn start(
        &self,
        rules: Vec<(String, Arc<LogsGrant>, usize)>,
    ) -> Result<Vec<Active>, String> {
        let reader = self.reader.clone();
        let source = self.source;
        let present = tokio::task::spawn_blocking(move || reader.tail(source))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        let now = self.now_ms();
        let mut new = vec![];
        let active = rules
            .into_iter()
            .map(|(plugin, grant, rule)| {
                let name = grant.watch[rule].rule.clone();
                let saved = self
                    .store
                    .with(&plugin, false, |kept| kept.cursors.get(&name).cloned());
                let cursor = match saved.and_then(|c| Position::parse(self.source, &c).ok()) {
                    Some(cursor) => Some(cursor),
                    None => {
                        if let Some(present) = &present {
                            self.store.with(&plugin, false, |kept| {
                                kept.cursors.insert(name, present.cursor())
                            });
                            new.push(plugin.clone());
                        }
                        present.clone()
                    }
                };
                Active {
                    rate: Rate::full(&grant.watch[rule], now),
                    plugin,
                    grant,
                    rule,
                    cursor,
                }
            })
            .collect();
        save(&self.store, new, now).await;
        Ok(active)
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Run the rules on a batch: what to save, and whom to wake after.
    fn take(&self, active: &mut [Active], batch: Vec<Followed>) -> Taken {
        let now = self.now_ms();
        let mut woken: Vec<(String, String)> = vec![];
        let mut changed: Vec<String> = vec![];
        for item in &batch {
            match item {
                &Followed::Gap(lines) => {
                    self.counts.gap(self.source, lines);
                    for rule in active.iter() {
                        let name = &rule.rule().rule;
                        self.store
                            .with(&rule.plugin, false, |kept| kept.gap(name, lines));
                    }
                }
                Followed::Line(line) => {
                    self.counts.lines(self.source, 1);
                    for rule in active.iter_mut() {
                        // A kept match is saved before the wake-up; a missed
                        // one is counted and saved with the progress, so a
                        // flood over the rate costs no write per line.
                        let Some(kept) = self.offer(rule, line, now) else {
                            continue;
                        };
                        self.counts.matched(&rule.plugin, &rule.rule().rule, kept);
                        if kept {
                            changed.push(rule.plugin.clone());
                            woken.push((rule.plugin.clone(), rule.rule().rule.clone()));
                        }
                    }
                }
            }
        }
        // Lines of a batch come in order: each rule has now seen up to the
        // last one (one clone a rule a batch, not a line).
        let last = batch.iter().rev().find_map(|item| match item {
            Followed::Line(line) => Some(&line.position),
            Followed::Gap(_) => None,
        });
        if let Some(last) = last {
            for rule in active.iter_mut() {
                if last.is_after(rule.cursor.as_ref()) {
                    rule.cursor = Some(last.clone());
                }
            }
        }
        changed.sort();
        changed.dedup();
        for rule in active.iter() {
            let name = rule.rule().rule.clone();
            let cursor = rule.cursor.as_ref().map(Position::cursor);
            let progress_due = self.store.with(&rule.plugin, false, |kept| {
                if let Some(cursor) = cursor {
                    kept.cursors.insert(name, cursor);
                }
                kept.progress_due(now, SAVE_PROGRESS)
            });
            if progress_due && !changed.contains(&rule.plugin) {
                changed.push(rule.plugin.clone());
                // Misses or gaps not handed over yet wake the plugin, at most
                // once a SAVE_PROGRESS: it learns what it lost.
                let name = &rule.rule().rule;
                let untold = self.store.with(&rule.plugin, false, |kept| {
                    kept.pending
                        .iter()
                        .any(|m| m.rule == *name && (m.missed > 0 || m.gap > 0))
                });
                if untold {
                    woken.push((rule.plugin.clone(), name.clone()));
                }
            }
        }
        woken.dedup();
        Taken {
            save: changed,
            wake: woken,
            now,
        }
    }

    /// Save, then wake: a plugin never runs for a match a crash could lose.
    async fn commit(&self, taken: Taken) {
        save(&self.store, taken.save, taken.now).await;
        for (plugin, rule) in taken.wake {
            self.sink.reconcile(&plugin, LOG_TRIGGER, rule);
        }
    }

    /// Offer `line` to one rule: None when it passes the rule by, else
    /// whether the match was kept for the plugin (or counted missed).
    fn offer(&self, active: &mut Active, line: &Line, now: u64) -> Option<bool> {
        if !line.position.is_after(active.cursor.as_ref()) {
            return None;
        }
        let entry = &line.entry;
        let facts = LineFacts {
            source: self.source,
            priority: entry.priority,
            unit: entry.unit.as_deref(),
            identifier: entry.identifier.as_deref(),
        };
        let rule = &active.grant.watch[active.rule];
        if !rule.matches(&active.grant, &facts, &entry.message) {
            return None;
        }
        let (name, burst) = (rule.rule.as_str(), rule.burst);
        let allowed = active.rate.take(rule, now);
        // The cursor moves with the match, so a take saved before the batch
        // ends never leaves the match behind its rule's cursor.
        let cursor = line.position.cursor();
        Some(self.store.with(&active.plugin, false, |kept| {
            kept.cursors.insert(name.to_string(), cursor);
            if allowed {
                kept.add(name, burst, entry.clone())
            } else {
                kept.miss(name);
                false
            }
        }))
    }
}

/// What a batch changed: the plugins whose kept state to save, and the
/// (plugin, rule) to wake once it is saved.
struct Taken {
    save: Vec<String>,
    wake: Vec<(String, String)>,
    now: u64,
}

/// Write `plugins`' kept state off the async workers (a save is an fsync).
async fn save(store: &Arc<MatchStore>, plugins: Vec<String>, now: u64) {
    if plugins.is_empty() {
        return;
    }
    let store = store.clone();
    let saved = tokio::task::spawn_blocking(move || {
        for plugin in plugins {
            store.with(&plugin, true, |kept| kept.saved_at(now));
        }
    })
    .await;
    if let Err(e) = saved {
        tracing::error!("saving the logs store failed: {e}");
    }
}

/// Where to follow from: the oldest cursor of the rules; the start of this
/// boot's log when one has none or cursors cannot be compared.
fn oldest(active: &[Active]) -> Option<Position> {
    let mut oldest: Option<&Position> = None;
    for rule in active {
        let cursor = rule.cursor.as_ref()?;
        oldest = match oldest {
            None => Some(cursor),
            Some(o) => match cursor.order(o)? {
                Ordering::Less => Some(cursor),
                _ => Some(o),
            },
        };
    }
    oldest.cloned()
}

#[cfg(test)]
mod tests {
    use super::super::fake::FakeLogs;
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Woken(Mutex<Vec<(String, String)>>);

    impl TriggerSink for Woken {
        fn reconcile(&self, plugin: &str, kind: &'static str, subject: String) {
            assert_eq!(kind, LOG_TRIGGER);
            self.0.lock().unwrap().push((plugin.to_string(), subject));
        }
    }

    fn grant(text: &str) -> LogsGrant {
        toml::from_str(text).unwrap()
    }

    const HUNG: &str = "kernel = true\n[[watch]]\nrule = \"hung\"\nsource = \"kernel\"\npattern = 'blocked for more than \\d+ seconds'\nburst = 2\nper-minute = 1\n";

    async fn until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn matches_within_the_rate_are_kept_and_woken_the_rest_counted_and_the_past_skipped() {
        let fake = Arc::new(FakeLogs::default());
        fake.write(
            Source::Kernel,
            3,
            None,
            None,
            "before: task x blocked for more than 120 seconds",
        );
        let store = Arc::new(MatchStore::open(None).unwrap());
        let woken = Arc::new(Woken::default());
        let mut source = LogSource::new(fake.clone(), store.clone(), Arc::default());
        source.update(
            vec![
                ("pd".into(), grant(HUNG)),
                ("other".into(), grant("kernel = true")),
            ],
            woken.clone(),
        );
        until("the rule's cursor", || {
            store.with("pd", false, |kept| kept.cursors.contains_key("hung"))
        })
        .await;
        for i in 0..5 {
            fake.write(
                Source::Kernel,
                3,
                None,
                None,
                &format!("{i}: task y blocked for more than 120 seconds"),
            );
        }
        fake.write(Source::Kernel, 3, None, None, "eth0 link up");
        // Kept, then woken: wait for both (under load the wake-up comes later).
        until("five matches taken in and the plugin woken", || {
            store.with("pd", false, |kept| {
                kept.pending
                    .first()
                    .is_some_and(|m| m.entries.len() as u64 + m.missed == 5)
            }) && !woken.0.lock().unwrap().is_empty()
        })
        .await;
        let pending = store.with("pd", false, |kept| kept.pending.clone());
        let messages: Vec<&str> = pending[0]
            .entries
            .iter()
            .map(|e| e.message.as_str())
            .collect();
        assert_eq!(
            messages,
            [
                "0: task y blocked for more than 120 seconds",
                "1: task y blocked for more than 120 seconds"
            ],
            "the burst, and not the line written before the rule started"
        );
        assert_eq!(pending[0].missed, 3);
        let woken = woken.0.lock().unwrap().clone();
        assert!(
            !woken.is_empty() && woken.iter().all(|w| *w == ("pd".into(), "hung".into())),
            "{woken:?}"
        );
        assert!(
            store.with("other", false, |kept| kept.pending.is_empty()),
            "a plugin without rules is never handed anything"
        );
    }

    #[test]
    fn waits_on_names_each_rule() {
        let source = LogSource::new(
            Arc::new(FakeLogs::default()),
            Arc::new(MatchStore::open(None).unwrap()),
            Arc::default(),
        );
        assert_eq!(
            source.waits_on(&grant(HUNG)),
            ["kernel log lines matching rule hung (\"blocked for more than \\\\d+ seconds\")"]
        );
    }
}
