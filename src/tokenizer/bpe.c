/*
 * bpe.c - the BPE model: one pre-tokenized piece ("word") -> token ids.
 *
 * As in HF `tokenizers`: the word is cut into characters (looked up in the
 * vocabulary; a missing one becomes its <0xXX> byte tokens when byte_fallback
 * is on, else the unk token, fused with a neighbouring unk when fuse_unk);
 * then adjacent pairs are merged, lowest merge rank first (leftmost among
 * equal ranks), until no listed pair is left. The candidates sit in a binary
 * heap and the symbols in a linked list, so a word of n symbols costs
 * O(n log n); stale heap entries are recognised and skipped. The vocabulary
 * is a string hash map, the merges a hash map from an (id, id) pair to
 * (rank, merged id). ignore_merges: a word that is itself in the vocabulary
 * is emitted whole. Dropout is ignored (encoding stays deterministic).
 */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"

#include <stdio.h>
#include <string.h>

struct tok_bpe {
    tok_strmap vocab;  /* token -> id; keys are the strings below */
    char **strs;       /* every vocab string (owned) */
    size_t n_strs;
    const char **id_to_tok; /* id -> token (NULL = hole) */
    int32_t max_id;
    tok_u64map merges; /* (a << 32 | b) -> (rank << 32 | new id) */
    char *unk_token;
    char *prefix, *suffix; /* continuing_subword_prefix, end_of_word_suffix */
    int fuse_unk, byte_fallback, ignore_merges;
    int32_t byte_ids[256]; /* <0xXX> tokens, -1 where absent */
};

typedef struct { int32_t c, prev, next; uint32_t len; } bpe_sym;
typedef struct { uint32_t rank, pos; int32_t new_id; } bpe_cand;

struct tok_bpe_ws {
    bpe_sym *syms;
    size_t n_syms, cap_syms;
    bpe_cand *heap;
    size_t n_heap, cap_heap;
    tok_buf tmp;
};

void tok_bpe_free(tok_bpe *m) {
    if (!m) return;
    tok_strmap_free(&m->vocab);
    for (size_t i = 0; i < m->n_strs; i++) xllm_free(m->strs[i]);
    xllm_free(m->strs);
    xllm_free((void *)m->id_to_tok);
    tok_u64map_free(&m->merges);
    xllm_free(m->unk_token);
    xllm_free(m->prefix);
    xllm_free(m->suffix);
    xllm_free(m);
}

int32_t tok_bpe_vocab_max_id(const tok_bpe *m) { return m->max_id; }

const char *tok_bpe_id_to_token(const tok_bpe *m, int32_t id) {
    return id >= 0 && id <= m->max_id ? m->id_to_tok[id] : NULL;
}

int32_t tok_bpe_token_to_id(const tok_bpe *m, const char *s, size_t len) {
    return tok_strmap_get(&m->vocab, s, len);
}

#define OOM() xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path)

static xllm_status parse_vocab(const cJSON *vocab, const char *path, tok_bpe *m, xllm_error *err) {
    if (!cJSON_IsObject(vocab)) return xllm_errorf(err, XLLM_ERR_FORMAT, "%s: BPE model without a \"vocab\" object", path);
    size_t n = (size_t)cJSON_GetArraySize(vocab);
    m->strs = xllm_calloc(n ? n : 1, sizeof *m->strs);
    if (!m->strs || tok_strmap_init(&m->vocab, n)) return OOM();
    m->max_id = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        double d = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (d < 0 || d > 0x7ffffffe || d != (double)(int32_t)d)
            return xllm_errorf(err, XLLM_ERR_FORMAT, "%s: vocab entry \"%s\" has no valid id", path, e->string);
        char *s = xllm_strdup(e->string);
        if (!s) return OOM();
        m->strs[m->n_strs++] = s;
        if (tok_strmap_put(&m->vocab, s, strlen(s), (int32_t)d)) return OOM();
        if ((int32_t)d > m->max_id) m->max_id = (int32_t)d;
    }
    m->id_to_tok = xllm_calloc((size_t)m->max_id + 1, sizeof *m->id_to_tok);
    if (!m->id_to_tok) return OOM();
    for (size_t i = 0; i < m->n_strs; i++) {
        int32_t id = tok_strmap_get(&m->vocab, m->strs[i], strlen(m->strs[i]));
        m->id_to_tok[id] = m->strs[i];
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        m->byte_ids[b] = tok_strmap_get(&m->vocab, name, 6);
    }
    return XLLM_OK;
}

static xllm_status parse_merges(const cJSON *merges, const char *path, tok_bpe *m, xllm_error *err) {
    if (!merges || cJSON_IsNull(merges)) merges = NULL;
    else if (!cJSON_IsArray(merges)) return xllm_errorf(err, XLLM_ERR_FORMAT, "%s: BPE \"merges\" is not an array", path);
    size_t n = merges ? (size_t)cJSON_GetArraySize(merges) : 0;
    if (tok_u64map_init(&m->merges, n)) return OOM();
    tok_buf joined = {0};
    xllm_status st = XLLM_OK;
    uint32_t rank = 0;
    const cJSON *e;
    size_t plen = m->prefix ? strlen(m->prefix) : 0;
    if (merges) cJSON_ArrayForEach(e, merges) {
        const char *a, *b;
        size_t alen, blen;
        if (cJSON_IsString(e)) { /* "a b": exactly one space */
            a = e->valuestring;
            const char *sp = strchr(a, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                st = xllm_errorf(err, XLLM_ERR_FORMAT, "%s: merge %u (\"%s\") is not two tokens", path,
                                 (unsigned)rank + 1, a);
                break;
            }
            alen = (size_t)(sp - a);
            b = sp + 1;
            blen = strlen(b);
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(cJSON_GetArrayItem(e, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
            a = cJSON_GetArrayItem(e, 0)->valuestring;
            b = cJSON_GetArrayItem(e, 1)->valuestring;
            alen = strlen(a);
            blen = strlen(b);
        } else {
            st = xllm_errorf(err, XLLM_ERR_FORMAT, "%s: merge %u is neither \"a b\" nor [a, b]", path,
                             (unsigned)rank + 1);
            break;
        }
        int32_t ia = tok_strmap_get(&m->vocab, a, alen), ib = tok_strmap_get(&m->vocab, b, blen);
        if (plen && blen >= plen && memcmp(b, m->prefix, plen) == 0) { b += plen; blen -= plen; }
        joined.len = 0;
        if (tok_buf_append(&joined, a, alen) || tok_buf_append(&joined, b, blen)) { st = OOM(); break; }
        int32_t inew = tok_strmap_get(&m->vocab, joined.p, joined.len);
        if (ia < 0 || ib < 0 || inew < 0) {
            st = xllm_errorf(err, XLLM_ERR_FORMAT, "%s: merge %u uses a token missing from the vocab", path,
                             (unsigned)rank + 1);
            break;
        }
        uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
        if (tok_u64map_put(&m->merges, key, (uint64_t)rank << 32 | (uint32_t)inew)) { st = OOM(); break; }
        rank++;
    }
    tok_buf_free(&joined);
    return st;
}

static xllm_status parse_str_field(const cJSON *j, const char *name, const char *path, char **out, xllm_error *err) {
    int r = tok_json_strdup(cJSON_GetObjectItemCaseSensitive(j, name), out);
    if (r == -2) return OOM();
    if (r) return xllm_errorf(err, XLLM_ERR_FORMAT, "%s: BPE \"%s\" is not a string", path, name);
    return XLLM_OK;
}

xllm_status tok_bpe_parse(const cJSON *j, const char *path, tok_bpe **out, xllm_error *err) {
    *out = NULL;
    tok_bpe *m = xllm_calloc(1, sizeof *m);
    if (!m) return OOM();
    xllm_status st = parse_str_field(j, "unk_token", path, &m->unk_token, err);
    if (!st) st = parse_str_field(j, "continuing_subword_prefix", path, &m->prefix, err);
    if (!st) st = parse_str_field(j, "end_of_word_suffix", path, &m->suffix, err);
    if (!st && m->prefix && !m->prefix[0]) { xllm_free(m->prefix); m->prefix = NULL; }
    if (!st && m->suffix && !m->suffix[0]) { xllm_free(m->suffix); m->suffix = NULL; }
    m->fuse_unk = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "fuse_unk"));
    m->byte_fallback = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "byte_fallback"));
    m->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "ignore_merges"));
    if (!st) st = parse_vocab(cJSON_GetObjectItemCaseSensitive(j, "vocab"), path, m, err);
    if (!st) st = parse_merges(cJSON_GetObjectItemCaseSensitive(j, "merges"), path, m, err);
    if (st) {
        tok_bpe_free(m);
        return st;
    }
    *out = m;
    return XLLM_OK;
}

/* ------------------------------------------------------------- encoding */

tok_bpe_ws *tok_bpe_ws_new(void) { return xllm_calloc(1, sizeof(tok_bpe_ws)); }

void tok_bpe_ws_free(tok_bpe_ws *ws) {
    if (!ws) return;
    xllm_free(ws->syms);
    xllm_free(ws->heap);
    tok_buf_free(&ws->tmp);
    xllm_free(ws);
}

static int add_sym(tok_bpe_ws *ws, int32_t c, uint32_t len) {
    if (ws->n_syms == ws->cap_syms) {
        size_t cap = ws->cap_syms ? ws->cap_syms * 2 : 64;
        bpe_sym *s = xllm_realloc(ws->syms, cap * sizeof *s);
        if (!s) return -1;
        ws->syms = s;
        ws->cap_syms = cap;
    }
    int32_t i = (int32_t)ws->n_syms++;
    ws->syms[i] = (bpe_sym){c, i - 1, i + 1, len};
    return 0;
}

static int cand_less(bpe_cand a, bpe_cand b) { return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos; }

static int heap_push(tok_bpe_ws *ws, bpe_cand c) {
    if (ws->n_heap == ws->cap_heap) {
        size_t cap = ws->cap_heap ? ws->cap_heap * 2 : 64;
        bpe_cand *h = xllm_realloc(ws->heap, cap * sizeof *h);
        if (!h) return -1;
        ws->heap = h;
        ws->cap_heap = cap;
    }
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

static int lookup_merge(const tok_bpe *m, int32_t a, int32_t b, uint32_t *rank, int32_t *new_id) {
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

xllm_status tok_bpe_tokenize(const tok_bpe *m, const char *s, size_t len, tok_ids *out, tok_bpe_ws *ws,
                             xllm_error *err) {
    if (len == 0) return XLLM_OK;
    if (m->ignore_merges) {
        int32_t id = tok_strmap_get(&m->vocab, s, len);
        if (id >= 0) return tok_ids_push(out, id) ? xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory") : XLLM_OK;
    }
    ws->n_syms = 0;
    int32_t unk_id = -1;
    uint32_t unk_len = 0;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        size_t cl = tok_utf8_len(u + i, len - i);
        const char *piece = s + i;
        size_t plen = cl;
        int first = i == 0, last = i + cl == len;
        if ((m->prefix && !first) || (m->suffix && last)) {
            ws->tmp.len = 0;
            if ((m->prefix && !first && tok_buf_append(&ws->tmp, m->prefix, strlen(m->prefix))) ||
                tok_buf_append(&ws->tmp, piece, cl) ||
                (m->suffix && last && tok_buf_append(&ws->tmp, m->suffix, strlen(m->suffix))))
                goto oom;
            piece = ws->tmp.p;
            plen = ws->tmp.len;
        }
        i += cl;
        int32_t id = tok_strmap_get(&m->vocab, piece, plen);
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
            return xllm_errorf(err, XLLM_ERR_FORMAT, "BPE unk_token \"%s\" is not in the vocabulary", m->unk_token);
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
    return xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory in BPE");
}
