"""The wrappers hold to the WIT: every function a plugin imports
(`tend_sdk.wit.FUNCTIONS`, generated from `wit/` and held current by xtask's
`the_generated_files_are_current`) has a method (its name in snake case) on
the capability's wrapper of `Host`, which calls it by its WIT name with its
WIT parameters in order and asks for the answer's Python type. So a function
or capability added to `wit/` fails here until Python can call it."""

import collections.abc
import dataclasses
import inspect
import types
import typing
from typing import Any

import pytest

from tend_sdk.errors import TendError
from tend_sdk.host import Host, Results
from tend_sdk.types import Variant, WitEnum
from tend_sdk.wit import FUNCTIONS


def sample(hint: Any) -> Any:
    """Some value of type `hint`: enough to call a wrapper or answer it."""
    origin = typing.get_origin(hint)
    if hint is None or hint is type(None):
        return None
    if origin in (typing.Union, types.UnionType):
        return sample(next(a for a in typing.get_args(hint) if a is not type(None)))
    if origin in (list, collections.abc.Iterable):
        return []
    if origin is tuple:
        return tuple(sample(a) for a in typing.get_args(hint))
    if hint is Any or origin is collections.abc.Mapping or hint is collections.abc.Mapping:
        return {}
    if isinstance(hint, type) and issubclass(hint, WitEnum):
        return next(iter(hint))
    if isinstance(hint, type) and issubclass(hint, Variant):
        case, payload = next(iter(hint.CASES.items()))
        return hint(case, None if payload is None else sample(payload))
    if dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        required = [f for f in dataclasses.fields(hint) if f.default is f.default_factory is dataclasses.MISSING]
        return hint(**{f.name: sample(hints[f.name]) for f in required})
    return {bool: True, int: 1, float: 1.0, str: "{}", bytes: b"x"}[hint]


class Recording:
    """A backend that records each call and answers a sample of its type."""

    def __init__(self):
        self.calls = []

    def call(self, cap, fn, args, returns):
        if isinstance(returns, Results):
            returns = list[typing.Union[returns.of, TendError]]
        self.calls.append((cap, fn, [name for name, _ in args], returns))
        return sample(returns)


def wrapper(host: Host, interface: str, function: str) -> Any:
    if interface == "log":
        # `log.log` is Host.log itself.
        return host.log
    return getattr(getattr(host, interface.replace("-", "_"), None), function.replace("-", "_"), None)


def test_every_imported_wit_function_has_a_wrapper():
    host = Host(backend=Recording())
    assert sum(len(f) for f in FUNCTIONS.values()) >= 47, FUNCTIONS
    missing = [f"{i}.{f.name}" for i, fs in FUNCTIONS.items() for f in fs if not callable(wrapper(host, i, f.name))]
    assert not missing, f"no Python wrapper for {missing}: add it to tend_sdk/host.py"


@pytest.mark.parametrize(
    "interface,function", [(i, f) for i, fs in FUNCTIONS.items() for f in fs], ids=lambda x: getattr(x, "name", x)
)
def test_each_wrapper_calls_its_wit_function_with_the_wit_parameters_and_result(interface, function):
    backend = Recording()
    method = wrapper(Host(backend=backend), interface, function.name)
    hints = typing.get_type_hints(method)
    required = [p for p in inspect.signature(method).parameters.values() if p.default is inspect.Parameter.empty]
    method(**{p.name: sample(hints[p.name]) for p in required})
    params = [name for name, _ in function.params]
    assert backend.calls == [(interface, function.name, params, function.result)]
