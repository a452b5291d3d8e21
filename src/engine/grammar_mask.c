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
 *
 * Text (XGrammar's context-independent tokens, in our terms): inside a JSON
 * string most tokens are whole text characters, and whether such a token is
 * allowed depends only on how many characters it has. A state from which
 * every text character leads to the same state (the stacks that take one are
 * all alternatives of one text-character rule under one continuation) has a
 * text run: how many such characters in a row it survives, and whether a
 * longer run dies ("closed"). The mask then starts from a precomputed bitset
 * (the text tokens of at most that many characters) and the walk skips every
 * subtree of text tokens; only subtrees holding other tokens ('"', '\\',
 * controls, bytes that are not UTF-8) are walked, which is where the string
 * may end.
 */
#include "engine/grammar_impl.h"
#include "tokenizer/tokenizer.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "base/error.h"

#include <stdlib.h>
#include <string.h>

#define MASK_SLOTS 128

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
    xllm_free(v->t_other), xllm_free(v->t_chars), xllm_free(v->text_le), xllm_free(v->t_rem), xllm_free(v->t_cdepth);
    xllm_free(v);
}

/* A JSON text token: whole characters a JSON string holds as themselves
 * (U+0020 and up but '"', '\\', DEL and surrogates, shortest UTF-8), the last one
 * possibly cut short (a valid proper prefix). The number of characters
 * (the cut one counted), or -1. */
static int text_chars(const unsigned char *s, int64_t n) {
    int chars = 0;
    for (int64_t i = 0; i < n; chars++) {
        unsigned c = s[i];
        if (c < 0x80) {
            if (c < 0x20 || c == '"' || c == '\\' || c == 0x7F) return -1;
            i++;
            continue;
        }
        int len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!len) return -1;
        /* the second byte's range: E0 A0.., ED ..9F (no surrogates), F0 90.., F4 ..8F */
        unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
        for (int k = 1; k < len; k++) {
            if (i + k >= n) return chars + 1; /* cut short */
            unsigned b = s[i + k];
            if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return -1;
        }
        i += len;
    }
    return chars;
}

#define TEXT_K_MAX 32

/* Per node: t_other and t_chars; per k: the text_le bitsets. -1 when out of memory. */
static int text_tables(gram_vocab *v, const int32_t *parent) {
    int32_t nn = v->n_nodes, words = (v->V + 31) / 32;
    v->t_other = mem_malloc(nn ? (size_t)nn : 1);
    v->t_chars = mem_calloc(nn ? (size_t)nn : 1, 1);
    v->t_rem = mem_malloc(nn ? (size_t)nn : 1);
    v->t_cdepth = mem_malloc(nn ? (size_t)nn : 1);
    int8_t *tc = mem_malloc_array((size_t)v->V + 1, 1);
    if (!v->t_other || !v->t_chars || !v->t_rem || !v->t_cdepth || !tc) {
        xllm_free(tc);
        return -1;
    }
    int k_max = 0;
    for (int32_t id = 0; id < v->V; id++) {
        int64_t l = v->tok_off[id + 1] - v->tok_off[id];
        int c = v->usable[id] ? text_chars((const unsigned char *)v->bytes + v->tok_off[id], l) : -1;
        if (c > TEXT_K_MAX) c = -1; /* longer text tokens are walked */
        tc[id] = (int8_t)c;
        if (c > k_max) k_max = c;
    }
    for (int32_t i = 0; i < nn; i++) {
        v->t_other[i] = 0;
        for (int32_t k = v->t_ids_off[i]; k < v->t_ids_off[i + 1]; k++) {
            int c = tc[v->t_ids[k]];
            if (c < 0) v->t_other[i] = 1;
            else if (c > v->t_chars[i]) v->t_chars[i] = (uint8_t)c;
        }
    }
    /* per node from its parent (parents come first in preorder): the
     * characters begun on the path, and the bytes the last one still needs
     * (meaningful where the subtree holds text tokens only) */
    for (int32_t i = 0; i < nn; i++) {
        unsigned c = v->t_byte[i];
        int32_t p = parent[i];
        int cd = p >= 0 ? v->t_cdepth[p] : 0, rem = p >= 0 ? v->t_rem[p] : 0;
        if (rem > 0) rem--; /* a continuation byte */
        else cd++, rem = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
        v->t_cdepth[i] = (uint8_t)(cd > 255 ? 255 : cd);
        v->t_rem[i] = (uint8_t)rem;
    }
    for (int32_t i = nn; i-- > 0;) { /* children after parents in preorder: fold upward */
        int32_t p = parent[i];
        if (p < 0) continue;
        v->t_other[p] |= v->t_other[i];
        if (v->t_chars[i] > v->t_chars[p]) v->t_chars[p] = v->t_chars[i];
    }
    v->text_k = k_max;
    v->text_le = mem_calloc((size_t)(k_max + 1) * (size_t)words + 1, sizeof(uint32_t));
    if (!v->text_le) {
        xllm_free(tc);
        return -1;
    }
    for (int32_t id = 0; id < v->V; id++)
        for (int k = tc[id] > 0 ? tc[id] : k_max + 1; k <= k_max; k++)
            v->text_le[(size_t)k * (size_t)words + (size_t)(id >> 5)] |= 1u << (id & 31);
    xllm_free(tc);
    return 0;
}

/* Takes bytes and off (V + 1 offsets). */
static xllm_status vocab_build(char *bytes, int64_t *off, int32_t V, gram_vocab **out, xllm_error *err) {
    *out = NULL;
    gram_vocab *v = mem_calloc(1, sizeof *v);
    int32_t *order = mem_malloc_array((size_t)V + 1, sizeof(int32_t));
    if (!v || !order) goto oom;
    v->V = V;
    v->bytes = bytes;
    v->tok_off = off;
    bytes = NULL;
    off = NULL;
    v->usable = mem_calloc((size_t)V + 1, 1);
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
    v->t_byte = mem_malloc(cap);
    v->t_depth = mem_malloc_array(cap, sizeof(uint16_t));
    v->t_end = mem_malloc_array(cap, sizeof(int32_t));
    v->t_ids_off = mem_malloc_array(cap + 1, sizeof(int32_t));
    v->t_ids = mem_malloc_array((size_t)n + 1, sizeof(int32_t));
    int32_t *parent = mem_malloc_array(cap, sizeof(int32_t));
    int32_t path[MAX_TOKEN_BYTES + 1];
    if (!v->t_byte || !v->t_depth || !v->t_end || !v->t_ids_off || !v->t_ids || !parent) {
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
    if (text_tables(v, parent)) {
        xllm_free(parent);
        goto oom;
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
    return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "grammar: out of memory building the token trie");
}

xllm_status gram_vocab_from_bytes(const char *const *tb, const uint32_t *lens, int32_t V, gram_vocab **out,
                                  xllm_error *err) {
    int64_t total = 0;
    for (int32_t i = 0; i < V; i++) total += tb[i] ? lens[i] : 0;
    char *bytes = mem_malloc((size_t)total + 1);
    int64_t *off = mem_malloc_array((size_t)V + 1, sizeof(int64_t));
    if (!bytes || !off) {
        xllm_free(bytes), xllm_free(off);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "grammar: out of memory");
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
        int64_t *o = mem_malloc_array((size_t)vocab + 1, sizeof(int64_t));
        if (!o) {
            xllm_free(bytes), xllm_free(off);
            return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "grammar: out of memory");
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
    m->masks = mem_malloc_array((size_t)m->n_slots * (size_t)m->words + 1, sizeof(uint32_t));
    m->slot_state = mem_malloc_array((size_t)m->n_slots, sizeof(int32_t));
    m->walk = mem_malloc_array((size_t)m->v->max_depth + 2, sizeof(int32_t));
    m->walk_row = mem_malloc_array((size_t)m->v->max_depth + 2, sizeof(int64_t));
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
        if (array_reserve(&m->dense, &cap, (size_t)m->n_dense + 256, sizeof(int32_t), 256 * 64)) {
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

/* Bytes that start a JSON text character. */
static int text_first(unsigned b) { return (b >= 0x20 && b < 0x7F && b != '"' && b != '\\') || (b >= 0xC2 && b <= 0xF4); }

/* One text character from st, whatever it is, leads to one state: every
 * stack that takes a text character's first byte is an alternative of one
 * text-character rule (grammar_impl.h: tc_rule) under one continuation, and
 * that rule takes every text character. The state after any text character
 * is then the state after 'a'. */
static int text_uniform(const gram_matcher *m, int32_t st) {
    const gm_state *s = &m->st[st];
    const gram *g = m->g;
    static gram_set first;
    static int first_done;
    if (!first_done) { /* idempotent: racing threads write the same bits */
        gram_set f = {{0}};
        for (unsigned b = 0; b < 256; b++)
            if (text_first(b)) gram_set_add(&f, b);
        first = f;
        first_done = 1;
    }
    int32_t rule = -1, parent = -1;
    for (int32_t i = 0; i < s->n; i++) {
        int32_t node = m->pool[s->off + i];
        int32_t pos = m->node_pos[node];
        const gram_set *cs = &g->sets[GE_ARG(g->el[pos])];
        if (!((cs->w[0] & first.w[0]) | (cs->w[1] & first.w[1]) | (cs->w[2] & first.w[2]) | (cs->w[3] & first.w[3])))
            continue; /* takes no text character: dies on one */
        int32_t r = g->tc_rule[pos];
        if (r < 0 || (rule >= 0 && (r != rule || m->node_parent[node] != parent))) return 0;
        rule = r;
        parent = m->node_parent[node];
    }
    return rule >= 0;
}

/* How many text characters in a row st survives whatever they are (at most
 * cap), plus TEXT_CLOSED when no longer run of text characters survives
 * (the run reached cap, or the state it ends in takes no text character):
 * a string body with r characters left and only '"' after has r, closed.
 * Memoized per state (exact; cap means "at least cap"). */
#define TEXT_CLOSED 64
static int32_t text_run(gram_matcher *m, int32_t st, int cap) {
    if (m->st[st].text >= 0) return m->st[st].text;
    int32_t chain[TEXT_K_MAX + 1];
    int n = 0;
    int32_t base = 0; /* the run (and flag) of the state the chain ends in */
    for (int32_t cur = st;;) {
        if (m->st[cur].text >= 0) {
            base = m->st[cur].text;
            break;
        }
        if (n == cap) /* at least cap: only the first state's run is known */
            return m->st[st].text = cap | TEXT_CLOSED;
        if (!text_uniform(m, cur)) {
            int takes = 0;
            for (unsigned b = 0; b < 256 && !takes; b++) takes = text_first(b) && gram_set_has(&m->st[cur].next, b);
            base = m->st[cur].text = takes ? 0 : TEXT_CLOSED;
            break;
        }
        chain[n++] = cur;
        int32_t to = gm_step(m, cur, 'a');
        if (to < 0 || m->oom) return 0; /* out of memory (a uniform state takes 'a') */
        if (to == cur) { /* a loop: unbounded text */
            base = TEXT_CLOSED | cap;
            break;
        }
        cur = to;
    }
    /* chain[k] survives one more character than chain[k + 1] */
    for (int k = n; k-- > 0;) {
        int32_t run = (base & ~TEXT_CLOSED) + 1;
        base = run >= cap ? cap | TEXT_CLOSED : run | (base & TEXT_CLOSED);
        m->st[chain[k]].text = base;
    }
    return m->st[st].text;
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
    /* inside text (a JSON string's body, say): every text token of at most
     * as many characters as the state survives is allowed at once (a
     * precomputed bitset); the walk skips subtrees holding only those */
    int32_t tr = v->text_k ? text_run(m, st, v->text_k) : 0;
    if (m->oom) return NULL;
    /* closed: a text token longer than the run dies, so no subtree of text
     * tokens needs a walk */
    const int closed = (tr & TEXT_CLOSED) != 0;
    tr &= ~TEXT_CLOSED;
    if (tr > 0) {
        const uint32_t *le = v->text_le + (size_t)tr * (size_t)m->words;
        for (int w = 0; w < m->words; w++) mask[w] = le[w];
    }
    for (int32_t i = 0; i < v->n_nodes;) {
        if (!v->t_other[i] && (closed || (tr > 0 && v->t_chars[i] <= tr))) {
            i = v->t_end[i];
            continue;
        }
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
        /* the same inside the subtree: its tokens are text, the node ends a
         * character, and the state survives the characters they continue with */
        if (!v->t_other[i] && v->t_rem[i] == 0 && v->text_k) {
            int32_t need = (int32_t)v->t_chars[i] - v->t_cdepth[i];
            int32_t run = (m->st[to].text >= 0 ? m->st[to].text : text_run(m, to, v->text_k)) & ~TEXT_CLOSED;
            if (m->oom) return NULL;
            if (need <= run) {
                for (int32_t k = v->t_ids_off[i + 1]; k < v->t_ids_off[v->t_end[i]]; k++) {
                    int32_t id = v->t_ids[k];
                    mask[id >> 5] |= 1u << (id & 31);
                }
                i = v->t_end[i];
                continue;
            }
        }
        walk[d] = to;
        if ((row[d] = dense_row(m, to)) < 0) return NULL;
        i++;
    }
    m->slot_state[slot] = st;
    m->st[st].mask_slot = slot;
    return mask;
}
