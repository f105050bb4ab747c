//! `tend:plugin/cri`: the node's container runtime over CRI v1, confined to
//! the plugin's grant (reads, each mutating operation, pullable images), every
//! mutation through the gate.

mod adapter;
mod backend;
mod fake;
mod grants;
mod real;
mod wit;

pub use adapter::{CriSettings, PluginCri};
pub use backend::{
    Container, ContainerState, CriBackend, Image, PodSandbox, RuntimeVersion, SandboxFilter,
    SandboxState, SandboxStatus,
};
pub use fake::FakeCri;
pub use grants::{CriGrant, Operation};
pub use real::RealCri;
