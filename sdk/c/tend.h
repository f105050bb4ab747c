/* Tend's C SDK: the few helpers a plugin needs on top of the generated
 * bindings of world `plugin` (bindings/plugin.h, from wit/ by
 * `cargo xtask lang c`).
 *
 * Why: the generated API is complete but raw. Every string is a
 * (pointer, length) pair whose ownership follows the canonical ABI, and every
 * capability reports failure through one `error` variant. These helpers build
 * and free those strings, name an error's kind and message, and read the
 * operator's `[plugins.NAME.config]` (JSON text) with the message Tend's
 * plugins give for a bad value.
 *
 * There is no C fake host: a C plugin's test stubs the imports it calls, and
 * no stub decides grants. The grant rules exist once, in Rust (tend-rules);
 * the Rust, Python and JavaScript fakes run them and pass the shared
 * conformance table (sdk/conformance.json), C would need a native build of
 * those fakes in every plugin test. For grant-faithful answers run
 * `tend plan` against the real host.
 *
 * Ownership, as the canonical ABI has it: what an import returns (results,
 * errors) belongs to the caller, who frees it; the `context` of a reconcile
 * belongs to the plugin (free it with
 * exports_tend_plugin_reconciler_context_free); what a reconcile returns
 * (outcome or error) must be malloc'd and is freed by the bindings. */
#ifndef TEND_H
#define TEND_H

#include "plugin.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef tend_plugin_types_error_t tend_error_t;
typedef tend_plugin_types_context_t tend_context_t;

/* printf arguments for a plugin_string_t: printf("%.*s", TEND_STR(s)). */
#define TEND_STR(s) (int)(s).len, (const char *)(s).ptr

/* A view of the NUL-terminated `s`, for arguments: never free it. */
plugin_string_t tend_str(const char *s);

/* The bytes of `s`, a view for arguments (files.write, state.set): never free it. */
plugin_list_u8_t tend_bytes(plugin_string_t s);

/* A new string from a printf format, malloc'd and NUL-terminated (the NUL is
 * not counted in `len`). Aborts when memory runs out, like the bindings do.
 * An empty result is a static "", which plugin_string_free leaves alone (it
 * frees only non-empty strings). */
plugin_string_t tend_format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "denied", "not-found", "conflict", "unavailable", "timeout", "invalid",
 * "budget-exhausted" or "other", as the WIT spells them. */
const char *tend_error_kind(const tend_error_t *err);

/* The operator's message an error carries (every case has one): a view,
 * freed with the error. */
plugin_string_t tend_error_message(const tend_error_t *err);

/* A new error of `kind` (TEND_PLUGIN_TYPES_ERROR_DENIED, ...) with a
 * formatted, malloc'd message: what a reconcile returns. */
tend_error_t tend_error(uint8_t kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* What tend_json_string found. */
typedef enum {
    TEND_JSON_OK,
    /* The top-level object has no such key. */
    TEND_JSON_MISSING,
    /* The value is not a string (or is one holding U+0000). */
    TEND_JSON_NOT_STRING,
    /* The text is not a JSON object. */
    TEND_JSON_MALFORMED,
} tend_json_status_t;

/* The string value of key `key` in the top-level JSON object `json`, decoded
 * (escapes, \uXXXX and surrogate pairs) into `out`, malloc'd and
 * NUL-terminated (an empty one is a static "", as with tend_format); `out`
 * is untouched unless TEND_JSON_OK.
 *
 * A bounded extractor, not a parser: it reads only `len` bytes, skips other
 * values (nested ones with a counter, not recursion, so hostile nesting
 * cannot exhaust the stack) and needs no memory beyond the result and a key.
 * It does not validate what it skips: the host hands plugins JSON it wrote
 * from the operator's TOML. The first of duplicate keys wins. */
tend_json_status_t tend_json_string(const uint8_t *json, size_t len, const char *key,
                                    plugin_string_t *out);

/* The string `key` of the operator's `[plugins.NAME.config]`, malloc'd into
 * `out`; otherwise false, with `err` set to
 * invalid("[plugins.NAME.config] KEY: expected a string, for example \"EXAMPLE\""). */
bool tend_config_string(const tend_context_t *ctx, const char *key, const char *example,
                        plugin_string_t *out, tend_error_t *err);

#ifdef __cplusplus
}
#endif

#endif
