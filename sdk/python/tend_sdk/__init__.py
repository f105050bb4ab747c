"""Write Tend plugins in Python.

A plugin is two functions, `describe()` and `reconcile(ctx, host)`, exported
by `Reconciler = tend_sdk.export(describe, reconcile)` in the `app.py` that
componentize-py builds into a component. `reconcile` reaches the node only
through the `Host` it is handed (typed wrappers of every WIT interface), so
its unit tests hand it `tend_sdk.testing.FakeHost` instead: the Rust SDK's
fakes, with the host's own grant rules and messages.
"""

from .component import export
from .errors import (
    BudgetExhausted,
    Conflict,
    Denied,
    Invalid,
    NotFound,
    Other,
    TendError,
    Timeout,
    Unavailable,
)
from .host import Host
from . import types as _types
from .types import *  # noqa: F401,F403  the WIT records, enums and variants

__all__ = [
    "export",
    "Host",
    "TendError",
    "Denied",
    "NotFound",
    "Conflict",
    "Unavailable",
    "Timeout",
    "Invalid",
    "BudgetExhausted",
    "Other",
] + _types.__all__
