/*
 * attention.c - causal attention of a flattened batch over the paged KV cache.
 *
 * Each (token, head) item attends over positions [window start, its position]
 * of its own sequence, reading K/V through the sequence's block table, with an
 * online softmax (no score matrix). The three strategies below share their
 * arithmetic, so the planner's per-step choice never changes results. This
 * is the CPU backend's paged-attention operation (backend_ops.attention):
 * the layer's K/V pool part and the batch come in a be_attn. K/V rows are
 * read in the pool's storage (f32, f16 or q8: the level's loops for that
 * kv_dtype dequantize as they load, kvq.h), never copied out whole.
 */
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/profile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/*
 * Attention works on chunks of ATTN_CHUNK keys. Each chunk of a (token, head)
 * gives a partial result (its max score m, sum of exp(s - m), and the
 * exp-weighted sum of V), and partials are folded in chunk order. Two
 * strategies share these two steps, so they give bit-identical results:
 *   - per item: one task per (token, head) computes and folds its chunks;
 *   - split-KV: one task per (token, head, chunk), then one fold per item;
 *     used when there are few (token, head) items for the threads (decode
 *     of one or two long sequences), so every thread still has work;
 *   - shared-KV: one task per group of queries that read the same keys (the
 *     query heads of one KV head, for a tile of consecutive tokens of one
 *     sequence): each K/V vector loaded feeds the whole group through the
 *     level's multi-query loops (register tiles of queries x keys), which
 *     compute every score and every weighted sum exactly as the single-query
 *     loops do; the softmax (the level's, which takes several queries at
 *     once) and the fold are the same for every strategy. Used when
 *     groups hold several queries (prefill; GQA).
 */

/* shared-KV: at most about this many queries per group (tokens x heads of a
 * KV head; fewer when the batch would give the threads too few groups). Each
 * group streams its KV head's keys and values once for all its queries: at
 * TinyLlama's 8 heads per KV head, 8 (one token per group) left a 2048-token
 * prefill's attention reading K/V from L3 for every token: attention 2.7 s ->
 * 1.8 s per pp2048 at 64 (Q4_K_M, 2 threads; 128: 1.7 s, twice the scratch). */
#define ATTN_GROUP_QUERIES 64
typedef struct {
    cpu_backend *be;
    const be_attn *d;
    int max_chunks;       /* split-KV: chunks per item in `part` */
    const int32_t *tiles; /* shared-KV: tile i is tokens [tiles[i], tiles[i + 1]) */
    int n_tiles;
} attn_job;

/*
 * Fetching ahead. One head's K (or V) rows are a strided walk through the
 * pool (one row of every slot, slots n_kv_heads rows wide, blocks wherever
 * the block table puts them) that the hardware prefetchers follow poorly: at
 * depth the loops waited on memory at every row (perf at 4096 tokens: over
 * half of the score loop's samples on its K loads). So while the scores of a
 * run of keys are computed, the caches are asked for that run's V rows
 * (read after the chunk's softmax) and for the K rows of the same run in the
 * next chunk, a run at a time so the requests spread over the work. Hints
 * only: no arithmetic changes.
 */

/* Rows of positions [p0, p1) of head kvh through a block table (p1 past the
 * sequence's last key is cut by the caller: the table ends there). */
static void attn_prefetch_rows(const be_attn *d, const void *base, const int32_t *table, int p0, int p1, int kvh) {
    size_t rb = kvq_row_bytes(d->kv_type, d->head_dim), slot = (size_t)d->n_kv_heads * rb;
    int bs = d->block_size;
    for (int p = p0, n; p < p1; p += n) { /* a block's slots are consecutive: one table lookup each */
        const unsigned char *r = attn_kv_row(d, base, table, p, kvh);
        n = bs - p % bs < p1 - p ? bs - p % bs : p1 - p;
        for (int i = 0; i < n; i++, r += slot) {
            uintptr_t a = (uintptr_t)r & ~(uintptr_t)63, end = (uintptr_t)r + rb;
            for (; a < end; a += 64) __builtin_prefetch((const void *)a, 0, 3);
        }
    }
}

/* The hints for the run [pk, pk + run) of a chunk whose keys end at last:
 * its V rows, and the K rows ATTN_CHUNK positions on. */
static void attn_prefetch_run(const cpu_backend *be, const be_attn *d, const int32_t *table, int pk, int run, int last,
                              int kvh) {
    if (be->attn_no_prefetch) return;
    attn_prefetch_rows(d, d->v_cache, table, pk, pk + run, kvh);
    int n0 = pk + ATTN_CHUNK, n1 = n0 + run <= last + 1 ? n0 + run : last + 1;
    if (n0 < n1) attn_prefetch_rows(d, d->k_cache, table, n0, n1, kvh);
}

/* Keys [p0, p0 + n) of token t, head h: part = {m, l, acc[hd]}; sc: ATTN_CHUNK scratch. */
static void attn_chunk(const attn_job *j, int t, int h, int p0, int n, float *sc, float *part) {
    const be_attn *d = j->d;
    int hd = d->head_dim, kvh = h / (d->n_heads / d->n_kv_heads), bs = d->block_size;
    size_t slot_stride = (size_t)d->n_kv_heads * kvq_row_bytes(d->kv_type, hd); /* bytes */
    const cpu_attn_kv *K = &j->be->kern->attn->kv[d->kv_type];
    const float *q = d->q + ((size_t)t * d->n_heads + h) * hd;
    const int32_t *table = d->block_tables[d->seq[t]];
    float *acc = part + 2;
    /* the level's kernels, over runs of consecutive slots of one KV block */
    for (int i = 0, run; i < n; i += run) {
        int p = p0 + i;
        run = bs - p % bs < n - i ? bs - p % bs : n - i;
        attn_prefetch_run(j->be, d, table, p, run, d->pos[t], kvh);
        K->scores(q, attn_kv_row(d, d->k_cache, table, p, kvh), slot_stride, run, hd, attn_kernel_scale(d), sc + i);
    }
    attn_softcap(d, sc, n);
    j->be->kern->attn->softmax(sc, 0, 1, &n, part, 0);
    memset(acc, 0, sizeof(float) * (size_t)hd);
    for (int i = 0, run; i < n; i += run) {
        int p = p0 + i;
        run = bs - p % bs < n - i ? bs - p % bs : n - i;
        K->accum(acc, sc + i, attn_kv_row(d, d->v_cache, table, p, kvh), slot_stride, run, hd);
    }
}

/* total = {m, l, acc} folded with the next chunk's partial (out of line: one
 * copy of the instructions for every strategy) */
static __attribute__((noinline)) void attn_fold(float *total, const float *part, int hd) {
    float M = part[0] > total[0] ? part[0] : total[0];
    float c1 = total[0] == -INFINITY ? 0.0f : expf(total[0] - M), c2 = expf(part[0] - M);
    total[1] = total[1] * c1 + part[1] * c2;
    for (int d = 0; d < hd; d++) total[2 + d] = total[2 + d] * c1 + part[2 + d] * c2;
    total[0] = M;
}

static void attn_write(const attn_job *j, int t, int h, const float *total) {
    int hd = j->d->head_dim;
    float *out = j->d->out + ((size_t)t * j->d->n_heads + h) * hd, inv = 1.0f / total[1];
    for (int d = 0; d < hd; d++) out[d] = total[2 + d] * inv;
}

/* per item: tasks are (token, head) */
static void attention_items(void *p, size_t i0, size_t i1, int thread) {
    attn_job *j = p;
    int hd = j->d->head_dim, nh = j->d->n_heads;
    float *total = j->be->scratch[thread], *part = total + 2 + hd, *sc = part + 2 + hd;
    for (size_t it = i0; it < i1; it++) {
        int t = (int)(it / (size_t)nh), h = (int)(it % (size_t)nh), pos = j->d->pos[t];
        total[0] = -INFINITY;
        total[1] = 0.0f;
        memset(total + 2, 0, sizeof(float) * (size_t)hd);
        for (int p0 = attn_first_key(j->d, t); p0 <= pos; p0 += ATTN_CHUNK) {
            attn_chunk(j, t, h, p0, pos + 1 - p0 < ATTN_CHUNK ? pos + 1 - p0 : ATTN_CHUNK, sc, part);
            attn_fold(total, part, hd);
        }
        attn_write(j, t, h, total);
    }
}

/* split-KV, step 1: tasks are (item, chunk); partials into be->attn_part */
static void attention_chunks(void *p, size_t i0, size_t i1, int thread) {
    attn_job *j = p;
    int hd = j->d->head_dim, nh = j->d->n_heads;
    float *sc = j->be->scratch[thread];
    for (size_t it = i0; it < i1; it++) {
        size_t item = it / (size_t)j->max_chunks;
        int chunk = (int)(it % (size_t)j->max_chunks), t = (int)(item / (size_t)nh), h = (int)(item % (size_t)nh);
        int p0 = attn_first_key(j->d, t) + chunk * ATTN_CHUNK, pos = j->d->pos[t];
        float *part = j->be->attn_part + it * (size_t)(hd + 2);
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
    int hd = j->d->head_dim, nh = j->d->n_heads;
    float *total = j->be->scratch[thread];
    for (size_t item = i0; item < i1; item++) {
        total[0] = -INFINITY;
        total[1] = 0.0f;
        memset(total + 2, 0, sizeof(float) * (size_t)hd);
        for (int c = 0; c < j->max_chunks; c++) {
            const float *part = j->be->attn_part + (item * (size_t)j->max_chunks + (size_t)c) * (size_t)(hd + 2);
            if (part[0] != -INFINITY) attn_fold(total, part, hd);
        }
        attn_write(j, (int)(item / (size_t)nh), (int)(item % (size_t)nh), total);
    }
}

/* shared-KV tiles: runs of at most `tile_tokens` consecutive batch tokens of
 * one sequence, at increasing positions, whose keys start at the same
 * position (the same chunk boundaries: always, unless a sliding window
 * moves the start). Fills starts[0..n] when starts != NULL; returns n. */
static int attn_tiles(const be_attn *b, int tile_tokens, int32_t *starts) {
    int n = 0;
    for (int t = 0, t0 = 0; t < b->T; t++) {
        if (t == 0 || t - t0 == tile_tokens || b->seq[t] != b->seq[t - 1] || b->pos[t] <= b->pos[t - 1] ||
            attn_first_key(b, t) != attn_first_key(b, t - 1)) {
            if (starts) starts[n] = t;
            n++;
            t0 = t;
        }
    }
    if (starts) starts[n] = b->T;
    return n;
}

/* The most tokens a tile may hold (the scratch is sized for it). */
static int attn_tile_max(const cpu_backend *be) {
    int g = be->n_heads / be->n_kv_heads;
    return g >= ATTN_GROUP_QUERIES ? 1 : (ATTN_GROUP_QUERIES + g - 1) / g;
}

/* Tokens per tile for batch b: attn_tile_max, halved while the tiles would
 * give fewer than 4 groups per thread (the groups of a causal prefill differ
 * in work, and every thread needs several). *n_tiles: the tiles at that size. */
static int attn_tile_tokens(const cpu_backend *be, const be_attn *b, int *n_tiles) {
    int tt = attn_tile_max(be), n = attn_tiles(b, tt, NULL);
    while (tt > 1 && (size_t)n * (size_t)b->n_kv_heads < (size_t)(4 * be->n_threads)) {
        tt /= 2;
        n = attn_tiles(b, tt, NULL);
    }
    *n_tiles = n;
    return tt;
}

/* shared-KV: tasks are groups (tile, KV head), taken alternately from both
 * ends of the batch (the later tokens of a causal prefill see more keys), so
 * the threads' contiguous ranges get similar work. Per group and chunk: the
 * scores of every active query against the chunk's keys (queries whose
 * position is before the chunk are not active; the others score up to the
 * last active position, each using only its own keys), each query's softmax,
 * then its weighted values over its own keys in order: keys past the shortest
 * query's end go to the queries that still see them (tokens are in position
 * order, so those are a suffix of the group). */
static void attention_groups(void *p, size_t i0, size_t i1, int thread) {
    attn_job *j = p;
    const be_attn *d = j->d;
    const cpu_attn_kernels *A = j->be->kern->attn;
    const cpu_attn_kv *K = &A->kv[d->kv_type];
    int hd = d->head_dim, nh = d->n_heads, nkv = d->n_kv_heads, g = nh / nkv, bs = d->block_size;
    size_t slot_stride = (size_t)nkv * kvq_row_bytes(d->kv_type, hd) /* bytes */, pst = (size_t)hd + 2, n_groups = (size_t)j->n_tiles * (size_t)nkv;
    float scale = attn_kernel_scale(d);
    float *Q = j->be->attn_tile + (size_t)thread * j->be->attn_tile_floats;
    for (size_t it = i0; it < i1; it++) {
        size_t gi = it % 2 ? n_groups - 1 - it / 2 : it / 2;
        int tile = (int)(gi / (size_t)nkv), kvh = (int)(gi % (size_t)nkv);
        int t0 = j->tiles[tile], t1 = j->tiles[tile + 1], R = (t1 - t0) * g, last = d->pos[t1 - 1];
        float *S = Q + (size_t)R * hd, *part = S + (size_t)R * ATTN_CHUNK, *total = part + (size_t)R * pst;
        int *nk = (int *)(total + (size_t)R * pst); /* each query's keys in the chunk */
        const int32_t *table = d->block_tables[d->seq[t0]];
        for (int t = t0; t < t1; t++)
            memcpy(Q + (size_t)(t - t0) * g * hd, d->q + ((size_t)t * nh + (size_t)kvh * g) * hd,
                   sizeof(float) * (size_t)g * hd);
        for (int r = 0; r < R; r++) {
            total[r * pst] = -INFINITY;
            total[r * pst + 1] = 0.0f;
            memset(total + r * pst + 2, 0, sizeof(float) * (size_t)hd);
        }
        int ta = t0;
        for (int p0 = attn_first_key(j->d, t0); p0 <= last; p0 += ATTN_CHUNK) {
            while (d->pos[ta] < p0) ta++; /* tokens before ta end before this chunk */
            int ra = (ta - t0) * g, nmax = last + 1 - p0 < ATTN_CHUNK ? last + 1 - p0 : ATTN_CHUNK;
            for (int i = 0, run; i < nmax; i += run) {
                int pk = p0 + i;
                run = bs - pk % bs < nmax - i ? bs - pk % bs : nmax - i;
                attn_prefetch_run(j->be, d, table, pk, run, last, kvh);
                K->scores_multi(Q + (size_t)ra * hd, (size_t)hd, R - ra, attn_kv_row(d, d->k_cache, table, pk, kvh),
                                slot_stride, run, hd, scale, S + (size_t)ra * ATTN_CHUNK + i, ATTN_CHUNK);
            }
            for (int r = ra; r < R; r++) {
                int pos = d->pos[t0 + r / g];
                nk[r] = pos + 1 - p0 < ATTN_CHUNK ? pos + 1 - p0 : ATTN_CHUNK; /* nondecreasing in r */
                attn_softcap(d, S + (size_t)r * ATTN_CHUNK, nk[r]);
                memset(part + r * pst + 2, 0, sizeof(float) * (size_t)hd);
            }
            A->softmax(S + (size_t)ra * ATTN_CHUNK, ATTN_CHUNK, R - ra, nk + ra, part + ra * pst, pst);
            /* keys [lo, hi): the queries of tokens tt.. (those that see key hi - 1) */
            for (int tt = ta, lo = 0; tt < t1; tt++) {
                int pos = d->pos[tt], hi = pos + 1 - p0 < ATTN_CHUNK ? pos + 1 - p0 : ATTN_CHUNK, r0 = (tt - t0) * g;
                for (int i = lo, run; i < hi; i += run) {
                    int pk = p0 + i;
                    run = bs - pk % bs < hi - i ? bs - pk % bs : hi - i;
                    K->accum_multi(part + r0 * pst + 2, pst, R - r0, S + (size_t)r0 * ATTN_CHUNK + i, ATTN_CHUNK,
                                   attn_kv_row(d, d->v_cache, table, pk, kvh), slot_stride, run, hd);
                }
                lo = hi > lo ? hi : lo;
            }
            for (int r = ra; r < R; r++) attn_fold(total + r * pst, part + r * pst, hd);
        }
        for (int r = 0; r < R; r++) attn_write(j, t0 + r / g, kvh * g + r % g, total + r * pst);
    }
}

/* shared-KV scratch, made on first use (every thread's group buffers and
 * the tile list; freed with the backend). 0 if it cannot be had (then the
 * other strategies run). */
static int attn_shared_ready(cpu_backend *be) {
    if (be->attn_tile_state == 0) {
        int R = attn_tile_max(be) * (be->n_heads / be->n_kv_heads);
        size_t per = (size_t)R * ((size_t)be->head_dim + ATTN_CHUNK + 2 * ((size_t)be->head_dim + 2) + 1) + 16;
        float *tile = mem_malloc_array(per * (size_t)be->n_threads, sizeof(float));
        int32_t *tiles = mem_malloc_array(be->max_tokens + 1, sizeof(int32_t));
        if (tile && tiles) {
            be->attn_tile = tile;
            be->attn_tiles = tiles;
            be->attn_tile_floats = per;
            be->attn_tile_state = 1;
        } else {
            xllm_free(tile);
            xllm_free(tiles);
            be->attn_tile_state = -1;
        }
    }
    return be->attn_tile_state > 0;
}

xllm_status cpu_attention_init(cpu_backend *be, int max_positions, xllm_error *err) {
    if (be->n_heads <= 0 || be->n_kv_heads <= 0 || be->head_dim <= 0) return XLLM_OK; /* no attention asked for */
    /* split-KV attention partials: fewer items than 2 per thread, up to ATTN_SPLIT_MAX_KEYS keys each */
    int keys = max_positions < ATTN_SPLIT_MAX_KEYS ? max_positions : ATTN_SPLIT_MAX_KEYS;
    if (keys < 1) keys = 1;
    size_t items = (size_t)(2 * be->n_threads) > (size_t)be->n_heads ? (size_t)(2 * be->n_threads) : (size_t)be->n_heads;
    be->attn_part_items = items * (size_t)((keys + ATTN_CHUNK - 1) / ATTN_CHUNK);
    be->attn_part = mem_malloc_array(be->attn_part_items * (size_t)(be->head_dim + 2), sizeof(float));
    if (!be->attn_part) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory for attention partials");
    return XLLM_OK;
}

/* The planner's per-step choice: split the keys across threads when the
 * (token, head) items alone cannot keep the threads busy; else share K/V
 * loads when groups (tile, KV head) hold two queries or more on average and
 * still give every thread work; else one task per item. */
attn_strategy cpu_attention_strategy(const cpu_backend *be, const be_attn *b, int *max_chunks, int *tile_tokens) {
    *tile_tokens = 0;
    size_t items = (size_t)b->T * (size_t)b->n_heads;
    int most = 0, window = b->window;
    for (int t = 0; t < b->T; t++) {
        int keys = b->pos[t] + 1;
        if (window > 0 && keys > window) keys = window;
        most = keys > most ? keys : most;
    }
    *max_chunks = (most + ATTN_CHUNK - 1) / ATTN_CHUNK;
    int fits = items * (size_t)*max_chunks <= be->attn_part_items, shared_ok = be->attn_tile_state > 0;
    int n_tiles = 0;
    if (be->attn_force == 3) {
        if (!shared_ok) return ATTN_PER_ITEM;
        *tile_tokens = attn_tile_tokens(be, b, &n_tiles);
        return ATTN_SHARED_KV;
    }
    if (be->attn_force) return be->attn_force == 2 && fits ? ATTN_SPLIT_KV : ATTN_PER_ITEM;
    if (be->n_threads > 1 && items < (size_t)(2 * be->n_threads) && *max_chunks >= 2 && fits)
        return ATTN_SPLIT_KV;
    if (shared_ok) {
        int tt = attn_tile_tokens(be, b, &n_tiles);
        size_t groups = (size_t)n_tiles * (size_t)b->n_kv_heads;
        if (items >= 2 * groups && (be->n_threads == 1 || groups >= (size_t)(2 * be->n_threads))) {
            *tile_tokens = tt;
            return ATTN_SHARED_KV;
        }
    }
    return ATTN_PER_ITEM;
}

/* Latent (MLA) attention in our arithmetic (be_attn.latent): per (token,
 * head), the keys one at a time with an online softmax over the whole latent
 * row (key and value alike), scores as sequential f32 dot products. */
static void attention_latent_items(void *p, size_t i0, size_t i1, int thread) {
    attn_job *j = p;
    const be_attn *d = j->d;
    int hd = d->head_dim, nh = d->n_heads;
    float scale = attn_kernel_scale(d), *acc = j->be->scratch[thread], *row = acc + hd;
    for (size_t it = i0; it < i1; it++) {
        int t = (int)(it / (size_t)nh), h = (int)(it % (size_t)nh), pos = d->pos[t];
        const float *q = d->q + ((size_t)t * nh + h) * hd;
        const int32_t *table = d->block_tables[d->seq[t]];
        float M = -INFINITY, S = 0.0f;
        memset(acc, 0, sizeof(float) * (size_t)hd);
        for (int k = attn_first_key(d, t); k <= pos; k++) {
            attn_latent_row(d, table, k, row);
            float s = 0.0f;
            for (int e = 0; e < hd; e++) s += q[e] * row[e];
            s *= scale;
            attn_softcap(d, &s, 1);
            if (s > M) { /* a new maximum: what came before rescaled, this key's weight 1 */
                float c = M == -INFINITY ? 0.0f : expf(M - s);
                S = S * c + 1.0f;
                for (int e = 0; e < hd; e++) acc[e] = acc[e] * c + row[e];
                M = s;
            } else {
                float w = expf(s - M);
                S += w;
                for (int e = 0; e < hd; e++) acc[e] += w * row[e];
            }
        }
        float *out = d->out + ((size_t)t * nh + h) * hd, inv = 1.0f / S;
        for (int e = 0; e < hd; e++) out[e] = acc[e] * inv;
    }
}

/* llama.cpp's arithmetic (attention_f16.c): tasks are (token, head) */
static void attention_llama_items(void *p, size_t i0, size_t i1, int thread) {
    attn_job *j = p;
    cpu_attention_llama_items(j->be, j->d, i0, i1, thread);
}

/* Attention of every token of the batch for one layer: d->q (after RoPE)
 * against the cache (this step's K/V already written) into d->out. */
void cpu_attention_run(cpu_backend *be, const be_attn *d) {
    int T = d->T, hd = d->head_dim;
    size_t qd = (size_t)d->n_heads * hd, kd = (size_t)d->n_kv_heads * hd;
    attn_shared_ready(be);
    attn_job j = {be, d, 0, be->attn_tiles, 0};
    int llama = be->arith_llama; /* llama.cpp's arithmetic: its own loops */
    int tile_tokens;
    attn_strategy strategy = cpu_attention_strategy(be, d, &j.max_chunks, &tile_tokens);
    be->attn_last = strategy;
    double keys = 0; /* keys visited: the work, and the profile's flop and byte counts */
    for (int t = 0; t < T; t++) {
        int w = d->window, n = d->pos[t] + 1;
        keys += w > 0 && n > w ? w : n;
    }
    /* at least ~64k flops per thread, or waking a thread costs more than it saves */
    double item_flops = 4.0 * (keys / T) * hd;
    size_t min_items = item_flops >= 65536 ? 1 : (size_t)(65536 / (item_flops + 1));
    if (strategy == ATTN_SHARED_KV && !llama) j.n_tiles = attn_tiles(d, tile_tokens, be->attn_tiles);
    size_t groups = (size_t)j.n_tiles * (size_t)d->n_kv_heads;
    double group_flops = item_flops * ((double)T * d->n_heads / (double)(groups ? groups : 1));
    size_t min_groups = group_flops >= 65536 ? 1 : (size_t)(65536 / (group_flops + 1));
    PROF(PROF_ATTENTION, 4.0 * keys * (double)qd, 8.0 * keys * (double)kd,
         if (d->latent && !llama) {
             threadpool_run(be->tp, (size_t)T * (size_t)d->n_heads, min_items, attention_latent_items, &j);
         } else if (llama) {
             threadpool_run(be->tp, (size_t)T * (size_t)d->n_heads, 1, attention_llama_items, &j);
         } else if (strategy == ATTN_SPLIT_KV) {
             threadpool_run(be->tp, (size_t)T * d->n_heads * (size_t)j.max_chunks, 1, attention_chunks, &j);
             threadpool_run(be->tp, (size_t)T * (size_t)d->n_heads, min_items, attention_fold_items, &j);
         } else if (strategy == ATTN_SHARED_KV) {
             threadpool_run(be->tp, groups, min_groups, attention_groups, &j);
         } else {
             threadpool_run(be->tp, (size_t)T * (size_t)d->n_heads, min_items, attention_items, &j);
         });
}
