// WIT values in JavaScript: parses the type strings of src/wit.js and checks
// what a plugin passes against them, so a wrong argument fails with a
// TypeError naming it instead of a trap inside the engine. A plugin's values
// are the engine's own: records with camelCase keys, enums as strings,
// variants as `{ tag, val }`, options as `null`, `list<u8>` as Uint8Array.

import { TYPES } from "./wit.js";
import { TendError, errorFromKind } from "./errors.js";
import { encodeUtf8 } from "./utf8.js";
import { camel, splitArgs } from "./names.js";

const parsed = new Map();

/** The tree of a type string: {prim}, {list}, {option}, {result: [ok, err]}, {tuple}, or {named, def}. */
export function parseType(text) {
  let tree = parsed.get(text);
  if (tree) return tree;
  const m = /^(list|option|result|tuple)<(.*)>$/.exec(text);
  if (!m) {
    const def = TYPES[text];
    tree = def ? { named: text, def } : { prim: text };
  } else {
    const args = splitArgs(m[2]).map((a) => (a === "_" ? null : parseType(a)));
    tree = { [m[1]]: m[1] === "list" || m[1] === "option" ? args[0] : args };
  }
  parsed.set(text, tree);
  return tree;
}

const PRIM = { bool: "boolean", string: "string" };

function wrong(path, what, value) {
  const shown = value === undefined ? "nothing" : typeof value === "string" ? JSON.stringify(value) : typeof value;
  return new TypeError(`${path}: expected ${what}, got ${shown}`);
}

/**
 * A plugin's argument checked against its WIT type, with omitted options
 * as null and strings for `list<u8>` as their UTF-8 bytes.
 */
export function prepare(type, value, path) {
  if (type.prim) {
    const want = PRIM[type.prim] ?? "number";
    if (typeof value !== want) throw wrong(path, want === "number" ? `a number (${type.prim})` : `a ${want}`, value);
    return value;
  }
  if (type.option) return value === undefined || value === null ? null : prepare(type.option, value, path);
  if (type.list) {
    if (type.list.prim === "u8") {
      if (typeof value === "string") return encodeUtf8(value);
      if (value instanceof Uint8Array) return value;
      throw wrong(path, "a Uint8Array or a string", value);
    }
    if (!Array.isArray(value)) throw wrong(path, "an array", value);
    return value.map((v, i) => prepare(type.list, v, `${path}[${i}]`));
  }
  if (type.tuple) {
    if (!Array.isArray(value) || value.length !== type.tuple.length)
      throw wrong(path, `an array of ${type.tuple.length}`, value);
    return type.tuple.map((t, i) => prepare(t, value[i], `${path}[${i}]`));
  }
  if (type.result) return value instanceof TendError ? value : prepare(type.result[0], value, path);
  const { def, named } = type;
  if (named === "types.error") {
    if (!(value instanceof TendError)) throw wrong(path, "a TendError (DeniedError, NotFoundError, ...)", value);
    return value;
  }
  if (def.enum) {
    if (!def.enum.includes(value)) throw wrong(path, `one of ${def.enum.map((c) => JSON.stringify(c)).join(", ")}`, value);
    return value;
  }
  if (typeof value !== "object" || value === null) throw wrong(path, `a ${named} object`, value);
  if (def.variant) {
    const tag = value.tag;
    if (!(tag in def.variant)) throw wrong(`${path}.tag`, `one of ${Object.keys(def.variant).join(", ")}`, tag);
    const payload = def.variant[tag];
    return payload ? { tag, val: prepare(parseType(payload), value.val, `${path}.val`) } : { tag };
  }
  const out = {};
  for (const [field, t] of Object.entries(def.record)) {
    const key = camel(field);
    out[key] = prepare(parseType(t), value[key], `${path}.${key}`);
  }
  return out;
}

/** Whether values of the type may hold a nested `result` (only `http.send-all`'s do). */
function holdsResult(type) {
  if (type.result) return true;
  if (type.list || type.option) return holdsResult(type.list ?? type.option);
  return false;
}

/**
 * A value the engine returned, with each nested result (`{ tag: "ok" | "err", val }`)
 * as its answer or its `TendError`.
 */
export function fromEngine(type, value) {
  if (!type || !holdsResult(type)) return value;
  if (type.option) return value === null || value === undefined ? null : fromEngine(type.option, value);
  if (type.list) return value.map((v) => fromEngine(type.list, v));
  return value.tag === "ok" ? fromEngine(type.result[0], value.val) : errorFromKind(value.val.tag, value.val.val);
}
