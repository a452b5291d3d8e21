/*
 * attn_kernels_avx512.c - attention inner loops with AVX-512F: 4 keys' dot products at once,
 * one transposing reduction; values accumulated 64 dims at a time. The multi-query loops
 * (K/V sharing) tile 4 queries x 4 keys (16 accumulators) for scores and 4 queries x 64 dims
 * for values, with the per-key arithmetic of the single-query loops. Every loop is a template
 * over the KV storage (kvq.h): K/V vectors come through ld16 / ld16_tail, which dequantize
 * exactly (f16 by vcvtph2ps, q8 as int8 -> f32 times the group scales), so the f16 and q8
 * loops do the f32 loops' arithmetic on the same values.
 */
#if defined(__x86_64__)
#include "backend/cpu/attn_kernels.h"

#include "backend/cpu/simd_avx512.h"

#include <immintrin.h>
#include <string.h>

typedef const unsigned char *rowp;

/* 16 values of a stored row from element d (d + 16 <= hd), as f32, exactly. */
AI __m512 ld16(const int DT, rowp r, int d, int hd) {
    if (DT == KV_F32) return _mm512_loadu_ps((const float *)(const void *)r + d);
    if (DT == KV_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(r + 2 * (size_t)d)));
    int gs = kvq_group_shift(hd);
    const unsigned char *sp = r + hd + 2 * (d >> gs);
    __m512 sc;
    if (gs >= 4) { /* one scale for the 16 values */
        uint16_t h0;
        memcpy(&h0, sp, 2);
        sc = _mm512_set1_ps(_cvtsh_ss(h0));
    } else if (gs == 3) { /* groups of 8: two scales, 8 lanes each */
        uint16_t h0, h1;
        memcpy(&h0, sp, 2);
        memcpy(&h1, sp + 2, 2);
        sc = _mm512_cvtph_ps(_mm256_set_m128i(_mm_set1_epi16((short)h1), _mm_set1_epi16((short)h0)));
    } else { /* groups of 4: four scales, 4 lanes each */
        __m128i y = _mm_loadl_epi64((const __m128i *)(const void *)sp); /* h0..h3 */
        y = _mm_unpacklo_epi16(y, y);                                      /* h0 h0 h1 h1 h2 h2 h3 h3 */
        sc = _mm512_cvtph_ps(_mm256_set_m128i(_mm_unpackhi_epi32(y, y), _mm_unpacklo_epi32(y, y)));
    }
    __m512 x = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(r + d))));
    return _mm512_mul_ps(x, sc);
}

/* cnt (1..16) values from element d, zeros after (f32: the masked load). */
AI __m512 ld16_tail(const int DT, rowp r, int d, int cnt, int hd) {
    if (DT == KV_F32)
        return _mm512_maskz_loadu_ps(cnt >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << cnt) - 1),
                                     (const float *)(const void *)r + d);
    if (cnt == 16) return ld16(DT, r, d, hd);
    float t[16] = {0};
    for (int i = 0; i < cnt; i++) t[i] = kvq_get(DT, r, hd, d + i);
    return _mm512_loadu_ps(t);
}

/* Scores of 4 keys (k0..k3 may repeat for a partial group). */
AI __m128 dot4(const int DT, const float *q, rowp k0, rowp k1, rowp k2, rowp k3, int hd) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int d = 0;
    for (; d + 16 <= hd; d += 16) {
        __m512 qv = _mm512_loadu_ps(q + d);
        a0 = _mm512_fmadd_ps(qv, ld16(DT, k0, d, hd), a0);
        a1 = _mm512_fmadd_ps(qv, ld16(DT, k1, d, hd), a1);
        a2 = _mm512_fmadd_ps(qv, ld16(DT, k2, d, hd), a2);
        a3 = _mm512_fmadd_ps(qv, ld16(DT, k3, d, hd), a3);
    }
    if (d < hd) {
        __mmask16 m = (__mmask16)((1u << (hd - d)) - 1);
        __m512 qv = _mm512_maskz_loadu_ps(m, q + d);
        a0 = _mm512_fmadd_ps(qv, ld16_tail(DT, k0, d, hd - d, hd), a0);
        a1 = _mm512_fmadd_ps(qv, ld16_tail(DT, k1, d, hd - d, hd), a1);
        a2 = _mm512_fmadd_ps(qv, ld16_tail(DT, k2, d, hd - d, hd), a2);
        a3 = _mm512_fmadd_ps(qv, ld16_tail(DT, k3, d, hd - d, hd), a3);
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
    for (; d + 64 <= hd; d += 64) {
        __m512 a0 = _mm512_loadu_ps(acc + d), a1 = _mm512_loadu_ps(acc + d + 16);
        __m512 a2 = _mm512_loadu_ps(acc + d + 32), a3 = _mm512_loadu_ps(acc + d + 48);
        rowp vp = v;
        for (int i = 0; i < n; i++, vp += stride) {
            __m512 wi = _mm512_set1_ps(w[i]);
            a0 = _mm512_fmadd_ps(wi, ld16(DT, vp, d, hd), a0);
            a1 = _mm512_fmadd_ps(wi, ld16(DT, vp, d + 16, hd), a1);
            a2 = _mm512_fmadd_ps(wi, ld16(DT, vp, d + 32, hd), a2);
            a3 = _mm512_fmadd_ps(wi, ld16(DT, vp, d + 48, hd), a3);
        }
        _mm512_storeu_ps(acc + d, a0);
        _mm512_storeu_ps(acc + d + 16, a1);
        _mm512_storeu_ps(acc + d + 32, a2);
        _mm512_storeu_ps(acc + d + 48, a3);
    }
    for (; d < hd; d += 16) {
        __mmask16 m = hd - d >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (hd - d)) - 1);
        __m512 a = _mm512_maskz_loadu_ps(m, acc + d);
        rowp vp = v;
        for (int i = 0; i < n; i++, vp += stride) a = _mm512_fmadd_ps(_mm512_set1_ps(w[i]), ld16_tail(DT, vp, d, hd - d < 16 ? hd - d : 16, hd), a);
        _mm512_mask_storeu_ps(acc + d, m, a);
    }
}

/* Scores of Q (1..4, a constant after inlining) queries, rows of q ldq apart,
 * against 4 keys: each query's 4 accumulators are exactly dot4's (same fma
 * sequence over d, same masked tail) and go through the same reduce4. */
AI void dotQ4(const int DT, const int Q, const float *q, size_t ldq, rowp k0, rowp k1, rowp k2, rowp k3, int hd,
              __m128 *res) {
    __m512 a[4][4];
    for (int r = 0; r < Q; r++) a[r][0] = a[r][1] = a[r][2] = a[r][3] = _mm512_setzero_ps();
    int d = 0;
    for (; d + 16 <= hd; d += 16) {
        __m512 v0 = ld16(DT, k0, d, hd), v1 = ld16(DT, k1, d, hd);
        __m512 v2 = ld16(DT, k2, d, hd), v3 = ld16(DT, k3, d, hd);
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
        __m512 v0 = ld16_tail(DT, k0, d, hd - d, hd), v1 = ld16_tail(DT, k1, d, hd - d, hd);
        __m512 v2 = ld16_tail(DT, k2, d, hd - d, hd), v3 = ld16_tail(DT, k3, d, hd - d, hd);
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
AI void scores_tile(const int DT, const int Q, const float *q, size_t ldq, const rowp *kp, int hd, __m128 sc,
                    float *out, size_t ldo, int keep) {
    __m128 res[4];
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
        for (; r + 4 <= nq; r += 4) scores_tile(DT, 4, q + (size_t)r * ldq, ldq, kp, hd, sc, out + (size_t)r * ldo + i, ldo, keep);
        const float *qr = q + (size_t)r * ldq;
        float *o = out + (size_t)r * ldo + i;
        switch (nq - r) {
        case 3: scores_tile(DT, 3, qr, ldq, kp, hd, sc, o, ldo, keep); break;
        case 2: scores_tile(DT, 2, qr, ldq, kp, hd, sc, o, ldo, keep); break;
        case 1: scores_tile(DT, 1, qr, ldq, kp, hd, sc, o, ldo, keep); break;
        default: break;
        }
    }
}

/* Q (1..4) queries' accumulators over the same values: per element the same
 * fma sequence (keys in order) as attn_accum, 64 dims then 16 (masked). */
AI void accum_tile(const int DT, const int Q, float *acc, size_t lda, const float *w, size_t ldw, rowp v, size_t stride,
                   int n, int hd) {
    int d = 0;
    for (; d + 64 <= hd; d += 64) {
        __m512 a[4][4];
        for (int r = 0; r < Q; r++)
            for (int c = 0; c < 4; c++) a[r][c] = _mm512_loadu_ps(acc + (size_t)r * lda + d + 16 * c);
        rowp vp = v;
        for (int i = 0; i < n; i++, vp += stride) {
            __m512 v0 = ld16(DT, vp, d, hd), v1 = ld16(DT, vp, d + 16, hd);
            __m512 v2 = ld16(DT, vp, d + 32, hd), v3 = ld16(DT, vp, d + 48, hd);
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
        rowp vp = v;
        for (int i = 0; i < n; i++, vp += stride) {
            __m512 vv = ld16_tail(DT, vp, d, hd - d < 16 ? hd - d : 16, hd);
            for (int r = 0; r < Q; r++) a[r] = _mm512_fmadd_ps(_mm512_set1_ps(w[(size_t)r * ldw + (size_t)i]), vv, a[r]);
        }
        for (int r = 0; r < Q; r++) _mm512_mask_storeu_ps(acc + (size_t)r * lda + d, m, a[r]);
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

/* fast_exp_nonpos(x) on 16 lanes: its operations one intrinsic each, in its
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

/* attn_max_row_ref 16 lanes at a time: vmaxps(s, m) keeps m when s is NaN,
 * as the reference's s > m ? s : m does; the tail's missing lanes are -inf. */
static float max_row(const float *s, int n) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 m0 = ninf, m1 = ninf;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        m0 = _mm512_max_ps(_mm512_loadu_ps(s + i), m0);
        m1 = _mm512_max_ps(_mm512_loadu_ps(s + i + 16), m1);
    }
    for (; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        m0 = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, k, s + i), m0);
    }
    return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1)) + 0.0f; /* the + 0.0f of attn_max_row_from */
}

static void attn_softmax(float *s, size_t lds, int nq, const int *n, float *part, size_t pst) {
    attn_softmax_rows(s, lds, nq, n, part, pst, max_row, exp_row);
}

ATTN_KV_TABLE(cpu_attn_avx512, attn_softmax)
#else
typedef int no_cpu_attn_avx512_on_this_arch;
#endif
