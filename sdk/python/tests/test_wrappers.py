"""The typed wrappers over the fakes, capability by capability, and the
adapter's conversions against the classes componentize-py generates."""

import dataclasses
import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tend_sdk
from tend_sdk.wit import FUNCTIONS
from tend_sdk import (
    BudgetExhausted,
    ConditionReport,
    Conflict,
    Denied,
    Direction,
    EtherType,
    Instance,
    InstanceState,
    Invalid,
    JobResult,
    Level,
    ObjectKey,
    OwnerTag,
    PatchType,
    Protocol,
    Remote,
    Request,
    Response,
    Rule,
    SandboxState,
    Unavailable,
    types,
)
from tend_sdk.testing import FakeHost, FakesError

NODE = ObjectKey.cluster("v1", "Node", "node-1")


def test_files_state_and_log():
    host = FakeHost("node-probe")
    with pytest.raises(Denied) as denied:
        host.files.read("/etc/hosts")
    assert denied.value.message == (
        'no files grant covers /etc/hosts: add { path = "/etc" } to [plugins.node-probe.grants] files'
    )
    host.files.grant("/var/lib/node-probe", write=True).put("/var/lib/node-probe/old", "x")
    assert host.files.write("/var/lib/node-probe/a/b", "hi\n") is True
    assert host.files.write("/var/lib/node-probe/a/b", b"hi\n") is False
    assert host.files.read_text("/var/lib/node-probe/a/b") == "hi\n"
    assert [e.name for e in host.files.list_dir("/var/lib/node-probe")] == ["a", "old"]
    assert host.files.stat("/var/lib/node-probe/a").kind == types.FileKind.DIRECTORY
    assert host.files.stat("/var/lib/node-probe/none") is None
    assert host.files.remove("/var/lib/node-probe/old") is True
    assert host.files.get("/var/lib/node-probe/old") is None
    assert host.state.get("runs") is None
    host.state.set("runs", "1")
    assert host.state.get_text("runs") == "1"
    assert host.state.list_keys() == ["runs"]
    assert host.state.delete("runs") is True
    with pytest.raises(Invalid):
        host.state.set("", b"")
    host.log(Level.WARN, "careful")
    assert host.log_lines() == [(Level.WARN, "careful")]


def test_http_answers_and_records():
    host = FakeHost("p")
    url = "http://127.0.0.1:5000/v2/"
    host.http.grant("http://127.0.0.1:*/*").respond("GET", url, Response(200, [("a", "b")], b"ok"))
    host.http.respond("POST", url, Unavailable("down"))
    assert host.http.get(url) == Response(200, [("a", "b")], b"ok")
    with pytest.raises(Unavailable, match="down"):
        host.http.send(Request(method="POST", url=url, body=b"x", timeout_ms=10))
    results = host.http.send_all([Request(url=url), Request(url="http://10.0.0.1/")])
    assert results[0].status == 200 and isinstance(results[1], Denied)
    assert [r.method for r in host.http.sent()] == ["GET", "POST", "GET"]
    assert host.http.batches() == [2]


def test_send_all_over_32_requests_is_refused_whole_as_on_the_host():
    host = FakeHost("p")
    url = "http://127.0.0.1:5000/v2/"
    host.http.grant("http://127.0.0.1:*/*").status(url, 200)
    assert all(r.status == 200 for r in host.http.send_all([Request(url=url)] * host.http.MAX_SEND_ALL))
    results = host.http.send_all([Request(url=url)] * 33)
    refused = Invalid("send-all takes at most 32 requests, got 33: split the call")
    assert results == [refused] * 33
    assert host.http.batches() == [32]


def test_only_misuse_of_the_fakes_is_a_fakes_error():
    host = FakeHost("p")
    url = "http://127.0.0.1:1/"
    # Text a plugin or its peers control may start with "tend-fakes:": still the plugin's error.
    host.http.grant("http://127.0.0.1:*/*").respond("GET", url, Invalid("tend-fakes: forged"))
    with pytest.raises(Invalid, match="^tend-fakes: forged$"):
        host.http.get(url)
    with pytest.raises(FakesError, match="^tend-fakes: files grant") as misuse:
        host.files.grant("etc")
    assert not isinstance(misuse.value, tend_sdk.TendError)


def test_hosts_of_a_trapped_instance_fail_and_leave_the_next_one_alone(monkeypatch):
    import wasmtime

    from tend_sdk import testing

    old = FakeHost("old")
    module = testing._Module.shared()
    real = module._call
    # A real trap: tend_call reading past the end of memory.
    monkeypatch.setattr(module, "_call", lambda store, ptr, size: real(store, -65536, 16))
    with pytest.raises(FakesError, match="trapped") as trapped:
        old.state.get("k")
    assert isinstance(trapped.value.__cause__, wasmtime.Trap)
    new = FakeHost("new")
    assert testing._Module.shared() is not module and new._fakes.id == 1
    new.state.set("k", b"new")
    with pytest.raises(FakesError, match="instance trapped earlier.*make a new FakeHost"):
        old.state.set("k", b"old")
    with pytest.raises(FakesError, match="instance trapped earlier"):
        old.log_lines()
    del old  # its finalizer must not drop host 1 of the new instance
    assert new.state.get("k") == b"new" and new.log_lines() == []


def test_systemd_cri_and_metrics():
    host = FakeHost("p")
    host.systemd.grant(["kubelet.service"], ["restart"]).set_unit("kubelet.service", "failed")
    assert host.systemd.status("kubelet.service").active_state == "failed"
    host.systemd.job_result("kubelet.service", JobResult.FAILED)
    assert host.systemd.restart("kubelet.service") == JobResult.FAILED
    assert host.systemd.actions() == ["restart kubelet.service"]
    with pytest.raises(Denied, match="add \"enable\" to operations"):
        host.systemd.enable(["kubelet.service"])
    host.systemd.fail_with(Unavailable("dbus down"))
    with pytest.raises(Unavailable):
        host.systemd.status("kubelet.service")
    sandbox = "a" * 64
    host.cri.grant(read=True, operations=["remove-pod-sandbox"]).add_sandbox(sandbox, "uid-1", 0, SandboxState.NOT_READY)
    assert [s.state for s in host.cri.list_pod_sandboxes()] == [SandboxState.NOT_READY]
    host.cri.remove_pod_sandbox(sandbox)
    assert host.cri.sandbox_ids() == [] and host.cri.actions() == [f"remove-pod-sandbox {sandbox}"]
    host.cri.fail_call("version", Conflict("busy"))
    with pytest.raises(Conflict):
        host.cri.version()
    host.metrics.counter_add("probes", 2, {"result": "ok"})
    assert host.metrics.counter("probes", {"result": "ok"}) == 2.0
    assert host.metrics.gauge("up") is None


def test_kube_objects_patches_and_events():
    host = FakeHost("p")
    host.kube.grant({"resource": "nodes", "verbs": ["get", "patch"], "names": ["$NODE"]})
    host.kube.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}})
    patched = host.kube.patch(NODE, PatchType.MERGE, {"metadata": {"labels": {"a": "b"}}})
    assert patched["metadata"]["labels"] == {"a": "b"}
    assert host.kube.patches() == [(NODE, PatchType.MERGE, {"metadata": {"labels": {"a": "b"}}})]
    host.kube.emit_event(NODE, tend_sdk.EventType.NORMAL, "LabelsApplied", "a=b")
    assert [e["count"] for e in host.kube.events()] == [1]
    assert host.kube.object(NODE)["metadata"]["labels"] == {"a": "b"}
    with pytest.raises(Denied):
        host.kube.delete(NODE)


def test_kube_cordon_evict_and_drain():
    host = FakeHost("drainer")
    with pytest.raises(Denied, match=r'add \{ resource = "nodes", verbs = \["patch"\], names = \["node-1"\] \}'):
        host.kube.cordon()
    host.kube.grant(
        {"resource": "nodes", "verbs": ["patch"], "names": ["$NODE"], "fields": ["spec.unschedulable"]},
        {"resource": "pods", "verbs": ["list", "get"], "field-selector": "spec.nodeName=$NODE"},
        {"resource": "pods/eviction", "verbs": ["create"], "field-selector": "spec.nodeName=$NODE"},
    )
    host.kube.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}})
    pod = lambda name, **meta: {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", **meta},
        "spec": {"nodeName": "node-1"},
    }
    daemon = [{"kind": "DaemonSet", "name": "cni", "controller": True}]
    for p in [pod("web"), pod("db"), pod("api"), pod("cni", ownerReferences=daemon)]:
        host.kube.put(p)
    host.kube.cordon(True)
    assert host.kube.object(NODE)["spec"] == {"unschedulable": True}
    host.kube.cordon(False)
    assert host.kube.object(NODE)["spec"] == {}
    with pytest.raises(Invalid):
        host.kube.evict("default", "web/status")
    host.kube.evict("default", "api")
    assert host.kube.object(ObjectKey.namespaced("v1", "Pod", "default", "api")) is None
    host.kube.block_eviction("default", "db", "db-pdb")
    with pytest.raises(BudgetExhausted, match=r"^\[pdb:default/db-pdb\] blocked by PodDisruptionBudget default/db-pdb: "):
        host.kube.evict("default", "db")
    report = host.kube.drain(tend_sdk.DrainOptions(deadline_ms=60_000, uncordon_on_give_up=True))
    assert report == tend_sdk.DrainReport(
        evicted=["default/web"],
        skipped=["default/cni: a DaemonSet pod"],
        remaining=["default/db: [pdb:default/db-pdb] blocked by PodDisruptionBudget default/db-pdb"],
        uncordoned=True,
    )
    host.kube.unblock_eviction("default", "db").uncordon_during_drain(0)
    stopped = host.kube.drain(tend_sdk.DrainOptions(deadline_ms=60_000, uncordon_on_give_up=True))
    assert (stopped.remaining, stopped.uncordoned) == (["default/db: not evicted yet"], False)
    assert host.kube.actions() == [
        "cordon nodes/node-1",
        "uncordon nodes/node-1",
        "evict pods/default/api",
        "cordon nodes/node-1",
        "evict pods/default/web",
        "uncordon nodes/node-1",
        "cordon nodes/node-1",
    ]


def test_cloud_records_cross_both_ways():
    host = FakeHost("p")
    owner = {"tag": "kubernetes.io/cluster/a", "value": "owned"}
    host.cloud.grant(
        ["list-instances", "delete-instance", "ensure-rule"],
        [owner],
        ["sg-0123456789abcdef0"],
        remotes=["10.0.0.0/8"],
        protocols=[47],
    )
    instance = Instance("i-0123456789abcdef0", "n", InstanceState.RUNNING, tags=[("kubernetes.io/cluster/a", "owned")])
    host.cloud.put_instance(instance)
    assert host.cloud.list_instances(OwnerTag("kubernetes.io/cluster/a", "owned")) == [instance]
    host.cloud.put_group(tend_sdk.SecurityGroup("sg-0123456789abcdef0", "nodes"))
    rule = Rule(Direction.INGRESS, EtherType.IPV4, Protocol.number(47), None, Remote.cidr("10.0.0.0/8"))
    assert host.cloud.ensure_rule("sg-0123456789abcdef0", rule) is True
    assert host.cloud.group("sg-0123456789abcdef0").rules == [rule]
    host.cloud.delete_instance(instance.id)
    assert host.cloud.actions()[-1] == f"delete-instance {instance.id}"


def test_conditions_hold_to_the_grant_and_expire_on_the_fakes_clock():
    host = FakeHost("problem-detector")
    report = ConditionReport("KernelDeadlock", "TaskHung", "task blocked", ttl_seconds=60)
    with pytest.raises(Denied, match="grants] conditions"):
        host.conditions.set(report)
    host.conditions.grant("KernelDeadlock", {"condition": "ReadonlyFilesystem", "taint-on": {"effect": "NoSchedule"}})
    with pytest.raises(Denied, match="kubelet"):
        host.conditions.set(ConditionReport("Ready", "KubeletReady", ""))
    with pytest.raises(Invalid, match="at most 1024 bytes"):
        host.conditions.set(ConditionReport("KernelDeadlock", "TaskHung", "x" * 1025))
    host.conditions.set(report)
    set_at = host.conditions.now()
    host.conditions.clear("ReadonlyFilesystem", "FilesystemWritable")
    (deadlock, readonly) = host.conditions.list()
    assert (deadlock.active, deadlock.since, deadlock.expires_in, deadlock.written) == (True, set_at, 60, True)
    assert (readonly.condition, readonly.active, readonly.expires_in) == ("ReadonlyFilesystem", False, None)
    host.conditions.advance(61)
    expired = host.conditions.list()[0]
    assert (expired.active, expired.reason, expired.since) == (False, "Expired", set_at + 60)
    assert expired.message == "not reported again within 60s: was TaskHung: task blocked"
    host.conditions.fail_call("set", BudgetExhausted("conditions.set: spent"))
    with pytest.raises(BudgetExhausted):
        host.conditions.set(report)
    assert host.conditions.actions() == ["set KernelDeadlock", "clear ReadonlyFilesystem"]


def test_setup_mistakes_name_the_fix():
    host = FakeHost("p")
    with pytest.raises(FakesError, match=r"tend-fakes: files grant: files grant path \"etc\" must be absolute"):
        host.files.grant("etc")
    with pytest.raises(FakesError, match="teach it with add_kind"):
        host.kube.put({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "namespace": "d"}})
    with pytest.raises(FakesError, match='kube has no function "watch"'):
        host.kube.fail_call("watch", None)


@pytest.fixture(scope="module")
def wit_world(tmp_path_factory):
    """The bindings componentize-py generates for world `plugin` (types only run natively)."""
    tool = shutil.which("componentize-py")
    if tool is None:
        pytest.skip("componentize-py is not on PATH (cargo xtask lang python puts the venv there)")
    out = tmp_path_factory.mktemp("bindings")
    wit = Path(__file__).resolve().parents[3] / "wit"
    subprocess.run([tool, "-d", str(wit), "-w", "plugin", "bindings", str(out)], check=True)
    sys.path.insert(0, str(out))
    yield importlib.import_module("wit_world.imports")
    sys.path.remove(str(out))


def test_every_sdk_type_matches_the_generated_bindings(wit_world):
    modules = [
        importlib.import_module(f"wit_world.imports.{name}")
        for name in ["types", *FUNCTIONS]
    ]
    for alias in types.__all__:
        cls = getattr(types, alias)
        name = cls.__name__  # LogEntry is the logs interface's Entry
        if cls in (types.WitEnum, types.Variant):
            continue
        if issubclass(cls, types.Variant):
            found = [m for m in modules if hasattr(m, f"{name}_{types._pascal(next(iter(cls.CASES)))}")]
        else:
            found = [m for m in modules if hasattr(m, name)]
        assert found, f"{name}: no such type in the WIT"
        if dataclasses.is_dataclass(cls):
            wit_fields = {f.name for f in dataclasses.fields(getattr(found[0], name))}
            assert {f.name for f in dataclasses.fields(cls)} == wit_fields, name
        elif issubclass(cls, types.WitEnum):
            assert [m.name for m in cls] == [m.name for m in getattr(found[0], name)], name


def test_the_adapter_converts_calls_and_errors(wit_world, monkeypatch):
    from componentize_py_types import Err

    from tend_sdk.component import ComponentBackend, _bindings, export

    cloud = importlib.import_module("wit_world.imports.cloud")
    wit_types = importlib.import_module("wit_world.imports.types")
    rule = Rule(Direction.INGRESS, EtherType.IPV4, Protocol.tcp(), None, Remote.group("sg-1"))

    def ensure_rule(group_id, wit_rule):
        assert isinstance(wit_rule.protocol, cloud.Protocol_Tcp) and wit_rule.remote == cloud.Remote_Group("sg-1")
        return True

    monkeypatch.setattr(cloud, "ensure_rule", ensure_rule)
    monkeypatch.setattr(cloud, "get_instance", lambda id: (_ for _ in ()).throw(Err(wit_types.Error_NotFound("gone"))))
    host = tend_sdk.Host(ComponentBackend(_bindings()))
    assert host.cloud.ensure_rule("sg-1", rule) is True
    with pytest.raises(tend_sdk.NotFound, match="gone"):
        host.cloud.get_instance("i-1")

    def reconcile(ctx, host):
        if ctx.config == "{}":
            raise Denied("add a grant")
        return tend_sdk.Outcome.healthy(f"{ctx.plugin} on {ctx.node_name}")

    reconciler = export(lambda: tend_sdk.PluginInfo("p", "0.1.0", "s"), reconcile)()
    ctx = wit_types.Context("p", '{"a": 1}', [wit_types.Trigger("manual", None)], "node-1", False)
    outcome = reconciler.reconcile(ctx)
    assert (outcome.health, outcome.message) == (wit_types.Health.HEALTHY, "p on node-1")
    with pytest.raises(Err) as err:
        reconciler.reconcile(wit_types.Context("p", "{}", [], "node-1", False))
    assert err.value.value == wit_types.Error_Denied("add a grant")
    assert reconciler.describe() == wit_types.PluginInfo("p", "0.1.0", "s")
