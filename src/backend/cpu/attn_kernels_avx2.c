/*
 * attn_kernels_avx2.c - attention inner loops with AVX2+FMA: 4 keys' dot products at once,
 * one transposing reduction. The multi-query loops (K/V sharing) tile 2 queries x 4 keys
 * (8 accumulators: 16 registers hold no more) for scores and 4 queries x 16 dims for values,
 * with the per-key arithmetic of the single-query loops.
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

/* Scores of Q (1 or 2, a constant after inlining) queries, rows of q ldq
 * apart, against 4 keys: each query's accumulators are exactly dot4's (same
 * fma sequence over d, same masked tail) and go through the same reduce4. */
AI void dotQ4(const int Q, const float *q, size_t ldq, const float *k0, const float *k1, const float *k2,
              const float *k3, int hd, __m128 *res) {
    __m256 a[2][4];
    for (int r = 0; r < Q; r++) a[r][0] = a[r][1] = a[r][2] = a[r][3] = _mm256_setzero_ps();
    int d = 0;
    for (; d + 8 <= hd; d += 8) {
        __m256 v0 = _mm256_loadu_ps(k0 + d), v1 = _mm256_loadu_ps(k1 + d);
        __m256 v2 = _mm256_loadu_ps(k2 + d), v3 = _mm256_loadu_ps(k3 + d);
        for (int r = 0; r < Q; r++) {
            __m256 qv = _mm256_loadu_ps(q + (size_t)r * ldq + d);
            a[r][0] = _mm256_fmadd_ps(qv, v0, a[r][0]);
            a[r][1] = _mm256_fmadd_ps(qv, v1, a[r][1]);
            a[r][2] = _mm256_fmadd_ps(qv, v2, a[r][2]);
            a[r][3] = _mm256_fmadd_ps(qv, v3, a[r][3]);
        }
    }
    if (d < hd) {
        __m256i m = tail_mask(hd - d);
        __m256 v0 = _mm256_maskload_ps(k0 + d, m), v1 = _mm256_maskload_ps(k1 + d, m);
        __m256 v2 = _mm256_maskload_ps(k2 + d, m), v3 = _mm256_maskload_ps(k3 + d, m);
        for (int r = 0; r < Q; r++) {
            __m256 qv = _mm256_maskload_ps(q + (size_t)r * ldq + d, m);
            a[r][0] = _mm256_fmadd_ps(qv, v0, a[r][0]);
            a[r][1] = _mm256_fmadd_ps(qv, v1, a[r][1]);
            a[r][2] = _mm256_fmadd_ps(qv, v2, a[r][2]);
            a[r][3] = _mm256_fmadd_ps(qv, v3, a[r][3]);
        }
    }
    for (int r = 0; r < Q; r++) res[r] = reduce4(a[r][0], a[r][1], a[r][2], a[r][3]);
}

/* Queries [0, Q) against keys kp[0..3] (repeated past the end; only the
 * first `keep` scores are stored). */
AI void scores_tile(const int Q, const float *q, size_t ldq, const float *const *kp, int hd, __m128 sc, float *out,
                    size_t ldo, int keep) {
    __m128 res[2];
    dotQ4(Q, q, ldq, kp[0], kp[1], kp[2], kp[3], hd, res);
    for (int r = 0; r < Q; r++) {
        __m128 s = _mm_mul_ps(res[r], sc);
        if (keep == 4) {
            _mm_storeu_ps(out + (size_t)r * ldo, s);
        } else {
            float t[4];
            _mm_storeu_ps(t, s);
            for (int j = 0; j < keep; j++) out[(size_t)r * ldo + (size_t)j] = t[j];
        }
    }
}

static void attn_scores_multi(const float *q, size_t ldq, int nq, const float *k, size_t stride, int n, int hd,
                              float scale, float *out, size_t ldo) {
    const __m128 sc = _mm_set1_ps(scale);
    for (int i = 0; i < n; i += 4) {
        const float *kp[4];
        for (int j = 0; j < 4; j++) kp[j] = k + (size_t)(i + j < n ? i + j : n - 1) * stride;
        int keep = n - i < 4 ? n - i : 4, r = 0;
        for (; r + 2 <= nq; r += 2) scores_tile(2, q + (size_t)r * ldq, ldq, kp, hd, sc, out + (size_t)r * ldo + i, ldo, keep);
        if (r < nq) scores_tile(1, q + (size_t)r * ldq, ldq, kp, hd, sc, out + (size_t)r * ldo + i, ldo, keep);
    }
}

/* Q (1..4) queries' accumulators over the same values: per element the same
 * fma sequence (keys in order) as attn_accum, 16 dims then 8 (masked). */
AI void accum_tile(const int Q, float *acc, size_t lda, const float *w, size_t ldw, const float *v, size_t stride, int n,
                   int hd) {
    int d = 0;
    for (; d + 16 <= hd; d += 16) {
        __m256 a[4][2];
        for (int r = 0; r < Q; r++) {
            a[r][0] = _mm256_loadu_ps(acc + (size_t)r * lda + d);
            a[r][1] = _mm256_loadu_ps(acc + (size_t)r * lda + d + 8);
        }
        const float *vp = v + d;
        for (int i = 0; i < n; i++, vp += stride) {
            __m256 v0 = _mm256_loadu_ps(vp), v1 = _mm256_loadu_ps(vp + 8);
            for (int r = 0; r < Q; r++) {
                __m256 wi = _mm256_set1_ps(w[(size_t)r * ldw + (size_t)i]);
                a[r][0] = _mm256_fmadd_ps(wi, v0, a[r][0]);
                a[r][1] = _mm256_fmadd_ps(wi, v1, a[r][1]);
            }
        }
        for (int r = 0; r < Q; r++) {
            _mm256_storeu_ps(acc + (size_t)r * lda + d, a[r][0]);
            _mm256_storeu_ps(acc + (size_t)r * lda + d + 8, a[r][1]);
        }
    }
    for (; d < hd; d += 8) {
        __m256i m = tail_mask(hd - d < 8 ? hd - d : 8);
        __m256 a[4];
        for (int r = 0; r < Q; r++) a[r] = _mm256_maskload_ps(acc + (size_t)r * lda + d, m);
        const float *vp = v + d;
        for (int i = 0; i < n; i++, vp += stride) {
            __m256 vv = _mm256_maskload_ps(vp, m);
            for (int r = 0; r < Q; r++) a[r] = _mm256_fmadd_ps(_mm256_set1_ps(w[(size_t)r * ldw + (size_t)i]), vv, a[r]);
        }
        for (int r = 0; r < Q; r++) _mm256_maskstore_ps(acc + (size_t)r * lda + d, m, a[r]);
    }
}

static void attn_accum_multi(float *acc, size_t lda, int nq, const float *w, size_t ldw, const float *v, size_t stride,
                             int n, int hd) {
    int r = 0;
    for (; r + 4 <= nq; r += 4) accum_tile(4, acc + (size_t)r * lda, lda, w + (size_t)r * ldw, ldw, v, stride, n, hd);
    float *a = acc + (size_t)r * lda;
    const float *wr = w + (size_t)r * ldw;
    switch (nq - r) {
    case 3: accum_tile(3, a, lda, wr, ldw, v, stride, n, hd); break;
    case 2: accum_tile(2, a, lda, wr, ldw, v, stride, n, hd); break;
    case 1: accum_tile(1, a, lda, wr, ldw, v, stride, n, hd); break;
    default: break;
    }
}

/* xllm_exp_nonpos(x) on 8 lanes: its operations one intrinsic each, in its
 * order (never fused: this file has -mfma, and a compiler could contract the
 * C version), so every lane gives the reference's bits. */
AI __m256 exp_nonpos8(__m256 x) {
    const __m256 magic = _mm256_set1_ps(12582912.0f);
    __m256 tt = _mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), magic);
    __m256 n = _mm256_sub_ps(tt, magic);
    __m256 r = _mm256_sub_ps(_mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(0.693145751953125f))),
                             _mm256_mul_ps(n, _mm256_set1_ps(1.428606765330187e-06f)));
    __m256 q = _mm256_set1_ps(1.0f / 5040.0f);
    q = _mm256_add_ps(_mm256_mul_ps(q, r), _mm256_set1_ps(1.0f / 720.0f));
    q = _mm256_add_ps(_mm256_mul_ps(q, r), _mm256_set1_ps(1.0f / 120.0f));
    q = _mm256_add_ps(_mm256_mul_ps(q, r), _mm256_set1_ps(1.0f / 24.0f));
    q = _mm256_add_ps(_mm256_mul_ps(q, r), _mm256_set1_ps(1.0f / 6.0f));
    q = _mm256_add_ps(_mm256_mul_ps(q, r), _mm256_set1_ps(0.5f));
    q = _mm256_add_ps(_mm256_mul_ps(q, r), _mm256_set1_ps(1.0f));
    q = _mm256_add_ps(_mm256_mul_ps(q, r), _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_sub_epi32(_mm256_castps_si256(tt), _mm256_set1_epi32(0x4B400000)), _mm256_set1_epi32(127)),
        23);
    __m256 y = _mm256_mul_ps(q, _mm256_castsi256_ps(e));
    return _mm256_and_ps(y, _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ));
}

static void exp_row(float *s, int n, float mx) {
    const __m256 m = _mm256_set1_ps(mx);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(s + i, exp_nonpos8(_mm256_sub_ps(_mm256_loadu_ps(s + i), m)));
    if (i < n) {
        __m256i k = tail_mask(n - i);
        _mm256_maskstore_ps(s + i, k, exp_nonpos8(_mm256_sub_ps(_mm256_maskload_ps(s + i, k), m)));
    }
}

static void attn_softmax(float *s, size_t lds, int nq, const int *n, float *part, size_t pst) {
    attn_softmax_rows(s, lds, nq, n, part, pst, exp_row);
}

const cpu_attn_kernels cpu_attn_avx2 = {.scores = attn_scores,
                                        .accum = attn_accum,
                                        .scores_multi = attn_scores_multi,
                                        .accum_multi = attn_accum_multi,
                                        .softmax = attn_softmax};
#else
typedef int xllm_no_cpu_attn_avx2_on_this_arch;
#endif
