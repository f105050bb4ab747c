//! What this host has seen of other hosts, timed by its own monotonic clock
//! only: when each node Lease last changed, and when each grant first
//! appeared. No wall-clock time written by another host is ever compared
//! with this host's, so clocks that disagree (or lie) change nothing: a
//! holder is dead once this host has watched its node Lease stand still for
//! the liveness window, and a grant counts for the rate until this host has
//! known it for the rate's period. Forgetting (a restart) only makes both
//! stricter: everything counts as just seen.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;
use tokio::time::Instant;

/// Bounds what a ledger or a Lease list can make this host remember.
const MAX_REMEMBERED: usize = 4096;

#[derive(Debug, Default)]
pub struct Observed {
    /// Node -> (its Lease's resourceVersion, or "" when absent; since when seen so).
    leases: HashMap<String, (String, Instant)>,
    /// Grant id -> when first seen.
    grants: HashMap<String, Instant>,
}

impl Observed {
    /// Note the node Leases as read now (node -> resourceVersion).
    pub fn leases(&mut self, now: Instant, current: &BTreeMap<String, String>) {
        for (node, version) in current {
            let room = self.leases.len() < MAX_REMEMBERED;
            match self.leases.get_mut(node) {
                Some((seen, _)) if seen == version => {}
                Some(entry) => *entry = (version.clone(), now),
                None if room => {
                    self.leases.insert(node.clone(), (version.clone(), now));
                }
                None => {}
            }
        }
        // A Lease that went away counts as standing still from then on.
        for (node, (version, since)) in self.leases.iter_mut() {
            if !current.contains_key(node) && !version.is_empty() {
                *version = String::new();
                *since = now;
            }
        }
    }

    /// The `holders` whose node Lease this host has seen unchanged (or
    /// absent) for at least `liveness`. A holder seen for the first time now
    /// is alive: its window starts now.
    pub fn dead<'a>(
        &mut self,
        now: Instant,
        liveness: Duration,
        holders: impl Iterator<Item = &'a str>,
    ) -> BTreeSet<String> {
        holders
            .filter(|node| {
                let (_, since) = self
                    .leases
                    .entry(node.to_string())
                    .or_insert_with(|| (String::new(), now));
                now.duration_since(*since) >= liveness
            })
            .map(str::to_string)
            .collect()
    }

    /// Note `grants` as read now; (how many this host has known for less
    /// than `period`, those it has known for longer: no reader needs them).
    pub fn grants(
        &mut self,
        now: Instant,
        period: Duration,
        grants: &[String],
    ) -> (usize, BTreeSet<String>) {
        let current: BTreeSet<&str> = grants.iter().map(String::as_str).collect();
        self.grants.retain(|g, _| current.contains(g.as_str()));
        let mut recent = 0;
        let mut stale = BTreeSet::new();
        for grant in grants {
            let first = match self.grants.get(grant) {
                Some(at) => *at,
                None if self.grants.len() < MAX_REMEMBERED => {
                    *self.grants.entry(grant.clone()).or_insert(now)
                }
                None => now,
            };
            match now.duration_since(first) >= period {
                true => stale.insert(grant.clone()),
                false => {
                    recent += 1;
                    true
                }
            };
        }
        (recent, stale)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIVENESS: Duration = Duration::from_secs(60);

    fn leases(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_holder_is_dead_only_after_its_lease_stood_still_for_the_window() {
        let t0 = Instant::now();
        let mut seen = Observed::default();
        seen.leases(t0, &leases(&[("a", "1"), ("b", "1")]));
        let at = |s| t0 + Duration::from_secs(s);
        seen.leases(at(30), &leases(&[("a", "2"), ("b", "1")]));
        assert!(
            seen.dead(at(59), LIVENESS, ["a", "b"].into_iter())
                .is_empty()
        );
        assert_eq!(
            seen.dead(at(60), LIVENESS, ["a", "b"].into_iter()),
            ["b".to_string()].into()
        );
        // a renewed at 30 s: alive until 90 s.
        assert!(seen.dead(at(89), LIVENESS, ["a"].into_iter()).is_empty());
        assert_eq!(seen.dead(at(90), LIVENESS, ["a"].into_iter()).len(), 1);
    }

    #[test]
    fn a_holder_first_seen_now_is_alive_and_a_vanished_lease_starts_its_window() {
        let t0 = Instant::now();
        let mut seen = Observed::default();
        assert!(seen.dead(t0, LIVENESS, ["x"].into_iter()).is_empty());
        seen.leases(t0, &leases(&[("a", "5")]));
        let later = t0 + Duration::from_secs(50);
        seen.leases(later, &leases(&[]));
        assert!(
            seen.dead(later + Duration::from_secs(59), LIVENESS, ["a"].into_iter())
                .is_empty()
        );
        assert_eq!(
            seen.dead(later + LIVENESS, LIVENESS, ["a", "x"].into_iter())
                .len(),
            2
        );
    }

    #[test]
    fn grants_count_from_when_this_host_first_saw_them() {
        let t0 = Instant::now();
        let period = Duration::from_secs(600);
        let mut seen = Observed::default();
        let first = vec!["g1".to_string(), "g2".to_string()];
        assert_eq!(seen.grants(t0, period, &first), (2, BTreeSet::new()));
        let later = t0 + Duration::from_secs(300);
        let more = vec!["g1".to_string(), "g2".to_string(), "g3".to_string()];
        assert_eq!(seen.grants(later, period, &more).0, 3);
        let (recent, stale) = seen.grants(t0 + period, period, &more);
        assert_eq!(recent, 1);
        assert_eq!(stale, ["g1".to_string(), "g2".to_string()].into());
    }
}
