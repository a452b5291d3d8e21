/*
 * kquant_llama.c - llama.cpp's own float steps for the matmuls where no
 * kernel level of ours takes them (arithmetic "llama", issue 12).
 *
 * Every quantized matmul sums exact int32 products; what differs between
 * engines is how those integers become floats: per block or per lane, with
 * fma or mul + add, in what order. Each int8 activation is rounded, so a
 * last-bit difference upstream moves some activation to its neighbouring
 * level and the models' outputs drift apart by up to ~0.1 in log-probability
 * (tests/unit/test_kquant_models.c). With arithmetic "llama" the engine takes
 * llama.cpp's float steps; this file holds them for the types where the
 * levels' kernels take others. Each form was read from llama.cpp v0.5.0's x86
 * code (ggml-cpu: arch/x86/quants.c's vec_dot, llamafile/sgemm.cpp's
 * tinyBLAS, arch/x86/repack.cpp's repacked GEMV/GEMM, iqp.cpp's IQ panel
 * GEMM) and checked against that build, one row at a time and on the
 * fixtures' whole models:
 *
 *  - 32-element blocks, Q8_0 (xLLM's Q8 at group 32, on Q8_0 activations),
 *    Q5_0, Q5_1 (vec_dot and tinyBLAS alike): 8 int32 lanes per block.
 *  - Q3_K, Q5_K, Q6_K (vec_dot): 8 int32 lanes per super-block.
 *  - Q2_K, Q4_K (repacked 8 rows at a time where the CPU has AVX-512 /
 *    AVX2): exact sums per 64 or 128 elements in the GEMM, per super-block
 *    in the GEMV.
 *  - IQ4_XS: the IQ panel GEMM's exact super-block sums from 8 tokens on,
 *    vec_dot's lanes below.
 * (Q4_0 is xLLM's own Q4 kernel, whose avx512 form is llama.cpp's repacked
 * one; Q4_1 and IQ4_NL still take the levels' kernels.)
 *
 * llama.cpp picks its kernel by batch size and, for the repacked types, by a
 * token's place in the batch (four at a time through the GEMM, the rest
 * through the GEMV), so here they pick too: in this mode a row's result
 * depends on the batch, as it does in llama.cpp.
 * Portable C (fmaf is exact wherever it runs; compiled with
 * -ffp-contract=off so no other product is fused), the same bits at every
 * level. Thread-safe: writes only the rows of y it is given.
 */
#include "quant/kquant.h"
#include "quant/quant.h"

#include <math.h>
#include <string.h>

#define IQP_MIN_BATCH 8 /* llama.cpp's GGML_IQP_MIN_BATCH */

/* fmaf is one instruction where the CPU has FMA and a libm call where not
 * (the same result either way): on x86 the matmul is compiled twice, for
 * AVX2 + FMA and for the baseline, and picked by the CPU (its helpers inline
 * into each). */
#define KQL_INLINE static inline __attribute__((always_inline))

/* ggml's hsum_float_8: halves added, then pairs, then the last two. */
KQL_INLINE float hsum8(const float a[8]) {
    float s0 = a[0] + a[4], s1 = a[1] + a[5], s2 = a[2] + a[6], s3 = a[3] + a[7];
    return (s0 + s2) + (s1 + s3);
}

#define KQL_TB 8 /* tokens per pass over a row: its blocks decoded once, their float chains interleaved */

/* One token's running sums. */
typedef struct {
    float lane[8], acc, accm, summs;
} sums;

/* 32-element blocks. Lanes (vec_dot and tinyBLAS alike): 8 int32 lanes per
 * block, lane k the sum of elements 4k .. 4k + 3; lane[k] = fma(d_w * d_a,
 * float(lane k), lane[k]); hsum8; Q4_1 / Q5_1 add their m_w * s_a terms,
 * summed in block order apart, at the end. Q4_0 and IQ4_NL (repacked 8 rows
 * at a time, their GEMV and GEMM alike): the block's exact sum S, acc =
 * fma(float(S), d_w * d_a, acc). Tokens [0, nt) of act, each its own sums. */
KQL_INLINE void dot_32(dtype_t t, const uint8_t *row, const int8_t *act, size_t stride, int nt, int64_t cols,
                       float *out) {
    size_t bb = quant_block_bytes(t, 32);
    int panel = t == XLLM_DT_IQ4_NL || t == XLLM_DT_Q4, mins = t == XLLM_DT_Q5_1 || t == XLLM_DT_Q4M;
    int64_t nb = cols / 32;
    int8_t codes[32];
    int16_t sc[1], mn[1];
    sums st[KQL_TB];
    memset(st, 0, sizeof st);
    for (int64_t b = 0; b < nb; b++) {
        float d, m;
        kq_unpack_block(t, row + (size_t)b * bb, codes, sc, mn, &d, &m);
        for (int tk = 0; tk < nt; tk++) {
            const int8_t *a = act + (size_t)tk * stride + b * 32;
            const float *da = (const float *)(act + (size_t)tk * stride + cols);
            float D = d * da[b];
            sums *u = &st[tk];
            if (panel) {
                int32_t S = 0;
                for (int j = 0; j < 32; j++) S += codes[j] * a[j];
                u->acc = fmaf((float)S, D, u->acc);
                continue;
            }
            for (int k = 0; k < 8; k++) {
                int32_t l = 0;
                for (int j = 0; j < 4; j++) l += codes[4 * k + j] * a[4 * k + j];
                u->lane[k] = fmaf(D, (float)l, u->lane[k]);
            }
            if (mins) u->summs += m * da[nb + b];
        }
    }
    for (int tk = 0; tk < nt; tk++) out[tk] = panel ? st[tk].acc : hsum8(st[tk].lane) + st[tk].summs;
}

/* A super-block type's dot product in one of llama.cpp's two forms.
 * Lanes (group 0; vec_dot): lane k holds, over the super-block's 32-element
 * chunks, sub-block scale x code x activation of elements 4k .. 4k + 3 of
 * each chunk; Q6_K's lanes take the unsigned codes (code + 32) and subtract
 * 32 x the scaled activation sums of sub-blocks 2k and 2k + 1 (its
 * q8sclsub), so its lane totals differ; lane[k] = fma(d_w * d_a, float(lane
 * k), lane[k]), hsum8, plus Q5_K's mins summed apart. Panel (group > 0; the
 * repacked GEMV / GEMMs and the IQ panel GEMM): per `group` elements the
 * exact sums S (codes) and M (mins x activation sums), acc = fma(float(S),
 * d_w * d_a, acc), accm = fma(float(M), dmin_w * d_a, accm); acc - accm.
 * Tokens [0, nt) of act, token i in form group[i]. */
KQL_INLINE void dot_super(dtype_t t, const uint8_t *row, const int8_t *act, size_t stride, int nt, int64_t cols,
                          const int *group, float *out) {
    size_t bb = kq_block_bytes(t);
    int64_t nb = cols / QK_K;
    int8_t codes[QK_K];
    int16_t sc[16], mn[16];
    float d, dmin;
    int q6 = t == XLLM_DT_Q6_K;
    sums st[KQL_TB];
    memset(st, 0, sizeof st);
    for (int64_t b = 0; b < nb; b++) {
        int sub = kq_unpack_block(t, row + (size_t)b * bb, codes, sc, mn, &d, &dmin);
        if (q6)
            for (int e = 0; e < QK_K; e++) codes[e] = (int8_t)(codes[e] + 32); /* its unsigned codes */
        for (int tk = 0; tk < nt; tk++) {
            const int8_t *a = act + (size_t)tk * stride + b * QK_K;
            const float *da = (const float *)(act + (size_t)tk * stride + cols);
            const int16_t *bsb = (const int16_t *)(da + nb) + b * 16;
            sums *u = &st[tk];
            int32_t lane[8][8], M[16]; /* [32-element chunk][lane]; per 16 */
            for (int c = 0; c < QK_K / 32; c++)
                for (int k = 0; k < 8; k++) {
                    int e0 = 32 * c + 4 * k, l = 0;
                    for (int j = 0; j < 4; j++) l += codes[e0 + j] * a[e0 + j];
                    lane[c][k] = sc[e0 / sub] * l;
                }
            for (int s = 0; s < 16; s++) M[s] = mn[sub == 16 ? s : s / 2] * bsb[s];
            float D = d * da[b], Dm = dmin * da[b];
            int g = group[tk];
            if (g) {
                for (int g0 = 0; g0 < QK_K; g0 += g) {
                    int32_t S = 0, Mg = 0;
                    for (int c = g0 / 32; c < (g0 + g) / 32; c++)
                        for (int k = 0; k < 8; k++) S += lane[c][k];
                    for (int s = g0 / 16; s < (g0 + g) / 16; s++) Mg += M[s];
                    u->acc = fmaf((float)S, D, u->acc);
                    u->accm = fmaf((float)Mg, Dm, u->accm);
                }
                continue;
            }
            int32_t Ms = 0;
            for (int k = 0; k < 8; k++) {
                int32_t l = 0;
                for (int c = 0; c < QK_K / 32; c++) l += lane[c][k];
                if (q6) l -= 32 * (bsb[2 * k] * sc[2 * k] + bsb[2 * k + 1] * sc[2 * k + 1]);
                u->lane[k] = fmaf(D, (float)l, u->lane[k]);
            }
            for (int s = 0; s < 16; s++) Ms += M[s];
            /* Q5_K's mins: summs += -(d_a * dmin_w) * M, a product gcc fuses into the add */
            if (t == XLLM_DT_Q5_K) u->summs = fmaf(-da[b] * dmin, (float)Ms, u->summs);
        }
    }
    for (int tk = 0; tk < nt; tk++)
        out[tk] = group[tk] ? st[tk].acc - st[tk].accm : hsum8(st[tk].lane) + st[tk].summs;
}

/* How llama.cpp v0.5.0 (x86, a machine with AVX-512) computes token `tok` of
 * a batch of `batch` for type t: 0 lanes, > 0 panel per that many elements,
 * -1 not a type of this file. The repacked types' GEMM takes the batch's
 * tokens four at a time and rounds per 64 (Q4_K) or 128 (Q2_K) elements;
 * the last batch % 4 tokens go through their GEMV, per super-block. */
KQL_INLINE int form(dtype_t t, int batch, int tok) {
    int gemm = tok < batch - batch % 4;
    switch (t) {
    case XLLM_DT_Q2_K: return gemm ? 128 : QK_K;              /* repacked q2_K_8x8 (AVX-512 machines) */
    case XLLM_DT_Q4_K: return gemm ? 64 : QK_K;               /* repacked q4_K_8x8 (AVX2 machines) */
    case XLLM_DT_Q3_K: case XLLM_DT_Q5_K: case XLLM_DT_Q6_K: return 0; /* vec_dot */
    case XLLM_DT_IQ4_XS: return batch >= IQP_MIN_BATCH ? QK_K : 0;   /* IQ panel GEMM from 8 tokens */
    default: return -1;
    }
}

KQL_INLINE int is_32(dtype_t t) {
    return t == XLLM_DT_Q8 || t == XLLM_DT_Q4 || t == XLLM_DT_Q4M || t == XLLM_DT_Q5_0 || t == XLLM_DT_Q5_1 ||
           t == XLLM_DT_IQ4_NL;
}

int kq_llama_owns(dtype_t t, int group) {
    if (t == XLLM_DT_Q8 || t == XLLM_DT_Q4 || t == XLLM_DT_Q4M) return group == 32;
    return is_32(t) || form(t, 1, 0) >= 0;
}

KQL_INLINE void matmul(dtype_t t, const void *W, int64_t cols, const void *act, size_t act_stride, int T,
                       int tok0, int batch, const float *bias, float *y, size_t ldy, int64_t r0, int64_t r1) {
    size_t rb = quant_row_bytes(t, is_32(t) ? 32 : QK_K, cols);
    /* (llama.cpp's repacked and panel forms also want the matrix's rows a
     * multiple of 8, as every model's are; the view a thread gets does not
     * say) */
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)W + (size_t)r * rb;
        float bv = bias ? bias[r] : 0.0f, v[KQL_TB];
        for (int t0 = 0; t0 < T; t0 += KQL_TB) {
            int nt = T - t0 < KQL_TB ? T - t0 : KQL_TB, group[KQL_TB];
            const int8_t *a = (const int8_t *)act + (size_t)t0 * act_stride;
            /* (one token, the GEMV: a copy with nt = 1 known, its sums in registers) */
            if (is_32(t)) {
                if (nt == 1) dot_32(t, row, a, act_stride, 1, cols, v);
                else dot_32(t, row, a, act_stride, nt, cols, v);
            } else {
                for (int i = 0; i < nt; i++) group[i] = form(t, batch, tok0 + t0 + i);
                if (nt == 1) dot_super(t, row, a, act_stride, 1, cols, group, v);
                else dot_super(t, row, a, act_stride, nt, cols, group, v);
            }
            for (int i = 0; i < nt; i++) y[(size_t)(t0 + i) * ldy + (size_t)r] = v[i] + bv;
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma"))) static void matmul_fma(dtype_t t, const void *W, int64_t cols, const void *act,
                                                          size_t act_stride, int T, int tok0, int batch,
                                                          const float *bias, float *y, size_t ldy, int64_t r0,
                                                          int64_t r1) {
    matmul(t, W, cols, act, act_stride, T, tok0, batch, bias, y, ldy, r0, r1);
}
#endif

void kq_matmul_llama(dtype_t t, const void *W, int64_t cols, const void *act, size_t act_stride, int T, int tok0,
                     int batch, const float *bias, float *y, size_t ldy, int64_t r0, int64_t r1) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        matmul_fma(t, W, cols, act, act_stride, T, tok0, batch, bias, y, ldy, r0, r1);
        return;
    }
#endif
    matmul(t, W, cols, act, act_stride, T, tok0, batch, bias, y, ldy, r0, r1);
}
