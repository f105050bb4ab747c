"""Every case of sdk/conformance.json (the host's grant table, exported by
tend-rules) through the Python wrappers and the fakes: the same decisions,
error kinds and messages as the host."""

import base64
import json
from pathlib import Path

import pytest

from tend_sdk import EventType, ListParams, ObjectKey, OwnerTag, PatchType, Request, Rule, SandboxFilter
from tend_sdk.errors import Denied, Invalid, NotFound, TendError, Unavailable, from_kind
from tend_sdk.testing import FakeHost
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


#: Each WIT call of the table, through the typed wrapper a plugin uses.
CALLS = {
    ("files", "read"): lambda h, a: h.files.read(a["path"]),
    ("files", "write"): lambda h, a: h.files.write(a["path"], base64.b64decode(a["contents"]), a["mode"]),
    ("files", "remove"): lambda h, a: h.files.remove(a["path"]),
    ("files", "list-dir"): lambda h, a: h.files.list_dir(a["path"]),
    ("files", "stat"): lambda h, a: h.files.stat(a["path"]),
    ("http", "send"): lambda h, a: h.http.send(from_json(Request, a["req"])),
    ("kube", "get"): lambda h, a: h.kube.get(key(a)),
    ("kube", "delete"): lambda h, a: h.kube.delete(key(a)),
    ("kube", "list"): lambda h, a: h.kube.list(
        a["api-version"], a["kind"], a["namespace"], from_json(ListParams, a["params"])
    ),
    ("kube", "create"): lambda h, a: h.kube.create(a["api-version"], a["kind"], a["namespace"], json.loads(a["object"])),
    ("kube", "patch"): lambda h, a: h.kube.patch(key(a), PatchType(a["patch-type"]), json.loads(a["patch"])),
    ("kube", "emit-event"): lambda h, a: h.kube.emit_event(
        key(a, "regarding"), EventType(a["event-type"]), a["reason"], a["message"]
    ),
    ("systemd", "status"): lambda h, a: h.systemd.status(a["unit"]),
    ("systemd", "list-units"): lambda h, a: h.systemd.list_units(a["patterns"]),
    ("systemd", "restart"): lambda h, a: h.systemd.restart(a["unit"]),
    ("systemd", "enable"): lambda h, a: h.systemd.enable(a["units"]),
    ("systemd", "daemon-reload"): lambda h, a: h.systemd.daemon_reload(),
    ("cri", "remove-pod-sandbox"): lambda h, a: h.cri.remove_pod_sandbox(a["id"]),
    ("cri", "list-pod-sandboxes"): lambda h, a: h.cri.list_pod_sandboxes(from_json(SandboxFilter, a["filter"])),
    ("cloud", "list-instances"): lambda h, a: h.cloud.list_instances(from_json(OwnerTag, a["owner"])),
    ("cloud", "get-instance"): lambda h, a: h.cloud.get_instance(a["id"]),
    ("cloud", "delete-instance"): lambda h, a: h.cloud.delete_instance(a["id"]),
    ("cloud", "find-security-group"): lambda h, a: h.cloud.find_security_group(a["name"]),
    ("cloud", "ensure-rule"): lambda h, a: h.cloud.ensure_rule(a["group-id"], from_json(Rule, a["rule"])),
    ("state", "set"): lambda h, a: h.state.set(a["key"], base64.b64decode(a["value"])),
    ("metrics", "counter-add"): lambda h, a: h.metrics.counter_add(a["name"], a["value"], a["labels"]),
    ("metrics", "gauge-set"): lambda h, a: h.metrics.gauge_set(a["name"], a["value"], a["labels"]),
}


def case_id(case):
    call = case["call"]
    return f"{call['cap']}.{call['fn']}-{case['expect']['outcome']}"


def test_the_table_covers_every_capability():
    caps = {case["call"]["cap"] for case in TABLE["cases"]}
    assert caps == {"files", "http", "kube", "systemd", "cri", "cloud", "state", "metrics"}
    assert len(TABLE["cases"]) >= 100


@pytest.mark.parametrize("case", TABLE["cases"], ids=[case_id(c) for c in TABLE["cases"]])
def test_the_fakes_decide_as_the_host(case):
    check(case)


def test_a_listed_case_is_not_passed_by_an_error():
    """A `listed` case wants the objects: an error other than denied or invalid fails it too."""
    listed = next(c for c in TABLE["cases"] if c["expect"]["outcome"] == "listed")
    for error in (NotFound("gone"), Unavailable("down")):
        with pytest.raises(AssertionError, match="expected .*listed"):
            check(listed, fail=error)


def check(case, fail=None):
    """Run one case of the table (every kube call failing with `fail`, if
    given); an AssertionError says how the fakes differ."""
    host = FakeHost(TABLE["plugin"])
    if fail is not None:
        host.kube.fail_with(fail)
    call = case["call"]
    if call["cap"] == "kube":
        kube = TABLE["kube"]
        for obj in kube["objects"]:
            host.kube.put(obj)
        host.kube.set_own_lease(kube["own-lease"]["namespace"], kube["own-lease"]["name"])
        host.kube.set_node_name(kube["node-name"])
    host.grant(**case["grants"])
    expect = case["expect"]
    try:
        answer = CALLS[call["cap"], call["fn"]](host, expand(call["args"]))
    except TendError as error:
        if expect["outcome"] == "refused":
            assert error == from_kind(expect["kind"], expect["message"])
            return
        # Only `allowed` admits another error (not-found, unavailable...).
        assert expect["outcome"] == "allowed", f"expected {expect}, got {error!r}"
        assert not isinstance(error, (Denied, Invalid)), f"expected {expect}, got {error!r}"
        return
    assert expect["outcome"] != "refused", f"expected {expect}, got {answer!r}"
    if expect["outcome"] == "listed":
        assert sorted(answer.names()) == expect["names"]
    else:
        assert expect["outcome"] == "allowed", f"unknown outcome in {expect}"
