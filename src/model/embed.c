/*
 * embed.c - pooled hidden states (embeddings) of id sequences, outside any
 * serving engine.
 *
 * The idea: an embedding is one forward pass without the LM head. Short
 * sequences are packed into one flattened batch (each its own sequence id and
 * KV blocks in a private pool, so attention stays within a sequence) up to
 * the model's step size; a longer one runs alone in chunks. After the layers,
 * the model's final norm is applied to the rows pooling needs (every row for
 * mean, the last or the first token's), read back, pooled per sequence in
 * double, and L2-normalized when asked. The caller serializes forward passes
 * on the model (model_api.c holds the forward lock).
 */
#include "model/model.h"
#include "base/alloc.h"
#include "base/error.h"

#include <math.h>
#include <string.h>

#define EMBED_BLOCK 16

/* One forward over `b`, then the final-normed rows of b's tokens into host. */
static xllm_status run_rows(model *m, kv_cache *kv, const fwd_batch *b, float *host, xllm_error *err) {
    xllm_status st = model_embed(m, b, err);
    if (st) return st;
    model_layers(m, kv, b, 0, m->cfg.n_layers);
    const backend_ops *ops = m->be.ops;
    ops->rmsnorm(m->be.ctx, m->s.x, NULL, b->n_tokens, m->final_norm, m->cfg.rms_eps, m->cfg.hidden, m->s.xn, 0);
    size_t bytes = (size_t)b->n_tokens * (size_t)m->cfg.hidden * sizeof(float);
    if (ops->unified_memory) memcpy(host, m->s.xn, bytes);
    else ops->copy(m->be.ctx, host, m->s.xn, bytes, BE_DEVICE_TO_HOST);
    return XLLM_OK;
}

xllm_status model_embed_batch(model *m, const int32_t *const *ids, const size_t *n, size_t k, int pooling, int normalize,
                              kv_dtype kv_type, float *out, xllm_error *err) {
    const model_config *c = &m->cfg;
    if (!m->final_norm || m->layer_begin != 0 || m->layer_end != c->n_layers)
        return err_setf(err, XLLM_ERR_UNSUPPORTED, "embeddings need the whole model");
    if (pooling < 0 || pooling > 2) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "unknown pooling %d", pooling);
    for (size_t i = 0; i < k; i++) {
        if (!n[i] || !ids[i]) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "input %zu has no ids", i);
        if (n[i] > (size_t)INT32_MAX / 2) return err_setf(err, XLLM_ERR_CONTEXT_OVERFLOW, "input %zu: too many ids", i);
        for (size_t t = 0; t < n[i]; t++)
            if (ids[i][t] < 0 || ids[i][t] >= c->vocab)
                return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "input %zu: token id %d is outside the vocabulary (0..%d)",
                                   i, ids[i][t], c->vocab - 1);
    }
    const int T_max = m->s.max_tokens;
    const size_t H = (size_t)c->hidden;
    int32_t *tok = mem_malloc_array((size_t)T_max, sizeof(int32_t));
    int32_t *pos = mem_malloc_array((size_t)T_max, sizeof(int32_t));
    int32_t *seq = mem_malloc_array((size_t)T_max, sizeof(int32_t));
    float *rows = mem_malloc_array((size_t)T_max * H, sizeof(float));
    double *acc = mem_malloc_array(H, sizeof(double));
    kv_seq *seqs = mem_calloc((size_t)T_max, sizeof(kv_seq));
    const int32_t **tables = mem_calloc((size_t)T_max, sizeof(*tables));
    xllm_status st = XLLM_OK;
    if (!tok || !pos || !seq || !rows || !acc || !seqs || !tables) st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    for (size_t g0 = 0; g0 < k && !st;) {
        /* a group: consecutive inputs whose ids fit one step, or one longer input */
        size_t g1 = g0, total = 0;
        while (g1 < k && (g1 == g0 || total + n[g1] <= (size_t)T_max) && (int)(g1 - g0) < T_max) total += n[g1++];
        int32_t blocks = 0;
        for (size_t i = g0; i < g1; i++) blocks += (int32_t)((n[i] + EMBED_BLOCK - 1) / EMBED_BLOCK);
        kv_cache kv;
        st = kv_cache_init(&kv, &m->be, c->n_layers, c->n_kv_heads, c->head_dim, EMBED_BLOCK, blocks, kv_type, err);
        if (st) break;
        size_t ns = g1 - g0;
        for (size_t j = 0; j < ns && !st; j++) {
            st = kv_seq_reserve(&seqs[j], &kv, (int32_t)n[g0 + j], err);
            tables[j] = seqs[j].blocks;
        }
        if (!st && ns > 1) { /* packed: one step */
            int T = 0;
            for (size_t j = 0; j < ns; j++)
                for (size_t t = 0; t < n[g0 + j]; t++) tok[T] = ids[g0 + j][t], pos[T] = (int32_t)t, seq[T++] = (int32_t)j;
            fwd_batch b = {T, tok, pos, seq, tables, 0, NULL};
            st = run_rows(m, &kv, &b, rows, err);
            for (size_t j = 0, r = 0; j < ns && !st; r += n[g0 + j], j++) {
                float *o = out + (g0 + j) * H;
                size_t nj = n[g0 + j];
                for (size_t h = 0; h < H; h++) {
                    double a = 0;
                    if (pooling == 0) {
                        for (size_t t = 0; t < nj; t++) a += rows[(r + t) * H + h];
                        a /= (double)nj;
                    } else {
                        a = rows[(pooling == 1 ? r + nj - 1 : r) * H + h];
                    }
                    o[h] = (float)a;
                }
            }
        } else if (!st) { /* one input, in chunks */
            const int32_t *x = ids[g0];
            size_t nx = n[g0];
            float *o = out + g0 * H;
            memset(acc, 0, H * sizeof *acc);
            for (size_t done = 0; done < nx && !st;) {
                int T = (int)(nx - done < (size_t)T_max ? nx - done : (size_t)T_max);
                for (int t = 0; t < T; t++) tok[t] = x[done + (size_t)t], pos[t] = (int32_t)(done + (size_t)t), seq[t] = 0;
                fwd_batch b = {T, tok, pos, seq, tables, 0, NULL};
                st = run_rows(m, &kv, &b, rows, err);
                if (st) break;
                if (pooling == 0)
                    for (int t = 0; t < T; t++)
                        for (size_t h = 0; h < H; h++) acc[h] += rows[(size_t)t * H + h];
                else if (pooling == 2 && done == 0)
                    for (size_t h = 0; h < H; h++) acc[h] = rows[h];
                else if (pooling == 1 && done + (size_t)T == nx)
                    for (size_t h = 0; h < H; h++) acc[h] = rows[(size_t)(T - 1) * H + h];
                done += (size_t)T;
            }
            for (size_t h = 0; h < H; h++) o[h] = (float)(pooling == 0 ? acc[h] / (double)nx : acc[h]);
        }
        for (size_t j = 0; j < ns; j++)
            if (seqs[j].blocks) kv_seq_release(&seqs[j], &kv);
        memset(seqs, 0, ns * sizeof *seqs);
        kv_cache_free(&kv);
        g0 = g1;
    }
    if (!st && normalize)
        for (size_t i = 0; i < k; i++) {
            float *o = out + i * H;
            double ss = 0;
            for (size_t h = 0; h < H; h++) ss += (double)o[h] * o[h];
            double inv = ss > 0 ? 1.0 / sqrt(ss) : 0;
            for (size_t h = 0; h < H; h++) o[h] = (float)(o[h] * inv);
        }
    xllm_free(tok);
    xllm_free(pos);
    xllm_free(seq);
    xllm_free(rows);
    xllm_free(acc);
    xllm_free(seqs);
    xllm_free((void *)tables);
    return st;
}
