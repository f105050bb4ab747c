// {{name}}: a Tend plugin, started with `tend-author new` — make it yours.
//
// The problem it solves, as a starting point: is this node's health endpoint
// answering, and does the cluster still know this node? Each reconcile probes
// one URL, looks up the Node named after this host, and writes a one-line
// report file, counting its runs in its own state. Off a cluster (no
// Kubernetes API) the Node is "not checked" and the probe alone decides.
//
// The safety: it reads one URL and one Node and writes one file, each within
// the grants of `tend.toml` and nothing else. A missing grant fails the
// reconcile with the host's message, which names the grant to add.
//
// The config (`[plugins.{{name}}.config]`):
// - `url`: the endpoint to probe with GET (timeout 2 s);
// - `report`: the file to write the report line to.

import {
  DeniedError,
  NotFoundError,
  TendError,
  UnavailableError,
  config,
  decodeUtf8,
  definePlugin,
  degraded,
  healthy,
} from "@tend/sdk";

/** The most bytes of the host's message a report line quotes. */
export const MAX_MESSAGE = 400;

/**
 * `message` cut to MAX_MESSAGE bytes (UTF-8) on a character boundary, ending
 * with "…" when cut: a report stays one short line whatever the host said.
 */
function bounded(message) {
  let bytes = 0;
  let end = 0;
  for (const char of message) {
    const point = char.codePointAt(0);
    const size = point < 0x80 ? 1 : point < 0x800 ? 2 : point < 0x10000 ? 3 : 4;
    if (bytes + size > MAX_MESSAGE) return `${message.slice(0, end)}…`;
    bytes += size;
    end += char.length;
  }
  return message;
}

export default definePlugin({
  name: "{{name}}",
  version: "0.1.0",
  summary: "probes an endpoint, checks this node's Node and writes a report",

  reconcile(ctx, host) {
    const { url, report } = config.read(ctx, {
      url: config.string({ example: "http://127.0.0.1:10248/healthz" }),
      report: config.string({ example: `/var/lib/${ctx.plugin}/report.txt` }),
    });

    const stored = host.state.get("runs");
    const runs = (stored ? Number.parseInt(decodeUtf8(stored), 10) || 0 : 0) + 1;
    host.state.set("runs", String(runs));

    let answering = false;
    let answer;
    try {
      const response = host.http.send({ method: "GET", url, headers: [], timeoutMs: 2000 });
      answering = response.status >= 200 && response.status < 300;
      answer = `answered ${response.status}`;
    } catch (e) {
      if (!(e instanceof TendError) || e instanceof DeniedError) throw e;
      answer = `unreachable (${e.message})`;
    }

    // Off a cluster (no Kubernetes API) the node is not checked and the probe
    // alone decides; any other error fails the reconcile.
    let node = "found";
    let nodeOk = true;
    try {
      host.kube.get({ apiVersion: "v1", kind: "Node", namespace: null, name: ctx.nodeName });
    } catch (e) {
      if (e instanceof NotFoundError) {
        node = "missing";
        nodeOk = false;
      } else if (e instanceof UnavailableError) {
        node = `not checked (${bounded(e.message)})`;
      } else {
        throw e;
      }
    }

    const line = `${ctx.plugin} run ${runs}: ${url} ${answer}; node ${ctx.nodeName} ${node}`;
    host.files.write(report, `${line}\n`);
    return answering && nodeOk ? healthy(line) : degraded(line);
  },
});
