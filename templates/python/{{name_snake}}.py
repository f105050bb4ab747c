"""{{name}}: a Tend plugin in Python.

The problem: a node's agent (here the kubelet's health endpoint) can stop
answering while the Node object still looks fine, and nobody notices until
pods fail. Each reconcile probes the endpoint, checks that this node's Node
exists (off a cluster, with no Kubernetes API: "not checked", and the probe
alone decides), writes a one-line report and says healthy or degraded.

The safety: the plugin runs in Tend's sandbox and reaches only what
`[plugins.{{name}}.grants]` grants: one directory to write, one URL, one
Node. A missing grant fails the reconcile with the host's message naming the
grant to add; nothing else on the node is reachable.

The config (`[plugins.{{name}}.config]`):

    url = "http://127.0.0.1:10248/healthz"     # probed with GET
    report = "/var/lib/{{name}}/report.txt"     # the report line's file
"""

from dataclasses import dataclass

from tend_sdk import Context, Denied, Health, Host, NotFound, ObjectKey, Outcome, PluginInfo, Request, TendError, Unavailable
from tend_sdk.config import key


@dataclass
class Config:
    url: str = key(example="http://127.0.0.1:10248/healthz")
    report: str = key(example="/var/lib/{plugin}/report.txt")


# The most bytes of the host's message a report line quotes.
MAX_MESSAGE = 400


def bounded(message: str) -> str:
    """`message` cut to MAX_MESSAGE bytes on a character boundary, ending with
    "…" when cut: a report stays one short line whatever the host said."""
    raw = message.encode()
    if len(raw) <= MAX_MESSAGE:
        return message
    return raw[:MAX_MESSAGE].decode(errors="ignore") + "…"


def describe() -> PluginInfo:
    return PluginInfo("{{name}}", "0.1.0", "probes a URL, checks this node's Node, writes a report")


def reconcile(ctx: Context, host: Host) -> Outcome:
    config = ctx.config_as(Config)
    runs = int(host.state.get_text("runs") or "0") + 1
    host.state.set("runs", str(runs))

    status = None
    try:
        status = host.http.send(Request(url=config.url, timeout_ms=2000)).status
        probe = f"answered {status}"
    except Denied:
        raise  # the operator must fix the grant
    except TendError as error:
        probe = f"unreachable ({error.message})"

    # Off a cluster (no Kubernetes API) the node is not checked and the probe
    # alone decides; any other error fails the reconcile.
    node_ok = True
    try:
        host.kube.get(ObjectKey.cluster("v1", "Node", ctx.node_name))
        node = "found"
    except NotFound:
        node, node_ok = "missing", False
    except Unavailable as error:
        node = f"not checked ({bounded(error.message)})"

    line = f"{ctx.plugin} run {runs}: {config.url} {probe}; node {ctx.node_name} {node}"
    host.files.write(config.report, line + "\n")
    healthy = status is not None and 200 <= status < 300 and node_ok
    return Outcome(Health.HEALTHY if healthy else Health.DEGRADED, line)
