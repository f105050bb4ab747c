//! What discovery answered, misses included, for [`MISS_TTL`]: a plugin asking
//! for hundreds of kinds the API server does not have costs one discovery
//! request per group version (and one listing of the group versions) per
//! window, not one per call. Kinds found are kept for good by the backend.

use super::backend::ResourceInfo;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a discovery answer (a kind's absence) is trusted.
pub const MISS_TTL: Duration = Duration::from_secs(30);
/// Group versions remembered as absent at once (beyond, the listing of all
/// group versions answers).
const MAX_ABSENT: usize = 256;

/// What is known of a kind without asking the API server.
#[derive(Debug, PartialEq)]
pub enum Known {
    Found(ResourceInfo),
    /// The API server does not serve it (as of less than [`MISS_TTL`] ago).
    Absent,
    /// Ask the API server (its group version's resources).
    Ask,
}

/// When a group version was listed, and its kinds (None: no such group version).
type Listed = (Instant, Option<Vec<ResourceInfo>>);

#[derive(Default)]
pub struct Discovery {
    /// By apiVersion.
    lists: Mutex<HashMap<String, Listed>>,
    /// Every group version the API server serves, when listed (after a miss).
    versions: Mutex<Option<(Instant, HashSet<String>)>>,
    /// Lookups answered "absent" without a request.
    saved: AtomicU64,
}

impl Discovery {
    pub fn known(&self, api_version: &str, kind: &str, now: Instant) -> Known {
        let fresh = |at: &Instant| now.saturating_duration_since(*at) < MISS_TTL;
        let known = match self.lists.lock().unwrap().get(api_version) {
            Some((at, list)) if fresh(at) => match list.iter().flatten().find(|r| r.kind == kind) {
                Some(info) => return Known::Found(info.clone()),
                None => Known::Absent,
            },
            _ => match &*self.versions.lock().unwrap() {
                Some((at, versions)) if fresh(at) && !versions.contains(api_version) => {
                    Known::Absent
                }
                _ => Known::Ask,
            },
        };
        if known == Known::Absent {
            self.saved.fetch_add(1, Ordering::Relaxed);
        }
        known
    }

    /// What the API server listed for `api_version` (None: 404).
    pub fn listed(&self, api_version: &str, kinds: Option<Vec<ResourceInfo>>, now: Instant) {
        let mut lists = self.lists.lock().unwrap();
        if kinds.is_none() && lists.len() >= MAX_ABSENT {
            lists.retain(|_, (at, _)| now.saturating_duration_since(*at) < MISS_TTL);
            if lists.len() >= MAX_ABSENT {
                return;
            }
        }
        lists.insert(api_version.to_string(), (now, kinds));
    }

    /// Whether the listing of all group versions is due (after a miss, at
    /// most once per window).
    pub fn versions_due(&self, now: Instant) -> bool {
        !matches!(&*self.versions.lock().unwrap(), Some((at, _)) if now.saturating_duration_since(*at) < MISS_TTL)
    }

    pub fn versions_listed(&self, versions: HashSet<String>, now: Instant) {
        *self.versions.lock().unwrap() = Some((now, versions));
    }

    /// Lookups answered without a request, for `/metrics`.
    pub fn saved(&self) -> u64 {
        self.saved.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> ResourceInfo {
        ResourceInfo {
            group: String::new(),
            version: "v1".into(),
            kind: "Node".into(),
            plural: "nodes".into(),
            namespaced: false,
        }
    }

    #[test]
    fn misses_are_answered_within_the_window_then_asked_again() {
        let d = Discovery::default();
        let t0 = Instant::now();
        assert_eq!(d.known("v1", "Widget", t0), Known::Ask);
        d.listed("v1", Some(vec![node()]), t0);
        for i in 0..300 {
            assert_eq!(
                d.known("v1", &format!("Widget{i}"), t0 + Duration::from_secs(1)),
                Known::Absent
            );
        }
        assert_eq!(d.saved(), 300);
        assert_eq!(d.known("v1", "Node", t0), Known::Found(node()));
        assert_eq!(
            d.known("v1", "Widget", t0 + MISS_TTL),
            Known::Ask,
            "expired"
        );
    }

    #[test]
    fn unknown_group_versions_are_answered_by_the_listing_of_all() {
        let d = Discovery::default();
        let t0 = Instant::now();
        d.listed("x.example/v1", None, t0);
        assert_eq!(d.known("x.example/v1", "A", t0), Known::Absent);
        assert_eq!(d.known("y.example/v1", "A", t0), Known::Ask);
        assert!(d.versions_due(t0));
        d.versions_listed(["v1".to_string(), "apps/v1".to_string()].into(), t0);
        assert!(!d.versions_due(t0 + Duration::from_secs(29)));
        assert_eq!(d.known("y.example/v1", "A", t0), Known::Absent);
        assert_eq!(
            d.known("apps/v1", "Deployment", t0),
            Known::Ask,
            "served: ask for its kinds"
        );
        // Absent group versions are bounded.
        for i in 0..(MAX_ABSENT * 2) {
            d.listed(&format!("g{i}/v1"), None, t0);
        }
        assert!(d.lists.lock().unwrap().len() <= MAX_ABSENT);
        assert!(d.versions_due(t0 + MISS_TTL));
    }
}
