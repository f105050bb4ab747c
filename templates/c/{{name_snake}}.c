/* {{name}}: a Tend plugin in C.
 *
 * The problem: an operator wants to know, on every node, that a local HTTP
 * endpoint answers and that the node is registered with Kubernetes, with a
 * report line on the node itself.
 *
 * One reconcile counts its runs in state, GETs the configured `url`, looks up
 * this node's Node object, writes one line to the configured `report` file and
 * reports healthy when the endpoint answered 2xx and the Node exists. Off a
 * cluster (the kube call answers `unavailable`) the Node is "not checked" and
 * the endpoint alone decides.
 *
 * The safety: the plugin runs in Tend's sandbox and can do only what its
 * grants allow (tend.toml): GET that one URL, get this node's Node, write
 * under /var/lib/{{name}}. A missing grant fails the reconcile with the
 * host's `denied` message, which names the grant to add.
 *
 * The config (`[plugins.{{name}}.config]`):
 *   url    = "http://127.0.0.1:10248/healthz"   the endpoint to probe with GET
 *   report = "/var/lib/{{name}}/report.txt"     the file the report line goes to */
#include "tend.h"

#include <stdlib.h>
#include <string.h>

/* The most runs a state value can count: 19 digits fit in a uint64_t. */
#define MAX_RUNS_DIGITS 19

void exports_tend_plugin_reconciler_describe(exports_tend_plugin_reconciler_plugin_info_t *ret) {
    ret->name = tend_format("{{name}}");
    ret->version = tend_format("0.1.0");
    ret->summary = tend_format("probes an HTTP endpoint and this node's Node, writes a report line");
}

/* `runs` from state plus one, stored back. A value that is not a count (only
 * another version of this plugin could have written it) restarts the count. */
static bool count_run(uint64_t *runs, tend_error_t *err) {
    plugin_string_t key = tend_str("runs");
    plugin_option_list_u8_t stored;
    if (!tend_plugin_state_get(&key, &stored, err)) return false;
    uint64_t previous = 0;
    if (stored.is_some) {
        plugin_list_u8_t digits = stored.val;
        bool ok = digits.len > 0 && digits.len <= MAX_RUNS_DIGITS;
        for (size_t i = 0; ok && i < digits.len; i++) {
            ok = digits.ptr[i] >= '0' && digits.ptr[i] <= '9';
            previous = previous * 10 + (uint64_t)(digits.ptr[i] - '0');
        }
        plugin_list_u8_free(&digits);
        if (!ok) previous = 0;
    }
    *runs = previous + 1;
    plugin_string_t text = tend_format("%llu", (unsigned long long)*runs);
    plugin_list_u8_t value = tend_bytes(text);
    bool stored_ok = tend_plugin_state_set(&key, &value, err);
    plugin_string_free(&text);
    return stored_ok;
}

/* "answered STATUS" or "unreachable (MESSAGE)" into `what`; `*ok` when 2xx. A
 * denied request fails the reconcile: the operator must fix the grant. */
static bool probe(plugin_string_t url, plugin_string_t *what, bool *ok, tend_error_t *err) {
    tend_plugin_http_request_t req = {
        .method = tend_str("GET"),
        .url = url,
        .timeout_ms = {.is_some = true, .val = 2000},
    };
    tend_plugin_http_response_t resp;
    tend_error_t failed;
    if (tend_plugin_http_send(&req, &resp, &failed)) {
        *what = tend_format("answered %u", (unsigned)resp.status);
        *ok = resp.status >= 200 && resp.status < 300;
        tend_plugin_http_response_free(&resp);
        return true;
    }
    if (failed.tag == TEND_PLUGIN_TYPES_ERROR_DENIED) {
        *err = failed;
        return false;
    }
    plugin_string_t message = tend_error_message(&failed);
    *what = tend_format("unreachable (%.*s)", TEND_STR(message));
    *ok = false;
    tend_plugin_types_error_free(&failed);
    return true;
}

/* The most bytes of the host's message a report line quotes. */
#define MAX_MESSAGE 400

/* `message` cut to MAX_MESSAGE bytes on a character boundary, ending with "…"
 * when cut: a report stays one short line whatever the host said. */
static plugin_string_t bounded(plugin_string_t message) {
    if (message.len <= MAX_MESSAGE) return tend_format("%.*s", TEND_STR(message));
    size_t end = MAX_MESSAGE;
    while (end > 0 && (message.ptr[end] & 0xC0) == 0x80) end--;
    return tend_format("%.*s…", (int)end, (const char *)message.ptr);
}

/* This node's Node into `node`: "found", "missing" (not `*ok`), or, off a
 * cluster (no Kubernetes API), "not checked (WHY)" and the probe alone
 * decides. Any other error fails the reconcile. */
static bool check_node(plugin_string_t name, plugin_string_t *node, bool *ok, tend_error_t *err) {
    tend_plugin_kube_object_key_t key = {
        .api_version = tend_str("v1"),
        .kind = tend_str("Node"),
        .name = name,
    };
    plugin_string_t object;
    tend_error_t failed;
    if (tend_plugin_kube_get(&key, &object, &failed)) {
        plugin_string_free(&object);
        *node = tend_format("found");
        *ok = true;
        return true;
    }
    if (failed.tag == TEND_PLUGIN_TYPES_ERROR_NOT_FOUND) {
        *node = tend_format("missing");
        *ok = false;
    } else if (failed.tag == TEND_PLUGIN_TYPES_ERROR_UNAVAILABLE) {
        plugin_string_t why = bounded(tend_error_message(&failed));
        *node = tend_format("not checked (%.*s)", TEND_STR(why));
        plugin_string_free(&why);
        *ok = true;
    } else {
        *err = failed;
        return false;
    }
    tend_plugin_types_error_free(&failed);
    return true;
}

static bool reconcile(tend_context_t *ctx, exports_tend_plugin_reconciler_outcome_t *ret,
                      tend_error_t *err) {
    plugin_string_t url = {0}, report = {0}, answer = {0}, node = {0}, line = {0};
    bool done = false, answered_ok = false, node_ok = false;
    uint64_t runs;
    if (!tend_config_string(ctx, "url", "http://127.0.0.1:10248/healthz", &url, err) ||
        !tend_config_string(ctx, "report", "/var/lib/{{name}}/report.txt", &report, err) ||
        !count_run(&runs, err) || !probe(url, &answer, &answered_ok, err) ||
        !check_node(ctx->node_name, &node, &node_ok, err))
        goto out;
    line = tend_format("%.*s run %llu: %.*s %.*s; node %.*s %.*s", TEND_STR(ctx->plugin),
                       (unsigned long long)runs, TEND_STR(url), TEND_STR(answer),
                       TEND_STR(ctx->node_name), TEND_STR(node));
    plugin_string_t text = tend_format("%.*s\n", TEND_STR(line));
    plugin_list_u8_t contents = tend_bytes(text);
    bool changed;
    done = tend_plugin_files_write(&report, &contents, NULL, &changed, err);
    plugin_string_free(&text);
    if (!done) goto out;
    ret->health = answered_ok && node_ok ? TEND_PLUGIN_TYPES_HEALTH_HEALTHY
                                       : TEND_PLUGIN_TYPES_HEALTH_DEGRADED;
    ret->message = line;
    ret->requeue_after_ms.is_some = false;
    line = (plugin_string_t){0};
out:
    plugin_string_free(&url);
    plugin_string_free(&report);
    plugin_string_free(&answer);
    plugin_string_free(&node);
    plugin_string_free(&line);
    return done;
}

bool exports_tend_plugin_reconciler_reconcile(tend_context_t *ctx,
                                              exports_tend_plugin_reconciler_outcome_t *ret,
                                              tend_error_t *err) {
    bool done = reconcile(ctx, ret, err);
    exports_tend_plugin_reconciler_context_free(ctx);
    return done;
}
