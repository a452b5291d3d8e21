/*
 * attn_kernels_avx512.c - attention inner loops with AVX-512F: 4 keys' dot products at once,
 * one transposing reduction; values accumulated 64 dims at a time.
 */
#if defined(__x86_64__)
#include "backend/cpu/attn_kernels.h"

#include <immintrin.h>

#define AI static inline __attribute__((always_inline))

/* The 16-lane sums of 4 accumulators at once (transpose and add); every key
 * goes through this, so its score does not depend on its neighbours. */
AI __m128 reduce4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    __m512 x = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
    __m512 y = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
    __m512 z = _mm512_add_ps(_mm512_shuffle_ps(x, y, 0x44), _mm512_shuffle_ps(x, y, 0xEE));
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(z), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(z), 1)));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* Scores of 4 keys (k0..k3 may repeat for a partial group). */
AI __m128 dot4(const float *q, const float *k0, const float *k1, const float *k2, const float *k3, int hd) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int d = 0;
    for (; d + 16 <= hd; d += 16) {
        __m512 qv = _mm512_loadu_ps(q + d);
        a0 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k0 + d), a0);
        a1 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k1 + d), a1);
        a2 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k2 + d), a2);
        a3 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k3 + d), a3);
    }
    if (d < hd) {
        __mmask16 m = (__mmask16)((1u << (hd - d)) - 1);
        __m512 qv = _mm512_maskz_loadu_ps(m, q + d);
        a0 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k0 + d), a0);
        a1 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k1 + d), a1);
        a2 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k2 + d), a2);
        a3 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k3 + d), a3);
    }
    return reduce4(a0, a1, a2, a3);
}

static void attn_scores(const float *q, const float *k, size_t stride, int n, int hd, float scale, float *out) {
    const __m128 sc = _mm_set1_ps(scale);
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        const float *kp = k + (size_t)i * stride;
        _mm_storeu_ps(out + i, _mm_mul_ps(dot4(q, kp, kp + stride, kp + 2 * stride, kp + 3 * stride, hd), sc));
    }
    if (i < n) { /* the last keys, repeated to fill the group */
        const float *kp[4];
        for (int j = 0; j < 4; j++) kp[j] = k + (size_t)(i + j < n ? i + j : n - 1) * stride;
        float r[4];
        _mm_storeu_ps(r, _mm_mul_ps(dot4(q, kp[0], kp[1], kp[2], kp[3], hd), sc));
        for (int j = 0; i + j < n; j++) out[i + j] = r[j];
    }
}

static void attn_accum(float *acc, const float *w, const float *v, size_t stride, int n, int hd) {
    int d = 0;
    for (; d + 64 <= hd; d += 64) {
        __m512 a0 = _mm512_loadu_ps(acc + d), a1 = _mm512_loadu_ps(acc + d + 16);
        __m512 a2 = _mm512_loadu_ps(acc + d + 32), a3 = _mm512_loadu_ps(acc + d + 48);
        const float *vp = v + d;
        for (int i = 0; i < n; i++, vp += stride) {
            __m512 wi = _mm512_set1_ps(w[i]);
            a0 = _mm512_fmadd_ps(wi, _mm512_loadu_ps(vp), a0);
            a1 = _mm512_fmadd_ps(wi, _mm512_loadu_ps(vp + 16), a1);
            a2 = _mm512_fmadd_ps(wi, _mm512_loadu_ps(vp + 32), a2);
            a3 = _mm512_fmadd_ps(wi, _mm512_loadu_ps(vp + 48), a3);
        }
        _mm512_storeu_ps(acc + d, a0);
        _mm512_storeu_ps(acc + d + 16, a1);
        _mm512_storeu_ps(acc + d + 32, a2);
        _mm512_storeu_ps(acc + d + 48, a3);
    }
    for (; d < hd; d += 16) {
        __mmask16 m = hd - d >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (hd - d)) - 1);
        __m512 a = _mm512_maskz_loadu_ps(m, acc + d);
        const float *vp = v + d;
        for (int i = 0; i < n; i++, vp += stride) a = _mm512_fmadd_ps(_mm512_set1_ps(w[i]), _mm512_maskz_loadu_ps(m, vp), a);
        _mm512_mask_storeu_ps(acc + d, m, a);
    }
}

const cpu_attn_kernels cpu_attn_avx512 = {.scores = attn_scores, .accum = attn_accum};
#else
typedef int xllm_no_cpu_attn_avx512_on_this_arch;
#endif
