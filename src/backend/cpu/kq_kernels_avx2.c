/*
 * kq_kernels_avx2.c - AVX2 matmuls for llama.cpp's K-quants Q4_K and Q6_K on
 * Q8K activations (quant/kquant.h); the other kq types go to the reference.
 * Compiled with the avx2 level's target flags (AVX2, FMA, F16C).
 *
 * kq_kernels_avx512.c's scheme on 8 chunks of 32: a super-block is decoded
 * once per row (codes as unsigned bytes in element order, int16 scales per
 * pair of elements, an int16 multiplier per activation sum of 16); per
 * token, vpmaddubsw + vpmaddwd give exact int32 lanes over the super-block,
 * vpmaddwd of the sums per 16 the min (Q4_K) or -32 offset (Q6_K) term;
 * float part per super-block, 8 lanes:
 *   acc = fma(d_w * d_a, float(int lanes), acc),  accm = fma(dmin_w * d_a, float(min lanes), accm)
 * and y = hsum8(acc) - hsum8(accm) + bias. Every (row, token) runs this
 * sequence whatever T and the row split: GEMV and GEMM give the same bits.
 */
#if defined(__x86_64__)
#include "backend/cpu/kq_kernels.h"
#include "quant/kquant.h"

#include <immintrin.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))
#define TB 8

typedef struct {
    __m256i c[8]; /* codes, elements 32k .. 32k + 31 */
    __m256i s[8]; /* int16 scale of each pair of elements */
    __m256i ms;   /* int16 multiplier of each activation sum per 16 */
    float d, dmin;
} kblock;

AI float f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

AI void decode_q4k(const uint8_t *b, kblock *k) {
    uint32_t u[3];
    memcpy(u, b + 4, 12);
    uint32_t sc_lo = u[0] & 0x3f3f3f3fu, mn_lo = u[1] & 0x3f3f3f3fu;
    uint32_t sc_hi = (u[2] & 0x0f0f0f0fu) | ((u[0] >> 6) & 0x03030303u) << 4;
    uint32_t mn_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 6) & 0x03030303u) << 4;
    uint8_t sc[8], mn[8];
    memcpy(sc, &sc_lo, 4);
    memcpy(sc + 4, &sc_hi, 4);
    memcpy(mn, &mn_lo, 4);
    memcpy(mn + 4, &mn_hi, 4);
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
    k->d = f16(b);
    k->dmin = f16(b + 2);
}

AI void decode_q6k(const uint8_t *b, kblock *k) {
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
    k->ms = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc, 5));
    k->d = f16(b + 208);
    k->dmin = 0;
}

AI void block_dot(const kblock *k, int q4k, const int8_t *q, float da, const int16_t *bs, __m256 *acc, __m256 *accm) {
    __m256i is = _mm256_setzero_si256();
    for (int j = 0; j < 8; j++) {
        __m256i p = _mm256_maddubs_epi16(k->c[j], _mm256_loadu_si256((const __m256i *)(q + 32 * j)));
        is = _mm256_add_epi32(is, _mm256_madd_epi16(p, k->s[j]));
    }
    __m256i corr = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bs), k->ms);
    if (q4k) *accm = _mm256_fmadd_ps(_mm256_set1_ps(k->dmin * da), _mm256_cvtepi32_ps(corr), *accm);
    else is = _mm256_add_epi32(is, corr);
    *acc = _mm256_fmadd_ps(_mm256_set1_ps(k->d * da), _mm256_cvtepi32_ps(is), *acc);
}

AI float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

AI void rows_tokens(int q4k, const uint8_t *W, size_t rb, int64_t nb, size_t bb, const uint8_t *act, size_t astride,
                    int64_t cols, int t0, int tb, const float *bias, float *y, size_t ldy, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = W + (size_t)r * rb;
        __m256 acc[TB], accm[TB];
        for (int j = 0; j < tb; j++) acc[j] = _mm256_setzero_ps(), accm[j] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            kblock k;
            if (q4k) decode_q4k(row + (size_t)b * bb, &k);
            else decode_q6k(row + (size_t)b * bb, &k);
            for (int j = 0; j < tb; j++) {
                const uint8_t *a = act + (size_t)(t0 + j) * astride;
                const float *da = (const float *)(a + cols);
                const int16_t *bs = (const int16_t *)(da + nb);
                block_dot(&k, q4k, (const int8_t *)a + b * QK_K, da[b], bs + 16 * b, &acc[j], &accm[j]);
            }
        }
        for (int j = 0; j < tb; j++)
            y[(size_t)(t0 + j) * ldy + (size_t)r] = hsum8(acc[j]) - hsum8(accm[j]) + (bias ? bias[r] : 0.0f);
    }
}

static void mm_type(int q4k, const matrix *W, const void *act, size_t astride, int T, const float *bias, float *y,
                    size_t ldy, int64_t r0, int64_t r1) {
    size_t bb = kq_block_bytes(W->dtype);
    int64_t nb = W->cols / QK_K;
    size_t rb = (size_t)nb * bb;
    if (T == 1) {
        rows_tokens(q4k, W->data, rb, nb, bb, act, astride, W->cols, 0, 1, bias, y, ldy, r0, r1);
        return;
    }
    for (int t0 = 0; t0 < T; t0 += TB)
        rows_tokens(q4k, W->data, rb, nb, bb, act, astride, W->cols, t0, T - t0 < TB ? T - t0 : TB, bias, y, ldy, r0,
                    r1);
}

void kq_matmul_avx2(const matrix *W, const void *act, size_t astride, int T, const float *bias, float *y, size_t ldy,
                    int64_t r0, int64_t r1, void *scratch) {
    (void)scratch;
    if (W->dtype == XLLM_DT_Q4_K) mm_type(1, W, act, astride, T, bias, y, ldy, r0, r1);
    else if (W->dtype == XLLM_DT_Q6_K) mm_type(0, W, act, astride, T, bias, y, ldy, r0, r1);
    else kq_matmul_ref(W->dtype, W->data, W->cols, act, astride, T, bias, y, ldy, r0, r1);
}

#else
typedef int xllm_no_avx2_on_this_arch;
#endif
