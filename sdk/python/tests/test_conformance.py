"""Every case of sdk/conformance.json (the host's table, exported by
tend-conformance) through the Python wrappers and the fakes, on the table's
populated fixture: each case must end exactly as the host's (`ok`, `refused`
with kind and message, `failed` with a kind, or `listed` names)."""

import base64
import json
from pathlib import Path

import pytest

from tend_sdk import (
    ConditionReport,
    Container,
    DrainOptions,
    EventType,
    Instance,
    Level,
    ListParams,
    LogFilter,
    LogSource,
    ObjectKey,
    OwnerTag,
    PatchType,
    PodSandbox,
    Request,
    Response,
    Rule,
    SandboxFilter,
    SecurityGroup,
)
from tend_sdk.errors import Conflict, Denied, Invalid, NotFound, TendError, Unavailable, from_kind
from tend_sdk.testing import FakeHost
from tend_sdk.wit import FUNCTIONS
from tend_sdk.types import from_json

TABLE = json.loads((Path(__file__).resolve().parents[2] / "conformance.json").read_text())


def expand(value):
    """The file's compressed strings (`{"$repeat": ...}`) written out."""
    if isinstance(value, dict) and "$repeat" in value:
        return value["before"] + value["$repeat"] * value["times"] + value["after"]
    if isinstance(value, dict):
        return {k: expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [expand(v) for v in value]
    return value


def key(a, name="key"):
    return from_json(ObjectKey, a[name])


#: Each WIT function, through the typed wrapper a plugin uses.
CALLS = {
    ("log", "log"): lambda h, a: h.log(Level(a["level"]), a["message"]),
    ("state", "get"): lambda h, a: h.state.get(a["key"]),
    ("state", "set"): lambda h, a: h.state.set(a["key"], base64.b64decode(a["value"])),
    ("state", "delete"): lambda h, a: h.state.delete(a["key"]),
    ("state", "list-keys"): lambda h, a: h.state.list_keys(a["prefix"]),
    ("logs", "matches"): lambda h, a: h.logs.matches(),
    ("conditions", "set"): lambda h, a: h.conditions.set(from_json(ConditionReport, a["report"])),
    ("conditions", "clear"): lambda h, a: h.conditions.clear(a["condition"], a["reason"], a["message"]),
    ("conditions", "list"): lambda h, a: h.conditions.list(),
    ("logs", "read"): lambda h, a: h.logs.read(
        from_json(LogSource, a["source"]), a["since"], from_json(LogFilter, a["filter"]), a["max"]
    ),
    ("files", "read"): lambda h, a: h.files.read(a["path"]),
    ("files", "write"): lambda h, a: h.files.write(a["path"], base64.b64decode(a["contents"]), a["mode"]),
    ("files", "remove"): lambda h, a: h.files.remove(a["path"]),
    ("files", "list-dir"): lambda h, a: h.files.list_dir(a["path"]),
    ("files", "stat"): lambda h, a: h.files.stat(a["path"]),
    ("http", "send"): lambda h, a: h.http.send(from_json(Request, a["req"])),
    ("http", "send-all"): lambda h, a: h.http.send_all(from_json(list[Request], a["reqs"])),
    ("systemd", "status"): lambda h, a: h.systemd.status(a["unit"]),
    ("systemd", "list-units"): lambda h, a: h.systemd.list_units(a["patterns"]),
    ("systemd", "start"): lambda h, a: h.systemd.start(a["unit"]),
    ("systemd", "stop"): lambda h, a: h.systemd.stop(a["unit"]),
    ("systemd", "restart"): lambda h, a: h.systemd.restart(a["unit"]),
    ("systemd", "reload-or-restart"): lambda h, a: h.systemd.reload_or_restart(a["unit"]),
    ("systemd", "try-restart"): lambda h, a: h.systemd.try_restart(a["unit"]),
    ("systemd", "reset-failed"): lambda h, a: h.systemd.reset_failed(a["unit"]),
    ("systemd", "enable"): lambda h, a: h.systemd.enable(a["units"]),
    ("systemd", "disable"): lambda h, a: h.systemd.disable(a["units"]),
    ("systemd", "daemon-reload"): lambda h, a: h.systemd.daemon_reload(),
    ("cri", "version"): lambda h, a: h.cri.version(),
    ("cri", "list-pod-sandboxes"): lambda h, a: h.cri.list_pod_sandboxes(from_json(SandboxFilter, a["filter"])),
    ("cri", "pod-sandbox-status"): lambda h, a: h.cri.pod_sandbox_status(a["id"]),
    ("cri", "stop-pod-sandbox"): lambda h, a: h.cri.stop_pod_sandbox(a["id"]),
    ("cri", "remove-pod-sandbox"): lambda h, a: h.cri.remove_pod_sandbox(a["id"]),
    ("cri", "list-containers"): lambda h, a: h.cri.list_containers(a["pod-sandbox-id"]),
    ("cri", "list-images"): lambda h, a: h.cri.list_images(),
    ("cri", "image-status"): lambda h, a: h.cri.image_status(a["image"]),
    ("cri", "pull-image"): lambda h, a: h.cri.pull_image(a["image"], a["timeout-ms"]),
    ("metrics", "counter-add"): lambda h, a: h.metrics.counter_add(a["name"], a["value"], a["labels"]),
    ("metrics", "gauge-set"): lambda h, a: h.metrics.gauge_set(a["name"], a["value"], a["labels"]),
    ("kube", "get"): lambda h, a: h.kube.get(key(a)),
    ("kube", "list"): lambda h, a: h.kube.list(
        a["api-version"], a["kind"], a["namespace"], from_json(ListParams, a["params"])
    ),
    ("kube", "create"): lambda h, a: h.kube.create(a["api-version"], a["kind"], a["namespace"], json.loads(a["object"])),
    ("kube", "patch"): lambda h, a: h.kube.patch(key(a), PatchType(a["patch-type"]), json.loads(a["patch"])),
    ("kube", "delete"): lambda h, a: h.kube.delete(key(a)),
    ("kube", "emit-event"): lambda h, a: h.kube.emit_event(
        key(a, "regarding"), EventType(a["event-type"]), a["reason"], a["message"]
    ),
    ("kube", "cordon"): lambda h, a: h.kube.cordon(a["unschedulable"]),
    ("kube", "evict"): lambda h, a: h.kube.evict(a["namespace"], a["name"]),
    ("kube", "drain"): lambda h, a: h.kube.drain(from_json(DrainOptions, a["options"])),
    ("cloud", "list-instances"): lambda h, a: h.cloud.list_instances(from_json(OwnerTag, a["owner"])),
    ("cloud", "get-instance"): lambda h, a: h.cloud.get_instance(a["id"]),
    ("cloud", "delete-instance"): lambda h, a: h.cloud.delete_instance(a["id"]),
    ("cloud", "list-security-groups"): lambda h, a: h.cloud.list_security_groups(a["ids"]),
    ("cloud", "find-security-group"): lambda h, a: h.cloud.find_security_group(a["name"]),
    ("cloud", "ensure-rule"): lambda h, a: h.cloud.ensure_rule(a["group-id"], from_json(Rule, a["rule"])),
    ("cloud", "add-to-group"): lambda h, a: h.cloud.add_to_group(a["instance-id"], a["group-id"]),
}

#: Each setup request of the fixture, through the fake's typed setup method.
SETUPS = {
    ("files", "put"): lambda h, a: h.files.put(a["path"], base64.b64decode(a["contents"])),
    ("http", "status"): lambda h, a: h.http.status(a["url"], a["status"]),
    ("systemd", "set-unit"): lambda h, a: h.systemd.set_unit(a["unit"], a["active-state"]),
    ("cri", "set-version"): lambda h, a: h.cri.set_version(a["name"], a["version"]),
    ("cri", "put-sandbox"): lambda h, a: h.cri.put_sandbox(from_json(PodSandbox, a["sandbox"])),
    ("cri", "add-container"): lambda h, a: h.cri.add_container(from_json(Container, a["container"])),
    ("cri", "add-image"): lambda h, a: h.cri.add_image(a["reference"]),
    ("cloud", "put-instance"): lambda h, a: h.cloud.put_instance(from_json(Instance, a["instance"])),
    ("cloud", "put-group"): lambda h, a: h.cloud.put_group(from_json(SecurityGroup, a["group"])),
    ("kube", "set-node-name"): lambda h, a: h.kube.set_node_name(a["node"]),
    ("kube", "set-own-lease"): lambda h, a: h.kube.set_own_lease(a["namespace"], a["name"]),
    ("kube", "put"): lambda h, a: h.kube.put(a["object"]),
    ("logs", "kernel"): lambda h, a: h.logs.kernel(a["priority"], a["message"]),
    ("conditions", "hold"): lambda h, a: h.conditions.hold(a["condition"], a["active"], a["reason"], a["message"]),
    ("logs", "journal"): lambda h, a: h.logs.journal(a["message"], a["unit"], a["identifier"], a["priority"]),
}


def sent(result):
    """One request's outcome in a `send-all`: "ok STATUS", "KIND: MESSAGE" (denied, invalid), or the kind."""
    if isinstance(result, Response):
        return f"ok {result.status}"
    error = refused_or_failed(result)
    return f"{error['kind']}: {error['message']}" if error["outcome"] == "refused" else error["kind"]


#: The listing functions: the names of a typed answer's items (the table's `item_name`).
NAMES = {
    ("state", "list-keys"): lambda keys: list(keys),
    ("logs", "read"): lambda page: [e.message for e in page.entries],
    ("logs", "matches"): lambda matched: [m.rule for m in matched],
    ("conditions", "list"): lambda held: [f"{h.condition} {'True' if h.active else 'False'} {h.reason}" for h in held],
    ("files", "list-dir"): lambda entries: [e.name for e in entries],
    ("http", "send-all"): lambda results: [sent(r) for r in results],
    ("systemd", "list-units"): lambda units: [u.name for u in units],
    ("cri", "list-pod-sandboxes"): lambda sandboxes: [s.id for s in sandboxes],
    ("cri", "list-containers"): lambda containers: [c.id for c in containers],
    ("cri", "list-images"): lambda images: [i.repo_tags[0] for i in images],
    ("kube", "list"): lambda page: [o["metadata"]["name"] for o in page.items],
    ("cloud", "list-instances"): lambda instances: [i.id for i in instances],
    ("cloud", "list-security-groups"): lambda groups: [g.id for g in groups],
}

#: The fakes that can be told to fail every call (`fail_with`).
FAILING = ("systemd", "cri", "kube", "cloud")


def refused_or_failed(error):
    if isinstance(error, (Denied, Invalid)):
        return {"outcome": "refused", "kind": error.kind, "message": error.message}
    return {"outcome": "failed", "kind": error.kind}


def outcome(cap, fn, answer):
    """How a call ended, as the table writes it, from the typed answer or the raised TendError."""
    if isinstance(answer, TendError):
        return refused_or_failed(answer)
    names = NAMES.get((cap, fn))
    if names is None:
        return {"outcome": "ok"}
    listed = names(answer)
    return {"outcome": "listed", "names": listed if fn == "send-all" else sorted(listed)}


def call(host, request):
    """One plugin call of the table: its typed answer, or the TendError it raised."""
    try:
        return CALLS[request["cap"], request["fn"]](host, expand(request["args"]))
    except TendError as error:
        return error


def fixture_host(grants, fail=None):
    """A host on the table's fixture, with `grants`; `fail` (cap, error): that fake fails every call."""
    host = FakeHost(TABLE["plugin"])
    for setup in TABLE["fixture"]["setup"]:
        SETUPS[setup["fake"], setup["fn"]](host, setup["args"])
    for seed in TABLE["fixture"]["calls"]:
        answer = call(host, seed)
        assert not isinstance(answer, TendError), f"fixture call {seed}: {answer!r}"
    if fail is not None:
        getattr(host, fail[0]).fail_with(fail[1])
    host.grant(**grants)
    return host


def check(case, fail=None):
    """Run one case of the table (its capability's fake failing every call with
    `fail`, if given); an AssertionError says how the fakes differ."""
    request = case["call"]
    host = fixture_host(case["grants"], None if fail is None else (request["cap"], fail))
    got = outcome(request["cap"], request["fn"], call(host, request))
    assert got == case["expect"], f"expected {case['expect']}, got {got}"


def case_id(case):
    request = case["call"]
    return f"{request['cap']}.{request['fn']}-{case['expect']['outcome']}"


def test_the_table_covers_every_wit_function():
    functions = {(c["call"]["cap"], c["call"]["fn"]) for c in TABLE["cases"]}
    assert functions == set(CALLS), set(CALLS) ^ functions
    wit = {(cap, f.name) for cap, fns in FUNCTIONS.items() for f in fns}
    assert functions == wit, wit ^ functions


@pytest.mark.parametrize("case", TABLE["cases"], ids=[case_id(c) for c in TABLE["cases"]])
def test_the_fakes_end_each_case_as_the_host(case):
    check(case)


def first(outcome_):
    """The first case of this outcome on a fake that can be told to fail."""
    return next(c for c in TABLE["cases"] if c["expect"]["outcome"] == outcome_ and c["call"]["cap"] in FAILING)


def test_a_listed_case_is_not_passed_by_an_error():
    """A `listed` case wants the items: an error other than denied or invalid fails it too."""
    listed = first("listed")
    for error in (NotFound("gone"), Unavailable("down")):
        with pytest.raises(AssertionError, match="expected .*listed.*got .*failed"):
            check(listed, fail=error)


def test_an_ok_case_is_not_passed_by_an_error():
    """An `ok` case wants success: any error fails it."""
    ok = first("ok")
    with pytest.raises(AssertionError, match="expected .*'ok'.*got .*'failed'"):
        check(ok, fail=Unavailable("down"))


def test_a_failed_case_is_not_passed_by_another_kind():
    """A `failed` case compares the kind: an error of another kind fails it."""
    failed = first("failed")
    other = Conflict("busy") if failed["expect"]["kind"] != "conflict" else NotFound("gone")
    with pytest.raises(AssertionError, match=f"got .*'{other.kind}'"):
        check(failed, fail=other)
    # The expected kind, injected, passes it: the failure above is the kind's.
    check(failed, fail=from_kind(failed["expect"]["kind"], "injected"))
