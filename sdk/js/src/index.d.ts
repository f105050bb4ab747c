import type { Context, Host, Outcome, PluginInfo } from "./wit.js";

export * from "./wit.js";
export * from "./errors.js";
export * as config from "./config.js";

/** A plugin made with `definePlugin`: the default export of a plugin module. */
export interface Plugin {
  readonly info: PluginInfo;
  /** One reconcile; throw a `TendError` (or let a capability's through) to fail it. */
  reconcile(ctx: Context, host: Host): Outcome;
}

export function definePlugin(plugin: PluginInfo & { reconcile(ctx: Context, host: Host): Outcome }): Plugin;

export interface OutcomeOptions {
  /** Run again after this many milliseconds (in addition to other triggers). */
  requeueAfterMs?: number | null;
}
/** Everything is as declared. */
export function healthy(message: string, options?: OutcomeOptions): Outcome;
/** Work is under way or waiting on something. */
export function progressing(message: string, options?: OutcomeOptions): Outcome;
/** Something is wrong that the plugin could not fix. */
export function degraded(message: string, options?: OutcomeOptions): Outcome;

/** UTF-8 bytes of a string (the engine has no TextEncoder). */
export function encodeUtf8(text: string): Uint8Array;
/** The text of UTF-8 bytes, U+FFFD for invalid sequences. */
export function decodeUtf8(bytes: Uint8Array): string;
