//! Client-side request rate of plugin traffic to a remote API (kube, cloud): a
//! token bucket per plugin (`[plugins.X.limits] <capability>-qps`,
//! `<capability>-burst`) within a bound for all plugins together
//! (`[host.<capability>] qps`, `burst`), as client-go's `flowcontrol` bounds a
//! whole client. The host's rate is not one queue: each asker heard from lately
//! holds a reserved, equal share of it (its bucket refills at the lesser of its
//! own `qps` and the host's divided among the askers), and nobody takes a token
//! before it is there (no debt), so a plugin that floods waits behind itself
//! alone and a newcomer's share holds from its first request. A call without a
//! token waits for one (not an error) unless the wait would outlast the
//! reconcile's deadline. Host traffic (kube's leader elector has its own client)
//! never passes here, so it never queues behind plugin traffic.

use crate::capabilities::error::CapError;
use crate::capabilities::limits::raise;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// Tokens refill at `qps` a second up to `burst`; a token is taken only when
/// it is there.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket; `qps` and `burst` below 1 count as 1 (a zero rate would
    /// block forever).
    pub fn new(qps: u32, burst: u32) -> Self {
        TokenBucket::full(f64::from(qps.max(1)), f64::from(burst))
    }

    /// One token every `every`, up to `burst` (the Event spam filter's 1 per 5 min).
    pub fn every(every: Duration, burst: u32) -> Self {
        TokenBucket::full(1.0 / every.as_secs_f64(), f64::from(burst))
    }

    /// A full bucket of a rate that may be a fraction (a share of the
    /// host's); a burst below 1 counts as 1.
    fn full(qps: f64, burst: f64) -> Self {
        let burst = burst.max(1.0);
        TokenBucket {
            qps: qps.max(f64::MIN_POSITIVE),
            burst,
            tokens: burst,
            last: Instant::now(),
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.last = now;
    }

    /// Follow a changed limit (a config reload, another asker's arrival),
    /// keeping what is in the bucket.
    fn set(&mut self, now: Instant, qps: f64, burst: f64) {
        self.refill(now);
        self.qps = qps.max(f64::MIN_POSITIVE);
        self.burst = burst.max(1.0);
        self.tokens = self.tokens.min(self.burst);
    }

    /// Take a token if one is there now; else how long until one is.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        match self.until(now) {
            Duration::ZERO => {
                self.tokens -= 1.0;
                Ok(())
            }
            wait => Err(wait),
        }
    }

    /// How long until a token is there (zero: now), taking nothing.
    fn until(&mut self, now: Instant) -> Duration {
        self.refill(now);
        if self.tokens >= 1.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64((1.0 - self.tokens) / self.qps)
    }

    /// Whether nothing has been taken for `quiet` and the bucket has filled
    /// again: forgetting it now changes no bound.
    fn is_idle(&self, now: Instant, quiet: Duration) -> bool {
        let elapsed = now.saturating_duration_since(self.last);
        elapsed >= quiet && self.tokens + elapsed.as_secs_f64() * self.qps >= self.burst
    }

    /// When it was last used (the least recently used is forgotten first).
    pub fn last(&self) -> Instant {
        self.last
    }
}

/// Who asks for a request slot: a plugin and its limits.
pub struct Asker<'a> {
    pub plugin: &'a str,
    pub qps: u32,
    pub burst: u32,
    /// What is left of the reconcile's deadline.
    pub within: Duration,
}

#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Waits {
    pub count: u64,
    pub seconds: f64,
    /// Requests refused because the token came after the deadline.
    pub refused: u64,
}

/// The name host calls (no plugin asking) hold their share under.
const HOST: &str = "";
/// An asker quiet this long (and with a full bucket) gives its share back.
const QUIET: Duration = Duration::from_secs(60);

/// One asker's bucket and its own limits (None: the host's calls).
struct Share {
    bucket: TokenBucket,
    own: Option<(u32, u32)>,
}

/// The host's bucket and the askers' shares of it, changed together.
struct Buckets {
    /// `[host.<capability>]`: all requests together, never more.
    host: TokenBucket,
    /// One bucket per asker heard from in the last [`QUIET`] (plugins by
    /// their configured names, and the host's calls): its own limits capped
    /// at its share of the host's rate.
    shares: HashMap<String, Share>,
}

/// Why a request waits: what to raise.
#[derive(Clone, Copy)]
enum Binds {
    Own,
    Share,
    Host,
}

pub struct Throttle {
    /// "kube": in messages and in the limits' names ("kube-qps").
    capability: &'static str,
    /// `[host.<capability>]` qps and burst.
    host_limits: (u32, u32),
    buckets: Mutex<Buckets>,
    waits: Mutex<BTreeMap<String, Waits>>,
}

impl Throttle {
    pub fn new(capability: &'static str, qps: u32, burst: u32) -> Self {
        Throttle {
            capability,
            host_limits: (qps, burst),
            buckets: Mutex::new(Buckets {
                host: TokenBucket::new(qps, burst),
                shares: HashMap::new(),
            }),
            waits: Mutex::default(),
        }
    }

    /// Wait for a request slot of the asker's share. Fails with `timeout`,
    /// taking nothing, when the slot comes after the reconcile's deadline;
    /// host calls (`None`) wait as long as it takes.
    pub async fn acquire(&self, asker: Option<&Asker<'_>>) -> Result<(), CapError> {
        let start = Instant::now();
        let (name, own) = asker.map_or((HOST, None), |a| (a.plugin, Some((a.qps, a.burst))));
        let deadline = asker.and_then(|a| start.checked_add(a.within));
        let mut slept = false;
        loop {
            let now = Instant::now();
            let (wait, binds) = match self.take(name, own, now) {
                Ok(()) => break,
                Err(next) => next,
            };
            if let (Some(a), Some(deadline)) = (asker, deadline)
                && now + wait > deadline
            {
                return Err(self.refused(a, self.fix(a, binds)));
            }
            // The share may change meanwhile (an asker comes or goes): ask again then.
            tokio::time::sleep(wait).await;
            slept = true;
        }
        if let Some(a) = asker
            && slept
        {
            let mut waits = self.waits.lock().unwrap();
            let w = waits.entry(a.plugin.to_string()).or_default();
            w.count += 1;
            w.seconds += start.elapsed().as_secs_f64();
        }
        Ok(())
    }

    /// Take a token of `name`'s share and of the host's now, or say how
    /// long until both are there and which binds.
    fn take(
        &self,
        name: &str,
        own: Option<(u32, u32)>,
        now: Instant,
    ) -> Result<(), (Duration, Binds)> {
        let mut buckets = self.buckets.lock().unwrap();
        let Buckets { host, shares } = &mut *buckets;
        shares.retain(|n, share| n == name || !share.bucket.is_idle(now, QUIET));
        let joins = !shares.contains_key(name);
        let count = shares.len() + usize::from(joins);
        if joins {
            // Every share shrinks before the newcomer's bucket exists.
            for share in shares.values_mut() {
                let (qps, burst) = self.limits(share.own, count);
                share.bucket.set(now, qps, burst);
            }
        }
        let (qps, burst) = self.limits(own, count);
        let share = shares.entry(name.to_string()).or_insert_with(|| Share {
            bucket: TokenBucket::full(qps, burst),
            own,
        });
        share.own = own;
        share.bucket.set(now, qps, burst);
        let (share_wait, host_wait) = (share.bucket.until(now), host.until(now));
        if share_wait.is_zero() && host_wait.is_zero() {
            share.bucket.tokens -= 1.0;
            host.tokens -= 1.0;
            return Ok(());
        }
        let binds = if host_wait > share_wait {
            Binds::Host
        } else if own.is_some_and(|(own_qps, _)| qps < f64::from(own_qps.max(1))) {
            Binds::Share
        } else {
            Binds::Own
        };
        Err((share_wait.max(host_wait), binds))
    }

    /// An asker's rate and burst: its own limits (none for the host's
    /// calls) capped at its share when `askers` share the host's.
    fn limits(&self, own: Option<(u32, u32)>, askers: usize) -> (f64, f64) {
        let (share_qps, share_burst) = self.share(askers);
        match own {
            None => (share_qps, share_burst),
            Some((qps, burst)) => (
                share_qps.min(f64::from(qps.max(1))),
                share_burst.min(f64::from(burst.max(1))),
            ),
        }
    }

    /// Each of `askers` askers' share of the host's rate and burst.
    fn share(&self, askers: usize) -> (f64, f64) {
        let (qps, burst) = self.host_limits;
        let askers = askers.max(1) as f64;
        (
            f64::from(qps.max(1)) / askers,
            (f64::from(burst.max(1)) / askers).max(1.0),
        )
    }

    /// What to raise: the plugin's own rate, or the host's when the host's
    /// rate or the plugin's share of it is what binds.
    fn fix(&self, a: &Asker<'_>, binds: Binds) -> String {
        let (qps, _) = self.host_limits;
        let capability = self.capability;
        let askers = self.buckets.lock().unwrap().shares.len();
        match binds {
            Binds::Own => raise(a.plugin, &format!("{capability}-qps"), a.qps),
            Binds::Share if askers > 1 => {
                format!(
                    "all plugins together make {qps} requests a second, in equal shares ({:.2} each for the {askers} asking now): raise [host.{capability}] qps",
                    self.share(askers).0
                )
            }
            Binds::Host | Binds::Share => format!(
                "all plugins together make {qps} requests a second: raise [host.{capability}] qps"
            ),
        }
    }

    fn refused(&self, a: &Asker<'_>, fix: String) -> CapError {
        let mut waits = self.waits.lock().unwrap();
        let w = waits.entry(a.plugin.to_string()).or_default();
        w.refused += 1;
        if w.refused == 1 {
            tracing::warn!(
                plugin = a.plugin,
                "{} request rate: a call would wait past the reconcile's deadline; {fix}",
                self.capability
            );
        }
        CapError::Timeout(format!(
            "{} request rate: the next request slot comes after this reconcile's deadline ({:?} left); {fix}",
            self.capability, a.within
        ))
    }

    /// Waits (and refusals) per plugin, for `/metrics`.
    pub fn waits(&self) -> BTreeMap<String, Waits> {
        self.waits.lock().unwrap().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asker(within: Duration) -> Asker<'static> {
        Asker {
            plugin: "p",
            qps: 5,
            burst: 10,
            within,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_then_the_rate() {
        let throttle = Throttle::new("kube", 100, 100);
        let start = Instant::now();
        for _ in 0..10 {
            throttle
                .acquire(Some(&asker(Duration::from_secs(30))))
                .await
                .unwrap();
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "the burst goes at once");
        for _ in 0..10 {
            throttle
                .acquire(Some(&asker(Duration::from_secs(30))))
                .await
                .unwrap();
        }
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(1990) && took <= Duration::from_millis(2010),
            "{took:?}"
        );
        let waits = throttle.waits()["p"];
        assert_eq!((waits.count, waits.refused), (10, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slot_past_the_deadline_is_refused_and_takes_nothing() {
        let throttle = Throttle::new("kube", 100, 100);
        for _ in 0..10 {
            throttle
                .acquire(Some(&asker(Duration::from_secs(30))))
                .await
                .unwrap();
        }
        let err = throttle
            .acquire(Some(&asker(Duration::from_millis(100))))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), "timeout");
        assert!(
            err.to_string()
                .contains("raise [plugins.p.limits] kube-qps (now 5)"),
            "{err}"
        );
        // The refused call took no token: the next one waits 200 ms, not 400.
        let start = Instant::now();
        throttle
            .acquire(Some(&asker(Duration::from_secs(1))))
            .await
            .unwrap();
        assert_eq!(start.elapsed(), Duration::from_millis(200));
    }

    /// Hole 10a of issue 25: three plugins at the default rate kept one
    /// host-wide queue in debt and the reaper's requests timed out. Now a
    /// flood waits behind itself: another plugin's first requests go at
    /// once, and its share holds after.
    #[tokio::test(start_paused = true)]
    async fn a_flooding_plugin_waits_behind_itself_and_another_keeps_its_share() {
        let throttle = std::sync::Arc::new(Throttle::new("cloud", 2, 4));
        let flooder = |within| Asker {
            plugin: "flood",
            qps: 100,
            burst: 100,
            within,
        };
        let flood: Vec<_> = (0..20)
            .map(|_| {
                let throttle = throttle.clone();
                tokio::spawn(async move {
                    throttle
                        .acquire(Some(&flooder(Duration::from_secs(300))))
                        .await
                })
            })
            .collect();
        // Wait until the flood has taken the host's burst (4) and queues.
        while throttle.buckets.lock().unwrap().host.tokens >= 1.0 {
            tokio::task::yield_now().await;
        }
        // Before, the reaper queued behind the flood's 16 (8 s at 2 a
        // second) and was refused; now the flood's share is half the host's
        // and the reaper's two requests go within a second each.
        let reaper = Asker {
            plugin: "reaper",
            qps: 5,
            burst: 10,
            within: Duration::from_secs(1),
        };
        let start = Instant::now();
        for _ in 0..2 {
            throttle.acquire(Some(&reaper)).await.unwrap();
        }
        assert!(
            start.elapsed() <= Duration::from_millis(1500),
            "{:?}",
            start.elapsed()
        );
        // The host's calls join as a third asker and never time out.
        throttle.acquire(None).await.unwrap();
        for handle in flood {
            handle.await.unwrap().unwrap();
        }
    }

    /// Together the askers never exceed the host's rate: 3 plugins asking as
    /// fast as they may for 10 s get about the host's 2 a second (plus its
    /// burst of 4), however they interleave.
    #[tokio::test(start_paused = true)]
    async fn all_askers_together_stay_within_the_hosts_rate() {
        let throttle = std::sync::Arc::new(Throttle::new("kube", 2, 4));
        let start = Instant::now();
        let taken = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let askers: Vec<_> = ["a", "b", "c"]
            .into_iter()
            .map(|plugin| {
                let (throttle, taken) = (throttle.clone(), taken.clone());
                tokio::spawn(async move {
                    let asker = Asker {
                        plugin,
                        qps: 50,
                        burst: 50,
                        within: Duration::from_secs(60),
                    };
                    while start.elapsed() < Duration::from_secs(10) {
                        throttle.acquire(Some(&asker)).await.unwrap();
                        // Counted when taken within the 10 s.
                        if start.elapsed() <= Duration::from_secs(10) {
                            taken.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for handle in askers {
            handle.await.unwrap();
        }
        let taken = taken.load(std::sync::atomic::Ordering::Relaxed);
        assert!((18..=2 * 10 + 4).contains(&taken), "{taken}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_host_bucket_bounds_all_plugins_and_host_calls_never_time_out() {
        let throttle = Throttle::new("kube", 2, 4);
        let other = Asker {
            plugin: "q",
            ..asker(Duration::from_secs(30))
        };
        for _ in 0..2 {
            throttle
                .acquire(Some(&asker(Duration::from_secs(30))))
                .await
                .unwrap();
        }
        for _ in 0..2 {
            throttle.acquire(Some(&other)).await.unwrap();
        }
        // p's share has tokens left; the host's bucket is empty.
        let err = throttle
            .acquire(Some(&asker(Duration::from_millis(10))))
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("all plugins together make 2 requests a second: raise [host.kube] qps"),
            "{err}"
        );
        let start = Instant::now();
        throttle.acquire(None).await.unwrap();
        assert!(
            start.elapsed() > Duration::ZERO,
            "the host's calls wait too"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn past_its_share_a_plugin_is_refused_naming_the_hosts_rate() {
        let throttle = Throttle::new("cloud", 2, 100);
        let asker = |plugin| Asker {
            plugin,
            qps: 100,
            burst: 100,
            within: Duration::from_millis(100),
        };
        throttle.acquire(Some(&asker("a"))).await.unwrap();
        for _ in 0..50 {
            throttle.acquire(Some(&asker("b"))).await.unwrap();
        }
        let err = throttle.acquire(Some(&asker("b"))).await.unwrap_err();
        assert_eq!(err.kind(), "timeout");
        assert!(
            err.to_string().contains(
                "all plugins together make 2 requests a second, in equal shares (1.00 each for the 2 asking now): raise [host.cloud] qps"
            ),
            "{err}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_askers_share_goes_back_to_the_others() {
        let throttle = Throttle::new("cloud", 4, 4);
        let asker = |plugin| Asker {
            plugin,
            qps: 100,
            burst: 100,
            within: Duration::from_secs(30),
        };
        throttle.acquire(Some(&asker("gone"))).await.unwrap();
        throttle.acquire(Some(&asker("stays"))).await.unwrap();
        assert_eq!(throttle.buckets.lock().unwrap().shares.len(), 2);
        tokio::time::advance(QUIET).await;
        throttle.acquire(Some(&asker("stays"))).await.unwrap();
        let shares = &throttle.buckets.lock().unwrap().shares;
        assert_eq!(shares.keys().collect::<Vec<_>>(), ["stays"]);
        assert_eq!(shares["stays"].bucket.qps, 4.0, "the whole host rate again");
    }
}
