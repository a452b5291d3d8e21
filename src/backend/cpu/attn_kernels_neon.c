/*
 * attn_kernels_neon.c - attention inner loops with NEON: 4 keys' dot products at once, lanes
 * summed pairwise the same way for every key.
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

/* Scores of 4 keys (k0..k3 may repeat for a partial group), lanes summed
 * pairwise the same way for every key. */
AI float32x4_t dot4(const float *q, const float *k0, const float *k1, const float *k2, const float *k3, int hd) {
    float32x4_t a0 = vdupq_n_f32(0), a1 = a0, a2 = a0, a3 = a0;
    int d = 0;
    for (; d + 4 <= hd; d += 4) {
        float32x4_t qv = vld1q_f32(q + d);
        a0 = vfmaq_f32(a0, qv, vld1q_f32(k0 + d));
        a1 = vfmaq_f32(a1, qv, vld1q_f32(k1 + d));
        a2 = vfmaq_f32(a2, qv, vld1q_f32(k2 + d));
        a3 = vfmaq_f32(a3, qv, vld1q_f32(k3 + d));
    }
    if (d < hd) {
        float32x4_t qv = load_x(q + d, hd - d);
        a0 = vfmaq_f32(a0, qv, load_x(k0 + d, hd - d));
        a1 = vfmaq_f32(a1, qv, load_x(k1 + d, hd - d));
        a2 = vfmaq_f32(a2, qv, load_x(k2 + d, hd - d));
        a3 = vfmaq_f32(a3, qv, load_x(k3 + d, hd - d));
    }
    return vpaddq_f32(vpaddq_f32(a0, a1), vpaddq_f32(a2, a3));
}

static void attn_scores(const float *q, const float *k, size_t stride, int n, int hd, float scale, float *out) {
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        const float *kp = k + (size_t)i * stride;
        vst1q_f32(out + i, vmulq_n_f32(dot4(q, kp, kp + stride, kp + 2 * stride, kp + 3 * stride, hd), scale));
    }
    if (i < n) { /* the last keys, repeated to fill the group */
        const float *kp[4];
        for (int j = 0; j < 4; j++) kp[j] = k + (size_t)(i + j < n ? i + j : n - 1) * stride;
        float r[4];
        vst1q_f32(r, vmulq_n_f32(dot4(q, kp[0], kp[1], kp[2], kp[3], hd), scale));
        for (int j = 0; i + j < n; j++) out[i + j] = r[j];
    }
}

static void attn_accum(float *acc, const float *w, const float *v, size_t stride, int n, int hd) {
    int d = 0;
    for (; d + 8 <= hd; d += 8) {
        float32x4_t a0 = vld1q_f32(acc + d), a1 = vld1q_f32(acc + d + 4);
        const float *vp = v + d;
        for (int i = 0; i < n; i++, vp += stride) {
            a0 = vfmaq_n_f32(a0, vld1q_f32(vp), w[i]);
            a1 = vfmaq_n_f32(a1, vld1q_f32(vp + 4), w[i]);
        }
        vst1q_f32(acc + d, a0);
        vst1q_f32(acc + d + 4, a1);
    }
    for (; d < hd; d++) {
        float a = acc[d];
        const float *vp = v + d;
        for (int i = 0; i < n; i++, vp += stride) a = fmaf(w[i], *vp, a);
        acc[d] = a;
    }
}
const cpu_attn_kernels cpu_attn_neon = {.scores = attn_scores, .accum = attn_accum};
#else
typedef int xllm_no_cpu_attn_neon_on_this_arch;
#endif
