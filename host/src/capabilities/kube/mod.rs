//! `tend:plugin/kube`: the Kubernetes API, confined to the plugin's RBAC-like
//! rules, reads served from a shared watch cache, every mutation through the
//! gate.

mod adapter;
mod backend;
mod cache;
mod discovery;
mod events;
mod fake;
mod grants;
mod rate;
mod real;
mod wit;

pub use adapter::{KubeSettings, ObjectKey, PluginKube};
pub use backend::{Change, KubeBackend, ListQuery, ObjectList, PatchKind, ResourceInfo, render_metrics};
pub use fake::FakeKube;
pub use grants::{KubeRule, OwnLease, Verb};
pub use real::{RealKube, connect, map_error, user_agent};
