// FakeHost: a plugin's host in Node tests, backed by the Rust SDK's fakes
// (`tend_sdk::testing::FakeHost`) compiled to tend-fakes.wasm, so grant
// decisions, error kinds and messages are the host's own, never re-typed
// here. The module speaks the JSON ABI of sdk/fakes/README.md; this file
// only converts values between the plugin's shapes and that ABI.
//
// The module is $TEND_FAKES_WASM, else target/tend-fakes.wasm of the Tend
// checkout this SDK lives in (`cargo xtask lang js` builds it).

import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { TendError, errorFromKind } from "./errors.js";
import { parseType, prepare } from "./codec.js";
import { makeHost } from "./host.js";
import { camel, splitArgs } from "./names.js";

export function fakesPath() {
  return process.env.TEND_FAKES_WASM || fileURLToPath(new URL("../../../target/tend-fakes.wasm", import.meta.url));
}

/**
 * A misuse of the fakes (a setup call they refuse, a missing module, a host
 * whose instance trapped): the message says what to fix. Not a `TendError`,
 * so a plugin's `catch` for its own errors never swallows it.
 */
export class FakesError extends Error {}
Object.defineProperty(FakesError.prototype, "name", { value: "FakesError" });

/** One instance of the module; once it traps it is gone, with every host made on it. */
class Instance {
  constructor(exports) {
    this.exports = exports;
    this.trapped = null; // why it is gone
  }

  /** One JSON request, its JSON answer. */
  request(req) {
    if (this.trapped !== null) {
      throw new FakesError(
        `tend-fakes: this FakeHost's fakes instance trapped earlier (${this.trapped}); it is gone with every host made on it: make a new FakeHost`,
      );
    }
    const m = this.exports;
    const bytes = Buffer.from(JSON.stringify(req));
    let ret;
    try {
      const ptr = m.tend_alloc(bytes.length);
      if (ptr === 0) throw new FakesError(`tend-fakes: a request of ${bytes.length} bytes is over its limit (16 MiB)`);
      new Uint8Array(m.memory.buffer, ptr, bytes.length).set(bytes);
      ret = m.tend_call(ptr, bytes.length);
    } catch (e) {
      if (!(e instanceof WebAssembly.RuntimeError)) throw e;
      const message = read(m, m.tend_panic()) ?? e.message;
      // Never used again: its hosts fail (naming the trap's last line), new hosts get a new instance.
      this.trapped = message.trim().split("\n").at(-1).trim() || "a trap";
      if (current === this) current = null;
      throw new FakesError(`tend-fakes trapped (a bug in sdk/fakes, please report it): ${message}`, { cause: e });
    }
    return JSON.parse(read(m, ret));
  }
}

let current = null;

/** The instance new FakeHosts are made on, shared by every FakeHost of this process until it traps. */
export function fakesInstance() {
  if (current) return current;
  const path = fakesPath();
  let bytes;
  try {
    bytes = readFileSync(path);
  } catch (e) {
    throw new FakesError(
      `no tend-fakes module at ${path} (${e.code}): build it with \`cargo xtask lang js\` in the Tend checkout (see sdk/fakes/README.md), or set TEND_FAKES_WASM`,
    );
  }
  current = new Instance(new WebAssembly.Instance(new WebAssembly.Module(bytes), {}).exports);
  return current;
}

function read(m, ret) {
  if (!ret) return null;
  const ptr = Number(BigInt.asUintN(64, ret) >> 32n);
  const len = Number(BigInt.asUintN(64, ret) & 0xffffffffn);
  const text = Buffer.from(m.memory.buffer, ptr, len).toString("utf8");
  m.tend_free(ptr, len);
  return text;
}

/** A prepared value in the ABI's JSON (kebab keys, base64 bytes, variants as `"tag"` or `{tag: val}`). */
export function toAbi(type, value) {
  if (type === null || type.prim) return value;
  if (type.option) return value === null ? null : toAbi(type.option, value);
  if (type.list) return type.list.prim === "u8" ? Buffer.from(value).toString("base64") : value.map((v) => toAbi(type.list, v));
  if (type.tuple) return type.tuple.map((t, i) => toAbi(t, value[i]));
  if (type.result) return value instanceof TendError ? { err: toAbi(type.result[1], value) } : { ok: toAbi(type.result[0], value) };
  const { def } = type;
  if (def.enum) return value;
  if (type.named === "types.error") return { kind: value.kind, message: value.message };
  if (def.variant) return def.variant[value.tag] ? { [value.tag]: toAbi(parseType(def.variant[value.tag]), value.val) } : value.tag;
  return Object.fromEntries(Object.entries(def.record).map(([f, t]) => [f, toAbi(parseType(t), value[camel(f)])]));
}

/** An ABI value as the engine would give it to the plugin. */
export function fromAbi(type, value) {
  if (type === null || type.prim) return value;
  if (type.option) return value === null || value === undefined ? null : fromAbi(type.option, value);
  if (type.list) return type.list.prim === "u8" ? new Uint8Array(Buffer.from(value, "base64")) : value.map((v) => fromAbi(type.list, v));
  if (type.tuple) return type.tuple.map((t, i) => fromAbi(t, value[i]));
  if (type.result) return "err" in value ? fromAbi(type.result[1], value.err) : fromAbi(type.result[0], value.ok);
  const { def } = type;
  if (def.enum) return value;
  if (type.named === "types.error") return errorFromKind(value.kind, value.message);
  if (def.variant) {
    if (typeof value === "string") return { tag: value };
    const [tag, val] = Object.entries(value)[0];
    return { tag, val: fromAbi(parseType(def.variant[tag]), val) };
  }
  return Object.fromEntries(Object.entries(def.record).map(([f, t]) => [camel(f), fromAbi(parseType(t), value[f])]));
}

/** The answer's value; its error thrown as a `TendError`, a misuse of the fakes as a `FakesError`. */
function unwrap(answer) {
  if ("misuse" in answer) throw new FakesError(answer.misuse);
  if ("err" in answer) throw errorFromKind(answer.err.kind, answer.err.message);
  return answer.ok;
}

// The fakes' setup methods (sdk/fakes/README.md), as "params -> result" in
// WIT types; `json` passes through as is (grants in tend.toml's shape, Kubernetes objects).
const ERROR = "error: option<types.error>";
const FAIL = { "fail-with": ERROR, "fail-call": `call: string, ${ERROR}`, actions: "-> list<string>" };
const SETUP = {
  host: { "log-lines": "-> json", plugin: "-> string" },
  files: { grant: "grant: json", put: "path: string, contents: list<u8>", get: "path: string -> option<list<u8>>", paths: "-> list<string>" },
  http: {
    grant: "grant: json",
    respond: "method: string, url: string, response: result<http.response, types.error>",
    status: "url: string, status: u16",
    sent: "-> list<http.request>",
    batches: "-> list<u32>",
  },
  metrics: { counter: "name: string, labels: list<tuple<string, string>> -> f64", gauge: "name: string, labels: list<tuple<string, string>> -> option<f64>" },
  systemd: {
    grant: "grant: json",
    "set-unit": "unit: string, active-state: string",
    "put-unit": "status: systemd.unit-status",
    "job-result": "unit: string, result: systemd.job-result",
    "fail-with": ERROR,
    actions: "-> list<string>",
  },
  cri: {
    ...FAIL,
    grant: "grant: json",
    "set-version": "name: string, version: string",
    "add-sandbox": "id: string, uid: string, attempt: u32, state: cri.sandbox-state",
    "put-sandbox": "sandbox: cri.pod-sandbox",
    "put-sandbox-status": "status: cri.sandbox-status",
    "add-container": "container: cri.container",
    "add-image": "reference: string",
    "fail-pull": `image: string, ${ERROR}`,
    "pull-takes": "image: string, ms: u64",
    "set-time-left": "ms: option<u64>",
    "sandbox-ids": "-> list<string>",
  },
  kube: {
    ...FAIL,
    grant: "grant: json",
    "set-node-name": "node: string",
    "node-name": "-> string",
    "set-own-lease": "namespace: string, name: string",
    "add-kind": "api-version: string, kind: string, plural: string, namespaced: bool",
    put: "object: json",
    object: "key: kube.object-key -> json",
    remove: "key: kube.object-key -> json",
    patches: "-> json",
    events: "-> json",
    "block-eviction": "namespace: string, name: string, budget: string",
    "unblock-eviction": "namespace: string, name: string",
    "uncordon-during-drain": "evictions: u32",
  },
  logs: {
    grant: "grant: json",
    kernel: "priority: u8, message: string",
    journal: "unit: option<string>, identifier: option<string>, priority: u8, message: string",
  },
  conditions: {
    ...FAIL,
    grant: "grant: json",
    hold: "condition: string, active: bool, reason: string, message: string",
    advance: "seconds: u64",
    now: "-> u64",
  },
  cloud: {
    ...FAIL,
    grant: "grant: json",
    "put-instance": "instance: cloud.instance",
    "put-group": "group: cloud.security-group",
    instance: "id: string -> option<cloud.instance>",
    "remove-instance": "id: string -> option<cloud.instance>",
    group: "id: string -> option<cloud.security-group>",
    "remove-group": "id: string -> option<cloud.security-group>",
  },
};

const typeOf = (text) => (text === "json" ? null : parseType(text));

/** `"a: t, b: u -> r"` as params `[[name, type]]` and a result type. */
function signature(text) {
  const [params, result] = text.split("->").map((s) => s.trim());
  return {
    params: params ? splitArgs(params).map((p) => p.split(":").map((s) => s.trim())).map(([n, t]) => [n, typeOf(t)]) : [],
    result: result ? typeOf(result) : null,
  };
}

// A collected host is dropped on its own instance, unless that trapped.
const dropper = new FinalizationRegistry(({ instance, handle }) => instance.trapped === null && instance.request({ op: "drop", host: handle }));

/**
 * A plugin's host for tests: pass it as `host` to `plugin.reconcile(ctx, host)`.
 * Each capability (`fake.files`) has the plugin's calls and the fake's setup
 * (`fake.files.grant([{ path: "/var/lib/x", write: true }])`, `put`, ...).
 * Nothing is granted at first; denial messages name `plugin`.
 */
export class FakeHost {
  /** The instance this host lives on, for good: its handle means nothing on another. */
  #fakes;

  constructor(plugin = "test-plugin") {
    const instance = fakesInstance();
    const request = (req) => instance.request(req);
    this.#fakes = instance;
    this.handle = unwrap(request({ op: "new", plugin }));
    dropper.register(this, { instance, handle: this.handle }, this);
    const call = (cap, fn, args, sig) => {
      const abiArgs = Object.fromEntries(sig.params.map(([p, t], i) => [p, toAbi(t, args[i])]));
      const ok = unwrap(request({ op: "call", host: this.handle, cap, fn, args: abiArgs }));
      return sig.ok ? fromAbi(sig.ok, ok) : undefined;
    };
    const host = makeHost(call);
    for (const [fake, fns] of Object.entries(SETUP)) {
      const target = fake === "host" ? this : (host[fake] ??= {});
      for (const [fn, text] of Object.entries(fns)) {
        const { params, result } = signature(text);
        const name = `${fake}.${camel(fn)}`;
        target[camel(fn)] = (...args) => {
          const abiArgs = Object.fromEntries(
            params.map(([p, t], i) => [p, t ? toAbi(t, prepare(t, args[i], `${name}: ${camel(p)}`)) : args[i]]),
          );
          return fromAbi(result, unwrap(request({ op: "setup", host: this.handle, fake, fn, args: abiArgs })));
        };
      }
    }
    Object.assign(this, host);
  }

  /** Free the fake now (else it is freed when garbage collected). */
  close() {
    dropper.unregister(this);
    if (this.#fakes.trapped === null) this.#fakes.request({ op: "drop", host: this.handle });
  }
}

/** A context like the host's for tests: a manual trigger on node "test-node". */
export function testContext(plugin, config = {}, { nodeName = "test-node", triggers = [{ kind: "manual", subject: null }], dryRun = false } = {}) {
  return { plugin, config: typeof config === "string" ? config : JSON.stringify(config), triggers, nodeName, dryRun };
}
