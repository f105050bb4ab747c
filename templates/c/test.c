/* Unit test of {{name}}: the plugin compiled natively against this file's own
 * stubs of the imports it calls (state, http, kube, files). The stubs are
 * scripted, not faithful: they know no grants and none of the host's rules
 * (those are written once, in Tend's Rust crate tend-rules; for grant-faithful
 * answers run `tend plan` against the real host). Every call succeeds unless a
 * test scripts its failure in `node`. They allocate their results with malloc
 * as the canonical ABI does, so the sanitizers test.sh builds with catch a
 * leak or a double free. */
#include "tend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond);                \
            fprintf(stderr, __VA_ARGS__);                                             \
            fprintf(stderr, "\n");                                                    \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

/* A scripted failure: the call answers error `kind` with `message` (NULL: the
 * call succeeds). */
typedef struct {
    uint8_t kind; /* TEND_PLUGIN_TYPES_ERROR_... */
    const char *message;
} failure_t;

/* The node, as the stubs answer for it. */
static struct {
    const char *plugin;
    char runs[32];             /* state key "runs"; "" when absent */
    int http_status;           /* the answer to the GET ... */
    failure_t http_fails;      /* ... unless it fails */
    const char *node;          /* the Node that exists, or NULL: not-found ... */
    failure_t kube_fails;      /* ... unless its get fails */
    failure_t files_fails;     /* the write fails */
    char report_path[256];     /* the last write */
    char report[512];
} node;

/* What Tend's host answers a write of the report when no files grant covers
 * it (tend-rules files::resolve), copied here as test data: the stubs know no
 * grants. Tend's tests/e2e/languages.rs checks the host's message end to end. */
static const char *const DENIED_WRITE =
    "no files grant covers /var/lib/probe/report.txt: add { path = \"/var/lib/probe\", "
    "write = true } to [plugins.probe.grants] files";

static plugin_string_t dup_str(const char *s) {
    plugin_string_t out;
    plugin_string_dup(&out, s);
    return out;
}

static bool str_is(plugin_string_t s, const char *want) {
    return s.len == strlen(want) && memcmp(s.ptr, want, s.len) == 0;
}

static void copy(char *dst, size_t cap, const uint8_t *src, size_t len) {
    CHECK(len < cap, "%zu bytes do not fit the stub's buffer", len);
    memcpy(dst, src, len);
    dst[len] = 0;
}

/* Answer the scripted failure, if any: true when there is one. */
static bool fails(failure_t failure, tend_error_t *err) {
    if (failure.message == NULL) return false;
    *err = tend_error(failure.kind, "%s", failure.message);
    return true;
}

bool tend_plugin_state_get(plugin_string_t *key, plugin_option_list_u8_t *ret,
                           tend_plugin_state_error_t *err) {
    (void)err;
    CHECK(str_is(*key, "runs"), "unexpected state key %.*s", TEND_STR(*key));
    ret->is_some = node.runs[0] != 0;
    if (ret->is_some) {
        plugin_string_t value = dup_str(node.runs);
        ret->val = tend_bytes(value);
    }
    return true;
}

bool tend_plugin_state_set(plugin_string_t *key, plugin_list_u8_t *value,
                           tend_plugin_state_error_t *err) {
    (void)err;
    CHECK(str_is(*key, "runs"), "unexpected state key %.*s", TEND_STR(*key));
    copy(node.runs, sizeof node.runs, value->ptr, value->len);
    return true;
}

bool tend_plugin_http_send(tend_plugin_http_request_t *req, tend_plugin_http_response_t *ret,
                           tend_plugin_http_error_t *err) {
    CHECK(str_is(req->method, "GET"), "method %.*s", TEND_STR(req->method));
    CHECK(req->timeout_ms.is_some && req->timeout_ms.val == 2000, "the probe's timeout");
    if (fails(node.http_fails, err)) return false;
    *ret = (tend_plugin_http_response_t){.status = (uint16_t)node.http_status};
    return true;
}

bool tend_plugin_kube_get(tend_plugin_kube_object_key_t *key, plugin_string_t *ret,
                          tend_plugin_kube_error_t *err) {
    CHECK(str_is(key->api_version, "v1") && str_is(key->kind, "Node"), "a Node");
    if (fails(node.kube_fails, err)) return false;
    if (node.node != NULL && str_is(key->name, node.node)) {
        *ret = dup_str("{\"kind\":\"Node\"}");
        return true;
    }
    *err = tend_error(TEND_PLUGIN_TYPES_ERROR_NOT_FOUND, "stub: no Node %.*s",
                      TEND_STR(key->name));
    return false;
}

bool tend_plugin_files_write(plugin_string_t *path, plugin_list_u8_t *contents,
                             uint32_t *maybe_mode, bool *ret, tend_plugin_files_error_t *err) {
    CHECK(maybe_mode == NULL, "the default mode");
    if (fails(node.files_fails, err)) return false;
    copy(node.report_path, sizeof node.report_path, path->ptr, path->len);
    copy(node.report, sizeof node.report, contents->ptr, contents->len);
    *ret = true;
    return true;
}

/* A reconcile of `config` on node-1, with a context the plugin owns. */
static bool reconcile(const char *config, tend_plugin_types_outcome_t *outcome,
                      tend_error_t *err) {
    tend_context_t *ctx = calloc(1, sizeof *ctx);
    tend_plugin_types_trigger_t *trigger = calloc(1, sizeof *trigger);
    CHECK(ctx != NULL && trigger != NULL, "out of memory");
    trigger->kind = dup_str("manual");
    *ctx = (tend_context_t){
        .plugin = dup_str(node.plugin),
        .config = dup_str(config),
        .triggers = {trigger, 1},
        .node_name = dup_str("node-1"),
    };
    bool done = exports_tend_plugin_reconciler_reconcile(ctx, outcome, err);
    free(ctx);
    return done;
}

static const char *const CONFIG =
    "{\"report\":\"/var/lib/probe/report.txt\",\"url\":\"http://127.0.0.1:10248/healthz\"}";

static void healthy_runs_count_and_report(void) {
    node = (typeof(node)){.plugin = "probe", .http_status = 200, .node = "node-1"};
    for (int run = 1; run <= 2; run++) {
        tend_plugin_types_outcome_t outcome;
        tend_error_t err;
        CHECK(reconcile(CONFIG, &outcome, &err), "failed: %s: %.*s", tend_error_kind(&err),
              TEND_STR(tend_error_message(&err)));
        char line[160];
        snprintf(line, sizeof line,
                 "probe run %d: http://127.0.0.1:10248/healthz answered 200; node node-1 found",
                 run);
        CHECK(outcome.health == TEND_PLUGIN_TYPES_HEALTH_HEALTHY, "health %u", outcome.health);
        CHECK(str_is(outcome.message, line), "summary %.*s", TEND_STR(outcome.message));
        CHECK(strcmp(node.report_path, "/var/lib/probe/report.txt") == 0, "%s", node.report_path);
        CHECK(strncmp(node.report, line, strlen(line)) == 0 &&
                  strcmp(node.report + strlen(line), "\n") == 0,
              "report %s", node.report);
        CHECK(atoi(node.runs) == run, "runs %s", node.runs);
        tend_plugin_types_outcome_free(&outcome);
    }
}

static void missing_node_degrades(void) {
    node = (typeof(node)){.plugin = "probe", .http_status = 503};
    const char *const want[] = {
        "probe run 1: http://127.0.0.1:10248/healthz answered 503; node node-1 missing",
        "probe run 2: http://127.0.0.1:10248/healthz unreachable (connection refused); "
        "node node-1 missing",
    };
    for (int run = 1; run <= 2; run++) {
        if (run == 2)
            node.http_fails = (failure_t){TEND_PLUGIN_TYPES_ERROR_UNAVAILABLE, "connection refused"};
        tend_plugin_types_outcome_t outcome;
        tend_error_t err;
        CHECK(reconcile(CONFIG, &outcome, &err), "failed: %.*s",
              TEND_STR(tend_error_message(&err)));
        CHECK(outcome.health == TEND_PLUGIN_TYPES_HEALTH_DEGRADED, "health %u", outcome.health);
        CHECK(str_is(outcome.message, want[run - 1]), "summary %.*s", TEND_STR(outcome.message));
        tend_plugin_types_outcome_free(&outcome);
    }
}

/* No Kubernetes API: the node is not checked, the host's message (bounded) says
 * why, and the probe alone decides the health. */
static void off_a_cluster_the_node_is_not_checked(void) {
    static const char *const why = "no Kubernetes API: not in a cluster";
    node = (typeof(node)){.plugin = "probe", .http_status = 200,
                          .kube_fails = {TEND_PLUGIN_TYPES_ERROR_UNAVAILABLE, why}};
    tend_plugin_types_outcome_t outcome;
    tend_error_t err;
    CHECK(reconcile(CONFIG, &outcome, &err), "failed: %.*s", TEND_STR(tend_error_message(&err)));
    const char *const line = "probe run 1: http://127.0.0.1:10248/healthz answered 200; "
                             "node node-1 not checked (no Kubernetes API: not in a cluster)";
    CHECK(outcome.health == TEND_PLUGIN_TYPES_HEALTH_HEALTHY, "health %u", outcome.health);
    CHECK(str_is(outcome.message, line), "summary %.*s", TEND_STR(outcome.message));
    CHECK(strncmp(node.report, line, strlen(line)) == 0 &&
              strcmp(node.report + strlen(line), "\n") == 0,
          "report %s", node.report);
    tend_plugin_types_outcome_free(&outcome);

    char long_why[601] = {0}, quoted[420] = {0};
    for (int i = 0; i < 300; i++) memcpy(long_why + 2 * i, "é", 2);
    snprintf(quoted, sizeof quoted, "not checked (%.400s…)", long_why);
    node.kube_fails.message = long_why;
    CHECK(reconcile(CONFIG, &outcome, &err), "failed: %.*s", TEND_STR(tend_error_message(&err)));
    size_t tail = strlen(quoted);
    CHECK(outcome.message.len >= tail &&
              memcmp(outcome.message.ptr + outcome.message.len - tail, quoted, tail) == 0,
          "summary %.*s", TEND_STR(outcome.message));
    tend_plugin_types_outcome_free(&outcome);
}

static void expect_error(const char *config, uint8_t kind, const char *message) {
    tend_plugin_types_outcome_t outcome;
    tend_error_t err;
    CHECK(!reconcile(config, &outcome, &err), "succeeded: %.*s", TEND_STR(outcome.message));
    CHECK(err.tag == kind, "kind %s", tend_error_kind(&err));
    CHECK(str_is(tend_error_message(&err), message), "message %.*s",
          TEND_STR(tend_error_message(&err)));
    tend_plugin_types_error_free(&err);
}

/* The host's refusal, scripted: the plugin fails with it unchanged. */
static void without_a_files_grant_the_write_is_denied(void) {
    node = (typeof(node)){.plugin = "probe", .http_status = 200, .node = "node-1",
                          .files_fails = {TEND_PLUGIN_TYPES_ERROR_DENIED, DENIED_WRITE}};
    expect_error(CONFIG, TEND_PLUGIN_TYPES_ERROR_DENIED, DENIED_WRITE);
    CHECK(node.report_path[0] == 0, "a denied write wrote %s", node.report_path);
}

static void a_denied_node_lookup_fails_the_reconcile(void) {
    node = (typeof(node)){.plugin = "probe", .http_status = 200,
                          .kube_fails = {TEND_PLUGIN_TYPES_ERROR_DENIED, "no kube grant"}};
    expect_error(CONFIG, TEND_PLUGIN_TYPES_ERROR_DENIED, "no kube grant");
}

static void a_bad_config_names_the_key_and_an_example(void) {
    node = (typeof(node)){.plugin = "probe"};
    expect_error("{\"report\":\"/r\"}", TEND_PLUGIN_TYPES_ERROR_INVALID,
                 "[plugins.probe.config] url: expected a string, for example "
                 "\"http://127.0.0.1:10248/healthz\"");
    expect_error("{\"url\":\"http://x/\",\"report\":7}", TEND_PLUGIN_TYPES_ERROR_INVALID,
                 "[plugins.probe.config] report: expected a string, for example "
                 "\"/var/lib/{{name}}/report.txt\"");
}

int main(void) {
    healthy_runs_count_and_report();
    missing_node_degrades();
    off_a_cluster_the_node_is_not_checked();
    without_a_files_grant_the_write_is_denied();
    a_denied_node_lookup_fails_the_reconcile();
    a_bad_config_names_the_key_and_an_example();
    puts("{{name}}: 6 tests passed");
    return 0;
}
