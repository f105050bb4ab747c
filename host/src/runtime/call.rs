//! One reconcile: a fresh `Store` and instance from the plugin's `InstancePre`,
//! memory and wall-clock limits, and a report of what happened.
//!
//! A fresh instance per call means a trap can never leave state behind, and the
//! deadline covers everything: a guest spinning in compute yields every epoch
//! tick, and a guest blocked in a host call is cut off by the same timeout.

use super::bindings::{self, types};
use super::{CompiledPlugin, Runtime};
use crate::capabilities::{Backends, CallInfo, CapError, Capabilities, Mutation, Mutations};
use crate::config::PluginConfig;
use std::time::{Duration, Instant};
use wasmtime::Store;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// Bytes of stdout/stderr kept per reconcile (a panic message lands there).
const OUTPUT_CAPACITY: usize = 64 * 1024;

/// Why a reconcile runs; mirrors WIT `trigger`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Trigger {
    pub kind: String,
    pub subject: Option<String>,
}

impl Trigger {
    pub fn new(kind: &str) -> Self {
        Trigger {
            kind: kind.to_string(),
            subject: None,
        }
    }

    pub fn file(path: &std::path::Path) -> Self {
        Trigger {
            kind: "file".into(),
            subject: Some(path.display().to_string()),
        }
    }
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.subject {
            Some(subject) => write!(f, "{}:{subject}", self.kind),
            None => f.write_str(&self.kind),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    Healthy,
    Progressing,
    Degraded,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Outcome {
    pub health: Health,
    pub message: String,
    pub requeue_after: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginInfo {
    pub name: String,
    pub version: String,
    pub summary: String,
}

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

/// How often a reconcile called one capability operation with one result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallCount {
    pub capability: &'static str,
    pub operation: &'static str,
    /// "ok" or the error case.
    pub result: &'static str,
    pub count: u64,
}

/// What one reconcile did.
#[derive(Debug)]
pub struct ReconcileReport {
    pub result: Result<Outcome, Failure>,
    /// Mutations performed, or in a dry run planned, in call order.
    pub mutations: Vec<Mutation>,
    pub elapsed: Duration,
    /// Log lines dropped because the plugin exceeded its log budget.
    pub logs_dropped: usize,
    pub calls: Vec<CallCount>,
}

/// Caps the total linear memory of one instance (all its memories together),
/// and remembers whether it had to refuse growth.
struct MemoryLimiter {
    limit: usize,
    used: usize,
    exceeded: bool,
}

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let used = self.used + desired.saturating_sub(current);
        if used > self.limit {
            self.exceeded = true;
            return Err(wasmtime::Error::msg(format!(
                "memory limit of {} bytes exceeded",
                self.limit
            )));
        }
        self.used = used;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

/// The data of one call's `Store`.
pub struct CallState {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: MemoryLimiter,
    pub(super) caps: Capabilities,
    calls: std::collections::BTreeMap<(&'static str, &'static str, &'static str), u64>,
}

impl CallState {
    /// Count a capability call by its result, and hand the result to the guest.
    pub(super) fn counted<T>(
        &mut self,
        capability: &'static str,
        operation: &'static str,
        result: Result<T, CapError>,
    ) -> Result<T, types::Error> {
        let label = result.as_ref().map_or_else(CapError::kind, |_| "ok");
        *self
            .calls
            .entry((capability, operation, label))
            .or_default() += 1;
        result.map_err(bindings::to_wit_error)
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Everything about a reconcile that is not the plugin or its config.
pub struct CallRequest<'a> {
    pub backends: &'a Backends,
    pub triggers: Vec<Trigger>,
    pub node_name: &'a str,
    pub dry_run: bool,
}

impl Runtime {
    /// A store with no ambient authority: no files, no network, no env; stdout
    /// and stderr go to a bounded in-memory pipe.
    fn new_store(
        &self,
        plugin: &CompiledPlugin,
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
            calls: Default::default(),
        };
        // The plugin's own engine: Cranelift's, or Winch's until that build is ready.
        let mut store = Store::new(plugin.component.engine(), state);
        store.limiter(|s| &mut s.limiter);
        store.set_epoch_deadline(1);
        store.epoch_deadline_async_yield_and_update(1);
        (store, output)
    }

    /// Run one reconcile of `plugin` in a fresh instance.
    pub async fn reconcile(
        &self,
        plugin: &CompiledPlugin,
        config: &PluginConfig,
        request: CallRequest<'_>,
    ) -> ReconcileReport {
        let started = Instant::now();
        let mutations = Mutations::default();
        let call = CallInfo {
            plugin: config.name.clone(),
            dry_run: request.dry_run,
            mutations: mutations.clone(),
        };
        let caps = Capabilities::for_call(request.backends, config, &call);
        let (mut store, output) = self.new_store(plugin, caps, config.limits.memory.0);
        let ctx = types::Context {
            plugin: config.name.clone(),
            config: config.config_json.clone(),
            triggers: request
                .triggers
                .iter()
                .map(|t| types::Trigger {
                    kind: t.kind.clone(),
                    subject: t.subject.clone(),
                })
                .collect(),
            node_name: request.node_name.to_string(),
            dry_run: request.dry_run,
        };
        let _ticking = self.ticker.running();
        let run = async {
            let instance = plugin.pre.instantiate_async(&mut store).await?;
            instance
                .tend_plugin_reconciler()
                .call_reconcile(&mut store, &ctx)
                .await
        };
        let result = tokio::time::timeout(config.limits.timeout, run).await;
        let result = match result {
            Err(_) => Err(Failure::Deadline {
                plugin: config.name.clone(),
                limit: config.limits.timeout,
            }),
            Ok(Ok(Ok(outcome))) => Ok(from_wit_outcome(outcome)),
            Ok(Ok(Err(error))) => Err(Failure::Plugin(bindings::from_wit_error(error))),
            Ok(Err(e)) => Err(classify(e, &store, &output, config)),
        };
        forward_output(&config.name, &output);
        ReconcileReport {
            result,
            mutations: mutations.take(),
            elapsed: started.elapsed(),
            logs_dropped: store.data().caps.log.dropped(),
            calls: store
                .data()
                .calls
                .iter()
                .map(|(&(capability, operation, result), &count)| CallCount {
                    capability,
                    operation,
                    result,
                    count,
                })
                .collect(),
        }
    }

    /// Call `describe` in a fresh instance with no grants.
    pub async fn describe(
        &self,
        plugin: &CompiledPlugin,
        backends: &Backends,
    ) -> anyhow::Result<PluginInfo> {
        let config = PluginConfig {
            name: "describe".into(),
            enabled: true,
            file: plugin.path.clone(),
            interval: None,
            watch: vec![],
            grants: Default::default(),
            limits: Default::default(),
            config_json: "{}".into(),
        };
        let call = CallInfo {
            plugin: config.name.clone(),
            dry_run: true,
            mutations: Mutations::default(),
        };
        let caps = Capabilities::for_call(backends, &config, &call);
        let (mut store, output) = self.new_store(plugin, caps, config.limits.memory.0);
        let _ticking = self.ticker.running();
        let run = async {
            let instance = plugin.pre.instantiate_async(&mut store).await?;
            instance
                .tend_plugin_reconciler()
                .call_describe(&mut store)
                .await
        };
        match tokio::time::timeout(config.limits.timeout, run).await {
            Err(_) => anyhow::bail!("describe did not return within {:?}", config.limits.timeout),
            Ok(Err(e)) => Err(anyhow::anyhow!(classify(e, &store, &output, &config))),
            Ok(Ok(info)) => Ok(PluginInfo {
                name: info.name,
                version: info.version,
                summary: info.summary,
            }),
        }
    }
}

fn from_wit_outcome(outcome: types::Outcome) -> Outcome {
    Outcome {
        health: match outcome.health {
            types::Health::Healthy => Health::Healthy,
            types::Health::Progressing => Health::Progressing,
            types::Health::Degraded => Health::Degraded,
        },
        message: outcome.message,
        requeue_after: outcome.requeue_after_ms.map(Duration::from_millis),
    }
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
            Failure::Trap(format!(
                "the plugin panicked: {}",
                panic.collect::<Vec<_>>().join(" ")
            ))
        }
        None => Failure::Trap(trap.to_string()),
    }
}

/// The guest's stdout/stderr into the host log, at debug level.
fn forward_output(plugin: &str, output: &MemoryOutputPipe) {
    let contents = output.contents();
    if !contents.is_empty() {
        tracing::debug!(plugin, output = %String::from_utf8_lossy(&contents), "plugin output");
    }
}
