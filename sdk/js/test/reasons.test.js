// `TendError.reasons`: the named reasons a refusal begins with, read as the
// host's rules/src/reason.rs reads them. Pure JavaScript: no wasm, no host.
import assert from "node:assert/strict";
import { test } from "node:test";
import { BudgetExhaustedError, DeniedError, errorFromKind } from "../src/index.js";

const reasons = (message) => new BudgetExhaustedError(message).reasons;

test("every reason reads back from its tag", () => {
  const names = [
    "budget", "window", "health", "limit", "breaker", "stale-state", "unverified",
    "pdb:default/web-pdb", "pdb:kube-system/*", "pdb:a/web-0.example",
  ];
  for (const name of names) {
    assert.deepEqual(reasons(`[${name}] why it is so`), [name], name);
    assert.deepEqual(reasons(`budget-exhausted: [${name}] why it is so`), [name], name);
  }
});

test("several reasons read back in order", () => {
  assert.deepEqual(reasons("[pdb:default/a] [pdb:default/b] [window] held"), ["pdb:default/a", "pdb:default/b", "window"]);
  assert.deepEqual(reasons("[budget][window] no space between"), ["budget", "window"]);
});

test("at most eight reasons are read", () => {
  assert.deepEqual(reasons("[budget] ".repeat(20) + "x"), Array(8).fill("budget"));
});

test("reading stops at an unknown tag", () => {
  assert.deepEqual(reasons("[budget] [nope] [window] x"), ["budget"]);
  assert.deepEqual(reasons("[budget]  [window] two spaces"), ["budget"]);
});

test("a message without a known tag at its start has no reason", () => {
  for (const message of [
    "outside the window",
    "[nope] not a reason",
    "[Window] upper case",
    "[budget without its end",
    " [budget] not at the start",
    "denied: [budget] another kind of error",
    "budget-exhausted:[budget] no space after the kind",
    "",
    "[",
    "[]",
  ]) {
    assert.deepEqual(reasons(message), [], JSON.stringify(message));
  }
});

test("a pdb tag names a valid namespace and name only", () => {
  for (const tag of [
    "pdb:default",
    "pdb:Default/web",
    "pdb:default/Web",
    "pdb:default/web pdb",
    "pdb:default/../x",
    "pdb:default/a/b",
    "pdb:/web",
    "pdb:default/",
    "pdb:-default/web",
    "pdb:default/web-",
    "pdb:default/a..b",
    "pdb:default/é",
    "pdb:" + "a".repeat(64) + "/web",
    "pdb:default/" + "a".repeat(254),
    "pdb:default/" + "a".repeat(64),
    "pdb:kube-system/**",
  ]) {
    assert.deepEqual(reasons(`[${tag}] blocked`), [], tag);
  }
});

test("the longest valid pdb names are read", () => {
  const namespace = "n".repeat(63);
  const name = Array(4).fill("a".repeat(62)).join(".") + ".a";
  assert.equal(name.length, 253);
  assert.deepEqual(reasons(`[pdb:${namespace}/${name}] blocked`), [`pdb:${namespace}/${name}`]);
});

test("every error case has reasons", () => {
  assert.deepEqual(new DeniedError("[window] x").reasons, ["window"]);
  assert.deepEqual(errorFromKind("other", "no tag here").reasons, []);
});
