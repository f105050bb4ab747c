// The unit tests: {{name}} in Node against the SDK's fakes, which are the
// Rust SDK's own (same grant rules and messages as the host).

import assert from "node:assert/strict";
import { test } from "node:test";
import { DeniedError, InvalidError, UnavailableError, decodeUtf8 } from "@tend/sdk";
import { FakeHost, testContext } from "@tend/sdk/testing";
import plugin, { MAX_MESSAGE } from "./{{name_snake}}.js";

const URL = "http://127.0.0.1:10248/healthz";
const REPORT = "/var/lib/{{name}}/report.txt";
const CONFIG = { url: URL, report: REPORT };
const NODE_GRANT = [{ resource: "nodes", verbs: ["get"], names: ["$NODE"] }];

/** The grants of tend.toml, a healthy endpoint and this host's Node. */
function grantedHost() {
  const host = new FakeHost("{{name}}");
  host.files.grant([{ path: "/var/lib/{{name}}", write: true }]);
  host.http.grant([URL]);
  host.http.respond("GET", URL, { status: 200, headers: [], body: "ok" });
  host.kube.grant(NODE_GRANT);
  host.kube.setNodeName("test-node");
  host.kube.put({ apiVersion: "v1", kind: "Node", metadata: { name: "test-node" } });
  return host;
}

test("a healthy run writes the report and counts runs", () => {
  const host = grantedHost();
  const ctx = testContext("{{name}}", CONFIG);
  const outcome = plugin.reconcile(ctx, host);
  const line = `{{name}} run 1: ${URL} answered 200; node test-node found`;
  assert.deepEqual(outcome, { health: "healthy", message: line, requeueAfterMs: null });
  assert.equal(decodeUtf8(host.files.get(REPORT)), `${line}\n`);

  const again = plugin.reconcile(ctx, host);
  assert.match(again.message, /^{{name}} run 2: /);
});

test("off a cluster the node is not checked and the probe decides", () => {
  const host = grantedHost();
  const why = "no Kubernetes API: not in a cluster";
  host.kube.failCall("get", new UnavailableError(why));
  const ctx = testContext("{{name}}", CONFIG);
  const outcome = plugin.reconcile(ctx, host);
  const line = `{{name}} run 1: ${URL} answered 200; node test-node not checked (${why})`;
  assert.deepEqual(outcome, { health: "healthy", message: line, requeueAfterMs: null });
  assert.equal(decodeUtf8(host.files.get(REPORT)), `${line}\n`);

  const long = "é".repeat(300);
  host.kube.failCall("get", new UnavailableError(long));
  const quoted = `not checked (${long.slice(0, MAX_MESSAGE / 2)}…)`;
  assert.ok(plugin.reconcile(ctx, host).message.endsWith(quoted));
});

test("a denied node lookup fails the reconcile", () => {
  const host = grantedHost();
  host.kube.failCall("get", new DeniedError("no kube grant"));
  assert.throws(() => plugin.reconcile(testContext("{{name}}", CONFIG), host), (e) => {
    assert.ok(e instanceof DeniedError);
    assert.equal(e.message, "no kube grant");
    return true;
  });
});

test("a missing files grant fails with the host's message", () => {
  const host = new FakeHost("{{name}}");
  host.http.grant([URL]);
  host.kube.grant(NODE_GRANT);
  host.kube.setNodeName("test-node");
  assert.throws(() => plugin.reconcile(testContext("{{name}}", CONFIG), host), (e) => {
    assert.ok(e instanceof DeniedError);
    assert.equal(
      e.message,
      'no files grant covers /var/lib/{{name}}/report.txt: add { path = "/var/lib/{{name}}", write = true } to [plugins.{{name}}.grants] files',
    );
    return true;
  });
});

test("a missing url names the key and an example", () => {
  assert.throws(() => plugin.reconcile(testContext("{{name}}", {}), grantedHost()), (e) => {
    assert.ok(e instanceof InvalidError);
    assert.equal(e.message, '[plugins.{{name}}.config] url: expected a string, for example "http://127.0.0.1:10248/healthz"');
    return true;
  });
});
