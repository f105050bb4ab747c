/* Tend's C SDK helpers: see tend.h. */
#include "tend.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *must_malloc(size_t n) {
    void *p = malloc(n);
    if (p == NULL) abort();
    return p;
}

plugin_string_t tend_str(const char *s) {
    return (plugin_string_t){(uint8_t *)s, strlen(s)};
}

plugin_list_u8_t tend_bytes(plugin_string_t s) {
    return (plugin_list_u8_t){s.ptr, s.len};
}

static plugin_string_t vformat(const char *fmt, va_list args) {
    va_list again;
    va_copy(again, args);
    int n = vsnprintf(NULL, 0, fmt, args);
    if (n < 0) abort();
    if (n == 0) {
        va_end(again);
        return tend_str("");
    }
    char *buf = must_malloc((size_t)n + 1);
    vsnprintf(buf, (size_t)n + 1, fmt, again);
    va_end(again);
    return (plugin_string_t){(uint8_t *)buf, (size_t)n};
}

plugin_string_t tend_format(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    plugin_string_t s = vformat(fmt, args);
    va_end(args);
    return s;
}

const char *tend_error_kind(const tend_error_t *err) {
    static const char *const kinds[] = {"denied",  "not-found", "conflict",         "unavailable",
                                        "timeout", "invalid",   "budget-exhausted", "other"};
    return err->tag < sizeof kinds / sizeof kinds[0] ? kinds[err->tag] : "other";
}

plugin_string_t tend_error_message(const tend_error_t *err) {
    /* Every case carries a string, at the same place in the union. */
    return err->val.other;
}

tend_error_t tend_error(uint8_t kind, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    tend_error_t err = {.tag = kind, .val.other = vformat(fmt, args)};
    va_end(args);
    return err;
}

/* ---- JSON: one string field of the top-level object ------------------- */

static const uint8_t *skip_ws(const uint8_t *p, const uint8_t *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

/* The end of the string literal starting at `p` (on its opening quote), just
 * past the closing quote, or NULL when it is unterminated. A backslash skips
 * the byte after it, when there is one: `p` never passes `end`, which even
 * unread would be undefined behaviour. */
static const uint8_t *string_end(const uint8_t *p, const uint8_t *end) {
    for (p++; p < end; p++) {
        if (*p == '\\') {
            if (++p >= end) return NULL;
        } else if (*p == '"') {
            return p + 1;
        }
    }
    return NULL;
}

static int hex4(const uint8_t *p, const uint8_t *end, uint32_t *out) {
    if (end - p < 4) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

/* Decode the string literal [p, q) (quotes included) into `dst`, which holds
 * at least q - p bytes: an escape never decodes longer than it is written.
 * Returns the decoded length, or -1 for a malformed literal or one that
 * contains U+0000 (C strings end there). */
static long decode_string(const uint8_t *p, const uint8_t *q, uint8_t *dst) {
    const uint8_t *end = q - 1;
    uint8_t *o = dst;
    for (p++; p < end; p++) {
        uint8_t c = *p;
        if (c < 0x20) return -1;
        if (c != '\\') {
            *o++ = c;
            continue;
        }
        if (++p >= end) return -1;
        uint32_t cp;
        switch (*p) {
        case '"': *o++ = '"'; continue;
        case '\\': *o++ = '\\'; continue;
        case '/': *o++ = '/'; continue;
        case 'b': *o++ = '\b'; continue;
        case 'f': *o++ = '\f'; continue;
        case 'n': *o++ = '\n'; continue;
        case 'r': *o++ = '\r'; continue;
        case 't': *o++ = '\t'; continue;
        case 'u':
            if (!hex4(p + 1, end, &cp)) return -1;
            p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t low;
                if (end - p < 7 || p[1] != '\\' || p[2] != 'u' || !hex4(p + 3, end, &low) ||
                    low < 0xDC00 || low > 0xDFFF)
                    return -1;
                p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return -1;
            }
            break;
        default:
            return -1;
        }
        if (cp == 0) return -1;
        if (cp < 0x80) {
            *o++ = (uint8_t)cp;
        } else if (cp < 0x800) {
            *o++ = (uint8_t)(0xC0 | (cp >> 6));
            *o++ = (uint8_t)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            *o++ = (uint8_t)(0xE0 | (cp >> 12));
            *o++ = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
            *o++ = (uint8_t)(0x80 | (cp & 0x3F));
        } else {
            *o++ = (uint8_t)(0xF0 | (cp >> 18));
            *o++ = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
            *o++ = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
            *o++ = (uint8_t)(0x80 | (cp & 0x3F));
        }
    }
    return (long)(o - dst);
}

/* Past the value starting at `p` (any JSON value: nested objects and arrays
 * are skipped with a depth counter, not recursion), or NULL when the input
 * ends first. */
static const uint8_t *skip_value(const uint8_t *p, const uint8_t *end) {
    size_t depth = 0;
    while (p < end) {
        uint8_t c = *p;
        if (c == '"') {
            p = string_end(p, end);
            if (p == NULL) return NULL;
        } else if (c == '{' || c == '[') {
            depth++;
            p++;
        } else if (c == '}' || c == ']') {
            if (depth == 0) return p;
            depth--;
            p++;
        } else if (depth == 0 && (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r')) {
            return p;
        } else {
            p++;
        }
        if (depth == 0 && (c == '"' || c == '}' || c == ']')) return p;
    }
    return depth == 0 ? p : NULL;
}

tend_json_status_t tend_json_string(const uint8_t *json, size_t len, const char *key,
                                    plugin_string_t *out) {
    const uint8_t *end = json + len;
    const uint8_t *p = skip_ws(json, end);
    if (p == end || *p != '{') return TEND_JSON_MALFORMED;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}') return TEND_JSON_MISSING;
    size_t key_len = strlen(key);
    while (p < end && *p == '"') {
        const uint8_t *key_end = string_end(p, end);
        if (key_end == NULL) return TEND_JSON_MALFORMED;
        /* A literal never decodes longer than it is written, quotes included. */
        uint8_t *name = must_malloc((size_t)(key_end - p));
        long name_len = decode_string(p, key_end, name);
        bool wanted = name_len == (long)key_len && memcmp(name, key, key_len) == 0;
        free(name);
        p = skip_ws(key_end, end);
        if (p == end || *p != ':') return TEND_JSON_MALFORMED;
        p = skip_ws(p + 1, end);
        if (p == end) return TEND_JSON_MALFORMED;
        if (wanted) {
            if (*p != '"') return TEND_JSON_NOT_STRING;
            const uint8_t *value_end = string_end(p, end);
            if (value_end == NULL) return TEND_JSON_MALFORMED;
            uint8_t *value = must_malloc((size_t)(value_end - p));
            long value_len = decode_string(p, value_end, value);
            if (value_len < 0) {
                free(value);
                return TEND_JSON_NOT_STRING;
            }
            value[value_len] = 0;
            *out = (plugin_string_t){value, (size_t)value_len};
            if (value_len == 0) {
                free(value);
                *out = tend_str("");
            }
            return TEND_JSON_OK;
        }
        p = skip_value(p, end);
        if (p == NULL) return TEND_JSON_MALFORMED;
        p = skip_ws(p, end);
        if (p < end && *p == '}') return TEND_JSON_MISSING;
        if (p == end || *p != ',') return TEND_JSON_MALFORMED;
        p = skip_ws(p + 1, end);
    }
    return TEND_JSON_MALFORMED;
}

bool tend_config_string(const tend_context_t *ctx, const char *key, const char *example,
                        plugin_string_t *out, tend_error_t *err) {
    if (tend_json_string(ctx->config.ptr, ctx->config.len, key, out) == TEND_JSON_OK) return true;
    *err = tend_error(TEND_PLUGIN_TYPES_ERROR_INVALID,
                      "[plugins.%.*s.config] %s: expected a string, for example \"%s\"",
                      TEND_STR(ctx->plugin), key, example);
    return false;
}
