/*
 * kq_kernels_x86.h - the x86 matmul code for llama.cpp's block types
 * (quant/kquant.h) that the avx2 and avx512 levels share: included by
 * kq_kernels_avx2.c and kq_kernels_avx512.c, each compiled with its level's
 * target flags (so the same source becomes each level's instructions; no
 * result depends on which level compiled it beyond what a level computes
 * with wider vectors of its own, kq_kernels_avx512.c's Q4_K / Q6_K).
 *
 * Super-block types (Q2_K .. Q6_K, IQ4_XS) on Q8K activations, 256-bit: a
 * super-block is decoded once per row into 8 chunks of 32 codes in element
 * order (kb8.c), an int16 sub-block scale per pair of elements (kb8.s) and a
 * 16-lane int16 multiplier of the activations' sums per 16 (kb8.ms: the
 * mins of Q2_K / Q4_K / Q5_K, or the offset x scale that makes unsigned
 * codes signed: Q3_K -4, Q6_K -32). Per token: vpmaddubsw (unsigned codes x
 * int8 activations, pairs exact: |sum| <= 2 * 127 * 127) and vpmaddwd by the
 * scales give exact int32 lanes over the super-block; vpmaddwd of the sums
 * per 16 the min or offset term, exact too. IQ4_XS's table values are
 * signed: their magnitudes go in kb8.c and the activations take the codes'
 * signs (vpsignb) first. Float part per super-block, 8 lanes:
 *   acc = fma(d_w * d_a, float(int lanes), acc)   (offset added to the int lanes)
 *   accm = fma(dmin_w * d_a, float(min lanes), accm)   (types with mins)
 * and y = hsum8(acc) - hsum8(accm) + bias.
 *
 * 32-blocks (Q5_0, Q5_1, IQ4_NL) on Q80 activations: per block an exact
 * int32 8-lane dot (signed codes through vpsignb as above; Q5_1's unsigned),
 * acc = fma(d_w * d_a, float(lanes), acc), Q5_1's m_w * s_a added to a
 * float in block order; y = hsum8(acc) + that + bias.
 *
 * KQ_DRIVER writes a level's row x token loop for its own block decoder and
 * block dot (avx512 instantiates it for its 512-bit Q4_K / Q6_K as well).
 * Every (row, token) runs the same sequence whatever T and the row split,
 * so GEMV and GEMM give the same bits. Thread-safe: pure functions of their
 * inputs that write only the rows of y they are given.
 */
#ifndef XLLM_BACKEND_CPU_KQ_KERNELS_X86_H
#define XLLM_BACKEND_CPU_KQ_KERNELS_X86_H

#include "backend/cpu/kernels.h"
#include "quant/kquant.h"
#include "quant/quant.h"

#include <immintrin.h>
#include <string.h>

#ifndef AI
#define AI static inline __attribute__((always_inline))
#endif
#define KQ_TB 8 /* tokens per pass over a row's decoded super-blocks */

AI float kq_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

AI float kq_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* --------------------------------------------------- super-blocks, 256-bit */

typedef struct {
    __m256i c[8]; /* codes (IQ4_XS: their magnitudes), elements 32k .. 32k + 31 */
    __m256i g[8]; /* IQ4_XS: the signed codes, for the activations' signs */
    __m256i s[8]; /* int16 scale of each pair of elements */
    __m256i ms;   /* int16 multiplier of each activation sum per 16 */
    float d, dmin;
} kb8;

/* Two int16 scales, lanes 0..7 and 8..15. */
AI __m256i kq_s2(int lo, int hi) { return _mm256_set_m128i(_mm_set1_epi16((short)hi), _mm_set1_epi16((short)lo)); }

/* 16 int16 values from 16 bytes (unsigned) */
AI __m256i kq_u8x16(const uint8_t *v) { return _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)v)); }

AI void kq_decode_q4k(const uint8_t *b, kb8 *k) {
    uint64_t scw, mnw;
    kq_k4_scales(b, &scw, &mnw);
    uint8_t sc[8], mn[8];
    memcpy(sc, &scw, 8);
    memcpy(mn, &mnw, 8);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int j = 0; j < 4; j++) { /* qs[32j..]: low nibbles sub-block 2j, high 2j + 1 */
        __m256i x = _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * j));
        k->c[2 * j] = _mm256_and_si256(x, m4);
        k->c[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
        k->s[2 * j] = _mm256_set1_epi16(sc[2 * j]);
        k->s[2 * j + 1] = _mm256_set1_epi16(sc[2 * j + 1]);
    }
    k->ms = _mm256_set_epi16(mn[7], mn[7], mn[6], mn[6], mn[5], mn[5], mn[4], mn[4], mn[3], mn[3], mn[2], mn[2], mn[1],
                             mn[1], mn[0], mn[0]);
    k->d = kq_f16(b);
    k->dmin = kq_f16(b + 2);
}

/* Q5_K: d, dmin, scales[12], qh[32], qs[128]: Q4_K's nibbles, bit k of qh[l]
 * the fifth bit of element 32k + l. */
AI void kq_decode_q5k(const uint8_t *b, kb8 *k) {
    kq_decode_q4k(b, k); /* scales, mins, d, dmin; the nibbles are redone below */
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 16));
    for (int j = 0; j < 4; j++) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(b + 48 + 32 * j));
        __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one), 4);
        __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one), 4);
        k->c[2 * j] = _mm256_or_si256(_mm256_and_si256(x, m4), h0);
        k->c[2 * j + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(x, 4), m4), h1);
    }
}

AI void kq_decode_q6k(const uint8_t *b, kb8 *k) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x03);
    for (int h = 0; h < 2; h++) {
        __m256i l0 = _mm256_loadu_si256((const __m256i *)(b + 64 * h));
        __m256i l1 = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32));
        __m256i q = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
#define HB(s) _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q, s), m2), 4)
        k->c[4 * h] = _mm256_or_si256(_mm256_and_si256(l0, m4), HB(0));
        k->c[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), HB(2));
        k->c[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), HB(4));
        k->c[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), HB(6));
#undef HB
    }
    __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 192)));
    /* chunk j (32 elements): int16 lanes 0..7 scale 2j, 8..15 scale 2j + 1 */
    const __m256i lo = _mm256_set_epi8(3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
                                       0, 1, 0, 1, 0);
    for (int j = 0; j < 8; j++) {
        /* bring scales 2j, 2j+1 (words) to both 128-bit halves' words 0 and 1, then spread */
        __m256i two = _mm256_permutevar8x32_epi32(sc, _mm256_set1_epi32(j));
        k->s[j] = _mm256_shuffle_epi8(two, lo);
    }
    k->ms = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc, 5)); /* -32 x scale */
    k->d = kq_f16(b + 208);
    k->dmin = 0;
}

/* Q2_K / Q3_K's 2-bit codes: chunk 4h + j (elements 128h + 32j ..) is bits
 * 2j, 2j + 1 of qs[32h .. 32h + 31]. */
AI __m256i kq_2bits(const uint8_t *qs, int h, int j) {
    __m256i x = _mm256_loadu_si256((const __m256i *)(qs + 32 * h));
    return _mm256_and_si256(_mm256_srli_epi16(x, 2 * j), _mm256_set1_epi8(3));
}

/* Q2_K: scales[16] (low 4 bits scale, high 4 min, per 16), qs[64], d, dmin */
AI void kq_decode_q2k(const uint8_t *b, kb8 *k) {
    for (int c = 0; c < 8; c++) {
        k->c[c] = kq_2bits(b + 16, c / 4, c % 4);
        k->s[c] = kq_s2(b[2 * c] & 0xf, b[2 * c + 1] & 0xf);
    }
    k->ms = _mm256_srli_epi16(kq_u8x16(b), 4);
    k->d = kq_f16(b + 80);
    k->dmin = kq_f16(b + 82);
}

/* Q3_K: hmask[32], qs[64], scales[12] (6-bit, -32), d; code = 2 bits + 4 x
 * (bit 4h + j of hmask[l]) - 4, the -4 as an offset on the sums per 16. */
AI void kq_decode_q3k(const uint8_t *b, kb8 *k) {
    const uint8_t *s = b + 96;
    int16_t sc[16];
    for (int i = 0; i < 16; i++) {
        int lo = i < 8 ? s[i] & 0xf : s[i - 8] >> 4;
        int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        sc[i] = (int16_t)((lo | hi << 4) - 32);
    }
    __m256i hm = _mm256_loadu_si256((const __m256i *)b);
    const __m256i one = _mm256_set1_epi8(1);
    for (int c = 0; c < 8; c++) {
        __m256i hb = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, c), one), 2);
        k->c[c] = _mm256_or_si256(kq_2bits(b + 32, c / 4, c % 4), hb);
        k->s[c] = kq_s2(sc[2 * c], sc[2 * c + 1]);
    }
    k->ms = _mm256_slli_epi16(_mm256_loadu_si256((const __m256i *)sc), 2);
    k->ms = _mm256_sub_epi16(_mm256_setzero_si256(), k->ms); /* -4 x scale */
    k->d = kq_f16(b + 108);
    k->dmin = 0;
}

AI __m256i kq_iq4_table(void) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kq_iq4_values));
}

/* 32 table values: the low nibbles of 16 bytes, then their high nibbles. */
AI __m256i kq_iq4_32(const uint8_t *qs, __m256i table) {
    __m128i v = _mm_loadu_si128((const __m128i *)qs), m4 = _mm_set1_epi8(0x0f);
    __m256i x = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
    return _mm256_shuffle_epi8(table, x);
}

/* IQ4_XS: d, scales_h (u16), scales_l[4], qs[128] */
AI void kq_decode_iq4xs(const uint8_t *b, kb8 *k) {
    uint16_t sh;
    memcpy(&sh, b + 2, 2);
    const __m256i table = kq_iq4_table();
    for (int j = 0; j < 8; j++) {
        int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 0xf) | ((sh >> (2 * j)) & 3) << 4;
        k->g[j] = kq_iq4_32(b + 8 + 16 * j, table);
        k->c[j] = _mm256_abs_epi8(k->g[j]);
        k->s[j] = _mm256_set1_epi16((short)(ls - 32));
    }
    k->ms = _mm256_setzero_si256();
    k->d = kq_f16(b);
    k->dmin = 0;
}

/* How a type's sums-per-16 term enters: 0 none (IQ4_XS, signed codes), 1
 * offset into the int lanes (Q3_K, Q6_K), 2 mins times dmin (Q2_K, Q4_K,
 * Q5_K). */
AI int kq_corr_mode(dtype_t t) {
    return t == XLLM_DT_IQ4_XS ? 0 : (t == XLLM_DT_Q3_K || t == XLLM_DT_Q6_K) ? 1 : 2;
}

AI void kq_decode8(dtype_t t, const uint8_t *b, kb8 *k) {
    switch (t) {
    case XLLM_DT_Q2_K: kq_decode_q2k(b, k); break;
    case XLLM_DT_Q3_K: kq_decode_q3k(b, k); break;
    case XLLM_DT_Q4_K: kq_decode_q4k(b, k); break;
    case XLLM_DT_Q5_K: kq_decode_q5k(b, k); break;
    case XLLM_DT_Q6_K: kq_decode_q6k(b, k); break;
    default: kq_decode_iq4xs(b, k); break;
    }
}

/* One super-block against one token's 256 activations (q), their d and sums per 16. */
AI void kq_dot8(dtype_t t, const kb8 *k, const int8_t *q, float da, const int16_t *bs, __m256 *acc, __m256 *accm) {
    int mode = kq_corr_mode(t);
    __m256i is = _mm256_setzero_si256();
    for (int j = 0; j < 8; j++) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(q + 32 * j));
        if (mode == 0) a = _mm256_sign_epi8(a, k->g[j]);
        is = _mm256_add_epi32(is, _mm256_madd_epi16(_mm256_maddubs_epi16(k->c[j], a), k->s[j]));
    }
    if (mode) {
        __m256i corr = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bs), k->ms);
        if (mode == 2) *accm = _mm256_fmadd_ps(_mm256_set1_ps(k->dmin * da), _mm256_cvtepi32_ps(corr), *accm);
        else is = _mm256_add_epi32(is, corr);
    }
    *acc = _mm256_fmadd_ps(_mm256_set1_ps(k->d * da), _mm256_cvtepi32_ps(is), *acc);
}

/*
 * KQ_DRIVER(NAME, KB, ACC, ACCM, ZERO, ZEROM, DECODE, DOT, RED, REDM): a
 * static function NAME(t, W, act, astride, T, bias, y, ldy, r0, r1) over
 * super-block types: rows [r0, r1), tokens in passes of up to KQ_TB, each
 * row's super-blocks decoded once per pass by DECODE(t, ptr, &kb) and dotted
 * with every token of the pass by DOT(t, &kb, q, d_a, sums, &acc, &accm);
 * y = RED(acc) - REDM(accm) + bias.
 */
#define KQ_DRIVER(NAME, KB, ACC, ACCM, ZERO, ZEROM, DECODE, DOT, RED, REDM)                                              \
    AI void NAME##_pass(dtype_t t, const uint8_t *W, size_t rb, int64_t nb, size_t bb, const uint8_t *act,             \
                        size_t astride, int64_t cols, int t0, int tb, const float *bias, float *y, size_t ldy,             \
                        int64_t r0, int64_t r1) {                                                                          \
        for (int64_t r = r0; r < r1; r++) {                                                                                \
            const uint8_t *row = W + (size_t)r * rb;                                                                       \
            ACC acc[KQ_TB];                                                                                                \
            ACCM accm[KQ_TB];                                                                                              \
            for (int j = 0; j < tb; j++) acc[j] = ZERO(), accm[j] = ZEROM();                                               \
            for (int64_t b = 0; b < nb; b++) {                                                                             \
                KB k;                                                                                                      \
                DECODE(t, row + (size_t)b * bb, &k);                                                                       \
                for (int j = 0; j < tb; j++) {                                                                             \
                    const uint8_t *a = act + (size_t)(t0 + j) * astride;                                                   \
                    const float *da = (const float *)(a + cols);                                                           \
                    const int16_t *bs = (const int16_t *)(da + nb);                                                        \
                    DOT(t, &k, (const int8_t *)a + b * QK_K, da[b], bs + 16 * b, &acc[j], &accm[j]);                       \
                }                                                                                                          \
            }                                                                                                              \
            for (int j = 0; j < tb; j++)                                                                                   \
                y[(size_t)(t0 + j) * ldy + (size_t)r] = RED(acc[j]) - REDM(accm[j]) + (bias ? bias[r] : 0.0f);            \
        }                                                                                                                  \
    }                                                                                                                      \
    AI void NAME(dtype_t t, const matrix *W, const void *act, size_t astride, int T, const float *bias, float *y,      \
                 size_t ldy, int64_t r0, int64_t r1) {                                                                     \
        size_t bb = kq_block_bytes(t);                                                                                     \
        int64_t nb = W->cols / QK_K;                                                                                       \
        size_t rb = (size_t)nb * bb;                                                                                       \
        if (T == 1) {                                                                                                      \
            NAME##_pass(t, W->data, rb, nb, bb, act, astride, W->cols, 0, 1, bias, y, ldy, r0, r1);                        \
            return;                                                                                                        \
        }                                                                                                                  \
        for (int t0 = 0; t0 < T; t0 += KQ_TB)                                                                              \
            NAME##_pass(t, W->data, rb, nb, bb, act, astride, W->cols, t0, T - t0 < KQ_TB ? T - t0 : KQ_TB, bias, y, ldy, \
                        r0, r1);                                                                                           \
    }

AI __m256 kq_zero8(void) { return _mm256_setzero_ps(); }

KQ_DRIVER(kq_mm8, kb8, __m256, __m256, kq_zero8, kq_zero8, kq_decode8, kq_dot8, kq_hsum8, kq_hsum8)

/* ------------------------------------------------------------- 32-blocks */

typedef struct {
    __m256i c, g; /* codes (signed types: magnitudes), the signed codes */
    float d, m;
} kb1;

/* The 32 fifth bits of qh as 0x10 bytes (element order). */
AI __m256i kq_bits32(uint32_t qh) {
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0);
    __m256i x = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), shuf);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(x, bit), bit), _mm256_set1_epi8(0x10));
}

/* Q5_0 (d, qh, qs[16]), Q5_1 (d, m, qh, qs[16]), IQ4_NL (d, qs[16]) */
AI void kq_decode1(dtype_t t, const uint8_t *b, kb1 *k) {
    k->d = kq_f16(b);
    k->m = 0;
    if (t == XLLM_DT_IQ4_NL) {
        k->g = kq_iq4_32(b + 2, kq_iq4_table());
        k->c = _mm256_abs_epi8(k->g);
        return;
    }
    int hdr = t == XLLM_DT_Q5_1 ? 4 : 2;
    uint32_t qh;
    memcpy(&qh, b + hdr, 4);
    __m128i v = _mm_loadu_si128((const __m128i *)(b + hdr + 4)), m4 = _mm_set1_epi8(0x0f);
    __m256i lo = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
    __m256i u = _mm256_or_si256(lo, kq_bits32(qh)); /* 0..31 */
    if (t == XLLM_DT_Q5_1) {
        k->c = u;
        k->m = kq_f16(b + 2);
    } else {
        k->g = _mm256_sub_epi8(u, _mm256_set1_epi8(16));
        k->c = _mm256_abs_epi8(k->g);
    }
}

AI void kq_mm1_pass(dtype_t t, const uint8_t *W, size_t rb, int64_t nb, const uint8_t *act, size_t astride,
                    int64_t cols, int t0, int tb, const float *bias, float *y, size_t ldy, int64_t r0, int64_t r1) {
    const size_t bb = kq_block_bytes(t);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = W + (size_t)r * rb;
        __m256 acc[KQ_TB];
        float accs[KQ_TB];
        for (int j = 0; j < tb; j++) acc[j] = _mm256_setzero_ps(), accs[j] = 0;
        for (int64_t b = 0; b < nb; b++) {
            kb1 k;
            kq_decode1(t, row + (size_t)b * bb, &k);
            for (int j = 0; j < tb; j++) {
                const uint8_t *a = act + (size_t)(t0 + j) * astride;
                const float *da = (const float *)(a + cols), *sa = da + nb;
                __m256i q = _mm256_loadu_si256((const __m256i *)(a + b * 32));
                if (t != XLLM_DT_Q5_1) q = _mm256_sign_epi8(q, k.g);
                __m256i is = _mm256_madd_epi16(_mm256_maddubs_epi16(k.c, q), ones);
                acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(k.d * da[b]), _mm256_cvtepi32_ps(is), acc[j]);
                if (t == XLLM_DT_Q5_1) accs[j] += k.m * sa[b];
            }
        }
        for (int j = 0; j < tb; j++)
            y[(size_t)(t0 + j) * ldy + (size_t)r] = kq_hsum8(acc[j]) + accs[j] + (bias ? bias[r] : 0.0f);
    }
}

AI void kq_mm1(dtype_t t, const matrix *W, const void *act, size_t astride, int T, const float *bias, float *y,
               size_t ldy, int64_t r0, int64_t r1) {
    int64_t nb = W->cols / 32;
    size_t rb = (size_t)nb * kq_block_bytes(t);
    if (T == 1) {
        kq_mm1_pass(t, W->data, rb, nb, act, astride, W->cols, 0, 1, bias, y, ldy, r0, r1);
        return;
    }
    for (int t0 = 0; t0 < T; t0 += KQ_TB)
        kq_mm1_pass(t, W->data, rb, nb, act, astride, W->cols, t0, T - t0 < KQ_TB ? T - t0 : KQ_TB, bias, y, ldy, r0, r1);
}

/* ------------------------------------------------- activations (Q8K, Q80) */

/* llama.cpp's activations (kq_act_prepare, kquant.c) 8 floats at a time in
 * kq_act_frame.h's loops, the same bytes: the same float products (no fma),
 * rounded to nearest even by vcvtps2dq as lrintf rounds, a product that is
 * not finite or above 128 in magnitude coded 0 as there (NaN skipped in the
 * largest magnitude: vmaxps keeps its second operand). */
AI __m256 kq_abs8(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

AI float kq_amax(const float *x, int n) {
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) m = _mm256_max_ps(kq_abs8(_mm256_loadu_ps(x + i)), m);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* 8 codes of x * s, int32 lanes */
AI __m256i kq_codes8(const float *x, __m256 s) {
    __m256 p = _mm256_mul_ps(_mm256_loadu_ps(x), s);
    __m256 ok = _mm256_cmp_ps(kq_abs8(p), _mm256_set1_ps(128.0f), _CMP_LE_OQ);
    return _mm256_and_si256(_mm256_cvtps_epi32(p), _mm256_castps_si256(ok));
}

/* 32 codes (4 x 8 int32 lanes, each at most 128 in magnitude) to bytes, in order */
AI __m256i kq_pack32(__m256i a, __m256i b, __m256i c, __m256i d) {
    __m256i q = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
    return _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

AI void kq_act_q8k(const float *xb, float iscale, int8_t *qb, int16_t *bs) {
    const __m256i c127 = _mm256_set1_epi32(127), ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    const __m256 s = _mm256_set1_ps(iscale);
    for (int i = 0; i < QK_K; i += 32) {
        __m256i v = kq_pack32(_mm256_min_epi32(kq_codes8(xb + i, s), c127), _mm256_min_epi32(kq_codes8(xb + i + 8, s), c127),
                              _mm256_min_epi32(kq_codes8(xb + i + 16, s), c127),
                              _mm256_min_epi32(kq_codes8(xb + i + 24, s), c127));
        _mm256_storeu_si256((__m256i *)(qb + i), v);
        /* sums of 4, then of 16: lanes 0 and 4 */
        __m256i s4 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, v), ones16);
        s4 = _mm256_hadd_epi32(s4, s4);
        s4 = _mm256_hadd_epi32(s4, s4);
        bs[i / 16] = (int16_t)_mm256_extract_epi32(s4, 0);
        bs[i / 16 + 1] = (int16_t)_mm256_extract_epi32(s4, 4);
    }
}

AI int32_t kq_act_q80(const float *xb, float id, int8_t *qb) {
    const __m256 sv = _mm256_set1_ps(id);
    __m256i c0 = kq_codes8(xb, sv), c1 = kq_codes8(xb + 8, sv), c2 = kq_codes8(xb + 16, sv), c3 = kq_codes8(xb + 24, sv);
    _mm256_storeu_si256((__m256i *)qb, kq_pack32(c0, c1, c2, c3));
    __m256i t = _mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3));
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
    return _mm_cvtsi128_si32(h);
}

#define KQA_NAME kq_act_x86
#define KQA_AMAX kq_amax
#define KQA_Q8K kq_act_q8k
#define KQA_Q80 kq_act_q80
#include "quant/kq_act_frame.h"

/* Every kq type through the 256-bit code, each type's own copy of the loops
 * (the switch hands the driver a constant). */
static void kq_matmul_x86_256(const matrix *W, const void *act, size_t astride, int T, const float *bias, float *y,
                              size_t ldy, int64_t r0, int64_t r1) {
    switch (W->dtype) {
    case XLLM_DT_Q2_K: kq_mm8(XLLM_DT_Q2_K, W, act, astride, T, bias, y, ldy, r0, r1); break;
    case XLLM_DT_Q3_K: kq_mm8(XLLM_DT_Q3_K, W, act, astride, T, bias, y, ldy, r0, r1); break;
    case XLLM_DT_Q4_K: kq_mm8(XLLM_DT_Q4_K, W, act, astride, T, bias, y, ldy, r0, r1); break;
    case XLLM_DT_Q5_K: kq_mm8(XLLM_DT_Q5_K, W, act, astride, T, bias, y, ldy, r0, r1); break;
    case XLLM_DT_Q6_K: kq_mm8(XLLM_DT_Q6_K, W, act, astride, T, bias, y, ldy, r0, r1); break;
    case XLLM_DT_IQ4_XS: kq_mm8(XLLM_DT_IQ4_XS, W, act, astride, T, bias, y, ldy, r0, r1); break;
    case XLLM_DT_Q5_0: kq_mm1(XLLM_DT_Q5_0, W, act, astride, T, bias, y, ldy, r0, r1); break;
    case XLLM_DT_Q5_1: kq_mm1(XLLM_DT_Q5_1, W, act, astride, T, bias, y, ldy, r0, r1); break;
    case XLLM_DT_IQ4_NL: kq_mm1(XLLM_DT_IQ4_NL, W, act, astride, T, bias, y, ldy, r0, r1); break;
    default: kq_matmul_ref(W->dtype, W->data, W->cols, act, astride, T, bias, y, ldy, r0, r1); break;
    }
}

#endif
