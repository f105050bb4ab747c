import type { Context, Host, Outcome, PluginInfo } from "./wit.js";
import type { Plugin } from "./index.js";

/** The capabilities of the component's host (the engine's imports). */
export const host: Host;

/** The `reconciler` export of a plugin; tend-js-build writes `export const reconciler = exportPlugin(plugin)`. */
export function exportPlugin(plugin: Plugin): { describe(): PluginInfo; reconcile(ctx: Context): Outcome };
