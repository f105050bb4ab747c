import type {
  Conditions, Context, Cloud, ContainerState, Cri, Files, Http, Instance, JobResult, Kube, Log, Logs, Level, Metrics, ObjectKey,
  PodSandbox, Request, Response, SandboxState, SandboxStatus, Container, SecurityGroup, State, Systemd, Trigger, UnitStatus,
} from "./wit.js";
import type { TendError } from "./errors.js";

/** A grant as an operator writes it under `[plugins.NAME.grants]`, as JSON. */
type Grant = unknown;
interface Failing {
  /** Every call fails with `error` (null: none). */
  failWith(error: TendError | null): void;
  /** Calls of the WIT function `call` fail with `error` (null: none). */
  failCall(call: string, error: TendError | null): void;
  /** The mutations made, as "verb target" lines. */
  actions(): string[];
}

/**
 * A misuse of the fakes (a setup call they refuse, a missing module, a host
 * whose fakes instance trapped): the message says what to fix. Not a
 * `TendError`, so a plugin's own `catch` never swallows it.
 */
export class FakesError extends Error {}

/**
 * A plugin's host for tests, backed by the Rust SDK's fakes: pass it as `host`.
 * Nothing is granted at first; denial messages name `plugin` ("test-plugin").
 * Each host lives on the fakes instance it was made on: if that instance
 * traps (a bug in the fakes), every call of the host throws a `FakesError`,
 * and new hosts get a new instance.
 */
export class FakeHost {
  constructor(plugin?: string);
  /** This host's handle on its fakes instance. */
  readonly handle: number;
  files: Files & {
    grant(grant: Grant): void;
    put(path: string, contents: Uint8Array | string): void;
    get(path: string): Uint8Array | null;
    paths(): string[];
  };
  http: Http & {
    grant(patterns: string[]): void;
    /** Answer `method url` with this response or error. */
    respond(method: string, url: string, response: Response | TendError): void;
    /** Answer GET `url` with this status and an empty body. */
    status(url: string, status: number): void;
    sent(): Request[];
    batches(): number[];
  };
  state: State;
  log: Log;
  metrics: Metrics & {
    counter(name: string, labels: [string, string][]): number;
    gauge(name: string, labels: [string, string][]): number | null;
  };
  systemd: Systemd & {
    grant(grant: Grant): void;
    setUnit(unit: string, activeState: string): void;
    putUnit(status: UnitStatus): void;
    jobResult(unit: string, result: JobResult): void;
    failWith(error: TendError | null): void;
    actions(): string[];
  };
  cri: Cri & Failing & {
    grant(grant: Grant): void;
    setVersion(name: string, version: string): void;
    addSandbox(id: string, uid: string, attempt: number, state: SandboxState): void;
    putSandbox(sandbox: PodSandbox): void;
    putSandboxStatus(status: SandboxStatus): void;
    addContainer(container: Container): void;
    addImage(reference: string): void;
    failPull(image: string, error: TendError | null): void;
    pullTakes(image: string, ms: number): void;
    setTimeLeft(ms: number | null): void;
    sandboxIds(): string[];
  };
  kube: Kube & Failing & {
    grant(rules: Grant): void;
    /** The node `$NODE` stands for (default "node-1"). */
    setNodeName(node: string): void;
    nodeName(): string;
    setOwnLease(namespace: string, name: string): void;
    addKind(apiVersion: string, kind: string, plural: string, namespaced: boolean): void;
    /** Store an object (the object itself, not JSON text). */
    put(object: object): void;
    object(key: ObjectKey): object | null;
    remove(key: ObjectKey): object | null;
    patches(): { key: unknown; "patch-type": string; patch: unknown }[];
    events(): { regarding: unknown; "event-type": string; reason: string; message: string; count: number }[];
    /**
     * PodDisruptionBudget `budget` (in the pod's namespace) refuses evicting pod `namespace`/`name`:
     * `evict` throws a `BudgetExhaustedError` and nothing happens; a drain leaves the pod in
     * `remaining` ("<ns>/<name>: [pdb:<ns>/<budget>] blocked by PodDisruptionBudget <ns>/<budget>"). Until `unblockEviction`.
     */
    blockEviction(namespace: string, name: string, budget: string): void;
    unblockEviction(namespace: string, name: string): void;
    /**
     * Someone else uncordons the Node once a drain has evicted `evictions` pods (0: right after its
     * cordon): the drain stops before its next eviction, the pods not evicted yet remaining
     * ("<ns>/<name>: not evicted yet"). Fires once.
     */
    uncordonDuringDrain(evictions: number): void;
  };
  logs: Logs & {
    /** The grant as under `[plugins.NAME.grants] logs`, watch rules included. */
    grant(grant: Grant): void;
    /** A kernel line; the grant's watch rules run on it as the host's do. */
    kernel(priority: number, message: string): void;
    /** A journal entry; the watch rules run on it. */
    journal(unit: string | null, identifier: string | null, priority: number, message: string): void;
  };
  conditions: Conditions & Failing & {
    /** The grant as under `[plugins.NAME.grants] conditions`: `["KernelDeadlock", { condition, "taint-on": { effect } }]`. */
    grant(grant: Grant): void;
    /** Hold `condition` as the host holds an earlier run's report (no grant check, no TTL). */
    hold(condition: string, active: boolean, reason: string, message: string): void;
    /** Move the fake's clock on: a report whose TTL passes lists as cleared ("Expired"). */
    advance(seconds: number): void;
    /** The fake's clock in seconds since the epoch (what `since` is in); it starts at 2026-01-01T00:00:00Z. */
    now(): number;
  };
  cloud: Cloud & Failing & {
    grant(grant: Grant): void;
    putInstance(instance: Instance): void;
    putGroup(group: SecurityGroup): void;
    instance(id: string): Instance | null;
    removeInstance(id: string): Instance | null;
    group(id: string): SecurityGroup | null;
    removeGroup(id: string): SecurityGroup | null;
  };
  /** What the plugin logged (`log`; `logs` is the node's logs capability). */
  logLines(): { level: Level; message: string }[];
  /** The plugin name denial messages use. */
  plugin(): string;
  /** Free the fake now (else when garbage collected); nothing to free once its instance trapped. */
  close(): void;
}

/** A context like the host's: a manual trigger on node "test-node"; `config` as an object or JSON text. */
export function testContext(
  plugin: string,
  config?: object | string,
  options?: { nodeName?: string; triggers?: Trigger[]; dryRun?: boolean },
): Context;

/** Where the fakes module is: $TEND_FAKES_WASM, else target/tend-fakes.wasm of the checkout. */
export function fakesPath(): string;

/** @internal The fakes instance new hosts are made on (the SDK's own tests trap it). */
export function fakesInstance(): { exports: WebAssembly.Exports; trapped: string | null };
