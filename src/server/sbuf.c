/*
 * sbuf.c - a growable byte buffer and the JSON writing the server does with it.
 *
 * Responses are written straight into bytes (not built as cJSON trees), so
 * text that holds NUL bytes or invalid UTF-8 still comes out as valid JSON:
 * control bytes are escaped and invalid sequences become U+FFFD. A failed
 * allocation sets `oom` and drops further writes; the caller checks once.
 */
#include "srv.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The server's one growth rule: it links only xllm.h, so not base/buf.h's
 * array_reserve (the same rule). */
int srv_reserve(void *items, size_t *cap, size_t need, size_t size, size_t first, size_t max) {
    if (need <= *cap) return 0;
    if (need > max || (size && max > SIZE_MAX / size)) return -1;
    size_t c = *cap ? *cap : first;
    while (c < need) c = c > max / 2 ? max : c * 2;
    if (c > max) c = max;
    void **p = items;
    void *q = realloc(*p, c * size);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int sb_grow(sbuf *b, size_t add) {
    if (b->oom) return 0;
    if (b->len + add + 1 > b->cap && srv_reserve(&b->p, &b->cap, b->len + add + 1, 1, 256, (size_t)1 << 41)) {
        b->oom = 1;
        return 0;
    }
    return 1;
}

void sb_put(sbuf *b, const void *s, size_t n) {
    if (!n || !sb_grow(b, n)) return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

void sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char tmp[512];
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) { sb_put(b, tmp, (size_t)n); return; }
    if (!sb_grow(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned min;
    if (c >= 0xc2 && c <= 0xdf) len = 2, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef) len = 3, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, min = 0x10000;
    else return 0;
    if (len > n) return 0;
    unsigned cp = c & (0xff >> (len + 1));
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

int utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq(u + i, n - i);
        if (!l) return 0;
        i += l;
    }
    return 1;
}

void sb_json_str(sbuf *b, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    sb_put(b, "\"", 1);
    size_t run = 0; /* start of a run of bytes copied as they are */
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        const char *esc = NULL;
        char tmp[8];
        size_t l = 1;
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c < 0x20 || c == 0x7f) { snprintf(tmp, sizeof tmp, "\\u%04x", c); esc = tmp; }
        else if (c >= 0x80) {
            l = utf8_seq(u + i, n - i);
            if (!l) { esc = "\\ufffd"; l = 1; }
        }
        if (esc) {
            sb_put(b, s + run, i - run);
            sb_puts(b, esc);
            i += l;
            run = i;
        } else {
            i += l;
        }
    }
    sb_put(b, s + run, n - run);
    sb_put(b, "\"", 1);
}

void sb_json_num(sbuf *b, double v) {
    if (isnan(v)) { sb_puts(b, "null"); return; }
    if (isinf(v)) { sb_puts(b, v < 0 ? "-9999.0" : "9999.0"); return; }
    sb_printf(b, "%.9g", v);
}

void sb_free(sbuf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
    b->oom = 0;
}

char *sb_take(sbuf *b) {
    if (b->oom) { sb_free(b); return NULL; }
    if (!b->p) { char *e = malloc(1); if (e) e[0] = 0; return e; }
    char *p = b->p;
    b->p = NULL;
    b->len = b->cap = 0;
    return p;
}
