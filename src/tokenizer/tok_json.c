/*
 * tok_json.c - a minimal scanner over the raw text of tokenizer.json.
 *
 * The idea: a real tokenizer.json is mostly two members, model.vocab (one
 * entry per token) and model.merges (one per merge); the Gemma-3 file is
 * 33 MB of them. Building a cJSON tree for those costs a node and a string
 * allocation per entry, so the loader finds their spans here, hands the rest
 * of the document (with those two values blanked) to cJSON, and lets bpe.c
 * read the two spans directly with tok_js_string, which returns a view into
 * the source whenever a string has no escapes. Skipping a string looks for
 * its closing quote with memchr.
 */
#include "tokenizer/tok_internal.h"
#include "base/utf8.h"

#include <string.h>

const char *tok_js_ws(const char *p, const char *end) {
    while (p && p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

/* p at the opening quote; returns the position after the closing one. */
static const char *skip_string(const char *p, const char *end) {
    const char *q = p + 1;
    for (;;) {
        q = memchr(q, '"', (size_t)(end - q));
        if (!q) return NULL;
        size_t bs = 0;
        while (q - bs - 1 > p && q[-(ptrdiff_t)bs - 1] == '\\') bs++;
        if (bs % 2 == 0) return q + 1;
        q++;
    }
}

const char *tok_js_skip(const char *p, const char *end) {
    p = tok_js_ws(p, end);
    if (!p || p >= end) return NULL;
    if (*p == '"') return skip_string(p, end);
    if (*p != '{' && *p != '[') {
        while (p < end && !strchr(",}] \t\r\n", *p)) p++;
        return p;
    }
    size_t depth = 0;
    while (p < end) {
        char c = *p;
        if (c == '"') {
            if (!(p = skip_string(p, end))) return NULL;
            continue;
        }
        if (c == '{' || c == '[') depth++;
        else if (c == '}' || c == ']') {
            if (--depth == 0) return p + 1;
        }
        p++;
    }
    return NULL;
}

const char *tok_js_string(const char *p, const char *end, buf_t *scratch, const char **s, size_t *len) {
    p = tok_js_ws(p, end);
    if (!p || p >= end || *p != '"') return NULL;
    const char *stop = skip_string(p, end);
    if (!stop) return NULL;
    const char *a = p + 1, *b = stop - 1;
    if (!memchr(a, '\\', (size_t)(b - a))) {
        *s = a;
        *len = (size_t)(b - a);
        return stop;
    }
    buf_clear(scratch);
    if (buf_reserve(scratch, (size_t)(b - a))) return NULL;
    char *o = scratch->p;
    while (a < b) {
        if (*a != '\\') {
            *o++ = *a++;
            continue;
        }
        if (b - a < 2) return NULL;
        char c = a[1];
        a += 2;
        switch (c) {
        case 'n': *o++ = '\n'; break;
        case 't': *o++ = '\t'; break;
        case 'r': *o++ = '\r'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case '"': case '\\': case '/': *o++ = c; break;
        case 'u': {
            uint32_t cp, lo;
            if (b - a < 4 || u8_hex4(a, &cp)) return NULL;
            a += 4;
            if (cp >= 0xd800 && cp < 0xdc00 && b - a >= 6 && a[0] == '\\' && a[1] == 'u' && !u8_hex4(a + 2, &lo) &&
                lo >= 0xdc00 && lo < 0xe000) {
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                a += 6;
            } else if (cp >= 0xd800 && cp < 0xe000) {
                cp = 0xfffd; /* a lone surrogate (serde would reject it) */
            }
            o += u8_encode((int32_t)cp, o);
            break;
        }
        default: return NULL;
        }
    }
    *o = 0;
    scratch->len = (size_t)(o - scratch->p);
    *s = scratch->p;
    *len = scratch->len;
    return stop;
}

/* Walk the members of the object at p; for each key, the callback gets the
 * value's start and returns its end (NULL: malformed). Returns the end of
 * the object, NULL if malformed. */
typedef const char *(*member_fn)(void *ctx, const char *key, size_t klen, const char *v0, const char *end);

static const char *walk_object(const char *p, const char *end, member_fn fn, void *ctx) {
    buf_t scratch = {0};
    p = tok_js_ws(p, end);
    if (!p || p >= end || *p != '{') return NULL;
    p = tok_js_ws(p + 1, end);
    if (p && p < end && *p == '}') return p + 1;
    while (p && p < end) {
        const char *k;
        size_t klen;
        p = tok_js_string(p, end, &scratch, &k, &klen);
        p = tok_js_ws(p, end);
        if (!p || p >= end || *p != ':') break;
        const char *v0 = tok_js_ws(p + 1, end);
        const char *v1 = fn(ctx, k, klen, v0, end);
        if (!v1) break;
        p = tok_js_ws(v1, end);
        if (!p || p >= end) break;
        if (*p == '}') {
            buf_free(&scratch);
            return p + 1;
        }
        if (*p != ',') break;
        p = tok_js_ws(p + 1, end);
    }
    buf_free(&scratch);
    return NULL;
}

typedef struct {
    const char *doc;
    int seen_model;
    size_t *vocab, *merges;
} find_ctx;

static const char *on_model(void *ctx, const char *key, size_t klen, const char *v0, const char *end) {
    find_ctx *c = ctx;
    const char *v1 = tok_js_skip(v0, end);
    size_t *dst = NULL;
    if (klen == 5 && memcmp(key, "vocab", 5) == 0) dst = c->vocab;
    else if (klen == 6 && memcmp(key, "merges", 6) == 0) dst = c->merges;
    if (v1 && dst && !dst[1]) { /* the first one, as cJSON */
        dst[0] = (size_t)(v0 - c->doc);
        dst[1] = (size_t)(v1 - c->doc);
    }
    return v1;
}

/* The model object is walked in place (its big members skipped once). */
static const char *on_root(void *ctx, const char *key, size_t klen, const char *v0, const char *end) {
    find_ctx *c = ctx;
    if (klen == 5 && memcmp(key, "model", 5) == 0 && !c->seen_model && v0 < end && *v0 == '{') {
        c->seen_model = 1;
        return walk_object(v0, end, on_model, c);
    }
    return tok_js_skip(v0, end);
}

int tok_js_find_model_parts(const char *doc, size_t len, size_t vocab[2], size_t merges[2]) {
    find_ctx c = {doc, 0, vocab, merges};
    vocab[0] = vocab[1] = merges[0] = merges[1] = 0;
    return walk_object(doc, doc + len, on_root, &c) ? 0 : -1;
}

typedef struct {
    const char *key;
    size_t klen;
    const char *v0, *v1;
} member_ctx;

static const char *on_member(void *ctx, const char *key, size_t klen, const char *v0, const char *end) {
    member_ctx *c = ctx;
    const char *v1 = tok_js_skip(v0, end);
    if (v1 && !c->v0 && klen == c->klen && memcmp(key, c->key, klen) == 0) {
        c->v0 = v0;
        c->v1 = v1;
    }
    return v1;
}

int tok_js_member(const char *doc, size_t len, const char *key, const char **v0, const char **v1) {
    member_ctx c = {key, strlen(key), NULL, NULL};
    if (!walk_object(doc, doc + len, on_member, &c)) return -1;
    *v0 = c.v0;
    *v1 = c.v1;
    return 0;
}
