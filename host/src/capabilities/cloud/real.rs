//! What every real cloud backend shares: the request [`Pacer`] (the plugin's
//! and the host's request rate, the per-request deadline, the request counts
//! `/metrics` shows) and the backend of a host with no provider configured.
//! The providers themselves are `openstack.rs` and `aws.rs`; `mod.rs` picks
//! one from `[host.cloud] provider`.

use super::backend::{
    CloudBackend, CloudLimits, Instance, OwnerTag, REQUEST_TIMEOUT, Rule, SecurityGroup,
};
use crate::capabilities::call::Call;
use crate::capabilities::error::CapError;
use crate::capabilities::gate::Permit;
use crate::capabilities::rate::{Asker, Throttle};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One plugin's reconcile as its requests are paced: its name and deadline
/// (`call`) and its `cloud-*` limits.
#[derive(Clone)]
pub struct Paced {
    pub call: Arc<Call>,
    pub limits: CloudLimits,
}

/// Paces and counts the requests of one provider account, shared by every
/// plugin's view of the backend.
pub struct Pacer {
    throttle: Throttle,
    /// Requests by plugin ("" for the host's own) and backend operation.
    requests: Mutex<BTreeMap<(String, &'static str), u64>>,
    total: AtomicU64,
}

impl Pacer {
    /// All plugins together make at most `qps` requests a second (`[host.cloud]`).
    pub fn new(qps: u32, burst: u32) -> Self {
        Pacer {
            throttle: Throttle::new("cloud", qps, burst),
            requests: Mutex::default(),
            total: AtomicU64::new(0),
        }
    }

    /// Before each request (every page counts): wait for a slot of the
    /// plugin's rate (`cloud-qps`, `cloud-burst`) and the host's, then count
    /// it. The answer is how long the request may take: [`REQUEST_TIMEOUT`],
    /// or less when the reconcile's deadline comes first.
    pub async fn slot(
        &self,
        paced: Option<&Paced>,
        operation: &'static str,
    ) -> Result<Duration, CapError> {
        let call = paced.map(|p| &*p.call);
        let asker = paced.map(|Paced { call, limits }| Asker {
            plugin: &call.plugin,
            qps: limits.qps,
            burst: limits.burst,
            within: call.remaining(),
        });
        self.throttle.acquire(asker.as_ref()).await?;
        self.total.fetch_add(1, Ordering::Relaxed);
        let plugin = call.map_or(String::new(), |c| c.plugin.clone());
        *self
            .requests
            .lock()
            .unwrap()
            .entry((plugin, operation))
            .or_default() += 1;
        let left = call.map_or(REQUEST_TIMEOUT, |c| c.remaining());
        if left.is_zero() {
            return Err(CapError::Timeout(format!(
                "cloud {operation}: this reconcile's deadline has passed"
            )));
        }
        Ok(REQUEST_TIMEOUT.min(left))
    }

    /// Requests sent so far.
    pub fn requests(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// The request and rate series of the plugins `configured` accepts, whole
    /// families for `/metrics`.
    pub fn render(&self, provider: &str, configured: &dyn Fn(&str) -> bool) -> String {
        let mut text = String::new();
        let mut family = |name: &str, kind: &str, help: &str, rows: Vec<(String, String)>| {
            let _ = writeln!(text, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, value) in rows {
                let _ = writeln!(text, "{name}{labels} {value}");
            }
        };
        let shown = |plugin: &str| plugin.is_empty() || configured(plugin);
        let requests = self.requests.lock().unwrap().clone();
        family(
            "tend_cloud_requests_total",
            "counter",
            "Cloud API requests (every page counts), by plugin (\"\" for the host) and operation.",
            requests
                .iter()
                .filter(|((plugin, _), _)| shown(plugin))
                .map(|((plugin, operation), n)| {
                    (
                        format!(
                            "{{provider=\"{provider}\",plugin=\"{plugin}\",operation=\"{operation}\"}}"
                        ),
                        n.to_string(),
                    )
                })
                .collect(),
        );
        let waits: Vec<_> = self
            .throttle
            .waits()
            .into_iter()
            .filter(|(plugin, _)| shown(plugin))
            .collect();
        let by_plugin = |value: &dyn Fn(&crate::capabilities::rate::Waits) -> String| {
            waits
                .iter()
                .map(|(plugin, w)| (format!("{{plugin=\"{plugin}\"}}"), value(w)))
                .collect()
        };
        family(
            "tend_cloud_rate_waits_total",
            "counter",
            "Plugin requests that waited for a token (cloud-qps, cloud-burst; [host.cloud] qps, burst).",
            by_plugin(&|w| w.count.to_string()),
        );
        family(
            "tend_cloud_rate_wait_seconds_total",
            "counter",
            "Seconds plugin requests waited for a token.",
            by_plugin(&|w| format!("{:.3}", w.seconds)),
        );
        family(
            "tend_cloud_rate_refused_total",
            "counter",
            "Plugin requests refused because their token came after the reconcile's deadline.",
            by_plugin(&|w| w.refused.to_string()),
        );
        text
    }
}

/// The backend of a host without `[host.cloud] provider`: every call is
/// `unavailable`, naming the setting.
pub struct Unconfigured;

impl Unconfigured {
    fn error<T>() -> Result<T, CapError> {
        Err(CapError::Unavailable(
            "cloud: no provider is configured on this host: set [host.cloud] provider = \"openstack\" or \"aws\"".into(),
        ))
    }
}

#[async_trait::async_trait]
impl CloudBackend for Unconfigured {
    fn provider(&self) -> &'static str {
        "none"
    }
    fn for_plugin(self: Arc<Self>, _: &Arc<Call>, _: CloudLimits) -> Arc<dyn CloudBackend> {
        self
    }
    async fn list_instances(&self, _: &OwnerTag) -> Result<Vec<Instance>, CapError> {
        Self::error()
    }
    async fn get_instance(&self, _: &str) -> Result<Option<Instance>, CapError> {
        Self::error()
    }
    async fn delete_instance(&self, _: Permit, _: &str) -> Result<(), CapError> {
        Self::error()
    }
    async fn list_security_groups(&self, _: &[String]) -> Result<Vec<SecurityGroup>, CapError> {
        Self::error()
    }
    async fn find_security_groups(&self, _: &str) -> Result<Vec<SecurityGroup>, CapError> {
        Self::error()
    }
    async fn ensure_rule(&self, _: Permit, _: &str, _: &Rule) -> Result<bool, CapError> {
        Self::error()
    }
    async fn add_to_group(&self, _: Permit, _: &Instance, _: &str) -> Result<bool, CapError> {
        Self::error()
    }
    fn requests(&self) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::testing::call;

    #[tokio::test(start_paused = true)]
    async fn slots_follow_the_plugins_limits_and_are_counted_by_operation() {
        let pacer = Pacer::new(100, 100);
        let paced = Paced {
            call: call("reaper", false),
            limits: CloudLimits { qps: 2, burst: 2 },
        };
        let start = tokio::time::Instant::now();
        for _ in 0..4 {
            let timeout = pacer.slot(Some(&paced), "list-instances").await.unwrap();
            assert!(timeout <= REQUEST_TIMEOUT);
        }
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(1),
            "2 at once, then 2 a second"
        );
        pacer.slot(None, "get-instance").await.unwrap();
        assert_eq!(pacer.requests(), 5);
        let text = pacer.render("openstack", &|p| p == "reaper");
        assert!(
            text.contains(
                "tend_cloud_requests_total{provider=\"openstack\",plugin=\"reaper\",operation=\"list-instances\"} 4"
            ),
            "{text}"
        );
        assert!(
            text.contains("tend_cloud_rate_waits_total{plugin=\"reaper\"} 2"),
            "{text}"
        );
        assert!(
            pacer
                .render("openstack", &|_| false)
                .contains("plugin=\"\"")
        );
        assert!(!pacer.render("openstack", &|_| false).contains("reaper"));
    }

    #[tokio::test]
    async fn without_a_provider_every_call_names_the_setting() {
        let err = Unconfigured
            .get_instance("i-0123456789abcdef0")
            .await
            .unwrap_err();
        assert_eq!(err.kind(), "unavailable");
        assert!(
            err.to_string()
                .contains("set [host.cloud] provider = \"openstack\" or \"aws\"")
        );
    }
}
