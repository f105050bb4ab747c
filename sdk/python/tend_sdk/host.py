"""The `Host` a reconcile is handed: one typed wrapper per WIT interface.

Every method is a WIT function with a Pythonic name and types: it raises a
`TendError` subclass on the WIT `error` (`Denied` names the grant to add). The
wrappers only shape arguments and answers; a backend performs the calls: the
component's imports (`tend_sdk.component`) or the fakes (`tend_sdk.testing`),
so plugin logic tested against the fakes runs unchanged on the node.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, Optional, Protocol as TypingProtocol, Union

from .errors import TendError
from .types import (
    ConditionReport,
    Container,
    DirEntry,
    DrainOptions,
    DrainReport,
    EventType,
    HeldCondition,
    Image,
    Instance,
    JobResult,
    Level,
    ListParams,
    LogEntry,
    LogFilter,
    LogPage,
    LogSource,
    Matched,
    Metadata,
    ObjectKey,
    ObjectList,
    OwnerTag,
    PatchType,
    PodSandbox,
    Request,
    Response,
    Rule,
    RuntimeVersion,
    SandboxFilter,
    SandboxStatus,
    SecurityGroup,
    UnitStatus,
)


class Results:
    """The answer type of `http.send-all`: a list of `result<T, error>`."""

    def __init__(self, of: Any):
        self.of = of


class Backend(TypingProtocol):
    """Performs one WIT call: `cap` and `fn` by their WIT names, `args` the
    parameters in WIT order (name, value), `returns` the Python type of the
    answer. Raises the call's `TendError`."""

    def call(self, cap: str, fn: str, args: list[tuple[str, Any]], returns: Any) -> Any: ...


Labels = Union[Mapping[str, str], Iterable[tuple[str, str]]]


def _labels(labels: Labels) -> list[tuple[str, str]]:
    items = labels.items() if isinstance(labels, Mapping) else labels
    return [(str(k), str(v)) for k, v in items]


def _bytes(data: Union[bytes, str]) -> bytes:
    return data.encode() if isinstance(data, str) else bytes(data)


class Capability:
    """One interface's wrapper over a backend."""

    CAP = ""

    def __init__(self, backend: Backend):
        self._backend = backend

    def _call(self, fn: str, returns: Any, **args: Any) -> Any:
        params = [(name.replace("_", "-"), value) for name, value in args.items()]
        return self._backend.call(self.CAP, fn, params, returns)


class State(Capability):
    """The plugin's own persistent key-value store (always granted)."""

    CAP = "state"

    def get(self, key: str) -> Optional[bytes]:
        return self._call("get", Optional[bytes], key=key)

    def get_text(self, key: str) -> Optional[str]:
        value = self.get(key)
        return None if value is None else value.decode()

    def set(self, key: str, value: Union[bytes, str]) -> None:
        self._call("set", None, key=key, value=_bytes(value))

    def delete(self, key: str) -> bool:
        return self._call("delete", bool, key=key)

    def list_keys(self, prefix: str = "") -> list[str]:
        return self._call("list-keys", list[str], prefix=prefix)


class Files(Capability):
    """Files inside the granted roots."""

    CAP = "files"

    def read(self, path: str) -> bytes:
        return self._call("read", bytes, path=path)

    def read_text(self, path: str) -> str:
        return self.read(path).decode()

    def write(self, path: str, contents: Union[bytes, str], mode: Optional[int] = None) -> bool:
        """Replace the file atomically; True when content or mode changed."""
        return self._call("write", bool, path=path, contents=_bytes(contents), mode=mode)

    def remove(self, path: str) -> bool:
        return self._call("remove", bool, path=path)

    def list_dir(self, path: str) -> list[DirEntry]:
        return self._call("list-dir", list[DirEntry], path=path)

    def stat(self, path: str) -> Optional[Metadata]:
        return self._call("stat", Optional[Metadata], path=path)


class Http(Capability):
    """Outbound HTTP to the granted URL patterns."""

    CAP = "http"
    #: The most requests one `send_all` takes (wit/http.wit).
    MAX_SEND_ALL = 32

    def send(self, request: Request) -> Response:
        return self._call("send", Response, req=request)

    def get(self, url: str, timeout_ms: Optional[int] = None) -> Response:
        return self.send(Request(url=url, timeout_ms=timeout_ms))

    def send_all(self, requests: list[Request]) -> list[Union[Response, TendError]]:
        """At most `MAX_SEND_ALL` (32) requests, sent concurrently; each answer a `Response` or the
        `TendError` it failed with, in order. The host refuses a longer list whole: every answer
        is then `Invalid` ("send-all takes at most 32 requests, got 33: split the call")."""
        return self._call("send-all", Results(Response), reqs=list(requests))


class Systemd(Capability):
    """systemd units within the granted patterns and operations."""

    CAP = "systemd"

    def status(self, unit: str) -> UnitStatus:
        return self._call("status", UnitStatus, unit=unit)

    def list_units(self, patterns: Iterable[str]) -> list[UnitStatus]:
        return self._call("list-units", list[UnitStatus], patterns=list(patterns))

    def start(self, unit: str) -> JobResult:
        return self._call("start", JobResult, unit=unit)

    def stop(self, unit: str) -> JobResult:
        return self._call("stop", JobResult, unit=unit)

    def restart(self, unit: str) -> JobResult:
        return self._call("restart", JobResult, unit=unit)

    def reload_or_restart(self, unit: str) -> JobResult:
        return self._call("reload-or-restart", JobResult, unit=unit)

    def try_restart(self, unit: str) -> JobResult:
        return self._call("try-restart", JobResult, unit=unit)

    def reset_failed(self, unit: str) -> None:
        self._call("reset-failed", None, unit=unit)

    def enable(self, units: Iterable[str]) -> None:
        self._call("enable", None, units=list(units))

    def disable(self, units: Iterable[str]) -> None:
        self._call("disable", None, units=list(units))

    def daemon_reload(self) -> None:
        self._call("daemon-reload", None)


class Cri(Capability):
    """The container runtime over CRI, within the granted reads, operations and images."""

    CAP = "cri"

    def version(self) -> RuntimeVersion:
        return self._call("version", RuntimeVersion)

    def list_pod_sandboxes(self, filter: Optional[SandboxFilter] = None) -> list[PodSandbox]:
        return self._call("list-pod-sandboxes", list[PodSandbox], filter=filter or SandboxFilter())

    def pod_sandbox_status(self, id: str) -> SandboxStatus:
        return self._call("pod-sandbox-status", SandboxStatus, id=id)

    def stop_pod_sandbox(self, id: str) -> None:
        self._call("stop-pod-sandbox", None, id=id)

    def remove_pod_sandbox(self, id: str) -> None:
        self._call("remove-pod-sandbox", None, id=id)

    def list_containers(self, pod_sandbox_id: Optional[str] = None) -> list[Container]:
        return self._call("list-containers", list[Container], pod_sandbox_id=pod_sandbox_id)

    def list_images(self) -> list[Image]:
        return self._call("list-images", list[Image])

    def image_status(self, image: str) -> Optional[Image]:
        return self._call("image-status", Optional[Image], image=image)

    def pull_image(self, image: str, timeout_ms: int) -> str:
        return self._call("pull-image", str, image=image, timeout_ms=timeout_ms)


class Metrics(Capability):
    """Counters and gauges for the host's /metrics (always granted)."""

    CAP = "metrics"

    def counter_add(self, name: str, value: float = 1.0, labels: Labels = ()) -> None:
        self._call("counter-add", None, name=name, labels=_labels(labels), value=float(value))

    def gauge_set(self, name: str, value: float, labels: Labels = ()) -> None:
        self._call("gauge-set", None, name=name, labels=_labels(labels), value=float(value))


class Kube(Capability):
    """The Kubernetes API, within the granted RBAC-like rules; objects are dicts."""

    CAP = "kube"

    def get(self, key: ObjectKey) -> dict:
        return json.loads(self._call("get", str, key=key))

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: Optional[str] = None,
        params: Optional[ListParams] = None,
    ) -> ObjectList:
        page = self._call(
            "list", ObjectList, api_version=api_version, kind=kind, namespace=namespace, params=params or ListParams()
        )
        page.items = [json.loads(item) for item in page.items]
        return page

    def create(self, api_version: str, kind: str, namespace: Optional[str], object: Mapping) -> dict:
        text = json.dumps(object, separators=(",", ":"))
        return json.loads(
            self._call("create", str, api_version=api_version, kind=kind, namespace=namespace, object=text)
        )

    def patch(self, key: ObjectKey, patch_type: PatchType, patch: Any) -> dict:
        text = json.dumps(patch, separators=(",", ":"))
        return json.loads(self._call("patch", str, key=key, patch_type=patch_type, patch=text))

    def delete(self, key: ObjectKey) -> None:
        self._call("delete", None, key=key)

    def emit_event(self, regarding: ObjectKey, event_type: EventType, reason: str, message: str) -> None:
        self._call("emit-event", None, regarding=regarding, event_type=event_type, reason=reason, message=message)

    def cordon(self, unschedulable: bool = True) -> None:
        """Cordon (True) or uncordon (False) this host's Node: its `spec.unschedulable`, nothing else.
        Needs `patch` on `nodes` named `$NODE` (with `fields`, `spec.unschedulable`)."""
        self._call("cordon", None, unschedulable=unschedulable)

    def evict(self, namespace: str, name: str) -> None:
        """Evict one pod through the Eviction API, which honours its PodDisruptionBudget: while the
        budget allows no disruption this raises `BudgetExhausted` ("blocked by PodDisruptionBudget
        <ns>/<name>: ...") and nothing happened; ask again later, never delete the pod instead.
        Needs `create` on `pods/eviction` in its namespace."""
        self._call("evict", None, namespace=namespace, name=name)

    def drain(self, options: DrainOptions) -> DrainReport:
        """Drain this host's Node: cordon it, evict every pod bound to it but DaemonSet and mirror
        pods, wait for each to be gone; past `options.deadline_ms`, stop and report what remains
        and why (`options.uncordon_on_give_up`: then make the Node schedulable again). Needs the
        grants of `cordon` and `evict`, and `list` and `get` on `pods`."""
        return self._call("drain", DrainReport, options=options)


class Cloud(Capability):
    """The cloud provider's instances and security groups, within the grant."""

    CAP = "cloud"

    def list_instances(self, owner: OwnerTag) -> list[Instance]:
        return self._call("list-instances", list[Instance], owner=owner)

    def get_instance(self, id: str) -> Instance:
        return self._call("get-instance", Instance, id=id)

    def delete_instance(self, id: str) -> None:
        self._call("delete-instance", None, id=id)

    def list_security_groups(self, ids: Iterable[str] = ()) -> list[SecurityGroup]:
        return self._call("list-security-groups", list[SecurityGroup], ids=list(ids))

    def find_security_group(self, name: str) -> str:
        return self._call("find-security-group", str, name=name)

    def ensure_rule(self, group_id: str, rule: Rule) -> bool:
        return self._call("ensure-rule", bool, group_id=group_id, rule=rule)

    def add_to_group(self, instance_id: str, group_id: str) -> bool:
        return self._call("add-to-group", bool, instance_id=instance_id, group_id=group_id)


class Logs(Capability):
    """The node's kernel log and journal, within the granted sources, units and
    identifiers; and the matches of the grant's watch rules."""

    CAP = "logs"

    def matches(self) -> list[Matched]:
        """The watch rules' matches not taken yet; taken by this call (not in a dry run)."""
        return self._call("matches", list[Matched])

    def read(
        self,
        source: LogSource,
        since: Optional[str] = None,
        filter: Optional[LogFilter] = None,
        max: int = 100,
    ) -> LogPage:
        """Up to `max` entries of `source` after cursor `since`, oldest first; page on with `.cursor`."""
        return self._call("read", LogPage, source=source, since=since, filter=filter or LogFilter(), max=max)


class Conditions(Capability):
    """NodeConditions on the own Node, of the condition types granted; the host
    owns their lifecycle (writes, heartbeats, TTLs, the taints tied to them)."""

    CAP = "conditions"

    def set(self, report: ConditionReport) -> None:
        """Report the problem present (status True); reporting it again renews its TTL."""
        self._call("set", None, report=report)

    def clear(self, condition: str, reason: str, message: str = "") -> None:
        """The problem is gone (status False); clearing one never reported holds it False."""
        self._call("clear", None, condition=condition, reason=reason, message=message)

    def list(self) -> "list[HeldCondition]":
        """This plugin's conditions as the host holds them, by condition type."""
        return self._call("list", list[HeldCondition])


class Host:
    """What a reconcile can reach: `log`, then one attribute per capability."""

    def __init__(self, backend: Backend):
        # The one list of capabilities (`tend_sdk.testing.FakeHost` swaps in
        # each one's fake through `_capability`).
        self._backend = backend
        self.state = self._capability(State, backend)
        self.files = self._capability(Files, backend)
        self.http = self._capability(Http, backend)
        self.systemd = self._capability(Systemd, backend)
        self.cri = self._capability(Cri, backend)
        self.metrics = self._capability(Metrics, backend)
        self.kube = self._capability(Kube, backend)
        self.cloud = self._capability(Cloud, backend)
        self.logs = self._capability(Logs, backend)
        self.conditions = self._capability(Conditions, backend)

    def _capability(self, kind: type, backend: Backend) -> Any:
        """The wrapper of one capability over `backend`."""
        return kind(backend)

    def log(self, level: Level, message: str) -> None:
        """A line in the host's log, tagged with the plugin's name (always granted)."""
        self._backend.call("log", "log", [("level", level), ("message", message)], None)
