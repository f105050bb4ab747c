// The engine adapter (src/component.js) against stand-ins for the engine's
// imports: Node cannot resolve `tend:plugin/...`, so a module hook maps each
// to a module whose default export is an object of this test. The stand-ins
// behave as componentize-qjs does: a WIT error is thrown as an exception with
// `payload: { tag, val }`, nested results are `{ tag: "ok" | "err", val }`.

import assert from "node:assert/strict";
import { register } from "node:module";
import { test } from "node:test";
import { DeniedError, NotFoundError, definePlugin, healthy } from "../src/index.js";

const imports = {};
globalThis.__tendImports = imports;
register(
  "data:text/javascript," +
    encodeURIComponent(`export async function resolve(specifier, context, next) {
      const m = /^tend:plugin\\/([a-z]+)@0\\.1\\.0$/.exec(specifier);
      if (!m) return next(specifier, context);
      return { url: "data:text/javascript,export default globalThis.__tendImports." + m[1] + ";", shortCircuit: true };
    }`),
);
for (const cap of ["log", "state", "files", "http", "systemd", "cri", "metrics", "kube", "cloud"]) imports[cap] = {};
const { exportPlugin, host } = await import("../src/component.js");

const witError = (tag, val) => Object.assign(new Error("[object Object] (see error.payload)"), { payload: { tag, val } });

test("calls reach the engine's import by its camelCase name, checked and normalized", () => {
  const seen = [];
  imports.files.write = (...args) => (seen.push(args), true);
  assert.equal(host.files.write("/var/lib/x/r", "hi"), true);
  assert.deepEqual(seen, [["/var/lib/x/r", Uint8Array.from([104, 105]), null]]);
  assert.throws(() => host.files.write(1, "hi"), /^TypeError: files.write: path: expected a string, got number$/);
});

test("an engine error becomes the TendError of its kind", () => {
  imports.kube.get = () => {
    throw witError("not-found", "nodes/n1 not found");
  };
  assert.throws(() => host.kube.get({ apiVersion: "v1", kind: "Node", name: "n1" }), (e) => e instanceof NotFoundError && e.message === "nodes/n1 not found");
});

test("send-all's results are answers or TendErrors", () => {
  imports.http.sendAll = (reqs) => [
    { tag: "ok", val: { status: 200, headers: [], body: Uint8Array.of() } },
    { tag: "err", val: { tag: "denied", val: "add it" } },
  ].slice(0, reqs.length);
  const req = { method: "GET", url: "http://a/", headers: [] };
  const [ok, err] = host.http.sendAll([req, req]);
  assert.equal(ok.status, 200);
  assert.ok(err instanceof DeniedError);
  assert.equal(err.message, "add it");
});

test("exportPlugin: describe, reconcile, and errors as the WIT error", () => {
  let fail = null;
  const reconciler = exportPlugin(
    definePlugin({
      name: "p",
      version: "1.0.0",
      summary: "s",
      reconcile(ctx, h) {
        assert.equal(h, host);
        if (fail) throw fail;
        return healthy(`hi ${ctx.nodeName}`);
      },
    }),
  );
  assert.deepEqual(reconciler.describe(), { name: "p", version: "1.0.0", summary: "s" });
  assert.deepEqual(reconciler.reconcile({ nodeName: "n" }), { health: "healthy", message: "hi n", requeueAfterMs: null });
  fail = new DeniedError("grant it");
  assert.throws(() => reconciler.reconcile({}), (e) => assert.deepEqual(e, { tag: "denied", val: "grant it" }) ?? true);
  fail = new RangeError("bad index");
  assert.throws(() => reconciler.reconcile({}), (e) => assert.deepEqual(e, { tag: "other", val: "RangeError: bad index" }) ?? true);
  assert.throws(() => exportPlugin({}), /expected the value of definePlugin/);
});
