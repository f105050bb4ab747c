//! The glue between the generated bindings and the SDK, used by
//! [`crate::export_plugin!`] in the wasm build: reconcile, and the [`Host`]
//! handing out each capability's wasm glue (in the capability's own module).

use crate::bindings::tend::plugin::types as wit;
use crate::types::to_wit_error;
use crate::{Host, Level, Plugin, Result};

pub fn reconcile<P: Plugin>(ctx: wit::Context) -> Result<wit::Outcome, wit::Error> {
    P::reconcile(&ctx, &WasmHost).map_err(to_wit_error)
}

/// [`WasmHost`]'s accessors: each listed capability's wasm glue.
macro_rules! wasm_host {
    ($(
        $(#[$doc:meta])*
        $name:ident: $trait:ident, $wasm:ident, $fake:ident, [$($ty:ident),*], [$($test:ident),*];
    )*) => {
        impl Host for WasmHost {
            fn log(&self, level: Level, message: &str) {
                crate::bindings::tend::plugin::log::log(level, message);
            }
            $(
                fn $name(&self) -> &dyn crate::$trait {
                    &crate::$name::wasm::$wasm
                }
            )*
        }
    };
}

/// The real host, reached through the component's imports.
struct WasmHost;

capability_list!(wasm_host);
