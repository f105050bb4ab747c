/* Unit test of tend.c's JSON extractor on well-formed, odd and hostile input.
 * test.sh builds it with AddressSanitizer, so a read past `len` fails it: every
 * input is copied into a buffer of exactly its length, with no NUL after it. */
#include "tend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

static void expect(const char *json, size_t len, const char *key, tend_json_status_t want,
                   const char *want_value) {
    uint8_t *exact = malloc(len ? len : 1);
    memcpy(exact, json, len);
    plugin_string_t got = {0};
    tend_json_status_t status = tend_json_string(exact, len, key, &got);
    if (status != want || (want == TEND_JSON_OK && (got.len != strlen(want_value) ||
                                                    memcmp(got.ptr, want_value, got.len) != 0))) {
        fprintf(stderr, "%.*s [%s]: got %d %.*s, want %d %s\n", len > 80 ? 80 : (int)len, json, key, status,
                TEND_STR(got), want, want_value ? want_value : "");
        failures++;
    }
    if (status == TEND_JSON_OK) plugin_string_free(&got);
    free(exact);
}

#define CASE(json, key, want, value) expect(json, strlen(json), key, want, value)

int main(void) {
    CASE("{\"url\":\"http://x/\"}", "url", TEND_JSON_OK, "http://x/");
    CASE(" { \"a\" : [1, {\"url\": 2}, \"]}\"] , \"url\" : \"u\" } ", "url", TEND_JSON_OK, "u");
    CASE("{\"a\":{\"b\":{\"c\":null}},\"url\":\"\\\"q\\\\ \\u00e9\\ud83d\\ude00\\n\"}", "url",
         TEND_JSON_OK, "\"q\\ \xc3\xa9\xf0\x9f\x98\x80\n");
    CASE("{\"u\\u0072l\":\"escaped key\"}", "url", TEND_JSON_OK, "escaped key");
    CASE("{\"url\":\"\"}", "url", TEND_JSON_OK, "");
    CASE("{\"url\":\"first\",\"url\":\"second\"}", "url", TEND_JSON_OK, "first");
    CASE("{}", "url", TEND_JSON_MISSING, NULL);
    CASE("{\"report\":\"r\"}", "url", TEND_JSON_MISSING, NULL);
    CASE("{\"a\":1,\"b\":true}", "url", TEND_JSON_MISSING, NULL);
    CASE("{\"url\":7}", "url", TEND_JSON_NOT_STRING, NULL);
    CASE("{\"url\":[\"a\"]}", "url", TEND_JSON_NOT_STRING, NULL);
    CASE("{\"url\":\"a\\u0000b\"}", "url", TEND_JSON_NOT_STRING, NULL);
    CASE("{\"url\":\"\\ud800\"}", "url", TEND_JSON_NOT_STRING, NULL);
    CASE("{\"url\":\"\\x\"}", "url", TEND_JSON_NOT_STRING, NULL);
    CASE("", "url", TEND_JSON_MALFORMED, NULL);
    CASE("[\"url\"]", "url", TEND_JSON_MALFORMED, NULL);
    CASE("{\"url\"", "url", TEND_JSON_MALFORMED, NULL);
    CASE("{\"url\":", "url", TEND_JSON_MALFORMED, NULL);
    CASE("{\"url\":\"unterminated", "url", TEND_JSON_MALFORMED, NULL);
    /* A literal cut off after a backslash, as the wanted value, a key and a
     * skipped value: the scanner must stop at the end, not step one past it
     * (undefined behaviour even unread, which no sanitizer reports). */
    CASE("{\"url\":\"ends in a backslash\\", "url", TEND_JSON_MALFORMED, NULL);
    CASE("{\"url\":\"\\", "url", TEND_JSON_MALFORMED, NULL);
    CASE("{\"url\\", "url", TEND_JSON_MALFORMED, NULL);
    CASE("{\"a\":\"x\\", "url", TEND_JSON_MALFORMED, NULL);
    CASE("{\"a\":[\"x\\", "url", TEND_JSON_MALFORMED, NULL);
    CASE("{\"a\":\"\\\\\",\"url\":\"after an escaped backslash\"}", "url", TEND_JSON_OK,
         "after an escaped backslash");
    CASE("{\"a\":\"\\u12", "url", TEND_JSON_MALFORMED, NULL);
    CASE("{\"a\":1", "url", TEND_JSON_MALFORMED, NULL);
    CASE("{\"a\":1 \"url\":\"u\"}", "url", TEND_JSON_MALFORMED, NULL);
    /* Nesting a recursive parser would overflow the stack on. */
    size_t depth = 1000000;
    char *deep = malloc(2 * depth + 32);
    size_t n = (size_t)sprintf(deep, "{\"a\":");
    memset(deep + n, '[', depth);
    n += depth;
    memset(deep + n, ']', depth);
    n += depth;
    n += (size_t)sprintf(deep + n, ",\"url\":\"deep\"}");
    expect(deep, n, "url", TEND_JSON_OK, "deep");
    expect(deep, n - depth - 10, "url", TEND_JSON_MALFORMED, NULL);
    free(deep);
    if (failures) return 1;
    puts("tend.c: JSON extractor tests passed");
    return 0;
}
