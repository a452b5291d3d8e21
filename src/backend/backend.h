/*
 * backend.h - what the model layer asks of an execution backend.
 *
 * A weight matrix is a view (dtype, rows, cols, data pointer into the mmap);
 * kernels read it in its stored type. The CPU backend is the only one today;
 * its context owns the thread pool and per-thread scratch. Everything above
 * this header is backend-agnostic: the forward pass calls these operations
 * and never touches threads or SIMD.
 */
#ifndef XLLM_BACKEND_H
#define XLLM_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include "base/dtype.h"
#include "base/threadpool.h"
#include "xllm.h"

/* Row-major [rows][cols] matrix in its stored dtype (F32, F16 or BF16). */
typedef struct matrix {
    xllm_dtype dtype;
    int64_t rows, cols;
    const void *data;
} matrix;

typedef struct backend {
    threadpool *tp;
    int n_threads;
    float **scratch;          /* per thread, scratch_floats each */
    size_t scratch_floats;
} backend;

/* max_cols: the widest matrix row the kernels will see. */
xllm_status backend_init(backend *be, int n_threads, size_t max_cols, xllm_error *err);
void backend_free(backend *be);

/* y[t][r] = sum_c x[t][c] * W[r][c] + bias[r], for t < T. x: [T][W.cols], y: [T][W.rows].
 * bias may be NULL. Each y element is computed the same way whatever T is
 * (results do not depend on batch composition). */
void op_matmul(backend *be, const float *x, int T, const matrix *W, const float *bias, float *y);

/* out[i] = x[i] / rms(x) * w[i] per row of n, for rows rows. */
void op_rmsnorm(const float *x, const float *w, float eps, int n, int rows, float *out);
/* a[i] = silu(a[i]) * b[i] */
void op_silu_mul(float *a, const float *b, size_t n);
/* Convert row `row` of W to f32 (embedding lookup). */
void op_matrix_row(const matrix *W, int64_t row, float *out);

#endif
