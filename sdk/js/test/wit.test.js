// src/wit.js and src/wit.d.ts are what tools/gen-wit.mjs makes of wit/*.wit
// today, and the wrappers have every function of world `plugin`.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { importsModule, parseWit, witModule, witTypes } from "../tools/gen-wit.mjs";
import { FakeHost } from "../src/testing.js";
import { camel } from "../src/names.js";

const wit = parseWit();
const fresh = "stale: run `node tools/gen-wit.mjs` in sdk/js";

test("src/wit.js is generated from the WIT", () => {
  assert.equal(readFileSync(new URL("../src/wit.js", import.meta.url), "utf8"), witModule(wit), fresh);
});

test("src/wit.d.ts is generated from the WIT", () => {
  assert.equal(readFileSync(new URL("../src/wit.d.ts", import.meta.url), "utf8"), witTypes(wit), fresh);
});

test("src/imports.js is generated from the WIT", () => {
  const text = importsModule(wit);
  assert.equal(readFileSync(new URL("../src/imports.js", import.meta.url), "utf8"), text, fresh);
  assert.ok(text.includes('import cloud from "tend:plugin/cloud@0.1.0";\n'), text);
});

test("a list of unions is typed as one: send-all answers (Response | TendError)[]", () => {
  const types = witTypes(wit);
  assert.ok(types.includes("  sendAll(reqs: Request[]): (Response | TendError)[];\n"), "sendAll's type");
  assert.ok(types.includes("  headers: [string, string][];\n"), "tuples need no parentheses");
});

test("every imported WIT function has a wrapper", () => {
  const host = new FakeHost();
  let count = 0;
  for (const name of wit.world.imports) {
    for (const f of wit.interfaces[name].funcs) {
      assert.equal(typeof host[camel(name)][camel(f.name)], "function", `${name}.${f.name}`);
      count++;
    }
  }
  host.close();
  assert.ok(count >= 47, `${count} functions: the parser lost some`);
  assert.deepEqual(wit.world.exports, ["reconciler"]);
});
