/*
 * kq_kernels_avx512.c - AVX-512 (BW, VL, VNNI) matmuls for llama.cpp's block
 * types (quant/kquant.h), compiled with the avx512 level's target flags:
 * Q4_K and Q6_K in the 16-row "KR16" layout of kq_pack_avx512.c (repacked at
 * load), IQ4_NL, IQ4_XS, Q5_0, Q5_1 in kq_pack32_avx512.c's "P32" and Q2_K, Q3_K in
 * kq_pack23_avx512.c's "Q23" (cols a multiple of 256), Q5_K in 512-bit vectors below, the other types through the 256-bit
 * code of kq_kernels_x86.h (AVX-512VL encodings of the same scheme).
 *
 * Q5_K: a super-block (256 weights) is decoded once per row into registers:
 * the codes in element order as unsigned bytes (0..31), 4 vectors of 64; the
 * sub-block scales as int16, one per pair of elements; and a 16-lane int16
 * vector for the activations' sums per 16 (each sub-block's min, twice). Then
 * per token: vpmaddubsw (codes x int8 activations, pairs, exact: |sum| <=
 * 16002) and vpmaddwd by the scales give int32 lanes, summed exactly over the
 * super-block; vpmaddwd of the sums per 16 gives the min term, exact too.
 * Float part per super-block b, 16 lanes:
 *   acc = fma(d_w * d_a, float(int lanes), acc)
 *   accm = fma(dmin_w * d_a, float(min lanes), accm)  (8 lanes)
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

/* Q5_K (Q4_K with t: the same decoder without the fifth bits) */
AI void decode16(dtype_t t, const uint8_t *b, kblock *k) { decode_q45k(b, k, t == XLLM_DT_Q5_K); }

AI void dot16(dtype_t t, const kblock *k, const int8_t *q, float da, const int16_t *bs, __m512 *acc, __m256 *accm) {
    (void)t;
    block_dot(k, 1, q, da, bs, acc, accm); /* Q4_K and Q5_K have mins */
}

AI __m512 zero16(void) { return _mm512_setzero_ps(); }

KQ_DRIVER(mm16, kblock, __m512, __m256, zero16, kq_zero8, decode16, dot16, reduce1, kq_hsum8)

void kq_matmul_avx512(const matrix *W, const void *act, size_t astride, int T, const float *bias, float *y,
                      size_t ldy, int64_t r0, int64_t r1, void *scratch) {
    if (kq_r16_type(W)) kq_r16_matmul(W, act, astride, T, bias, y, ldy, r0, r1, scratch); /* Q4_K, Q6_K */
    else if (kq_p32_type(W)) kq_p32_matmul(W, act, astride, T, bias, y, ldy, r0, r1, scratch); /* IQ4_NL, IQ4_XS, Q5_x */
    else if (kq_q23_type(W)) kq_q23_matmul(W, act, astride, T, bias, y, ldy, r0, r1, scratch); /* Q2_K, Q3_K */
    else if (W->dtype == XLLM_DT_Q5_K) mm16(XLLM_DT_Q5_K, W, act, astride, T, bias, y, ldy, r0, r1);
    else kq_matmul_x86_256(W, act, astride, T, bias, y, ldy, r0, r1);
}

#else
typedef int no_avx512_on_this_arch;
#endif
