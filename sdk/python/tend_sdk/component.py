"""Inside the component: the `Host` over componentize-py's generated imports,
and `export`, which turns two functions into the `reconciler` export.

componentize-py generates `wit_world` only when it builds the component, so
it is imported only by `export`, which app.py calls while componentize-py
builds (snapshots) the component: modules first imported later, during a
reconcile, are not in the component. The rest of the SDK (and the plugin's
unit tests against `tend_sdk.testing`) never needs it.

    # app.py
    from tend_sdk import export
    from node_probe import describe, reconcile
    Reconciler = export(describe, reconcile)
"""

from __future__ import annotations

import importlib
import traceback
from typing import Any, Callable

from . import host as _host
from .errors import TendError, from_kind
from .types import Context, Outcome, PluginInfo, Trigger, from_wit, to_wit


#: The interfaces of world `plugin`.
INTERFACES = ("types", "log", "state", "files", "http", "systemd", "cri", "metrics", "kube", "cloud")


def _bindings() -> dict[str, Any]:
    """componentize-py's modules of every interface, and its `Err`."""
    modules = {name: importlib.import_module(f"wit_world.imports.{name}") for name in INTERFACES}
    modules["Err"] = importlib.import_module("componentize_py_types").Err
    return modules


def _error_kind(value: Any) -> str:
    """`Error_NotFound` -> "not-found"."""
    case = type(value).__name__.split("_", 1)[1]
    return "".join("-" + c.lower() if c.isupper() else c for c in case).lstrip("-")


class ComponentBackend:
    """Calls the host's imports through componentize-py's bindings."""

    def __init__(self, bindings: dict[str, Any]):
        self._bindings = bindings

    def call(self, cap: str, fn: str, args: list[tuple[str, Any]], returns: Any) -> Any:
        module = self._bindings[cap]
        function = getattr(module, fn.replace("-", "_"))
        try:
            answer = function(*[to_wit(value, module) for _, value in args])
        except self._bindings["Err"] as err:
            raise from_kind(_error_kind(err.value), err.value.value) from None
        if isinstance(returns, _host.Results):
            return [
                from_wit(returns.of, r.value) if type(r).__name__ == "Ok" else from_kind(_error_kind(r.value), r.value.value)
                for r in answer
            ]
        return None if returns is None else from_wit(returns, answer)


def _wit_error(types: Any, error: TendError) -> Any:
    case = "".join(part.capitalize() for part in error.kind.split("-"))
    return getattr(types, f"Error_{case}")(error.message)


def export(describe: Callable[[], PluginInfo], reconcile: Callable[[Context, _host.Host], Outcome]) -> type:
    """The class componentize-py exports as `reconciler`: assign it to `Reconciler` in app.py.

    A `TendError` raised by `reconcile` fails the reconcile with that error;
    any other exception fails it as `other`, with its traceback's last lines.
    """

    bindings = _bindings()
    types, Err = bindings["types"], bindings["Err"]

    class Reconciler:
        def describe(self) -> Any:
            info = describe()
            return types.PluginInfo(info.name, info.version, info.summary)

        def reconcile(self, ctx: Any) -> Any:
            context = Context(
                plugin=ctx.plugin,
                config=ctx.config,
                triggers=[Trigger(t.kind, t.subject) for t in ctx.triggers],
                node_name=ctx.node_name,
                dry_run=ctx.dry_run,
            )
            try:
                outcome = reconcile(context, _host.Host(ComponentBackend(bindings)))
            except TendError as error:
                raise Err(_wit_error(types, error)) from None
            except Exception as error:  # a bug in the plugin: report it rather than trap
                where = "".join(traceback.format_exception(error)[-3:]).strip()
                raise Err(types.Error_Other(f"the plugin raised {where}")) from None
            return to_wit(outcome, types)

    return Reconciler
