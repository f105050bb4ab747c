"""The WIT `error` variant as exceptions: one class per case, all `TendError`.

Every capability call raises one of these; a reconcile that raises one fails
with that error (its message is what the operator reads, so it says what to
do next). Catch the case you handle: `except NotFound:`.
"""


class TendError(Exception):
    """An error of a capability call or of a reconcile. `kind` is the WIT case name."""

    kind = "other"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.message == self.message

    def __hash__(self) -> int:
        return hash((self.kind, self.message))


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
