/*
 * kq_kernels_neon_impl.h - the NEON matmuls for llama.cpp's block types
 * (quant/kquant.h), included twice: by kq_kernels_neon.c (NEON_DOT 0, int8
 * products with vmull_s8 + vpadalq_s16) and kq_kernels_neon_dot.c (NEON_DOT
 * 1, compiled with +dotprod: vdotq_s32). KQ_NEON_FN names the function.
 *
 * NEON multiplies signed by signed bytes, so every type's codes are decoded
 * once per row and super-block (or 32-block) as the signed values the block
 * scale multiplies (Q6_K q - 32, Q3_K q - 4, IQ4 table values, Q5_0 q - 16),
 * 16 per vector, with one int32 scale (and min) per 16 elements. Per token,
 * each 16 gives a 4-lane int32 partial dot, multiplied by its scale into one
 * int32x4 accumulator; its lane sum is S_b of kquant.h exactly (|S_b| < 2^28),
 * the mins term M_b = sum of min x the activations' sums per 16 is exact too,
 * and then the float part is the reference's own, in block order:
 *   acc += (d_w * d_a) * S_b;  acc -= (dmin_w * d_a) * M_b   (types with mins)
 * (32-blocks: acc += (d_w * d_a) * S_b, + m_w * s_a for Q5_1). So both
 * variants, and kq_matmul_ref, give the same bits, whatever T and the row
 * split. IQ4_NL, IQ4_XS, Q5_0 and Q5_1 (cols a multiple of 256) run in
 * P32 tiles (kq_pack32_neon_impl.h), Q2_K and Q3_K in Q23 tiles
 * (kq_pack23_neon_impl.h), packed at load or put in order in scratch, with
 * the same bits. Thread-safe: writes only the rows of y it is
 * given.
 */
#include "backend/cpu/kq_kernels.h"
#include "quant/kquant.h"

#include <arm_neon.h>
#include <math.h>
#include <string.h>

#define KQ_TB 8 /* tokens per pass over a row's decoded blocks */

typedef struct {
    int8x16_t c[16]; /* codes, elements 16k .. 16k + 15 */
    int32_t sc[16];  /* scale of each 16 */
    int32_t mn[16];  /* min of each 16 (types with mins) */
    float d, dmin;
} nkb;

static inline float nk_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return f16_to_f32(h);
}

/* 4 int32 lanes summing to the dot of 16 codes with 16 activations */
static inline int32x4_t nk_dot16(int8x16_t c, int8x16_t a) {
#if NEON_DOT
    return vdotq_s32(vdupq_n_s32(0), c, a);
#else
    int32x4_t p = vpaddlq_s16(vmull_s8(vget_low_s8(c), vget_low_s8(a)));
    return vpadalq_s16(p, vmull_high_s8(c, a));
#endif
}

/* two nibble vectors of 16 bytes at p */
static inline void nk_nibbles(const uint8_t *p, uint8x16_t *lo, uint8x16_t *hi) {
    uint8x16_t v = vld1q_u8(p);
    *lo = vandq_u8(v, vdupq_n_u8(0x0f));
    *hi = vshrq_n_u8(v, 4);
}

/* bit `bit` of each byte of v, moved to bit `to` */
static inline uint8x16_t nk_bit(uint8x16_t v, int bit, int to) {
    return vshlq_u8(vandq_u8(vshlq_u8(v, vdupq_n_s8((int8_t)-bit)), vdupq_n_u8(1)), vdupq_n_s8((int8_t)to));
}

static void nk_decode(dtype_t t, const uint8_t *b, nkb *k) {
    k->dmin = 0;
    switch (t) {
    case XLLM_DT_Q4_K:
    case XLLM_DT_Q5_K: { /* d dmin scales[12] (qh[32]) qs[128]; chunk 2j: low nibbles of qs[32j..], 2j+1: high */
        uint64_t scw, mnw;
        kq_k4_scales(b, &scw, &mnw);
        uint8_t sc[8], mn[8];
        memcpy(sc, &scw, 8);
        memcpy(mn, &mnw, 8);
        const uint8_t *qs = b + (t == XLLM_DT_Q5_K ? 48 : 16), *qh = b + 16;
        for (int j = 0; j < 4; j++)
            for (int h = 0; h < 2; h++) {
                uint8x16_t lo, hi;
                nk_nibbles(qs + 32 * j + 16 * h, &lo, &hi);
                if (t == XLLM_DT_Q5_K) {
                    uint8x16_t q = vld1q_u8(qh + 16 * h);
                    lo = vorrq_u8(lo, nk_bit(q, 2 * j, 4));
                    hi = vorrq_u8(hi, nk_bit(q, 2 * j + 1, 4));
                }
                k->c[4 * j + h] = vreinterpretq_s8_u8(lo);
                k->c[4 * j + 2 + h] = vreinterpretq_s8_u8(hi);
            }
        for (int i = 0; i < 16; i++) k->sc[i] = sc[i / 2], k->mn[i] = mn[i / 2];
        k->d = nk_f16(b);
        k->dmin = nk_f16(b + 2);
        return;
    }
    case XLLM_DT_Q6_K: { /* ql[128] qh[64] scales[16] d */
        for (int h = 0; h < 2; h++)
            for (int kk = 0; kk < 4; kk++)
                for (int u = 0; u < 2; u++) { /* elements 128h + 32kk + 16u .. */
                    uint8x16_t lb = vld1q_u8(b + 64 * h + 32 * (kk & 1) + 16 * u);
                    uint8x16_t lo = kk < 2 ? vandq_u8(lb, vdupq_n_u8(0x0f)) : vshrq_n_u8(lb, 4);
                    uint8x16_t qh = vld1q_u8(b + 128 + 32 * h + 16 * u);
                    uint8x16_t hi = vshlq_n_u8(vandq_u8(vshlq_u8(qh, vdupq_n_s8((int8_t)(-2 * kk))), vdupq_n_u8(3)), 4);
                    k->c[8 * h + 2 * kk + u] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, hi)), vdupq_n_s8(32));
                }
        for (int i = 0; i < 16; i++) k->sc[i] = (int8_t)b[192 + i], k->mn[i] = 0;
        k->d = nk_f16(b + 208);
        return;
    }
    case XLLM_DT_Q2_K:
    case XLLM_DT_Q3_K: { /* chunk 4h + j (elements 128h + 32j ..): bits 2j of qs[32h + l] */
        const uint8_t *qs = b + (t == XLLM_DT_Q2_K ? 16 : 32);
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 4; j++)
                for (int u = 0; u < 2; u++) {
                    uint8x16_t v = vld1q_u8(qs + 32 * h + 16 * u);
                    uint8x16_t q = vandq_u8(vshlq_u8(v, vdupq_n_s8((int8_t)(-2 * j))), vdupq_n_u8(3));
                    if (t == XLLM_DT_Q3_K) { /* + 4 x hmask bit (4h + j) - 4 */
                        q = vorrq_u8(q, nk_bit(vld1q_u8(b + 16 * u), 4 * h + j, 2));
                        k->c[8 * h + 2 * j + u] = vsubq_s8(vreinterpretq_s8_u8(q), vdupq_n_s8(4));
                    } else {
                        k->c[8 * h + 2 * j + u] = vreinterpretq_s8_u8(q);
                    }
                }
        if (t == XLLM_DT_Q2_K) {
            for (int i = 0; i < 16; i++) k->sc[i] = b[i] & 0xf, k->mn[i] = b[i] >> 4;
            k->d = nk_f16(b + 80);
            k->dmin = nk_f16(b + 82);
        } else {
            const uint8_t *s = b + 96;
            for (int i = 0; i < 16; i++) {
                int lo = i < 8 ? s[i] & 0xf : s[i - 8] >> 4;
                int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
                k->sc[i] = (lo | hi << 4) - 32, k->mn[i] = 0;
            }
            k->d = nk_f16(b + 108);
        }
        return;
    }
    default: { /* IQ4_XS: d scales_h(u16) scales_l[4] qs[128] */
        uint16_t sh;
        memcpy(&sh, b + 2, 2);
        const int8x16_t table = vld1q_s8(kq_iq4_values);
        for (int j = 0; j < 8; j++) {
            uint8x16_t lo, hi;
            nk_nibbles(b + 8 + 16 * j, &lo, &hi);
            k->c[2 * j] = vqtbl1q_s8(table, lo);
            k->c[2 * j + 1] = vqtbl1q_s8(table, hi);
            int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 0xf) | ((sh >> (2 * j)) & 3) << 4;
            k->sc[2 * j] = k->sc[2 * j + 1] = ls - 32;
            k->mn[2 * j] = k->mn[2 * j + 1] = 0;
        }
        k->d = nk_f16(b);
        return;
    }
    }
}

static inline int nk_has_mins(dtype_t t) { return t == XLLM_DT_Q2_K || t == XLLM_DT_Q4_K || t == XLLM_DT_Q5_K; }

static void nk_super(dtype_t t, const uint8_t *W, size_t rb, int64_t nb, const uint8_t *act, size_t astride,
                     int64_t cols, int t0, int tb, const float *bias, float *y, size_t ldy, int64_t r0, int64_t r1) {
    const size_t bb = kq_block_bytes(t);
    const int mins = nk_has_mins(t);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = W + (size_t)r * rb;
        float acc[KQ_TB];
        for (int j = 0; j < tb; j++) acc[j] = 0;
        for (int64_t b = 0; b < nb; b++) {
            nkb k;
            nk_decode(t, row + (size_t)b * bb, &k);
            for (int j = 0; j < tb; j++) {
                const uint8_t *a = act + (size_t)(t0 + j) * astride;
                const int8_t *q = (const int8_t *)a + b * QK_K;
                const float *da = (const float *)(a + cols);
                const int16_t *bs = (const int16_t *)(da + nb) + 16 * b;
                int32x4_t s = vdupq_n_s32(0);
                for (int i = 0; i < 16; i++) s = vmlaq_n_s32(s, nk_dot16(k.c[i], vld1q_s8(q + 16 * i)), k.sc[i]);
                int32_t S = vaddvq_s32(s);
                acc[j] += (k.d * da[b]) * (float)S;
                if (mins) {
                    int32_t M = 0;
                    for (int i = 0; i < 16; i++) M += k.mn[i] * bs[i];
                    acc[j] -= (k.dmin * da[b]) * (float)M;
                }
            }
        }
        for (int j = 0; j < tb; j++) y[(size_t)(t0 + j) * ldy + (size_t)r] = acc[j] + (bias ? bias[r] : 0.0f);
    }
}

/* Q5_0 (d, qh, qs[16]), Q5_1 (d, m, qh, qs[16]), IQ4_NL (d, qs[16]): the 32 codes, d and m. */
static inline void nk_decode32(dtype_t t, const uint8_t *b, int8x16_t *c0, int8x16_t *c1, float *d, float *m) {
    *d = nk_f16(b);
    *m = 0;
    uint8x16_t lo, hi;
    if (t == XLLM_DT_IQ4_NL) {
        const int8x16_t table = vld1q_s8(kq_iq4_values);
        nk_nibbles(b + 2, &lo, &hi);
        *c0 = vqtbl1q_s8(table, lo);
        *c1 = vqtbl1q_s8(table, hi);
        return;
    }
    int hdr = t == XLLM_DT_Q5_1 ? 4 : 2;
    uint8_t qb[32]; /* the fifth bits as bytes: element e's is bit e of qh */
    uint32_t qh;
    memcpy(&qh, b + hdr, 4);
    for (int e = 0; e < 32; e++) qb[e] = (uint8_t)(((qh >> e) & 1) << 4);
    nk_nibbles(b + hdr + 4, &lo, &hi);
    lo = vorrq_u8(lo, vld1q_u8(qb));
    hi = vorrq_u8(hi, vld1q_u8(qb + 16));
    if (t == XLLM_DT_Q5_1) {
        *c0 = vreinterpretq_s8_u8(lo);
        *c1 = vreinterpretq_s8_u8(hi);
        *m = nk_f16(b + 2);
    } else {
        *c0 = vsubq_s8(vreinterpretq_s8_u8(lo), vdupq_n_s8(16));
        *c1 = vsubq_s8(vreinterpretq_s8_u8(hi), vdupq_n_s8(16));
    }
}

static void nk_blocks32(dtype_t t, const uint8_t *W, size_t rb, int64_t nb, const uint8_t *act, size_t astride,
                        int64_t cols, int t0, int tb, const float *bias, float *y, size_t ldy, int64_t r0, int64_t r1) {
    const size_t bb = kq_block_bytes(t);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = W + (size_t)r * rb;
        float acc[KQ_TB];
        for (int j = 0; j < tb; j++) acc[j] = 0;
        for (int64_t b = 0; b < nb; b++) {
            int8x16_t c0, c1;
            float d, m;
            nk_decode32(t, row + (size_t)b * bb, &c0, &c1, &d, &m);
            for (int j = 0; j < tb; j++) {
                const uint8_t *a = act + (size_t)(t0 + j) * astride;
                const int8_t *q = (const int8_t *)a + b * 32;
                const float *da = (const float *)(a + cols), *sa = da + nb;
                int32_t is = vaddvq_s32(vaddq_s32(nk_dot16(c0, vld1q_s8(q)), nk_dot16(c1, vld1q_s8(q + 16))));
                acc[j] += (d * da[b]) * (float)is;
                if (t == XLLM_DT_Q5_1) acc[j] += m * sa[b];
            }
        }
        for (int j = 0; j < tb; j++) y[(size_t)(t0 + j) * ldy + (size_t)r] = acc[j] + (bias ? bias[r] : 0.0f);
    }
}

#include "backend/cpu/kq_pack32_neon_impl.h"
#include "backend/cpu/kq_pack23_neon_impl.h"

#if !NEON_DOT /* the NEON levels' packed layout (both read it): P32's and Q23's tiles */
int kq_pk_neon_type(const matrix *W) { return p32_is_type(W) || q23_is_type(W); }
size_t kq_pk_neon_packed_bytes(const matrix *W) { return p32_is_type(W) ? p32_packed_bytes(W) : q23_packed_bytes(W); }
void kq_pk_neon_repack(const matrix *W, int64_t q0, int64_t q1, void *out) {
    if (p32_is_type(W)) p32_repack(W, q0, q1, out);
    else q23_repack(W, q0, q1, out);
}
size_t kq_pk_neon_scratch_bytes(int64_t cols) {
    size_t a = p32n_scratch_bytes(cols), b = q23n_scratch_bytes(cols);
    return a > b ? a : b;
}
#endif

void KQ_NEON_FN(const matrix *W, const void *act, size_t astride, int T, const float *bias, float *y, size_t ldy,
                int64_t r0, int64_t r1, void *scratch) {
    if (r1 <= r0 || T <= 0) return;
    if (p32_is_type(W)) { /* IQ4_NL, IQ4_XS, Q5_0, Q5_1 with cols a multiple of 256: P32 tiles */
        p32n_matmul(W, act, astride, T, bias, y, ldy, r0, r1, scratch);
        return;
    }
    if (q23_is_type(W)) { /* Q2_K, Q3_K with cols a multiple of 256: Q23 tiles */
        q23n_matmul(W, act, astride, T, bias, y, ldy, r0, r1, scratch);
        return;
    }
    dtype_t t = W->dtype;
    int n = kq_block_elems(t);
    if (!n) {
        kq_matmul_ref(t, W->data, W->cols, act, astride, T, bias, y, ldy, r0, r1);
        return;
    }
    int64_t nb = W->cols / n;
    size_t rb = (size_t)nb * kq_block_bytes(t);
    for (int t0 = 0; t0 < T; t0 += KQ_TB) {
        int tb = T - t0 < KQ_TB ? T - t0 : KQ_TB;
        if (n == QK_K) nk_super(t, W->data, rb, nb, act, astride, W->cols, t0, tb, bias, y, ldy, r0, r1);
        else nk_blocks32(t, W->data, rb, nb, act, astride, W->cols, t0, tb, bias, y, ldy, r0, r1);
    }
}
