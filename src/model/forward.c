/*
 * forward.c - one forward pass over a flattened batch of tokens.
 *
 * The batch mixes any sequences and positions (prefill chunks, decode tokens);
 * every matmul runs over all of its tokens at once so weights are read once per
 * step. Attention is the only place sequences meet the KV cache: each token
 * writes its K/V at (its sequence's block table, its position), then attends
 * over positions [window start, its position] of its own sequence with an
 * online softmax (no score matrix; attention.c). Dense MLP and mixture-of-experts layers
 * differ only in the feed-forward block.
 *
 * Fused operators (the default; XLLM_FUSE=0 at load runs the unfused
 * sequence, for comparisons): RMSNorm writes the quantized activations too,
 * and q/k/v (gate/up) reuse them; q/k/v matmul + q/k norm + RoPE + K/V cache
 * write in one region over heads; gate/up matmul + silu * up in one region
 * over intermediate rows; o-proj and down-proj add into the residual stream.
 * Every output element keeps the unfused arithmetic, so the bits are the same
 * (tests/unit/test_fused.c).
 */
#include "model/model.h"
#include "base/error.h"
#include "base/fastmath.h"
#include "base/profile.h"
#include "quant/quant.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <string.h>

/* ------------------------------------------------------------- profiling */

static double mm_flops(const matrix *W, int T) { return 2.0 * (double)T * (double)W->rows * (double)W->cols; }
/* weights streamed once, activations in and out */
static double mm_bytes(const matrix *W, int T) {
    return (double)W->rows * (double)quant_row_bytes(W->dtype, W->group, W->cols) +
           4.0 * (double)T * (double)(W->cols + W->rows);
}
#define MATMUL(op, x, T, W, bias, y) PROF(op, mm_flops(W, T), mm_bytes(W, T), op_matmul(&m->be, x, T, W, bias, y))

/* ------------------------------------------------------------------ RoPE */

static void rope_tables(model *m, const fwd_batch *b) {
    int half = m->cfg.head_dim / 2;
    for (int t = 0; t < b->n_tokens; t++)
        for (int i = 0; i < half; i++) {
            double a = (double)b->pos[t] * m->inv_freq[i];
            m->s.rope_cos[(size_t)t * half + i] = (float)cos(a);
            m->s.rope_sin[(size_t)t * half + i] = (float)sin(a);
        }
}

/* HF's rotate-half convention pairs (i, i + half); GGUF llama files store Q/K
 * rows permuted so that the pairs are interleaved (2i, 2i + 1). Same rotation,
 * different pairing; frequency i either way. */
static void rope_apply(float *v, int n_heads, int hd, const float *cs, const float *sn, int interleaved) {
    int half = hd / 2, stride = interleaved ? 2 : 1, off = interleaved ? 1 : half;
    for (int h = 0; h < n_heads; h++) {
        float *x = v + (size_t)h * hd;
        for (int i = 0; i < half; i++) {
            float *p0 = x + i * stride, *p1 = p0 + off;
            float a = *p0, c = *p1;
            *p0 = a * cs[i] - c * sn[i];
            *p1 = c * cs[i] + a * sn[i];
        }
    }
}

static int any_quant(const matrix *a, const matrix *b, const matrix *c) {
    return (a && a->data && xllm_dtype_is_quant(a->dtype)) || (b && b->data && xllm_dtype_is_quant(b->dtype)) ||
           (c && c->data && xllm_dtype_is_quant(c->dtype));
}

/* RMSNorm of s->x into s->xn. Fused (be.fuse): threaded over tokens, and when
 * prep is set each row's quantized activations are written in the same pass,
 * so the next matmuls over xn (OP_ACT_READY) do not quantize it again. */
static void norm_block(model *m, const float *w, int T, int prep) {
    const model_config *c = &m->cfg;
    model_scratch *s = &m->s;
    if (!m->be.fuse)
        PROF(PROF_RMSNORM, 4.0 * T * c->hidden, 8.0 * T * c->hidden,
             op_rmsnorm(s->x, w, c->rms_eps, c->hidden, T, s->xn));
    else
        PROF(prep ? PROF_RMSNORM_ACT : PROF_RMSNORM, (prep ? 7.0 : 4.0) * T * c->hidden,
             (prep ? 9.0 : 8.0) * T * c->hidden, op_rmsnorm_act(&m->be, s->x, w, c->rms_eps, c->hidden, T, s->xn, prep));
}

/* Fused q/k/v: one parallel region over head blocks of head_dim rows (q
 * heads, then k heads, then v heads); each task computes its block for all
 * tokens, then (q, k) the per-head q/k RMSNorm and RoPE, and (k, v) writes the
 * head into each token's cache slot. Per element, the arithmetic of the
 * unfused path. */
typedef struct {
    model *m;
    kv_cache *kv;
    const fwd_batch *b;
    int l;
    const matrix *W[3];   /* q, k, v (the same fused qkv matrix three times, or three) */
    int64_t row0[3];      /* where the part starts in its matrix */
    const float *bias[3]; /* indexed by the matrix's row */
} qkv_job;

static void qkv_heads(void *p, size_t u0, size_t u1, int thread) {
    qkv_job *j = p;
    model *m = j->m;
    const model_config *c = &m->cfg;
    const layer_weights *L = &m->layers[j->l];
    model_scratch *s = &m->s;
    kv_cache *kv = j->kv;
    const fwd_batch *b = j->b;
    int T = b->n_tokens, hd = c->head_dim, half = hd / 2, nh = c->n_heads, nkv = c->n_kv_heads;
    size_t qd = (size_t)nh * hd, kd = (size_t)nkv * hd;
    /* consecutive heads of one part in one kernel call, up to ~64 KiB of outputs */
    size_t per_call = (size_t)(16384 / T / hd);
    if (per_call < 1) per_call = 1;
    for (size_t u = u0; u < u1;) {
        int part = u < (size_t)nh ? 0 : u < (size_t)(nh + nkv) ? 1 : 2;
        size_t first = part == 0 ? 0 : part == 1 ? (size_t)nh : (size_t)(nh + nkv);
        size_t end = part == 0 ? (size_t)nh : part == 1 ? (size_t)(nh + nkv) : (size_t)(nh + 2 * nkv);
        if (end > u1) end = u1;
        if (end > u + per_call) end = u + per_call;
        int h0 = (int)(u - first), h1 = (int)(end - first);
        float *out = (part == 0 ? s->q : part == 1 ? s->k : s->v) + (size_t)h0 * hd;
        size_t ld = part == 0 ? qd : kd;
        int64_t r0 = j->row0[part] + (int64_t)h0 * hd;
        op_matmul_rows(&m->be, s->xn, T, j->W[part], j->bias[part], r0, r0 + (int64_t)(h1 - h0) * hd, out, ld, thread);
        for (int t = 0; t < T; t++) {
            float *v = out + (size_t)t * ld;
            if (part < 2) {
                if (c->qk_norm) op_rmsnorm(v, part == 0 ? L->q_norm : L->k_norm, c->rms_eps, hd, h1 - h0, v);
                rope_apply(v, h1 - h0, hd, s->rope_cos + (size_t)t * half, s->rope_sin + (size_t)t * half,
                           c->rope_interleaved);
            }
            if (part > 0) {
                const int32_t *table = b->block_tables[b->seq[t]];
                float *dst = part == 1 ? kv_cache_k_at(kv, j->l, table, b->pos[t]) : kv_cache_v_at(kv, j->l, table, b->pos[t]);
                memcpy(dst + (size_t)h0 * hd, v, (size_t)(h1 - h0) * (size_t)hd * sizeof(float));
            }
        }
        u = end;
    }
}

static void attention_block(model *m, kv_cache *kv, const fwd_batch *b, int l) {
    const model_config *c = &m->cfg;
    const layer_weights *L = &m->layers[l];
    model_scratch *s = &m->s;
    int T = b->n_tokens, hd = c->head_dim, half = hd / 2;
    size_t qd = (size_t)c->n_heads * hd, kd = (size_t)c->n_kv_heads * hd;
    int fuse = m->be.fuse;
    int prep = fuse && (L->qkv.data ? any_quant(&L->qkv, NULL, NULL) : any_quant(&L->q, &L->k, &L->v));
    unsigned ready = prep ? OP_ACT_READY : 0;

    norm_block(m, L->attn_norm, T, prep);
    if (m->observe) m->observe(m->observe_ctx, l, OBS_ATTN_IN, -1, s->xn, T, c->hidden);
    if (fuse && hd % 4 == 0) { /* head blocks start on 4-row tiles */
        qkv_job j = {m, kv, b, l, {0}, {0}, {0}};
        if (L->qkv.data) {
            j.W[0] = j.W[1] = j.W[2] = &L->qkv;
            j.row0[1] = (int64_t)qd;
            j.row0[2] = (int64_t)(qd + kd);
            j.bias[0] = j.bias[1] = j.bias[2] = L->qkv_bias;
        } else {
            j.W[0] = &L->q, j.W[1] = &L->k, j.W[2] = &L->v;
            j.bias[0] = L->q_bias, j.bias[1] = L->k_bias, j.bias[2] = L->v_bias;
        }
        size_t units = (size_t)(c->n_heads + 2 * c->n_kv_heads);
        double fl = mm_flops(j.W[0], T) * (L->qkv.data ? 1 : 1 + (double)kd / qd * 2) + 6.0 * T * (double)(qd + kd);
        double by = (L->qkv.data ? mm_bytes(&L->qkv, T) : mm_bytes(&L->q, T) + mm_bytes(&L->k, T) + mm_bytes(&L->v, T)) +
                    8.0 * T * (double)kd;
        PROF(PROF_QKV_ROPE_KV, fl, by,
             op_run(&m->be, units, op_units_per_thread(&m->be, j.W[0], T, units, (size_t)hd), qkv_heads, &j));
    } else {
        if (L->qkv.data) { /* one matmul, then split rows q | k | v */
            PROF(PROF_MATMUL_QKV, mm_flops(&L->qkv, T), mm_bytes(&L->qkv, T),
                 op_matmul_ex(&m->be, s->xn, T, &L->qkv, L->qkv_bias, s->fused, NULL, ready));
            size_t w = qd + 2 * kd;
            for (int t = 0; t < T; t++) {
                const float *src = s->fused + (size_t)t * w;
                memcpy(s->q + (size_t)t * qd, src, qd * sizeof(float));
                memcpy(s->k + (size_t)t * kd, src + qd, kd * sizeof(float));
                memcpy(s->v + (size_t)t * kd, src + qd + kd, kd * sizeof(float));
            }
        } else {
            PROF(PROF_MATMUL_QKV, mm_flops(&L->q, T), mm_bytes(&L->q, T),
                 op_matmul_ex(&m->be, s->xn, T, &L->q, L->q_bias, s->q, NULL, ready));
            PROF(PROF_MATMUL_QKV, mm_flops(&L->k, T), mm_bytes(&L->k, T),
                 op_matmul_ex(&m->be, s->xn, T, &L->k, L->k_bias, s->k, NULL, ready));
            PROF(PROF_MATMUL_QKV, mm_flops(&L->v, T), mm_bytes(&L->v, T),
                 op_matmul_ex(&m->be, s->xn, T, &L->v, L->v_bias, s->v, NULL, ready));
        }
        uint64_t t_rope = prof_enabled ? prof_now_ns() : 0;
        for (int t = 0; t < T; t++) {
            float *q = s->q + (size_t)t * qd, *k = s->k + (size_t)t * kd;
            if (c->qk_norm) {
                op_rmsnorm(q, L->q_norm, c->rms_eps, hd, c->n_heads, q);
                op_rmsnorm(k, L->k_norm, c->rms_eps, hd, c->n_kv_heads, k);
            }
            const float *cs = s->rope_cos + (size_t)t * half, *sn = s->rope_sin + (size_t)t * half;
            rope_apply(q, c->n_heads, hd, cs, sn, c->rope_interleaved);
            rope_apply(k, c->n_kv_heads, hd, cs, sn, c->rope_interleaved);
            /* write this token's K/V into its slot */
            const int32_t *table = b->block_tables[b->seq[t]];
            memcpy(kv_cache_k_at(kv, l, table, b->pos[t]), k, kd * sizeof(float));
            memcpy(kv_cache_v_at(kv, l, table, b->pos[t]), s->v + (size_t)t * kd, kd * sizeof(float));
        }
        if (prof_enabled) prof_add(PROF_ROPE_KV, t_rope, 6.0 * T * (double)(qd + kd), 4.0 * T * (double)(qd + 3 * kd));
    }
    attention_run(m, kv, b, l);
    if (m->observe) m->observe(m->observe_ctx, l, OBS_O_IN, -1, s->att, T, (int)qd);
    if (fuse) { /* x += o(att), per element as the separate pass below */
        PROF(PROF_MATMUL_O_RESIDUAL, mm_flops(&L->o, T) + (double)T * c->hidden, mm_bytes(&L->o, T) + 4.0 * T * c->hidden,
             op_matmul_ex(&m->be, s->att, T, &L->o, L->o_bias, s->x, s->tmp, OP_ADD));
        return;
    }
    MATMUL(PROF_MATMUL_O, s->att, T, &L->o, L->o_bias, s->tmp);
    PROF(PROF_RESIDUAL, (double)T * c->hidden, 12.0 * T * c->hidden,
         for (size_t i = 0; i < (size_t)T * c->hidden; i++) s->x[i] += s->tmp[i]);
}

/* ------------------------------------------------------------------- MLP */

/* out = down(silu(gate(x)) * up(x)) for T rows of x. */
static void swiglu(model *m, int layer, int expert, const float *x, int T, const matrix *gate, const matrix *up,
                   const matrix *down, const float *gb, const float *ub, const float *db, float *out) {
    MATMUL(PROF_MATMUL_GATE_UP, x, T, gate, gb, m->s.h1);
    MATMUL(PROF_MATMUL_GATE_UP, x, T, up, ub, m->s.h2);
    PROF(PROF_SILU_MUL, 6.0 * T * (double)gate->rows, 12.0 * T * (double)gate->rows,
         op_silu_mul(m->s.h1, m->s.h2, (size_t)T * (size_t)gate->rows));
    if (m->observe) m->observe(m->observe_ctx, layer, OBS_DOWN_IN, expert, m->s.h1, T, (int)gate->rows);
    MATMUL(PROF_MATMUL_DOWN, m->s.h1, T, down, db, out);
}

/* Route each token to its top-k experts, run each expert once over the tokens
 * routed to it, and sum the weighted outputs per token in expert order (so a
 * token's result does not depend on what else is in the batch). */
static void moe_block(model *m, int l, const layer_weights *L, int T) {
    const model_config *c = &m->cfg;
    model_scratch *s = &m->s;
    int E = c->n_experts, K = c->n_experts_used, H = c->hidden;
    MATMUL(PROF_MOE_ROUTER, s->xn, T, &L->router, NULL, s->router_logits);
    for (int t = 0; t < T; t++) {
        float *rl = s->router_logits + (size_t)t * E;
        float mx = -INFINITY, sum = 0;
        for (int e = 0; e < E; e++) mx = rl[e] > mx ? rl[e] : mx;
        for (int e = 0; e < E; e++) sum += (rl[e] = expf(rl[e] - mx));
        for (int e = 0; e < E; e++) rl[e] /= sum;
        int32_t *ids = s->route_ids + (size_t)t * K;
        float *w = s->route_w + (size_t)t * K, wsum = 0;
        for (int k = 0; k < K; k++) { /* top-k by selection; ties keep the lower id */
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int q = 0; q < k; q++) taken |= ids[q] == e;
                if (!taken && (best < 0 || rl[e] > rl[best])) best = e;
            }
            ids[k] = best;
            w[k] = rl[best];
            wsum += w[k];
        }
        if (c->norm_topk_prob)
            for (int k = 0; k < K; k++) w[k] /= wsum;
    }
    memset(s->moe_acc, 0, sizeof(float) * (size_t)T * H);
    for (int e = 0; e < E; e++) {
        int n = 0;
        for (int t = 0; t < T; t++)
            for (int k = 0; k < K; k++)
                if (s->route_ids[(size_t)t * K + k] == e) {
                    s->expert_tokens[n] = t;
                    s->expert_w[n] = s->route_w[(size_t)t * K + k];
                    memcpy(s->xg + (size_t)n * H, s->xn + (size_t)t * H, sizeof(float) * H);
                    n++;
                }
        if (!n) continue;
        swiglu(m, l, e, s->xg, n, &L->exp_gate[e], &L->exp_up[e], &L->exp_down[e], NULL, NULL, NULL, s->yg);
        for (int i = 0; i < n; i++) {
            float *acc = s->moe_acc + (size_t)s->expert_tokens[i] * H;
            const float *y = s->yg + (size_t)i * H;
            for (int d = 0; d < H; d++) acc[d] += s->expert_w[i] * y[d];
        }
    }
    if (c->shared_expert_intermediate > 0) {
        swiglu(m, l, -2, s->xn, T, &L->sh_gate, &L->sh_up, &L->sh_down, NULL, NULL, NULL, s->tmp); /* -2: shared expert */
        op_matmul(&m->be, s->xn, T, &L->sh_router, NULL, s->router_logits);
        for (int t = 0; t < T; t++) {
            float g = 1.0f / (1.0f + expf(-s->router_logits[t]));
            for (int d = 0; d < H; d++) s->moe_acc[(size_t)t * H + d] += g * s->tmp[(size_t)t * H + d];
        }
    }
    memcpy(s->tmp, s->moe_acc, sizeof(float) * (size_t)T * H);
}

static void mlp_block(model *m, int l, int T) {
    const model_config *c = &m->cfg;
    const layer_weights *L = &m->layers[l];
    model_scratch *s = &m->s;
    size_t I = (size_t)c->intermediate;
    int moe = c->layer_is_moe[l];
    /* fused: the gate/up region needs the up rows on a 4-row tile boundary */
    int fuse = m->be.fuse && !moe && (!L->gate_up.data || I % 4 == 0);
    int prep = fuse && (L->gate_up.data ? any_quant(&L->gate_up, NULL, NULL) : any_quant(&L->gate, &L->up, NULL));
    norm_block(m, L->mlp_norm, T, prep);
    if (m->observe) m->observe(m->observe_ctx, l, OBS_MLP_IN, -1, s->xn, T, c->hidden);
    if (fuse) { /* h1 = silu(gate(xn)) * up(xn) in one region, then x += down(h1) */
        unsigned ready = prep ? OP_ACT_READY : 0;
        const matrix *G = L->gate_up.data ? &L->gate_up : &L->gate, *U = L->gate_up.data ? &L->gate_up : &L->up;
        double fl = 2.0 * T * (double)I * c->hidden * 2 + 6.0 * T * (double)I;
        double by = (L->gate_up.data ? mm_bytes(G, T) : mm_bytes(G, T) + mm_bytes(U, T)) + 4.0 * T * (double)I;
        PROF(PROF_GATE_UP_SILU, fl, by,
             op_matmul_silu_mul(&m->be, s->xn, T, G, 0, L->gate_up.data ? NULL : L->gate_bias, U,
                                L->gate_up.data ? (int64_t)I : 0, L->gate_up.data ? NULL : L->up_bias, (int64_t)I,
                                s->h1, s->h2, ready));
        if (m->observe) m->observe(m->observe_ctx, l, OBS_DOWN_IN, -1, s->h1, T, (int)I);
        PROF(PROF_MATMUL_DOWN_RESIDUAL, mm_flops(&L->down, T) + (double)T * c->hidden,
             mm_bytes(&L->down, T) + 4.0 * T * c->hidden,
             op_matmul_ex(&m->be, s->h1, T, &L->down, L->gate_up.data ? NULL : L->down_bias, s->x, s->tmp, OP_ADD));
        return;
    }
    if (moe) {
        moe_block(m, l, L, T);
    } else if (L->gate_up.data) { /* one matmul for gate | up, then silu(gate) * up */
        MATMUL(PROF_MATMUL_GATE_UP, s->xn, T, &L->gate_up, NULL, s->fused);
        PROF(PROF_SILU_MUL, 6.0 * T * (double)I, 12.0 * T * (double)I,
             for (int t = 0; t < T; t++) {
                 float *h = s->h1 + (size_t)t * I;
                 memcpy(h, s->fused + (size_t)t * 2 * I, I * sizeof(float));
                 op_silu_mul(h, s->fused + (size_t)t * 2 * I + I, I);
             });
        if (m->observe) m->observe(m->observe_ctx, l, OBS_DOWN_IN, -1, s->h1, T, (int)I);
        MATMUL(PROF_MATMUL_DOWN, s->h1, T, &L->down, NULL, s->tmp);
    } else
        swiglu(m, l, -1, s->xn, T, &L->gate, &L->up, &L->down, L->gate_bias, L->up_bias, L->down_bias, s->tmp);
    PROF(PROF_RESIDUAL, (double)T * c->hidden, 12.0 * T * c->hidden,
         for (size_t i = 0; i < (size_t)T * c->hidden; i++) s->x[i] += s->tmp[i]);
}

/* ---------------------------------------------------------------- driver */

/* The forward pass is three calls, so that a pipeline stage can run its part:
 * embed (first stage), layers [l0, l1) over the hidden states (each stage its
 * range, in one call or several), head (last stage). The hidden states live in
 * model_hidden(m): n_tokens rows of hidden floats. */

static xllm_status check_batch(const model *m, const fwd_batch *b, xllm_error *err) {
    int T = b->n_tokens;
    if (T <= 0 || T > m->s.max_tokens)
        return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "forward batch of %d tokens (allowed 1..%d)", T,
                           m->s.max_tokens);
    return XLLM_OK;
}

xllm_status model_embed(model *m, const fwd_batch *b, xllm_error *err) {
    const model_config *c = &m->cfg;
    model_scratch *s = &m->s;
    xllm_status st = check_batch(m, b, err);
    if (st) return st;
    int T = b->n_tokens;
    if (!m->embed.data)
        return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "this model part (layers %d..%d) has no embedding",
                           m->layer_begin, m->layer_end - 1);
    for (int t = 0; t < T; t++)
        if (b->tokens[t] < 0 || b->tokens[t] >= c->vocab)
            return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "token id %d is outside the vocabulary (0..%d)",
                               b->tokens[t], c->vocab - 1);
    PROF(PROF_EMBED, 0, (double)T * (double)quant_row_bytes(m->embed.dtype, m->embed.group, m->embed.cols),
         for (int t = 0; t < T; t++) op_matrix_row(&m->embed, b->tokens[t], s->x + (size_t)t * c->hidden));
    return XLLM_OK;
}

float *model_hidden(model *m) { return m->s.x; }

void model_layers(model *m, kv_cache *kv, const fwd_batch *b, int l0, int l1) {
    assert(l0 >= m->layer_begin && l1 <= m->layer_end && l0 <= l1);
    assert(b->n_tokens > 0 && b->n_tokens <= m->s.max_tokens);
    if (l0 == m->layer_begin) rope_tables(m, b);
    for (int l = l0; l < l1; l++) {
        attention_block(m, kv, b, l);
        mlp_block(m, l, b->n_tokens);
    }
}

void model_head(model *m, const fwd_batch *b, float *logits) {
    const model_config *c = &m->cfg;
    model_scratch *s = &m->s;
    assert(m->final_norm && m->lm_head.data);
    /* final norm + lm_head only for the rows whose logits are wanted */
    for (int i = 0; i < b->n_out; i++) {
        assert(b->out_idx[i] >= 0 && b->out_idx[i] < b->n_tokens);
        op_rmsnorm(s->x + (size_t)b->out_idx[i] * c->hidden, m->final_norm, c->rms_eps, c->hidden, 1,
                   s->xn + (size_t)i * c->hidden);
    }
    if (b->n_out > 0) MATMUL(PROF_LM_HEAD, s->xn, b->n_out, &m->lm_head, NULL, logits);
}

xllm_status model_forward(model *m, kv_cache *kv, const fwd_batch *b, float *logits, xllm_error *err) {
    if (m->layer_begin != 0 || m->layer_end != m->cfg.n_layers)
        return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT,
                           "this model part holds layers %d..%d of %d: a whole forward pass needs them all",
                           m->layer_begin, m->layer_end - 1, m->cfg.n_layers);
    xllm_status st = model_embed(m, b, err);
    if (st) return st;
    model_layers(m, kv, b, 0, m->cfg.n_layers);
    model_head(m, b, logits);
    return XLLM_OK;
}
