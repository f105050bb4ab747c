/** The WIT `error` cases. */
export type ErrorKind = "denied" | "not-found" | "conflict" | "unavailable" | "timeout" | "invalid" | "budget-exhausted" | "other";

/** Any error a capability or a reconcile reports; `message` is the host's text for operators. */
export class TendError extends Error {
  readonly kind: ErrorKind;
  /**
   * The reasons the message begins with, by name ("window", "pdb:default/web-pdb",
   * ...): a refusal says in brackets why the host held back. At most 8; empty when none.
   */
  readonly reasons: string[];
}
/** Not granted: the message names the grant to add. */
export class DeniedError extends TendError { readonly kind: "denied"; }
/** The file, key, unit or resource does not exist. */
export class NotFoundError extends TendError { readonly kind: "not-found"; }
/** The target changed under us or is in a conflicting state. */
export class ConflictError extends TendError { readonly kind: "conflict"; }
/** The backend (a peer, a service, the network) could not be reached. */
export class UnavailableError extends TendError { readonly kind: "unavailable"; }
/** The call, or the whole reconcile, ran past its deadline. */
export class TimeoutError extends TendError { readonly kind: "timeout"; }
/** The request itself is malformed (bad path, bad URL, bad config). */
export class InvalidError extends TendError { readonly kind: "invalid"; }
/** A host-wide budget for destructive operations is used up for now. */
export class BudgetExhaustedError extends TendError { readonly kind: "budget-exhausted"; }
export class OtherError extends TendError { readonly kind: "other"; }

/** The TendError subclass instance of a WIT error case. */
export function errorFromKind(kind: ErrorKind, message: string): TendError;
