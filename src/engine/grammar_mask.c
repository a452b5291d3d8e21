/*
 * grammar_mask.c - the vocabulary as a byte trie, and the allowed-token mask
 * of a grammar state.
 *
 * The trie is stored in preorder (byte, depth, end of subtree, ids ending
 * here), so computing a mask is one forward scan: the state at depth d is the
 * state at depth d - 1 stepped by the node's byte (a cached transition,
 * grammar_match.c); a dead step skips the whole subtree at once, and a state
 * that is complete with nothing more to take skips the subtree after marking
 * the node's ids. Tokens share prefixes, so a state costs one step per live
 * trie node, not one per token byte. Masks are cached per state in a small
 * ring (a state reached again - inside an unbounded string, the same place in
 * another sample - costs nothing).
 */
#include "engine/grammar_impl.h"
#include "tokenizer/tokenizer.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "base/error.h"

#include <stdlib.h>
#include <string.h>

#define MASK_SLOTS 128

/* "Plain" bytes: printable ASCII but '"' and '\\' - what most tokens of
 * text are made of, and what a string body takes whatever its grammar. */
static inline int is_plain(unsigned b) { return b >= 0x20 && b < 0x7f && b != '"' && b != '\\'; }
#define MAX_TOKEN_BYTES 1024 /* longer tokens are never allowed */

/* ------------------------------------------------------------- vocabulary */

typedef struct sort_ctx {
    const char *bytes;
    const int64_t *off;
} sort_ctx;

static sort_ctx g_sort; /* qsort has no context argument in C11; guarded by g_sort_lock */
#include <pthread.h>
static pthread_mutex_t g_sort_lock = PTHREAD_MUTEX_INITIALIZER;

static int cmp_tok(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    int64_t lx = g_sort.off[x + 1] - g_sort.off[x], ly = g_sort.off[y + 1] - g_sort.off[y];
    int64_t l = lx < ly ? lx : ly;
    int c = memcmp(g_sort.bytes + g_sort.off[x], g_sort.bytes + g_sort.off[y], (size_t)l);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

void gram_vocab_free(gram_vocab *v) {
    if (!v) return;
    xllm_free(v->bytes), xllm_free(v->tok_off), xllm_free(v->usable);
    xllm_free(v->t_byte), xllm_free(v->t_depth), xllm_free(v->t_end), xllm_free(v->t_ids_off), xllm_free(v->t_ids);
    xllm_free(v->t_plain), xllm_free(v->t_below);
    xllm_free(v);
}

/* Takes bytes and off (V + 1 offsets). */
static xllm_status vocab_build(char *bytes, int64_t *off, int32_t V, gram_vocab **out, xllm_error *err) {
    *out = NULL;
    gram_vocab *v = xllm_calloc(1, sizeof *v);
    int32_t *order = xllm_malloc_array((size_t)V + 1, sizeof(int32_t));
    if (!v || !order) goto oom;
    v->V = V;
    v->bytes = bytes;
    v->tok_off = off;
    bytes = NULL;
    off = NULL;
    v->usable = xllm_calloc((size_t)V + 1, 1);
    if (!v->usable) goto oom;
    int32_t n = 0;
    int64_t total = 0;
    for (int32_t i = 0; i < V; i++) {
        int64_t l = v->tok_off[i + 1] - v->tok_off[i];
        if (l > 0 && l <= MAX_TOKEN_BYTES) {
            v->usable[i] = 1;
            order[n++] = i;
            total += l;
        }
    }
    pthread_mutex_lock(&g_sort_lock);
    g_sort.bytes = v->bytes;
    g_sort.off = v->tok_off;
    qsort(order, (size_t)n, sizeof(int32_t), cmp_tok);
    pthread_mutex_unlock(&g_sort_lock);
    /* at most one node per token byte */
    size_t cap = (size_t)total + 1;
    v->t_byte = xllm_malloc(cap);
    v->t_depth = xllm_malloc_array(cap, sizeof(uint16_t));
    v->t_end = xllm_malloc_array(cap, sizeof(int32_t));
    v->t_ids_off = xllm_malloc_array(cap + 1, sizeof(int32_t));
    v->t_ids = xllm_malloc_array((size_t)n + 1, sizeof(int32_t));
    v->t_plain = xllm_malloc(cap);
    v->t_below = xllm_malloc_array(cap, sizeof(uint16_t));
    int32_t *parent = xllm_malloc_array(cap, sizeof(int32_t));
    int32_t path[MAX_TOKEN_BYTES + 1];
    if (!v->t_byte || !v->t_depth || !v->t_end || !v->t_ids_off || !v->t_ids || !v->t_plain || !v->t_below || !parent) {
        xllm_free(parent);
        goto oom;
    }
    int32_t nn = 0, depth = 0, nids = 0;
    const char *prev = NULL;
    int64_t prev_len = 0;
    for (int32_t k = 0; k < n; k++) {
        int32_t id = order[k];
        const char *s = v->bytes + v->tok_off[id];
        int64_t l = v->tok_off[id + 1] - v->tok_off[id];
        int64_t common = 0;
        while (prev && common < l && common < prev_len && common < depth && s[common] == prev[common]) common++;
        while (depth > common) v->t_end[path[--depth]] = nn; /* close nodes off the shared path */
        for (; depth < l; depth++) {
            v->t_byte[nn] = (uint8_t)s[depth];
            v->t_depth[nn] = (uint16_t)(depth + 1);
            v->t_ids_off[nn] = nids;
            parent[nn] = depth ? path[depth - 1] : -1;
            path[depth] = nn++;
        }
        v->t_ids[nids++] = id; /* ids end at path[l - 1]; later nodes' offsets start after them */
        prev = s;
        prev_len = l;
    }
    while (depth > 0) v->t_end[path[--depth]] = nn;
    v->t_ids_off[nn] = nids;
    /* t_ids_off[i] was set when node i was created; ids of node i lie in
     * [t_ids_off[i], t_ids_off[i + 1]) because ids are appended in preorder */
    v->n_nodes = nn;
    /* below each node: whether its whole subtree is plain bytes, and how deep it goes */
    for (int32_t i = 0; i < nn; i++) v->t_plain[i] = 1, v->t_below[i] = 0;
    for (int32_t i = nn; i-- > 0;) {
        int32_t p = parent[i];
        if (p < 0) continue;
        if (!is_plain(v->t_byte[i]) || !v->t_plain[i]) v->t_plain[p] = 0;
        if (v->t_below[i] + 1 > v->t_below[p]) v->t_below[p] = (uint16_t)(v->t_below[i] + 1);
    }
    xllm_free(parent);
    int32_t md = 0;
    for (int32_t i = 0; i < nn; i++)
        if (v->t_depth[i] > md) md = v->t_depth[i];
    v->max_depth = md;
    xllm_free(order);
    *out = v;
    return XLLM_OK;
oom:
    xllm_free(bytes), xllm_free(off), xllm_free(order);
    gram_vocab_free(v);
    return xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "grammar: out of memory building the token trie");
}

xllm_status gram_vocab_from_bytes(const char *const *tb, const uint32_t *lens, int32_t V, gram_vocab **out,
                                  xllm_error *err) {
    int64_t total = 0;
    for (int32_t i = 0; i < V; i++) total += tb[i] ? lens[i] : 0;
    char *bytes = xllm_malloc((size_t)total + 1);
    int64_t *off = xllm_malloc_array((size_t)V + 1, sizeof(int64_t));
    if (!bytes || !off) {
        xllm_free(bytes), xllm_free(off);
        return xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "grammar: out of memory");
    }
    int64_t k = 0;
    for (int32_t i = 0; i < V; i++) {
        off[i] = k;
        if (tb[i]) memcpy(bytes + k, tb[i], lens[i]), k += lens[i];
    }
    off[V] = k;
    return vocab_build(bytes, off, V, out, err);
}

xllm_status gram_vocab_from_tokenizer(const struct tokenizer *t, int32_t vocab, gram_vocab **out, xllm_error *err) {
    char *bytes;
    int64_t *off;
    int32_t n;
    xllm_status st = tokenizer_token_bytes(t, &bytes, &off, &n, err);
    if (st) return st;
    if (n != vocab) { /* the model's vocabulary may be padded past the tokenizer's, or smaller */
        int64_t *o = xllm_malloc_array((size_t)vocab + 1, sizeof(int64_t));
        if (!o) {
            xllm_free(bytes), xllm_free(off);
            return xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "grammar: out of memory");
        }
        for (int32_t i = 0; i <= vocab; i++) o[i] = i <= n ? off[i] : off[n];
        xllm_free(off);
        off = o;
    }
    return vocab_build(bytes, off, vocab, out, err);
}

int32_t gram_vocab_size(const gram_vocab *v) { return v->V; }

const char *gram_vocab_token(const gram_vocab *v, int32_t id, size_t *len) {
    if (id < 0 || id >= v->V || !v->usable[id]) {
        *len = 0;
        return NULL;
    }
    *len = (size_t)(v->tok_off[id + 1] - v->tok_off[id]);
    return v->bytes + v->tok_off[id];
}

/* ------------------------------------------------------------------ masks */

int gm_masks_init(gram_matcher *m) {
    m->words = (m->v->V + 31) / 32;
    m->n_slots = MASK_SLOTS;
    m->masks = xllm_malloc_array((size_t)m->n_slots * (size_t)m->words + 1, sizeof(uint32_t));
    m->slot_state = xllm_malloc_array((size_t)m->n_slots, sizeof(int32_t));
    m->walk = xllm_malloc_array((size_t)m->v->max_depth + 2, sizeof(int32_t));
    m->walk_row = xllm_malloc_array((size_t)m->v->max_depth + 2, sizeof(int64_t));
    if (!m->masks || !m->slot_state || !m->walk || !m->walk_row) return -1;
    for (int i = 0; i < m->n_slots; i++) m->slot_state[i] = -1;
    return 0;
}

void gm_masks_free(gram_matcher *m) {
    xllm_free(m->masks), xllm_free(m->slot_state), xllm_free(m->walk), xllm_free(m->walk_row);
    m->walk_row = NULL;
    m->masks = NULL;
    m->slot_state = NULL;
    m->walk = NULL;
}

/* The dense transition row of state st (made on first use); -1 when out of memory. */
static int64_t dense_row(gram_matcher *m, int32_t st) {
    if (m->st[st].dense >= 0) return m->st[st].dense;
    if (m->n_dense + 256 > m->cap_dense) {
        size_t cap = (size_t)m->cap_dense;
        if (xllm_array_reserve(&m->dense, &cap, (size_t)m->n_dense + 256, sizeof(int32_t), 256 * 64)) {
            m->oom = 1;
            return -1;
        }
        m->cap_dense = (int64_t)cap;
    }
    int64_t row = m->n_dense;
    m->n_dense += 256;
    int32_t *r = m->dense + row;
    const gm_state *s = &m->st[st];
    const gram_set *next = &s->next;
    if (s->n > 64) {
        for (unsigned b = 0; b < 256; b++) r[b] = gram_set_has(next, b) ? -2 : -1;
    } else {
        /* bytes taken by the same stacks lead to the same state: group them
         * under the first byte of the group (entry -3 - first), so a state's
         * transitions are computed once per group, not once per byte */
        uint64_t sig[256] = {0};
        const gram *g = m->g;
        for (int32_t i = 0; i < s->n; i++) {
            const gram_set *cs = &g->sets[GE_ARG(g->el[m->node_pos[m->pool[s->off + i]]])];
            for (unsigned w = 0; w < 4; w++)
                for (uint64_t bits = cs->w[w]; bits; bits &= bits - 1) sig[w * 64 + (unsigned)__builtin_ctzll(bits)] |= 1ull << i;
        }
        uint64_t gsig[256];
        unsigned gfirst[256], ng = 0;
        for (unsigned b = 0; b < 256; b++) {
            if (!sig[b]) {
                r[b] = -1;
                continue;
            }
            unsigned k = 0;
            while (k < ng && gsig[k] != sig[b]) k++;
            if (k == ng) gsig[ng] = sig[b], gfirst[ng++] = b;
            r[b] = k == ng - 1 && gfirst[k] == b ? -2 : -3 - (int32_t)gfirst[k];
        }
    }
    m->st[st].dense = row;
    return row;
}

/* The step from st by byte through its dense row (computed once per byte group). */
static int32_t dense_step(gram_matcher *m, int32_t st, int64_t row, unsigned byte) {
    int32_t to = m->dense[row + byte];
    if (to > -2) return to;
    unsigned first = to == -2 ? byte : (unsigned)(-3 - to);
    to = m->dense[row + first];
    if (to == -2) {
        to = gm_step(m, st, (unsigned char)first);
        if (m->oom) return -1;
        m->dense[row + first] = to;
    }
    m->dense[row + byte] = to;
    return to;
}

/* How many plain bytes in a row st survives whatever they are (capped): 0 when
 * one plain byte already leaves the language, else 1 + the least over the
 * states one plain byte leads to. Memoized per state; a string body with r
 * characters left has r. */
static int32_t plain_run(gram_matcher *m, int32_t st, int cap) {
    if (m->st[st].plain >= 0 || cap <= 0) return m->st[st].plain >= 0 ? m->st[st].plain : 0;
    int64_t row = dense_row(m, st);
    if (row < 0) return 0;
    int32_t least = cap - 1, seen[8], n_seen = 0;
    for (unsigned b = 0x20; b < 0x7f; b++) { /* every plain byte must survive */
        if (!is_plain(b)) continue;
        int32_t to = dense_step(m, st, row, b);
        if (to < 0) {
            least = -1;
            break;
        }
        int k = 0;
        while (k < n_seen && seen[k] != to) k++;
        if (k < n_seen || least == 0) continue;
        if (n_seen < 8) seen[n_seen++] = to;
        int32_t r = plain_run(m, to, cap - 1);
        if (r < least) least = r;
    }
    int32_t r = least < 0 ? 0 : 1 + least;
    m->st[st].plain = r;
    return r;
}

const uint32_t *gram_mask(gram_matcher *m, int32_t st) {
    if (st < 0 || st >= m->n_st || m->oom) return NULL;
    int slot = m->st[st].mask_slot;
    if (slot >= 0 && m->slot_state[slot] == st) return m->masks + (size_t)slot * (size_t)m->words;
    slot = m->next_slot;
    m->next_slot = (m->next_slot + 1) % m->n_slots;
    if (m->slot_state[slot] >= 0 && m->slot_state[slot] < m->n_st) m->st[m->slot_state[slot]].mask_slot = -1;
    m->slot_state[slot] = -1;
    uint32_t *mask = m->masks + (size_t)slot * (size_t)m->words;
    memset(mask, 0, (size_t)m->words * sizeof(uint32_t));
    const gram_vocab *v = m->v;
    int32_t *walk = m->walk;
    int64_t *row = m->walk_row;
    walk[0] = st;
    if ((row[0] = dense_row(m, st)) < 0) return NULL;
    for (int32_t i = 0; i < v->n_nodes;) {
        const int d = v->t_depth[i];
        const unsigned byte = v->t_byte[i];
        int32_t to = m->dense[row[d - 1] + byte];
        if (to <= -2) { /* first time: the matcher's step (once per byte group), remembered in the row */
            to = dense_step(m, walk[d - 1], row[d - 1], byte);
            if (m->oom) return NULL;
        }
        if (to < 0) {
            i = v->t_end[i];
            continue;
        }
        for (int32_t k = v->t_ids_off[i]; k < v->t_ids_off[i + 1]; k++) {
            int32_t id = v->t_ids[k];
            mask[id >> 5] |= 1u << (id & 31);
        }
        /* no longer token fits: a leaf, or a complete state with nothing more */
        if (i + 1 == v->t_end[i] || !m->st[to].n) {
            i = v->t_end[i];
            continue;
        }
        /* a subtree of plain bytes no deeper than the plain run the state
         * survives: every token in it is allowed, no need to walk it */
        if (v->t_plain[i] && v->t_below[i] <= 64 && plain_run(m, to, 64) >= v->t_below[i]) {
            for (int32_t k = v->t_ids_off[i + 1]; k < v->t_ids_off[v->t_end[i]]; k++) {
                int32_t id = v->t_ids[k];
                mask[id >> 5] |= 1u << (id & 31);
            }
            i = v->t_end[i];
            continue;
        }
        walk[d] = to;
        if ((row[d] = dense_row(m, to)) < 0) return NULL;
        i++;
    }
    m->slot_state[slot] = st;
    m->st[st].mask_slot = slot;
    return mask;
}
