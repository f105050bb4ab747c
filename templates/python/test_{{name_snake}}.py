"""{{name}} against the SDK's fakes: the host's own grant rules and messages."""

import json

import pytest

from tend_sdk import Context, Denied, Health, Unavailable
from tend_sdk.testing import FakeHost

from {{name_snake}} import MAX_MESSAGE, reconcile

URL = "http://127.0.0.1:10248/healthz"
REPORT = "/var/lib/{{name}}/report.txt"
CONTEXT = Context("{{name}}", json.dumps({"url": URL, "report": REPORT}), node_name="node-1")


def granted_host(files: bool = True) -> FakeHost:
    host = FakeHost("{{name}}")
    if files:
        host.files.grant("/var/lib/{{name}}", write=True)
    host.http.grant(URL).status(URL, 200)
    host.kube.grant({"resource": "nodes", "verbs": ["get"], "names": ["$NODE"]})
    host.kube.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}})
    return host


def test_a_healthy_run_reports_and_counts():
    host = granted_host()
    outcome = reconcile(CONTEXT, host)
    line = f"{{name}} run 1: {URL} answered 200; node node-1 found"
    assert (outcome.health, outcome.message) == (Health.HEALTHY, line)
    assert host.files.get(REPORT) == (line + "\n").encode()
    assert reconcile(CONTEXT, host).message.startswith("{{name}} run 2:")
    assert host.state.get_text("runs") == "2"


def test_without_a_files_grant_the_reconcile_is_denied():
    host = granted_host(files=False)
    with pytest.raises(Denied) as denied:
        reconcile(CONTEXT, host)
    assert denied.value.message == (
        "no files grant covers /var/lib/{{name}}/report.txt: "
        'add { path = "/var/lib/{{name}}", write = true } to [plugins.{{name}}.grants] files'
    )


def test_off_a_cluster_the_node_is_not_checked_and_the_probe_decides():
    host = granted_host()
    why = "no Kubernetes API: not in a cluster"
    host.kube.fail_call("get", Unavailable(why))
    outcome = reconcile(CONTEXT, host)
    line = f"{{name}} run 1: {URL} answered 200; node node-1 not checked ({why})"
    assert (outcome.health, outcome.message) == (Health.HEALTHY, line)
    assert host.files.get(REPORT) == (line + "\n").encode()

    long = "é" * 300
    host.kube.fail_call("get", Unavailable(long))
    quoted = f"not checked ({long[:MAX_MESSAGE // 2]}…)"
    assert reconcile(CONTEXT, host).message.endswith(quoted)


def test_a_denied_node_lookup_fails_the_reconcile():
    host = granted_host()
    host.kube.fail_call("get", Denied("no kube grant"))
    with pytest.raises(Denied) as denied:
        reconcile(CONTEXT, host)
    assert denied.value.message == "no kube grant"
