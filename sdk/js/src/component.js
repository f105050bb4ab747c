// The adapter between a plugin and the engine it runs on (QuickJS, built by
// componentize-qjs): the capabilities are the engine's imports of
// `tend:plugin/*@0.1.0`, and `exportPlugin` turns a plugin into the
// `reconciler` export. Only the component build imports this module (Node
// cannot resolve `tend:plugin/...`); tests use `@tend/sdk/testing` instead.

import { TendError, errorFromKind } from "./errors.js";
import { fromEngine } from "./codec.js";
import { makeHost } from "./host.js";
import { IMPORTED } from "./imports.js";
import { camel } from "./names.js";

/** A result's error arrives as an exception whose `payload` is the WIT error: `{ tag, val }`. */
function engineCall(cap, fn, args, sig) {
  try {
    return fromEngine(sig.ok, IMPORTED[cap][camel(fn)](...args));
  } catch (e) {
    const payload = e?.payload;
    if (payload && typeof payload.tag === "string") throw errorFromKind(payload.tag, payload.val);
    throw e;
  }
}

/** The capabilities of this component's host. */
export const host = makeHost(engineCall);

/**
 * The `reconciler` export of a plugin made with `definePlugin`:
 * `export const reconciler = exportPlugin(plugin)` (tend-js-build writes this).
 */
export function exportPlugin(plugin) {
  if (!plugin || typeof plugin.reconcile !== "function" || !plugin.info)
    throw new TypeError("exportPlugin: expected the value of definePlugin({ name, version, summary, reconcile })");
  return {
    describe: () => plugin.info,
    reconcile(ctx) {
      try {
        return plugin.reconcile(ctx, host);
      } catch (e) {
        // The engine turns a thrown `{ tag, val }` into the WIT error; any other
        // exception would trap, so it becomes `other` with what it said.
        if (e instanceof TendError) throw { tag: e.kind, val: e.message };
        throw { tag: "other", val: `${e?.name ?? "Error"}: ${e?.message ?? String(e)}` };
      }
    },
  };
}
