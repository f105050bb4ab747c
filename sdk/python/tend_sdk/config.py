"""Typed plugin config: the `[plugins.NAME.config]` table (the JSON in
`context.config`) read into a dataclass, with errors an operator can act on:

    [plugins.node-probe.config] url: expected a string, for example "http://127.0.0.1:10248/healthz"

Keys are the fields' names in kebab case (`expect_status` is `expect-status`);
a key no field names is refused (`urls: unknown key; expected one of url`, as
the JS SDK's `config.read` does); a field without a default is required; `key(example=...)` gives the example
the error shows (`{plugin}` in it becomes the plugin's name). Supported types: str, int, float, bool, list[T], dict,
Optional[T] and nested dataclasses.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from typing import Any

from .errors import Invalid
from .types import Context, _optional, kebab

_MISSING = dataclasses.MISSING


def key(*, example: Any = None, default: Any = _MISSING, default_factory: Any = _MISSING) -> Any:
    """A config field: its `example` appears in the error when it is missing or wrong."""
    return dataclasses.field(default=default, default_factory=default_factory, metadata={"example": example})


_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", dict: "a table"}


def _shape(hint: Any) -> str:
    inner = _optional(hint)
    if inner is not None:
        return _shape(inner)
    if typing.get_origin(hint) is list:
        return "a list"
    if dataclasses.is_dataclass(hint):
        return "a table"
    return _NAMES.get(typing.get_origin(hint) or hint, getattr(hint, "__name__", str(hint)))


def _fits(hint: Any, value: Any) -> bool:
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, typing.get_origin(hint) or hint)


class _Reader:
    def __init__(self, ctx: Context):
        self.plugin = ctx.plugin

    def error(self, path: str, why: str) -> Invalid:
        return Invalid(f"[plugins.{self.plugin}.config] {path}: {why}")

    def wrong(self, path: str, hint: Any, example: Any) -> Invalid:
        why = f"expected {_shape(hint)}"
        if isinstance(example, str):
            example = example.replace("{plugin}", self.plugin)
        if example is not None:
            why += f", for example {json.dumps(example)}"
        return self.error(path, why)

    def read(self, hint: Any, value: Any, path: str, example: Any = None) -> Any:
        inner = _optional(hint)
        if inner is not None:
            return None if value is None else self.read(inner, value, path, example)
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, dict):
                raise self.wrong(path, hint, example)
            return self.table(hint, value, path + ".")
        if typing.get_origin(hint) is list:
            if not isinstance(value, list):
                raise self.wrong(path, hint, example)
            (item,) = typing.get_args(hint)
            return [self.read(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
        if not _fits(hint, value):
            raise self.wrong(path, hint, example)
        return float(value) if hint is float else value

    def table(self, cls: type, table: dict, prefix: str) -> Any:
        hints = typing.get_type_hints(cls)
        fields = {kebab(f.name): f for f in dataclasses.fields(cls)}
        for name in table:
            if name not in fields:
                raise self.error(prefix + name, f"unknown key; expected one of {', '.join(fields)}")
        values = {}
        for name, f in fields.items():
            example = f.metadata.get("example")
            if name in table:
                values[f.name] = self.read(hints[f.name], table[name], prefix + name, example)
            elif f.default is _MISSING and f.default_factory is _MISSING:
                raise self.wrong(prefix + name, hints[f.name], example)
        return cls(**values)


def parse(ctx: Context, cls: type) -> Any:
    """`ctx.config` as dataclass `cls`, or `Invalid` naming the key to fix."""
    reader = _Reader(ctx)
    try:
        table = json.loads(ctx.config or "{}")
    except json.JSONDecodeError as e:
        raise reader.error(".", f"not JSON: {e}") from None
    if not isinstance(table, dict):
        raise reader.error(".", "expected a table")
    return reader.table(cls, table, "")


__all__ = ["key", "parse"]
