/*
 * attn_kernels_avx512.c - attention inner loops with AVX-512F: 4 keys' dot products at once,
 * one transposing reduction; values accumulated 64 dims at a time. The multi-query loops
 * (K/V sharing) tile 4 queries x 4 keys (16 accumulators) for scores and 4 queries x 64 dims
 * for values, with the per-key arithmetic of the single-query loops.
 */
#if defined(__x86_64__)
#include "backend/cpu/attn_kernels.h"

#include "backend/cpu/simd_avx512.h"

#include <immintrin.h>

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

/* Scores of Q (1..4, a constant after inlining) queries, rows of q ldq apart,
 * against 4 keys: each query's 4 accumulators are exactly dot4's (same fma
 * sequence over d, same masked tail) and go through the same reduce4. */
AI void dotQ4(const int Q, const float *q, size_t ldq, const float *k0, const float *k1, const float *k2,
              const float *k3, int hd, __m128 *res) {
    __m512 a[4][4];
    for (int r = 0; r < Q; r++) a[r][0] = a[r][1] = a[r][2] = a[r][3] = _mm512_setzero_ps();
    int d = 0;
    for (; d + 16 <= hd; d += 16) {
        __m512 v0 = _mm512_loadu_ps(k0 + d), v1 = _mm512_loadu_ps(k1 + d);
        __m512 v2 = _mm512_loadu_ps(k2 + d), v3 = _mm512_loadu_ps(k3 + d);
        for (int r = 0; r < Q; r++) {
            __m512 qv = _mm512_loadu_ps(q + (size_t)r * ldq + d);
            a[r][0] = _mm512_fmadd_ps(qv, v0, a[r][0]);
            a[r][1] = _mm512_fmadd_ps(qv, v1, a[r][1]);
            a[r][2] = _mm512_fmadd_ps(qv, v2, a[r][2]);
            a[r][3] = _mm512_fmadd_ps(qv, v3, a[r][3]);
        }
    }
    if (d < hd) {
        __mmask16 m = (__mmask16)((1u << (hd - d)) - 1);
        __m512 v0 = _mm512_maskz_loadu_ps(m, k0 + d), v1 = _mm512_maskz_loadu_ps(m, k1 + d);
        __m512 v2 = _mm512_maskz_loadu_ps(m, k2 + d), v3 = _mm512_maskz_loadu_ps(m, k3 + d);
        for (int r = 0; r < Q; r++) {
            __m512 qv = _mm512_maskz_loadu_ps(m, q + (size_t)r * ldq + d);
            a[r][0] = _mm512_fmadd_ps(qv, v0, a[r][0]);
            a[r][1] = _mm512_fmadd_ps(qv, v1, a[r][1]);
            a[r][2] = _mm512_fmadd_ps(qv, v2, a[r][2]);
            a[r][3] = _mm512_fmadd_ps(qv, v3, a[r][3]);
        }
    }
    for (int r = 0; r < Q; r++) res[r] = reduce4(a[r][0], a[r][1], a[r][2], a[r][3]);
}

/* Queries [r0, r0 + Q) against keys i..i+3 (kp: repeated past the end; only
 * the first `keep` scores are stored). */
AI void scores_tile(const int Q, const float *q, size_t ldq, const float *const *kp, int hd, __m128 sc, float *out,
                    size_t ldo, int keep) {
    __m128 res[4];
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
        for (; r + 4 <= nq; r += 4) scores_tile(4, q + (size_t)r * ldq, ldq, kp, hd, sc, out + (size_t)r * ldo + i, ldo, keep);
        const float *qr = q + (size_t)r * ldq;
        float *o = out + (size_t)r * ldo + i;
        switch (nq - r) {
        case 3: scores_tile(3, qr, ldq, kp, hd, sc, o, ldo, keep); break;
        case 2: scores_tile(2, qr, ldq, kp, hd, sc, o, ldo, keep); break;
        case 1: scores_tile(1, qr, ldq, kp, hd, sc, o, ldo, keep); break;
        default: break;
        }
    }
}

/* Q (1..4) queries' accumulators over the same values: per element the same
 * fma sequence (keys in order) as attn_accum, 64 dims then 16 (masked). */
AI void accum_tile(const int Q, float *acc, size_t lda, const float *w, size_t ldw, const float *v, size_t stride, int n,
                   int hd) {
    int d = 0;
    for (; d + 64 <= hd; d += 64) {
        __m512 a[4][4];
        for (int r = 0; r < Q; r++)
            for (int c = 0; c < 4; c++) a[r][c] = _mm512_loadu_ps(acc + (size_t)r * lda + d + 16 * c);
        const float *vp = v + d;
        for (int i = 0; i < n; i++, vp += stride) {
            __m512 v0 = _mm512_loadu_ps(vp), v1 = _mm512_loadu_ps(vp + 16);
            __m512 v2 = _mm512_loadu_ps(vp + 32), v3 = _mm512_loadu_ps(vp + 48);
            for (int r = 0; r < Q; r++) {
                __m512 wi = _mm512_set1_ps(w[(size_t)r * ldw + (size_t)i]);
                a[r][0] = _mm512_fmadd_ps(wi, v0, a[r][0]);
                a[r][1] = _mm512_fmadd_ps(wi, v1, a[r][1]);
                a[r][2] = _mm512_fmadd_ps(wi, v2, a[r][2]);
                a[r][3] = _mm512_fmadd_ps(wi, v3, a[r][3]);
            }
        }
        for (int r = 0; r < Q; r++)
            for (int c = 0; c < 4; c++) _mm512_storeu_ps(acc + (size_t)r * lda + d + 16 * c, a[r][c]);
    }
    for (; d < hd; d += 16) {
        __mmask16 m = hd - d >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (hd - d)) - 1);
        __m512 a[4];
        for (int r = 0; r < Q; r++) a[r] = _mm512_maskz_loadu_ps(m, acc + (size_t)r * lda + d);
        const float *vp = v + d;
        for (int i = 0; i < n; i++, vp += stride) {
            __m512 vv = _mm512_maskz_loadu_ps(m, vp);
            for (int r = 0; r < Q; r++) a[r] = _mm512_fmadd_ps(_mm512_set1_ps(w[(size_t)r * ldw + (size_t)i]), vv, a[r]);
        }
        for (int r = 0; r < Q; r++) _mm512_mask_storeu_ps(acc + (size_t)r * lda + d, m, a[r]);
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

/* xllm_exp_nonpos(x) on 16 lanes: its operations one intrinsic each, in its
 * order (never fused: this file has -mfma, and a compiler could contract the
 * C version), so every lane gives the reference's bits. */
AI __m512 exp_nonpos16(__m512 x) {
    const __m512 magic = _mm512_set1_ps(12582912.0f);
    __m512 tt = _mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), magic);
    __m512 n = _mm512_sub_ps(tt, magic);
    __m512 r = _mm512_sub_ps(_mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(0.693145751953125f))),
                             _mm512_mul_ps(n, _mm512_set1_ps(1.428606765330187e-06f)));
    __m512 q = _mm512_set1_ps(1.0f / 5040.0f);
    q = _mm512_add_ps(_mm512_mul_ps(q, r), _mm512_set1_ps(1.0f / 720.0f));
    q = _mm512_add_ps(_mm512_mul_ps(q, r), _mm512_set1_ps(1.0f / 120.0f));
    q = _mm512_add_ps(_mm512_mul_ps(q, r), _mm512_set1_ps(1.0f / 24.0f));
    q = _mm512_add_ps(_mm512_mul_ps(q, r), _mm512_set1_ps(1.0f / 6.0f));
    q = _mm512_add_ps(_mm512_mul_ps(q, r), _mm512_set1_ps(0.5f));
    q = _mm512_add_ps(_mm512_mul_ps(q, r), _mm512_set1_ps(1.0f));
    q = _mm512_add_ps(_mm512_mul_ps(q, r), _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(
        _mm512_add_epi32(_mm512_sub_epi32(_mm512_castps_si512(tt), _mm512_set1_epi32(0x4B400000)), _mm512_set1_epi32(127)),
        23);
    __m512 y = _mm512_mul_ps(q, _mm512_castsi512_ps(e));
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ), y);
}

static void exp_row(float *s, int n, float mx) {
    const __m512 m = _mm512_set1_ps(mx);
    int i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(s + i, exp_nonpos16(_mm512_sub_ps(_mm512_loadu_ps(s + i), m)));
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(s + i, k, exp_nonpos16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + i), m)));
    }
}

static void attn_softmax(float *s, size_t lds, int nq, const int *n, float *part, size_t pst) {
    attn_softmax_rows(s, lds, nq, n, part, pst, exp_row);
}

const cpu_attn_kernels cpu_attn_avx512 = {.scores = attn_scores,
                                          .accum = attn_accum,
                                          .scores_multi = attn_scores_multi,
                                          .accum_multi = attn_accum_multi,
                                          .softmax = attn_softmax};
#else
typedef int xllm_no_cpu_attn_avx512_on_this_arch;
#endif
