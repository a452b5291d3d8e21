/*
 * attn_kernels_avx2.c - attention inner loops with AVX2+FMA: 4 keys' dot products at once,
 * one transposing reduction.
 */
#if defined(__x86_64__)
#include "backend/cpu/attn_kernels.h"

#include <immintrin.h>

#define AI static inline __attribute__((always_inline))

AI __m256i tail_mask(int n) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); }

/* The 8-lane sums of 4 accumulators at once (transpose and add); every key
 * goes through this, so its score does not depend on its neighbours. */
AI __m128 reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    __m256 x = _mm256_add_ps(_mm256_unpacklo_ps(a0, a1), _mm256_unpackhi_ps(a0, a1));
    __m256 y = _mm256_add_ps(_mm256_unpacklo_ps(a2, a3), _mm256_unpackhi_ps(a2, a3));
    __m256 z = _mm256_add_ps(_mm256_shuffle_ps(x, y, 0x44), _mm256_shuffle_ps(x, y, 0xEE));
    return _mm_add_ps(_mm256_castps256_ps128(z), _mm256_extractf128_ps(z, 1));
}

AI __m128 dot4(const float *q, const float *k0, const float *k1, const float *k2, const float *k3, int hd) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int d = 0;
    for (; d + 8 <= hd; d += 8) {
        __m256 qv = _mm256_loadu_ps(q + d);
        a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + d), a0);
        a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k1 + d), a1);
        a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k2 + d), a2);
        a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k3 + d), a3);
    }
    if (d < hd) {
        __m256i m = tail_mask(hd - d);
        __m256 qv = _mm256_maskload_ps(q + d, m);
        a0 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k0 + d, m), a0);
        a1 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k1 + d, m), a1);
        a2 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k2 + d, m), a2);
        a3 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k3 + d, m), a3);
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
    for (; d + 16 <= hd; d += 16) {
        __m256 a0 = _mm256_loadu_ps(acc + d), a1 = _mm256_loadu_ps(acc + d + 8);
        const float *vp = v + d;
        for (int i = 0; i < n; i++, vp += stride) {
            __m256 wi = _mm256_set1_ps(w[i]);
            a0 = _mm256_fmadd_ps(wi, _mm256_loadu_ps(vp), a0);
            a1 = _mm256_fmadd_ps(wi, _mm256_loadu_ps(vp + 8), a1);
        }
        _mm256_storeu_ps(acc + d, a0);
        _mm256_storeu_ps(acc + d + 8, a1);
    }
    for (; d < hd; d += 8) {
        __m256i m = tail_mask(hd - d < 8 ? hd - d : 8);
        __m256 a = _mm256_maskload_ps(acc + d, m);
        const float *vp = v + d;
        for (int i = 0; i < n; i++, vp += stride) a = _mm256_fmadd_ps(_mm256_set1_ps(w[i]), _mm256_maskload_ps(vp, m), a);
        _mm256_maskstore_ps(acc + d, m, a);
    }
}

const cpu_attn_kernels cpu_attn_avx2 = {.scores = attn_scores, .accum = attn_accum};
#else
typedef int xllm_no_cpu_attn_avx2_on_this_arch;
#endif
