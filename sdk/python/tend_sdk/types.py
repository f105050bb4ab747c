"""The WIT records, enums and variants as Python types, and their two encodings.

Records are dataclasses with the WIT fields in snake case, enums are `Enum`s
whose values are the WIT case names, variants are `Variant`s (a case name and
an optional payload). The same classes cross both ways a plugin's calls go:

- inside the component, to and from the classes componentize-py generates
  (`to_wit`, `from_wit`: same class names, same field names);
- in tests, to and from the JSON of the fakes' ABI (`to_json`, `from_json`:
  WIT names in kebab case, `list<u8>` as base64), see sdk/fakes/README.md.

Both conversions are driven by these classes and their type hints. The
classes are generated from the WIT into `wit.py` (`cargo xtask gen`) and
re-exported here, so a record added to the WIT needs nothing by hand.
"""

from __future__ import annotations

import base64
import dataclasses
import types as _pytypes
import typing
from typing import Any

from . import wit
from ._wit_base import Variant, WitEnum
from .wit import *  # noqa: F401,F403  the generated WIT types, re-exported


def kebab(name: str) -> str:
    """`timeout_ms` -> `timeout-ms`."""
    return name.replace("_", "-")


#: The logs interface's records under names that say whose they are.
LogEntry, LogFilter, LogPage, LogSource = wit.Entry, wit.Filter, wit.Page, wit.Source

#: The conditions interface's records, likewise.
ConditionReport, HeldCondition = wit.Report, wit.Held

#: The WIT types (what `from tend_sdk import *` gives).
__all__ = [
    "WitEnum",
    "Variant",
    "LogEntry",
    "LogFilter",
    "LogPage",
    "LogSource",
    "ConditionReport",
    "HeldCondition",
] + wit.__all__


# --- the encodings -------------------------------------------------------------------------


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _optional(hint: Any) -> Any:
    """T of Optional[T], else None."""
    if typing.get_origin(hint) in (typing.Union, _pytypes.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0]
    return None


def to_json(value: Any) -> Any:
    """A value as the fakes' ABI writes it."""
    if isinstance(value, WitEnum):
        return value.value
    if isinstance(value, Variant):
        return value.case if value.value is None else {value.case: to_json(value.value)}
    if dataclasses.is_dataclass(value):
        return {kebab(f.name): to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


def _containers(hint: Any, value: Any, convert: Any) -> tuple[bool, Any]:
    """What `from_json` and `from_wit` share: none, optionals, lists and
    tuples, each item converted by `convert`. (False, None) for anything else."""
    if value is None:
        return True, None
    inner = _optional(hint)
    if inner is not None:
        return True, convert(inner, value)
    origin = typing.get_origin(hint)
    if origin is list:
        (item,) = typing.get_args(hint)
        return True, [convert(item, v) for v in value]
    if origin is tuple:
        return True, tuple(convert(h, v) for h, v in zip(typing.get_args(hint), value))
    return False, None


def from_json(hint: Any, value: Any) -> Any:
    """A value of type `hint` from the fakes' ABI."""
    done, converted = _containers(hint, value, from_json)
    if done:
        return converted
    if hint is bytes:
        return base64.b64decode(value)
    if isinstance(hint, type) and issubclass(hint, WitEnum):
        return hint(value)
    if isinstance(hint, type) and issubclass(hint, Variant):
        if isinstance(value, str):
            return hint(value)
        ((case, payload),) = value.items()
        return hint(case, from_json(hint.CASES[case], payload))
    if dataclasses.is_dataclass(hint):
        hints = _hints(hint)
        return hint(**{f.name: from_json(hints[f.name], value.get(kebab(f.name))) for f in dataclasses.fields(hint)})
    return value


def _pascal(case: str) -> str:
    return "".join(part.capitalize() for part in case.split("-"))


def to_wit(value: Any, module: Any) -> Any:
    """A value as componentize-py's classes of interface `module` have it."""
    if isinstance(value, WitEnum):
        return getattr(module, type(value).__name__)[value.name]
    if isinstance(value, Variant):
        cls = getattr(module, f"{type(value).__name__}_{_pascal(value.case)}")
        return cls() if value.value is None else cls(to_wit(value.value, module))
    if dataclasses.is_dataclass(value):
        cls = getattr(module, type(value).__name__)
        return cls(**{f.name: to_wit(getattr(value, f.name), module) for f in dataclasses.fields(value)})
    if isinstance(value, list):
        return [to_wit(v, module) for v in value]
    if isinstance(value, tuple):
        return tuple(to_wit(v, module) for v in value)
    return value


def from_wit(hint: Any, value: Any) -> Any:
    """A value of type `hint` from componentize-py's classes."""
    done, converted = _containers(hint, value, from_wit)
    if done:
        return converted
    if hint is bytes:
        return bytes(value)
    if isinstance(hint, type) and issubclass(hint, WitEnum):
        return hint[value.name]
    if isinstance(hint, type) and issubclass(hint, Variant):
        case = type(value).__name__.split("_", 1)[1]
        case = next(c for c in hint.CASES if _pascal(c) == case)
        payload = getattr(value, "value", None)
        return hint(case, None if payload is None else from_wit(hint.CASES[case], payload))
    if dataclasses.is_dataclass(hint):
        hints = _hints(hint)
        return hint(**{f.name: from_wit(hints[f.name], getattr(value, f.name)) for f in dataclasses.fields(hint)})
    return value
