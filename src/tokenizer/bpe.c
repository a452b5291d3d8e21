/*
 * bpe.c - the BPE model: one pre-tokenized piece ("word") -> token ids.
 *
 * As in HF `tokenizers`: the word is cut into characters (looked up in the
 * vocabulary; a missing one becomes its <0xXX> byte tokens when byte_fallback
 * is on, else the unk token, fused with a neighbouring unk when fuse_unk);
 * then adjacent pairs are merged, lowest merge rank first (leftmost among
 * equal ranks), until no listed pair is left. The candidates sit in a binary
 * heap and the symbols in a linked list, so a word of n symbols costs
 * O(n log n); stale heap entries are recognised and skipped. ignore_merges:
 * a word that is itself in the vocabulary is emitted whole. Dropout is
 * ignored (encoding stays deterministic).
 *
 * Speed: the vocabulary and merges are read straight from the raw JSON text
 * (tok_json.c) into one string arena, a string hash map and a pair -> (rank,
 * new id) map; single BMP characters have a direct table. Words shorter than
 * 256 bytes are remembered in a word cache (as HF does), which a workspace
 * owns when asked to, so repeated words cost one hash lookup.
 *
 * SentencePiece-style models get the whole text as one "word". Such a word
 * is cut, exactly, before each '▁' that follows a character x when no
 * vocabulary token contains "x▁" (checked at load): no merge can then
 * span the cut, so both sides merge independently and the result is the
 * same, while the short pieces hit the word cache.
 */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/file.h"
#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tok_bpe {
    tok_strmap vocab;       /* token -> id; keys point into arena */
    char *arena;            /* every vocab string, NUL-terminated */
    const char **id_to_tok; /* id -> token (NULL = hole) */
    uint32_t *id_len;
    int32_t max_id;
    int32_t *char_ids;      /* BMP code point -> id of that one-char token, -1 */
    tok_u64map merges;      /* (a << 32 | b) -> (rank << 32 | new id) */
    char *unk_token;
    char *prefix, *suffix;  /* continuing_subword_prefix, end_of_word_suffix */
    size_t plen, slen;
    int fuse_unk, byte_fallback, ignore_merges;
    int32_t byte_ids[256];  /* <0xXX> tokens, -1 where absent */
    int cut_ok;             /* words may be cut before U+2581 (see above) */
    int32_t *cut_bad;       /* characters x with "x\u2581" inside some token (sorted) */
    size_t n_cut_bad;
};

typedef struct { int32_t c, prev, next; uint32_t len; } bpe_sym;
typedef struct { uint32_t rank, pos; int32_t new_id; } bpe_cand;

#define CACHE_MAX_WORD 256    /* bytes; longer words are not cached (HF: MAX_LENGTH) */
#define CACHE_SLOTS 65536     /* power of two */
#define CACHE_MAX_ENTRIES 40000 /* then it starts over */

typedef struct {
    uint64_t h;
    uint32_t key_off, ids_off; /* ids_off == UINT32_MAX: empty */
    uint16_t key_len, n_ids;
} cache_slot;

struct tok_bpe_ws {
    bpe_sym *syms;
    size_t n_syms, cap_syms;
    bpe_cand *heap;
    size_t n_heap, cap_heap;
    buf_t tmp;
    /* word cache (NULL slots = no cache) */
    cache_slot *slots;
    size_t n_entries;
    buf_t keys;
    tok_ids ids;
};

void tok_bpe_free(tok_bpe *m) {
    if (!m) return;
    tok_strmap_free(&m->vocab);
    xllm_free(m->arena);
    xllm_free((void *)m->id_to_tok);
    xllm_free(m->id_len);
    xllm_free(m->char_ids);
    xllm_free(m->cut_bad);
    tok_u64map_free(&m->merges);
    xllm_free(m->unk_token);
    xllm_free(m->prefix);
    xllm_free(m->suffix);
    xllm_free(m);
}

int32_t tok_bpe_vocab_max_id(const tok_bpe *m) { return m->max_id; }
size_t tok_bpe_vocab_count(const tok_bpe *m) { return m->vocab.n; }

const char *tok_bpe_id_to_token(const tok_bpe *m, int32_t id, size_t *len) {
    if (id < 0 || id > m->max_id || !m->id_to_tok[id]) return NULL;
    if (len) *len = m->id_len[id];
    return m->id_to_tok[id];
}

int32_t tok_bpe_token_to_id(const tok_bpe *m, const char *s, size_t len) {
    return tok_strmap_get(&m->vocab, s, len);
}

#define OOM() err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path)
/* tok_js_string fails on a bad string and when its scratch buffer cannot
 * grow: a span that is well-formed JSON means the latter */
#define BAD(what) (json_well_formed(raw + span[0], span[1] - span[0]) ? OOM() : \
                   err_setf(err, XLLM_ERR_FORMAT, "%s: malformed BPE \"%s\" near byte %zu", path, what, \
                               (size_t)(p ? p - raw : 0)))

typedef struct { const char *s; uint32_t len; int32_t id; } vocab_entry;

static xllm_status parse_vocab(const char *raw, const size_t span[2], const char *path, tok_bpe *m,
                               xllm_error *err) {
    const char *p = raw + span[0], *end = raw + span[1];
    if (span[1] <= span[0] || *p != '{')
        return err_setf(err, XLLM_ERR_FORMAT, "%s: BPE model without a \"vocab\" object", path);
    m->arena = mem_malloc(span[1] - span[0] + 1);
    if (!m->arena) return OOM();
    char *a = m->arena;
    vocab_entry *ents = NULL;
    size_t n = 0, cap = 0;
    buf_t scratch = {0};
    xllm_status st = XLLM_OK;
    m->max_id = -1;
    p = tok_js_ws(p + 1, end);
    if (p && p < end && *p == '}') p = NULL; /* empty: handled below */
    while (p && p < end) {
        const char *k;
        size_t klen;
        p = tok_js_string(p, end, &scratch, &k, &klen);
        p = tok_js_ws(p, end);
        if (!p || p >= end || *p != ':') { st = BAD("vocab"); break; }
        p = tok_js_ws(p + 1, end);
        uint64_t id = 0;
        const char *d = p;
        while (p < end && *p >= '0' && *p <= '9' && id <= 0x7ffffffe) id = id * 10 + (uint64_t)(*p++ - '0');
        if (p == d || id > 0x7ffffffe || klen > UINT32_MAX || (p < end && (*p == '.' || *p == 'e' || *p == 'E'))) {
            st = err_setf(err, XLLM_ERR_FORMAT, "%s: vocab entry \"%.*s\" has no valid id", path,
                             (int)(klen > 64 ? 64 : klen), k);
            break;
        }
        if (array_reserve(&ents, &cap, n + 1, sizeof *ents, 1024)) { st = OOM(); break; }
        memcpy(a, k, klen);
        a[klen] = 0;
        ents[n++] = (vocab_entry){a, (uint32_t)klen, (int32_t)id};
        a += klen + 1;
        if ((int32_t)id > m->max_id) m->max_id = (int32_t)id;
        p = tok_js_ws(p, end);
        if (p && p < end && *p == '}') break;
        if (!p || p >= end || *p != ',') { st = BAD("vocab"); break; }
        p++;
    }
    buf_free(&scratch);
    /* tables are indexed by id: ids must be about as many as the entries, or
     * one id of 10^9 would cost gigabytes (real vocabularies are dense) */
    if (!st && m->max_id >= 0 && (size_t)m->max_id >= 2 * n + 1024)
        st = err_setf(err, XLLM_ERR_FORMAT, "%s: vocab id %ld is far beyond its %zu entries (ids must be dense)",
                         path, (long)m->max_id, n);
    if (!st && tok_strmap_init(&m->vocab, n)) st = OOM();
    if (!st) {
        m->id_to_tok = mem_calloc((size_t)m->max_id + 1, sizeof *m->id_to_tok);
        m->id_len = mem_calloc((size_t)m->max_id + 1, sizeof *m->id_len);
        if (!m->id_to_tok || !m->id_len) st = OOM();
    }
    uint64_t *hs = st ? NULL : mem_malloc_array(n ? n : 1, sizeof *hs);
    if (!st && !hs) st = OOM();
    for (size_t i = 0; !st && i < n; i++) hs[i] = tok_hash(ents[i].s, ents[i].len);
    for (size_t i = 0; !st && i < n; i++) { /* inserts with the slots prefetched ahead */
        if (i + 16 < n) tok_strmap_prefetch(&m->vocab, hs[i + 16]);
        tok_strmap_put_h(&m->vocab, ents[i].s, ents[i].len, ents[i].id, hs[i]);
        m->id_to_tok[ents[i].id] = ents[i].s;
        m->id_len[ents[i].id] = ents[i].len;
    }
    xllm_free(hs);
    xllm_free(ents);
    if (st) return st;
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        m->byte_ids[b] = tok_strmap_get(&m->vocab, name, 6);
    }
    return XLLM_OK;
}

/* The direct table for one-character tokens (only without prefix/suffix,
 * which change what a character looks up). */
static xllm_status build_char_table(tok_bpe *m, const char *path, xllm_error *err) {
    if (m->prefix || m->suffix) return XLLM_OK;
    m->char_ids = mem_malloc_array(65536, sizeof *m->char_ids);
    if (!m->char_ids) return OOM();
    memset(m->char_ids, 0xff, 65536 * sizeof *m->char_ids);
    for (size_t i = 0; i < m->vocab.cap; i++) {
        const tok_strslot *s = &m->vocab.slots[i];
        if (!s->key || s->len == 0 || s->len > 3) continue;
        size_t l;
        int32_t cp = u8_decode((const unsigned char *)s->key, s->len, &l);
        if (cp >= 0 && l == s->len && cp < 65536) m->char_ids[cp] = s->val;
    }
    return XLLM_OK;
}

/* Merges are resolved in batches: the three strings of each (a, b, and
 * their join) go into a small arena, then all lookups of the batch run
 * together so their cache misses overlap. The resolved (pair -> rank, id)
 * entries are collected first and inserted once the count is known. */
#define MERGE_BATCH 64

typedef struct {
    buf_t arena;
    size_t off[MERGE_BATCH][3];
    uint32_t len[MERGE_BATCH][3];
    uint32_t rank[MERGE_BATCH];
    size_t n;
    tok_u64slot *kv;
    size_t n_kv, cap_kv;
} merge_batch;

static xllm_status flush_batch(tok_bpe *m, merge_batch *b, const char *path, xllm_error *err) {
    const char *keys[3 * MERGE_BATCH] = {0};
    uint32_t lens[3 * MERGE_BATCH] = {0};
    uint64_t h[3 * MERGE_BATCH] = {0};
    int32_t ids[3 * MERGE_BATCH];
    size_t n = b->n;
    for (size_t i = 0; i < n; i++)
        for (int j = 0; j < 3; j++) {
            keys[3 * i + j] = b->arena.p + b->off[i][j];
            lens[3 * i + j] = b->len[i][j];
            h[3 * i + j] = tok_hash(keys[3 * i + j], lens[3 * i + j]);
        }
    tok_strmap_get_many(&m->vocab, 3 * n, keys, lens, h, ids);
    if (array_reserve(&b->kv, &b->cap_kv, b->n_kv + n, sizeof *b->kv, 4096)) return OOM();
    for (size_t i = 0; i < n; i++) {
        int32_t ia = ids[3 * i], ib = ids[3 * i + 1], inew = ids[3 * i + 2];
        if (ia < 0 || ib < 0 || inew < 0)
            return err_setf(err, XLLM_ERR_FORMAT, "%s: merge %u uses a token missing from the vocab", path,
                               (unsigned)b->rank[i] + 1);
        b->kv[b->n_kv++] = (tok_u64slot){(uint64_t)(uint32_t)ia << 32 | (uint32_t)ib,
                                         (uint64_t)b->rank[i] << 32 | (uint32_t)inew};
    }
    b->n = 0;
    buf_clear(&b->arena);
    return XLLM_OK;
}

static xllm_status add_merge(tok_bpe *m, merge_batch *bt, const char *a, size_t alen, const char *b, size_t blen,
                             uint32_t rank, const char *path, xllm_error *err) {
    size_t i = bt->n;
    buf_t *ar = &bt->arena;
    size_t cut = m->plen < blen ? m->plen : blen; /* HF drops the prefix's length from b, unchecked */
    if (alen > UINT32_MAX / 2 || blen > UINT32_MAX / 2) return err_setf(err, XLLM_ERR_FORMAT, "%s: merge too long", path);
    bt->off[i][0] = ar->len;
    bt->len[i][0] = (uint32_t)alen;
    if (buf_append(ar, a, alen)) return OOM();
    bt->off[i][1] = ar->len;
    bt->len[i][1] = (uint32_t)blen;
    if (buf_append(ar, b, blen)) return OOM();
    bt->off[i][2] = ar->len;
    bt->len[i][2] = (uint32_t)(alen + blen - cut);
    if (buf_append(ar, a, alen) || buf_append(ar, b + cut, blen - cut)) return OOM();
    bt->rank[i] = rank;
    bt->n++;
    return bt->n == MERGE_BATCH ? flush_batch(m, bt, path, err) : XLLM_OK;
}

static xllm_status parse_merges(const char *raw, const size_t span[2], const char *path, tok_bpe *m,
                                xllm_error *err) {
    if (span[1] <= span[0]) return tok_u64map_init(&m->merges, 0) ? OOM() : XLLM_OK;
    const char *p = raw + span[0], *end = raw + span[1];
    if (*p == 'n') return tok_u64map_init(&m->merges, 0) ? OOM() : XLLM_OK; /* null */
    if (*p != '[') return err_setf(err, XLLM_ERR_FORMAT, "%s: BPE \"merges\" is not an array", path);
    buf_t sa = {0}, sb = {0};
    merge_batch bt;
    memset(&bt, 0, sizeof bt);
    xllm_status st = XLLM_OK;
    uint32_t rank = 0;
    p = tok_js_ws(p + 1, end);
    if (p && p < end && *p == ']') p = NULL;
    while (p && p < end && !st) {
        const char *a, *b;
        size_t alen, blen;
        if (*p == '"') {
            p = tok_js_string(p, end, &sa, &a, &alen);
            if (!p) { st = BAD("merges"); break; }
            if (alen >= 8 && memcmp(a, "#version", 8) == 0) goto next; /* HF skips these lines */
            const char *sp = memchr(a, ' ', alen);
            if (!sp || memchr(sp + 1, ' ', alen - (size_t)(sp + 1 - a))) {
                st = err_setf(err, XLLM_ERR_FORMAT, "%s: merge %u (\"%.*s\") is not two tokens", path,
                                 (unsigned)rank + 1, (int)(alen > 64 ? 64 : alen), a);
                break;
            }
            b = sp + 1;
            blen = alen - (size_t)(b - a);
            alen = (size_t)(sp - a);
        } else if (*p == '[') {
            p = tok_js_string(p + 1, end, &sa, &a, &alen);
            p = tok_js_ws(p, end);
            if (p && p < end && *p == ',') p = tok_js_string(p + 1, end, &sb, &b, &blen);
            else p = NULL;
            p = tok_js_ws(p, end);
            if (!p || p >= end || *p != ']') {
                st = err_setf(err, XLLM_ERR_FORMAT, "%s: merge %u is neither \"a b\" nor [a, b]", path,
                                 (unsigned)rank + 1);
                break;
            }
            p++;
        } else {
            st = err_setf(err, XLLM_ERR_FORMAT, "%s: merge %u is neither \"a b\" nor [a, b]", path,
                             (unsigned)rank + 1);
            break;
        }
        st = add_merge(m, &bt, a, alen, b, blen, rank, path, err);
        rank++;
    next:
        p = tok_js_ws(p, end);
        if (p && p < end && *p == ']') break;
        if (!p || p >= end || *p != ',') {
            if (!st) st = BAD("merges");
            break;
        }
        p = tok_js_ws(p + 1, end);
    }
    if (!st && bt.n) st = flush_batch(m, &bt, path, err);
    if (!st && tok_u64map_init_load(&m->merges, bt.n_kv, 70)) st = OOM();
    if (!st) tok_u64map_put_many(&m->merges, bt.kv, bt.n_kv);
    buf_free(&sa);
    buf_free(&sb);
    buf_free(&bt.arena);
    xllm_free(bt.kv);
    return st;
}

static xllm_status parse_str_field(const cJSON *j, const char *name, const char *path, char **out, xllm_error *err) {
    int r = tok_json_strdup(cJSON_GetObjectItemCaseSensitive(j, name), out);
    if (r == -2) return OOM();
    if (r) return err_setf(err, XLLM_ERR_FORMAT, "%s: BPE \"%s\" is not a string", path, name);
    return XLLM_OK;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

#define META_SP "\xe2\x96\x81" /* U+2581 */

/* Which characters may not be cut from a following U+2581 (see the top). */
static xllm_status build_cuts(tok_bpe *m, const char *path, xllm_error *err) {
    if (m->prefix || m->suffix || m->ignore_merges || !m->char_ids || m->char_ids[0x2581] < 0) return XLLM_OK;
    size_t cap = 0;
    for (int32_t id = 0; id <= m->max_id; id++) {
        const char *t = m->id_to_tok[id];
        if (!t) continue;
        size_t len = m->id_len[id];
        for (const char *p = t; (p = tok_find(p, len - (size_t)(p - t), META_SP, 3)) != NULL; p += 3) {
            if (p == t) continue;
            size_t st;
            int32_t x = u8_before(t, (size_t)(p - t), &st);
            if (x == 0x2581) continue;
            if (array_reserve(&m->cut_bad, &cap, m->n_cut_bad + 1, sizeof *m->cut_bad, 16)) return OOM();
            m->cut_bad[m->n_cut_bad++] = x;
        }
    }
    if (m->n_cut_bad) qsort(m->cut_bad, m->n_cut_bad, sizeof *m->cut_bad, cmp_i32);
    m->cut_ok = 1;
    return XLLM_OK;
}

xllm_status tok_bpe_parse(const cJSON *j, const char *raw, const size_t vocab[2], const size_t merges[2],
                          const char *path, tok_bpe **out, xllm_error *err) {
    *out = NULL;
    tok_bpe *m = mem_calloc(1, sizeof *m);
    if (!m) return OOM();
    xllm_status st = parse_str_field(j, "unk_token", path, &m->unk_token, err);
    if (!st) st = parse_str_field(j, "continuing_subword_prefix", path, &m->prefix, err);
    if (!st) st = parse_str_field(j, "end_of_word_suffix", path, &m->suffix, err);
    if (!st && m->prefix && !m->prefix[0]) { xllm_free(m->prefix); m->prefix = NULL; }
    if (!st && m->suffix && !m->suffix[0]) { xllm_free(m->suffix); m->suffix = NULL; }
    m->plen = m->prefix ? strlen(m->prefix) : 0;
    m->slen = m->suffix ? strlen(m->suffix) : 0;
    m->fuse_unk = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "fuse_unk"));
    m->byte_fallback = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "byte_fallback"));
    m->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "ignore_merges"));
    if (!st) st = parse_vocab(raw, vocab, path, m, err);
    if (!st) st = parse_merges(raw, merges, path, m, err);
    if (!st) st = build_char_table(m, path, err);
    if (!st) st = build_cuts(m, path, err);
    if (st) {
        tok_bpe_free(m);
        return st;
    }
    *out = m;
    return XLLM_OK;
}

/* ------------------------------------------------------------- encoding */

tok_bpe_ws *tok_bpe_ws_new(int with_cache) {
    tok_bpe_ws *ws = mem_calloc(1, sizeof(tok_bpe_ws));
    if (ws && with_cache) {
        ws->slots = mem_malloc_array(CACHE_SLOTS, sizeof *ws->slots);
        if (!ws->slots) {
            xllm_free(ws);
            return NULL;
        }
        memset(ws->slots, 0xff, CACHE_SLOTS * sizeof *ws->slots);
    }
    return ws;
}

void tok_bpe_ws_free(tok_bpe_ws *ws) {
    if (!ws) return;
    xllm_free(ws->syms);
    xllm_free(ws->heap);
    buf_free(&ws->tmp);
    xllm_free(ws->slots);
    buf_free(&ws->keys);
    xllm_free(ws->ids.v);
    xllm_free(ws);
}

static const cache_slot *cache_find(const tok_bpe_ws *ws, const char *s, size_t len, uint64_t h) {
    size_t i = (size_t)h & (CACHE_SLOTS - 1);
    for (;;) {
        const cache_slot *c = &ws->slots[i];
        if (c->ids_off == UINT32_MAX) return NULL;
        if (c->h == h && c->key_len == len && memcmp(ws->keys.p + c->key_off, s, len) == 0) return c;
        i = (i + 1) & (CACHE_SLOTS - 1);
    }
}

static void cache_put(tok_bpe_ws *ws, const char *s, size_t len, uint64_t h, const int32_t *ids, size_t n) {
    if (n > UINT16_MAX) return;
    if (ws->n_entries >= CACHE_MAX_ENTRIES || ws->keys.len + len > UINT32_MAX / 2 || ws->ids.n + n > UINT32_MAX / 2) {
        memset(ws->slots, 0xff, CACHE_SLOTS * sizeof *ws->slots); /* full: start over */
        ws->n_entries = 0;
        buf_clear(&ws->keys);
        ws->ids.n = 0;
    }
    size_t key_off = ws->keys.len, ids_off = ws->ids.n;
    if (buf_append(&ws->keys, s, len) || tok_ids_append(&ws->ids, ids, n)) {
        buf_truncate(&ws->keys, key_off); /* no room: not cached, the cache still usable */
        ws->ids.n = ids_off;
        return;
    }
    size_t i = (size_t)h & (CACHE_SLOTS - 1);
    while (ws->slots[i].ids_off != UINT32_MAX) i = (i + 1) & (CACHE_SLOTS - 1);
    ws->slots[i] = (cache_slot){h, (uint32_t)key_off, (uint32_t)ids_off, (uint16_t)len, (uint16_t)n};
    ws->n_entries++;
}

static int add_sym(tok_bpe_ws *ws, int32_t c, uint32_t len) {
    if (array_reserve(&ws->syms, &ws->cap_syms, ws->n_syms + 1, sizeof *ws->syms, 64)) return -1;
    int32_t i = (int32_t)ws->n_syms++;
    ws->syms[i] = (bpe_sym){c, i - 1, i + 1, len};
    return 0;
}

static inline int cand_less(bpe_cand a, bpe_cand b) { return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos; }

static int heap_push(tok_bpe_ws *ws, bpe_cand c) {
    if (array_reserve(&ws->heap, &ws->cap_heap, ws->n_heap + 1, sizeof *ws->heap, 64)) return -1;
    size_t i = ws->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!cand_less(c, ws->heap[parent])) break;
        ws->heap[i] = ws->heap[parent];
        i = parent;
    }
    ws->heap[i] = c;
    return 0;
}

static bpe_cand heap_pop(tok_bpe_ws *ws) {
    bpe_cand top = ws->heap[0], last = ws->heap[--ws->n_heap];
    size_t i = 0, n = ws->n_heap;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        bpe_cand best = last;
        if (l < n && cand_less(ws->heap[l], best)) { m = l; best = ws->heap[l]; }
        if (r < n && cand_less(ws->heap[r], best)) m = r;
        if (m == i) break;
        ws->heap[i] = ws->heap[m];
        i = m;
    }
    if (n) ws->heap[i] = last;
    return top;
}

static inline int lookup_merge(const tok_bpe *m, int32_t a, int32_t b, uint32_t *rank, int32_t *new_id) {
    uint64_t v;
    if (!tok_u64map_get(&m->merges, (uint64_t)(uint32_t)a << 32 | (uint32_t)b, &v)) return 0;
    *rank = (uint32_t)(v >> 32);
    *new_id = (int32_t)(uint32_t)v;
    return 1;
}

static int push_pair(const tok_bpe *m, tok_bpe_ws *ws, int32_t pos) {
    bpe_sym *s = ws->syms;
    int32_t next = s[pos].next;
    if (next < 0 || (size_t)next >= ws->n_syms) return 0;
    bpe_cand c;
    c.pos = (uint32_t)pos;
    if (!lookup_merge(m, s[pos].c, s[next].c, &c.rank, &c.new_id)) return 0;
    return heap_push(ws, c);
}

static int merge_all(const tok_bpe *m, tok_bpe_ws *ws) {
    size_t n = ws->n_syms;
    if (n) ws->syms[n - 1].next = -1;
    ws->n_heap = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (push_pair(m, ws, (int32_t)i)) return -1;
    while (ws->n_heap) {
        bpe_cand top = heap_pop(ws);
        bpe_sym *s = ws->syms;
        bpe_sym *cur = &s[top.pos];
        if (cur->len == 0 || cur->next < 0) continue;
        int32_t nx = cur->next;
        uint32_t rank;
        int32_t new_id;
        /* an expired entry: the pair at pos is no longer this merge */
        if (!lookup_merge(m, cur->c, s[nx].c, &rank, &new_id) || new_id != top.new_id) continue;
        cur->c = top.new_id;
        cur->len += s[nx].len;
        cur->next = s[nx].next;
        s[nx].len = 0;
        if (cur->next >= 0) s[cur->next].prev = (int32_t)top.pos;
        if (cur->prev >= 0 && push_pair(m, ws, cur->prev)) return -1;
        if (push_pair(m, ws, (int32_t)top.pos)) return -1;
    }
    return 0;
}

/* id of the vocab entry for one character (with prefix / suffix as HF adds them) */
static int32_t char_id(const tok_bpe *m, tok_bpe_ws *ws, const char *piece, size_t cl, int first, int last,
                       const char **full, size_t *full_len) {
    *full = piece;
    *full_len = cl;
    if (m->char_ids && cl <= 3) {
        size_t l;
        int32_t cp = u8_decode((const unsigned char *)piece, cl, &l);
        if (cp >= 0 && l == cl) return m->char_ids[cp];
    }
    if ((m->prefix && !first) || (m->suffix && last)) {
        buf_clear(&ws->tmp);
        if ((m->prefix && !first && buf_append(&ws->tmp, m->prefix, m->plen)) ||
            buf_append(&ws->tmp, piece, cl) || (m->suffix && last && buf_append(&ws->tmp, m->suffix, m->slen)))
            return -2;
        *full = ws->tmp.p;
        *full_len = ws->tmp.len;
    }
    return tok_strmap_get(&m->vocab, *full, *full_len);
}

static xllm_status merge_word(const tok_bpe *m, const char *s, size_t len, tok_ids *out, tok_bpe_ws *ws,
                              xllm_error *err) {
    ws->n_syms = 0;
    int32_t unk_id = -1;
    uint32_t unk_len = 0;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        size_t cl = u8_len(u + i, len - i);
        const char *piece;
        size_t plen;
        int32_t id = char_id(m, ws, s + i, cl, i == 0, i + cl == len, &piece, &plen);
        if (id == -2) goto oom;
        i += cl;
        if (id >= 0) {
            if (unk_id >= 0 && add_sym(ws, unk_id, unk_len)) goto oom;
            unk_id = -1;
            if (add_sym(ws, id, (uint32_t)cl)) goto oom;
            continue;
        }
        if (m->byte_fallback) {
            size_t k = 0;
            while (k < plen && m->byte_ids[(unsigned char)piece[k]] >= 0) k++;
            if (k == plen) {
                /* HF adds the byte tokens without flushing a pending unk */
                for (k = 0; k < plen; k++)
                    if (add_sym(ws, m->byte_ids[(unsigned char)piece[k]], 1)) goto oom;
                continue;
            }
        }
        if (!m->unk_token) continue; /* no unk token: the character is dropped */
        int32_t uid = tok_strmap_get(&m->vocab, m->unk_token, strlen(m->unk_token));
        if (uid < 0)
            return err_setf(err, XLLM_ERR_FORMAT, "BPE unk_token \"%s\" is not in the vocabulary", m->unk_token);
        if (unk_id >= 0 && m->fuse_unk) {
            unk_len += (uint32_t)cl;
        } else {
            if (unk_id >= 0 && add_sym(ws, unk_id, unk_len)) goto oom;
            unk_id = uid;
            unk_len = (uint32_t)cl;
        }
    }
    if (unk_id >= 0 && add_sym(ws, unk_id, unk_len)) goto oom;
    if (merge_all(m, ws)) goto oom;
    for (size_t i = 0; i < ws->n_syms; i++)
        if (ws->syms[i].len && tok_ids_push(out, ws->syms[i].c)) goto oom;
    return XLLM_OK;
oom:
    return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory in BPE");
}

static xllm_status tokenize_piece(const tok_bpe *m, const char *s, size_t len, tok_ids *out, tok_bpe_ws *ws,
                                  xllm_error *err) {
    uint64_t h = 0;
    int cacheable = ws->slots && len < CACHE_MAX_WORD;
    if (cacheable) {
        h = tok_hash(s, len);
        const cache_slot *c = cache_find(ws, s, len, h);
        if (c) {
            /* a word may tokenize to nothing (every character dropped): no ids array then */
            if (c->n_ids && tok_ids_append(out, ws->ids.v + c->ids_off, c->n_ids))
                return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory in BPE");
            return XLLM_OK;
        }
    }
    size_t first = out->n;
    xllm_status st;
    int32_t id = m->ignore_merges ? tok_strmap_get(&m->vocab, s, len) : -1;
    if (id >= 0) st = tok_ids_push(out, id) ? err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory") : XLLM_OK;
    else st = merge_word(m, s, len, out, ws, err);
    if (!st && cacheable) cache_put(ws, s, len, h, out->n > first ? out->v + first : NULL, out->n - first);
    return st;
}

/* May the word be cut before the U+2581 at s[k] (k > 0)? */
static int can_cut(const tok_bpe *m, const char *s, size_t k) {
    size_t st;
    int32_t x = u8_before(s, k, &st);
    if (x < 0 || x == 0x2581) return 0;
    if (x < 65536 ? m->char_ids[x] < 0 : tok_strmap_get(&m->vocab, s + st, k - st) < 0) return 0; /* not a plain symbol */
    size_t lo = 0, hi = m->n_cut_bad;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (m->cut_bad[mid] == x) return 0;
        if (m->cut_bad[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return 1;
}

xllm_status tok_bpe_tokenize(const tok_bpe *m, const char *s, size_t len, tok_ids *out, tok_bpe_ws *ws,
                             xllm_error *err) {
    if (len == 0) return XLLM_OK;
    if (!m->cut_ok) /* (never with ignore_merges, which looks at the whole word) */ return tokenize_piece(m, s, len, out, ws, err);
    size_t start = 0;
    for (const char *p = s + 1; (p = tok_find(p, len - (size_t)(p - s), META_SP, 3)) != NULL; p += 3) {
        size_t k = (size_t)(p - s);
        if (k <= start || !can_cut(m, s, k)) continue;
        xllm_status st = tokenize_piece(m, s + start, k - start, out, ws, err);
        if (st) return st;
        start = k;
    }
    return tokenize_piece(m, s + start, len - start, out, ws, err);
}
