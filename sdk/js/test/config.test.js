import assert from "node:assert/strict";
import { test } from "node:test";
import { InvalidError, config } from "../src/index.js";

const ctx = (json) => ({ plugin: "probe", config: typeof json === "string" ? json : JSON.stringify(json) });
const SPEC = {
  url: config.string({ example: "http://127.0.0.1:10248/healthz" }),
  expectStatus: config.integer({ default: 200 }),
  ratio: config.number({ default: 0.5 }),
  verbose: config.boolean({ default: false }),
  caches: config.list(config.table({ upstream: config.string(), endpoint: config.string({ example: "http://127.0.0.1:5055" }) }), { default: [] }),
};

function fails(json, message) {
  assert.throws(() => config.read(ctx(json), SPEC), (e) => e instanceof InvalidError && e.message === message);
}

test("reads kebab-case keys into camelCase, with defaults", () => {
  assert.deepEqual(config.read(ctx({ url: "http://x", "expect-status": 204, caches: [{ upstream: "docker.io", endpoint: "http://c" }] }), SPEC), {
    url: "http://x",
    expectStatus: 204,
    ratio: 0.5,
    verbose: false,
    caches: [{ upstream: "docker.io", endpoint: "http://c" }],
  });
});

test("a missing or wrong key names itself, what it expects and an example", () => {
  fails({}, '[plugins.probe.config] url: expected a string, for example "http://127.0.0.1:10248/healthz"');
  fails({ url: 5 }, '[plugins.probe.config] url: expected a string, for example "http://127.0.0.1:10248/healthz"');
  fails({ url: "u", "expect-status": 2.5 }, "[plugins.probe.config] expect-status: expected an integer");
  fails({ url: "u", ratio: "x" }, "[plugins.probe.config] ratio: expected a number");
  fails({ url: "u", verbose: "yes" }, "[plugins.probe.config] verbose: expected true or false");
  fails({ url: "u", caches: {} }, "[plugins.probe.config] caches: expected a list");
  fails({ url: "u", caches: [{ upstream: "a", endpoint: "b" }, { upstream: "c" }] }, '[plugins.probe.config] caches[1].endpoint: expected a string, for example "http://127.0.0.1:5055"');
  fails({ url: "u", caches: [7] }, "[plugins.probe.config] caches[0]: expected a table");
});

test("an unknown key is refused, naming the keys there are (as the Python SDK does)", () => {
  fails({ url: "u", urls: [] }, "[plugins.probe.config] urls: unknown key; expected one of url, expect-status, ratio, verbose, caches");
  fails({ url: "u", expectStatus: 204 }, "[plugins.probe.config] expectStatus: unknown key; expected one of url, expect-status, ratio, verbose, caches");
  fails({ url: "u", caches: [{ upstream: "a", endpoint: "b", port: 1 }] }, "[plugins.probe.config] caches[0].port: unknown key; expected one of upstream, endpoint");
});

test("a config that is not a JSON table", () => {
  fails("[1]", "[plugins.probe.config] .: expected a table");
  assert.throws(() => config.read(ctx("{"), SPEC), (e) => e instanceof InvalidError && e.message.startsWith("[plugins.probe.config] .: not JSON: "));
});
