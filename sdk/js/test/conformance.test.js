// Every case of sdk/conformance.json (the host's table, exported by
// tend-conformance) through the typed JS wrappers and FakeHost, on the table's
// populated fixture: each case must end exactly as the host's (`ok`,
// `refused` with kind and message, `failed` with a kind, or `listed` names).
// The table's arguments are in the fakes' ABI shape; they are turned into
// the plugin's shapes first, so both directions of the codec are exercised.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { TendError, errorFromKind } from "../src/index.js";
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

/** An ABI value of WIT type `type` in the plugin's shape. */
const typed = (type, value) => fromAbi(parseType(type), value);

/** Each setup request of the fixture, through the fake's typed setup method. */
const SETUPS = {
  "files.put": (h, a) => h.files.put(a.path, typed("list<u8>", a.contents)),
  "http.status": (h, a) => h.http.status(a.url, a.status),
  "systemd.set-unit": (h, a) => h.systemd.setUnit(a.unit, a["active-state"]),
  "cri.set-version": (h, a) => h.cri.setVersion(a.name, a.version),
  "cri.put-sandbox": (h, a) => h.cri.putSandbox(typed("cri.pod-sandbox", a.sandbox)),
  "cri.add-container": (h, a) => h.cri.addContainer(typed("cri.container", a.container)),
  "cri.add-image": (h, a) => h.cri.addImage(a.reference),
  "cloud.put-instance": (h, a) => h.cloud.putInstance(typed("cloud.instance", a.instance)),
  "cloud.put-group": (h, a) => h.cloud.putGroup(typed("cloud.security-group", a.group)),
  "kube.set-node-name": (h, a) => h.kube.setNodeName(a.node),
  "kube.set-own-lease": (h, a) => h.kube.setOwnLease(a.namespace, a.name),
  "kube.put": (h, a) => h.kube.put(a.object),
  "logs.kernel": (h, a) => h.logs.kernel(a.priority, a.message),
  "logs.journal": (h, a) => h.logs.journal(a.unit, a.identifier, a.priority, a.message),
  "conditions.hold": (h, a) => h.conditions.hold(a.condition, a.active, a.reason, a.message),
};

/** One request's outcome in a `send-all`: "ok STATUS", "KIND: MESSAGE" (denied, invalid), or the kind. */
function sent(result) {
  if (!(result instanceof TendError)) return `ok ${result.status}`;
  const error = ofError(result);
  return error.outcome === "refused" ? `${error.kind}: ${error.message}` : error.kind;
}

/** The listing functions: the names of a typed answer's items (the table's `item_name`). */
const NAMES = {
  "state.list-keys": (keys) => keys,
  "logs.read": (page) => page.entries.map((e) => e.message),
  "logs.matches": (matched) => matched.map((m) => m.rule),
  "conditions.list": (held) => held.map((h) => `${h.condition} ${h.active ? "True" : "False"} ${h.reason}`),
  "files.list-dir": (entries) => entries.map((e) => e.name),
  "http.send-all": (results) => results.map(sent),
  "systemd.list-units": (units) => units.map((u) => u.name),
  "cri.list-pod-sandboxes": (sandboxes) => sandboxes.map((s) => s.id),
  "cri.list-containers": (containers) => containers.map((c) => c.id),
  "cri.list-images": (images) => images.map((i) => i.repoTags[0]),
  "kube.list": (page) => page.items.map((item) => JSON.parse(item).metadata.name),
  "cloud.list-instances": (instances) => instances.map((i) => i.id),
  "cloud.list-security-groups": (groups) => groups.map((g) => g.id),
};

/** The fakes that can be told to fail every call (`failWith`). */
const FAILING = ["systemd", "cri", "kube", "cloud"];

function ofError(error) {
  return ["denied", "invalid"].includes(error.kind)
    ? { outcome: "refused", kind: error.kind, message: error.message }
    : { outcome: "failed", kind: error.kind };
}

/** How a call ended, as the table writes it, from the typed answer or the thrown TendError. */
function outcome(cap, fn, answer) {
  if (answer instanceof TendError) return ofError(answer);
  const names = NAMES[`${cap}.${fn}`];
  if (!names) return { outcome: "ok" };
  const listed = names(answer);
  return { outcome: "listed", names: fn === "send-all" ? listed : [...listed].sort() };
}

/** One plugin call of the table through the typed wrapper: its answer, or the TendError it threw. */
function call(host, { cap, fn, args }) {
  const params = IMPORTS[cap][fn].params;
  const abi = expand(args);
  assert.deepEqual(Object.keys(abi).sort(), Object.keys(params).sort(), `${cap}.${fn}: the case names every parameter`);
  const jsArgs = Object.entries(params).map(([p, t]) => typed(t, abi[p]));
  try {
    return host[camel(cap)][camel(fn)](...jsArgs);
  } catch (e) {
    if (!(e instanceof TendError)) throw e;
    return e;
  }
}

/** A host on the table's fixture, with `grants`; `fail` `[cap, error]`: that fake fails every call. */
function fixtureHost(grants, fail) {
  const host = new FakeHost(TABLE.plugin);
  for (const { fake, fn, args } of TABLE.fixture.setup) SETUPS[`${fake}.${fn}`](host, args);
  for (const seed of TABLE.fixture.calls) {
    const answer = call(host, seed);
    const failed = answer instanceof TendError ? `${answer.kind}: ${answer.message}` : null;
    assert.equal(failed, null, `fixture call ${JSON.stringify(seed)}`);
  }
  if (fail) host[fail[0]].failWith(fail[1]);
  for (const [fake, grant] of Object.entries(grants)) host[fake].grant(grant);
  return host;
}

/** Run one case (its capability's fake failing every call with `fail`, if given); throws how the fakes differ. */
function check(c, fail) {
  const { cap, fn } = c.call;
  const host = fixtureHost(c.grants, fail && [cap, fail]);
  try {
    assert.deepEqual(outcome(cap, fn, call(host, c.call)), c.expect);
  } finally {
    host.close();
  }
}

/** The first case of this outcome on a fake that can be told to fail. */
const first = (wanted) => TABLE.cases.find((c) => c.expect.outcome === wanted && FAILING.includes(c.call.cap));

test("the table covers every WIT function", () => {
  const functions = new Set(TABLE.cases.map((c) => `${c.call.cap}.${c.call.fn}`));
  const wit = Object.entries(IMPORTS).flatMap(([cap, fns]) => Object.keys(fns).map((fn) => `${cap}.${fn}`));
  assert.deepEqual([...functions].sort(), wit.sort());
  assert.ok(wit.length >= 49, `${wit.length} functions: the WIT reader lost some`);
});

TABLE.cases.forEach((c, i) => {
  test(`case ${i}: ${c.call.cap}.${c.call.fn} ${c.expect.outcome}`, () => check(c));
});

test("a listed case is not passed by an error", () => {
  const listed = first("listed");
  for (const kind of ["not-found", "unavailable"]) {
    assert.throws(() => check(listed, errorFromKind(kind, "injected")), new RegExp(`kind: '${kind}'`));
  }
});

test("an ok case is not passed by an error", () => {
  assert.throws(() => check(first("ok"), errorFromKind("unavailable", "down")), /outcome: 'failed'/);
});

test("a failed case is not passed by another kind, and is by its own", () => {
  const failed = first("failed");
  const other = failed.expect.kind === "conflict" ? "not-found" : "conflict";
  assert.throws(() => check(failed, errorFromKind(other, "injected")), new RegExp(`kind: '${other}'`));
  check(failed, errorFromKind(failed.expect.kind, "injected"));
});
