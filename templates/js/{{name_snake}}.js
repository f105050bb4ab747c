// {{name}}: a Tend plugin, started with `tend new` — make it yours.
//
// The problem it solves, as a starting point: is this node's health endpoint
// answering, and does the cluster still know this node? Each reconcile probes
// one URL, looks up the Node named after this host, and writes a one-line
// report file, counting its runs in its own state.
//
// The safety: it reads one URL and one Node and writes one file, each within
// the grants of `tend.toml` and nothing else. A missing grant fails the
// reconcile with the host's message, which names the grant to add.
//
// The config (`[plugins.{{name}}.config]`):
// - `url`: the endpoint to probe with GET (timeout 2 s);
// - `report`: the file to write the report line to.

import { DeniedError, NotFoundError, TendError, config, decodeUtf8, definePlugin, degraded, healthy } from "@tend/sdk";

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

    let found = true;
    try {
      host.kube.get({ apiVersion: "v1", kind: "Node", namespace: null, name: ctx.nodeName });
    } catch (e) {
      if (!(e instanceof NotFoundError)) throw e;
      found = false;
    }

    const line = `${ctx.plugin} run ${runs}: ${url} ${answer}; node ${ctx.nodeName} ${found ? "found" : "missing"}`;
    host.files.write(report, `${line}\n`);
    return answering && found ? healthy(line) : degraded(line);
  },
});
