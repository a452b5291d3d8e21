/*
 * attn_kernels_avx2.c - attention inner loops with AVX2+FMA: 4 keys' dot products at once,
 * one transposing reduction. The multi-query loops (K/V sharing) tile 2 queries x 4 keys
 * (8 accumulators: 16 registers hold no more) for scores and 4 queries x 16 dims for values,
 * with the per-key arithmetic of the single-query loops. Every loop is a template over the
 * KV storage (kvq.h): K/V vectors come through ld8 / ld8_tail, which dequantize exactly
 * (f16 by vcvtph2ps, q8 as int8 -> f32 times the group's scale), so the f16 and q8 loops do
 * the f32 loops' arithmetic on the same values.
 */
#if defined(__x86_64__)
#include "backend/cpu/attn_kernels.h"

#include <immintrin.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

typedef const unsigned char *rowp;

AI __m256i tail_mask(int n) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); }

/* The 8-lane sums of 4 accumulators at once (transpose and add); every key
 * goes through this, so its score does not depend on its neighbours. */
AI __m128 reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    __m256 x = _mm256_add_ps(_mm256_unpacklo_ps(a0, a1), _mm256_unpackhi_ps(a0, a1));
    __m256 y = _mm256_add_ps(_mm256_unpacklo_ps(a2, a3), _mm256_unpackhi_ps(a2, a3));
    __m256 z = _mm256_add_ps(_mm256_shuffle_ps(x, y, 0x44), _mm256_shuffle_ps(x, y, 0xEE));
    return _mm_add_ps(_mm256_castps256_ps128(z), _mm256_extractf128_ps(z, 1));
}

/* 8 values of a stored row from element d (d + 8 <= hd), as f32, exactly. */
AI __m256 ld8(const int DT, rowp r, int d, int hd) {
    if (DT == KV_F32) return _mm256_loadu_ps((const float *)(const void *)r + d);
    if (DT == KV_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(r + 2 * (size_t)d)));
    int gs = kvq_group_shift(hd);
    const unsigned char *sp = r + hd + 2 * (d >> gs);
    __m256 sc;
    if (gs >= 3) { /* one scale for the 8 values */
        uint16_t h;
        memcpy(&h, sp, 2);
        sc = _mm256_set1_ps(_cvtsh_ss(h));
    } else { /* groups of 4: scales h0, h1 each over 4 lanes */
        int32_t h2;
        memcpy(&h2, sp, 4);
        __m128i y = _mm_unpacklo_epi16(_mm_cvtsi32_si128(h2), _mm_cvtsi32_si128(h2));
        sc = _mm256_cvtph_ps(_mm_unpacklo_epi32(y, y));
    }
    __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(r + d))));
    return _mm256_mul_ps(x, sc);
}

/* cnt (1..8) values from element d, zeros after (f32: the masked load). */
AI __m256 ld8_tail(const int DT, rowp r, int d, int cnt, int hd) {
    if (DT == KV_F32) return _mm256_maskload_ps((const float *)(const void *)r + d, tail_mask(cnt));
    if (cnt == 8) return ld8(DT, r, d, hd);
    float t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int i = 0; i < cnt; i++) t[i] = kvq_get(DT, r, hd, d + i);
    return _mm256_loadu_ps(t);
}

AI __m128 dot4(const int DT, const float *q, rowp k0, rowp k1, rowp k2, rowp k3, int hd) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int d = 0;
    for (; d + 8 <= hd; d += 8) {
        __m256 qv = _mm256_loadu_ps(q + d);
        a0 = _mm256_fmadd_ps(qv, ld8(DT, k0, d, hd), a0);
        a1 = _mm256_fmadd_ps(qv, ld8(DT, k1, d, hd), a1);
        a2 = _mm256_fmadd_ps(qv, ld8(DT, k2, d, hd), a2);
        a3 = _mm256_fmadd_ps(qv, ld8(DT, k3, d, hd), a3);
    }
    if (d < hd) {
        __m256i m = tail_mask(hd - d);
        __m256 qv = _mm256_maskload_ps(q + d, m);
        a0 = _mm256_fmadd_ps(qv, ld8_tail(DT, k0, d, hd - d, hd), a0);
        a1 = _mm256_fmadd_ps(qv, ld8_tail(DT, k1, d, hd - d, hd), a1);
        a2 = _mm256_fmadd_ps(qv, ld8_tail(DT, k2, d, hd - d, hd), a2);
        a3 = _mm256_fmadd_ps(qv, ld8_tail(DT, k3, d, hd - d, hd), a3);
    }
    return reduce4(a0, a1, a2, a3);
}

AI void scores_T(const int DT, const float *q, rowp k, size_t stride, int n, int hd, float scale, float *out) {
    const __m128 sc = _mm_set1_ps(scale);
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        rowp kp = k + (size_t)i * stride;
        _mm_storeu_ps(out + i, _mm_mul_ps(dot4(DT, q, kp, kp + stride, kp + 2 * stride, kp + 3 * stride, hd), sc));
    }
    if (i < n) { /* the last keys, repeated to fill the group */
        rowp kp[4];
        for (int j = 0; j < 4; j++) kp[j] = k + (size_t)(i + j < n ? i + j : n - 1) * stride;
        float r[4];
        _mm_storeu_ps(r, _mm_mul_ps(dot4(DT, q, kp[0], kp[1], kp[2], kp[3], hd), sc));
        for (int j = 0; i + j < n; j++) out[i + j] = r[j];
    }
}

AI void accum_T(const int DT, float *acc, const float *w, rowp v, size_t stride, int n, int hd) {
    int d = 0;
    for (; d + 16 <= hd; d += 16) {
        __m256 a0 = _mm256_loadu_ps(acc + d), a1 = _mm256_loadu_ps(acc + d + 8);
        rowp vp = v;
        for (int i = 0; i < n; i++, vp += stride) {
            __m256 wi = _mm256_set1_ps(w[i]);
            a0 = _mm256_fmadd_ps(wi, ld8(DT, vp, d, hd), a0);
            a1 = _mm256_fmadd_ps(wi, ld8(DT, vp, d + 8, hd), a1);
        }
        _mm256_storeu_ps(acc + d, a0);
        _mm256_storeu_ps(acc + d + 8, a1);
    }
    for (; d < hd; d += 8) {
        __m256i m = tail_mask(hd - d < 8 ? hd - d : 8);
        __m256 a = _mm256_maskload_ps(acc + d, m);
        int cnt = hd - d < 8 ? hd - d : 8;
        rowp vp = v;
        for (int i = 0; i < n; i++, vp += stride)
            a = _mm256_fmadd_ps(_mm256_set1_ps(w[i]), ld8_tail(DT, vp, d, cnt, hd), a);
        _mm256_maskstore_ps(acc + d, m, a);
    }
}

/* Scores of Q (1 or 2, a constant after inlining) queries, rows of q ldq
 * apart, against 4 keys: each query's accumulators are exactly dot4's (same
 * fma sequence over d, same masked tail) and go through the same reduce4. */
AI void dotQ4(const int DT, const int Q, const float *q, size_t ldq, rowp k0, rowp k1, rowp k2, rowp k3, int hd,
              __m128 *res) {
    __m256 a[2][4];
    for (int r = 0; r < Q; r++) a[r][0] = a[r][1] = a[r][2] = a[r][3] = _mm256_setzero_ps();
    int d = 0;
    for (; d + 8 <= hd; d += 8) {
        __m256 v0 = ld8(DT, k0, d, hd), v1 = ld8(DT, k1, d, hd);
        __m256 v2 = ld8(DT, k2, d, hd), v3 = ld8(DT, k3, d, hd);
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
        __m256 v0 = ld8_tail(DT, k0, d, hd - d, hd), v1 = ld8_tail(DT, k1, d, hd - d, hd);
        __m256 v2 = ld8_tail(DT, k2, d, hd - d, hd), v3 = ld8_tail(DT, k3, d, hd - d, hd);
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
AI void scores_tile(const int DT, const int Q, const float *q, size_t ldq, const rowp *kp, int hd, __m128 sc,
                    float *out, size_t ldo, int keep) {
    __m128 res[2];
    dotQ4(DT, Q, q, ldq, kp[0], kp[1], kp[2], kp[3], hd, res);
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

AI void scores_multi_T(const int DT, const float *q, size_t ldq, int nq, rowp k, size_t stride, int n, int hd,
                       float scale, float *out, size_t ldo) {
    const __m128 sc = _mm_set1_ps(scale);
    for (int i = 0; i < n; i += 4) {
        rowp kp[4];
        for (int j = 0; j < 4; j++) kp[j] = k + (size_t)(i + j < n ? i + j : n - 1) * stride;
        int keep = n - i < 4 ? n - i : 4, r = 0;
        for (; r + 2 <= nq; r += 2)
            scores_tile(DT, 2, q + (size_t)r * ldq, ldq, kp, hd, sc, out + (size_t)r * ldo + i, ldo, keep);
        if (r < nq) scores_tile(DT, 1, q + (size_t)r * ldq, ldq, kp, hd, sc, out + (size_t)r * ldo + i, ldo, keep);
    }
}

/* Q (1..4) queries' accumulators over the same values: per element the same
 * fma sequence (keys in order) as attn_accum, 16 dims then 8 (masked). */
AI void accum_tile(const int DT, const int Q, float *acc, size_t lda, const float *w, size_t ldw, rowp v, size_t stride,
                   int n, int hd) {
    int d = 0;
    for (; d + 16 <= hd; d += 16) {
        __m256 a[4][2];
        for (int r = 0; r < Q; r++) {
            a[r][0] = _mm256_loadu_ps(acc + (size_t)r * lda + d);
            a[r][1] = _mm256_loadu_ps(acc + (size_t)r * lda + d + 8);
        }
        rowp vp = v;
        for (int i = 0; i < n; i++, vp += stride) {
            __m256 v0 = ld8(DT, vp, d, hd), v1 = ld8(DT, vp, d + 8, hd);
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
        int cnt = hd - d < 8 ? hd - d : 8;
        rowp vp = v;
        for (int i = 0; i < n; i++, vp += stride) {
            __m256 vv = ld8_tail(DT, vp, d, cnt, hd);
            for (int r = 0; r < Q; r++) a[r] = _mm256_fmadd_ps(_mm256_set1_ps(w[(size_t)r * ldw + (size_t)i]), vv, a[r]);
        }
        for (int r = 0; r < Q; r++) _mm256_maskstore_ps(acc + (size_t)r * lda + d, m, a[r]);
    }
}

AI void accum_multi_T(const int DT, float *acc, size_t lda, int nq, const float *w, size_t ldw, rowp v, size_t stride,
                      int n, int hd) {
    int r = 0;
    for (; r + 4 <= nq; r += 4) accum_tile(DT, 4, acc + (size_t)r * lda, lda, w + (size_t)r * ldw, ldw, v, stride, n, hd);
    float *a = acc + (size_t)r * lda;
    const float *wr = w + (size_t)r * ldw;
    switch (nq - r) {
    case 3: accum_tile(DT, 3, a, lda, wr, ldw, v, stride, n, hd); break;
    case 2: accum_tile(DT, 2, a, lda, wr, ldw, v, stride, n, hd); break;
    case 1: accum_tile(DT, 1, a, lda, wr, ldw, v, stride, n, hd); break;
    default: break;
    }
}

/* fast_exp_nonpos(x) on 8 lanes: its operations one intrinsic each, in its
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

/* attn_max_row_ref 8 lanes at a time: vmaxps(s, m) keeps m when s is NaN,
 * as the reference's s > m ? s : m does; the tail goes through the reference
 * loop. */
static float max_row(const float *s, int n) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 m0 = ninf, m1 = ninf;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        m0 = _mm256_max_ps(_mm256_loadu_ps(s + i), m0);
        m1 = _mm256_max_ps(_mm256_loadu_ps(s + i + 8), m1);
    }
    for (; i + 8 <= n; i += 8) m0 = _mm256_max_ps(_mm256_loadu_ps(s + i), m0);
    m0 = _mm256_max_ps(m0, m1);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m0), _mm256_extractf128_ps(m0, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return attn_max_row_from(_mm_cvtss_f32(h), s + i, n - i);
}

static void attn_softmax(float *s, size_t lds, int nq, const int *n, float *part, size_t pst) {
    attn_softmax_rows(s, lds, nq, n, part, pst, max_row, exp_row);
}

ATTN_KV_TABLE(cpu_attn_avx2, attn_softmax)
#else
typedef int no_cpu_attn_avx2_on_this_arch;
#endif
