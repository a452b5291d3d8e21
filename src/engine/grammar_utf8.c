/*
 * grammar_utf8.c - sets of Unicode code points, and the rule that matches one
 * character of a set as UTF-8 bytes.
 *
 * The matcher works on bytes, so a character class becomes alternatives of
 * byte-class sequences: a code-point range is split where its UTF-8 length
 * changes and then where a continuation byte would wrap, until each piece is
 * a product of byte ranges (the construction of Rust's regex-syntax utf8
 * module). Surrogates (U+D800..U+DFFF) are never produced.
 */
#include "engine/grammar_impl.h"
#include "base/alloc.h"
#include "base/buf.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

void cpset_add(cpset *s, uint32_t lo, uint32_t hi) {
    if (s->oom || lo > hi) return;
    size_t c = (size_t)s->cap; /* in [lo, hi] pairs */
    if (s->n >= INT_MAX / 2 || array_reserve(&s->r, &c, (size_t)s->n + 1, 2 * sizeof(uint32_t), 8)) {
        s->oom = 1;
        return;
    }
    s->cap = (int)c;
    s->r[2 * s->n] = lo;
    s->r[2 * s->n + 1] = hi > 0x10FFFF ? 0x10FFFF : hi;
    s->n++;
}

static int cmp_range(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

void cpset_norm(cpset *s) {
    if (s->n < 2) return;
    qsort(s->r, (size_t)s->n, 2 * sizeof(uint32_t), cmp_range);
    int k = 0;
    for (int i = 1; i < s->n; i++) {
        if (s->r[2 * i] <= s->r[2 * k + 1] + 1) {
            if (s->r[2 * i + 1] > s->r[2 * k + 1]) s->r[2 * k + 1] = s->r[2 * i + 1];
        } else {
            k++;
            s->r[2 * k] = s->r[2 * i];
            s->r[2 * k + 1] = s->r[2 * i + 1];
        }
    }
    s->n = k + 1;
}

void cpset_negate(cpset *s) {
    cpset_norm(s);
    cpset t = {0};
    uint32_t next = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->r[2 * i] > next) cpset_add(&t, next, s->r[2 * i] - 1);
        next = s->r[2 * i + 1] + 1;
    }
    if (next <= 0x10FFFF) cpset_add(&t, next, 0x10FFFF);
    t.oom |= s->oom;
    cpset_free(s);
    *s = t;
}

void cpset_free(cpset *s) {
    xllm_free(s->r);
    memset(s, 0, sizeof *s);
}

static int utf8_encode(uint32_t cp, unsigned char *o) {
    if (cp < 0x80) return o[0] = (unsigned char)cp, 1;
    if (cp < 0x800) return o[0] = (unsigned char)(0xC0 | (cp >> 6)), o[1] = (unsigned char)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 63));
        o[2] = (unsigned char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 63));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 63));
    o[3] = (unsigned char)(0x80 | (cp & 63));
    return 4;
}

/* Add the alternatives for [lo, hi] (same UTF-8 length, no surrogates) to rule r. */
static void add_range(gbuild *b, int32_t r, uint32_t lo, uint32_t hi, int depth) {
    if (!gb_ok(b) || depth > 16) return;
    static const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= bounds[i] && hi > bounds[i]) {
            add_range(b, r, lo, bounds[i], depth + 1);
            add_range(b, r, bounds[i] + 1, hi, depth + 1);
            return;
        }
    if (hi < 0x80) {
        gram_set s = {{0}};
        gram_set_range(&s, lo, hi);
        uint32_t e = gb_set_elem(b, &s);
        gb_add_alt(b, r, &e, 1);
        return;
    }
    unsigned char a[4], z[4];
    int n = utf8_encode(lo, a);
    utf8_encode(hi, z);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                add_range(b, r, lo, lo | m, depth + 1);
                add_range(b, r, (lo | m) + 1, hi, depth + 1);
                return;
            }
            if ((hi & m) != m) {
                add_range(b, r, lo, (hi & ~m) - 1, depth + 1);
                add_range(b, r, hi & ~m, hi, depth + 1);
                return;
            }
        }
    }
    uint32_t el[4];
    for (int i = 0; i < n; i++) {
        gram_set s = {{0}};
        gram_set_range(&s, a[i], z[i]);
        el[i] = gb_set_elem(b, &s);
    }
    gb_add_alt(b, r, el, n);
}

static void add_cp_ranges(gbuild *b, int32_t r, const cpset *s, int json) {
    for (int i = 0; i < s->n && gb_ok(b); i++) {
        uint32_t lo = s->r[2 * i], hi = s->r[2 * i + 1];
        /* pieces without surrogates (and, in JSON, without '"', '\\' and controls) */
        uint32_t cut[8][2];
        int nc = 0;
        cut[nc][0] = lo, cut[nc][1] = hi, nc = 1;
        static const uint32_t holes_plain[][2] = {{0xD800, 0xDFFF}};
        static const uint32_t holes_json[][2] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0xD800, 0xDFFF}};
        const uint32_t(*holes)[2] = json ? holes_json : holes_plain;
        int nh = json ? 4 : 1;
        for (int h = 0; h < nh; h++) {
            int m = 0;
            uint32_t out[8][2];
            for (int k = 0; k < nc; k++) {
                uint32_t a = cut[k][0], z = cut[k][1];
                if (z < holes[h][0] || a > holes[h][1]) {
                    out[m][0] = a, out[m][1] = z, m++;
                    continue;
                }
                if (a < holes[h][0]) out[m][0] = a, out[m][1] = holes[h][0] - 1, m++;
                if (z > holes[h][1]) out[m][0] = holes[h][1] + 1, out[m][1] = z, m++;
            }
            memcpy(cut, out, sizeof out);
            nc = m;
        }
        for (int k = 0; k < nc; k++) add_range(b, r, cut[k][0], cut[k][1], 0);
    }
}

/* Mark r a text-character rule (grammar_impl.h) when s holds every
 * character a JSON string may hold as itself but DEL (grammar_mask.c's text
 * characters; s normalized: one range covering each piece). */
static void mark_textchar(gbuild *b, int32_t r, const cpset *s) {
    static const uint32_t need[][2] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x7E}, {0x80, 0xD7FF}, {0xE000, 0x10FFFF}};
    if (!gb_ok(b)) return;
    int all = 1;
    for (int k = 0; k < 5 && all; k++) {
        int in = 0;
        for (int i = 0; i < s->n && !in; i++) in = s->r[2 * i] <= need[k][0] && need[k][1] <= s->r[2 * i + 1];
        all = in;
    }
    b->rules[r].textchar = all;
}

int32_t gb_cpset(gbuild *b, const cpset *s) {
    if (s->oom) {
        b->oom = 1;
        return -1;
    }
    int32_t r = gb_new_rule(b);
    add_cp_ranges(b, r, s, 0);
    if (gb_ok(b) && !b->rules[r].defined) return gb_fail(b, "an empty character class matches nothing");
    mark_textchar(b, r, s);
    return gb_ok(b) ? r : -1;
}

static int cpset_has(const cpset *s, uint32_t c) {
    for (int i = 0; i < s->n; i++)
        if (c >= s->r[2 * i] && c <= s->r[2 * i + 1]) return 1;
    return 0;
}

int32_t gb_cpset_json(gbuild *b, const cpset *s) {
    if (s->oom) {
        b->oom = 1;
        return -1;
    }
    int32_t r = gb_new_rule(b);
    add_cp_ranges(b, r, s, 1);
    static const char hex[] = "0123456789abcdef";
    for (uint32_t c = 0; c < 0x20 && gb_ok(b); c++) {
        if (!cpset_has(s, c)) continue;
        char esc[7];
        size_t n;
        if (c == '\n') memcpy(esc, "\\n", 2), n = 2;
        else if (c == '\t') memcpy(esc, "\\t", 2), n = 2;
        else if (c == '\r') memcpy(esc, "\\r", 2), n = 2;
        else esc[0] = '\\', esc[1] = 'u', esc[2] = '0', esc[3] = '0', esc[4] = hex[c >> 4], esc[5] = hex[c & 15], n = 6;
        uint32_t e = gb_ref(gb_lit(b, esc, n));
        if (gb_ok(b)) gb_add_alt(b, r, &e, 1);
    }
    if (gb_ok(b) && cpset_has(s, '"')) {
        uint32_t e = gb_ref(gb_lit(b, "\\\"", 2));
        if (gb_ok(b)) gb_add_alt(b, r, &e, 1);
    }
    if (gb_ok(b) && cpset_has(s, '\\')) {
        uint32_t e = gb_ref(gb_lit(b, "\\\\", 2));
        if (gb_ok(b)) gb_add_alt(b, r, &e, 1);
    }
    if (gb_ok(b) && !b->rules[r].defined) return gb_fail(b, "an empty character class matches nothing");
    mark_textchar(b, r, s);
    return gb_ok(b) ? r : -1;
}
