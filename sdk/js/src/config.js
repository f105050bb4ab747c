// Typed plugin config: the operator's `[plugins.NAME.config]` table (the JSON
// in `ctx.config`) read against a spec, with errors an operator can act on:
//
//   [plugins.node-probe.config] url: expected a string, for example "http://127.0.0.1:10248/healthz"
//
// Spec keys are camelCase; the config's keys are their kebab case
// (`expectStatus` reads `expect-status`). An unknown key is refused, as the
// Python SDK's `config.parse` refuses it, so a misspelt key never silently
// reads as its default:
//
//   [plugins.node-probe.config] urls: unknown key; expected one of url, expect-status

import { InvalidError } from "./errors.js";
import { kebab } from "./names.js";

const REQUIRED = Symbol("required");

function field(what, fits, options = {}) {
  return { what, fits, example: options.example, default: "default" in options ? options.default : REQUIRED };
}

/** A string. Options: `example` (shown in the error), `default` (makes it optional). */
export const string = (options) => field("a string", (v) => typeof v === "string", options);
/** An integer (a whole JSON number). */
export const integer = (options) => field("an integer", (v) => Number.isInteger(v), options);
/** A number. */
export const number = (options) => field("a number", (v) => typeof v === "number", options);
/** `true` or `false`. */
export const boolean = (options) => field("true or false", (v) => typeof v === "boolean", options);
/** A list of `item`s. */
export const list = (item, options) => ({ ...field("a list", Array.isArray, options), item });
/** A table with these fields (an inline table or `[...]` section in TOML). */
export const table = (fields, options) => ({
  ...field("a table", (v) => typeof v === "object" && v !== null && !Array.isArray(v), options),
  fields,
});

class Reader {
  constructor(plugin) {
    this.plugin = plugin;
  }
  error(path, why) {
    return new InvalidError(`[plugins.${this.plugin}.config] ${path}: ${why}`);
  }
  read(spec, value, path) {
    if (value === undefined || value === null) {
      if (spec.default !== REQUIRED) return spec.default;
    } else if (spec.fits(value)) {
      if (spec.item) return value.map((v, i) => this.read(spec.item, v, `${path}[${i}]`));
      return spec.fields ? this.table(spec.fields, value, `${path}.`) : value;
    }
    const example = spec.example === undefined ? "" : `, for example ${JSON.stringify(spec.example)}`;
    throw this.error(path, `expected ${spec.what}${example}`);
  }
  table(fields, value, prefix) {
    const known = Object.keys(fields).map(kebab);
    for (const key of Object.keys(value)) {
      if (!known.includes(key)) throw this.error(prefix + key, `unknown key; expected one of ${known.join(", ")}`);
    }
    const out = {};
    for (const [key, spec] of Object.entries(fields)) out[key] = this.read(spec, value[kebab(key)], prefix + kebab(key));
    return out;
  }
}

/**
 * `ctx.config` read against `fields` (`{ url: string({ example: "http://..." }) }`),
 * or an `InvalidError` naming the key, what it expects and an example.
 */
export function read(ctx, fields) {
  const reader = new Reader(ctx.plugin);
  let json;
  try {
    json = JSON.parse(ctx.config);
  } catch (e) {
    throw reader.error(".", `not JSON: ${e.message}`);
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) throw reader.error(".", "expected a table");
  return reader.table(fields, json, "");
}
