//! Write Tend plugins in Rust.
//!
//! A plugin is a type implementing [`Plugin`]; [`export_plugin!`] turns it into the
//! `tend:plugin/plugin` WebAssembly component when built for `wasm32-wasip2`.
//! Plugin logic talks to the node only through the [`Host`] it is handed, so the
//! same code runs natively against the in-memory fakes of [`testing`] in plain
//! `cargo test`, without a wasm runtime. The fakes decide grants with the
//! host's own rules ([`tend_rules`]): what the host would deny, they deny.
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
//! tend_sdk::export_plugin!(Hello, uses: []);
//! ```

/// The registration list: one entry per capability reached through a [`Host`]
/// accessor (`log` is a method of [`Host`], outside the list), so adding one is
/// its module plus an entry here. An entry is the accessor's doc, then the
/// module's name and what it holds: the trait (also implemented for
/// [`NotProvided`]), its wasm glue `wasm::$wasm`, its fake (implementing
/// `fake::Fake`), the types re-exported at the crate root and the extra
/// names re-exported from [`testing`]. Generated from it: the modules and
/// re-exports (below), the [`Host`] accessors with their [`NotProvided`]
/// defaults (`host.rs`), the [`testing::FakeHost`] fields and accessors
/// (`testing.rs`) and the wasm host's accessors (`__wasm.rs`). Each of those
/// is a `$callback` matching `$( $(#[doc])* name: Trait, Wasm, Fake, [types],
/// [testing]; )*`.
macro_rules! capability_list {
    ($callback:ident) => {
        capability_list! { @entries $callback
            /// The plugin's own persistent key-value store.
            state: State { wasm: WasmState, fake: FakeState },
            /// Files inside the granted roots.
            files: Files {
                wasm: WasmFiles,
                fake: FakeFiles,
                types: [DirEntry, FileKind, Metadata],
            },
            /// Outbound HTTP to the granted URL patterns.
            http: Http { wasm: WasmHttp, fake: FakeHttp, types: [Request, Response] },
            /// systemd units within the granted patterns and operations.
            systemd: Systemd {
                wasm: WasmSystemd,
                fake: FakeSystemd,
                types: [JobResult, UnitStatus],
            },
            /// The container runtime over CRI, within the granted reads, operations and images.
            cri: Cri {
                wasm: WasmCri,
                fake: FakeCri,
                types: [
                    Container, ContainerState, Image, PodSandbox, RuntimeVersion, SandboxFilter,
                    SandboxState, SandboxStatus,
                ],
            },
            /// Counters and gauges for the host's `/metrics` (always granted).
            metrics: Metrics { wasm: WasmMetrics, fake: FakeMetrics },
            /// The Kubernetes API, within the granted RBAC-like rules.
            kube: Kube {
                wasm: WasmKube,
                fake: FakeKube,
                types: [
                    DrainOptions, DrainReport, EventType, ListParams, ObjectKey, ObjectList,
                    PatchType, TextList, REPLACE_ANNOTATION,
                ],
                testing: [IntoKubeRules, RecordedEvent, RecordedPatch, merge_patch],
            },
            /// The cloud provider's instances and security groups, within the
            /// granted operations, ownership tags and group IDs.
            cloud: Cloud {
                wasm: WasmCloud,
                fake: FakeCloud,
                types: [
                    Direction, EtherType, Instance, InstanceState, OwnerTag, PortRange, Protocol,
                    Remote, Rule, SecurityGroup,
                ],
            },
            /// The node's kernel log and journal, within the granted sources,
            /// and the matches of the grant's watch rules.
            logs: Logs {
                wasm: WasmLogs,
                fake: FakeLogs,
                types: [LogEntry, LogFilter, LogPage, LogSource, Matched],
            },
            /// NodeConditions on the own Node, of the condition types granted.
            conditions: Conditions {
                wasm: WasmConditions,
                fake: FakeConditions,
                types: [ConditionReport, HeldCondition],
                testing: [FAKE_CLOCK_START],
            },
        }
    };
    // Fills in the optional parts, so each callback matches one plain shape.
    (@entries $callback:ident $(
        $(#[$doc:meta])*
        $name:ident: $trait:ident {
            wasm: $wasm:ident,
            fake: $fake:ident
            $(, types: [$($ty:ident),* $(,)?])?
            $(, testing: [$($test:ident),* $(,)?])?
            $(,)?
        },
    )*) => {
        $callback! { $(
            $(#[$doc])*
            $name: $trait, $wasm, $fake, [$($($ty),*)?], [$($($test),*)?];
        )* }
    };
}

/// Each capability's module, its trait and types at the crate root.
macro_rules! capability_modules {
    ($(
        $(#[$doc:meta])*
        $name:ident: $trait:ident, $wasm:ident, $fake:ident, [$($ty:ident),*], [$($test:ident),*];
    )*) => {
        $(
            mod $name;
            pub use $name::{$trait $(, $ty)*};
        )*
    };
}
capability_list!(capability_modules);

#[doc(hidden)]
pub mod __uses;
#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub mod __wasm;
mod clock;
mod fake;
mod host;
mod log;
mod not_provided;
pub mod testing;
mod types;

pub use clock::{human_duration, wall_clock_ms};
pub use host::Host;
pub use log::Level;
pub use not_provided::NotProvided;
/// The named reason a refusal (and a built-in plugin's held-back outcome)
/// begins with: `[window]`, `[pdb:<ns>/<name>]`, ... ([`Error::reason`]).
pub use tend_rules::reason::Reason;
pub use types::{Context, Error, Health, Outcome, PluginInfo, Result, Trigger};

/// The generated bindings of the `tend:plugin` world, on every target: their
/// records and enums are the SDK's public types (re-exported at the crate
/// root, so each WIT record is written once), while only the wasm glue calls
/// their imports. Plugin authors do not need the module itself: use
/// [`Plugin`], [`Host`] and [`export_plugin!`].
///
/// wit-bindgen's output, committed (sdk/c/bindgen, `tend-bindgen rust`): a
/// plugin's build then compiles no bindings generator, and `cargo xtask lang
/// rust` fails while it differs from what wit/ generates (`TEND_BLESS=1`
/// writes it anew).
#[doc(hidden)]
#[path = "generated/plugin.rs"]
pub mod bindings;

/// One reconcile step. Implement it, then `tend_sdk::export_plugin!(YourType,
/// uses: [...]);`.
pub trait Plugin {
    /// Name, version and summary: shown by `tend plugins inspect` and `tend status`.
    fn info() -> PluginInfo;
    /// Bring what the plugin manages towards its declared state, once.
    fn reconcile(ctx: &Context, host: &dyn Host) -> Result<Outcome>;
}

/// Export a [`Plugin`] as the component's `reconciler`.
///
/// `export_plugin!(YourType, uses: [http, state])` declares the capabilities
/// the plugin calls (the [`Host`] accessors' names; `log` is always there):
/// the component imports only those, which `tend plugins inspect` lists for
/// the operator, and each instantiation wires only those. A call to another
/// returns [`Error::Denied`] naming the list to add it to. `export_plugin!(YourType)`
/// declares every capability.
#[macro_export]
macro_rules! export_plugin {
    (@export $plugin:ty, $uses:expr) => {
        // On every target: a misspelt capability fails `cargo test` too.
        const _: u32 = $uses;
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct TendExport;
            impl $crate::bindings::exports::tend::plugin::reconciler::Guest for TendExport {
                fn describe() -> $crate::bindings::tend::plugin::types::PluginInfo {
                    <$plugin as $crate::Plugin>::info()
                }
                fn reconcile(
                    ctx: $crate::bindings::tend::plugin::types::Context,
                ) -> ::core::result::Result<
                    $crate::bindings::tend::plugin::types::Outcome,
                    $crate::bindings::tend::plugin::types::Error,
                > {
                    $crate::__wasm::reconcile::<$plugin, { $uses }>(ctx)
                }
            }
            $crate::bindings::export_world!(TendExport with_types_in $crate::bindings);
        };
    };
    ($plugin:ty) => {
        $crate::export_plugin!(@export $plugin, $crate::__uses::ALL);
    };
    ($plugin:ty, uses: [$($capability:ident),* $(,)?]) => {
        $crate::export_plugin!(
            @export $plugin,
            $crate::__uses::uses(&[$($crate::__uses::Capability::$capability),*])
        );
    };
}
