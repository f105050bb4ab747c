// What a plugin module exports, and the outcomes it returns: kept apart from
// the engine adapter so a plugin imports the same `@tend/sdk` in its
// component and in its Node tests.

/** A plugin: its identity (`describe`) and its reconcile, `reconcile(ctx, host)`. */
export function definePlugin({ name, version, summary, reconcile }) {
  for (const [key, value] of Object.entries({ name, version, summary }))
    if (typeof value !== "string" || value === "")
      throw new TypeError(`definePlugin: ${key} must be a non-empty string`);
  if (typeof reconcile !== "function") throw new TypeError("definePlugin: reconcile must be a function (ctx, host) => outcome");
  return Object.freeze({ info: Object.freeze({ name, version, summary }), reconcile });
}

const outcome = (health) => (message, { requeueAfterMs = null } = {}) => ({ health, message, requeueAfterMs });

/** Everything is as declared. */
export const healthy = outcome("healthy");
/** Work is under way or waiting on something. */
export const progressing = outcome("progressing");
/** Something is wrong that the plugin could not fix. */
export const degraded = outcome("degraded");
