"""The WIT `error` variant as exceptions: one class per case, all `TendError`.

Every capability call raises one of these; a reconcile that raises one fails
with that error (its message is what the operator reads, so it says what to
do next). Catch the case you handle: `except NotFound:`.
"""

import re


class TendError(Exception):
    """An error of a capability call or of a reconcile. `kind` is the WIT case name."""

    kind = "other"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    @property
    def reasons(self) -> list[str]:
        """Why the host held back, by name: `["window"]`, `["pdb:default/web-pdb"]`.

        A refusal (`budget-exhausted`) begins with its reasons in brackets,
        "[window] fleet budget reboots: outside its maintenance windows", so a
        plugin can tell a closed window from a PodDisruptionBudget without
        parsing the prose. Read as the host reads them (rules/src/reason.rs):
        at most 8, stopping at the first tag that is not a known reason; empty
        when the message begins with none.
        """
        return _reasons_at_start(self.message)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.message == self.message

    def __hash__(self) -> int:
        return hash((self.kind, self.message))


#: How many reasons one message names at most.
MAX_REASONS = 8
#: The longest tag read: "pdb:", a namespace, "/" and a name.
_MAX_TAG = 4 + 63 + 1 + 253
_PLAIN_REASONS = frozenset(
    {"budget", "window", "health", "limit", "breaker", "stale-state", "unverified"}
)
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def _is_dns_label(text: str) -> bool:
    return len(text) <= 63 and _DNS_LABEL.fullmatch(text) is not None


def _is_kube_name(text: str) -> bool:
    return len(text) <= 253 and all(_is_dns_label(label) for label in text.split("."))


def _is_reason(name: str) -> bool:
    """A reason's name: a plain one, or "pdb:NAMESPACE/NAME" ("NAMESPACE/*")."""
    if name in _PLAIN_REASONS:
        return True
    if not name.startswith("pdb:"):
        return False
    namespace, slash, budget = name[len("pdb:"):].partition("/")
    return bool(slash) and _is_dns_label(namespace) and (budget == "*" or _is_kube_name(budget))


def _reasons_at_start(message: str) -> list[str]:
    """The reasons `message` begins with, after "budget-exhausted: " if it is there."""
    rest = message.removeprefix("budget-exhausted: ")
    reasons: list[str] = []
    while len(reasons) < MAX_REASONS and rest.startswith("["):
        end = rest.find("]")
        name = rest[1:end]
        if end < 0 or len(name) > _MAX_TAG or not _is_reason(name):
            break
        reasons.append(name)
        rest = rest[end + 1:].removeprefix(" ")
    return reasons


class Denied(TendError):
    """Not granted. The message names the grant to add to the plugin's config."""

    kind = "denied"


class NotFound(TendError):
    """The file, key, unit or resource does not exist."""

    kind = "not-found"


class Conflict(TendError):
    """The target changed under us or is in a conflicting state."""

    kind = "conflict"


class Unavailable(TendError):
    """The backend (a peer, a service, the network) could not be reached."""

    kind = "unavailable"


class Timeout(TendError):
    """The call, or the whole reconcile, ran past its deadline."""

    kind = "timeout"


class Invalid(TendError):
    """The request itself is malformed (bad path, bad URL, bad config)."""

    kind = "invalid"


class BudgetExhausted(TendError):
    """A host-wide budget for destructive operations is used up for now."""

    kind = "budget-exhausted"


class Other(TendError):
    kind = "other"


#: Each class by its WIT case name.
BY_KIND = {
    cls.kind: cls
    for cls in (Denied, NotFound, Conflict, Unavailable, Timeout, Invalid, BudgetExhausted, Other)
}


def from_kind(kind: str, message: str) -> TendError:
    """The exception of WIT case `kind` ("not-found") with `message`."""
    return BY_KIND.get(kind, Other)(message)
