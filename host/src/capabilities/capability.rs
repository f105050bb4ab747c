//! What every capability is: a per-call adapter over a shared backend, with
//! its grant type, its `[host.<name>]` settings, a real backend and a fake, and
//! its WIT binding, and the hooks the host calls for it (trigger source,
//! `/metrics` families). The registration list (`registry.rs`) generates
//! everything that has one field or one entry per capability from this trait.

use super::call::Call;
use super::watch::Watch;
use serde::de::DeserializeOwned;
use std::path::Path;
use std::sync::Arc;
use wasmtime::component::Linker;

/// What a real backend may need from the host to start.
pub struct BackendEnv<'a> {
    pub state_dir: &'a Path,
    /// What `$NODE` in a kube grant stands for.
    pub node_name: &'a str,
}

pub trait Capability: Sized + Send + 'static {
    /// The WIT interface and config key: "files".
    const NAME: &'static str;
    /// Operations that change something: each passes the mutation gate and can
    /// be named by a budget as "<NAME>.<operation>".
    const MUTATIONS: &'static [&'static str];
    /// `[plugins.<name>.grants] <NAME>`: what a plugin may reach (deny by default).
    type Grant: DeserializeOwned + Clone + PartialEq + std::fmt::Debug + Default + Send + Sync;
    /// `[host.<NAME>]`: how the backend is reached.
    type Settings: DeserializeOwned + Clone + PartialEq + std::fmt::Debug + Default + Send + Sync;
    /// `[plugins.<name>.limits] <NAME>-<key>`: what one plugin may make this
    /// capability's backend spend (`kube-qps`), with safe defaults. Its serde
    /// names carry the prefix, so its own errors name the key as written.
    type Limits: DeserializeOwned + Copy + PartialEq + Eq + std::fmt::Debug + Default + Send + Sync;
    /// Shared by every plugin's calls.
    type Backend: ?Sized + Send + Sync + 'static;
    /// The in-memory backend for tests: records actions, injects failures.
    type Fake: Send + Sync + 'static;

    /// The grant in words, one line each, for `tend status NAME`.
    fn describe_grant(grant: &Self::Grant) -> Vec<String>;
    fn real(settings: &Self::Settings, env: &BackendEnv) -> anyhow::Result<Arc<Self::Backend>>;
    fn fake() -> (Arc<Self::Backend>, Arc<Self::Fake>);
    /// The adapter one reconcile uses: it enforces `grant` and `limits`, and
    /// sends every mutation through `call.gate`.
    fn for_call(
        backend: &Arc<Self::Backend>,
        grant: &Self::Grant,
        limits: &Self::Limits,
        call: &Arc<Call>,
    ) -> Self;
    /// Answer the WIT interface's imports with the adapter `get` finds in the store.
    fn add_to_linker<T: Send + 'static>(
        linker: &mut Linker<T>,
        get: fn(&mut T) -> &mut Self,
    ) -> wasmtime::Result<()>;

    /// Whether the host uses `grant` for the plugin whether or not the
    /// plugin calls the capability: triggers it watches (kube rules with
    /// `watch`, systemd's `watch`, logs' watch rules), what the host writes
    /// for it (conditions). `tend check` hints at no such grant as unused.
    fn host_uses(_grant: &Self::Grant) -> bool {
        false
    }

    /// Hook: the source of triggers this capability notices (systemd: unit
    /// state changes), started once by the scheduler; most have none.
    fn watch(_backend: &Arc<Self::Backend>) -> Option<Box<dyn Watch<Self::Grant>>> {
        None
    }

    /// Hook: this capability's own families on `/metrics` (its backend's
    /// counters, the series plugins recorded), of the plugins `configured`
    /// accepts; most have none.
    fn render_metrics(_backend: &Self::Backend, _configured: &dyn Fn(&str) -> bool) -> String {
        String::new()
    }
}

/// The grant of a capability every plugin always has (`log`, `state`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AlwaysGranted;

impl<'de> serde::Deserialize<'de> for AlwaysGranted {
    fn deserialize<D: serde::Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        Err(serde::de::Error::custom(
            "this capability is always granted to every plugin: remove this key",
        ))
    }
}

/// The settings of a capability that needs none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoSettings;

impl<'de> serde::Deserialize<'de> for NoSettings {
    fn deserialize<D: serde::Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        Err(serde::de::Error::custom(
            "this capability takes no [host] settings: remove this table",
        ))
    }
}

/// The limits of a capability that has none of its own: any
/// `<NAME>-<key>` limit is an unknown field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoLimits {}
