/*
 * logits.c - logits of one sequence of ids, outside any serving engine.
 *
 * xllm_model_logits and calibration want the logits of a fixed id sequence,
 * not generation: this runs the flattened-batch forward pass in chunks of
 * the model's step size over a private KV pool sized for exactly those ids,
 * so it never competes with an engine's pool; its rows are stored as the
 * caller asks (the model's kv_dtype; auto is f32 here, the pool fitting by construction). The caller serializes forward
 * passes on the model (model_api.c holds the model's forward lock).
 */
#include "model/model.h"
#include "base/alloc.h"
#include "base/error.h"

xllm_status model_logits_once(model *m, const int32_t *ids, size_t n, int all_positions, kv_dtype kv_type, float *out,
                              xllm_error *err) {
    if (n == 0 || !ids || !out) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "logits: need at least one id");
    const model_config *c = &m->cfg;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab)
            return err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                               "token id %d at index %zu is outside the vocabulary (0..%d)", ids[i], i, c->vocab - 1);
    if (n > (size_t)INT32_MAX / 2) return err_setf(err, XLLM_ERR_CONTEXT_OVERFLOW, "logits: too many ids (%zu)", n);
    const int B = 16;
    int32_t n_blocks = (int32_t)((n + B - 1) / B);
    kv_cache kv;
    xllm_status st = kv_cache_init(&kv, &m->be, c->n_layers, c->n_kv_heads, c->head_dim, B, n_blocks, kv_type, err);
    if (st) return st;
    int T_max = m->s.max_tokens;
    int32_t *tok = mem_malloc_array((size_t)T_max, sizeof(int32_t));
    int32_t *pos = mem_malloc_array((size_t)T_max, sizeof(int32_t));
    int32_t *seq = mem_calloc((size_t)T_max, sizeof(int32_t));
    int32_t *oi = mem_malloc_array((size_t)T_max, sizeof(int32_t));
    kv_seq s = {0};
    if (!tok || !pos || !seq || !oi) st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    if (!st) st = kv_seq_reserve(&s, &kv, (int32_t)n, err);
    const int32_t *table[1] = {s.blocks};
    size_t V = (size_t)c->vocab;
    for (size_t done = 0; done < n && !st;) {
        int T = (int)(n - done < (size_t)T_max ? n - done : (size_t)T_max);
        for (int t = 0; t < T; t++) {
            tok[t] = ids[done + (size_t)t];
            pos[t] = (int32_t)(done + (size_t)t);
            oi[t] = t;
        }
        int last = done + (size_t)T == n;
        fwd_batch b = {T, tok, pos, seq, table, 0, oi};
        float *dst = out;
        if (all_positions) {
            b.n_out = T;
            dst = out + done * V;
        } else if (last) {
            b.n_out = 1;
            b.out_idx = &oi[T - 1];
        }
        st = model_forward(m, &kv, &b, dst, err);
        done += (size_t)T;
    }
    if (s.blocks) kv_seq_release(&s, &kv);
    kv_cache_free(&kv);
    xllm_free(tok);
    xllm_free(pos);
    xllm_free(seq);
    xllm_free(oi);
    return st;
}
