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

/* Row-major [rows][cols] matrix in its stored dtype: F32, F16, BF16, or a
 * block-quantized type (Q8, Q4, Q4M) with `group` weights per scale. */
/* Batch-size buckets the planner tunes separately: T = 1, 2-8, 9-64, > 64. */
#define MM_BUCKETS 4
static inline int mm_bucket(int T) { return T <= 1 ? 0 : T <= 8 ? 1 : T <= 64 ? 2 : 3; }

typedef struct matrix {
    xllm_dtype dtype;
    int group;
    int64_t rows, cols;
    const void *data;
    /* threads the planner measured best per batch bucket (0: the default
     * work-size rule). The thread split never changes results. */
    uint8_t plan_threads[MM_BUCKETS];
    /* the kernel variant (1-based index into the level's variant names,
     * kernels.h) the planner measured best per batch bucket; 0: the level's
     * default. Variants differ in loop order and tiling only: same results. */
    uint8_t plan_kernel[MM_BUCKETS];
    /* 1: data is in the kernel level's own streaming order (backend_pack_matrix),
     * tiles of 4 rows; only the matmul kernels read it. 0: as stored. */
    uint8_t packed;
} matrix;

struct cpu_kernels;

typedef struct backend {
    threadpool *tp;
    int n_threads;
    float **scratch;          /* per thread, scratch_floats each */
    size_t scratch_floats;
    /* the kernel level in use (src/backend/cpu/kernels.h), chosen at init */
    const struct cpu_kernels *kern;
    void **kscratch;          /* per thread, kscratch_bytes each (64-byte aligned) */
    size_t kscratch_bytes;
    /* activations quantized for quantized weights, in the level's layout:
     * [max_tokens] rows of act_row_cap bytes */
    unsigned char *act;
    size_t act_row_cap;
    size_t max_cols, max_tokens;
    /* what be->act holds now: T rows of x (cols wide) prepared by the last
     * preparation (op_matmul, op_act_prepare, op_rmsnorm_act); act_x NULL: nothing */
    const float *act_x;
    int64_t act_cols;
    int act_T;
    /* llama.cpp's activation sections (KQ_ACT_* of quant/kquant.h) each
     * preparation also writes after the level's layout: set at load by
     * backend_pack_matrix for the matrices of those types; act_have: the
     * sections be->act holds now */
    unsigned act_kq, act_have;
    /* 1: the forward pass may use the fused operators below (the default);
     * XLLM_FUSE=0 at init turns them off, for comparisons. Same bits either way. */
    int fuse;
} backend;

/* max_cols: the widest matrix row the kernels will see; max_tokens: the most
 * activation rows one matmul gets. The kernel level is the best this CPU has,
 * or the one the XLLM_CPU environment variable names (scalar, avx2, avx512,
 * neon); naming one the CPU lacks is an error (XLLM_ERR_UNSUPPORTED). */
xllm_status backend_init(backend *be, int n_threads, size_t max_cols, size_t max_tokens, xllm_error *err);
/* The same with an explicit kernel table (tests, benchmarks). */
xllm_status backend_init_kernels(backend *be, int n_threads, size_t max_cols, size_t max_tokens,
                                 const struct cpu_kernels *kern, xllm_error *err);
void backend_free(backend *be);
/* Name of the kernel level in use ("avx512", "neon+dotprod", ...). */
const char *backend_level_name(const backend *be);

/* Repack a quantized matrix once, at load, (and, for llama.cpp's block
 * types, ask every later activation preparation for their activations:
 * call it for each matrix a matmul will read, before the first forward) into the order the level's matmul
 * kernels stream it (rows interleaved in tiles, nibbles pre-arranged, scales
 * gathered): W->data then points at *storage (the caller frees it with
 * xllm_free_aligned) and W->packed is set. Results stay bit-identical to the
 * stored layout. No-op (XLLM_OK, *storage NULL) where the level has no packed
 * layout for W's type, or when XLLM_REPACK=0. */
xllm_status backend_pack_matrix(backend *be, matrix *W, void **storage, xllm_error *err);

/* y[t][r] = sum_c x[t][c] * W[r][c] + bias[r], for t < T. x: [T][W.cols], y: [T][W.rows].
 * bias may be NULL. Each y element is computed the same way whatever T is
 * (results do not depend on batch composition). */
void op_matmul(backend *be, const float *x, int T, const matrix *W, const float *bias, float *y);

/* op_matmul flags. OP_ACT_READY: the activations of x for a quantized W are
 * already in be->act (op_rmsnorm_act / op_act_prepare on this x and W.cols),
 * so they are not quantized again. OP_ADD: y += (the result), per element,
 * after the bias is added (y = x W^T + bias, then y_out += y: the rounding of
 * a separate residual pass); tmp ([T][W.rows]) holds the result on the way. */
#define OP_ACT_READY 1u
#define OP_ADD 2u
void op_matmul_ex(backend *be, const float *x, int T, const matrix *W, const float *bias, float *y, float *tmp,
                  unsigned flags);

/* out = rmsnorm(x) (op_rmsnorm's arithmetic, per row of n) for T rows, and,
 * when prepare is set, each row's activations for a quantized matrix of n
 * columns into be->act in the same pass (threaded over rows). */
void op_rmsnorm_act(backend *be, const float *x, const float *w, float eps, int n, int T, float *out, int prepare);
/* Quantize T rows of x (cols wide) into be->act (what op_matmul does first for a quantized matrix). */
void op_act_prepare(backend *be, const float *x, int T, int64_t cols);

/* h[t][r] = silu(G[g0 + r] . x_t + gb[g0 + r]) * (U[u0 + r] . x_t + ub[u0 + r])
 * for r < I, t < T (op_silu_mul's arithmetic on op_matmul's elements), in one
 * parallel region over ranges of r: each task computes its gate rows into h
 * and its up rows into tmp ([T][I]) and combines them at once. G and U may be
 * the same matrix (fused gate_up: g0 = 0, u0 = I); g0 and u0 multiples of 4;
 * biases indexed by their matrix's row, may be NULL. Flags: OP_ACT_READY.
 * Threads: the planner's choice for G. */
void op_matmul_silu_mul(backend *be, const float *x, int T, const matrix *G, int64_t g0, const float *gb,
                        const matrix *U, int64_t u0, const float *ub, int64_t I, float *h, float *tmp,
                        unsigned flags);

/* Fused regions. The caller runs its own tasks over n units on the backend's
 * threads; each task computes some matrix rows for all T tokens on its thread
 * (op_matmul_rows) and uses them at once (activation, RoPE, residual...).
 * op_units_per_thread: the fewest units to give a thread when each unit is
 * rows_per_unit rows of W at T tokens: the planner's thread choice for W and
 * T's bucket (matrix.plan_threads), else op_matmul's work-size rule. */
typedef void (*op_task_fn)(void *ctx, size_t u0, size_t u1, int thread);
size_t op_units_per_thread(const backend *be, const matrix *W, int T, size_t n_units, size_t rows_per_unit);
void op_run(backend *be, size_t n_units, size_t min_per_thread, op_task_fn fn, void *ctx);
/* Rows [r0, r1) of W for T tokens on the calling task's thread:
 * y[t * ldy + (r - r0)] = W[r] . x_t + bias[r] (bias indexed by W's row, may
 * be NULL). A quantized W reads the activations in be->act, which must hold x
 * (op_act_prepare / op_rmsnorm_act). r0 must be a multiple of 4 (packed
 * tiles); r1 too unless it is W.rows. Each element is computed exactly as
 * op_matmul computes it. */
void op_matmul_rows(backend *be, const float *x, int T, const matrix *W, const float *bias, int64_t r0, int64_t r1,
                    float *y, size_t ldy, int thread);

/* Attention inner loops over n consecutive KV slots `stride` floats apart:
 * out[i] = scale * (q . k_i), and acc[d] += sum_i w[i] * v_i[d] (i in order).
 * Each (token, head) is computed the same way whatever else is in the batch. */
void op_attn_scores(const backend *be, const float *q, const float *k, size_t stride, int n, int hd, float scale,
                    float *out);
void op_attn_accum(const backend *be, float *acc, const float *w, const float *v, size_t stride, int n, int hd);

/* out[i] = x[i] / rms(x) * w[i] per row of n, for rows rows. */
void op_rmsnorm(const float *x, const float *w, float eps, int n, int rows, float *out);
/* a[i] = silu(a[i]) * b[i] */
void op_silu_mul(float *a, const float *b, size_t n);
/* Convert row `row` of W to f32 (embedding lookup). */
void op_matrix_row(const matrix *W, int64_t row, float *out);

#endif
