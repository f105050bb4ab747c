//! The glue between the generated bindings and the SDK, used by
//! [`crate::export_plugin!`] in the wasm build: reconcile, and the [`Host`]
//! handing out each capability's wasm glue (in the capability's own module).
//!
//! A plugin declaring what it uses (`export_plugin!(P, uses: [http, state])`)
//! gets a host whose other accessors are [`NotProvided`]: their glue is never
//! referenced, so the linker leaves their imports out of the component. Its
//! imports then say what it can call (`tend plugins inspect`), and each
//! instantiation wires only those (a third of a trivial reconcile was wasmtime
//! wiring imports, docs/benchmarks.md).

use crate::__uses::Capability;
use crate::bindings::tend::plugin::types as wit;
use crate::types::to_wit_error;
use crate::{Host, Level, NotProvided, Plugin, Result};

pub fn reconcile<P: Plugin, const USES: u32>(
    ctx: wit::Context,
) -> Result<wit::Outcome, wit::Error> {
    P::reconcile(&ctx, &WasmHost::<USES>).map_err(to_wit_error)
}

/// [`WasmHost`]'s accessors: each declared capability's wasm glue.
macro_rules! wasm_host {
    ($(
        $(#[$doc:meta])*
        $name:ident: $trait:ident, $wasm:ident, $fake:ident, [$($ty:ident),*], [$($test:ident),*];
    )*) => {
        impl<const USES: u32> Host for WasmHost<USES> {
            fn log(&self, level: Level, message: &str) {
                crate::bindings::tend::plugin::log::log(level, message);
            }
            $(
                fn $name(&self) -> &dyn crate::$trait {
                    // A constant: the branch not taken, and its glue, is compiled out.
                    match USES & (1 << Capability::$name as u32) {
                        0 => &NotProvided,
                        _ => &crate::$name::wasm::$wasm,
                    }
                }
            )*
        }
    };
}

/// The real host, reached through the component's imports: the capabilities
/// whose bits `USES` holds.
struct WasmHost<const USES: u32>;

capability_list!(wasm_host);
