//! Write Tend plugins in Rust.
//!
//! A plugin is a type implementing [`Plugin`]; [`export_plugin!`] turns it into the
//! `tend:plugin/plugin` WebAssembly component when built for `wasm32-wasip2`.
//! Plugin logic talks to the node only through the [`Host`] it is handed, so the
//! same code runs natively against the in-memory fakes of [`testing`] in plain
//! `cargo test`, without a wasm runtime. The fakes decide grants with the
//! host's own rules ([`tend_grants`]): what the host would deny, they deny.
//!
//! ```ignore
//! struct Hello;
//! impl tend_sdk::Plugin for Hello {
//!     fn info() -> tend_sdk::PluginInfo { tend_sdk::PluginInfo::new("hello", "0.1.0", "says hello") }
//!     fn reconcile(ctx: &tend_sdk::Context, host: &dyn tend_sdk::Host) -> tend_sdk::Result<tend_sdk::Outcome> {
//!         host.log(tend_sdk::Level::Info, &format!("hello from {}", ctx.node_name));
//!         Ok(tend_sdk::Outcome::healthy("said hello"))
//!     }
//! }
//! tend_sdk::export_plugin!(Hello);
//! ```

#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub mod __wasm;
mod clock;
mod cri;
mod files;
mod host;
mod http;
mod kube;
mod log;
mod metrics;
mod state;
mod systemd;
pub mod testing;
mod types;

pub use clock::{human_duration, wall_clock_ms};
pub use cri::{
    Container, ContainerState, Cri, Image, PodSandbox, RuntimeVersion, SandboxFilter, SandboxState,
    SandboxStatus,
};
pub use files::{DirEntry, FileKind, Files, Metadata};
pub use host::{Host, NotProvided};
pub use http::{Http, Request, Response};
pub use kube::{EventType, Kube, ListParams, ObjectKey, ObjectList, PatchType};
pub use log::Level;
pub use metrics::Metrics;
pub use state::State;
pub use systemd::{JobResult, Systemd, UnitStatus};
pub use types::{Context, Error, Health, Outcome, PluginInfo, Result, Trigger};

/// The generated bindings of the `tend:plugin` world. Plugin authors do not need
/// them: use [`Plugin`], [`Host`] and [`export_plugin!`].
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "plugin",
        pub_export_macro: true,
        export_macro_name: "export_world",
        default_bindings_module: "tend_sdk::bindings",
    });
}

/// One reconcile step. Implement it, then `tend_sdk::export_plugin!(YourType);`.
pub trait Plugin {
    /// Name, version and summary: shown by `tend plugins inspect` and `tend status`.
    fn info() -> PluginInfo;
    /// Bring what the plugin manages towards its declared state, once.
    fn reconcile(ctx: &Context, host: &dyn Host) -> Result<Outcome>;
}

/// Export a [`Plugin`] as the component's `reconciler`.
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct TendExport;
            impl $crate::bindings::exports::tend::plugin::reconciler::Guest for TendExport {
                fn describe() -> $crate::bindings::tend::plugin::types::PluginInfo {
                    $crate::__wasm::describe::<$plugin>()
                }
                fn reconcile(
                    ctx: $crate::bindings::tend::plugin::types::Context,
                ) -> ::core::result::Result<
                    $crate::bindings::tend::plugin::types::Outcome,
                    $crate::bindings::tend::plugin::types::Error,
                > {
                    $crate::__wasm::reconcile::<$plugin>(ctx)
                }
            }
    $crate::bindings::export_world!(TendExport with_types_in $crate::bindings);
        };
    };
}
