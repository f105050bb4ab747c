// FakeHost's setup and inspection calls, and argument checking, through
// the fakes module: values cross the ABI both ways in the plugin's shapes.

import assert from "node:assert/strict";
import { test } from "node:test";
import { BudgetExhaustedError, DeniedError, InvalidError, NotFoundError, TendError, UnavailableError, decodeUtf8 } from "../src/index.js";
import { FakeHost, FakesError, fakesInstance, testContext } from "../src/testing.js";

test("scripted sandboxes, instances and units come back as the plugin sees them", () => {
  const host = new FakeHost("p");
  host.cri.grant({ read: true });
  const sandbox = { id: "sb1", podName: "web", namespace: "default", uid: "u1", attempt: 0, state: "not-ready", createdAtNs: 5, labels: [["app", "web"]], annotations: [] };
  host.cri.putSandbox(sandbox);
  assert.deepEqual(host.cri.listPodSandboxes({ labels: [["app", "web"]] }), [sandbox]);
  assert.deepEqual(host.cri.sandboxIds(), ["sb1"]);

  host.cloud.grant({ operations: ["get-instance"], instances: [{ tag: "owner", value: "me" }] });
  const instance = { id: "i-0123456789abcdef0", name: "n", state: "running", status: "running", taskState: null, createdAtMs: 1, zone: null, privateAddresses: [], publicAddresses: [], securityGroups: [], tags: [["owner", "me"]], providerId: "aws:///z/i-0123456789abcdef0" };
  host.cloud.putInstance(instance);
  assert.deepEqual(host.cloud.getInstance(instance.id), instance);
  assert.deepEqual(host.cloud.instance("i-0fffffffffffffff0"), null);

  host.systemd.grant({ units: ["kubelet.service"], operations: ["restart"] });
  host.systemd.setUnit("kubelet.service", "failed");
  assert.equal(host.systemd.status("kubelet.service").activeState, "failed");
  assert.equal(host.systemd.restart("kubelet.service"), "done");
  assert.deepEqual(host.systemd.actions(), ["restart kubelet.service"]);
  host.systemd.failWith(new UnavailableError("no bus"));
  assert.throws(() => host.systemd.status("kubelet.service"), (e) => e instanceof UnavailableError && e.message === "no bus");
  host.close();
});

test("state, files, http and metrics as a plugin uses them", () => {
  const host = new FakeHost("p");
  assert.equal(host.state.get("k"), null);
  assert.equal(host.state.set("k", "v"), undefined);
  assert.equal(decodeUtf8(host.state.get("k")), "v");
  host.files.put("/etc/x.conf", "a=1");
  assert.deepEqual(host.files.paths().includes("/etc/x.conf"), true);
  host.http.grant(["http://127.0.0.1:*/*"]);
  host.http.status("http://127.0.0.1:1/h", 503);
  assert.equal(host.http.send({ method: "GET", url: "http://127.0.0.1:1/h", headers: [] }).status, 503);
  assert.equal(host.http.sent()[0].timeoutMs, null);
  host.http.respond("GET", "http://127.0.0.1:1/gone", new NotFoundError("scripted"));
  assert.throws(() => host.http.send({ method: "GET", url: "http://127.0.0.1:1/gone", headers: [] }), NotFoundError);
  host.metrics.counterAdd("probes", [["result", "ok"]], 2);
  assert.equal(host.metrics.counter("probes", [["result", "ok"]]), 2);
  host.log.log("warn", "careful");
  assert.deepEqual(host.logLines(), [{ level: "warn", message: "careful" }]);
  assert.equal(host.plugin(), "p");
  host.close();
});

test("wrong arguments fail with a TypeError naming them", () => {
  const host = new FakeHost();
  assert.throws(() => host.state.get("a", "b"), /^TypeError: state.get: takes 1 arguments, got 2$/);
  assert.throws(() => host.state.get(), /^TypeError: state.get: key: expected a string, got nothing$/);
  assert.throws(() => host.files.write("/x", 5), /^TypeError: files.write: contents: expected a Uint8Array or a string, got number$/);
  assert.throws(() => host.log.log("loud", "x"), /^TypeError: log.log: level: expected one of "trace", "debug", "info", "warn", "error", got "loud"$/);
  assert.throws(() => host.http.respond("GET", "u", {}), /^TypeError: http.respond: response.status: expected a number \(u16\), got nothing$/);
  host.close();
});

test("testContext looks like the host's", () => {
  assert.deepEqual(testContext("p", { a: 1 }), { plugin: "p", config: '{"a":1}', triggers: [{ kind: "manual", subject: null }], nodeName: "test-node", dryRun: false });
});

test("send-all over 32 requests is refused whole, as on the host", () => {
  const host = new FakeHost("p");
  const url = "http://127.0.0.1:1/";
  host.http.grant(["http://127.0.0.1:*/*"]);
  host.http.status(url, 200);
  const req = { method: "GET", url, headers: [] };
  assert.ok(host.http.sendAll(Array(32).fill(req)).every((r) => r.status === 200));
  const answers = host.http.sendAll(Array(33).fill(req));
  assert.equal(answers.length, 33);
  for (const answer of answers) {
    assert.ok(answer instanceof InvalidError, String(answer));
    assert.equal(answer.message, "send-all takes at most 32 requests, got 33: split the call");
  }
  assert.deepEqual(host.http.batches(), [32]);
  host.close();
});

test("only a misuse of the fakes is a FakesError, and it is no TendError", () => {
  const host = new FakeHost("p");
  const url = "http://127.0.0.1:1/";
  host.http.grant(["http://127.0.0.1:*/*"]);
  // Text a plugin or its peers control may start with "tend-fakes:": still the plugin's error.
  host.http.respond("GET", url, new InvalidError("tend-fakes: forged"));
  assert.throws(() => host.http.send({ method: "GET", url, headers: [] }), (e) => e instanceof InvalidError && e.message === "tend-fakes: forged");
  assert.throws(
    () => host.files.grant([{ path: "etc" }]),
    (e) => e instanceof FakesError && !(e instanceof TendError) && e.message.startsWith("tend-fakes: files grant"),
  );
  host.close();
});

test("hosts of a trapped instance fail clearly and leave the next instance alone", () => {
  const old = new FakeHost("old");
  const instance = fakesInstance();
  const real = instance.exports;
  // A real trap: tend_call reading past the end of memory.
  instance.exports = { ...real, tend_call: () => real.tend_call(-65536, 16) };
  assert.throws(() => old.state.get("k"), (e) => e instanceof FakesError && /trapped/.test(e.message) && e.cause instanceof WebAssembly.RuntimeError);
  const fresh = new FakeHost("new");
  assert.notEqual(fakesInstance(), instance);
  assert.equal(fresh.handle, 1);
  fresh.state.set("k", "new");
  assert.throws(() => old.state.set("k", "old"), (e) => e instanceof FakesError && /instance trapped earlier.*make a new FakeHost/.test(e.message));
  assert.throws(() => old.logLines(), FakesError);
  old.close(); // must not drop host 1 of the new instance
  assert.equal(decodeUtf8(fresh.state.get("k")), "new");
  assert.deepEqual(fresh.logLines(), []);
  fresh.close();
});

test("cordon, evict and drain answer as the Rust fake", () => {
  const host = new FakeHost("drainer");
  assert.throws(() => host.kube.cordon(true), (e) => e instanceof DeniedError && e.message.includes('names = ["node-1"]'));
  host.kube.grant([
    { resource: "nodes", verbs: ["patch"], names: ["$NODE"], fields: ["spec.unschedulable"] },
    { resource: "pods", verbs: ["list", "get"], "field-selector": "spec.nodeName=$NODE" },
    { resource: "pods/eviction", verbs: ["create"], "field-selector": "spec.nodeName=$NODE" },
  ]);
  const node = { apiVersion: "v1", kind: "Node", namespace: null, name: "node-1" };
  host.kube.put({ apiVersion: "v1", kind: "Node", metadata: { name: "node-1" } });
  const pod = (name, meta = {}) => ({ apiVersion: "v1", kind: "Pod", metadata: { name, namespace: "default", ...meta }, spec: { nodeName: "node-1" } });
  for (const p of [pod("web"), pod("db"), pod("api"), pod("cni", { ownerReferences: [{ kind: "DaemonSet", name: "cni", controller: true }] })]) host.kube.put(p);
  host.kube.cordon(true);
  assert.deepEqual(host.kube.object(node).spec, { unschedulable: true });
  host.kube.cordon(false);
  assert.deepEqual(host.kube.object(node).spec, {});
  assert.throws(() => host.kube.evict("default", "web/status"), InvalidError);
  host.kube.evict("default", "api");
  assert.equal(host.kube.object({ apiVersion: "v1", kind: "Pod", namespace: "default", name: "api" }), null);
  host.kube.blockEviction("default", "db", "db-pdb");
  assert.throws(() => host.kube.evict("default", "db"), (e) => e instanceof BudgetExhaustedError && e.message.startsWith("[pdb:default/db-pdb] blocked by PodDisruptionBudget default/db-pdb: "));
  assert.deepEqual(host.kube.drain({ deadlineMs: 60000, uncordonOnGiveUp: true }), {
    evicted: ["default/web"],
    skipped: ["default/cni: a DaemonSet pod"],
    remaining: ["default/db: [pdb:default/db-pdb] blocked by PodDisruptionBudget default/db-pdb"],
    uncordoned: true,
  });
  host.kube.unblockEviction("default", "db");
  host.kube.uncordonDuringDrain(0);
  const stopped = host.kube.drain({ deadlineMs: 60000, uncordonOnGiveUp: true });
  assert.deepEqual([stopped.remaining, stopped.uncordoned], [["default/db: not evicted yet"], false]);
  assert.deepEqual(host.kube.actions(), [
    "cordon nodes/node-1",
    "uncordon nodes/node-1",
    "evict pods/default/api",
    "cordon nodes/node-1",
    "evict pods/default/web",
    "uncordon nodes/node-1",
    "cordon nodes/node-1",
  ]);
  assert.throws(() => host.kube.drain({ deadlineMs: "soon", uncordonOnGiveUp: true }), /^TypeError: kube.drain: options.deadlineMs: expected a number \(u64\), got "soon"$/);
  host.close();
});

test("conditions hold to the grant and expire on the fake's clock", () => {
  const host = new FakeHost("problem-detector");
  const report = { condition: "KernelDeadlock", reason: "TaskHung", message: "task blocked", ttlSeconds: 60 };
  assert.throws(() => host.conditions.set(report), (e) => e instanceof DeniedError && /grants\] conditions/.test(e.message));
  host.conditions.grant(["KernelDeadlock", { condition: "ReadonlyFilesystem", "taint-on": { effect: "NoSchedule" } }]);
  assert.throws(() => host.conditions.set({ ...report, condition: "Ready" }), (e) => e instanceof DeniedError && /kubelet/.test(e.message));
  assert.throws(() => host.conditions.set({ ...report, ttlSeconds: 0 }), InvalidError);
  host.conditions.set(report);
  const setAt = host.conditions.now();
  assert.equal(setAt, 1767225600);
  host.conditions.clear("ReadonlyFilesystem", "FilesystemWritable", "");
  assert.deepEqual(host.conditions.list(), [
    { condition: "KernelDeadlock", active: true, reason: "TaskHung", message: "task blocked", since: setAt, expiresIn: 60, written: true },
    { condition: "ReadonlyFilesystem", active: false, reason: "FilesystemWritable", message: "", since: setAt, expiresIn: null, written: true },
  ]);
  host.conditions.advance(61);
  const [expired] = host.conditions.list();
  assert.deepEqual([expired.active, expired.reason, expired.since], [false, "Expired", setAt + 60]);
  assert.equal(expired.message, "not reported again within 60s: was TaskHung: task blocked");
  host.conditions.failCall("set", new BudgetExhaustedError("conditions.set: spent"));
  assert.throws(() => host.conditions.set(report), BudgetExhaustedError);
  assert.deepEqual(host.conditions.actions(), ["set KernelDeadlock", "clear ReadonlyFilesystem"]);
  host.close();
});
