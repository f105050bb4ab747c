"""The hand-written bases of the classes `wit.py` generates from the WIT:
`WitEnum`, `Variant`, `WitFunction`, and the methods a few records carry.
No imports from the rest of the SDK at load time, so `wit.py` and `types.py`
(which re-exports both) import it without a cycle."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Optional


class WitEnum(enum.Enum):
    """A WIT enum: each member's value is its WIT case name."""


class Variant:
    """A WIT variant: `case` (its WIT name) and, for cases that carry one, `value`.

    Subclasses list their cases in `CASES`, each with its payload type or None,
    and get one constructor per case: `Protocol.tcp()`, `Remote.cidr(text)`.
    """

    CASES: dict[str, Any] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for case, payload in cls.CASES.items():
            name = case.replace("-", "_")
            if payload is None:
                setattr(cls, name, classmethod(lambda c, case=case: c(case)))
            else:
                setattr(cls, name, classmethod(lambda c, value, case=case: c(case, value)))

    def __init__(self, case: str, value: Any = None):
        if case not in self.CASES:
            raise ValueError(f"{type(self).__name__}: no case {case!r}; expected one of {list(self.CASES)}")
        if (self.CASES[case] is None) != (value is None):
            raise ValueError(f"{type(self).__name__}.{case}: the payload must be given exactly when the case has one")
        self.case = case
        self.value = value

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and (other.case, other.value) == (self.case, self.value)

    def __hash__(self) -> int:
        return hash((self.case, self.value))

    def __repr__(self) -> str:
        payload = "" if self.value is None else repr(self.value)
        return f"{type(self).__name__}.{self.case.replace('-', '_')}({payload})"


@dataclass(frozen=True)
class WitFunction:
    """One imported function: its WIT name, its parameters (WIT name, Python
    type) in WIT order, and the Python type of its answer."""

    name: str
    params: list[tuple[str, Any]]
    result: Any


class ObjectKeyMethods:
    """`ObjectKey.cluster(...)`, `ObjectKey.namespaced(...)`."""

    @classmethod
    def cluster(cls, api_version: str, kind: str, name: str) -> Any:
        return cls(api_version, kind, None, name)

    @classmethod
    def namespaced(cls, api_version: str, kind: str, namespace: str, name: str) -> Any:
        return cls(api_version, kind, namespace, name)


class ObjectListMethods:
    """A page of `Kube.list`, whose `items` it has parsed from the WIT's JSON text."""

    items: list

    def names(self) -> list[Optional[str]]:
        return [item.get("metadata", {}).get("name") for item in self.items]


class ContextMethods:
    """What a reconcile asks of its `Context`."""

    triggers: list

    def config_as(self, cls: type) -> Any:
        """The config JSON as dataclass `cls` (see `tend_sdk.config`)."""
        from .config import parse

        return parse(self, cls)

    def triggered_by(self, kind: str) -> bool:
        return any(t.kind == kind for t in self.triggers)


class OutcomeMethods:
    """`Outcome.healthy(message)` and its two siblings."""

    @classmethod
    def healthy(cls, message: str) -> Any:
        return cls._of("healthy", message)

    @classmethod
    def progressing(cls, message: str) -> Any:
        return cls._of("progressing", message)

    @classmethod
    def degraded(cls, message: str) -> Any:
        return cls._of("degraded", message)

    @classmethod
    def _of(cls, health: str, message: str) -> Any:
        from .wit import Health

        return cls(Health(health), message)
