//! One reconcile: a fresh `Store` and instance from the plugin's `InstancePre`,
//! memory and wall-clock limits, and a report of what happened.
//!
//! A fresh instance per call means a trap can never leave state behind, and the
//! deadline covers everything: a guest spinning in compute yields every epoch
//! tick, and a guest blocked in a host call is cut off by the same timeout.

use super::store::{CallState, MemoryLimiter};
use super::{CompiledPlugin, Runtime};
use crate::capabilities::gate::{Caller, Planned};
use crate::capabilities::tape::{Tape, TapeEnd};
use crate::capabilities::{CallCount, CapError, Capabilities, Mutation, Services};
use crate::config::PluginConfig;
use crate::scheduler::Trigger;
use crate::text::{bounded, inert};
use crate::wit::{PluginPre, types};
use std::time::{Duration, Instant};
use wasmtime::Store;
use wasmtime::component::{Component, ResourceTable};
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

/// Bytes of stdout/stderr kept per reconcile (a panic message lands there).
const OUTPUT_CAPACITY: usize = 64 * 1024;

/// How long a reconcile cut off by its deadline waits for mutations still
/// running (a large write on the blocking pool) before it is reported, so
/// their results are journaled and nothing outlives the report for long.
pub const SETTLE_GRACE: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    Healthy,
    Progressing,
    Degraded,
}

impl Health {
    pub fn word(self) -> &'static str {
        match self {
            Health::Healthy => "healthy",
            Health::Progressing => "progressing",
            Health::Degraded => "degraded",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Outcome {
    pub health: Health,
    pub message: String,
    pub requeue_after: Option<Duration>,
}

/// What a plugin says of itself: the WIT's record, its texts bounded.
pub use crate::wit::types::PluginInfo;

/// Why a reconcile did not produce an outcome.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// The plugin returned an error.
    #[error("{0}")]
    Plugin(CapError),
    #[error("deadline of {} exceeded (raise [plugins.{plugin}.limits] timeout if the work is legitimate)", humantime::format_duration(*.limit))]
    Deadline { plugin: String, limit: Duration },
    #[error(
        "memory limit of {limit} exceeded (raise [plugins.{plugin}.limits] memory if the work is legitimate)"
    )]
    Memory { plugin: String, limit: String },
    /// The guest trapped (a Rust panic ends up here, with its message).
    #[error("trapped: {0}")]
    Trap(String),
    /// The host could not run the plugin at all (for example instantiation).
    #[error("could not run: {0}")]
    Host(String),
}

/// A taped reconcile's tape as it ended and the context it ran with: what a
/// recording keeps (`replay::Taped::of` makes one of it).
#[derive(Debug)]
pub struct TapedRun {
    pub end: TapeEnd,
    pub context: types::Context,
}

/// What one reconcile did.
#[derive(Debug)]
pub struct ReconcileReport {
    pub result: Result<Outcome, Failure>,
    /// Mutations performed, planned (dry run) or refused, in call order.
    pub mutations: Vec<Mutation>,
    pub elapsed: Duration,
    /// Log lines dropped because the plugin exceeded its log budget.
    pub logs_dropped: usize,
    pub calls: Vec<CallCount>,
    /// What was recorded or replayed; None when the request's tape was off.
    pub tape: Option<TapedRun>,
}

impl ReconcileReport {
    /// The report as `tend plan` and `tend reconcile` print it, and as the
    /// daemon answers it: health (none when it failed), message, mutations.
    pub fn summary(&self, plugin: &str) -> serde_json::Value {
        let (health, message) = match &self.result {
            Ok(outcome) => (Some(outcome.health), outcome.message.clone()),
            Err(failure) => (None, failure.to_string()),
        };
        serde_json::json!({
            "plugin": plugin,
            "health": health,
            "message": message,
            "elapsed_ms": self.elapsed.as_secs_f64() * 1000.0,
            "mutations": self.mutations,
        })
    }
}

/// Everything about a reconcile that is not the plugin or its config.
pub struct CallRequest<'a> {
    pub services: &'a Services,
    /// A plan of several plugins shares what it planned (budgets count it).
    pub planned: Option<Planned>,
    pub triggers: Vec<Trigger>,
    pub node_name: &'a str,
    pub dry_run: bool,
    /// Off, or record or replay this reconcile's capability calls.
    pub tape: Tape,
}

impl Runtime {
    /// A store with no ambient authority: no files, no network, no env; stdout
    /// and stderr go to a bounded in-memory pipe.
    fn new_store(
        &self,
        pre: &PluginPre<CallState>,
        caps: Capabilities,
        memory: u64,
    ) -> (Store<CallState>, MemoryOutputPipe) {
        let output = MemoryOutputPipe::new(OUTPUT_CAPACITY);
        let wasi = WasiCtxBuilder::new()
            .stdout(output.clone())
            .stderr(output.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let limiter = MemoryLimiter {
            limit: memory as usize,
            used: 0,
            exceeded: false,
        };
        let state = CallState {
            wasi,
            table: ResourceTable::new(),
            limiter,
            caps,
        };
        // The engine of the build that will run: Cranelift's, Winch's until
        // that build is ready, or on demand beside a full pool.
        let mut store = Store::new(pre.engine(), state);
        store.limiter(|s| &mut s.limiter);
        store.set_epoch_deadline(1);
        store.epoch_deadline_async_yield_and_update(1);
        (store, output)
    }

    /// What to instantiate `plugin` from: its own build, or, while the
    /// instance pool is full (more plugins running at once than the config it
    /// was sized for), its build for the on-demand engine, made the first time
    /// (a log line says so). A race for the last slots can still find the
    /// pool full: that reconcile fails naming the pool, and the next one runs.
    fn instance_pre<'a>(&self, plugin: &'a CompiledPlugin, name: &str) -> &'a PluginPre<CallState> {
        let Some(tier) = &self.beyond_pool else {
            return &plugin.pre;
        };
        let pooled = plugin.pre.engine().pooling_allocator_metrics();
        let full = pooled
            .is_some_and(|metrics| metrics.component_instances() >= u64::from(self.pool_instances));
        if !full {
            return &plugin.pre;
        }
        let beyond = plugin.beyond_pool.get_or_init(|| {
            let built = plugin.component.serialize().and_then(|bytes| {
                // SAFETY: bytes this process serialized a moment ago from an
                // engine with the same settings but its allocator.
                let component = unsafe { Component::deserialize(&tier.engine, &bytes) }?;
                PluginPre::new(tier.linker.instantiate_pre(&component)?)
            });
            match built {
                Ok(pre) => {
                    tracing::warn!(plugin = name, pool = self.pool_instances, "the instance pool is full; this plugin runs with on-demand allocation while it is");
                    Some(pre)
                }
                Err(e) => {
                    tracing::warn!(plugin = name, "the instance pool is full and the on-demand build failed: {e:#}");
                    None
                }
            }
        });
        beyond.as_ref().unwrap_or(&plugin.pre)
    }

    /// Run one reconcile of `plugin` in a fresh instance.
    pub async fn reconcile(
        &self,
        plugin: &CompiledPlugin,
        config: &PluginConfig,
        request: CallRequest<'_>,
    ) -> ReconcileReport {
        let started = Instant::now();
        let caller = Caller {
            plugin: config.name.clone(),
            digest: plugin.digest.clone(),
            triggers: request.triggers.iter().map(Trigger::to_string).collect(),
            dry_run: request.dry_run,
            cluster: config.scope == crate::config::Scope::Cluster,
        };
        let call =
            request
                .services
                .call(caller, config.limits, request.planned.clone(), request.tape);
        let caps = Capabilities::for_call(
            &request.services.backends,
            &config.grants,
            &config.capability_limits,
            &call,
        );
        let pre = self.instance_pre(plugin, &config.name);
        let (mut store, output) = self.new_store(pre, caps, config.limits.memory.0);
        let ctx = types::Context {
            plugin: config.name.clone(),
            config: config.config_json.clone(),
            triggers: request.triggers.iter().map(types::Trigger::from).collect(),
            node_name: request.node_name.to_string(),
            dry_run: request.dry_run,
        };
        let _ticking = self.ticker.running();
        let run = async {
            let instance = pre.instantiate_async(&mut store).await?;
            instance
                .tend_plugin_reconciler()
                .call_reconcile(&mut store, &ctx)
                .await
        };
        let result = tokio::time::timeout(config.limits.timeout, run).await;
        if result.is_err() && !call.gate.settle(SETTLE_GRACE).await {
            tracing::warn!(plugin = %config.name, "a mutation cut off by the deadline is still running after {SETTLE_GRACE:?}; its result will be journaled when it ends");
        }
        // The state writes the plugin was answered for, durable before the
        // reconcile is reported (a hung disk is waited for no longer than a
        // cut-off mutation).
        let durable = tokio::time::timeout(SETTLE_GRACE, call.gate.durable())
            .await
            .unwrap_or_else(|_| {
                let hung = format!(
                    "state store: a write this reconcile was answered for is still being committed after {SETTLE_GRACE:?}"
                );
                tracing::error!(plugin = %config.name, "{hung}");
                Err(CapError::Unavailable(hung))
            });
        // A lost state write outranks what the plugin answered (it may have
        // caught the error and said something else); a deadline or a trap
        // stays what ended the reconcile, the loss logged by the gate.
        let result = match (result, durable) {
            (Err(_), _) => Err(Failure::Deadline {
                plugin: config.name.clone(),
                limit: config.limits.timeout,
            }),
            (Ok(Ok(_)), Err(lost)) => Err(Failure::Plugin(lost)),
            (Ok(Ok(Ok(outcome))), Ok(())) => {
                Ok(from_wit_outcome(outcome, config.limits.min_requeue))
            }
            (Ok(Ok(Err(error))), Ok(())) => Err(Failure::Plugin(from_wit_error(error))),
            (Ok(Err(e)), _) => Err(classify(e, &store, &output, config)),
        };
        forward_output(&config.name, &output);
        call.gate.sync().await;
        let tape = call.tape.finish().map(|end| TapedRun { end, context: ctx });
        ReconcileReport {
            result,
            mutations: call.gate.mutations(),
            elapsed: started.elapsed(),
            logs_dropped: store.data().caps.log.dropped(),
            calls: call.counts(),
            tape,
        }
    }

    /// Call `describe` in a fresh instance with no grants.
    pub async fn describe(
        &self,
        plugin: &CompiledPlugin,
        services: &Services,
    ) -> anyhow::Result<PluginInfo> {
        let config = PluginConfig {
            name: "describe".into(),
            enabled: true,
            file: plugin.path.clone(),
            oci: None,
            interval: None,
            watch: vec![],
            grants: Default::default(),
            limits: Default::default(),
            capability_limits: Default::default(),
            scope: Default::default(),
            config_json: "{}".into(),
        };
        let caller = Caller {
            plugin: config.name.clone(),
            digest: plugin.digest.clone(),
            triggers: vec![],
            dry_run: true,
            cluster: false,
        };
        let call = services.call(caller, config.limits, None, Tape::Off);
        let caps = Capabilities::for_call(
            &services.backends,
            &config.grants,
            &config.capability_limits,
            &call,
        );
        let pre = self.instance_pre(plugin, &config.name);
        let (mut store, output) = self.new_store(pre, caps, config.limits.memory.0);
        let _ticking = self.ticker.running();
        let run = async {
            let instance = pre.instantiate_async(&mut store).await?;
            instance
                .tend_plugin_reconciler()
                .call_describe(&mut store)
                .await
        };
        match tokio::time::timeout(config.limits.timeout, run).await {
            Err(_) => anyhow::bail!("describe did not return within {:?}", config.limits.timeout),
            Ok(Err(e)) => Err(anyhow::anyhow!(classify(e, &store, &output, &config))),
            Ok(Ok(info)) => Ok(PluginInfo {
                name: bounded(info.name),
                version: bounded(info.version),
                summary: bounded(info.summary),
            }),
        }
    }
}

/// The outcome; a requeue sooner than `min_requeue` waits that long (a plugin
/// asking for 0 ms must not spin the host).
fn from_wit_outcome(outcome: types::Outcome, min_requeue: Duration) -> Outcome {
    Outcome {
        health: match outcome.health {
            types::Health::Healthy => Health::Healthy,
            types::Health::Progressing => Health::Progressing,
            types::Health::Degraded => Health::Degraded,
        },
        message: bounded(outcome.message),
        requeue_after: outcome
            .requeue_after_ms
            .map(|ms| Duration::from_millis(ms).max(min_requeue)),
    }
}

/// The plugin's error, its text bounded like every text a plugin returns.
fn from_wit_error(error: types::Error) -> CapError {
    CapError::from(error).map_message(bounded)
}

/// Turn an error out of wasmtime into the cause an operator can act on.
fn classify(
    error: wasmtime::Error,
    store: &Store<CallState>,
    output: &MemoryOutputPipe,
    config: &PluginConfig,
) -> Failure {
    if store.data().limiter.exceeded {
        return Failure::Memory {
            plugin: config.name.clone(),
            limit: config.limits.memory.to_string(),
        };
    }
    let Some(trap) = error.downcast_ref::<wasmtime::Trap>() else {
        return Failure::Host(format!("{error:#}"));
    };
    let output = String::from_utf8_lossy(&output.contents()).into_owned();
    match output.lines().find(|l| l.contains("panicked at")) {
        Some(_) => {
            let panic = output
                .lines()
                .skip_while(|l| !l.contains("panicked at"))
                .take(3);
            Failure::Trap(bounded(format!(
                "the plugin panicked: {}",
                panic.collect::<Vec<_>>().join(" ")
            )))
        }
        None => Failure::Trap(trap.to_string()),
    }
}

/// The guest's stdout/stderr into the host log, at debug level.
fn forward_output(plugin: &str, output: &MemoryOutputPipe) {
    let contents = output.contents();
    if !contents.is_empty() {
        tracing::debug!(plugin, output = %inert(&String::from_utf8_lossy(&contents)), "plugin output");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::{Backends, testing};
    use tokio::io::AsyncWriteExt;

    fn config() -> PluginConfig {
        PluginConfig {
            name: "p".into(),
            enabled: true,
            file: "/plugins/p.wasm".into(),
            oci: None,
            interval: None,
            watch: vec![],
            grants: Default::default(),
            limits: Default::default(),
            capability_limits: Default::default(),
            scope: Default::default(),
            config_json: "{}".into(),
        }
    }

    /// A store as a reconcile has it after its call returned, with `output`
    /// written by the guest; no component is compiled.
    async fn after_call(
        output: &str,
        memory_exceeded: bool,
    ) -> (Store<CallState>, MemoryOutputPipe) {
        let (backends, _fakes) = Backends::fake();
        let call = testing::call("p", false);
        let caps =
            Capabilities::for_call(&backends, &Default::default(), &Default::default(), &call);
        let pipe = MemoryOutputPipe::new(OUTPUT_CAPACITY);
        pipe.clone().write_all(output.as_bytes()).await.unwrap();
        let state = CallState {
            wasi: WasiCtxBuilder::new().build(),
            table: ResourceTable::new(),
            limiter: MemoryLimiter {
                limit: 1 << 20,
                used: 1 << 20,
                exceeded: memory_exceeded,
            },
            caps,
        };
        (Store::new(&wasmtime::Engine::default(), state), pipe)
    }

    fn trap() -> wasmtime::Error {
        wasmtime::Error::new(wasmtime::Trap::UnreachableCodeReached)
    }

    #[tokio::test]
    async fn a_panic_is_lifted_from_the_output_into_the_trap() {
        let output = "starting\nthread '<unnamed>' panicked at src/lib.rs:9:5:\nchaos was asked to panic\nnote: run with RUST_BACKTRACE=1\nmore\n";
        let (store, pipe) = after_call(output, false).await;
        let failure = classify(trap(), &store, &pipe, &config());
        assert_eq!(
            failure,
            Failure::Trap(
                "the plugin panicked: thread '<unnamed>' panicked at src/lib.rs:9:5: chaos was asked to panic note: run with RUST_BACKTRACE=1".into()
            )
        );
    }

    #[tokio::test]
    async fn a_trap_without_a_panic_names_the_trap() {
        let (store, pipe) = after_call("some output\n", false).await;
        let failure = classify(trap(), &store, &pipe, &config());
        let expected = wasmtime::Trap::UnreachableCodeReached.to_string();
        assert_eq!(failure, Failure::Trap(expected));
    }

    #[tokio::test]
    async fn memory_over_the_limit_is_named_before_the_trap_it_caused() {
        let (store, pipe) = after_call("", true).await;
        let failure = classify(trap(), &store, &pipe, &config());
        let limit = config().limits.memory.to_string();
        assert_eq!(
            failure,
            Failure::Memory {
                plugin: "p".into(),
                limit: limit.clone()
            }
        );
        assert!(
            failure
                .to_string()
                .contains(&format!("memory limit of {limit} exceeded"))
        );
        assert!(failure.to_string().contains("[plugins.p.limits] memory"));
    }

    #[tokio::test]
    async fn an_error_that_is_no_trap_is_the_hosts() {
        let (store, pipe) = after_call("panicked at nothing", false).await;
        let error = wasmtime::Error::msg("instantiate").context("cannot run p");
        let failure = classify(error, &store, &pipe, &config());
        assert_eq!(failure, Failure::Host("cannot run p: instantiate".into()));
    }

    #[test]
    fn health_and_requeue_cross_the_wit_boundary_unchanged_above_the_minimum() {
        let min = Duration::from_millis(500);
        let cases = [
            (types::Health::Healthy, Health::Healthy, None, None),
            (
                types::Health::Progressing,
                Health::Progressing,
                Some(2000),
                Some(Duration::from_secs(2)),
            ),
            (
                types::Health::Degraded,
                Health::Degraded,
                Some(499),
                Some(min),
            ),
        ];
        for (wit, health, requeue_after_ms, requeue_after) in cases {
            let outcome = from_wit_outcome(
                types::Outcome {
                    health: wit,
                    message: "m".into(),
                    requeue_after_ms,
                },
                min,
            );
            assert_eq!(
                outcome,
                Outcome {
                    health,
                    message: "m".into(),
                    requeue_after
                }
            );
        }
    }

    #[test]
    fn each_plugin_error_keeps_its_kind() {
        use types::Error as E;
        let errors = [
            E::Denied("m".into()),
            E::NotFound("m".into()),
            E::Conflict("m".into()),
            E::Unavailable("m".into()),
            E::Timeout("m".into()),
            E::Invalid("m".into()),
            E::BudgetExhausted("m".into()),
            E::Other("m".into()),
        ];
        for error in errors {
            let expected = CapError::from(error.clone());
            assert_eq!(from_wit_error(error), expected);
        }
    }

    #[test]
    fn plugin_text_is_bounded_where_it_crosses_the_wit_boundary() {
        let huge = "x".repeat(4 << 20);
        let outcome = from_wit_outcome(
            types::Outcome {
                health: types::Health::Degraded,
                message: huge.clone(),
                requeue_after_ms: Some(0),
            },
            Duration::from_secs(1),
        );
        assert!(outcome.message.len() <= crate::text::MAX_PLUGIN_TEXT);
        assert!(outcome.message.ends_with("(cut: 4194304 bytes)"));
        assert_eq!(outcome.requeue_after, Some(Duration::from_secs(1)));
        let error = from_wit_error(types::Error::Invalid(huge));
        let CapError::Invalid(message) = &error else {
            panic!("{error}")
        };
        assert!(message.len() <= crate::text::MAX_PLUGIN_TEXT);
        assert!(message.ends_with("(cut: 4194304 bytes)"));
    }
}
