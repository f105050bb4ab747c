// The WIT `error` variant as exceptions: one class per case, all extending
// `TendError`, so a plugin catches `NotFoundError` by class and reads the
// host's operator-facing text in `.message` (the grant to add, the key to fix).

/** Any error a capability or a reconcile reports; `.kind` is its WIT case. */
export class TendError extends Error {}

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
