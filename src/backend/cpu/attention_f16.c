/*
 * attention_f16.c - attention with llama.cpp's CPU flash-attention arithmetic
 * (xllm_model_options.arithmetic "llama"), for outputs that follow llama.cpp's
 * own to the last bits it can be followed.
 *
 * llama.cpp's CPU flash attention (its default in llama-server), for batches
 * of fewer than 64 tokens, does not compute in f32: per (token, head) it
 * rounds the query to f16, takes each key's score as an f16 x f16 dot product
 * (summed in f32 lanes as its AVX-512 loop does: 4 x 16 lanes per 64 values,
 * then a pairwise reduction; a tail in double), and keeps the running
 * weighted sum of V in f16, rescaled in f16 whenever the maximum grows:
 * one key at a time, acc = f16(acc * exp(m_old - m)), acc = f16(acc + v * w).
 * Those f16 roundings (about 5e-4 relative per step) are far larger than the
 * order of float additions, and through the int8 rounding of every matmul
 * input they move quantized models' log-probabilities by ~0.1 (issue 12's
 * fixtures, tests/unit/test_kquant_models.c). Reproducing them is the only
 * way to match llama.cpp there. Batches of 64 tokens or more take llama.cpp's
 * tiled path, which is f32 arithmetic over f16 K/V in its own order,
 * followed here too (task_tiled): per tile of 64 keys, each
 * score a sequential fma dot product of the f32 query with the key (its
 * simd_gemm), scaled; the tile's maximum; the sum rescaled by libm's expf of
 * the maximum's change; the weights from ggml's own vectorized exp
 * (llama_math.h's llama_expf) summed 16 at a time in double; and the values
 * accumulated key after key with fma.
 *
 * One task per (token, head), scalar, the same bits at every kernel level and
 * thread count. Latent (MLA) rows (be_attn.latent) are read whole as key and
 * value, and the scale multiplies the scores, as llama.cpp's MLA does. K/V rows of any kv_dtype are read as stored and rounded to f16
 * (exact for an f16 cache, which is what llama.cpp keeps).
 */
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/llama_math.h"
#include "base/dtype.h"
#include "quant/kvq.h"

#include <assert.h>
#include <math.h>
#include <string.h>

/* _mm512_reduce_add_ps's order (halves, then quarters, pairs, the last two). */
static float reduce16(const float *v) {
    float h[8], q[4];
    for (int l = 0; l < 8; l++) h[l] = v[8 + l] + v[l];
    for (int l = 0; l < 4; l++) q[l] = h[4 + l] + h[l];
    return (q[2] + q[0]) + (q[3] + q[1]);
}

/* llama.cpp's ggml_vec_dot_f16 on AVX-512 (values already f16): per block of
 * 64, lane l of accumulator j sums the products at 16j + l (exact in f32);
 * the accumulators fold (0+2, 1+3, then 0+1) and the 16 lanes reduce as
 * _mm512_reduce_add_ps does (8 + 8, 4 + 4, 2 + 2, 1 + 1); the tail past a
 * multiple of 64 adds in double. */
static float attn_f16_dot(const float *x, const float *y, int n) {
    float acc[4][16] = {{0}};
    int np = n & ~63;
    for (int i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++) acc[j][l] = fmaf(x[i + 16 * j + l], y[i + 16 * j + l], acc[j][l]);
    double sum = 0.0;
    if (np) {
        float v[16];
        for (int l = 0; l < 16; l++) v[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
        sum = (double)reduce16(v);
    }
    for (int i = np; i < n; i++) sum += (double)(x[i] * y[i]);
    return (float)sum;
}

/* Head kvh's row at position pos, rounded to f16 into out[hd]. */
static void load_row_f16(const be_attn *d, const void *base, const int32_t *table, int pos, int kvh, float *out) {
    if (d->latent) /* MLA: key and value are the whole latent row (llama.cpp's V is a view of K) */
        attn_latent_row(d, table, pos, out);
    else
        kvq_load_row(d->kv_type, attn_kv_row(d, base, table, pos, kvh), d->head_dim, out);
    if (d->kv_type != KV_F16)
        for (int i = 0; i < d->head_dim; i++) out[i] = f16_round(out[i]);
}

/* One (token, head) task: its query and output, keys first..pos of KV head kvh. */
typedef struct {
    const float *q;
    float *out;
    const int32_t *table;
    int kvh, first, pos;
} attn_task;

/* Under ATTN_LLAMA_TILE tokens (its one_chunk loop): acc = the f16 sum of
 * the values, weighted; returns the weights' sum. w: 2 x hd floats. */
static float task_f16(const be_attn *d, const attn_task *k, float scale, float *w, float *acc) {
    int hd = d->head_dim;
    float *q = w, *row = w + hd, M = -INFINITY, S = 0.0f;
    for (int i = 0; i < hd; i++) q[i] = f16_round(k->q[i]);
    for (int j = k->first; j <= k->pos; j++) {
        load_row_f16(d, d->k_cache, k->table, j, k->kvh, row);
        float s = attn_f16_dot(row, q, hd) * scale, ms = 1.0f, vs = 1.0f;
        if (d->softcap > 0) s = d->softcap * tanhf(s);
        if (s > M) { /* a new maximum: the sum so far rescaled (in f16), this key's weight 1 */
            float Mold = M;
            M = s;
            ms = expf(Mold - M);
            for (int i = 0; i < hd; i++) acc[i] = f16_round(acc[i] * ms);
        } else {
            vs = expf(s - M);
        }
        load_row_f16(d, d->v_cache, k->table, j, k->kvh, row);
        for (int i = 0; i < hd; i++) acc[i] = f16_round(fmaf(row[i], vs, acc[i]));
        S = fmaf(S, ms, vs); /* llama.cpp's S = S*ms + vs, which its compiler fuses */
    }
    return S;
}

#define LLAMA_KV_TILE 64 /* llama.cpp's GGML_FA_TILE_KV */

/* From ATTN_LLAMA_TILE tokens (its tiled path), the same contract; w: hd +
 * LLAMA_KV_TILE floats. A tile's keys that the token does not see weigh 0
 * (their fma leaves acc as it is), and tiles it sees none of change nothing. */
static float task_tiled(const be_attn *d, const attn_task *k, float scale, float *w, float *acc) {
    int hd = d->head_dim, first = k->first, pos = k->pos;
    float *row = w, *p = w + hd, M = -INFINITY, S = 0.0f;
    for (int c0 = first - first % LLAMA_KV_TILE; c0 <= pos; c0 += LLAMA_KV_TILE) {
        float mx = -INFINITY;
        for (int i = 0; i < LLAMA_KV_TILE; i++) {
            int j = c0 + i;
            p[i] = -INFINITY; /* masked, or past the cache */
            if (j < first || j > pos) continue;
            load_row_f16(d, d->k_cache, k->table, j, k->kvh, row);
            float s = 0.0f;
            for (int e = 0; e < hd; e++) s = fmaf(row[e], k->q[e], s);
            p[i] = s * scale;
            if (d->softcap > 0) p[i] = d->softcap * tanhf(p[i]);
            mx = p[i] > mx ? p[i] : mx;
        }
        float Mnew = fmaxf(M, mx);
        if (Mnew > M) {
            float ms = expf(M - Mnew);
            for (int e = 0; e < hd; e++) acc[e] *= ms;
            S *= ms;
        }
        M = Mnew;
        double sum = 0.0;
        for (int i = 0; i < LLAMA_KV_TILE; i++) p[i] = llama_expf(p[i] - M);
        for (int g = 0; g < LLAMA_KV_TILE; g += 16) sum += (double)reduce16(p + g);
        S = (float)((double)S + sum);
        for (int i = 0; i < LLAMA_KV_TILE; i++) {
            int j = c0 + i;
            if (j < first || j > pos) continue;
            load_row_f16(d, d->v_cache, k->table, j, k->kvh, row);
            for (int e = 0; e < hd; e++) acc[e] = fmaf(row[e], p[i], acc[e]);
        }
    }
    return S;
}

void cpu_attention_llama_items(cpu_backend *be, const be_attn *d, size_t i0, size_t i1, int thread) {
    int hd = d->head_dim, nh = d->n_heads;
    float scale = attn_kernel_scale(d), *acc = be->scratch[thread], *w = acc + hd;
    /* A model with its own attention scale (be_attn.scale: Gemma, as
     * llama.cpp builds them) has q multiplied by it in f32 before the
     * attention's f16 rounding, which then scales by 1 (or 1 / softcap). */
    float qbuf[512], qscale = d->scale > 0 && hd <= 512 && !d->latent ? d->scale : 0.0f; /* (MLA: kq_scale) */
    if (qscale > 0) scale = d->softcap > 0 ? 1.0f / d->softcap : 1.0f;
    assert((size_t)(2 * hd + (hd > LLAMA_KV_TILE ? hd : LLAMA_KV_TILE)) <= be->scratch_floats);
    for (size_t it = i0; it < i1; it++) {
        int t = (int)(it / (size_t)nh), h = (int)(it % (size_t)nh);
        size_t off = ((size_t)t * nh + h) * (size_t)hd;
        attn_task k = {d->q + off, d->out + off, d->block_tables[d->seq[t]], h / (nh / d->n_kv_heads),
                       attn_first_key(d, t), d->pos[t]};
        if (qscale > 0) {
            for (int i = 0; i < hd; i++) qbuf[i] = d->q[off + (size_t)i] * qscale;
            k.q = qbuf;
        }
        memset(acc, 0, sizeof(float) * (size_t)hd);
        float S = d->T < ATTN_LLAMA_TILE ? task_f16(d, &k, scale, w, acc) : task_tiled(d, &k, scale, w, acc);
        float inv = S == 0.0f ? 0.0f : 1.0f / S; /* as llama.cpp scales its sum */
        for (int i = 0; i < hd; i++) k.out[i] = acc[i] * inv;
    }
}
