"""python-http-check: a Tend plugin in Python, built with componentize-py.

Probes each configured URL and reports which ones fail, remembering in `state`
how many times in a row each has failed, so an operator sees a flapping
endpoint from a dead one. Same WIT contract, same host, same grants as the Rust
plugins: the URLs must be granted under [plugins.<name>.grants] http.

Config:
    urls = ["http://127.0.0.1:10248/healthz"]
    expect-status = 200      # optional
    timeout-ms = 2000        # optional
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import http, log, state, types


class Reconciler(exports.Reconciler):
    def describe(self) -> types.PluginInfo:
        return types.PluginInfo(
            "python-http-check", "0.1.0", "probes HTTP endpoints and counts failures in a row"
        )

    def reconcile(self, ctx: types.Context) -> types.Outcome:
        config = json.loads(ctx.config)
        urls = config.get("urls", [])
        expect = config.get("expect-status", 200)
        timeout_ms = config.get("timeout-ms", 2000)
        if not isinstance(urls, list) or not urls:
            raise Err(types.Error_Invalid(f"[plugins.{ctx.plugin}.config] urls: give at least one URL"))
        failing = []
        for url in urls:
            try:
                response = http.send(http.Request("GET", url, [], None, timeout_ms))
                ok, why = response.status == expect, f"answered {response.status}"
            except Err as err:
                if isinstance(err.value, types.Error_Denied):
                    raise  # a missing grant is the operator's to fix: fail the reconcile
                ok, why = False, err.value.value
            key = "failures/" + url
            count = 0 if ok else int((state.get(key) or b"0").decode()) + 1
            state.set(key, str(count).encode())
            if not ok:
                log.log(log.Level.WARN, f"{url}: {why}")
                failing.append(f"{url} {why} ({count} in a row)")
        if failing:
            return types.Outcome(types.Health.DEGRADED, "; ".join(failing), None)
        return types.Outcome(types.Health.HEALTHY, f"{len(urls)} endpoint(s) answering", None)
