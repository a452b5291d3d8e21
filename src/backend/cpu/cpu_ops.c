/*
 * cpu_ops.c - the CPU backend's orchestration: kernel level selection,
 * per-thread scratch, activation quantization, and splitting matmul rows
 * across the thread pool. The arithmetic lives in the level files
 * (kernels_<level>.c, through the table in kernels.h).
 *
 * matmul splits weight rows across threads in tiles of 4 rows; each thread
 * runs its rows against every token of the batch, so weights stream from
 * memory once per step. Each output element is computed by one thread in the
 * level's fixed order whatever T and the split are (see kernels.h), so
 * results do not depend on batch composition.
 */
#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/fastmath.h"
#include "quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ROW_TILE 4

xllm_status backend_init_kernels(backend *be, int n_threads, size_t max_cols, size_t max_tokens,
                                 const cpu_kernels *kern, xllm_error *err) {
    memset(be, 0, sizeof *be);
    be->kern = kern;
    be->max_cols = max_cols;
    be->max_tokens = max_tokens;
    be->tp = threadpool_create(n_threads);
    if (!be->tp) return xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "cannot start the thread pool");
    be->n_threads = threadpool_size(be->tp);
    be->scratch_floats = max_cols + 16;
    be->kscratch_bytes = (kern->scratch_bytes((int64_t)max_cols) + 63) & ~(size_t)63;
    be->scratch = xllm_calloc((size_t)be->n_threads, sizeof(float *));
    be->kscratch = xllm_calloc((size_t)be->n_threads, sizeof(void *));
    if (!be->scratch || !be->kscratch) goto oom;
    for (int i = 0; i < be->n_threads; i++) {
        be->scratch[i] = xllm_malloc_aligned(be->scratch_floats * sizeof(float));
        be->kscratch[i] = xllm_malloc_aligned(be->kscratch_bytes);
        if (!be->scratch[i] || !be->kscratch[i]) goto oom;
    }
    /* act_bytes grows with cols; round up to whole 128-column chunks */
    size_t cols_cap = (max_cols + 127) / 128 * 128;
    be->act_row_cap = kern->act_bytes((int64_t)cols_cap);
    be->act = xllm_malloc_aligned(max_tokens * be->act_row_cap);
    if (!be->act) goto oom;
    return XLLM_OK;
oom:
    backend_free(be);
    return xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "cannot allocate backend scratch");
}

xllm_status backend_init(backend *be, int n_threads, size_t max_cols, size_t max_tokens, xllm_error *err) {
    cpu_level level;
    xllm_status st = cpu_level_from_env(getenv("XLLM_CPU"), &level, err);
    if (st) return st;
    return backend_init_kernels(be, n_threads, max_cols, max_tokens, cpu_kernels_for(level), err);
}

void backend_free(backend *be) {
    if (be->scratch)
        for (int i = 0; i < be->n_threads; i++) xllm_free_aligned(be->scratch[i]);
    if (be->kscratch)
        for (int i = 0; i < be->n_threads; i++) xllm_free_aligned(be->kscratch[i]);
    xllm_free(be->scratch);
    xllm_free(be->kscratch);
    xllm_free_aligned(be->act);
    threadpool_free(be->tp);
    memset(be, 0, sizeof *be);
}

const char *backend_level_name(const backend *be) { return be->kern ? be->kern->name : "none"; }

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
    size_t act_stride;
} matmul_job;

static void matmul_tiles(void *p, size_t u0, size_t u1, int thread) {
    matmul_job *j = p;
    const matrix *W = j->W;
    int64_t r0 = (int64_t)u0 * ROW_TILE, r1 = (int64_t)u1 * ROW_TILE;
    if (r1 > W->rows) r1 = W->rows;
    const cpu_kernels *k = j->be->kern;
    if (xllm_dtype_is_quant(W->dtype))
        k->matmul_q(W, j->be->act, j->act_stride, j->T, j->bias, j->y, (size_t)W->rows, r0, r1, j->be->kscratch[thread]);
    else
        k->matmul_f(W, j->x, j->T, j->bias, j->y, (size_t)W->rows, r0, r1, j->be->kscratch[thread]);
}

static void prepare_tokens(void *p, size_t t0, size_t t1, int thread) {
    matmul_job *j = p;
    (void)thread;
    for (size_t t = t0; t < t1; t++)
        j->be->kern->act_prepare(j->x + t * (size_t)j->W->cols, j->W->cols, j->be->act + t * j->act_stride);
}

void op_matmul(backend *be, const float *x, int T, const matrix *W, const float *bias, float *y) {
    if (T <= 0) return;
    matmul_job j = {be, x, T, W, bias, y, 0};
    if (xllm_dtype_is_quant(W->dtype)) {
        j.act_stride = be->kern->act_bytes(W->cols);
        /* per token, so the split does not matter; threads only for big batches */
        size_t per_tok = (size_t)W->cols;
        threadpool_run(be->tp, (size_t)T, per_tok >= 65536 ? 1 : 65536 / per_tok, prepare_tokens, &j);
    }
    size_t units = ((size_t)W->rows + ROW_TILE - 1) / ROW_TILE, min_units;
    int planned = W->plan_threads[mm_bucket(T)];
    if (planned > 0) { /* the planner's measured choice for this shape and batch size */
        min_units = (units + (size_t)planned - 1) / (size_t)planned;
    } else { /* at least ~32k multiply-adds per thread, or threading costs more than it gains */
        size_t per_unit = (size_t)W->cols * (size_t)T * ROW_TILE;
        min_units = per_unit >= 32768 ? 1 : 32768 / per_unit;
    }
    threadpool_run(be->tp, units, min_units, matmul_tiles, &j);
}

void op_attn_scores(const backend *be, const float *q, const float *k, size_t stride, int n, int hd, float scale,
                    float *out) {
    be->kern->attn->scores(q, k, stride, n, hd, scale, out);
}

void op_attn_accum(const backend *be, float *acc, const float *w, const float *v, size_t stride, int n, int hd) {
    be->kern->attn->accum(acc, w, v, stride, n, hd);
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

/* silu(g) = g * sigmoid(g), with e = exp(-|g|) in (0, 1]: sigmoid(g) is
 * 1 / (1 + e) for g >= 0 and e / (1 + e) below. Branch-free on
 * xllm_exp_nonpos (relative error ~2e-7), so the loop vectorizes; NaN stays NaN. */
void op_silu_mul(float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float g = a[i];
        float e = xllm_exp_nonpos(-fabsf(g));
        a[i] = g * ((g >= 0.0f ? 1.0f : e) / (1.0f + e)) * b[i];
    }
}
