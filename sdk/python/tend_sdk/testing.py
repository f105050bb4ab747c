"""Fakes of every capability for plugin unit tests, answering as the host does.

`FakeHost` is a `Host` whose calls go to the Rust SDK's fakes, compiled to
wasm (`tend-fakes`, sdk/fakes/README.md) and run here in wasmtime: grant
decisions, error kinds and messages come from the host's own rules crate, not
from a Python copy that could drift. Each capability attribute has the fake's
setup methods next to the plugin's calls:

    host = FakeHost("node-probe")
    host.files.grant("/var/lib/node-probe", write=True)
    host.http.grant("http://127.0.0.1:10248/healthz")
    host.http.status("http://127.0.0.1:10248/healthz", 200)
    host.kube.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}})

The module is found at `$TEND_FAKES_WASM`, else `target/tend-fakes.wasm` of
the Tend checkout this SDK lives in (`cargo xtask lang python` builds it).
Needs the `wasmtime` package (the `fakes` extra).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Union

from . import host as _host
from .errors import TendError, from_kind
from .types import (
    Container,
    EventType,
    Instance,
    JobResult,
    Level,
    ObjectKey,
    PatchType,
    PodSandbox,
    Request,
    Response,
    SandboxState,
    SandboxStatus,
    SecurityGroup,
    UnitStatus,
    from_json,
    to_json,
)


class FakesError(RuntimeError):
    """The fakes could not be loaded, were misused (a setup call refused, a
    host used after its instance trapped): the message says what to fix. Not
    a `TendError`, so a plugin's `except TendError` never swallows it."""


def wasm_path() -> Path:
    """Where the fakes module is: `$TEND_FAKES_WASM`, else the checkout's target/tend-fakes.wasm."""
    env = os.environ.get("TEND_FAKES_WASM")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "target" / "tend-fakes.wasm"


class _Module:
    """The fakes module in one wasmtime instance, shared by every FakeHost."""

    _shared: Optional["_Module"] = None

    @classmethod
    def shared(cls) -> "_Module":
        if cls._shared is None:
            cls._shared = cls(wasm_path())
        return cls._shared

    def __init__(self, path: Path):
        try:
            import wasmtime
        except ImportError as e:
            raise FakesError("tend_sdk.testing needs wasmtime: pip install 'wasmtime==48.0.0'") from e
        if not path.is_file():
            raise FakesError(
                f"no fakes module at {path}: build it with `cargo xtask lang python`, "
                "or point TEND_FAKES_WASM at a tend-fakes.wasm"
            )
        self._wasmtime = wasmtime
        self.trapped: Optional[str] = None  # why this instance is gone, once it trapped
        engine = wasmtime.Engine()
        self._store = wasmtime.Store(engine)
        instance = wasmtime.Instance(self._store, wasmtime.Module.from_file(engine, str(path)), [])
        exports = instance.exports(self._store)
        self._memory = exports["memory"]
        self._alloc, self._free = exports["tend_alloc"], exports["tend_free"]
        self._call, self._panic = exports["tend_call"], exports["tend_panic"]

    def _take(self, packed: int) -> str:
        """The answer at `ptr << 32 | len`, freed."""
        packed &= 0xFFFF_FFFF_FFFF_FFFF
        ptr, size = packed >> 32, packed & 0xFFFF_FFFF
        text = bytes(self._memory.read(self._store, ptr, ptr + size)).decode()
        self._free(self._store, ptr, size)
        return text

    def request(self, request: dict) -> dict:
        if self.trapped is not None:
            raise FakesError(
                f"tend-fakes: this FakeHost's fakes instance trapped earlier ({self.trapped}); "
                "it is gone with every host made on it: make a new FakeHost"
            )
        data = json.dumps(request, separators=(",", ":")).encode()
        ptr = self._alloc(self._store, len(data))
        if ptr == 0:
            raise FakesError(f"tend-fakes refused a request of {len(data)} bytes (at most 16 MiB)")
        self._memory.write(self._store, data, ptr)
        try:
            return json.loads(self._take(self._call(self._store, ptr, len(data))))
        except self._wasmtime.Trap as trap:
            packed = self._panic(self._store)
            message = self._take(packed) if packed else str(trap)
            # Never used again: its hosts fail (naming the trap's last line), new ones get a new instance.
            self.trapped = ([line.strip() for line in message.splitlines() if line.strip()] or ["a trap"])[-1]
            if _Module._shared is self:
                _Module._shared = None
            raise FakesError(f"tend-fakes trapped (a bug in tend-fakes, please report it): {message}") from trap


class _FakeBackend:
    """Plugin calls and setup calls of one fake host, through the module."""

    def __init__(self, plugin: str):
        # The instance this host lives on, for good: after a trap its handle
        # means nothing on the next instance, so calls fail instead.
        self._module = _Module.shared()
        self.id = self._ok(self._module.request({"op": "new", "plugin": plugin}))

    @staticmethod
    def _ok(answer: dict) -> Any:
        if "misuse" in answer:
            raise FakesError(answer["misuse"])
        if "err" in answer:
            raise from_kind(answer["err"]["kind"], answer["err"]["message"])
        return answer["ok"]

    def call(self, cap: str, fn: str, args: list[tuple[str, Any]], returns: Any) -> Any:
        request = {"op": "call", "host": self.id, "cap": cap, "fn": fn, "args": {k: to_json(v) for k, v in args}}
        ok = self._ok(self._module.request(request))
        if isinstance(returns, _host.Results):
            return [
                from_json(returns.of, r["ok"]) if "ok" in r else from_kind(r["err"]["kind"], r["err"]["message"])
                for r in ok
            ]
        return None if returns is None else from_json(returns, ok)

    def setup(self, fake: str, fn: str, **args: Any) -> Any:
        request = {
            "op": "setup",
            "host": self.id,
            "fake": fake,
            "fn": fn,
            "args": {k.replace("_", "-"): to_json(v) for k, v in args.items()},
        }
        return self._ok(self._module.request(request))

    def drop(self) -> None:
        # Only on the instance that made the host, and only while it lives.
        if self._module.trapped is None:
            self._module.request({"op": "drop", "host": self.id})


def _error(error: Optional[TendError]) -> Optional[dict]:
    return None if error is None else {"kind": error.kind, "message": error.message}


class _Fake:
    """Setup calls of one fake."""

    FAKE = ""

    def _setup(self, fn: str, **args: Any) -> Any:
        return self._backend.setup(self.FAKE, fn, **args)

    def grant_raw(self, grant: Any) -> None:
        """Add `grant`, written as under `[plugins.NAME.grants]` in tend.toml (as JSON)."""
        self._setup("grant", grant=grant)


class FakeState(_Fake, _host.State):
    FAKE = "state"

    def grant_raw(self, grant: Any) -> None:
        raise FakesError("state is always granted: there is nothing to grant")


class FakeFiles(_Fake, _host.Files):
    FAKE = "files"

    def grant(self, path: str, write: bool = False) -> "FakeFiles":
        """Grant `path` and everything below it; `write` allows mutations."""
        self.grant_raw([{"path": path, "write": write}])
        return self

    def put(self, path: str, contents: Union[bytes, str]) -> "FakeFiles":
        """A file in place, as if the operator had written it (grants do not apply)."""
        self._setup("put", path=path, contents=_host._bytes(contents))
        return self

    def get(self, path: str) -> Optional[bytes]:
        """A file's content now, without a grant check."""
        return from_json(Optional[bytes], self._setup("get", path=path))

    def paths(self) -> list[str]:
        return self._setup("paths")


class FakeHttp(_Fake, _host.Http):
    FAKE = "http"

    def grant(self, *patterns: str) -> "FakeHttp":
        self.grant_raw(list(patterns))
        return self

    def respond(self, method: str, url: str, response: Union[Response, TendError]) -> "FakeHttp":
        """Answer `method url` with `response`, or fail it with an error."""
        scripted = {"err": _error(response)} if isinstance(response, TendError) else {"ok": to_json(response)}
        self._setup("respond", method=method, url=url, response=scripted)
        return self

    def status(self, url: str, status: int) -> "FakeHttp":
        """Answer `GET url` with `status` and an empty body."""
        self._setup("status", url=url, status=status)
        return self

    def sent(self) -> list[Request]:
        return from_json(list[Request], self._setup("sent"))

    def batches(self) -> list[int]:
        return self._setup("batches")


class FakeMetrics(_Fake, _host.Metrics):
    FAKE = "metrics"

    def counter(self, name: str, labels: _host.Labels = ()) -> float:
        return self._setup("counter", name=name, labels=_host._labels(labels))

    def gauge(self, name: str, labels: _host.Labels = ()) -> Optional[float]:
        return self._setup("gauge", name=name, labels=_host._labels(labels))


class FakeSystemd(_Fake, _host.Systemd):
    FAKE = "systemd"

    def grant(self, units: Iterable[str], operations: Iterable[str] = ()) -> "FakeSystemd":
        self.grant_raw({"units": list(units), "operations": list(operations)})
        return self

    def set_unit(self, unit: str, active_state: str) -> "FakeSystemd":
        self._setup("set-unit", unit=unit, active_state=active_state)
        return self

    def put_unit(self, status: UnitStatus) -> "FakeSystemd":
        self._setup("put-unit", status=status)
        return self

    def job_result(self, unit: str, result: JobResult) -> "FakeSystemd":
        self._setup("job-result", unit=unit, result=result)
        return self

    def fail_with(self, error: Optional[TendError]) -> "FakeSystemd":
        self._setup("fail-with", error=_error(error))
        return self

    def actions(self) -> list[str]:
        return self._setup("actions")


class _Failures:
    """`fail_with` and `fail_call`, shared by the cri, kube, cloud and conditions fakes."""

    def fail_with(self, error: Optional[TendError]):
        """Every call fails with `error` until cleared with None."""
        self._setup("fail-with", error=_error(error))
        return self

    def fail_call(self, call: str, error: Optional[TendError]):
        """The call named `call` as in the WIT fails with `error` until cleared with None."""
        self._setup("fail-call", call=call, error=_error(error))
        return self

    def actions(self) -> list[str]:
        return self._setup("actions")


class FakeCri(_Failures, _Fake, _host.Cri):
    FAKE = "cri"

    def grant(
        self,
        read: bool = False,
        operations: Iterable[str] = (),
        images: Iterable[str] = (),
        namespaces: Iterable[str] = (),
        states: Iterable[str] = (),
    ) -> "FakeCri":
        self.grant_raw(
            {
                "read": read,
                "operations": list(operations),
                "images": list(images),
                "namespaces": list(namespaces),
                "states": list(states),
            }
        )
        return self

    def set_version(self, name: str, version: str) -> "FakeCri":
        self._setup("set-version", name=name, version=version)
        return self

    def add_sandbox(self, id: str, uid: str, attempt: int = 0, state: SandboxState = SandboxState.READY) -> "FakeCri":
        self._setup("add-sandbox", id=id, uid=uid, attempt=attempt, state=state)
        return self

    def put_sandbox(self, sandbox: PodSandbox) -> "FakeCri":
        self._setup("put-sandbox", sandbox=sandbox)
        return self

    def put_sandbox_status(self, status: SandboxStatus) -> "FakeCri":
        self._setup("put-sandbox-status", status=status)
        return self

    def add_container(self, container: Container) -> "FakeCri":
        self._setup("add-container", container=container)
        return self

    def add_image(self, reference: str) -> "FakeCri":
        self._setup("add-image", reference=reference)
        return self

    def fail_pull(self, image: str, error: Optional[TendError]) -> "FakeCri":
        self._setup("fail-pull", image=image, error=_error(error))
        return self

    def pull_takes(self, image: str, ms: int) -> "FakeCri":
        self._setup("pull-takes", image=image, ms=ms)
        return self

    def set_time_left(self, ms: Optional[int]) -> "FakeCri":
        self._setup("set-time-left", ms=ms)
        return self

    def sandbox_ids(self) -> list[str]:
        return self._setup("sandbox-ids")


class FakeKube(_Failures, _Fake, _host.Kube):
    FAKE = "kube"

    def grant(self, *rules: Mapping) -> "FakeKube":
        """Rules as in tend.toml: `grant({"resource": "nodes", "verbs": ["get"], "names": ["$NODE"]})`."""
        self.grant_raw([dict(rule) for rule in rules])
        return self

    def set_node_name(self, node: str) -> "FakeKube":
        self._setup("set-node-name", node=node)
        return self

    def node_name(self) -> str:
        return self._setup("node-name")

    def set_own_lease(self, namespace: str, name: str) -> "FakeKube":
        self._setup("set-own-lease", namespace=namespace, name=name)
        return self

    def add_kind(self, api_version: str, kind: str, plural: str, namespaced: bool) -> "FakeKube":
        self._setup("add-kind", api_version=api_version, kind=kind, plural=plural, namespaced=namespaced)
        return self

    def put(self, object: Mapping) -> "FakeKube":
        """Store `object` as is (no grant check, nothing recorded)."""
        self._setup("put", object=dict(object))
        return self

    def object(self, key: ObjectKey) -> Optional[dict]:
        return self._setup("object", key=key)

    def remove(self, key: ObjectKey) -> Optional[dict]:
        return self._setup("remove", key=key)

    def patches(self) -> list[tuple[ObjectKey, PatchType, Any]]:
        return [
            (from_json(ObjectKey, p["key"]), PatchType(p["patch-type"]), p["patch"]) for p in self._setup("patches")
        ]

    def block_eviction(self, namespace: str, name: str, budget: str) -> "FakeKube":
        """PodDisruptionBudget `budget` (in the pod's namespace) refuses evicting pod `namespace`/`name`:
        `evict` raises `BudgetExhausted` and nothing happens; a drain leaves the pod in `remaining`
        ("<ns>/<name>: [pdb:<ns>/<budget>] blocked by PodDisruptionBudget <ns>/<budget>"). Until `unblock_eviction`."""
        self._setup("block-eviction", namespace=namespace, name=name, budget=budget)
        return self

    def unblock_eviction(self, namespace: str, name: str) -> "FakeKube":
        self._setup("unblock-eviction", namespace=namespace, name=name)
        return self

    def uncordon_during_drain(self, evictions: int) -> "FakeKube":
        """Someone else uncordons the Node once a drain has evicted `evictions` pods (0: right after
        its cordon): the drain stops before its next eviction, the pods not evicted yet remaining
        ("<ns>/<name>: not evicted yet"). Fires once."""
        self._setup("uncordon-during-drain", evictions=evictions)
        return self

    def events(self) -> list[dict]:
        """Events as recorded: regarding (an ObjectKey), event_type, reason, message, count."""
        return [
            {
                "regarding": from_json(ObjectKey, e["regarding"]),
                "event_type": EventType(e["event-type"]),
                "reason": e["reason"],
                "message": e["message"],
                "count": e["count"],
            }
            for e in self._setup("events")
        ]


class FakeCloud(_Failures, _Fake, _host.Cloud):
    FAKE = "cloud"

    def grant(
        self,
        operations: Iterable[str] = (),
        instances: Iterable[Mapping[str, str]] = (),
        security_groups: Iterable[str] = (),
        remotes: Iterable[str] = (),
        ports: Iterable[str] = (),
        protocols: Optional[Iterable[Union[str, int]]] = None,
    ) -> "FakeCloud":
        """As tend.toml: `grant(["get-instance"], [{"tag": "kubernetes.io/cluster/a", "value": "owned"}])`.

        A rule is part of the grant: `remotes` (CIDRs a rule's source must lie
        inside), `ports` (ranges, "22" or "30000-32767") and `protocols` (tcp,
        udp, icmp and icmpv6 when not given; a protocol number as an int)."""
        grant = {
            "operations": list(operations),
            "instances": [dict(i) for i in instances],
            "security-groups": list(security_groups),
            "remotes": list(remotes),
            "ports": list(ports),
        }
        if protocols is not None:
            grant["protocols"] = list(protocols)
        self.grant_raw(grant)
        return self

    def put_instance(self, instance: Instance) -> "FakeCloud":
        self._setup("put-instance", instance=instance)
        return self

    def put_group(self, group: SecurityGroup) -> "FakeCloud":
        self._setup("put-group", group=group)
        return self

    def instance(self, id: str) -> Optional[Instance]:
        return from_json(Optional[Instance], self._setup("instance", id=id))

    def remove_instance(self, id: str) -> Optional[Instance]:
        return from_json(Optional[Instance], self._setup("remove-instance", id=id))

    def group(self, id: str) -> Optional[SecurityGroup]:
        return from_json(Optional[SecurityGroup], self._setup("group", id=id))

    def remove_group(self, id: str) -> Optional[SecurityGroup]:
        return from_json(Optional[SecurityGroup], self._setup("remove-group", id=id))


class FakeLogs(_Fake, _host.Logs):
    FAKE = "logs"

    def grant(self, kernel: bool = False, units: Iterable[str] = (), identifiers: Iterable[str] = (), watch: Iterable[dict] = ()) -> "FakeLogs":
        """Grant sources and watch rules, as `[plugins.NAME.grants] logs` (rules as JSON)."""
        self.grant_raw({"kernel": kernel, "units": list(units), "identifiers": list(identifiers), "watch": list(watch)})
        return self

    def kernel(self, priority: int, message: str) -> "FakeLogs":
        """A kernel line; the grant's watch rules run on it as the host's do."""
        self._setup("kernel", priority=priority, message=message)
        return self

    def journal(self, message: str, unit: Optional[str] = None, identifier: Optional[str] = None, priority: int = 6) -> "FakeLogs":
        """A journal entry of `unit` and `identifier`; the watch rules run on it."""
        self._setup("journal", unit=unit, identifier=identifier, priority=priority, message=message)
        return self


class FakeConditions(_Failures, _Fake, _host.Conditions):
    """The host's lifecycle of the plugin's conditions, on a clock of the fake's
    own: it starts at 2026-01-01T00:00:00Z and moves only by `advance`."""

    FAKE = "conditions"

    def grant(self, *conditions: Union[str, dict]) -> "FakeConditions":
        """Grant condition types, as `[plugins.NAME.grants] conditions`: "KernelDeadlock"
        or {"condition": "ReadonlyFilesystem", "taint-on": {"effect": "NoSchedule"}}."""
        self.grant_raw(list(conditions))
        return self

    def hold(self, condition: str, active: bool, reason: str, message: str = "") -> "FakeConditions":
        """Hold `condition` as the host holds an earlier run's report (no grant check, no TTL)."""
        self._setup("hold", condition=condition, active=active, reason=reason, message=message)
        return self

    def advance(self, seconds: int) -> "FakeConditions":
        """Move the fake's clock on: a report whose TTL passes lists as cleared ("Expired")."""
        self._setup("advance", seconds=seconds)
        return self

    def now(self) -> int:
        """The fake's clock in seconds since the epoch (what `since` is in)."""
        return self._setup("now")


class FakeHost(_host.Host):
    """A `Host` over the fakes for plugin `plugin` (named in denial messages), nothing granted."""

    def __init__(self, plugin: str = "test"):
        backend = _FakeBackend(plugin)
        self._fakes = backend
        self.plugin = plugin
        super().__init__(backend)

    def _capability(self, kind: type, backend: Any) -> Any:
        """Each capability of `Host` as its fake (`files` is a `FakeFiles`): the `_Fake` subclass of `kind`."""
        (fake,) = [cls for cls in _Fake.__subclasses__() if issubclass(cls, kind)]
        return fake(backend)

    def grant(self, **grants: Any) -> "FakeHost":
        """Every grant of a `[plugins.NAME.grants]` table, as JSON: `grant(files=[...], http=[...])`."""
        for cap, grant in grants.items():
            getattr(self, cap).grant_raw(grant)
        return self

    def log_lines(self) -> list[tuple[Level, str]]:
        """Every line the plugin logged (`log`; `logs` is the node's logs capability)."""
        return [(Level(line["level"]), line["message"]) for line in self._fakes.setup("host", "log-lines")]

    def __del__(self) -> None:
        fakes = getattr(self, "_fakes", None)
        if fakes is not None and _Module is not None:  # None at interpreter exit
            fakes.drop()
