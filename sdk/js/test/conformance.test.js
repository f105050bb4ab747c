// Every case of sdk/conformance.json (the host's grant table, exported by
// tend-rules) through the typed JS wrappers and FakeHost: the same decisions,
// error kinds and exact messages as the host. The table's arguments are in
// the fakes' ABI shape; they are turned into the plugin's shapes first, so
// both directions of the codec are exercised.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { TendError } from "../src/index.js";
import { FakeHost, fromAbi } from "../src/testing.js";
import { IMPORTS } from "../src/wit.js";
import { parseType } from "../src/codec.js";
import { camel } from "../src/names.js";

const TABLE = JSON.parse(readFileSync(new URL("../../conformance.json", import.meta.url), "utf8"));

/** The table's compressed strings (`{"$repeat": ...}`) written out. */
function expand(value) {
  if (Array.isArray(value)) return value.map(expand);
  if (value && typeof value === "object") {
    if ("$repeat" in value) return value.before + value.$repeat.repeat(value.times) + value.after;
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, expand(v)]));
  }
  return value;
}

function hostFor(grants, cap) {
  const host = new FakeHost(TABLE.plugin);
  if (cap === "kube") {
    for (const object of TABLE.kube.objects) host.kube.put(object);
    host.kube.setOwnLease(TABLE.kube["own-lease"].namespace, TABLE.kube["own-lease"].name);
    host.kube.setNodeName(TABLE.kube["node-name"]);
  }
  for (const [fake, grant] of Object.entries(grants)) host[fake].grant(grant);
  return host;
}

test("the table covers every capability with a grant", () => {
  const caps = new Set(TABLE.cases.map((c) => c.call.cap));
  assert.deepEqual([...caps].sort(), ["cloud", "cri", "files", "http", "kube", "metrics", "state", "systemd"]);
  assert.ok(TABLE.cases.length >= 100, `${TABLE.cases.length} cases`);
});

TABLE.cases.forEach((c, i) => {
  const { cap, fn } = c.call;
  test(`case ${i}: ${cap}.${fn} ${c.expect.outcome}`, () => {
    const args = expand(c.call.args);
    const params = IMPORTS[cap][fn].params;
    assert.deepEqual(Object.keys(args).sort(), Object.keys(params).sort(), "the case names every parameter");
    const jsArgs = Object.entries(params).map(([p, t]) => fromAbi(parseType(t), args[p]));
    const host = hostFor(c.grants, cap);
    let answer;
    let error;
    try {
      answer = host[cap][camel(fn)](...jsArgs);
    } catch (e) {
      if (!(e instanceof TendError)) throw e;
      error = e;
    } finally {
      host.close();
    }
    const { outcome, kind, message, names } = c.expect;
    if (outcome === "refused") {
      assert.ok(error, `expected ${kind}, got an answer`);
      assert.equal(error.kind, kind);
      assert.equal(error.message, message);
    } else {
      assert.ok(!error || !["denied", "invalid"].includes(error.kind), `expected allowed, got ${error?.kind}: ${error?.message}`);
      if (outcome === "listed") {
        assert.equal(error, undefined);
        assert.deepEqual(answer.items.map((item) => JSON.parse(item).metadata.name).sort(), names);
      } else {
        assert.equal(outcome, "allowed");
      }
    }
  });
});
