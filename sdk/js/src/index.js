// @tend/sdk: write Tend plugins in JavaScript. A plugin module default-exports
// `definePlugin({ name, version, summary, reconcile(ctx, host) })`; `host`
// holds the typed wrappers over every capability (src/wit.d.ts), which throw
// a `TendError` subclass per WIT error case. `tend-js-build` bundles it with
// the engine adapter (./component.js) into a component; `@tend/sdk/testing`
// runs it in Node against the Rust SDK's fakes.

export {
  TendError,
  DeniedError,
  NotFoundError,
  ConflictError,
  UnavailableError,
  TimeoutError,
  InvalidError,
  BudgetExhaustedError,
  OtherError,
  errorFromKind,
} from "./errors.js";
export { definePlugin, healthy, progressing, degraded } from "./plugin.js";
export { encodeUtf8, decodeUtf8 } from "./utf8.js";
export * as config from "./config.js";
