/*
 * cpu_backend.h - the CPU backend's context and its internal operations.
 *
 * The context owns the thread pool, per-thread scratch, the kernel level in
 * use (kernels.h), the prepared (quantized) activations and the attention
 * strategies' scratch. cpu_backend.c turns it into the backend_ops table of
 * backend.h; nothing outside src/backend includes this header (tests and
 * benchmarks of the kernels do).
 *
 * Each output element is computed by one thread in the level's fixed order
 * whatever the batch size and the thread split are (see kernels.h), so
 * results do not depend on batch composition.
 */
#ifndef XLLM_BACKEND_CPU_BACKEND_H
#define XLLM_BACKEND_CPU_BACKEND_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "backend/backend.h"
#include "base/threadpool.h"
#include "xllm.h"

/* Keys scored at a time per (token, head) in attention (partials folded per chunk). */
#define ATTN_CHUNK 128
/* split-KV partials kept for at most this many keys per item (longer: per-item strategy) */
#define ATTN_SPLIT_MAX_KEYS 32768

/* llama.cpp's flash attention computes in f16 for batches under this many tokens */
#define ATTN_LLAMA_TILE 64

typedef enum attn_strategy { ATTN_PER_ITEM = 0, ATTN_SPLIT_KV, ATTN_SHARED_KV } attn_strategy;

struct cpu_kernels;

typedef struct cpu_backend {
    threadpool *tp;
    int n_threads;
    int row_chunks; /* matmuls hand out row tiles in chunks (threadpool_run_chunked); XLLM_ROW_CHUNKS=1; default: fixed ranges */
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
     * preparation (op_matmul, op_act_prepare, op_rmsnorm_act), act_stride
     * bytes apart, with the sections in act_have (cpu_ops.c: the level's
     * layout and llama.cpp's, KQ_ACT_* of quant/kquant.h); act_x NULL:
     * nothing. act_norm_need: the sections op_rmsnorm_act prepares, learnt
     * from the matmuls that read its output */
    const float *act_x;
    int64_t act_cols;
    int act_T;
    size_t act_stride;
    unsigned act_have, act_norm_need;
    /* 1: backend_pack_matrix keeps every matrix in its stored layout */
    int no_repack;

    /* attention (attention.c): 0 = chosen per step, 1 = per item, 2 = split-KV, 3 = shared-KV */
    int attn_force;
    attn_strategy attn_last;  /* the strategy of the last attention call (tests) */
    int attn_no_prefetch;     /* 1: no K/V prefetch hints (attention.c; bench_kernels --attn-decode compares) */
    /* 1: llama.cpp's arithmetic where it differs from ours (backend_options
     * arith_llama): its Q4_0/Q4_1/Q8_0 activation scales (act_prepare),
     * RMSNorm's sum in double, and its flash attention's f16 arithmetic for
     * batches under ATTN_LLAMA_TILE tokens (attention_f16.c) */
    int arith_llama;
    /* 1 while cb_moe runs the routed experts: llama.cpp computes those
     * (mul_mat_id) with ggml_vec_dot_f16's order, never its llamafile GEMM */
    int llama_vec_dot;
    int n_heads, n_kv_heads, head_dim;
    float *attn_part;         /* split-KV partials: attn_part_items x (head_dim + 2) */
    size_t attn_part_items;
    /* shared-KV, made on first use: per thread attn_tile_floats of group
     * buffers; the step's token tiles (max_tokens + 1); state 0 = not made
     * yet, 1 = made, -1 = could not be allocated */
    float *attn_tile;
    size_t attn_tile_floats;
    int32_t *attn_tiles;
    int attn_tile_state;
    char describe[64];
    /* the planner's cache file (plan_cache.h); NULL: plans measured at every load */
    char *plan_cache;
} cpu_backend;

/* max_cols: the widest matrix row the kernels will see; max_tokens: the most
 * activation rows one matmul gets; kern: the kernel level. Not thread-safe. */
xllm_status backend_init_kernels(cpu_backend *be, int n_threads, size_t max_cols, size_t max_tokens,
                                 const struct cpu_kernels *kern, xllm_error *err);
void backend_free(cpu_backend *be);
/* Name of the kernel level in use ("avx512", "neon+dotprod", ...). */
const char *backend_level_name(const cpu_backend *be);
/* The CPU backend behind a backend handle (NULL if it is another backend). */
cpu_backend *cpu_backend_of(const backend *be);
/* The ops table (cpu_backend.c) and its constructor (backend.c's registry). */
extern const backend_ops cpu_backend_ops;
xllm_status cpu_backend_create(backend *be, const backend_options *o, xllm_error *err);

/* Repack a quantized matrix once, at load, (and, for llama.cpp's block
 * types, ask every later activation preparation for their activations:
 * call it for each matrix a matmul will read, before the first forward) into the order the level's matmul
 * kernels stream it (rows interleaved in tiles, nibbles pre-arranged, scales
 * gathered): W->data then points at *storage (the caller frees it with
 * mem_free_aligned) and W->packed is set. Results stay bit-identical to the
 * stored layout. No-op (XLLM_OK, *storage NULL) where the level has no packed
 * layout for W's type, or when be->no_repack is set. */
xllm_status backend_pack_matrix(cpu_backend *be, matrix *W, void **storage, xllm_error *err);

/* y[t][r] = sum_c x[t][c] * W[r][c] + bias[r], for t < T. x: [T][W.cols], y: [T][W.rows].
 * bias may be NULL. Each y element is computed the same way whatever T is
 * (results do not depend on batch composition). */
void op_matmul(cpu_backend *be, const float *x, int T, const matrix *W, const float *bias, float *y);

/* op_matmul flags. OP_ACT_READY: the activations of x for a quantized W are
 * already in be->act (op_rmsnorm_act / op_act_prepare on this x and W.cols),
 * so they are not quantized again. OP_ADD: y += (the result), per element,
 * after the bias is added (y = x W^T + bias, then y_out += y: the rounding of
 * a separate residual pass); tmp ([T][W.rows]) holds the result on the way. */
#define OP_ACT_READY BE_ACT_READY
#define OP_ADD BE_ADD
void op_matmul_ex(cpu_backend *be, const float *x, int T, const matrix *W, const float *bias, float *y, float *tmp,
                  unsigned flags);

/* out = rmsnorm(x) (op_rmsnorm's arithmetic, per row of n) for T rows, and,
 * when prepare is set, each row's activations for a quantized matrix of n
 * columns into be->act in the same pass (threaded over rows). */
void op_rmsnorm_act(cpu_backend *be, const float *x, const float *w, float eps, int n, int T, float *out, int prepare);
/* Quantize T rows of x into be->act for the n matrices W (same columns) that
 * read them next (what op_matmul does first for a quantized matrix); with
 * OP_ACT_READY (x is the last op_rmsnorm_act's output) only what that did not
 * prepare. Before op_matmul_rows. */
void op_act_prepare(cpu_backend *be, const float *x, int T, const matrix *const *W, int n, unsigned flags);

/* h[t][r] = silu(G[g0 + r] . x_t + gb[g0 + r]) * (U[u0 + r] . x_t + ub[u0 + r])
 * for r < I, t < T (op_silu_mul's arithmetic on op_matmul's elements), in one
 * parallel region over ranges of r: each task computes its gate rows into h
 * and its up rows into tmp ([T][I]) and combines them at once. G and U may be
 * the same matrix (fused gate_up: g0 = 0, u0 = I); g0 and u0 multiples of 4;
 * biases indexed by their matrix's row, may be NULL. Flags: OP_ACT_READY.
 * Threads: the planner's choice for G. */
void op_matmul_silu_mul(cpu_backend *be, const float *x, int T, const matrix *G, int64_t g0, const float *gb,
                        const matrix *U, int64_t u0, const float *ub, int64_t I, float *h, float *tmp,
                        unsigned flags);

/* Fused regions. The caller runs its own tasks over n units on the backend's
 * threads; each task computes some matrix rows for a block of tokens on its
 * thread (op_matmul_rows) and uses them at once (activation, RoPE,
 * residual...), block after block of op_fuse_tokens tokens (their prepared
 * activations stay in L2 while the rows stream past).
 * op_units_per_thread: the fewest units to give a thread when each unit is
 * rows_per_unit rows of W at T tokens: the planner's thread choice for W and
 * T's bucket (matrix.plan_threads), else op_matmul's work-size rule.
 * op_fuse_tokens: tokens per block for W at a batch of T (T when it fits).
 * All thread-safe on distinct tasks' rows (pure reads of the backend). */
typedef void (*op_task_fn)(void *ctx, size_t u0, size_t u1, int thread);
size_t op_units_per_thread(const cpu_backend *be, const matrix *W, int T, size_t n_units, size_t rows_per_unit);
int op_fuse_tokens(const cpu_backend *be, const matrix *W, int T);
void op_run(cpu_backend *be, size_t n_units, size_t min_per_thread, op_task_fn fn, void *ctx);
/* Rows [r0, r1) of W for tokens [t0, t0 + T) on the calling task's thread:
 * y[t * ldy + (r - r0)] = W[r] . x_(t0+t) + bias[r] (bias indexed by W's row,
 * may be NULL; x is the whole batch's). A quantized W reads the activations
 * in be->act, which must hold x (op_act_prepare / op_rmsnorm_act). r0 must
 * be a multiple of 4 (packed tiles); r1 too unless it is W.rows. Each element
 * is computed exactly as op_matmul computes it. */
void op_matmul_rows(cpu_backend *be, const float *x, int t0, int T, const matrix *W, const float *bias, int64_t r0,
                    int64_t r1, float *y, size_t ldy, int thread);

/* out[i] = x[i] / rms(x) * w[i] per row of n, for rows rows; llama: the
 * sum of squares as llama.cpp takes it (in double). */
void op_rmsnorm(const float *x, const float *w, float eps, int n, int rows, float *out, int llama);
/* a[i] = silu(a[i]) * b[i]; llama: as llama.cpp computes it (silu.c,
 * arithmetic "llama"). Thread-safe on distinct ranges (pure). */
void op_silu_mul(float *a, const float *b, size_t n, int llama);
/* Rows [r0, r1) of F16 or F32 W for T rows of x as llama.cpp computes them
 * (f16_llama.c); xr: W->cols floats of scratch. Thread-safe per xr. */
void op_f16_matmul_llama(const matrix *W, const float *x, int T, const float *bias, float *y, size_t ldy, int64_t r0,
                         int64_t r1, float *xr, int vec_dot);
/* a[i] = gelu_tanh(a[i]) * b[i]: ours or, with llama set, llama.cpp's (gelu.c). Thread-safe. */
void op_gelu_mul(float *a, const float *b, size_t n, int llama);
/* Convert row `row` of W to f32 (embedding lookup). */
void op_matrix_row(const matrix *W, int64_t row, float *out);

/* Attention (attention.c): the strategy the rule picks for this call (the
 * planner's per-step choice; results are identical either way), and the call.
 * *max_chunks: the most ATTN_CHUNK-key chunks an item has; *tile_tokens:
 * shared-KV's tokens per tile, the size it was decided with (0 when another
 * strategy is returned). Thread-safe (reads be and d). */
attn_strategy cpu_attention_strategy(const cpu_backend *be, const be_attn *d, int *max_chunks, int *tile_tokens);
void cpu_attention_run(cpu_backend *be, const be_attn *d);
/* The attention scratch sized from be->n_heads.. and max_positions (at
 * create); backend_free frees it. */
xllm_status cpu_attention_init(cpu_backend *be, int max_positions, xllm_error *err);
/* llama.cpp's flash-attention arithmetic (attention_f16.c; its f16 loop under
 * ATTN_LLAMA_TILE tokens, its tiled path from there): the (token, head)
 * items [i0, i1) of d on thread `thread` (its scratch; thread-safe on
 * distinct items and threads). */
void cpu_attention_llama_items(cpu_backend *be, const be_attn *d, size_t i0, size_t i1, int thread);

/* The first key token t of d sees: its position less the sliding window, or 0. */
/* The factor the score kernels take: be_attn's scale (1 / sqrt(head_dim)
 * when 0), divided by the soft-cap when there is one (attn_softcap then
 * takes the scores to softcap * tanh(s), llama.cpp's order). */
static inline float attn_kernel_scale(const be_attn *d) {
    float s = d->scale > 0 ? d->scale : 1.0f / sqrtf((float)d->head_dim);
    return d->softcap > 0 ? s / d->softcap : s;
}
static inline void attn_softcap(const be_attn *d, float *s, int n) {
    if (d->softcap > 0)
        for (int i = 0; i < n; i++) s[i] = d->softcap * tanhf(s[i]);
}

static inline int attn_first_key(const be_attn *d, int t) {
    int pos = d->pos[t];
    return d->window > 0 && pos - d->window + 1 > 0 ? pos - d->window + 1 : 0;
}

/* Head kvh's row at position pos through a block table (kv_cache.h's layout:
 * slots of n_kv_heads rows of kvq_row_bytes). */
static inline const unsigned char *attn_kv_row(const be_attn *d, const void *base, const int32_t *table, int pos,
                                               int kvh) {
    size_t rb = kvq_row_bytes(d->kv_type, d->head_dim);
    return (const unsigned char *)base +
           (((size_t)table[pos / d->block_size] * (size_t)d->block_size + (size_t)(pos % d->block_size)) *
                (size_t)d->n_kv_heads + (size_t)kvh) * rb;
}

/* A latent (MLA) position's whole row, head_dim values, into out: its first
 * half from the K pool's row, the rest from the V pool's (be_attn.latent). */
static inline void attn_latent_row(const be_attn *d, const int32_t *table, int pos, float *out) {
    int h = d->head_dim / 2;
    size_t off = ((size_t)table[pos / d->block_size] * (size_t)d->block_size + (size_t)(pos % d->block_size)) *
                 kvq_row_bytes(d->kv_type, h);
    kvq_load_row(d->kv_type, (const unsigned char *)d->k_cache + off, h, out);
    kvq_load_row(d->kv_type, (const unsigned char *)d->v_cache + off, h, out + h);
}

/* The load-time planner (planner.c): per weight shape and batch bucket, the
 * thread count and kernel variant measured fastest, within budget_ms. */
xllm_status cpu_planner_run(cpu_backend *be, matrix *const *ws, size_t n, int max_tokens, int budget_ms,
                            struct cJSON **report, xllm_error *err);

#endif
