import assert from "node:assert/strict";
import { test } from "node:test";
import * as sdk from "../src/index.js";
import { parseWit } from "../tools/gen-wit.mjs";

const kinds = parseWit().interfaces.types.types.find((t) => t.name === "error").items.map((i) => i.name);

test("one TendError subclass per WIT error case", () => {
  assert.equal(kinds.length, 8);
  for (const kind of kinds) {
    const e = sdk.errorFromKind(kind, "what to do");
    const name = kind.replace(/(^|-)([a-z])/g, (_, __, c) => c.toUpperCase()) + "Error";
    assert.ok(e instanceof sdk[name], name);
    assert.ok(e instanceof sdk.TendError && e instanceof Error);
    assert.equal(e.kind, kind);
    assert.equal(e.name, name);
    assert.equal(e.message, "what to do");
    assert.equal(String(e), `${name}: what to do`);
  }
});

test("an unknown kind is a bug, not an error case", () => {
  assert.throws(() => sdk.errorFromKind("nope", "x"), /no WIT error case "nope"; expected one of denied, not-found/);
});
