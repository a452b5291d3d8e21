/*
 * cpu_ops.c - portable f32 CPU kernels (the reference level; SIMD levels
 * dispatched at run time come with the CPU-kernels work).
 *
 * matmul splits weight rows across the thread pool; each thread converts a
 * weight row to f32 once (when stored as F16/BF16) and dots it with every
 * token of the batch, so weights stream from memory once per step. Dot
 * products use a fixed 16-lane accumulation order so results are identical
 * whatever the batch size or thread split.
 */
#include "backend/backend.h"
#include "base/alloc.h"
#include "base/error.h"
#include "quant/quant.h"

#include <math.h>
#include <string.h>

#define LANES 16

xllm_status backend_init(backend *be, int n_threads, size_t max_cols, size_t max_tokens, xllm_error *err) {
    memset(be, 0, sizeof *be);
    be->tp = threadpool_create(n_threads);
    if (!be->tp) return xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "cannot start the thread pool");
    be->n_threads = threadpool_size(be->tp);
    be->scratch_floats = max_cols + LANES;
    be->scratch = xllm_calloc((size_t)be->n_threads, sizeof(float *));
    if (!be->scratch) goto oom;
    for (int i = 0; i < be->n_threads; i++) {
        be->scratch[i] = xllm_malloc_aligned(be->scratch_floats * sizeof(float));
        if (!be->scratch[i]) goto oom;
    }
    be->act_cap = max_tokens * ((max_cols + QK - 1) / QK * QK);
    be->act_q = xllm_malloc_aligned(be->act_cap);
    be->act_d = xllm_malloc_array(be->act_cap / QK, sizeof(float));
    be->act_s = xllm_malloc_array(be->act_cap / QK, sizeof(int32_t));
    if (!be->act_q || !be->act_d || !be->act_s) goto oom;
    return XLLM_OK;
oom:
    backend_free(be);
    return xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "cannot allocate backend scratch");
}

void backend_free(backend *be) {
    if (be->scratch)
        for (int i = 0; i < be->n_threads; i++) xllm_free_aligned(be->scratch[i]);
    xllm_free(be->scratch);
    xllm_free_aligned(be->act_q);
    xllm_free(be->act_d);
    xllm_free(be->act_s);
    threadpool_free(be->tp);
    memset(be, 0, sizeof *be);
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

void op_matrix_row(const matrix *W, int64_t row, float *out) {
    size_t rb = quant_row_bytes(W->dtype, W->group, W->cols);
    const char *p = (const char *)W->data + (size_t)row * rb;
    if (xllm_dtype_is_quant(W->dtype)) quant_dequantize_row(W->dtype, W->group, p, W->cols, out);
    else xllm_to_f32(W->dtype, p, out, (size_t)W->cols);
}

typedef struct {
    backend *be;
    const float *x;
    int T;
    const matrix *W;
    const float *bias;
    float *y;
} matmul_job;

static void matmul_rows(void *p, size_t r0, size_t r1, int thread) {
    matmul_job *j = p;
    const matrix *W = j->W;
    int64_t cols = W->cols, rows = W->rows;
    float *conv = j->be->scratch[thread];
    for (size_t r = r0; r < r1; r++) {
        const float *w;
        if (W->dtype == XLLM_DT_F32 && ((uintptr_t)W->data & 3) == 0) {
            w = (const float *)W->data + r * (size_t)cols;
        } else {
            op_matrix_row(W, (int64_t)r, conv);
            w = conv;
        }
        float b = j->bias ? j->bias[r] : 0.0f;
        for (int t = 0; t < j->T; t++) j->y[(size_t)t * (size_t)rows + r] = dot_f32(j->x + (size_t)t * (size_t)cols, w, cols) + b;
    }
}

/* Quantized weights: integer dot products against the int8 activations. */
static void matmul_rows_quant(void *p, size_t r0, size_t r1, int thread) {
    matmul_job *j = p;
    const matrix *W = j->W;
    (void)thread;
    size_t rb = quant_row_bytes(W->dtype, W->group, W->cols), nb = (size_t)W->cols / QK;
    for (size_t r = r0; r < r1; r++) {
        const char *row = (const char *)W->data + r * rb;
        float b = j->bias ? j->bias[r] : 0.0f;
        for (int t = 0; t < j->T; t++)
            j->y[(size_t)t * (size_t)W->rows + r] =
                quant_dot(W->dtype, W->group, row, j->be->act_q + (size_t)t * (size_t)W->cols,
                          j->be->act_d + (size_t)t * nb, j->be->act_s + (size_t)t * nb, W->cols) + b;
    }
}

void op_matmul(backend *be, const float *x, int T, const matrix *W, const float *bias, float *y) {
    matmul_job j = {be, x, T, W, bias, y};
    if (xllm_dtype_is_quant(W->dtype)) {
        size_t nb = (size_t)W->cols / QK;
        for (int t = 0; t < T; t++)
            quant_activations(x + (size_t)t * (size_t)W->cols, W->cols, be->act_q + (size_t)t * (size_t)W->cols,
                              be->act_d + (size_t)t * nb, be->act_s + (size_t)t * nb);
        size_t per_row = (size_t)W->cols * (size_t)(T > 0 ? T : 1);
        threadpool_run(be->tp, (size_t)W->rows, per_row >= 16384 ? 1 : 16384 / per_row, matmul_rows_quant, &j);
        return;
    }
    /* at least ~16k multiply-adds per thread, or threading costs more than it gains */
    size_t per_row = (size_t)W->cols * (size_t)(T > 0 ? T : 1);
    size_t min_rows = per_row >= 16384 ? 1 : 16384 / per_row;
    threadpool_run(be->tp, (size_t)W->rows, min_rows, matmul_rows, &j);
}

void op_rmsnorm(const float *x, const float *w, float eps, int n, int rows, float *out) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * (size_t)n;
        float *o = out + (size_t)r * (size_t)n;
        float ss = 0;
        for (int i = 0; i < n; i++) ss += xr[i] * xr[i];
        float inv = 1.0f / sqrtf(ss / (float)n + eps);
        for (int i = 0; i < n; i++) o[i] = w[i] * (xr[i] * inv);
    }
}

void op_silu_mul(float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float g = a[i];
        a[i] = g / (1.0f + expf(-g)) * b[i];
    }
}
