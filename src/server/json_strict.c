/*
 * json_strict.c - request bodies parsed as strict JSON (RFC 8259) with a
 * memory bound.
 *
 * The idea: cJSON is lenient (it stops after the first value, takes "007"
 * and raw control bytes in strings) and costs ~100 bytes per value, so a
 * body of small numbers multiplied memory ~40x. A single allocation-free
 * pass checks the grammar first (one value, nothing after it but
 * whitespace, no leading zeros, no raw control bytes, valid escapes,
 * nesting at most JSON_MAX_DEPTH) and counts what cJSON would allocate
 * (values and object keys); only then does cJSON build the tree.
 *
 * The bound: at most max(65536, len / 48) allocations of at most ~96 bytes
 * each (a cJSON node and malloc's overhead) plus the string copies (at most
 * len bytes), so the tree costs at most 3x the body for bodies of 4 MiB and
 * up (8 MiB body: body + tree <= 32 MiB, 4x), and at most ~6 MiB + len below.
 * Thread-safe (no state).
 */
#include "srv.h"

#include <string.h>

#define JSON_MAX_DEPTH 128

static int ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static int digit(char c) { return c >= '0' && c <= '9'; }
static int hex(char c) { return digit(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f'); }

size_t json_alloc_limit(size_t len) { return len / 48 > 65536 ? len / 48 : 65536; }

/* The strict grammar check; 0, or -1 with *pos and *why. */
int json_check(const char *s, size_t n, size_t max_allocs, size_t *pos, const char **why) {
    char stack[JSON_MAX_DEPTH]; /* '{' or '[' */
    int depth = 0;
    size_t i = 0, allocs = 0;
    enum { VALUE, AFTER } want = VALUE;
    int key = 0; /* the next string is an object key */
#define FAIL(w) do { *pos = i; *why = (w); return -1; } while (0)
    for (;;) {
        while (i < n && ws(s[i])) i++;
        if (want == VALUE) {
            if (i >= n) FAIL("unexpected end of the body");
            char c = s[i];
            if (key && c != '"') FAIL(c == '}' ? "a trailing comma" : "an object key must be a string");
            if (++allocs > max_allocs) FAIL("too many JSON values for the body's size");
            if (c == '{' || c == '[') {
                if (depth >= JSON_MAX_DEPTH) FAIL("nesting too deep");
                stack[depth++] = c;
                i++;
                while (i < n && ws(s[i])) i++;
                if (i < n && s[i] == (c == '{' ? '}' : ']')) { i++; depth--; want = AFTER; continue; }
                key = c == '{';
                continue;
            }
            if (c == '"') {
                i++;
                for (;;) {
                    if (i >= n) FAIL("an unterminated string");
                    unsigned char u = (unsigned char)s[i];
                    if (u == '"') { i++; break; }
                    if (u < 0x20) FAIL("a raw control byte in a string (escape it)");
                    if (u == '\\') {
                        i++;
                        if (i >= n) FAIL("an unterminated string");
                        char e = s[i];
                        if (e == 'u') {
                            if (n - i < 5 || !hex(s[i + 1]) || !hex(s[i + 2]) || !hex(s[i + 3]) || !hex(s[i + 4]))
                                FAIL("a bad \\u escape");
                            i += 5;
                            continue;
                        }
                        if (!strchr("\"\\/bfnrt", e) || !e) FAIL("a bad escape in a string");
                    }
                    i++;
                }
                if (key) {
                    while (i < n && ws(s[i])) i++;
                    if (i >= n || s[i] != ':') FAIL("':' expected after an object key");
                    i++;
                    key = 0;
                    continue; /* the key's copy was counted; still want the value */
                }
                if (++allocs > max_allocs) FAIL("too many JSON values for the body's size"); /* the string's copy */
                want = AFTER;
                continue;
            }
            if (c == '-' || digit(c)) {
                if (c == '-') i++;
                if (i >= n || !digit(s[i])) FAIL("a malformed number");
                if (s[i] == '0' && i + 1 < n && digit(s[i + 1])) FAIL("a number with a leading zero");
                while (i < n && digit(s[i])) i++;
                if (i < n && s[i] == '.') {
                    i++;
                    if (i >= n || !digit(s[i])) FAIL("a malformed number");
                    while (i < n && digit(s[i])) i++;
                }
                if (i < n && (s[i] == 'e' || s[i] == 'E')) {
                    i++;
                    if (i < n && (s[i] == '+' || s[i] == '-')) i++;
                    if (i >= n || !digit(s[i])) FAIL("a malformed number");
                    while (i < n && digit(s[i])) i++;
                }
                want = AFTER;
                continue;
            }
            static const char *const lits[] = {"true", "false", "null"};
            int ok = 0;
            for (int k = 0; k < 3 && !ok; k++) {
                size_t l = strlen(lits[k]);
                if (n - i >= l && !memcmp(s + i, lits[k], l)) { i += l; ok = 1; }
            }
            if (!ok) FAIL(c == ']' ? "a trailing comma" : "a value expected");
            want = AFTER;
            continue;
        }
        /* AFTER a value */
        if (!depth) {
            if (i < n) FAIL("more after the JSON value");
            return 0;
        }
        if (i >= n) FAIL("unexpected end of the body");
        char top = stack[depth - 1];
        if (s[i] == ',') {
            i++;
            want = VALUE;
            key = top == '{';
            continue;
        }
        if (s[i] == (top == '{' ? '}' : ']')) {
            i++;
            depth--;
            continue;
        }
        FAIL(top == '{' ? "',' or '}' expected" : "',' or ']' expected");
    }
#undef FAIL
}

cJSON *json_parse_body(const char *body, size_t len, http_error *e) {
    size_t pos = 0;
    const char *why = NULL;
    if (json_check(body, len, json_alloc_limit(len), &pos, &why)) {
        http_err(e, 400, "invalid_request_error", NULL, NULL, "the body is not valid JSON: %s at byte %zu", why, pos);
        return NULL;
    }
    cJSON *o = cJSON_ParseWithLength(body, len);
    if (!o) http_err(e, 500, "server_error", NULL, NULL, "out of memory parsing the body");
    return o;
}
