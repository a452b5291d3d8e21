/*
 * attn_kernels_neon.c - attention inner loops with NEON: 4 keys' dot products at once, lanes
 * summed pairwise the same way for every key. The multi-query loops (K/V sharing) tile 4
 * queries x 4 keys for scores and 4 queries x 16 dims for values, with the per-key
 * arithmetic of the single-query loops. Every loop is a template over the KV storage (kvq.h):
 * K/V vectors come through ld4 / ld4_tail, which dequantize exactly (f16 by fcvtl, q8 as
 * int8 -> f32 times the group's scale), so the f16 and q8 loops do the f32 loops' arithmetic
 * on the same values.
 */
#if defined(__aarch64__)
#include "backend/cpu/attn_kernels.h"

#include <arm_neon.h>
#include <math.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

AI float32x4_t load_x(const float *x, int n) {
    if (n == 4) return vld1q_f32(x);
    float buf[4] = {0, 0, 0, 0};
    memcpy(buf, x, (size_t)n * 4);
    return vld1q_f32(buf);
}

typedef const unsigned char *rowp;

AI float h2f(rowp p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

/* 4 values of a stored row from element d (d + 4 <= hd), as f32, exactly. */
AI float32x4_t ld4(const int DT, rowp r, int d, int hd) {
    if (DT == KV_F32) return vld1q_f32((const float *)(const void *)r + d);
    if (DT == KV_F16) return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)(const void *)(r + 2 * (size_t)d))));
    int32_t w;
    memcpy(&w, r + d, 4);
    int32x4_t x = vmovl_s16(vget_low_s16(vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(w)))));
    return vmulq_n_f32(vcvtq_f32_s32(x), h2f(r + hd + 2 * (d >> kvq_group_shift(hd))));
}

/* cnt (1..4) values from element d, zeros after. */
AI float32x4_t ld4_tail(const int DT, rowp r, int d, int cnt, int hd) {
    if (DT == KV_F32) return load_x((const float *)(const void *)r + d, cnt);
    if (cnt == 4) return ld4(DT, r, d, hd);
    float t[4] = {0, 0, 0, 0};
    for (int i = 0; i < cnt; i++) t[i] = kvq_get(DT, r, hd, d + i);
    return vld1q_f32(t);
}

/* Scores of 4 keys (k0..k3 may repeat for a partial group), lanes summed
 * pairwise the same way for every key. */
AI float32x4_t dot4(const int DT, const float *q, rowp k0, rowp k1, rowp k2, rowp k3, int hd) {
    float32x4_t a0 = vdupq_n_f32(0), a1 = a0, a2 = a0, a3 = a0;
    int d = 0;
    for (; d + 4 <= hd; d += 4) {
        float32x4_t qv = vld1q_f32(q + d);
        a0 = vfmaq_f32(a0, qv, ld4(DT, k0, d, hd));
        a1 = vfmaq_f32(a1, qv, ld4(DT, k1, d, hd));
        a2 = vfmaq_f32(a2, qv, ld4(DT, k2, d, hd));
        a3 = vfmaq_f32(a3, qv, ld4(DT, k3, d, hd));
    }
    if (d < hd) {
        float32x4_t qv = load_x(q + d, hd - d);
        a0 = vfmaq_f32(a0, qv, ld4_tail(DT, k0, d, hd - d, hd));
        a1 = vfmaq_f32(a1, qv, ld4_tail(DT, k1, d, hd - d, hd));
        a2 = vfmaq_f32(a2, qv, ld4_tail(DT, k2, d, hd - d, hd));
        a3 = vfmaq_f32(a3, qv, ld4_tail(DT, k3, d, hd - d, hd));
    }
    return vpaddq_f32(vpaddq_f32(a0, a1), vpaddq_f32(a2, a3));
}

AI void scores_T(const int DT, const float *q, rowp k, size_t stride, int n, int hd, float scale, float *out) {
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        rowp kp = k + (size_t)i * stride;
        vst1q_f32(out + i, vmulq_n_f32(dot4(DT, q, kp, kp + stride, kp + 2 * stride, kp + 3 * stride, hd), scale));
    }
    if (i < n) { /* the last keys, repeated to fill the group */
        rowp kp[4];
        for (int j = 0; j < 4; j++) kp[j] = k + (size_t)(i + j < n ? i + j : n - 1) * stride;
        float r[4];
        vst1q_f32(r, vmulq_n_f32(dot4(DT, q, kp[0], kp[1], kp[2], kp[3], hd), scale));
        for (int j = 0; i + j < n; j++) out[i + j] = r[j];
    }
}

AI void accum_T(const int DT, float *acc, const float *w, rowp v, size_t stride, int n, int hd) {
    int d = 0;
    for (; d + 8 <= hd; d += 8) {
        float32x4_t a0 = vld1q_f32(acc + d), a1 = vld1q_f32(acc + d + 4);
        rowp vp = v;
        for (int i = 0; i < n; i++, vp += stride) {
            a0 = vfmaq_n_f32(a0, ld4(DT, vp, d, hd), w[i]);
            a1 = vfmaq_n_f32(a1, ld4(DT, vp, d + 4, hd), w[i]);
        }
        vst1q_f32(acc + d, a0);
        vst1q_f32(acc + d + 4, a1);
    }
    for (; d < hd; d++) {
        float a = acc[d];
        rowp vp = v;
        for (int i = 0; i < n; i++, vp += stride) a = fmaf(w[i], kvq_get(DT, vp, hd, d), a);
        acc[d] = a;
    }
}

/* Scores of Q (1..4, a constant after inlining) queries, rows of q ldq apart,
 * against 4 keys: each query's accumulators are exactly dot4's (same fma
 * sequence over d, same zero-filled tail) and are summed the same way. */
AI void dotQ4(const int DT, const int Q, const float *q, size_t ldq, rowp k0, rowp k1, rowp k2, rowp k3, int hd,
              float32x4_t *res) {
    float32x4_t a[4][4];
    for (int r = 0; r < Q; r++) a[r][0] = a[r][1] = a[r][2] = a[r][3] = vdupq_n_f32(0);
    int d = 0;
    for (; d + 4 <= hd; d += 4) {
        float32x4_t v0 = ld4(DT, k0, d, hd), v1 = ld4(DT, k1, d, hd), v2 = ld4(DT, k2, d, hd), v3 = ld4(DT, k3, d, hd);
        for (int r = 0; r < Q; r++) {
            float32x4_t qv = vld1q_f32(q + (size_t)r * ldq + d);
            a[r][0] = vfmaq_f32(a[r][0], qv, v0);
            a[r][1] = vfmaq_f32(a[r][1], qv, v1);
            a[r][2] = vfmaq_f32(a[r][2], qv, v2);
            a[r][3] = vfmaq_f32(a[r][3], qv, v3);
        }
    }
    if (d < hd) {
        float32x4_t v0 = ld4_tail(DT, k0, d, hd - d, hd), v1 = ld4_tail(DT, k1, d, hd - d, hd);
        float32x4_t v2 = ld4_tail(DT, k2, d, hd - d, hd), v3 = ld4_tail(DT, k3, d, hd - d, hd);
        for (int r = 0; r < Q; r++) {
            float32x4_t qv = load_x(q + (size_t)r * ldq + d, hd - d);
            a[r][0] = vfmaq_f32(a[r][0], qv, v0);
            a[r][1] = vfmaq_f32(a[r][1], qv, v1);
            a[r][2] = vfmaq_f32(a[r][2], qv, v2);
            a[r][3] = vfmaq_f32(a[r][3], qv, v3);
        }
    }
    for (int r = 0; r < Q; r++) res[r] = vpaddq_f32(vpaddq_f32(a[r][0], a[r][1]), vpaddq_f32(a[r][2], a[r][3]));
}

/* Queries [0, Q) against keys kp[0..3] (repeated past the end; only the
 * first `keep` scores are stored). */
AI void scores_tile(const int DT, const int Q, const float *q, size_t ldq, const rowp *kp, int hd, float scale,
                    float *out, size_t ldo, int keep) {
    float32x4_t res[4];
    dotQ4(DT, Q, q, ldq, kp[0], kp[1], kp[2], kp[3], hd, res);
    for (int r = 0; r < Q; r++) {
        float32x4_t s = vmulq_n_f32(res[r], scale);
        if (keep == 4) {
            vst1q_f32(out + (size_t)r * ldo, s);
        } else {
            float t[4];
            vst1q_f32(t, s);
            for (int j = 0; j < keep; j++) out[(size_t)r * ldo + (size_t)j] = t[j];
        }
    }
}

AI void scores_multi_T(const int DT, const float *q, size_t ldq, int nq, rowp k, size_t stride, int n, int hd,
                       float scale, float *out, size_t ldo) {
    for (int i = 0; i < n; i += 4) {
        rowp kp[4];
        for (int j = 0; j < 4; j++) kp[j] = k + (size_t)(i + j < n ? i + j : n - 1) * stride;
        int keep = n - i < 4 ? n - i : 4, r = 0;
        for (; r + 4 <= nq; r += 4)
            scores_tile(DT, 4, q + (size_t)r * ldq, ldq, kp, hd, scale, out + (size_t)r * ldo + i, ldo, keep);
        const float *qr = q + (size_t)r * ldq;
        float *o = out + (size_t)r * ldo + i;
        switch (nq - r) {
        case 3: scores_tile(DT, 3, qr, ldq, kp, hd, scale, o, ldo, keep); break;
        case 2: scores_tile(DT, 2, qr, ldq, kp, hd, scale, o, ldo, keep); break;
        case 1: scores_tile(DT, 1, qr, ldq, kp, hd, scale, o, ldo, keep); break;
        default: break;
        }
    }
}

/* Q (1..4) queries' accumulators over the same values: per element the same
 * fused multiply-add sequence (keys in order) as attn_accum, 16 dims, then 8,
 * then one at a time. */
AI void accum_tile(const int DT, const int Q, float *acc, size_t lda, const float *w, size_t ldw, rowp v, size_t stride,
                   int n, int hd) {
    int d = 0;
    for (; d + 16 <= hd; d += 16) {
        float32x4_t a[4][4];
        for (int r = 0; r < Q; r++)
            for (int c = 0; c < 4; c++) a[r][c] = vld1q_f32(acc + (size_t)r * lda + d + 4 * c);
        rowp vp = v;
        for (int i = 0; i < n; i++, vp += stride) {
            float32x4_t v0 = ld4(DT, vp, d, hd), v1 = ld4(DT, vp, d + 4, hd), v2 = ld4(DT, vp, d + 8, hd), v3 = ld4(DT, vp, d + 12, hd);
            for (int r = 0; r < Q; r++) {
                float wi = w[(size_t)r * ldw + (size_t)i];
                a[r][0] = vfmaq_n_f32(a[r][0], v0, wi);
                a[r][1] = vfmaq_n_f32(a[r][1], v1, wi);
                a[r][2] = vfmaq_n_f32(a[r][2], v2, wi);
                a[r][3] = vfmaq_n_f32(a[r][3], v3, wi);
            }
        }
        for (int r = 0; r < Q; r++)
            for (int c = 0; c < 4; c++) vst1q_f32(acc + (size_t)r * lda + d + 4 * c, a[r][c]);
    }
    for (; d + 8 <= hd; d += 8) {
        float32x4_t a[4][2];
        for (int r = 0; r < Q; r++) a[r][0] = vld1q_f32(acc + (size_t)r * lda + d), a[r][1] = vld1q_f32(acc + (size_t)r * lda + d + 4);
        rowp vp = v;
        for (int i = 0; i < n; i++, vp += stride) {
            float32x4_t v0 = ld4(DT, vp, d, hd), v1 = ld4(DT, vp, d + 4, hd);
            for (int r = 0; r < Q; r++) {
                float wi = w[(size_t)r * ldw + (size_t)i];
                a[r][0] = vfmaq_n_f32(a[r][0], v0, wi);
                a[r][1] = vfmaq_n_f32(a[r][1], v1, wi);
            }
        }
        for (int r = 0; r < Q; r++) vst1q_f32(acc + (size_t)r * lda + d, a[r][0]), vst1q_f32(acc + (size_t)r * lda + d + 4, a[r][1]);
    }
    for (; d < hd; d++)
        for (int r = 0; r < Q; r++) {
            float a = acc[(size_t)r * lda + d];
            rowp vp = v;
            const float *wr = w + (size_t)r * ldw;
            for (int i = 0; i < n; i++, vp += stride) a = fmaf(wr[i], kvq_get(DT, vp, hd, d), a);
            acc[(size_t)r * lda + d] = a;
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

/* The reference exp in C: this file has the baseline armv8-a flags, as
 * attention.c, so it compiles to the same operations (the compiler's own
 * NEON vectorization of it included). */
static void exp_row(float *s, int n, float mx) {
    for (int i = 0; i < n; i++) s[i] = fast_exp_nonpos(s[i] - mx);
}

/* attn_max_row_ref 4 lanes at a time: fmaxnm(s, m) gives m when s is a
 * quiet NaN, as the reference's s > m ? s : m does; the tail goes through the
 * reference loop. */
static float max_row(const float *s, int n) {
    float32x4_t m0 = vdupq_n_f32(-INFINITY), m1 = m0;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        m0 = vmaxnmq_f32(vld1q_f32(s + i), m0);
        m1 = vmaxnmq_f32(vld1q_f32(s + i + 4), m1);
    }
    return attn_max_row_from(vmaxnmvq_f32(vmaxnmq_f32(m0, m1)), s + i, n - i);
}

static void attn_softmax(float *s, size_t lds, int nq, const int *n, float *part, size_t pst) {
    attn_softmax_rows(s, lds, nq, n, part, pst, max_row, exp_row);
}

ATTN_KV_TABLE(cpu_attn_neon, attn_softmax)
#else
typedef int no_cpu_attn_neon_on_this_arch;
#endif
