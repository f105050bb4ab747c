//! `tend:plugin/kube`: the Kubernetes API, confined to the plugin's RBAC-like
//! rules, reads served from a shared watch cache, every mutation through the
//! gate.

mod adapter;
mod backend;
mod cache;
mod discovery;
mod drain;
mod events;
mod fake;
mod grants;
mod real;
mod source;
mod wit;

pub use adapter::{KubeSettings, PluginKube};
pub use backend::{
    Change, EventType, KubeBackend, KubeLimits, ListParams, ObjectKey, ObjectList, PatchType,
    ResourceInfo,
};
pub use fake::FakeKube;
pub use grants::{KubeRule, OwnLease, Verb};
pub use real::{RealKube, connect, map_error, user_agent};
pub use source::KUBE_TRIGGER;

use crate::capabilities::call::Call;
use crate::capabilities::capability::{BackendEnv, Capability};
use crate::capabilities::watch::Watch;
use crate::wit::kube;
use source::KubeSource;
use std::sync::Arc;
use tend_rules::wit::kube::Function;
use wasmtime::component::{HasSelf, Linker};

impl Capability for PluginKube {
    const NAME: &'static str = "kube";
    const MUTATIONS: &'static [&'static str] = &[
        Function::Create.name(),
        Function::Patch.name(),
        Function::Delete.name(),
        Function::EmitEvent.name(),
        Function::Cordon.name(),
        Function::Evict.name(),
    ];
    type Grant = Vec<KubeRule>;
    type Settings = KubeSettings;
    type Limits = KubeLimits;
    type Backend = dyn KubeBackend;
    type Fake = FakeKube;

    /// A rule with `watch` reconciles the plugin on changes.
    fn host_uses(rules: &Vec<KubeRule>) -> bool {
        rules.iter().any(|r| r.verbs.contains(&Verb::Watch))
    }

    fn describe_grant(rules: &Vec<KubeRule>) -> Vec<String> {
        rules
            .iter()
            .map(|r| {
                let verbs: Vec<&str> = r.verbs.iter().map(|v| v.name()).collect();
                let group = if r.group.is_empty() {
                    String::new()
                } else {
                    format!(".{}", r.group)
                };
                let namespaces = r
                    .namespaces
                    .as_ref()
                    .map(|n| format!(" in {}", n.join(", ")))
                    .unwrap_or_default();
                let names = r
                    .names
                    .as_ref()
                    .map(|n| format!(" named {}", n.join(", ")))
                    .unwrap_or_default();
                format!(
                    "{}{group}{namespaces}{names}: {}",
                    r.resource,
                    verbs.join(", ")
                )
            })
            .collect()
    }

    fn real(settings: &KubeSettings, env: &BackendEnv) -> anyhow::Result<Arc<dyn KubeBackend>> {
        Ok(Arc::new(RealKube::new(settings, env.node_name)))
    }

    fn fake() -> (Arc<dyn KubeBackend>, Arc<FakeKube>) {
        let fake = Arc::new(FakeKube::default());
        (fake.clone(), fake)
    }

    fn for_call(
        backend: &Arc<dyn KubeBackend>,
        rules: &Vec<KubeRule>,
        limits: &KubeLimits,
        call: &Arc<Call>,
    ) -> Self {
        PluginKube {
            // Charged to this plugin: its request bucket, caches and Events.
            backend: backend.clone().for_plugin(call, *limits),
            rules: rules.clone(),
            call: call.clone(),
        }
    }

    fn add_to_linker<T: Send + 'static>(
        linker: &mut Linker<T>,
        get: fn(&mut T) -> &mut Self,
    ) -> wasmtime::Result<()> {
        kube::add_to_linker::<T, HasSelf<Self>>(linker, get)
    }

    fn watch(backend: &Arc<dyn KubeBackend>) -> Option<Box<dyn Watch<Vec<KubeRule>>>> {
        Some(Box::new(KubeSource::new(backend.clone())))
    }

    fn render_metrics(backend: &dyn KubeBackend, _: &dyn Fn(&str) -> bool) -> String {
        // The backend's own series, of no plugin: nothing to filter.
        backend::render_metrics(backend)
    }
}

use crate::capabilities::CapError;

/// The WIT's functions, each on the adapter method that does it.
impl wit::Functions for PluginKube {
    async fn get(&self, key: ObjectKey) -> Result<String, CapError> {
        self.get(&key).await
    }
    async fn list(
        &self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        params: ListParams,
    ) -> Result<crate::wit::kube::ObjectList, CapError> {
        let list = self
            .list(&api_version, &kind, namespace.as_deref(), &params)
            .await?;
        Ok(crate::wit::kube::ObjectList {
            // The WIT's list<string> owns its strings: one copy, no serializing.
            items: list
                .items
                .iter()
                .map(|text| String::from(&**text))
                .collect(),
            continue_token: list.continue_token,
            resource_version: list.resource_version,
        })
    }
    async fn create(
        &self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        object: String,
    ) -> Result<String, CapError> {
        self.create(&api_version, &kind, namespace.as_deref(), &object)
            .await
    }
    async fn patch(
        &self,
        key: ObjectKey,
        patch_type: PatchType,
        patch: String,
    ) -> Result<String, CapError> {
        self.patch(&key, patch_type, &patch).await
    }
    async fn delete(&self, key: ObjectKey) -> Result<(), CapError> {
        self.delete(&key).await
    }
    async fn emit_event(
        &self,
        regarding: ObjectKey,
        event_type: EventType,
        reason: String,
        message: String,
    ) -> Result<(), CapError> {
        self.emit_event(&regarding, event_type, &reason, &message)
            .await
    }
    async fn cordon(&self, unschedulable: bool) -> Result<(), CapError> {
        PluginKube::cordon(self, unschedulable).await
    }
    async fn evict(&self, namespace: String, name: String) -> Result<(), CapError> {
        PluginKube::evict(self, &namespace, &name).await
    }
    async fn drain(
        &self,
        options: crate::wit::kube::DrainOptions,
    ) -> Result<crate::wit::kube::DrainReport, CapError> {
        PluginKube::drain(self, options).await
    }
}
