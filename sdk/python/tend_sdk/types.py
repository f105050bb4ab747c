"""The WIT records, enums and variants as Python types, and their two encodings.

Records are dataclasses with the WIT fields in snake case, enums are `Enum`s
whose values are the WIT case names, variants are `Variant`s (a case name and
an optional payload). The same classes cross both ways a plugin's calls go:

- inside the component, to and from the classes componentize-py generates
  (`to_wit`, `from_wit`: same class names, same field names);
- in tests, to and from the JSON of the fakes' ABI (`to_json`, `from_json`:
  WIT names in kebab case, `list<u8>` as base64), see sdk/fakes/README.md.

Both conversions are driven by these classes and their type hints, so a
record added to the WIT is one dataclass here.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import types as _pytypes
import typing
from dataclasses import dataclass, field
from typing import Any, Optional


def kebab(name: str) -> str:
    """`timeout_ms` -> `timeout-ms`."""
    return name.replace("_", "-")


class WitEnum(enum.Enum):
    """A WIT enum: each member's value is its WIT case name."""


class Variant:
    """A WIT variant: `case` (its WIT name) and, for cases that carry one, `value`.

    Subclasses list their cases in `CASES`, each with its payload type or None.
    """

    CASES: dict[str, Any] = {}

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


# --- files ---------------------------------------------------------------------------------


class FileKind(WitEnum):
    FILE = "file"
    DIRECTORY = "directory"
    SYMLINK = "symlink"
    OTHER = "other"


@dataclass
class Metadata:
    kind: FileKind
    size: int
    mode: int
    modified_ms: Optional[int] = None


@dataclass
class DirEntry:
    name: str
    kind: FileKind


# --- http ----------------------------------------------------------------------------------


@dataclass
class Request:
    url: str
    method: str = "GET"
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: Optional[bytes] = None
    timeout_ms: Optional[int] = None


@dataclass
class Response:
    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""


# --- systemd -------------------------------------------------------------------------------


@dataclass
class UnitStatus:
    name: str
    load_state: str = ""
    active_state: str = ""
    sub_state: str = ""
    unit_file_state: str = ""
    fragment_path: Optional[str] = None
    drop_in_paths: list[str] = field(default_factory=list)
    need_daemon_reload: bool = False
    active_enter_ms: Optional[int] = None
    n_restarts: Optional[int] = None


class JobResult(WitEnum):
    DONE = "done"
    FAILED = "failed"
    CANCELED = "canceled"
    TIMEOUT = "timeout"
    DEPENDENCY = "dependency"
    SKIPPED = "skipped"


# --- cri -----------------------------------------------------------------------------------


class SandboxState(WitEnum):
    READY = "ready"
    NOT_READY = "not-ready"


@dataclass
class PodSandbox:
    id: str
    pod_name: str = ""
    namespace: str = ""
    uid: str = ""
    attempt: int = 0
    state: SandboxState = SandboxState.READY
    created_at_ns: int = 0
    labels: list[tuple[str, str]] = field(default_factory=list)
    annotations: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class SandboxFilter:
    id: Optional[str] = None
    state: Optional[SandboxState] = None
    labels: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class SandboxStatus:
    sandbox: PodSandbox
    ip: Optional[str] = None
    additional_ips: list[str] = field(default_factory=list)


class ContainerState(WitEnum):
    CREATED = "created"
    RUNNING = "running"
    EXITED = "exited"
    UNKNOWN = "unknown"


@dataclass
class Container:
    id: str
    pod_sandbox_id: str = ""
    name: str = ""
    attempt: int = 0
    image: str = ""
    image_ref: str = ""
    state: ContainerState = ContainerState.UNKNOWN
    created_at_ns: int = 0
    labels: list[tuple[str, str]] = field(default_factory=list)
    annotations: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Image:
    id: str
    repo_tags: list[str] = field(default_factory=list)
    repo_digests: list[str] = field(default_factory=list)
    size_bytes: int = 0


@dataclass
class RuntimeVersion:
    runtime_name: str
    runtime_version: str
    runtime_api_version: str


# --- kube ----------------------------------------------------------------------------------


@dataclass
class ObjectKey:
    api_version: str
    kind: str
    namespace: Optional[str]
    name: str

    @classmethod
    def cluster(cls, api_version: str, kind: str, name: str) -> "ObjectKey":
        return cls(api_version, kind, None, name)

    @classmethod
    def namespaced(cls, api_version: str, kind: str, namespace: str, name: str) -> "ObjectKey":
        return cls(api_version, kind, namespace, name)


@dataclass
class ListParams:
    label_selector: Optional[str] = None
    field_selector: Optional[str] = None
    limit: Optional[int] = None
    continue_token: Optional[str] = None


@dataclass
class ObjectList:
    """One page of a list; `items` are the objects (parsed from the WIT's JSON text)."""

    items: list
    continue_token: Optional[str] = None
    resource_version: str = ""

    def names(self) -> list[str]:
        return [item.get("metadata", {}).get("name") for item in self.items]


class PatchType(WitEnum):
    MERGE = "merge"
    JSON = "json"
    APPLY = "apply"


class EventType(WitEnum):
    NORMAL = "normal"
    WARNING = "warning"


# --- cloud ---------------------------------------------------------------------------------


class InstanceState(WitEnum):
    PENDING = "pending"
    RUNNING = "running"
    REBOOTING = "rebooting"
    STOPPED = "stopped"
    DELETING = "deleting"
    TERMINATED = "terminated"
    ERROR = "error"
    UNKNOWN = "unknown"


@dataclass
class Instance:
    id: str
    name: str = ""
    state: InstanceState = InstanceState.UNKNOWN
    status: str = ""
    task_state: Optional[str] = None
    created_at_ms: int = 0
    zone: Optional[str] = None
    private_addresses: list[str] = field(default_factory=list)
    public_addresses: list[str] = field(default_factory=list)
    security_groups: list[str] = field(default_factory=list)
    tags: list[tuple[str, str]] = field(default_factory=list)
    provider_id: str = ""


@dataclass
class OwnerTag:
    key: str
    value: str


class Direction(WitEnum):
    INGRESS = "ingress"
    EGRESS = "egress"


class EtherType(WitEnum):
    IPV4 = "ipv4"
    IPV6 = "ipv6"


class Protocol(Variant):
    """`Protocol.tcp()`, `Protocol.number(47)`."""

    CASES = {"any": None, "tcp": None, "udp": None, "icmp": None, "icmpv6": None, "number": int}


@dataclass
class PortRange:
    min: int
    max: int


class Remote(Variant):
    """`Remote.cidr("10.244.0.0/16")`, `Remote.group("sg-...")`."""

    CASES = {"cidr": str, "group": str}


@dataclass
class Rule:
    direction: Direction
    ether_type: EtherType
    protocol: Protocol
    remote: Remote
    ports: Optional[PortRange] = None
    description: Optional[str] = None


@dataclass
class SecurityGroup:
    id: str
    name: str = ""
    description: str = ""
    rules: list[Rule] = field(default_factory=list)


# --- log and the reconciler ----------------------------------------------------------------


class Level(WitEnum):
    TRACE = "trace"
    DEBUG = "debug"
    INFO = "info"
    WARN = "warn"
    ERROR = "error"


class Health(WitEnum):
    HEALTHY = "healthy"
    PROGRESSING = "progressing"
    DEGRADED = "degraded"


@dataclass
class Trigger:
    kind: str
    subject: Optional[str] = None


@dataclass
class Context:
    """Everything a plugin knows about one reconcile."""

    plugin: str
    config: str = "{}"
    triggers: list[Trigger] = field(default_factory=lambda: [Trigger("manual")])
    node_name: str = "test-node"
    dry_run: bool = False

    def config_as(self, cls: type) -> Any:
        """The config JSON as dataclass `cls` (see `tend_sdk.config`)."""
        from .config import parse

        return parse(self, cls)

    def triggered_by(self, kind: str) -> bool:
        return any(t.kind == kind for t in self.triggers)


@dataclass
class Outcome:
    health: Health
    message: str
    requeue_after_ms: Optional[int] = None

    @classmethod
    def healthy(cls, message: str) -> "Outcome":
        return cls(Health.HEALTHY, message)

    @classmethod
    def progressing(cls, message: str) -> "Outcome":
        return cls(Health.PROGRESSING, message)

    @classmethod
    def degraded(cls, message: str) -> "Outcome":
        return cls(Health.DEGRADED, message)


@dataclass
class PluginInfo:
    name: str
    version: str
    summary: str


def _variant_constructors(cls: type[Variant]) -> None:
    """`Protocol.tcp()`, `Remote.cidr(text)`: one constructor per case."""
    for case, payload in cls.CASES.items():
        name = case.replace("-", "_")
        if payload is None:
            setattr(cls, name, classmethod(lambda c, case=case: c(case)))
        else:
            setattr(cls, name, classmethod(lambda c, value, case=case: c(case, value)))


_variant_constructors(Protocol)
_variant_constructors(Remote)


#: The WIT types (what `from tend_sdk import *` gives).
__all__ = [
    name
    for name, value in list(globals().items())
    if isinstance(value, type) and value.__module__ == __name__ and not name.startswith("_")
]


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
