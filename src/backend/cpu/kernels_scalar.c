/*
 * kernels_scalar.c - the portable level and the reference for every other:
 * quantized matmuls through quant_dot (quant.c), float matmuls with a fixed
 * 16-lane accumulation, attention loops in plain C. No target flags.
 *
 * Prepared activations: the reference layout, q[cols] int8, then d[cols/32]
 * f32, s[cols/32] int32 and ds[cols/32] f32 (quant_activations).
 */
#include "backend/cpu/kernels.h"
#include "quant/quant.h"

#include <string.h>

#define LANES 16

static size_t act_bytes(int64_t cols) {
    size_t n = (size_t)cols + (size_t)cols / QK * 12;
    return (n + 63) & ~(size_t)63;
}

static void act_prepare(const float *x, int64_t cols, void *out, int llama) {
    int8_t *q = out;
    float *d = (float *)(q + cols);
    int32_t *s = (int32_t *)(d + cols / QK);
    quant_activations(x, cols, q, d, s, (float *)(s + cols / QK), llama);
}

static size_t scratch_bytes(int64_t cols) { return ((size_t)cols + LANES) * sizeof(float); }

static void matmul_q(const matrix *W, const void *act, size_t act_stride, int T, const float *bias, float *y,
                     size_t ldy, int64_t r0, int64_t r1, void *scratch) {
    (void)scratch;
    size_t rb = quant_row_bytes(W->dtype, W->group, W->cols), nb = (size_t)W->cols / QK;
    for (int64_t r = r0; r < r1; r++) {
        const char *row = (const char *)W->data + (size_t)r * rb;
        float b = bias ? bias[r] : 0.0f;
        for (int t = 0; t < T; t++) {
            const int8_t *q = (const int8_t *)((const char *)act + (size_t)t * act_stride);
            const float *d = (const float *)(q + W->cols);
            const int32_t *s = (const int32_t *)(d + nb);
            const float *ds = (const float *)(s + nb);
            y[(size_t)t * ldy + (size_t)r] = quant_dot(W->dtype, W->group, row, q, d, s, ds, W->cols) + b;
        }
    }
}

static float dot_f32(const float *a, const float *b, int64_t n) {
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) acc[j] += a[i + j] * b[i + j];
    float tail = 0;
    for (; i < n; i++) tail += a[i] * b[i];
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0] + tail;
}

static void matmul_f(const matrix *W, const float *x, int T, const float *bias, float *y, size_t ldy, int64_t r0,
                     int64_t r1, void *scratch) {
    int64_t cols = W->cols;
    float *conv = scratch;
    size_t rb = (size_t)cols * dtype_size(W->dtype);
    for (int64_t r = r0; r < r1; r++) {
        const float *w;
        if (W->dtype == XLLM_DT_F32 && ((uintptr_t)W->data & 3) == 0) {
            w = (const float *)W->data + (size_t)r * (size_t)cols;
        } else {
            dtype_to_f32(W->dtype, (const char *)W->data + (size_t)r * rb, conv, (size_t)cols);
            w = conv;
        }
        float b = bias ? bias[r] : 0.0f;
        for (int t = 0; t < T; t++) y[(size_t)t * ldy + (size_t)r] = dot_f32(x + (size_t)t * (size_t)cols, w, cols) + b;
    }
}

const cpu_kernels cpu_kernels_scalar = {
    .level = CPU_SCALAR,
    .name = "scalar",
    .act_bytes = act_bytes,
    .act_prepare = act_prepare,
    .quant_act = quant_activations,
    .scratch_bytes = scratch_bytes,
    .matmul_q = matmul_q,
    .matmul_f = matmul_f,
    .attn = &cpu_attn_scalar,
};
