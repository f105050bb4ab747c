//! Client-side request rate of plugin traffic to a remote API (kube, cloud): a
//! token bucket per plugin (`[plugins.X.limits] <capability>-qps`,
//! `<capability>-burst`) and one for all plugins together (`[host.<capability>]
//! qps`, `burst`), as client-go's `flowcontrol` bounds a whole client. A call
//! without a token waits for one (not an error) unless the wait would outlast
//! the reconcile's deadline. Host traffic (kube's leader elector has its own
//! client) never passes here, so it never queues behind plugin traffic.

use crate::capabilities::error::CapError;
use crate::capabilities::limits::raise;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// Tokens refill at `qps` a second up to `burst`; taking one may go into
/// debt, which is the wait (so waiters are served in order of arrival).
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
        let burst = f64::from(burst.max(1));
        TokenBucket {
            qps: f64::from(qps.max(1)),
            burst,
            tokens: burst,
            last: Instant::now(),
        }
    }

    /// One token every `every`, up to `burst` (the Event spam filter's 1 per 5 min).
    pub fn every(every: Duration, burst: u32) -> Self {
        TokenBucket {
            qps: 1.0 / every.as_secs_f64(),
            ..TokenBucket::new(1, burst)
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.last = now;
    }

    /// Follow a changed limit (a config reload), keeping what is in the bucket.
    fn set(&mut self, qps: u32, burst: u32) {
        self.qps = f64::from(qps.max(1));
        self.burst = f64::from(burst.max(1));
        self.tokens = self.tokens.min(self.burst);
    }

    /// Take a token: how long until it is there (zero when it is now), or
    /// None, taking nothing, when that is longer than `within`.
    pub fn reserve(&mut self, now: Instant, within: Duration) -> Option<Duration> {
        self.refill(now);
        let wait = if self.tokens >= 1.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((1.0 - self.tokens) / self.qps)
        };
        if wait > within {
            return None;
        }
        self.tokens -= 1.0;
        Some(wait)
    }

    /// When it was last used (the least recently used is forgotten first).
    pub fn last(&self) -> Instant {
        self.last
    }

    /// Return a token taken by [`TokenBucket::reserve`] and not used.
    fn give_back(&mut self) {
        self.tokens = (self.tokens + 1.0).min(self.burst);
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

pub struct Throttle {
    /// "kube": in messages and in the limits' names ("kube-qps").
    capability: &'static str,
    host: Mutex<TokenBucket>,
    host_limits: (u32, u32),
    plugins: Mutex<HashMap<String, TokenBucket>>,
    waits: Mutex<BTreeMap<String, Waits>>,
}

impl Throttle {
    pub fn new(capability: &'static str, qps: u32, burst: u32) -> Self {
        Throttle {
            capability,
            host: Mutex::new(TokenBucket::new(qps, burst)),
            host_limits: (qps, burst),
            plugins: Mutex::default(),
            waits: Mutex::default(),
        }
    }

    /// Wait for a request slot: the plugin's (when a plugin asks) and the
    /// host's. Fails with `timeout`, taking nothing, when the slot comes after
    /// the reconcile's deadline.
    pub async fn acquire(&self, asker: Option<&Asker<'_>>) -> Result<(), CapError> {
        let now = Instant::now();
        let within = asker.map_or(Duration::MAX, |a| a.within);
        let plugin_wait = match asker {
            None => Duration::ZERO,
            Some(a) => {
                let mut plugins = self.plugins.lock().unwrap();
                let bucket = plugins
                    .entry(a.plugin.to_string())
                    .or_insert_with(|| TokenBucket::new(a.qps, a.burst));
                bucket.set(a.qps, a.burst);
                match bucket.reserve(now, within) {
                    Some(wait) => wait,
                    None => {
                        drop(plugins);
                        let limit = format!("{}-qps", self.capability);
                        return Err(self.refused(a, raise(a.plugin, &limit, a.qps)));
                    }
                }
            }
        };
        let host_wait = self.host.lock().unwrap().reserve(now, within);
        let Some(host_wait) = host_wait else {
            let a = asker.expect("only a deadline can refuse");
            if let Some(bucket) = self.plugins.lock().unwrap().get_mut(a.plugin) {
                bucket.give_back();
            }
            let (qps, _) = self.host_limits;
            return Err(self.refused(
                a,
                format!(
                    "all plugins together make {qps} requests a second: raise [host.{}] qps",
                    self.capability
                ),
            ));
        };
        let wait = plugin_wait.max(host_wait);
        if wait > Duration::ZERO {
            if let Some(a) = asker {
                let mut waits = self.waits.lock().unwrap();
                let w = waits.entry(a.plugin.to_string()).or_default();
                w.count += 1;
                w.seconds += wait.as_secs_f64();
            }
            tokio::time::sleep(wait).await;
        }
        Ok(())
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
            throttle.acquire(Some(&other)).await.unwrap();
        }
        let start = Instant::now();
        throttle.acquire(Some(&other)).await.unwrap();
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(500),
            "the host's 2 QPS, not q's 5"
        );
        let err = throttle
            .acquire(Some(&asker(Duration::from_millis(10))))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("raise [host.kube] qps"), "{err}");
        throttle.acquire(None).await.unwrap();
    }
}
