/*
 * forward.c - one forward pass over a flattened batch of tokens.
 *
 * The batch mixes any sequences and positions (prefill chunks, decode tokens);
 * every matmul runs over all of its tokens at once so weights are read once per
 * step. Attention is the only place sequences meet the KV cache: each token
 * writes its K/V at (its sequence's block table, its position), then attends
 * over positions [window start, its position] of its own sequence with an
 * online softmax (no score matrix; the backend's paged-attention operation).
 * Dense MLP and mixture-of-experts layers differ only in the feed-forward block.
 *
 * Every operation goes through the backend's table (backend.h) on device
 * buffers; this file decides the order, the buffers and what to fuse, never
 * how an operation runs.
 *
 * Fused operators (the default; model option no_fuse runs the unfused
 * sequence, for comparisons): RMSNorm writes the quantized activations too,
 * and q/k/v (gate/up) reuse them; q/k/v matmul + q/k norm + RoPE + K/V cache
 * write in one region over heads; gate/up matmul + silu * up in one region
 * over intermediate rows; o-proj and down-proj add into the residual stream.
 * Every output element keeps the unfused arithmetic, so the bits are the same
 * (tests/unit/test_fused.c).
 */
#include "model/model.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/profile.h"
#include "quant/quant.h"

#include <assert.h>
#include <math.h>
#include <string.h>

/* ------------------------------------------------------------- helpers */

/* the backend's table and context */
#define OPS (m->be.ops)
#define CTX (m->be.ctx)
#define MATMUL(op, x, T, W, bias, y) \
    PROF(op, mm_flops(W, T), mm_bytes(W, T), OPS->matmul(CTX, x, T, W, bias, y, NULL, 0))

static int any_quant(const matrix *a, const matrix *b, const matrix *c) {
    return (a && a->data && dtype_is_quant(a->dtype)) || (b && b->data && dtype_is_quant(b->dtype)) ||
           (c && c->data && dtype_is_quant(c->dtype));
}

/* Calibration's observer sees host memory: on a backend whose memory is not
 * the host's, the rows are read back through its copy first (backend.h). */
static void observe(model *m, int layer, observe_point point, int expert, const float *x, int T, int cols) {
    if (OPS->unified_memory) {
        m->observe(m->observe_ctx, layer, point, expert, x, T, cols);
        return;
    }
    size_t bytes = (size_t)T * (size_t)cols * sizeof(float);
    float *h = mem_malloc(bytes);
    if (!h) return; /* out of memory: this observation is lost (calibration statistics only) */
    OPS->copy(CTX, h, x, bytes, BE_DEVICE_TO_HOST);
    m->observe(m->observe_ctx, layer, point, expert, h, T, cols);
    xllm_free(h);
}

/* The attention-weights reference path's view of q, k, v (model.h), read
 * back to the host first on a backend whose memory is not the host's. */
static void observe_qkv(model *m, int layer, const fwd_batch *b) {
    const model_config *c = &m->cfg;
    size_t T = (size_t)b->n_tokens, qn = T * (size_t)c->n_heads * (size_t)c->head_dim,
           kn = T * (size_t)c->n_kv_heads * (size_t)c->head_dim;
    if (OPS->unified_memory) {
        m->attn_observe(m->attn_observe_ctx, layer, b, m->s.q, m->s.k, m->s.v);
        return;
    }
    float *h = mem_malloc_array(qn + 2 * kn, sizeof(float));
    if (!h) return; /* out of memory: the reference path sees no q/k for this layer and says so */
    OPS->copy(CTX, h, m->s.q, qn * sizeof(float), BE_DEVICE_TO_HOST);
    OPS->copy(CTX, h + qn, m->s.k, kn * sizeof(float), BE_DEVICE_TO_HOST);
    OPS->copy(CTX, h + qn + kn, m->s.v, kn * sizeof(float), BE_DEVICE_TO_HOST);
    m->attn_observe(m->attn_observe_ctx, layer, b, h, h + qn, h + qn + kn);
    xllm_free(h);
}

/* MLA's view for the attention observer (model.h): the absorbed queries
 * (s->fused), the latent rows (s->k) and the projected queries (s->q). */
static void observe_mla(model *m, int layer, const fwd_batch *b) {
    const model_config *c = &m->cfg;
    size_t T = (size_t)b->n_tokens, qn = T * (size_t)c->n_heads * (size_t)c->mla_dim, kn = T * (size_t)c->mla_dim,
           pn = T * (size_t)c->n_heads * (size_t)(c->qk_nope_dim + c->qk_rope_dim);
    if (OPS->unified_memory) {
        m->attn_observe(m->attn_observe_ctx, layer, b, m->s.fused, m->s.k, m->s.q);
        return;
    }
    float *h = mem_malloc_array(qn + kn + pn, sizeof(float));
    if (!h) return; /* out of memory: the reference path sees no q/k for this layer and says so */
    OPS->copy(CTX, h, m->s.fused, qn * sizeof(float), BE_DEVICE_TO_HOST);
    OPS->copy(CTX, h + qn, m->s.k, kn * sizeof(float), BE_DEVICE_TO_HOST);
    OPS->copy(CTX, h + qn + kn, m->s.q, pn * sizeof(float), BE_DEVICE_TO_HOST);
    m->attn_observe(m->attn_observe_ctx, layer, b, h, h + qn, h + qn + kn);
    xllm_free(h);
}

/* RMSNorm of s->x into s->xn. When prep is set (fused, quantized weights
 * next) the backend may prepare the next matmuls' activations in the same
 * pass, so those (BE_ACT_READY) do not prepare them again. */
static void norm_block(model *m, const float *w, int T, int prep) {
    const model_config *c = &m->cfg;
    model_scratch *s = &m->s;
    PROF(prep ? PROF_RMSNORM_ACT : PROF_RMSNORM, (prep ? 7.0 : 4.0) * T * c->hidden,
         (prep ? 9.0 : 8.0) * T * c->hidden,
         OPS->rmsnorm(CTX, s->x, NULL, T, w, c->rms_eps, c->hidden, s->xn, prep ? BE_PREPARE : 0));
}

/* x += y over T rows of the hidden size (the residual stream) */
static void residual(model *m, const float *y, int T) {
    PROF(PROF_RESIDUAL, (double)T * m->cfg.hidden, 12.0 * T * m->cfg.hidden,
         OPS->add(CTX, m->s.x, y, (size_t)T * (size_t)m->cfg.hidden));
}

/* x += rmsnorm(s->tmp) * w (a post-norm: the block's output normed before the residual) */
static void post_norm_residual(model *m, const float *w, int T) {
    const model_config *c = &m->cfg;
    PROF(PROF_RMSNORM, 4.0 * T * c->hidden, 8.0 * T * c->hidden,
         OPS->rmsnorm(CTX, m->s.tmp, NULL, T, w, c->rms_eps, c->hidden, m->s.xn, 0));
    residual(m, m->s.xn, T);
}

/* h = act(g) * u (the family's activation: silu or GELU-tanh) */
static void act_mul(model *m, float *h, const float *g, size_t ldg, const float *u, size_t ldu, int T, size_t n) {
    if (m->cfg.act == ARCH_ACT_GELU_TANH) OPS->gelu_mul(CTX, h, g, ldg, u, ldu, T, n);
    else OPS->silu_mul(CTX, h, g, ldg, u, ldu, T, n);
}

/* ------------------------------------------------------------- attention */

static void attention_block(model *m, kv_cache *kv, const fwd_batch *b, int l) {
    const model_config *c = &m->cfg;
    const layer_weights *L = &m->layers[l];
    model_scratch *s = &m->s;
    int T = b->n_tokens, hd = c->head_dim;
    size_t qd = (size_t)c->n_heads * hd, kd = (size_t)c->n_kv_heads * hd;
    int fuse = m->fuse;
    int prep = fuse && (L->qkv.data ? any_quant(&L->qkv, NULL, NULL) : any_quant(&L->q, &L->k, &L->v));
    unsigned ready = prep ? BE_ACT_READY : 0;

    if (!L->attn_norm) prep = 0, ready = 0;
    if (L->attn_norm) norm_block(m, L->attn_norm, T, prep);
    else OPS->copy_rows(CTX, s->xn, (size_t)c->hidden, s->x, (size_t)c->hidden, T, (size_t)c->hidden); /* no pre-norm */
    if (m->observe) observe(m, l, OBS_ATTN_IN, -1, s->xn, T, c->hidden);
    be_qkv d = {0};
    d.T = T;
    d.x = s->xn;
    if (L->qkv.data) {
        d.W[0] = d.W[1] = d.W[2] = &L->qkv;
        d.row0[1] = (int64_t)qd;
        d.row0[2] = (int64_t)(qd + kd);
        d.bias[0] = d.bias[1] = d.bias[2] = L->qkv_bias;
    } else {
        d.W[0] = &L->q, d.W[1] = &L->k, d.W[2] = &L->v;
        d.bias[0] = L->q_bias, d.bias[1] = L->k_bias, d.bias[2] = L->v_bias;
    }
    d.flags = ready;
    d.q = s->q, d.k = s->k, d.v = s->v;
    if (c->qk_norm) d.q_norm = L->q_norm, d.k_norm = L->k_norm;
    d.qk_norm_all = c->qk_norm == 2;
    d.eps = c->rms_eps;
    d.rope_cos = s->rope_cos, d.rope_sin = s->rope_sin;
    if (m->inv_freq_local && c->layer_window[l] > 0) d.rope_cos = s->rope_cos_local, d.rope_sin = s->rope_sin_local;
    d.rope_interleaved = c->rope_interleaved;
    d.n_heads = c->n_heads, d.n_kv_heads = c->n_kv_heads, d.head_dim = hd, d.rope_dim = c->rope_dim;
    d.k_cache = kv_cache_k(kv, l, 0, 0), d.v_cache = kv_cache_v(kv, l, 0, 0);
    d.kv_type = kv->dtype;
    d.block_size = kv->block_size;
    d.pos = b->pos, d.seq = b->seq, d.block_tables = b->block_tables;
    int done = 0;
    if (fuse) { /* one region: q/k/v rows, q/k norm, RoPE, K/V write */
        double fl = mm_flops(d.W[0], T) * (L->qkv.data ? 1 : 1 + (double)kd / qd * 2) + 6.0 * T * (double)(qd + kd);
        double by = (L->qkv.data ? mm_bytes(&L->qkv, T) : mm_bytes(&L->q, T) + mm_bytes(&L->k, T) + mm_bytes(&L->v, T)) +
                    8.0 * T * (double)kd;
        PROF(PROF_QKV_ROPE_KV, fl, by, done = OPS->qkv_rope_kv(CTX, &d));
    }
    if (!done) {
        if (L->qkv.data) { /* one matmul, then split rows q | k | v */
            PROF(PROF_MATMUL_QKV, mm_flops(&L->qkv, T), mm_bytes(&L->qkv, T),
                 OPS->matmul(CTX, s->xn, T, &L->qkv, L->qkv_bias, s->fused, NULL, ready));
            size_t w = qd + 2 * kd;
            OPS->copy_rows(CTX, s->q, qd, s->fused, w, T, qd);
            OPS->copy_rows(CTX, s->k, kd, s->fused + qd, w, T, kd);
            OPS->copy_rows(CTX, s->v, kd, s->fused + qd + kd, w, T, kd);
        } else {
            PROF(PROF_MATMUL_QKV, mm_flops(&L->q, T), mm_bytes(&L->q, T),
                 OPS->matmul(CTX, s->xn, T, &L->q, L->q_bias, s->q, NULL, ready));
            PROF(PROF_MATMUL_QKV, mm_flops(&L->k, T), mm_bytes(&L->k, T),
                 OPS->matmul(CTX, s->xn, T, &L->k, L->k_bias, s->k, NULL, ready));
            PROF(PROF_MATMUL_QKV, mm_flops(&L->v, T), mm_bytes(&L->v, T),
                 OPS->matmul(CTX, s->xn, T, &L->v, L->v_bias, s->v, NULL, ready));
        }
        PROF(PROF_ROPE_KV, 6.0 * T * (double)(qd + kd), 4.0 * T * (double)(qd + 3 * kd), OPS->rope_kv(CTX, &d));
    }
    if (m->attn_observe) observe_qkv(m, l, b);
    be_attn a = {T, s->q, s->att, d.k_cache, d.v_cache, kv->block_size, c->n_heads, c->n_kv_heads, hd,
                 c->layer_window[l], b->pos, b->seq, b->block_tables, kv->dtype, c->attn_scale, c->attn_softcap, 0};
    OPS->attention(CTX, &a);
    if (m->observe) observe(m, l, OBS_O_IN, -1, s->att, T, (int)qd);
    if (L->attn_post_norm) { /* x += post_norm(o(att)) */
        MATMUL(PROF_MATMUL_O, s->att, T, &L->o, L->o_bias, s->tmp);
        post_norm_residual(m, L->attn_post_norm, T);
        return;
    }
    if (fuse) { /* x += o(att), per element as the separate pass below */
        PROF(PROF_MATMUL_O_RESIDUAL, mm_flops(&L->o, T) + (double)T * c->hidden, mm_bytes(&L->o, T) + 4.0 * T * c->hidden,
             OPS->matmul(CTX, s->att, T, &L->o, L->o_bias, s->x, s->tmp, BE_ADD));
        return;
    }
    MATMUL(PROF_MATMUL_O, s->att, T, &L->o, L->o_bias, s->tmp);
    residual(m, s->tmp, T);
}

/* Multi-head latent attention (DeepSeek-V2/V3, cfg.mla_dim > 0), absorbed as
 * llama.cpp evaluates it: the cache holds per token the latent row
 * [rmsnorm(c) | rope(k_pe)] (mla_dim values, model_config.h); each head's
 * q_nope is taken into the latent space by k_b (q_nope . (K_b c) =
 * (K_b^T q_nope) . c), the attention runs over the latent rows (key and
 * value alike: be_attn.latent), and v_b takes each head's attended latent
 * back out before o_proj. Per head: a slice copied out, one matmul, copied
 * back (k_b / v_b are one small matrix per head). */
static void mla_block(model *m, kv_cache *kv, const fwd_batch *b, int l) {
    const model_config *c = &m->cfg;
    const layer_weights *L = &m->layers[l];
    model_scratch *s = &m->s;
    int T = b->n_tokens, H = c->n_heads, w = c->mla_dim, r = c->kv_lora_rank, nope = c->qk_nope_dim;
    int rope = c->qk_rope_dim, qk = nope + rope, vd = c->v_head_dim;
    size_t qw = (size_t)H * qk, fw = (size_t)H * w, ow = (size_t)H * vd;

    norm_block(m, L->attn_norm, T, 0);
    if (m->observe) observe(m, l, OBS_ATTN_IN, -1, s->xn, T, c->hidden);
    if (L->q_a.data) { /* q = q_b(norm(q_a(x))) */
        MATMUL(PROF_MATMUL_QKV, s->xn, T, &L->q_a, NULL, s->h2);
        OPS->rmsnorm(CTX, s->h2, NULL, T, L->q_a_norm, c->rms_eps, c->q_lora_rank, s->h1, 0);
        MATMUL(PROF_MATMUL_QKV, s->h1, T, &L->q, NULL, s->q);
    } else {
        MATMUL(PROF_MATMUL_QKV, s->xn, T, &L->q, NULL, s->q);
    }
    MATMUL(PROF_MATMUL_QKV, s->xn, T, &L->kv_a, NULL, s->k); /* [latent | rope key] */
    OPS->copy_rows(CTX, s->h1, (size_t)r, s->k, (size_t)w, T, (size_t)r);
    OPS->rmsnorm(CTX, s->h1, NULL, T, L->kv_a_norm, c->rms_eps, r, s->h2, 0);
    OPS->copy_rows(CTX, s->k, (size_t)w, s->h2, (size_t)r, T, (size_t)r);
    for (int h = 0; h < H; h++) { /* the full query rows: [k_b^T q_nope | q_pe] per head, in s->fused */
        OPS->copy_rows(CTX, s->h1, (size_t)nope, s->q + (size_t)h * qk, qw, T, (size_t)nope);
        MATMUL(PROF_MATMUL_QKV, s->h1, T, &L->k_b[h], NULL, s->h2);
        OPS->copy_rows(CTX, s->fused + (size_t)h * w, fw, s->h2, (size_t)r, T, (size_t)r);
        OPS->copy_rows(CTX, s->fused + (size_t)h * w + r, fw, s->q + (size_t)h * qk + nope, qw, T, (size_t)rope);
    }
    be_mla d = {T, s->fused, s->k, H, w, rope, s->rope_cos, s->rope_sin, c->rope_interleaved,
                kv_cache_k(kv, l, 0, 0), kv_cache_v(kv, l, 0, 0), kv->dtype, kv->block_size, b->pos, b->seq,
                b->block_tables};
    PROF(PROF_ROPE_KV, 6.0 * T * (double)(H + 1) * rope, 4.0 * T * (double)(fw + 2 * w), OPS->mla_rope_kv(CTX, &d));
    if (m->attn_observe) observe_mla(m, l, b);
    be_attn a = {T, s->fused, s->att, d.k_cache, d.v_cache, kv->block_size, H, 1, w, c->layer_window[l], b->pos,
                 b->seq, b->block_tables, kv->dtype, c->attn_scale, c->attn_softcap, 1};
    OPS->attention(CTX, &a);
    for (int h = 0; h < H; h++) { /* each head's attended latent through v_b, into o's input (s->v) */
        OPS->copy_rows(CTX, s->h1, (size_t)r, s->att + (size_t)h * w, fw, T, (size_t)r);
        MATMUL(PROF_MATMUL_O, s->h1, T, &L->v_b[h], NULL, s->h2);
        OPS->copy_rows(CTX, s->v + (size_t)h * vd, ow, s->h2, (size_t)vd, T, (size_t)vd);
    }
    if (m->observe) observe(m, l, OBS_O_IN, -1, s->v, T, (int)ow);
    if (m->fuse) {
        PROF(PROF_MATMUL_O_RESIDUAL, mm_flops(&L->o, T) + (double)T * c->hidden, mm_bytes(&L->o, T) + 4.0 * T * c->hidden,
             OPS->matmul(CTX, s->v, T, &L->o, NULL, s->x, s->tmp, BE_ADD));
        return;
    }
    MATMUL(PROF_MATMUL_O, s->v, T, &L->o, NULL, s->tmp);
    residual(m, s->tmp, T);
}

/* ------------------------------------------------------------------- MLP */

/* out = down(silu(gate(x)) * up(x)) for T rows of x. */
static void swiglu(model *m, int layer, int expert, const float *x, int T, const matrix *gate, const matrix *up,
                   const matrix *down, const float *gb, const float *ub, const float *db, float *out) {
    size_t I = (size_t)gate->rows;
    MATMUL(PROF_MATMUL_GATE_UP, x, T, gate, gb, m->s.h1);
    MATMUL(PROF_MATMUL_GATE_UP, x, T, up, ub, m->s.h2);
    PROF(PROF_SILU_MUL, 6.0 * T * (double)I, 12.0 * T * (double)I, act_mul(m, m->s.h1, m->s.h1, I, m->s.h2, I, T, I));
    if (m->observe) observe(m, layer, OBS_DOWN_IN, expert, m->s.h1, T, (int)I);
    MATMUL(PROF_MATMUL_DOWN, m->s.h1, T, down, db, out);
}

/* calibration's view of the experts' down-projection inputs */
typedef struct {
    model *m;
    int layer;
} moe_observe_ctx;

static void moe_observe(void *p, int expert, const float *x, int T, int cols) {
    moe_observe_ctx *o = p;
    observe(o->m, o->layer, OBS_DOWN_IN, expert, x, T, cols);
}

/* Route each token to its top-k experts, run each expert once over the tokens
 * routed to it, and sum the weighted outputs per token in expert order (the
 * backend's moe operation; so a token's result does not depend on what else
 * is in the batch); the result in s->tmp. */
static void moe_block(model *m, int l, const layer_weights *L, int T) {
    const model_config *c = &m->cfg;
    model_scratch *s = &m->s;
    moe_observe_ctx oc = {m, l};
    be_moe d = {0};
    d.T = T, d.hidden = c->hidden, d.n_experts = c->n_experts, d.n_used = c->n_experts_used;
    d.norm_topk = c->norm_topk_prob;
    d.x = s->xn, d.out = s->tmp;
    d.router = &L->router;
    d.exp_gate = L->exp_gate, d.exp_up = L->exp_up, d.exp_down = L->exp_down;
    if (c->shared_expert_intermediate > 0)
        d.sh_gate = &L->sh_gate, d.sh_up = &L->sh_up, d.sh_down = &L->sh_down,
        d.sh_router = c->shared_gated ? &L->sh_router : NULL;
    d.sigmoid = c->moe_sigmoid, d.sel_bias = L->sel_bias, d.w_scale = c->routed_scale;
    d.n_group = c->n_group, d.topk_group = c->topk_group, d.group_max = c->group_max;
    d.router_logits = s->router_logits, d.route_w = s->route_w, d.expert_w = s->expert_w, d.acc = s->moe_acc;
    d.xg = s->xg, d.yg = s->yg, d.h1 = s->h1, d.h2 = s->h2;
    d.route_ids = s->route_ids, d.expert_tokens = s->expert_tokens;
    if (m->observe) d.observe = moe_observe, d.octx = &oc;
    OPS->moe(CTX, &d);
}

static void mlp_block(model *m, int l, int T) {
    const model_config *c = &m->cfg;
    const layer_weights *L = &m->layers[l];
    model_scratch *s = &m->s;
    size_t I = (size_t)c->intermediate;
    int moe = c->layer_is_moe[l];
    /* the fused gate/up form is silu's, adding into the residual stream */
    int fuse = m->fuse && !moe && c->act == ARCH_ACT_SILU && !L->mlp_post_norm;
    int prep = fuse && L->mlp_norm &&
               (L->gate_up.data ? any_quant(&L->gate_up, NULL, NULL) : any_quant(&L->gate, &L->up, NULL));
    unsigned ready = prep ? BE_ACT_READY : 0;
    if (L->mlp_norm) norm_block(m, L->mlp_norm, T, prep);
    else OPS->copy_rows(CTX, s->xn, (size_t)c->hidden, s->x, (size_t)c->hidden, T, (size_t)c->hidden); /* no pre-norm */
    if (m->observe) observe(m, l, OBS_MLP_IN, -1, s->xn, T, c->hidden);
    if (fuse) { /* h1 = silu(gate(xn)) * up(xn) in one region, then x += down(h1) */
        const matrix *G = L->gate_up.data ? &L->gate_up : &L->gate, *U = L->gate_up.data ? &L->gate_up : &L->up;
        double fl = 2.0 * T * (double)I * c->hidden * 2 + 6.0 * T * (double)I;
        double by = (L->gate_up.data ? mm_bytes(G, T) : mm_bytes(G, T) + mm_bytes(U, T)) + 4.0 * T * (double)I;
        int done = 0;
        PROF(PROF_GATE_UP_SILU, fl, by,
             done = OPS->matmul_silu_mul(CTX, s->xn, T, G, 0, L->gate_up.data ? NULL : L->gate_bias, U,
                                         L->gate_up.data ? (int64_t)I : 0, L->gate_up.data ? NULL : L->up_bias,
                                         (int64_t)I, s->h1, s->h2, ready));
        if (done) {
            if (m->observe) observe(m, l, OBS_DOWN_IN, -1, s->h1, T, (int)I);
            PROF(PROF_MATMUL_DOWN_RESIDUAL, mm_flops(&L->down, T) + (double)T * c->hidden,
                 mm_bytes(&L->down, T) + 4.0 * T * c->hidden,
                 OPS->matmul(CTX, s->h1, T, &L->down, L->gate_up.data ? NULL : L->down_bias, s->x, s->tmp, BE_ADD));
            return;
        }
    }
    if (moe) {
        moe_block(m, l, L, T);
    } else if (L->gate_up.data) { /* one matmul for gate | up, then silu(gate) * up */
        PROF(PROF_MATMUL_GATE_UP, mm_flops(&L->gate_up, T), mm_bytes(&L->gate_up, T),
             OPS->matmul(CTX, s->xn, T, &L->gate_up, NULL, s->fused, NULL, ready));
        PROF(PROF_SILU_MUL, 6.0 * T * (double)I, 12.0 * T * (double)I,
             act_mul(m, s->h1, s->fused, 2 * I, s->fused + I, 2 * I, T, I));
        if (m->observe) observe(m, l, OBS_DOWN_IN, -1, s->h1, T, (int)I);
        MATMUL(PROF_MATMUL_DOWN, s->h1, T, &L->down, NULL, s->tmp);
    } else
        swiglu(m, l, -1, s->xn, T, &L->gate, &L->up, &L->down, L->gate_bias, L->up_bias, L->down_bias, s->tmp);
    if (L->mlp_post_norm) post_norm_residual(m, L->mlp_post_norm, T);
    else residual(m, s->tmp, T);
}

/* ---------------------------------------------------------------- driver */

/* The forward pass is three calls, so that a pipeline stage can run its part:
 * embed (first stage), layers [l0, l1) over the hidden states (each stage its
 * range, in one call or several), head (last stage). The hidden states live in
 * model_hidden(m): n_tokens rows of hidden floats. */

static xllm_status check_batch(const model *m, const fwd_batch *b, xllm_error *err) {
    int T = b->n_tokens;
    if (T <= 0 || T > m->s.max_tokens)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "forward batch of %d tokens (allowed 1..%d)", T,
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
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "this model part (layers %d..%d) has no embedding",
                           m->layer_begin, m->layer_end - 1);
    for (int t = 0; t < T; t++)
        if (b->tokens[t] < 0 || b->tokens[t] >= c->vocab)
            return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "token id %d is outside the vocabulary (0..%d)",
                               b->tokens[t], c->vocab - 1);
    PROF(PROF_EMBED, 0, (double)T * (double)quant_row_bytes(m->embed.dtype, m->embed.group, m->embed.cols),
         OPS->embed(CTX, &m->embed, b->tokens, T, s->x));
    if (c->embed_scale) /* x sqrt(hidden), the float llama.cpp and HF (f32) multiply by */
        OPS->scale(CTX, s->x, (size_t)T * (size_t)c->hidden, sqrtf((float)c->hidden));
    return XLLM_OK;
}

/* The hidden states: n_tokens rows of cfg.hidden floats in the backend's
 * memory (host memory on a unified-memory backend such as the CPU). */
float *model_hidden(model *m) { return m->s.x; }

void model_layers(model *m, kv_cache *kv, const fwd_batch *b, int l0, int l1) {
    const model_config *c = &m->cfg;
    model_scratch *s = &m->s;
    assert(l0 >= m->layer_begin && l1 <= m->layer_end && l0 <= l1);
    assert(b->n_tokens > 0 && b->n_tokens <= m->s.max_tokens);
    if (l0 == m->layer_begin) {
        OPS->rope_tables(CTX, b->pos, b->n_tokens, m->inv_freq, m->rope_theta_scale, c->rope_dim / 2, s->rope_cos,
                         s->rope_sin);
        if ((c->rope == ROPE_LONGROPE || c->rope == ROPE_YARN) && c->rope_attn_factor != 1.0) { /* LongRoPE, YaRN: cos, sin x attention factor */
            size_t n = (size_t)b->n_tokens * (size_t)(c->rope_dim / 2);
            OPS->scale(CTX, s->rope_cos, n, (float)c->rope_attn_factor);
            OPS->scale(CTX, s->rope_sin, n, (float)c->rope_attn_factor);
        }
        if (m->inv_freq_local) /* the sliding layers' own base */
            OPS->rope_tables(CTX, b->pos, b->n_tokens, m->inv_freq_local, m->rope_theta_scale_local, c->rope_dim / 2,
                             s->rope_cos_local, s->rope_sin_local);
    }
    for (int l = l0; l < l1; l++) {
        if (c->mla_dim) mla_block(m, kv, b, l);
        else attention_block(m, kv, b, l);
        mlp_block(m, l, b->n_tokens);
    }
}

void model_head(model *m, const fwd_batch *b, float *logits) {
    const model_config *c = &m->cfg;
    model_scratch *s = &m->s;
    assert(m->final_norm && m->lm_head.data);
    /* final norm + lm_head only for the rows whose logits are wanted, then read back */
    for (int i = 0; i < b->n_out; i++) assert(b->out_idx[i] >= 0 && b->out_idx[i] < b->n_tokens);
    if (b->n_out > 0) {
        if (OPS->unified_memory) { /* straight into the caller's buffer */
            OPS->rmsnorm(CTX, s->x, b->out_idx, b->n_out, m->final_norm, c->rms_eps, c->hidden, s->xn, 0);
            MATMUL(PROF_LM_HEAD, s->xn, b->n_out, &m->lm_head, NULL, logits);
        } else { /* through s->logits, head_rows rows at a time (each row computed alone: same bits) */
            for (int i0 = 0; i0 < b->n_out; i0 += s->head_rows) {
                int n = b->n_out - i0 < s->head_rows ? b->n_out - i0 : s->head_rows;
                OPS->rmsnorm(CTX, s->x, b->out_idx + i0, n, m->final_norm, c->rms_eps, c->hidden, s->xn, 0);
                MATMUL(PROF_LM_HEAD, s->xn, n, &m->lm_head, NULL, s->logits);
                OPS->copy(CTX, logits + (size_t)i0 * (size_t)c->vocab, s->logits,
                          (size_t)n * (size_t)c->vocab * sizeof(float), BE_DEVICE_TO_HOST);
            }
        }
        if (c->final_softcap > 0) { /* z -> c tanh(z / c), on the host copy (llama.cpp's steps: x 1/c, tanh, x c) */
            float cap = c->final_softcap, inv = 1.0f / cap;
            for (size_t i = 0; i < (size_t)b->n_out * (size_t)c->vocab; i++) logits[i] = cap * tanhf(logits[i] * inv);
        }
    }
}

xllm_status model_forward(model *m, kv_cache *kv, const fwd_batch *b, float *logits, xllm_error *err) {
    if (m->layer_begin != 0 || m->layer_end != m->cfg.n_layers)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                           "this model part holds layers %d..%d of %d: a whole forward pass needs them all",
                           m->layer_begin, m->layer_end - 1, m->cfg.n_layers);
    xllm_status st = model_embed(m, b, err);
    if (st) return st;
    model_layers(m, kv, b, 0, m->cfg.n_layers);
    model_head(m, b, logits);
    return XLLM_OK;
}
