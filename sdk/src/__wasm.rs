//! The glue between the generated bindings and the SDK's types, used by
//! [`crate::export_plugin!`] in the wasm build: describe, reconcile, error
//! conversion, and the [`Host`] handing out each capability's wasm glue (in
//! the capability's own module).

use crate::bindings::tend::plugin::types as wit;
use crate::{Context, Error, Health, Host, Level, Plugin, PluginInfo, Result, Trigger};

pub fn describe<P: Plugin>() -> wit::PluginInfo {
    let PluginInfo {
        name,
        version,
        summary,
    } = P::info();
    wit::PluginInfo {
        name,
        version,
        summary,
    }
}

pub fn reconcile<P: Plugin>(ctx: wit::Context) -> Result<wit::Outcome, wit::Error> {
    let ctx = Context {
        plugin: ctx.plugin,
        config: ctx.config,
        triggers: ctx
            .triggers
            .into_iter()
            .map(|t| Trigger {
                kind: t.kind,
                subject: t.subject,
            })
            .collect(),
        node_name: ctx.node_name,
        dry_run: ctx.dry_run,
    };
    match P::reconcile(&ctx, &WasmHost) {
        Ok(outcome) => Ok(wit::Outcome {
            health: match outcome.health {
                Health::Healthy => wit::Health::Healthy,
                Health::Progressing => wit::Health::Progressing,
                Health::Degraded => wit::Health::Degraded,
            },
            message: outcome.message,
            requeue_after_ms: outcome.requeue_after.map(|d| d.as_millis() as u64),
        }),
        Err(e) => Err(to_wit_error(e)),
    }
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
                crate::log::wasm_log(level, message);
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
