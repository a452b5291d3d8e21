/*
 * grammar_match.c - the grammar as a pushdown automaton over bytes.
 *
 * A parse stack is a chain of element positions: the top is a byte class to
 * match next, the ones below are where to continue when the rule above ends.
 * Stacks are hash-consed nodes (position, parent), so equal stacks share one
 * id, and a state - every stack the output so far may be in, plus whether
 * the empty stack (a complete output) is among them - is a hash-consed sorted
 * set of node ids. Advancing by a byte keeps the stacks whose top class takes
 * it, moves each past that class and expands rule references (pushing the
 * continuation only when it is not the end of the rule: right recursion such
 * as S ::= x S | empty stays one frame deep) until every top is a byte class
 * again. Each (state, byte) step is computed once and cached, so a state
 * reached again (inside an unbounded string, say) costs a hash lookup.
 *
 * Bounds: stacks per state (ambiguous grammars) at 4096 (extra ones are
 * dropped: every kept stack is still a valid parse), expansion depth 4096;
 * the tables grow until gram_matcher_bytes passes a limit the caller checks.
 */
#include "engine/grammar_impl.h"
#include "base/alloc.h"
#include "base/buf.h"

#include <stdlib.h>
#include <string.h>

#define MAX_STACKS 4096
#define MAX_DEPTH 4096

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* open-addressing int32 tables: slot holds id + 1, 0 = empty */
static int32_t *table_new(uint32_t size) { return mem_calloc(size, sizeof(int32_t)); }

/* ---------------------------------------------------------------- nodes */

static uint64_t node_hash(int32_t pos, int32_t parent) {
    return mix64(((uint64_t)(uint32_t)pos << 32) | (uint32_t)parent);
}

static int nodes_rehash(gram_matcher *m, uint32_t size) {
    int32_t *t = table_new(size);
    if (!t) return -1;
    for (int32_t i = 1; i < m->n_nodes; i++) {
        uint32_t h = (uint32_t)node_hash(m->node_pos[i], m->node_parent[i]) & (size - 1);
        while (t[h]) h = (h + 1) & (size - 1);
        t[h] = i + 1;
    }
    xllm_free(m->node_map);
    m->node_map = t;
    m->node_map_mask = size - 1;
    return 0;
}

static int32_t node_intern(gram_matcher *m, int32_t pos, int32_t parent) {
    if ((uint32_t)m->n_nodes * 2 >= m->node_map_mask + 1 && nodes_rehash(m, (m->node_map_mask + 1) * 2)) {
        m->oom = 1;
        return -1;
    }
    uint32_t h = (uint32_t)node_hash(pos, parent) & m->node_map_mask;
    for (;; h = (h + 1) & m->node_map_mask) {
        int32_t v = m->node_map[h];
        if (!v) break;
        if (m->node_pos[v - 1] == pos && m->node_parent[v - 1] == parent) return v - 1;
    }
    if (m->n_nodes == m->cap_nodes) {
        size_t c = (size_t)m->cap_nodes, c2 = c, c3 = c;
        if (array_reserve(&m->node_pos, &c, c + 1, sizeof(int32_t), 64) ||
            array_reserve(&m->node_parent, &c2, c2 + 1, sizeof(int32_t), 64) ||
            array_reserve(&m->node_seen, &c3, c3 + 1, sizeof(uint32_t), 64)) {
            m->oom = 1;
            return -1;
        }
        m->cap_nodes = (int32_t)(c < c2 ? (c < c3 ? c : c3) : (c2 < c3 ? c2 : c3));
    }
    int32_t id = m->n_nodes++;
    m->node_pos[id] = pos;
    m->node_parent[id] = parent;
    m->node_seen[id] = 0;
    m->node_map[h] = id + 1;
    return id;
}

/* -------------------------------------------------------------- expand */

static void scratch_push(gram_matcher *m, int32_t node) {
    if (m->n_scratch >= MAX_STACKS) {
        m->overflow = 1;
        return;
    }
    if (m->n_scratch == m->cap_scratch) {
        size_t c = (size_t)m->cap_scratch;
        if (array_reserve(&m->scratch, &c, c + 1, sizeof(int32_t), 64)) {
            m->oom = 1;
            return;
        }
        m->cap_scratch = (int32_t)c;
    }
    m->scratch[m->n_scratch++] = node;
}

static void expand_node(gram_matcher *m, int32_t node, int depth);

/* A new expansion stamp (on wrap-around every node's stamp is cleared). */
static void next_gen(gram_matcher *m) {
    if (++m->gen == 0) {
        memset(m->node_seen, 0, (size_t)m->n_nodes * sizeof(uint32_t));
        m->gen = 1;
    }
}

/* The stacks for "at element pos, then continue with stack parent". */
static void expand_at(gram_matcher *m, int32_t pos, int32_t parent, int depth) {
    if (depth > MAX_DEPTH || m->oom || m->overflow) {
        m->overflow = 1;
        return;
    }
    const gram *g = m->g;
    uint32_t e = g->el[pos];
    if (GE_KIND(e) == GE_END) {
        expand_node(m, parent, depth + 1);
        return;
    }
    /* each (position, continuation) is expanded once per step: ambiguous
     * grammars (nested optional repetitions) reach the same one many ways */
    int32_t n = node_intern(m, pos, parent);
    if (n < 0 || m->node_seen[n] == m->gen) return;
    m->node_seen[n] = m->gen;
    switch (GE_KIND(e)) {
    case GE_CHARS:
        scratch_push(m, n);
        return;
    default: {
        int32_t r = (int32_t)GE_ARG(e);
        int32_t cont = parent;
        if (GE_KIND(g->el[pos + 1]) != GE_END) {
            cont = node_intern(m, pos + 1, parent);
            if (cont < 0) return;
        }
        for (int32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++) expand_at(m, g->alts[a], cont, depth + 1);
        return;
    }
    }
}

static void expand_node(gram_matcher *m, int32_t node, int depth) {
    if (node == 0) {
        m->scratch_accept = 1;
        return;
    }
    expand_at(m, m->node_pos[node], m->node_parent[node], depth);
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* ---------------------------------------------------------------- states */

static uint64_t state_hash(const int32_t *v, int32_t n, int accept) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)accept;
    for (int32_t i = 0; i < n; i++) h = mix64(h ^ (uint32_t)v[i]) + (uint64_t)i;
    return h;
}

static int states_rehash(gram_matcher *m, uint32_t size) {
    int32_t *t = table_new(size);
    if (!t) return -1;
    for (int32_t i = 0; i < m->n_st; i++) {
        const gm_state *s = &m->st[i];
        uint32_t h = (uint32_t)state_hash(m->pool + s->off, s->n, s->accept) & (size - 1);
        while (t[h]) h = (h + 1) & (size - 1);
        t[h] = i + 1;
    }
    xllm_free(m->st_map);
    m->st_map = t;
    m->st_map_mask = size - 1;
    return 0;
}

/* The state of the scratch stacks (sorted, deduplicated here); -1 when none. */
static int32_t state_from_scratch(gram_matcher *m) {
    if (m->oom) return -1;
    int32_t n = m->n_scratch;
    if (n > 1) {
        qsort(m->scratch, (size_t)n, sizeof(int32_t), cmp_i32);
        int32_t k = 1;
        for (int32_t i = 1; i < n; i++)
            if (m->scratch[i] != m->scratch[k - 1]) m->scratch[k++] = m->scratch[i];
        n = k;
    }
    int accept = m->scratch_accept;
    if (!n && !accept) return -1;
    if ((uint32_t)m->n_st * 2 >= m->st_map_mask + 1 && states_rehash(m, (m->st_map_mask + 1) * 2)) {
        m->oom = 1;
        return -1;
    }
    uint32_t h = (uint32_t)state_hash(m->scratch, n, accept) & m->st_map_mask;
    for (;; h = (h + 1) & m->st_map_mask) {
        int32_t v = m->st_map[h];
        if (!v) break;
        const gm_state *s = &m->st[v - 1];
        if (s->n == n && s->accept == accept && (!n || !memcmp(m->pool + s->off, m->scratch, (size_t)n * sizeof(int32_t))))
            return v - 1;
    }
    size_t cs = (size_t)m->cap_st, cp = (size_t)m->cap_pool;
    if (array_reserve(&m->st, &cs, (size_t)m->n_st + 1, sizeof(gm_state), 64) ||
        array_reserve(&m->pool, &cp, (size_t)(m->n_pool + n + 1), sizeof(int32_t), 64)) {
        m->oom = 1;
        return -1;
    }
    m->cap_st = (int32_t)cs;
    m->cap_pool = (int64_t)cp;
    gm_state *s = &m->st[m->n_st];
    memset(s, 0, sizeof *s);
    s->off = m->n_pool;
    s->n = n;
    s->accept = accept;
    s->mask_slot = -1;
    s->dense = -1;
    s->text = -1;
    if (n) memcpy(m->pool + m->n_pool, m->scratch, (size_t)n * sizeof(int32_t));
    m->n_pool += n;
    for (int32_t i = 0; i < n; i++) {
        const gram_set *cs2 = &m->g->sets[GE_ARG(m->g->el[m->node_pos[m->scratch[i]]])];
        for (int w = 0; w < 4; w++) s->next.w[w] |= cs2->w[w];
    }
    m->st_map[h] = m->n_st + 1;
    return m->n_st++;
}

/* ------------------------------------------------------------ transitions */

static int tr_rehash(gram_matcher *m, uint32_t size) {
    uint64_t *k = mem_calloc(size, sizeof(uint64_t));
    int32_t *v = mem_malloc_array(size, sizeof(int32_t));
    if (!k || !v) {
        xllm_free(k), xllm_free(v);
        return -1;
    }
    for (uint32_t i = 0; m->tr_key && i <= m->tr_mask; i++) {
        if (!m->tr_key[i]) continue;
        uint32_t h = (uint32_t)mix64(m->tr_key[i]) & (size - 1);
        while (k[h]) h = (h + 1) & (size - 1);
        k[h] = m->tr_key[i];
        v[h] = m->tr_val[i];
    }
    xllm_free(m->tr_key), xllm_free(m->tr_val);
    m->tr_key = k;
    m->tr_val = v;
    m->tr_mask = size - 1;
    return 0;
}

int32_t gm_step(gram_matcher *m, int32_t st, unsigned char byte) {
    if (st < 0 || !gram_set_has(&m->st[st].next, byte)) return -1;
    uint64_t key = (((uint64_t)(uint32_t)st << 8) | byte) + 1;
    uint32_t h = (uint32_t)mix64(key) & m->tr_mask;
    for (;; h = (h + 1) & m->tr_mask) {
        if (!m->tr_key[h]) break;
        if (m->tr_key[h] == key) return m->tr_val[h];
    }
    /* compute: every stack whose top class takes the byte moves past it */
    m->n_scratch = 0;
    m->scratch_accept = 0;
    m->overflow = 0;
    next_gen(m);
    const gram *g = m->g;
    const int64_t off = m->st[st].off;
    const int32_t n = m->st[st].n;
    for (int32_t i = 0; i < n; i++) {
        int32_t node = m->pool[off + i];
        int32_t pos = m->node_pos[node];
        if (gram_set_has(&g->sets[GE_ARG(g->el[pos])], byte)) expand_at(m, pos + 1, m->node_parent[node], 0);
    }
    int32_t to = state_from_scratch(m);
    if (m->oom) return -1;
    if ((m->n_tr + 1) * 2 > m->tr_mask + 1) {
        if (tr_rehash(m, (m->tr_mask + 1) * 2)) {
            m->oom = 1;
            return -1;
        }
        h = (uint32_t)mix64(key) & m->tr_mask;
        while (m->tr_key[h]) h = (h + 1) & m->tr_mask;
    }
    m->tr_key[h] = key;
    m->tr_val[h] = to;
    m->n_tr++;
    return to;
}

/* ------------------------------------------------------------------ API */

static void tables_free(gram_matcher *m) {
    xllm_free(m->node_pos), xllm_free(m->node_parent), xllm_free(m->node_map), xllm_free(m->node_seen);
    m->node_seen = NULL;
    xllm_free(m->st), xllm_free(m->pool), xllm_free(m->st_map);
    xllm_free(m->tr_key), xllm_free(m->tr_val), xllm_free(m->scratch);
    m->node_pos = m->node_parent = m->node_map = m->pool = m->st_map = m->tr_val = m->scratch = NULL;
    m->st = NULL;
    m->tr_key = NULL;
    m->n_nodes = m->cap_nodes = m->n_st = m->cap_st = m->n_scratch = m->cap_scratch = 0;
    m->n_pool = m->cap_pool = 0;
    m->n_tr = 0;
    xllm_free(m->dense);
    m->dense = NULL;
    m->n_dense = m->cap_dense = 0;
}

static int tables_init(gram_matcher *m) {
    m->node_map = table_new(1024);
    m->node_map_mask = 1023;
    m->st_map = table_new(1024);
    m->st_map_mask = 1023;
    m->oom = 0;
    if (!m->node_map || !m->st_map || tr_rehash(m, 4096)) return -1;
    /* node 0: the empty stack */
    size_t c = 0, c2 = 0, c3 = 0;
    if (array_reserve(&m->node_pos, &c, 256, sizeof(int32_t), 64) ||
        array_reserve(&m->node_parent, &c2, 256, sizeof(int32_t), 64) ||
        array_reserve(&m->node_seen, &c3, 256, sizeof(uint32_t), 64))
        return -1;
    m->cap_nodes = 256;
    m->node_pos[0] = -1;
    m->node_parent[0] = -1;
    m->node_seen[0] = 0;
    m->n_nodes = 1;
    return 0;
}

gram_matcher *gram_matcher_new(const gram *g, const gram_vocab *v) {
    gram_matcher *m = mem_calloc(1, sizeof *m);
    if (!m) return NULL;
    m->g = g;
    m->v = v;
    if (tables_init(m) || gm_masks_init(m)) {
        gram_matcher_free(m);
        return NULL;
    }
    return m;
}

void gram_matcher_free(gram_matcher *m) {
    if (!m) return;
    tables_free(m);
    gm_masks_free(m);
    xllm_free(m);
}

void gram_matcher_reset(gram_matcher *m) {
    tables_free(m);
    for (int i = 0; i < m->n_slots; i++) m->slot_state[i] = -1;
    m->epoch++;
    if (tables_init(m)) m->oom = 1;
}

uint32_t gram_matcher_epoch(const gram_matcher *m) { return m->epoch; }

const gram_vocab *gram_matcher_vocab(const gram_matcher *m) { return m->v; }

size_t gram_matcher_bytes(const gram_matcher *m) {
    return (size_t)m->cap_nodes * 12 + (size_t)(m->node_map_mask + 1) * 4 + (size_t)m->cap_st * sizeof(gm_state) +
           (size_t)m->cap_pool * 4 + (size_t)(m->st_map_mask + 1) * 4 + (size_t)(m->tr_mask + 1) * 12 +
           (size_t)m->n_slots * (size_t)m->words * 4 + (size_t)m->cap_dense * 4;
}

int32_t gram_start(gram_matcher *m) {
    if (m->oom) return -1;
    m->n_scratch = 0;
    m->scratch_accept = 0;
    m->overflow = 0;
    next_gen(m);
    const gram *g = m->g;
    for (int32_t a = g->alt_off[g->root]; a < g->alt_off[g->root + 1]; a++) expand_at(m, g->alts[a], 0, 0);
    return state_from_scratch(m);
}

int32_t gram_advance(gram_matcher *m, int32_t st, const char *s, size_t n) {
    for (size_t i = 0; i < n && st >= 0; i++) st = gm_step(m, st, (unsigned char)s[i]);
    return st;
}

int gram_accepting(const gram_matcher *m, int32_t st) { return st >= 0 && st < m->n_st && m->st[st].accept; }

int gram_can_continue(const gram_matcher *m, int32_t st) { return st >= 0 && st < m->n_st && m->st[st].n > 0; }
