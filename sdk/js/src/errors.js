// The WIT `error` variant as exceptions: one class per case, all extending
// `TendError`, so a plugin catches `NotFoundError` by class and reads the
// host's operator-facing text in `.message` (the grant to add, the key to fix).

/** Any error a capability or a reconcile reports; `.kind` is its WIT case. */
export class TendError extends Error {
  /**
   * Why the host held back, by name: `["window"]`, `["pdb:default/web-pdb"]`.
   * A refusal (`budget-exhausted`) begins with its reasons in brackets,
   * "[window] fleet budget reboots: outside its maintenance windows", so a
   * plugin can tell a closed window from a PodDisruptionBudget without parsing
   * the prose. Read as the host reads them (rules/src/reason.rs): at most 8,
   * stopping at the first tag that is not a known reason; empty when the
   * message begins with none.
   */
  get reasons() {
    return reasonsAtStart(this.message);
  }
}

/** How many reasons one message names at most. */
const MAX_REASONS = 8;
/** The longest tag read: "pdb:", a namespace, "/" and a name. */
const MAX_TAG = 4 + 63 + 1 + 253;
const PLAIN_REASONS = new Set(["budget", "window", "health", "limit", "breaker", "stale-state", "unverified"]);
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

const isDnsLabel = (text) => text.length <= 63 && DNS_LABEL.test(text);
const isKubeName = (text) => text.length <= 253 && text.split(".").every(isDnsLabel);

/** A reason's name: a plain one, or "pdb:NAMESPACE/NAME" ("NAMESPACE/*"). */
function isReason(name) {
  if (PLAIN_REASONS.has(name)) return true;
  if (!name.startsWith("pdb:")) return false;
  const slash = name.indexOf("/");
  if (slash < 0) return false;
  const namespace = name.slice("pdb:".length, slash);
  const budget = name.slice(slash + 1);
  return isDnsLabel(namespace) && (budget === "*" || isKubeName(budget));
}

/** The reasons `message` begins with, after "budget-exhausted: " if it is there. */
function reasonsAtStart(message) {
  let rest = message.startsWith("budget-exhausted: ") ? message.slice("budget-exhausted: ".length) : message;
  const reasons = [];
  while (reasons.length < MAX_REASONS && rest.startsWith("[")) {
    const end = rest.indexOf("]");
    const name = rest.slice(1, end);
    if (end < 0 || name.length > MAX_TAG || !isReason(name)) break;
    reasons.push(name);
    rest = rest.slice(end + 1);
    if (rest.startsWith(" ")) rest = rest.slice(1);
  }
  return reasons;
}

/** `[kind, class name]` of every case of the WIT `error` variant. */
const CASES = [
  ["denied", "DeniedError"],
  ["not-found", "NotFoundError"],
  ["conflict", "ConflictError"],
  ["unavailable", "UnavailableError"],
  ["timeout", "TimeoutError"],
  ["invalid", "InvalidError"],
  ["budget-exhausted", "BudgetExhaustedError"],
  ["other", "OtherError"],
];

const BY_KIND = {};
for (const [kind, name] of CASES) {
  const cls = { [name]: class extends TendError {} }[name];
  Object.defineProperty(cls.prototype, "kind", { value: kind });
  Object.defineProperty(cls.prototype, "name", { value: name });
  BY_KIND[kind] = cls;
}

export const DeniedError = BY_KIND["denied"];
export const NotFoundError = BY_KIND["not-found"];
export const ConflictError = BY_KIND["conflict"];
export const UnavailableError = BY_KIND["unavailable"];
export const TimeoutError = BY_KIND["timeout"];
export const InvalidError = BY_KIND["invalid"];
export const BudgetExhaustedError = BY_KIND["budget-exhausted"];
export const OtherError = BY_KIND["other"];

/** The `TendError` subclass instance for a WIT error case. */
export function errorFromKind(kind, message) {
  const cls = BY_KIND[kind];
  if (!cls) throw new TypeError(`no WIT error case ${JSON.stringify(kind)}; expected one of ${Object.keys(BY_KIND).join(", ")}`);
  return new cls(message);
}
