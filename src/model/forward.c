/*
 * forward.c - one forward pass over a flattened batch of tokens.
 *
 * The batch mixes any sequences and positions (prefill chunks, decode tokens);
 * every matmul runs over all of its tokens at once so weights are read once per
 * step. Attention is the only place sequences meet the KV cache: each token
 * writes its K/V at (its sequence's block table, its position), then attends
 * over positions [window start, its position] of its own sequence with an
 * online softmax (no score matrix). Dense MLP and mixture-of-experts layers
 * differ only in the feed-forward block.
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

/* ------------------------------------------------------------- attention */

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

static void attention_block(model *m, kv_cache *kv, const fwd_batch *b, int l) {
    const model_config *c = &m->cfg;
    const layer_weights *L = &m->layers[l];
    model_scratch *s = &m->s;
    int T = b->n_tokens, hd = c->head_dim, half = hd / 2;
    size_t qd = (size_t)c->n_heads * hd, kd = (size_t)c->n_kv_heads * hd;

    PROF(PROF_RMSNORM, 4.0 * T * c->hidden, 8.0 * T * c->hidden,
         op_rmsnorm(s->x, L->attn_norm, c->rms_eps, c->hidden, T, s->xn));
    if (m->observe) m->observe(m->observe_ctx, l, OBS_ATTN_IN, -1, s->xn, T, c->hidden);
    if (L->qkv.data) { /* one matmul, then split rows q | k | v */
        MATMUL(PROF_MATMUL_QKV, s->xn, T, &L->qkv, L->qkv_bias, s->fused);
        size_t w = qd + 2 * kd;
        for (int t = 0; t < T; t++) {
            const float *src = s->fused + (size_t)t * w;
            memcpy(s->q + (size_t)t * qd, src, qd * sizeof(float));
            memcpy(s->k + (size_t)t * kd, src + qd, kd * sizeof(float));
            memcpy(s->v + (size_t)t * kd, src + qd + kd, kd * sizeof(float));
        }
    } else {
        MATMUL(PROF_MATMUL_QKV, s->xn, T, &L->q, L->q_bias, s->q);
        MATMUL(PROF_MATMUL_QKV, s->xn, T, &L->k, L->k_bias, s->k);
        MATMUL(PROF_MATMUL_QKV, s->xn, T, &L->v, L->v_bias, s->v);
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
        int pos = b->pos[t];
        int32_t blk = b->block_tables[b->seq[t]][pos / kv->block_size];
        memcpy(kv_cache_k(kv, l, blk, pos % kv->block_size), k, kd * sizeof(float));
        memcpy(kv_cache_v(kv, l, blk, pos % kv->block_size), s->v + (size_t)t * kd, kd * sizeof(float));
    }
    if (prof_enabled) prof_add(PROF_ROPE_KV, t_rope, 6.0 * T * (double)(qd + kd), 4.0 * T * (double)(qd + 3 * kd));
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
    if (m->observe) m->observe(m->observe_ctx, l, OBS_O_IN, -1, s->att, T, (int)qd);
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
    PROF(PROF_RMSNORM, 4.0 * T * c->hidden, 8.0 * T * c->hidden,
         op_rmsnorm(s->x, L->mlp_norm, c->rms_eps, c->hidden, T, s->xn));
    if (m->observe) m->observe(m->observe_ctx, l, OBS_MLP_IN, -1, s->xn, T, c->hidden);
    if (c->layer_is_moe[l]) {
        moe_block(m, l, L, T);
    } else if (L->gate_up.data) { /* one matmul for gate | up, then silu(gate) * up */
        size_t I = (size_t)c->intermediate;
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

xllm_status model_forward(model *m, kv_cache *kv, const fwd_batch *b, float *logits, xllm_error *err) {
    const model_config *c = &m->cfg;
    model_scratch *s = &m->s;
    int T = b->n_tokens;
    if (T <= 0 || T > s->max_tokens)
        return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "forward batch of %d tokens (allowed 1..%d)", T,
                           s->max_tokens);
    for (int t = 0; t < T; t++)
        if (b->tokens[t] < 0 || b->tokens[t] >= c->vocab)
            return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "token id %d is outside the vocabulary (0..%d)",
                               b->tokens[t], c->vocab - 1);
    PROF(PROF_EMBED, 0, (double)T * (double)quant_row_bytes(m->embed.dtype, m->embed.group, m->embed.cols),
         for (int t = 0; t < T; t++) op_matrix_row(&m->embed, b->tokens[t], s->x + (size_t)t * c->hidden));
    rope_tables(m, b);
    for (int l = 0; l < c->n_layers; l++) {
        attention_block(m, kv, b, l);
        mlp_block(m, l, T);
    }
    /* final norm + lm_head only for the rows whose logits are wanted */
    for (int i = 0; i < b->n_out; i++) {
        assert(b->out_idx[i] >= 0 && b->out_idx[i] < T);
        op_rmsnorm(s->x + (size_t)b->out_idx[i] * c->hidden, m->final_norm, c->rms_eps, c->hidden, 1,
                   s->xn + (size_t)i * c->hidden);
    }
    if (b->n_out > 0) MATMUL(PROF_LM_HEAD, s->xn, b->n_out, &m->lm_head, NULL, logits);
    return XLLM_OK;
}
