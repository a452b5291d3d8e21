/*
 * f16_llama.c - a matmul over F16 (and F32) weights as llama.cpp's CPU backend
 * computes it (arithmetic "llama").
 *
 * llama.cpp converts the activations to f16 before an F16 matmul (its
 * vec_dot_type), so every product uses f16-rounded inputs; that rounding, not
 * the summation order, is what moves its outputs (~1e-3 in log-probs without
 * it). The order is kept too: with the row length a multiple of 16 its
 * llamafile GEMM (tinyBLAS, AVX-512: 16 lanes, lane l summing the products at
 * 16 i + l in fmas, then _mm512_reduce_add_ps); otherwise ggml_vec_dot_f16
 * (four 16-lane accumulators per 64, folded, then the tail in double), which
 * is also what its mul_mat_id computes the routed experts with (vec_dot).
 * Bias added after the product, as its separate add. F32 weights take the
 * same two orders without rounding (its F32 GEMM is the same tinyBLAS), so
 * a router's logits, where a near-tie picks an expert, do not depend on our
 * kernel level (measured: the scalar level moved a Mixtral prompt by 8e-4).
 * Thread-safe (pure).
 */
#include "backend/cpu/cpu_backend.h"
#include "base/dtype.h"

#include <math.h>

/* _mm512_reduce_add_ps's order (halves, then quarters, pairs, the last two). */
static float reduce16(const float *v) {
    float h[8], q[4];
    for (int l = 0; l < 8; l++) h[l] = v[8 + l] + v[l];
    for (int l = 0; l < 4; l++) q[l] = h[4 + l] + h[l];
    return (q[2] + q[0]) + (q[3] + q[1]);
}

/* weight i of a row, F16 or F32 */
static inline float wat(const void *w, int f16, int64_t i) {
    return f16 ? f16_to_f32(((const uint16_t *)w)[i]) : ((const float *)w)[i];
}

static float dot_tinyblas(const void *w, int f16, const float *x, int64_t n) {
    float acc[16] = {0};
    for (int64_t i = 0; i < n; i += 16)
        for (int l = 0; l < 16; l++) acc[l] = fmaf(wat(w, f16, i + l), x[i + l], acc[l]);
    return reduce16(acc);
}

static float dot_vec(const void *w, int f16, const float *x, int64_t n) {
    float acc[4][16] = {{0}};
    int64_t np = n & ~(int64_t)63;
    for (int64_t i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++)
                acc[j][l] = fmaf(wat(w, f16, i + 16 * j + l), x[i + 16 * j + l], acc[j][l]);
    double sum = 0.0;
    if (np) {
        float v[16];
        for (int l = 0; l < 16; l++) v[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
        sum = (double)reduce16(v);
    }
    for (int64_t i = np; i < n; i++) sum += (double)(wat(w, f16, i) * x[i]);
    return (float)sum;
}

void op_f16_matmul_llama(const matrix *W, const float *x, int T, const float *bias, float *y, size_t ldy, int64_t r0,
                         int64_t r1, float *xr, int vec_dot) {
    int64_t n = W->cols;
    int f16 = W->dtype == XLLM_DT_F16;
    size_t es = f16 ? 2 : 4;
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * (size_t)n;
        for (int64_t i = 0; i < n; i++) xr[i] = f16 ? f16_round(xt[i]) : xt[i];
        for (int64_t r = r0; r < r1; r++) {
            const void *w = (const char *)W->data + (size_t)r * (size_t)n * es;
            float v = n % 16 == 0 && !vec_dot ? dot_tinyblas(w, f16, xr, n) : dot_vec(w, f16, xr, n);
            y[(size_t)t * ldy + (size_t)r] = bias ? v + bias[r] : v;
        }
    }
}
