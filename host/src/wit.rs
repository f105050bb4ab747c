//! The `tend:plugin` world as Rust types and host traits: the host's one
//! `bindgen!`, at the bottom of the module graph. Capabilities implement the
//! import traits on their per-call adapters; the runtime calls the export.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "plugin",
    // Trappable: a replay that diverges from its recording stops the plugin
    // at that call (see `capabilities::tape`).
    imports: { default: async | trappable },
    exports: { default: async },
    // The backends speak these types directly; their fakes and tests compare
    // them; a recording (`tend reconcile --record`) holds them as JSON.
    additional_derives: [PartialEq, Eq, serde::Serialize, serde::Deserialize],
});

// Every interface of the world, by its name (`crate::wit::files`): a new
// capability needs no line here.
pub use self::tend::plugin::*;
