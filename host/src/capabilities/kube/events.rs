//! Event floods held as client-go's recorder holds them (its
//! `EventSourceObjectSpamFilter`): each reporter (plugin) may write a burst of
//! [`BURST`] Events about one object, refilled one every [`REFILL`]. Beyond
//! that, whatever the message or reason, its Events about the object collapse
//! into one Event per type whose note says so and whose `series.count` grows,
//! so a plugin with ever new messages and reasons makes at most `BURST + 2`
//! Event objects about an object, not one per message. Each reporter keeps its
//! own table of objects, so a plugin cycling through many objects forgets only
//! its own buckets, and only full ones: a flood cannot buy a fresh burst.
//! Optional budgets (`kube.emit-event`) still apply first, in the gate.

use super::backend::EventNote;
use crate::capabilities::rate::TokenBucket;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// Events one reporter may write about one object at once (client-go's 25).
pub const BURST: u32 = 25;
/// One more every this long (client-go's 1 per 5 minutes).
pub const REFILL: Duration = Duration::from_secs(300);
/// Objects tracked per reporter (client-go keeps an LRU of 4096 for a whole
/// recorder). Beyond, a bucket that has refilled is forgotten; when none has,
/// Events about a new object are combined from the start.
const TRACKED: usize = 4096;

/// The prefix of a combined Event's note.
pub const COMBINED: &str = "(combined from similar events): ";

#[derive(Default)]
pub struct Correlator {
    /// reporter -> object uid -> its bucket.
    objects: Mutex<HashMap<String, HashMap<String, TokenBucket>>>,
    /// Events combined, per reporter, for `/metrics`.
    combined: Mutex<std::collections::BTreeMap<String, u64>>,
}

impl Correlator {
    /// Whether `note` about the object `uid` is written as asked (true) or
    /// combined with its similar Events (false).
    pub fn as_asked(&self, uid: &str, note: &EventNote) -> bool {
        let now = Instant::now();
        let mut all = self.objects.lock().unwrap();
        let objects = all.entry(note.reporter.clone()).or_default();
        if !objects.contains_key(uid) && objects.len() >= TRACKED {
            // Only a bucket unused for BURST x REFILL is full again: forgetting
            // it changes nothing. Forgetting a spent one would hand out a
            // fresh burst.
            let refilled = objects
                .iter()
                .find(|(_, b)| now.duration_since(b.last()) >= REFILL * BURST)
                .map(|(k, _)| k.clone());
            if let Some(refilled) = refilled {
                objects.remove(&refilled);
            }
        }
        let asked = objects.len() < TRACKED || objects.contains_key(uid);
        if asked
            && objects
                .entry(uid.to_string())
                .or_insert_with(|| TokenBucket::every(REFILL, BURST))
                .take(now)
                .is_ok()
        {
            return true;
        }
        drop(all);
        let mut combined = self.combined.lock().unwrap();
        let count = combined.entry(note.reporter.clone()).or_default();
        *count += 1;
        if *count == 1 {
            tracing::info!(
                reporter = %note.reporter,
                "kube: more than {BURST} Events about one object: similar Events are combined into one (as client-go's recorder does)"
            );
        }
        false
    }

    /// Events combined per reporter ("tend-<plugin>").
    pub fn combined(&self) -> std::collections::BTreeMap<String, u64> {
        self.combined.lock().unwrap().clone()
    }
}

/// The combined Event of `note` about object `name` (`uid`): one per
/// reporter and type, whatever the message and reason (a reason is free
/// text to a plugin: per reason, ever new reasons would be ever new Events).
pub fn combined(name: &str, uid: &str, note: &EventNote) -> (String, EventNote) {
    let kind = note.event_type.name();
    let digest = xxhash_rust::xxh3::xxh3_64(
        format!("{uid}\0{}\0{kind}\0combined", note.reporter).as_bytes(),
    );
    let stem: String = name.chars().take(230).collect();
    let message = crate::text::cut(format!("{COMBINED}{}", note.message), 1024);
    (
        format!("{stem}.{digest:016x}"),
        EventNote {
            message,
            ..note.clone()
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::kube::EventType;

    fn note(reporter: &str, message: &str) -> EventNote {
        EventNote {
            event_type: EventType::Normal,
            reason: "Flood".into(),
            message: message.into(),
            reporter: reporter.into(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_per_object_and_reporter_then_combined_then_one_per_refill() {
        let c = Correlator::default();
        let asked = (0..256)
            .filter(|i| c.as_asked("u1", &note("tend-p", &format!("m{i}"))))
            .count();
        assert_eq!(asked, BURST as usize);
        assert_eq!(c.combined()["tend-p"], 256 - u64::from(BURST));
        // Another object, another reporter: their own bursts.
        assert!(c.as_asked("u2", &note("tend-p", "m")));
        assert!(c.as_asked("u1", &note("tend-q", "m")));
        tokio::time::advance(REFILL).await;
        assert!(c.as_asked("u1", &note("tend-p", "later")));
        assert!(!c.as_asked("u1", &note("tend-p", "later again")));
    }

    #[test]
    fn similar_events_share_one_combined_event_saying_so() {
        let (a, na) = combined("node-1", "u1", &note("tend-p", "one"));
        let (b, nb) = combined("node-1", "u1", &note("tend-p", &"x".repeat(2000)));
        assert_eq!(a, b, "whatever the message");
        assert_eq!(na.message, format!("{COMBINED}one"));
        assert!(nb.message.starts_with(COMBINED) && nb.message.len() <= 1024);
        let warning = EventNote {
            event_type: EventType::Warning,
            ..note("tend-p", "one")
        };
        assert_ne!(
            combined("node-1", "u1", &warning).0,
            a,
            "a Warning is not combined with a Normal"
        );
        assert_ne!(combined("node-1", "u1", &note("tend-q", "one")).0, a);
        let other_reason = EventNote {
            reason: "Other".into(),
            ..note("tend-p", "two")
        };
        assert_eq!(
            combined("node-1", "u1", &other_reason).0,
            a,
            "whatever the reason"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn cycling_through_many_objects_buys_no_fresh_burst_and_spares_other_reporters() {
        let c = Correlator::default();
        let spend = |uid: &str| (0..BURST).all(|_| c.as_asked(uid, &note("tend-p", "m")));
        for i in 0..TRACKED {
            assert!(spend(&format!("u{i}")));
        }
        // The table is full of spent buckets: a new object gets none, and an
        // old one is still spent.
        assert!(!c.as_asked("fresh", &note("tend-p", "m")));
        assert!(!c.as_asked("u0", &note("tend-p", "m")));
        // Another plugin keeps its own table.
        assert!(c.as_asked("u0", &note("tend-q", "m")));
        // Once a bucket has refilled it may be forgotten for a new object.
        tokio::time::advance(REFILL * BURST).await;
        assert!(c.as_asked("fresh", &note("tend-p", "m")));
    }
}
