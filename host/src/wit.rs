//! The `tend:plugin` world as Rust types and host traits: the host's one
//! `bindgen!`, at the bottom of the module graph. Capabilities implement the
//! import traits on their per-call adapters; the runtime calls the export.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "plugin",
    imports: { default: async },
    exports: { default: async },
    // The backends speak these types directly; their fakes and tests compare them.
    additional_derives: [PartialEq, Eq],
});

pub use self::tend::plugin::{cloud, cri, files, http, kube, log, metrics, state, systemd, types};
