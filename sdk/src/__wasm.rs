//! The glue between the generated bindings and the SDK, used by
//! [`crate::export_plugin!`] in the wasm build: reconcile, error conversion,
//! and the [`Host`] handing out each capability's wasm glue (in the
//! capability's own module).

use crate::bindings::tend::plugin::types as wit;
use crate::{Error, Host, Level, Plugin, Result};

pub fn reconcile<P: Plugin>(ctx: wit::Context) -> Result<wit::Outcome, wit::Error> {
    P::reconcile(&ctx, &WasmHost).map_err(to_wit_error)
}

fn to_wit_error(e: Error) -> wit::Error {
    match e {
        Error::Denied(m) => wit::Error::Denied(m),
        Error::NotFound(m) => wit::Error::NotFound(m),
        Error::Conflict(m) => wit::Error::Conflict(m),
        Error::Unavailable(m) => wit::Error::Unavailable(m),
        Error::Timeout(m) => wit::Error::Timeout(m),
        Error::Invalid(m) => wit::Error::Invalid(m),
        Error::BudgetExhausted(m) => wit::Error::BudgetExhausted(m),
        Error::Other(m) => wit::Error::Other(m),
    }
}

pub(crate) fn from_wit_error(e: wit::Error) -> Error {
    match e {
        wit::Error::Denied(m) => Error::Denied(m),
        wit::Error::NotFound(m) => Error::NotFound(m),
        wit::Error::Conflict(m) => Error::Conflict(m),
        wit::Error::Unavailable(m) => Error::Unavailable(m),
        wit::Error::Timeout(m) => Error::Timeout(m),
        wit::Error::Invalid(m) => Error::Invalid(m),
        wit::Error::BudgetExhausted(m) => Error::BudgetExhausted(m),
        wit::Error::Other(m) => Error::Other(m),
    }
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
