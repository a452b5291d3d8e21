/*
 * cpu_backend.c - the CPU backend as a backend_ops table (backend.h).
 *
 * Device memory is host memory (unified_memory): alloc is an aligned
 * allocation and copy a memcpy. The operations are cpu_ops.c's threaded
 * kernels plus the per-batch steps the model layer used to run itself: the
 * embedding lookup, RoPE tables, q/k norm + RoPE + the K/V cache write
 * (fused with the q/k/v matmuls in one region over heads, or after them),
 * paged attention (attention.c), MoE routing and expert dispatch, the
 * residual add, SiLU * up. Every output element keeps the arithmetic it had
 * before the boundary was drawn, so results are bit for bit those of the
 * unfused sequence (tests/unit/test_fused.c) whatever the thread split.
 */
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/llama_math.h"
#include "backend/cpu/kernels.h"
#include "backend/moe_route.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/profile.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

cpu_backend *cpu_backend_of(const backend *be) {
    return be && be->ops == &cpu_backend_ops ? (cpu_backend *)be->ctx : NULL;
}

/* --------------------------------------------------------------- memory */

static void cb_destroy(void *ctx) {
    cpu_backend *cb = ctx;
    xllm_free(cb->plan_cache);
    backend_free(cb);
    xllm_free(cb);
}

static const char *cb_describe(const void *ctx) { return ((const cpu_backend *)ctx)->describe; }

static void *cb_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    return mem_malloc_aligned(bytes ? bytes : 1);
}

static void cb_free(void *ctx, void *p) {
    (void)ctx;
    mem_free_aligned(p);
}

static void cb_copy(void *ctx, void *dst, const void *src, size_t bytes, be_copy_kind kind) {
    (void)ctx, (void)kind;
    if (dst != src && bytes) memcpy(dst, src, bytes);
}

static xllm_status cb_upload_matrix(void *ctx, matrix *W, void **storage, xllm_error *err) {
    return backend_pack_matrix(ctx, W, storage, err);
}

static xllm_status cb_plan(void *ctx, matrix *const *ws, size_t n, int max_tokens, int budget_ms,
                           struct cJSON **report, xllm_error *err) {
    return cpu_planner_run(ctx, ws, n, max_tokens, budget_ms, report, err);
}

/* ------------------------------------------------------ simple operations */

static void cb_embed(void *ctx, const matrix *E, const int32_t *tokens, int T, float *x) {
    (void)ctx;
    for (int t = 0; t < T; t++) op_matrix_row(E, tokens[t], x + (size_t)t * (size_t)E->cols);
}

static void cb_rope_tables(void *ctx, const int32_t *pos, int T, const double *inv_freq, float theta_scale, int half,
                           float *cs, float *sn) {
    (void)ctx;
    for (int t = 0; t < T; t++) {
        float *c = cs + (size_t)t * half, *s = sn + (size_t)t * half;
        if (theta_scale > 0) { /* llama.cpp's angles: multiplied by theta_scale pair after pair, in float */
            float theta = (float)pos[t];
            for (int i = 0; i < half; i++, theta *= theta_scale) c[i] = cosf(theta), s[i] = sinf(theta);
        } else {
            for (int i = 0; i < half; i++) {
                double a = (double)pos[t] * inv_freq[i];
                c[i] = (float)cos(a);
                s[i] = (float)sin(a);
            }
        }
    }
}

static void cb_rmsnorm(void *ctx, const float *x, const int32_t *rows, int T, const float *w, float eps, int n,
                       float *out, unsigned flags) {
    if (rows) { /* a few gathered rows (the final norm): on this thread */
        for (int i = 0; i < T; i++)
            op_rmsnorm(x + (size_t)rows[i] * n, w, eps, n, 1, out + (size_t)i * n, ((cpu_backend *)ctx)->arith_llama);
        return;
    }
    op_rmsnorm_act(ctx, x, w, eps, n, T, out, (flags & BE_PREPARE) != 0);
}

static void cb_matmul(void *ctx, const float *x, int T, const matrix *W, const float *bias, float *y, float *tmp,
                      unsigned flags) {
    op_matmul_ex(ctx, x, T, W, bias, y, tmp, flags & (BE_ACT_READY | BE_ADD));
}

static int cb_matmul_silu_mul(void *ctx, const float *x, int T, const matrix *G, int64_t g0, const float *gb,
                              const matrix *U, int64_t u0, const float *ub, int64_t I, float *h, float *tmp,
                              unsigned flags) {
    if (g0 % 4 || u0 % 4) return 0; /* the up rows must start on a 4-row tile */
    op_matmul_silu_mul(ctx, x, T, G, g0, gb, U, u0, ub, I, h, tmp, flags & BE_ACT_READY);
    return 1;
}

static void cb_silu_mul(void *ctx, float *h, const float *g, size_t ldg, const float *u, size_t ldu, int T,
                        size_t n) {
    const cpu_backend *be = ctx;
    if (h == g && ldg == n && ldu == n) { /* contiguous, in place: one pass */
        op_silu_mul(h, u, (size_t)T * n, be->arith_llama);
        return;
    }
    for (int t = 0; t < T; t++) {
        float *hr = h + (size_t)t * n;
        const float *gr = g + (size_t)t * ldg;
        if (hr != gr) memcpy(hr, gr, n * sizeof(float));
        op_silu_mul(hr, u + (size_t)t * ldu, n, be->arith_llama);
    }
}

static void cb_gelu_mul(void *ctx, float *h, const float *g, size_t ldg, const float *u, size_t ldu, int T,
                        size_t n) {
    const cpu_backend *be = ctx;
    for (int t = 0; t < T; t++) {
        float *hr = h + (size_t)t * n;
        const float *gr = g + (size_t)t * ldg;
        if (hr != gr) memmove(hr, gr, n * sizeof(float));
        op_gelu_mul(hr, u + (size_t)t * ldu, n, be->arith_llama);
    }
}

static void cb_scale(void *ctx, float *x, size_t n, float s) {
    (void)ctx;
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

static void cb_add(void *ctx, float *x, const float *y, size_t n) {
    (void)ctx;
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

static void cb_copy_rows(void *ctx, float *dst, size_t ldd, const float *src, size_t lds, int T, size_t n) {
    (void)ctx;
    for (int t = 0; t < T; t++) memcpy(dst + (size_t)t * ldd, src + (size_t)t * lds, n * sizeof(float));
}

/* ---------------------------------------------------- q/k/v, RoPE, KV write */

/* HF's rotate-half convention pairs (i, i + half); GGUF llama files store Q/K
 * rows permuted so that the pairs are interleaved (2i, 2i + 1). Same rotation,
 * different pairing; frequency i either way. Heads are hd values apart and
 * the first rd of each rotate (half = rd / 2; partial rotary when rd < hd, the
 * rest untouched). llama: as llama.cpp's x86 build computes it (its compiler
 * fuses one product of each into an fma). */
static void rope_apply(float *v, int n_heads, int hd, int rd, const float *cs, const float *sn, int interleaved,
                       int llama) {
    int half = rd / 2, stride = interleaved ? 2 : 1, off = interleaved ? 1 : half;
    for (int h = 0; h < n_heads; h++) {
        float *x = v + (size_t)h * hd;
        for (int i = 0; i < half; i++) {
            float *p0 = x + i * stride, *p1 = p0 + off;
            float a = *p0, c = *p1;
            if (llama) { /* x0 c - x1 s and x0 s + x1 c, the x0 products fused */
                float ps = c * sn[i], pc = c * cs[i];
                *p0 = fmaf(a, cs[i], -ps);
                *p1 = fmaf(a, sn[i], pc);
                continue;
            }
            *p0 = a * cs[i] - c * sn[i];
            *p1 = c * cs[i] + a * sn[i];
        }
    }
}

/* The K or V slot of position pos through a block table (kv_cache.h's
 * layout: n_kv_heads rows of kvq_row_bytes each). */
static inline unsigned char *kv_slot(const be_qkv *d, void *base, const int32_t *table, int pos) {
    return (unsigned char *)base + ((size_t)table[pos / d->block_size] * (size_t)d->block_size +
                                    (size_t)(pos % d->block_size)) *
                                       (size_t)d->n_kv_heads * kvq_row_bytes(d->kv_type, d->head_dim);
}

/* Heads [h0, h1) of one token's K or V (x: head h0's row) into its slot, in the pool's storage. */
static void kv_store_heads(const be_qkv *d, unsigned char *slot, int h0, int h1, const float *x) {
    size_t rb = kvq_row_bytes(d->kv_type, d->head_dim);
    if (d->kv_type == KV_F32) {
        memcpy(slot + (size_t)h0 * rb, x, (size_t)(h1 - h0) * rb);
        return;
    }
    for (int h = h0; h < h1; h++)
        kvq_store_row(d->kv_type, x + (size_t)(h - h0) * (size_t)d->head_dim, d->head_dim, slot + (size_t)h * rb);
}

/* Fused q/k/v: one parallel region over head blocks of head_dim rows (q
 * heads, then k heads, then v heads); each task computes its block for all
 * tokens, then (q, k) the per-head q/k RMSNorm and RoPE, and (k, v) writes the
 * head into each token's cache slot. Per element, the arithmetic of the
 * unfused path. */
typedef struct {
    cpu_backend *be;
    const be_qkv *d;
} qkv_job;

static void qkv_heads(void *p, size_t u0, size_t u1, int thread) {
    qkv_job *j = p;
    const be_qkv *d = j->d;
    int T = d->T, hd = d->head_dim, rd = d->rope_dim ? d->rope_dim : hd, half = rd / 2, nh = d->n_heads,
        nkv = d->n_kv_heads;
    size_t qd = (size_t)nh * hd, kd = (size_t)nkv * hd;
    int tb = op_fuse_tokens(j->be, d->W[0], T);
    for (int t0 = 0; t0 < T; t0 += tb) {
        int nt = T - t0 < tb ? T - t0 : tb;
        /* consecutive heads of one part in one kernel call, up to ~64 KiB of outputs */
        size_t per_call = (size_t)(16384 / nt / hd);
        if (per_call < 1) per_call = 1;
        for (size_t u = u0; u < u1;) {
            int part = u < (size_t)nh ? 0 : u < (size_t)(nh + nkv) ? 1 : 2;
            size_t first = part == 0 ? 0 : part == 1 ? (size_t)nh : (size_t)(nh + nkv);
            size_t end = part == 0 ? (size_t)nh : part == 1 ? (size_t)(nh + nkv) : (size_t)(nh + 2 * nkv);
            if (end > u1) end = u1;
            if (end > u + per_call) end = u + per_call;
            int h0 = (int)(u - first), h1 = (int)(end - first);
            size_t ld = part == 0 ? qd : kd;
            float *out = (part == 0 ? d->q : part == 1 ? d->k : d->v) + (size_t)h0 * hd + (size_t)t0 * ld;
            int64_t r0 = d->row0[part] + (int64_t)h0 * hd;
            op_matmul_rows(j->be, d->x, t0, nt, d->W[part], d->bias[part], r0, r0 + (int64_t)(h1 - h0) * hd, out, ld,
                           thread);
            for (int t = t0; t < t0 + nt; t++) {
                float *v = out + (size_t)(t - t0) * ld;
                if (part < 2) {
                    if (d->q_norm)
                        op_rmsnorm(v, part == 0 ? d->q_norm : d->k_norm, d->eps, hd, h1 - h0, v, j->be->arith_llama);
                    rope_apply(v, h1 - h0, hd, rd, d->rope_cos + (size_t)t * half, d->rope_sin + (size_t)t * half,
                               d->rope_interleaved, j->be->arith_llama);
                }
                if (part > 0) {
                    const int32_t *table = d->block_tables[d->seq[t]];
                    kv_store_heads(d, kv_slot(d, part == 1 ? d->k_cache : d->v_cache, table, d->pos[t]), h0, h1, v);
                }
            }
            u = end;
        }
    }
}

static int cb_qkv_rope_kv(void *ctx, const be_qkv *d) {
    cpu_backend *be = ctx;
    if (d->head_dim % 4 || d->qk_norm_all) return 0; /* head blocks start on 4-row tiles; a whole-q norm spans them */
    qkv_job j = {be, d};
    op_act_prepare(be, d->x, d->T, d->W, 3, d->flags & BE_ACT_READY);
    size_t units = (size_t)(d->n_heads + 2 * d->n_kv_heads);
    op_run(be, units, op_units_per_thread(be, d->W[0], d->T, units, (size_t)d->head_dim), qkv_heads, &j);
    return 1;
}

static void cb_rope_kv(void *ctx, const be_qkv *d) {
    cpu_backend *be = ctx;
    int hd = d->head_dim, rd = d->rope_dim ? d->rope_dim : hd, half = rd / 2;
    size_t qd = (size_t)d->n_heads * hd, kd = (size_t)d->n_kv_heads * hd;
    for (int t = 0; t < d->T; t++) {
        float *q = d->q + (size_t)t * qd, *k = d->k + (size_t)t * kd;
        if (d->q_norm && d->qk_norm_all) { /* one norm over the token's whole q, and k */
            op_rmsnorm(q, d->q_norm, d->eps, (int)qd, 1, q, be->arith_llama);
            op_rmsnorm(k, d->k_norm, d->eps, (int)kd, 1, k, be->arith_llama);
        } else if (d->q_norm) {
            op_rmsnorm(q, d->q_norm, d->eps, hd, d->n_heads, q, be->arith_llama);
            op_rmsnorm(k, d->k_norm, d->eps, hd, d->n_kv_heads, k, be->arith_llama);
        }
        const float *cs = d->rope_cos + (size_t)t * half, *sn = d->rope_sin + (size_t)t * half;
        rope_apply(q, d->n_heads, hd, rd, cs, sn, d->rope_interleaved, be->arith_llama);
        rope_apply(k, d->n_kv_heads, hd, rd, cs, sn, d->rope_interleaved, be->arith_llama);
        /* write this token's K/V into its slot */
        const int32_t *table = d->block_tables[d->seq[t]];
        kv_store_heads(d, kv_slot(d, d->k_cache, table, d->pos[t]), 0, d->n_kv_heads, k);
        kv_store_heads(d, kv_slot(d, d->v_cache, table, d->pos[t]), 0, d->n_kv_heads, d->v + (size_t)t * kd);
    }
}

static void cb_attention(void *ctx, const be_attn *d) { cpu_attention_run(ctx, d); }

/* MLA (be_mla): RoPE on each query head's and the latent row's last rope_dim
 * values, then the latent row's halves into the K and V pools' slots. */
static void cb_mla_rope_kv(void *ctx, const be_mla *d) {
    cpu_backend *be = ctx;
    int half = d->rope_dim / 2, hr = d->row / 2, off = d->row - d->rope_dim;
    size_t rb = kvq_row_bytes(d->kv_type, hr);
    for (int t = 0; t < d->T; t++) {
        const float *cs = d->rope_cos + (size_t)t * half, *sn = d->rope_sin + (size_t)t * half;
        for (int h = 0; h < d->n_heads; h++)
            rope_apply(d->q + ((size_t)t * d->n_heads + h) * d->row + off, 1, d->rope_dim, d->rope_dim, cs, sn,
                       d->rope_interleaved, be->arith_llama);
        float *kv = d->kv + (size_t)t * d->row;
        rope_apply(kv + off, 1, d->rope_dim, d->rope_dim, cs, sn, d->rope_interleaved, be->arith_llama);
        const int32_t *table = d->block_tables[d->seq[t]];
        int pos = d->pos[t];
        size_t slot = ((size_t)table[pos / d->block_size] * (size_t)d->block_size + (size_t)(pos % d->block_size)) * rb;
        kvq_store_row(d->kv_type, kv, hr, (unsigned char *)d->k_cache + slot);
        kvq_store_row(d->kv_type, kv + hr, hr, (unsigned char *)d->v_cache + slot);
    }
}

/* ------------------------------------------------------------------- MoE */

#define MATMUL(op, x, T, W, bias, y) PROF(op, mm_flops(W, T), mm_bytes(W, T), op_matmul(be, x, T, W, bias, y))

/* out = down(silu(gate(x)) * up(x)) for T rows of x. */
static void moe_swiglu(cpu_backend *be, const be_moe *d, int expert, const float *x, int T, const matrix *gate,
                       const matrix *up, const matrix *down, float *out) {
    MATMUL(PROF_MATMUL_GATE_UP, x, T, gate, NULL, d->h1);
    MATMUL(PROF_MATMUL_GATE_UP, x, T, up, NULL, d->h2);
    PROF(PROF_SILU_MUL, 6.0 * T * (double)gate->rows, 12.0 * T * (double)gate->rows,
         op_silu_mul(d->h1, d->h2, (size_t)T * (size_t)gate->rows, be->arith_llama));
    if (d->observe) d->observe(d->octx, expert, d->h1, T, (int)gate->rows);
    MATMUL(PROF_MATMUL_DOWN, d->h1, T, down, NULL, out);
}

/* llama.cpp's softmax (ggml_vec_soft_max_f32 on AVX-512, then a scale by
 * the inverse sum): 16 at a time its own exp, each group's sum reduced as
 * _mm512_reduce_add_ps, the rest libm's expf, all summed in double. A router
 * near-tie decides an expert, so arithmetic "llama" follows it exactly. */
static void router_softmax_llama(float *x, int n, float mx) {
    double sum = 0.0;
    int i = 0;
    for (; i + 15 < n; i += 16) {
        float v[16], h[8], q[4];
        for (int l = 0; l < 16; l++) x[i + l] = v[l] = llama_expf(x[i + l] - mx);
        for (int l = 0; l < 8; l++) h[l] = v[8 + l] + v[l];
        for (int l = 0; l < 4; l++) q[l] = h[4 + l] + h[l];
        sum += (double)((q[2] + q[0]) + (q[3] + q[1]));
    }
    for (; i < n; i++) sum += (double)(x[i] = expf(x[i] - mx));
    float inv = (float)(1.0 / sum);
    for (i = 0; i < n; i++) x[i] *= inv;
}

/* Route each token to its top-k experts, run each expert once over the tokens
 * routed to it, and sum the weighted outputs per token in expert order (so a
 * token's result does not depend on what else is in the batch). */
static void cb_moe(void *ctx, const be_moe *d) {
    cpu_backend *be = ctx;
    int T = d->T, E = d->n_experts, K = d->n_used, H = d->hidden;
    MATMUL(PROF_MOE_ROUTER, d->x, T, d->router, NULL, d->router_logits);
    int deepseek = d->sigmoid || d->sel_bias || d->n_group > 1 || d->w_scale > 0;
    for (int t = 0; t < T; t++) {
        float *rl = d->router_logits + (size_t)t * E;
        float mx = -INFINITY, sum = 0;
        for (int e = 0; e < E; e++) mx = rl[e] > mx ? rl[e] : mx;
        if (d->sigmoid) { /* ggml's sigmoid: 1 / (1 + expf(-x)) */
            for (int e = 0; e < E; e++) rl[e] = 1.0f / (1.0f + expf(-rl[e]));
        } else if (be->arith_llama) {
            router_softmax_llama(rl, E, mx);
        } else {
            for (int e = 0; e < E; e++) sum += (rl[e] = expf(rl[e] - mx));
            for (int e = 0; e < E; e++) rl[e] /= sum;
        }
        int32_t *ids = d->route_ids + (size_t)t * K;
        float *w = d->route_w + (size_t)t * K, wsum = 0;
        if (deepseek) {
            moe_route_deepseek(d, d->sel_bias, rl, ids, w, be->arith_llama);
            continue;
        }
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
        if (d->norm_topk)
            for (int k = 0; k < K; k++) w[k] /= wsum;
    }
    memset(d->acc, 0, sizeof(float) * (size_t)T * H);
    /* arithmetic "llama" sums a token's experts in its choice order (ggml's adds of the top-k views): one
     * pass per rank; ours in expert order, one pass (each expert's weights read once) */
    int ranks = be->arith_llama && K > 2 ? K : 1;
    for (int rank = 0; rank < ranks; rank++)
    for (int e = 0; e < E; e++) {
        int n = 0;
        for (int t = 0; t < T; t++)
            for (int k = ranks > 1 ? rank : 0; k < (ranks > 1 ? rank + 1 : K); k++)
                if (d->route_ids[(size_t)t * K + k] == e) {
                    d->expert_tokens[n] = t;
                    d->expert_w[n] = d->route_w[(size_t)t * K + k];
                    memcpy(d->xg + (size_t)n * H, d->x + (size_t)t * H, sizeof(float) * H);
                    n++;
                }
        if (!n) continue;
        be->llama_vec_dot = be->arith_llama; /* (mul_mat_id's order) */
        moe_swiglu(be, d, e, d->xg, n, &d->exp_gate[e], &d->exp_up[e], &d->exp_down[e], d->yg);
        be->llama_vec_dot = 0;
        for (int i = 0; i < n; i++) {
            float *acc = d->acc + (size_t)d->expert_tokens[i] * H;
            const float *y = d->yg + (size_t)i * H;
            for (int c = 0; c < H; c++) acc[c] += d->expert_w[i] * y[c];
        }
    }
    if (d->sh_gate && d->sh_gate->data) {
        moe_swiglu(be, d, -2, d->x, T, d->sh_gate, d->sh_up, d->sh_down, d->out); /* -2: shared expert */
        int gated = d->sh_router && d->sh_router->data;
        if (gated) op_matmul(be, d->x, T, d->sh_router, NULL, d->router_logits);
        for (int t = 0; t < T; t++) {
            float g = gated ? 1.0f / (1.0f + expf(-d->router_logits[t])) : 1.0f;
            for (int c = 0; c < H; c++) d->acc[(size_t)t * H + c] += g * d->out[(size_t)t * H + c];
        }
    }
    memcpy(d->out, d->acc, sizeof(float) * (size_t)T * H);
}

/* ----------------------------------------------------------------- table */

const backend_ops cpu_backend_ops = {
    .name = "cpu",
    .unified_memory = 1,
    .destroy = cb_destroy,
    .describe = cb_describe,
    .alloc = cb_alloc,
    .free = cb_free,
    .copy = cb_copy,
    .upload_matrix = cb_upload_matrix,
    .plan = cb_plan,
    .embed = cb_embed,
    .rope_tables = cb_rope_tables,
    .rmsnorm = cb_rmsnorm,
    .matmul = cb_matmul,
    .matmul_silu_mul = cb_matmul_silu_mul,
    .silu_mul = cb_silu_mul,
    .add = cb_add,
    .copy_rows = cb_copy_rows,
    .qkv_rope_kv = cb_qkv_rope_kv,
    .rope_kv = cb_rope_kv,
    .attention = cb_attention,
    .moe = cb_moe,
    .gelu_mul = cb_gelu_mul,
    .scale = cb_scale,
    .mla_rope_kv = cb_mla_rope_kv,
};

xllm_status cpu_backend_create(backend *out, const backend_options *o, xllm_error *err) {
    int force = 0;
    if (o->attention && *o->attention) {
        force = !strcmp(o->attention, "per-item") ? 1 : !strcmp(o->attention, "split") ? 2
                : !strcmp(o->attention, "shared")  ? 3 : -1;
        if (force < 0)
            return err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                               "attention strategy '%s' is unknown (known: per-item, split, shared)", o->attention);
    }
    cpu_level level;
    xllm_status st = cpu_level_from_env(o->cpu_level, &level, err);
    if (st) return st;
    cpu_backend *cb = mem_calloc(1, sizeof *cb);
    if (!cb) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    /* per-thread scratch also holds an attention item's partials and a chunk's scores */
    /* (and attention_f16.c's query, row and sum: 3 x head_dim) */
    size_t max_cols = o->max_cols, hd = (size_t)(o->head_dim > 0 ? o->head_dim : 0);
    size_t attn_cols = 2 * (hd + 2) + ATTN_CHUNK;
    if (3 * hd > attn_cols) attn_cols = 3 * hd;
    if (attn_cols > max_cols) max_cols = attn_cols;
    if ((st = backend_init_kernels(cb, o->n_threads, max_cols, o->max_tokens, cpu_kernels_for(level), err))) {
        xllm_free(cb);
        return st;
    }
    cb->no_repack = o->no_repack != 0;
    if (o->plan_cache && *o->plan_cache && !(cb->plan_cache = mem_strdup(o->plan_cache))) {
        cb_destroy(cb);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    cb->attn_force = force;
    cb->arith_llama = o->arith_llama != 0;
    cb->n_heads = o->n_heads;
    cb->n_kv_heads = o->n_kv_heads;
    cb->head_dim = o->head_dim;
    snprintf(cb->describe, sizeof cb->describe, "cpu %s", backend_level_name(cb));
    if ((st = cpu_attention_init(cb, o->max_positions, err))) {
        cb_destroy(cb);
        return st;
    }
    out->ops = &cpu_backend_ops;
    out->ctx = cb;
    return XLLM_OK;
}
