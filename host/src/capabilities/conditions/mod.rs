//! `tend:plugin/conditions`: NodeConditions on the own Node, each owned by
//! the plugin whose grant names its type, with a lifecycle the host keeps
//! (written at once on a change, refreshed once a heartbeat, cleared when a
//! TTL passes, removed with its owner, kept across restarts) and an optional
//! taint tied to it.

mod adapter;
mod backend;
mod book;
mod fake;
mod grants;
mod real;
mod wit;
mod writer;

pub use adapter::PluginConditions;
pub use backend::NodeStatus;
pub use fake::FakeNode;
pub use grants::ConditionsGrant;
pub use writer::ConditionsHost;

use crate::capabilities::CapError;
use crate::capabilities::call::Call;
use crate::capabilities::capability::{BackendEnv, Capability, NoLimits};
use crate::capabilities::kube::{KubeSettings, RealKube};
use crate::capabilities::watch::Watch;
use crate::wit::conditions;
use std::sync::Arc;
use std::time::Duration;
use wasmtime::component::{HasSelf, Linker};

/// `[host.conditions]`.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct ConditionsSettings {
    /// How often an unchanged condition is written again (its
    /// `lastHeartbeatTime`): one write a node a heartbeat.
    #[serde(with = "crate::units::duration")]
    pub heartbeat: Duration,
    /// Not a `[host.conditions]` key: `[host.kube]`, filled in when the
    /// config is read (the Node is written with the kube client and bounds).
    #[serde(skip)]
    pub kube: KubeSettings,
}

impl Default for ConditionsSettings {
    fn default() -> Self {
        ConditionsSettings {
            heartbeat: Duration::from_secs(300),
            kube: KubeSettings::default(),
        }
    }
}

impl Capability for PluginConditions {
    const NAME: &'static str = "conditions";
    const MUTATIONS: &'static [&'static str] = tend_rules::conditions::MUTATIONS;
    type Grant = ConditionsGrant;
    type Settings = ConditionsSettings;
    type Limits = NoLimits;
    type Backend = ConditionsHost;
    type Fake = FakeNode;

    /// The host owns the granted conditions (their clean-up, taints, RBAC).
    fn host_uses(_: &ConditionsGrant) -> bool {
        true
    }

    fn describe_grant(grant: &ConditionsGrant) -> Vec<String> {
        grant
            .0
            .iter()
            .map(|g| match g.taint_on {
                Some(t) => format!(
                    "{}, tainting the Node {}:{} while True",
                    g.condition,
                    g.taint_key(),
                    t.effect.name()
                ),
                None => g.condition.clone(),
            })
            .collect()
    }

    fn real(
        settings: &ConditionsSettings,
        env: &BackendEnv,
    ) -> anyhow::Result<Arc<ConditionsHost>> {
        let node = real::RealNode {
            kube: RealKube::new(&settings.kube, env.node_name),
        };
        Ok(Arc::new(ConditionsHost::new(
            Arc::new(node),
            Some(env.state_dir.join("conditions.json")),
            settings.heartbeat,
        )))
    }

    fn fake() -> (Arc<ConditionsHost>, Arc<FakeNode>) {
        let node = Arc::new(FakeNode::default());
        let host = ConditionsHost::new(node.clone(), None, ConditionsSettings::default().heartbeat);
        (Arc::new(host), node)
    }

    fn for_call(
        backend: &Arc<ConditionsHost>,
        grant: &ConditionsGrant,
        _: &NoLimits,
        call: &Arc<Call>,
    ) -> Self {
        PluginConditions {
            host: backend.clone(),
            grant: grant.clone(),
            call: call.clone(),
        }
    }

    fn add_to_linker<T: Send + 'static>(
        linker: &mut Linker<T>,
        get: fn(&mut T) -> &mut Self,
    ) -> wasmtime::Result<()> {
        conditions::add_to_linker::<T, HasSelf<Self>>(linker, get)
    }

    fn watch(backend: &Arc<ConditionsHost>) -> Option<Box<dyn Watch<ConditionsGrant>>> {
        Some(Box::new(writer::ConditionsWatch::new(backend.clone())))
    }

    fn render_metrics(backend: &ConditionsHost, configured: &dyn Fn(&str) -> bool) -> String {
        backend.render(configured)
    }
}

/// The WIT's functions, each on the adapter method that does it.
impl wit::Functions for PluginConditions {
    async fn set(&self, report: conditions::Report) -> Result<(), CapError> {
        self.set(report).await
    }
    async fn clear(
        &self,
        condition: String,
        reason: String,
        message: String,
    ) -> Result<(), CapError> {
        self.clear(condition, reason, message).await
    }
    async fn list(&self) -> Result<Vec<conditions::Held>, CapError> {
        self.list().await
    }
}
