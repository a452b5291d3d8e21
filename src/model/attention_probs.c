/*
 * attention_probs.c - a prompt's attention probabilities per layer and head,
 * on a reference path beside the fused kernels.
 *
 * The fused attention (the backend's online softmax over the paged cache)
 * never forms a score matrix, and should not have to: this file runs the
 * ordinary forward pass (model_logits_once) with the model's attention
 * observer set (model.h), keeps each asked-for layer's q and k as the
 * attention reads them (after the q/k norm and RoPE, the sliding layers'
 * own RoPE base included), and afterwards recomputes, on the host in double
 * precision, softmax(scale * q.k [soft-capped] + mask) for every head: the
 * model's attention scale (1/sqrt(head_dim) or query_pre_attn_scalar's),
 * its soft-cap, the layer's sliding window (query i sees keys
 * [i - window + 1, i]) and the causal mask, query head h reading KV head
 * h / (n_heads / n_kv_heads) (GQA). Masked entries are 0, each row sums to 1.
 * The forward pass itself is unchanged: the observer is one pointer test per
 * layer when it is not set.
 * Multi-head latent attention (DeepSeek): each head's score is q_h . k_h with
 * the decompressed key k_h = [K_b,h c | k_pe] (kv_b's nope rows for head h
 * times the latent c, and the rope key all heads share); it is computed here
 * as the attention computes it, (K_b,h^T q_nope,h) . c + q_pe . k_pe, from the
 * absorbed query row and the latent row the observer passes (model.h), with
 * the model's scale 1 / sqrt(qk_nope + qk_rope): the same number by
 * associativity (the test checks it against the decompressed form).
 */
#include "model/model.h"
#include "base/alloc.h"
#include "base/error.h"

#include <math.h>
#include <string.h>

typedef struct take {
    const model_config *c;
    size_t n;          /* the sequence's length */
    int *slot;         /* per model layer: its index among the asked-for layers, or -1 */
    float *q, *k;      /* per asked-for layer: [n][n_heads * hd], [n][n_kv_heads * hd] */
    unsigned char *seen; /* per asked-for layer and position: its q/k arrived */
} take;

/* The rows the attention reads: values per head and KV heads (MLA: the
 * latent row, one KV head) */
static void qk_dims(const model_config *c, int *hd, int *n_kv) {
    *hd = c->mla_dim ? c->mla_dim : c->head_dim;
    *n_kv = c->mla_dim ? 1 : c->n_kv_heads;
}

static void take_qk(void *ctx, int layer, const fwd_batch *b, const float *q, const float *k, const float *v) {
    (void)v;
    take *tk = ctx;
    int s = tk->slot[layer];
    if (s < 0) return;
    int hd, nkv;
    qk_dims(tk->c, &hd, &nkv);
    size_t qd = (size_t)tk->c->n_heads * (size_t)hd, kd = (size_t)nkv * (size_t)hd;
    for (int t = 0; t < b->n_tokens; t++) {
        size_t p = (size_t)b->pos[t];
        if (b->seq[t] != 0 || p >= tk->n) continue;
        memcpy(tk->q + ((size_t)s * tk->n + p) * qd, q + (size_t)t * qd, qd * sizeof(float));
        memcpy(tk->k + ((size_t)s * tk->n + p) * kd, k + (size_t)t * kd, kd * sizeof(float));
        tk->seen[(size_t)s * tk->n + p] = 1;
    }
}

/* One layer's probabilities from its q and k: out[h][i][j] (or, averaged,
 * out[i][j] += p / n_heads; out zeroed by the caller). */
static void layer_probs(const model_config *c, int layer, size_t n, const float *q, const float *k, int average,
                        double *row, float *out) {
    int H = c->n_heads, hd, nkv, w = c->layer_window[layer];
    qk_dims(c, &hd, &nkv);
    int group = H / nkv;
    size_t qd = (size_t)H * hd, kd = (size_t)nkv * hd;
    double scale = c->attn_scale > 0 ? (double)c->attn_scale : 1.0 / sqrt((double)hd), cap = c->attn_softcap;
    for (int h = 0; h < H; h++) {
        int g = h / group;
        float *o = average ? out : out + (size_t)h * n * n;
        for (size_t i = 0; i < n; i++) {
            size_t j0 = w > 0 && i + 1 > (size_t)w ? i + 1 - (size_t)w : 0;
            const float *qi = q + i * qd + (size_t)h * hd;
            double mx = -INFINITY;
            for (size_t j = j0; j <= i; j++) {
                const float *kj = k + j * kd + (size_t)g * hd;
                double d = 0;
                for (int e = 0; e < hd; e++) d += (double)qi[e] * (double)kj[e];
                d *= scale;
                if (cap > 0) d = cap * tanh(d / cap);
                row[j] = d;
                if (d > mx) mx = d;
            }
            double sum = 0;
            for (size_t j = j0; j <= i; j++) sum += row[j] = exp(row[j] - mx);
            for (size_t j = j0; j <= i; j++) {
                double p = row[j] / sum;
                if (average) o[i * n + j] += (float)(p / H);
                else o[i * n + j] = (float)p;
            }
        }
    }
}

xllm_status model_attention_once(model *m, const int32_t *ids, size_t n, const int32_t *layers, size_t n_layers,
                                 int average_heads, kv_dtype kv_type, float **probs, int64_t shape[4],
                                 xllm_error *err) {
    const model_config *c = &m->cfg;
    *probs = NULL;
    memset(shape, 0, 4 * sizeof *shape);
    if (n == 0 || !ids) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "attention: need at least one id");
    if (n_layers > (size_t)c->n_layers)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "attention: %zu layers asked for, the model has %d", n_layers,
                           c->n_layers);
    size_t L = layers ? n_layers : (size_t)c->n_layers;
    if (L == 0) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "attention: no layers asked for");
    size_t heads = average_heads ? 1 : (size_t)c->n_heads;
    int hd, nkv;
    qk_dims(c, &hd, &nkv);
    size_t qd = (size_t)c->n_heads * (size_t)hd, kd = (size_t)nkv * (size_t)hd;
    /* the output, and the q/k kept, each within XLLM_ATTENTION_MAX_BYTES */
    double out_bytes = (double)L * (double)heads * (double)n * (double)n * sizeof(float);
    double keep_bytes = (double)L * (double)n * (double)(qd + kd) * sizeof(float);
    if (out_bytes > XLLM_ATTENTION_MAX_BYTES || keep_bytes > XLLM_ATTENTION_MAX_BYTES)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                           "attention: %zu layers x %zu heads x %zu x %zu tokens is %.0f MiB, over the limit of %d MiB "
                           "(ask for fewer layers, average the heads, or a shorter prompt)",
                           L, heads, n, n, (out_bytes > keep_bytes ? out_bytes : keep_bytes) / 1048576.0,
                           XLLM_ATTENTION_MAX_BYTES >> 20);
    take tk = {c, n, NULL, NULL, NULL, NULL};
    tk.slot = mem_malloc_array((size_t)c->n_layers, sizeof(int));
    tk.q = mem_malloc_array(L * n, qd * sizeof(float));
    tk.k = mem_malloc_array(L * n, kd * sizeof(float));
    tk.seen = mem_calloc(L * n, 1);
    float *vocab_row = mem_malloc_array((size_t)c->vocab, sizeof(float));
    float *out = mem_calloc(L * heads * n * n, sizeof(float));
    double *row = mem_malloc_array(n, sizeof(double));
    xllm_status st = XLLM_OK;
    if (!tk.slot || !tk.q || !tk.k || !tk.seen || !vocab_row || !out || !row)
        st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "attention: out of memory");
    if (!st) {
        for (int l = 0; l < c->n_layers; l++) tk.slot[l] = -1;
        for (size_t s = 0; s < L && !st; s++) {
            int32_t l = layers ? layers[s] : (int32_t)s;
            if (l < 0 || l >= c->n_layers)
                st = err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "attention: layer %d is not in 0..%d", l,
                                 c->n_layers - 1);
            else if (tk.slot[l] >= 0)
                st = err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "attention: layer %d is asked for twice", l);
            else tk.slot[l] = (int)s;
        }
    }
    if (!st) {
        m->attn_observe = take_qk;
        m->attn_observe_ctx = &tk;
        st = model_logits_once(m, ids, n, 0, kv_type, vocab_row, err);
        m->attn_observe = NULL;
        m->attn_observe_ctx = NULL;
    }
    for (size_t i = 0; i < L * n && !st; i++)
        if (!tk.seen[i]) st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "attention: out of memory reading q/k back");
    for (size_t s = 0; s < L && !st; s++) {
        int l = layers ? layers[s] : (int)s;
        layer_probs(c, l, n, tk.q + s * n * qd, tk.k + s * n * kd, average_heads, row, out + s * heads * n * n);
    }
    xllm_free(tk.slot);
    xllm_free(tk.q);
    xllm_free(tk.k);
    xllm_free(tk.seen);
    xllm_free(vocab_row);
    xllm_free(row);
    if (st) {
        xllm_free(out);
        return st;
    }
    *probs = out;
    shape[0] = (int64_t)L, shape[1] = (int64_t)heads, shape[2] = shape[3] = (int64_t)n;
    return XLLM_OK;
}
