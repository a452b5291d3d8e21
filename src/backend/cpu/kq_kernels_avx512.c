/*
 * kq_kernels_avx512.c - AVX-512 (BW, VL) matmuls for llama.cpp's block types
 * (quant/kquant.h), compiled with the avx512 level's target flags: Q4_K,
 * Q5_K and Q6_K in 512-bit vectors below, the other types through the 256-bit code of
 * kq_kernels_x86.h (AVX-512VL encodings of the same scheme).
 *
 * A super-block (256 weights) is decoded once per row into registers: the
 * codes in element order as unsigned bytes (Q4_K 0..15, Q5_K 0..31, Q6_K 0..63: the -32
 * is folded in below), 4 vectors of 64; the sub-block scales as int16, one
 * per pair of elements; and a 16-lane int16 vector for the activations' sums
 * per 16 (Q4_K, Q5_K: each sub-block's min, twice; Q6_K: -32 x its scale). Then per
 * token: vpmaddubsw (codes x int8 activations, pairs, exact: |sum| <= 16002)
 * and vpmaddwd by the scales give int32 lanes, summed exactly over the
 * super-block; vpmaddwd of the sums per 16 gives the min (Q4_K) or offset
 * (Q6_K) term, exact too. Float part per super-block b, 16 lanes:
 *   acc = fma(d_w * d_a, float(int lanes), acc)      (Q6_K: offset added to the int lanes)
 *   accm = fma(dmin_w * d_a, float(min lanes), accm)  (Q4_K, Q5_K: 8 lanes)
 * and y = reduce1(acc) - hsum(accm) + bias. The row x token loop is
 * kq_kernels_x86.h's KQ_DRIVER: rows are decoded once per block of up to
 * KQ_TB tokens and every (row, token) runs exactly this sequence, so the
 * GEMV (T = 1) and GEMM give the same bits whatever T and the row split.
 */
#if defined(__x86_64__)
#include "backend/cpu/kq_kernels.h"
#include "backend/cpu/simd_avx512.h"
#include "backend/cpu/kq_kernels_x86.h"

typedef struct {
    __m512i c[4]; /* codes, elements 64k .. 64k + 63 */
    __m512i s[4]; /* int16 scale of each pair of elements */
    __m256i ms;   /* int16 multiplier of each activation sum per 16 */
    float d, dmin;
} kblock;

/* Q4_K: d, dmin, scales[12], qs[128]; Q5_K (q5): d, dmin, scales[12],
 * qh[32], qs[128], bit c of qh[l] the fifth bit of element 32c + l */
AI void decode_q45k(const uint8_t *b, kblock *k, int q5) {
    uint64_t scw, mnw;
    kq_k4_scales(b, &scw, &mnw);
    __m128i sc = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)scw));
    __m128i mn = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mnw));
    const __m512i shift = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0), m4 = _mm512_set1_epi8(0x0f);
    const __m512i qh = q5 ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 16))) : m4;
    for (int j = 0; j < 4; j++) { /* qs[32j..]: low nibbles sub-block 2j, high 2j + 1 */
        __m512i x = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + (q5 ? 48 : 16) + 32 * j)));
        k->c[j] = _mm512_and_si512(_mm512_srlv_epi64(x, shift), m4);
        if (q5) { /* bits 2j (low half) and 2j + 1 (high half) of qh, to bit 4 */
            const __m512i hs = _mm512_set_epi64(2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j, 2 * j, 2 * j, 2 * j);
            __m512i h = _mm512_and_si512(_mm512_srlv_epi64(qh, hs), _mm512_set1_epi8(1));
            k->c[j] = _mm512_or_si512(k->c[j], _mm512_slli_epi16(h, 4));
        }
        __m512i idx = _mm512_set_epi64(0x0001000100010001LL * (2 * j + 1), 0x0001000100010001LL * (2 * j + 1),
                                       0x0001000100010001LL * (2 * j + 1), 0x0001000100010001LL * (2 * j + 1),
                                       0x0001000100010001LL * (2 * j), 0x0001000100010001LL * (2 * j),
                                       0x0001000100010001LL * (2 * j), 0x0001000100010001LL * (2 * j));
        k->s[j] = _mm512_permutexvar_epi16(idx, _mm512_castsi128_si512(sc));
    }
    const __m256i dup = _mm256_set_epi16(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    k->ms = _mm256_permutexvar_epi16(dup, _mm256_castsi128_si256(mn));
    k->d = kq_f16(b);
    k->dmin = kq_f16(b + 2);
}

/* Q6_K: ql[128], qh[64], scales[16] (int8), d */
AI void decode_q6k(const uint8_t *b, kblock *k) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(0x03);
    const __m512i sh01 = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0), sh23 = _mm512_set_epi64(6, 6, 6, 6, 4, 4, 4, 4);
    for (int h = 0; h < 2; h++) {
        /* elements 128h + 0..63: low nibbles of ql[64h..64h+63], qh[32h + l] bits 0-1 (l < 32) or 2-3;
         * elements 128h + 64..127: the high nibbles, qh bits 4-5 or 6-7 */
        __m512i l = _mm512_loadu_si512(b + 64 * h);
        __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h)));
        __m512i h01 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(q, sh01), m2), 4);
        __m512i h23 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(q, sh23), m2), 4);
        k->c[2 * h] = _mm512_or_si512(_mm512_and_si512(l, m4), h01);
        k->c[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4), h23);
    }
    __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 192)));
    for (int j = 0; j < 4; j++) { /* int16 lane i of chunk j: elements 64j + 2i, +1: scale 4j + i / 8 */
        __m512i idx = _mm512_set_epi64(0x0001000100010001LL * (4 * j + 3), 0x0001000100010001LL * (4 * j + 3),
                                       0x0001000100010001LL * (4 * j + 2), 0x0001000100010001LL * (4 * j + 2),
                                       0x0001000100010001LL * (4 * j + 1), 0x0001000100010001LL * (4 * j + 1),
                                       0x0001000100010001LL * (4 * j), 0x0001000100010001LL * (4 * j));
        k->s[j] = _mm512_permutexvar_epi16(idx, _mm512_castsi256_si512(sc));
    }
    k->ms = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc, 5)); /* -32 x scale */
    k->d = kq_f16(b + 208);
    k->dmin = 0;
}

/* One super-block against one token's 256 activations (q), their d and sums per 16. */
AI void block_dot(const kblock *k, int q4k, const int8_t *q, float da, const int16_t *bs, __m512 *acc, __m256 *accm) {
    __m512i is = _mm512_setzero_si512();
    for (int j = 0; j < 4; j++) {
        __m512i p = _mm512_maddubs_epi16(k->c[j], _mm512_loadu_si512(q + 64 * j));
        is = _mm512_add_epi32(is, _mm512_madd_epi16(p, k->s[j]));
    }
    __m256i corr = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bs), k->ms);
    if (q4k) {
        *accm = _mm256_fmadd_ps(_mm256_set1_ps(k->dmin * da), _mm256_cvtepi32_ps(corr), *accm);
    } else {
        is = _mm512_add_epi32(is, _mm512_zextsi256_si512(corr));
    }
    *acc = _mm512_fmadd_ps(_mm512_set1_ps(k->d * da), _mm512_cvtepi32_ps(is), *acc);
}

/* Q4_K, Q5_K or Q6_K (t) */
AI void decode16(xllm_dtype t, const uint8_t *b, kblock *k) {
    if (t == XLLM_DT_Q6_K) decode_q6k(b, k);
    else decode_q45k(b, k, t == XLLM_DT_Q5_K);
}

AI void dot16(xllm_dtype t, const kblock *k, const int8_t *q, float da, const int16_t *bs, __m512 *acc, __m256 *accm) {
    block_dot(k, t != XLLM_DT_Q6_K, q, da, bs, acc, accm); /* Q4_K and Q5_K have mins */
}

AI __m512 zero16(void) { return _mm512_setzero_ps(); }

KQ_DRIVER(mm16, kblock, __m512, __m256, zero16, kq_zero8, decode16, dot16, reduce1, kq_hsum8)

void kq_matmul_avx512(const matrix *W, const void *act, size_t astride, int T, const float *bias, float *y,
                      size_t ldy, int64_t r0, int64_t r1, void *scratch) {
    (void)scratch;
    if (W->dtype == XLLM_DT_Q4_K) mm16(XLLM_DT_Q4_K, W, act, astride, T, bias, y, ldy, r0, r1);
    else if (W->dtype == XLLM_DT_Q5_K) mm16(XLLM_DT_Q5_K, W, act, astride, T, bias, y, ldy, r0, r1);
    else if (W->dtype == XLLM_DT_Q6_K) mm16(XLLM_DT_Q6_K, W, act, astride, T, bias, y, ldy, r0, r1);
    else kq_matmul_x86_256(W, act, astride, T, bias, y, ldy, r0, r1);
}

#else
typedef int xllm_no_avx512_on_this_arch;
#endif
