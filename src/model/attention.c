/*
 * attention.c - causal attention of a flattened batch over the paged KV cache.
 *
 * Each (token, head) item attends over positions [window start, its position]
 * of its own sequence, reading K/V through the sequence's block table, with an
 * online softmax (no score matrix). The two strategies below share their
 * arithmetic, so the planner's per-step choice never changes results.
 */
#include "model/model.h"
#include "base/fastmath.h"
#include "base/profile.h"

#include <math.h>
#include <string.h>

/*
 * Attention works on chunks of ATTN_CHUNK keys. Each chunk of a (token, head)
 * gives a partial result (its max score m, sum of exp(s - m), and the
 * exp-weighted sum of V), and partials are folded in chunk order. Two
 * strategies share these two steps, so they give bit-identical results:
 *   - per item: one task per (token, head) computes and folds its chunks;
 *   - split-KV: one task per (token, head, chunk), then one fold per item;
 *     used when there are few (token, head) items for the threads (decode
 *     of one or two long sequences), so every thread still has work.
 */
typedef struct {
    model *m;
    const kv_cache *kv;
    const fwd_batch *b;
    int layer;
    int window;
    int max_chunks;       /* split-KV: chunks per item in `part` */
} attn_job;

static int attn_first_key(const attn_job *j, int t) {
    int pos = j->b->pos[t];
    return j->window > 0 && pos - j->window + 1 > 0 ? pos - j->window + 1 : 0;
}

/* Keys [p0, p0 + n) of token t, head h: part = {m, l, acc[hd]}; sc: ATTN_CHUNK scratch. */
static void attn_chunk(const attn_job *j, int t, int h, int p0, int n, float *sc, float *part) {
    const model_config *c = &j->m->cfg;
    int hd = c->head_dim, kvh = h / (c->n_heads / c->n_kv_heads), bs = j->kv->block_size;
    size_t slot_stride = (size_t)j->kv->n_kv_heads * (size_t)hd;
    const float *q = j->m->s.q + ((size_t)t * c->n_heads + h) * hd;
    const int32_t *table = j->b->block_tables[j->b->seq[t]];
    float *acc = part + 2;
    /* the level's kernels, over runs of consecutive slots of one KV block */
    for (int i = 0, run; i < n; i += run) {
        int p = p0 + i;
        run = bs - p % bs < n - i ? bs - p % bs : n - i;
        op_attn_scores(&j->m->be, q, kv_cache_k(j->kv, j->layer, table[p / bs], p % bs) + (size_t)kvh * hd, slot_stride,
                       run, hd, 1.0f / sqrtf((float)hd), sc + i);
    }
    float mx = -INFINITY, sum = 0.0f;
    for (int i = 0; i < n; i++) mx = sc[i] > mx ? sc[i] : mx;
    for (int i = 0; i < n; i++) sc[i] = xllm_exp_nonpos(sc[i] - mx);
    for (int i = 0; i < n; i++) sum += sc[i];
    memset(acc, 0, sizeof(float) * (size_t)hd);
    for (int i = 0, run; i < n; i += run) {
        int p = p0 + i;
        run = bs - p % bs < n - i ? bs - p % bs : n - i;
        op_attn_accum(&j->m->be, acc, sc + i, kv_cache_v(j->kv, j->layer, table[p / bs], p % bs) + (size_t)kvh * hd,
                      slot_stride, run, hd);
    }
    part[0] = mx;
    part[1] = sum;
}

/* total = {m, l, acc} folded with the next chunk's partial */
static void attn_fold(float *total, const float *part, int hd) {
    float M = part[0] > total[0] ? part[0] : total[0];
    float c1 = total[0] == -INFINITY ? 0.0f : expf(total[0] - M), c2 = expf(part[0] - M);
    total[1] = total[1] * c1 + part[1] * c2;
    for (int d = 0; d < hd; d++) total[2 + d] = total[2 + d] * c1 + part[2 + d] * c2;
    total[0] = M;
}

static void attn_write(const attn_job *j, int t, int h, const float *total) {
    int hd = j->m->cfg.head_dim;
    float *out = j->m->s.att + ((size_t)t * j->m->cfg.n_heads + h) * hd, inv = 1.0f / total[1];
    for (int d = 0; d < hd; d++) out[d] = total[2 + d] * inv;
}

/* per item: tasks are (token, head) */
static void attention_items(void *p, size_t i0, size_t i1, int thread) {
    attn_job *j = p;
    int hd = j->m->cfg.head_dim, nh = j->m->cfg.n_heads;
    float *total = j->m->be.scratch[thread], *part = total + 2 + hd, *sc = part + 2 + hd;
    for (size_t it = i0; it < i1; it++) {
        int t = (int)(it / (size_t)nh), h = (int)(it % (size_t)nh), pos = j->b->pos[t];
        total[0] = -INFINITY;
        total[1] = 0.0f;
        memset(total + 2, 0, sizeof(float) * (size_t)hd);
        for (int p0 = attn_first_key(j, t); p0 <= pos; p0 += ATTN_CHUNK) {
            attn_chunk(j, t, h, p0, pos + 1 - p0 < ATTN_CHUNK ? pos + 1 - p0 : ATTN_CHUNK, sc, part);
            attn_fold(total, part, hd);
        }
        attn_write(j, t, h, total);
    }
}

/* split-KV, step 1: tasks are (item, chunk); partials into m->s.attn_part */
static void attention_chunks(void *p, size_t i0, size_t i1, int thread) {
    attn_job *j = p;
    int hd = j->m->cfg.head_dim, nh = j->m->cfg.n_heads;
    float *sc = j->m->be.scratch[thread];
    for (size_t it = i0; it < i1; it++) {
        size_t item = it / (size_t)j->max_chunks;
        int chunk = (int)(it % (size_t)j->max_chunks), t = (int)(item / (size_t)nh), h = (int)(item % (size_t)nh);
        int p0 = attn_first_key(j, t) + chunk * ATTN_CHUNK, pos = j->b->pos[t];
        float *part = j->m->s.attn_part + it * (size_t)(hd + 2);
        if (p0 > pos) {
            part[0] = -INFINITY; /* past this item's keys: folds as nothing */
            continue;
        }
        attn_chunk(j, t, h, p0, pos + 1 - p0 < ATTN_CHUNK ? pos + 1 - p0 : ATTN_CHUNK, sc, part);
    }
}

/* split-KV, step 2: fold each item's partials in chunk order */
static void attention_fold_items(void *p, size_t i0, size_t i1, int thread) {
    attn_job *j = p;
    int hd = j->m->cfg.head_dim, nh = j->m->cfg.n_heads;
    float *total = j->m->be.scratch[thread];
    for (size_t item = i0; item < i1; item++) {
        total[0] = -INFINITY;
        total[1] = 0.0f;
        memset(total + 2, 0, sizeof(float) * (size_t)hd);
        for (int c = 0; c < j->max_chunks; c++) {
            const float *part = j->m->s.attn_part + (item * (size_t)j->max_chunks + (size_t)c) * (size_t)(hd + 2);
            if (part[0] != -INFINITY) attn_fold(total, part, hd);
        }
        attn_write(j, (int)(item / (size_t)nh), (int)(item % (size_t)nh), total);
    }
}

/* The planner's per-step choice: split the keys across threads when the
 * (token, head) items alone cannot keep the threads busy. */
attn_strategy attention_strategy(const model *m, const fwd_batch *b, int layer, int *max_chunks) {
    size_t items = (size_t)b->n_tokens * (size_t)m->cfg.n_heads;
    int most = 0, window = m->cfg.layer_window[layer];
    for (int t = 0; t < b->n_tokens; t++) {
        int keys = b->pos[t] + 1;
        if (window > 0 && keys > window) keys = window;
        most = keys > most ? keys : most;
    }
    *max_chunks = (most + ATTN_CHUNK - 1) / ATTN_CHUNK;
    int fits = items * (size_t)*max_chunks <= m->s.attn_part_items;
    if (m->attn_force) return m->attn_force == 2 && fits ? ATTN_SPLIT_KV : ATTN_PER_ITEM;
    if (m->be.n_threads > 1 && items < (size_t)(2 * m->be.n_threads) && *max_chunks >= 2 && fits)
        return ATTN_SPLIT_KV;
    return ATTN_PER_ITEM;
}

/* Attention of every token of the batch for layer l: s.q (after RoPE) against
 * the cache (this step's K/V already written) into s.att. */
void attention_run(model *m, const kv_cache *kv, const fwd_batch *b, int l) {
    const model_config *c = &m->cfg;
    int T = b->n_tokens, hd = c->head_dim;
    size_t qd = (size_t)c->n_heads * hd, kd = (size_t)c->n_kv_heads * hd;
    attn_job j = {m, kv, b, l, c->layer_window[l], 0};
    attn_strategy strategy = attention_strategy(m, b, l, &j.max_chunks);
    double keys = 0; /* keys visited: the work, and the profile's flop and byte counts */
    for (int t = 0; t < T; t++) {
        int w = c->layer_window[l], n = b->pos[t] + 1;
        keys += w > 0 && n > w ? w : n;
    }
    /* at least ~64k flops per thread, or waking a thread costs more than it saves */
    double item_flops = 4.0 * (keys / T) * hd;
    size_t min_items = item_flops >= 65536 ? 1 : (size_t)(65536 / (item_flops + 1));
    PROF(PROF_ATTENTION, 4.0 * keys * (double)qd, 8.0 * keys * (double)kd,
         if (strategy == ATTN_SPLIT_KV) {
             threadpool_run(m->be.tp, (size_t)T * c->n_heads * (size_t)j.max_chunks, 1, attention_chunks, &j);
             threadpool_run(m->be.tp, (size_t)T * (size_t)c->n_heads, min_items, attention_fold_items, &j);
         } else {
             threadpool_run(m->be.tp, (size_t)T * (size_t)c->n_heads, min_items, attention_items, &j);
         });
}
