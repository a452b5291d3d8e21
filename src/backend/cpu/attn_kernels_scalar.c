/*
 * attn_kernels_scalar.c - attention inner loops in plain C (the reference).
 */
#include "backend/cpu/attn_kernels.h"

static void attn_scores(const float *q, const float *k, size_t stride, int n, int hd, float scale, float *out) {
    for (int i = 0; i < n; i++, k += stride) {
        float s = 0.0f;
        for (int d = 0; d < hd; d++) s += q[d] * k[d];
        out[i] = s * scale;
    }
}

static void attn_accum(float *acc, const float *w, const float *v, size_t stride, int n, int hd) {
    for (int i = 0; i < n; i++, v += stride)
        for (int d = 0; d < hd; d++) acc[d] += w[i] * v[d];
}

const cpu_attn_kernels cpu_attn_scalar = {.scores = attn_scores, .accum = attn_accum};
