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
 *
 * The fused operators (op_rmsnorm_act, op_matmul_ex's OP_ACT_READY / OP_ADD,
 * op_matmul_silu_mul, and op_run + op_matmul_rows for the caller's own
 * regions) call the same kernels on row ranges and keep each element's
 * arithmetic, so they give the unfused bits.
 */
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"
#include "base/alloc.h"
#include "base/error.h"
#include "quant/kquant.h"
#include "quant/quant.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ROW_TILE 4

xllm_status backend_init_kernels(cpu_backend *be, int n_threads, size_t max_cols, size_t max_tokens,
                                 const cpu_kernels *kern, xllm_error *err) {
    memset(be, 0, sizeof *be);
    be->kern = kern;
    be->max_cols = max_cols;
    be->max_tokens = max_tokens;
    be->tp = threadpool_create(n_threads);
    if (!be->tp) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "cannot start the thread pool");
    be->n_threads = threadpool_size(be->tp);
    const char *rc = getenv("XLLM_ROW_CHUNKS");
    be->row_chunks = rc && rc[0] == '1'; /* off by default: no gain measured yet (bench/README.md, neighbour load) */
    be->scratch_floats = max_cols + 16;
    be->kscratch_bytes = (kern->scratch_bytes((int64_t)max_cols) + 63) & ~(size_t)63;
    be->scratch = mem_calloc((size_t)be->n_threads, sizeof(float *));
    be->kscratch = mem_calloc((size_t)be->n_threads, sizeof(void *));
    if (!be->scratch || !be->kscratch) goto oom;
    for (int i = 0; i < be->n_threads; i++) {
        be->scratch[i] = mem_malloc_aligned(be->scratch_floats * sizeof(float));
        be->kscratch[i] = mem_malloc_aligned(be->kscratch_bytes);
        if (!be->scratch[i] || !be->kscratch[i]) goto oom;
    }
    /* act_bytes grows with cols; round up to whole 128-column chunks (and
     * 256-value blocks for the Q8K section) */
    size_t cols_cap = (max_cols + 127) / 128 * 128, cols_k = (max_cols + QK_K - 1) / QK_K * QK_K;
    be->act_row_cap = kern->act_bytes((int64_t)cols_cap) + kq_act_bytes(KQ_ACT_Q8K, (int64_t)cols_k) +
                      kq_act_bytes(KQ_ACT_Q80, (int64_t)cols_cap);
    be->act = mem_malloc_aligned(max_tokens * be->act_row_cap);
    if (!be->act) goto oom;
    return XLLM_OK;
oom:
    backend_free(be);
    return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "cannot allocate backend scratch");
}

void backend_free(cpu_backend *be) {
    xllm_free(be->attn_part); /* attention.c's scratch */
    xllm_free(be->attn_tile);
    xllm_free(be->attn_tiles);
    if (be->scratch)
        for (int i = 0; i < be->n_threads; i++) mem_free_aligned(be->scratch[i]);
    if (be->kscratch)
        for (int i = 0; i < be->n_threads; i++) mem_free_aligned(be->kscratch[i]);
    xllm_free(be->scratch);
    xllm_free(be->kscratch);
    mem_free_aligned(be->act);
    threadpool_free(be->tp);
    memset(be, 0, sizeof *be);
}

const char *backend_level_name(const cpu_backend *be) { return be->kern ? be->kern->name : "none"; }

/* A prepared activation row holds the sections one preparation wrote (a
 * mask: ACT_LEVEL, the level's layout for our quantized types; llama.cpp's
 * KQ_ACT_Q8K and KQ_ACT_Q80 for its block types, quant/kquant.h), in that
 * order, and no others: a section nobody reads next is neither computed nor
 * spread between the rows (the stride sets how many tokens' activations the
 * GEMMs keep in L2). */
#define ACT_LEVEL 4u
#define ACT_ALL (ACT_LEVEL | (unsigned)KQ_ACT_Q8K | (unsigned)KQ_ACT_Q80)

static size_t act_section_bytes(const cpu_backend *be, unsigned sec, int64_t cols) {
    return sec == ACT_LEVEL ? be->kern->act_bytes(cols) : kq_act_bytes((int)sec, cols);
}

/* Bytes per token of the sections in `have`. */
static size_t act_stride_of(const cpu_backend *be, unsigned have, int64_t cols) {
    size_t n = 0;
    for (unsigned sec = 1; sec <= ACT_LEVEL; sec <<= 1)
        if (have & sec) n += act_section_bytes(be, sec, cols);
    return n;
}

/* Where section sec starts within a row holding `have`. */
static size_t act_section_offset(const cpu_backend *be, unsigned have, unsigned sec, int64_t cols) {
    static const unsigned order[3] = {ACT_LEVEL, KQ_ACT_Q8K, KQ_ACT_Q80};
    size_t off = 0;
    for (int i = 0; i < 3 && order[i] != sec; i++)
        if (have & order[i]) off += act_section_bytes(be, order[i], cols);
    return off;
}

/* With arithmetic "llama", W goes through kquant_llama.c (llama.cpp's float
 * steps where our kernels take others). */
static int llama_owns(const cpu_backend *be, const matrix *W) {
    return be->arith_llama && !W->packed && kq_llama_owns(W->dtype, W->group);
}

/* The section W reads (0: float W, which reads x). */
static unsigned act_need(const cpu_backend *be, const matrix *W) {
    if (llama_owns(be, W) && !dtype_is_kq(W->dtype)) return KQ_ACT_Q80; /* llama.cpp's Q8_0 / Q8_1 */
    if (dtype_is_kq(W->dtype)) return (unsigned)kq_act_kind(W->dtype);
    return dtype_is_quant(W->dtype) ? ACT_LEVEL : 0u;
}

/* Where W's activations start within a row of the current preparation. */
static size_t act_offset(const cpu_backend *be, const matrix *W) {
    return act_section_offset(be, be->act_have, act_need(be, W), W->cols);
}

static void prepare_row(const cpu_backend *be, unsigned have, const float *x, int64_t cols, unsigned char *o) {
    size_t off = 0;
    if (have & ACT_LEVEL) {
        be->kern->act_prepare(x, cols, o, be->arith_llama);
        off += be->kern->act_bytes(cols);
    }
    void (*kq_act)(int, const float *, int64_t, void *) = be->kern->kq_act ? be->kern->kq_act : kq_act_prepare;
    size_t k8 = kq_act_bytes(KQ_ACT_Q8K, cols);
    if ((have & KQ_ACT_Q8K) && k8) {
        kq_act(KQ_ACT_Q8K, x, cols, o + off);
        off += k8;
    }
    if ((have & KQ_ACT_Q80) && kq_act_bytes(KQ_ACT_Q80, cols)) kq_act(KQ_ACT_Q80, x, cols, o + off);
}

void op_matrix_row(const matrix *W, int64_t row, float *out) {
    size_t rb = quant_row_bytes(W->dtype, W->group, W->cols);
    const char *p = (const char *)W->data + (size_t)row * rb;
    if (dtype_is_quant(W->dtype)) quant_dequantize_row(W->dtype, W->group, p, W->cols, out);
    else dtype_to_f32(W->dtype, p, out, (size_t)W->cols);
}

/* Rows [r0, r1) of W for T tokens on this thread, y indexed by W's row:
 * y[t * ldy + r]. Quantized W reads be->act from token t0 on (act_stride
 * bytes per token); float W reads x. */
static void rows_abs(cpu_backend *be, const float *x, size_t act_stride, int t0, int T, const matrix *W,
                     const float *bias, float *y, size_t ldy, int64_t r0, int64_t r1, int thread) {
    const cpu_kernels *k = be->kern;
    int llama = llama_owns(be, W);
    if (llama || dtype_is_kq(W->dtype)) {
        const unsigned char *a = be->act + (size_t)t0 * act_stride + act_offset(be, W);
        if (llama) kq_matmul_llama(W->dtype, W->data, W->cols, a, act_stride, T, t0, be->act_T, bias, y, ldy, r0, r1);
        else if (k->matmul_kq) k->matmul_kq(W, a, act_stride, T, bias, y, ldy, r0, r1, be->kscratch[thread]);
        else kq_matmul_ref(W->dtype, W->data, W->cols, a, act_stride, T, bias, y, ldy, r0, r1);
    } else if (dtype_is_quant(W->dtype))
        k->matmul_q(W, be->act + (size_t)t0 * act_stride, act_stride, T, bias, y, ldy, r0, r1, be->kscratch[thread]);
    else if (be->arith_llama && (W->dtype == XLLM_DT_F16 || W->dtype == XLLM_DT_F32) && !W->packed) /* f16_llama.c */
        op_f16_matmul_llama(W, x + (size_t)t0 * (size_t)W->cols, T, bias, y, ldy, r0, r1, be->scratch[thread],
                            be->llama_vec_dot);
    else
        k->matmul_f(W, x + (size_t)t0 * (size_t)W->cols, T, bias, y, ldy, r0, r1, be->kscratch[thread]);
}

/* Rows [r0, r1) of W into y, where y (and its rows ldy apart per token) starts
 * at row r0: the kernels index y by the matrix's row, so they get a view of W
 * that starts at r0 (its bytes: r0 stored rows, or r0 / 4 packed tiles;
 * r0 is a multiple of 4 for packed matrices). Per-row arithmetic does not
 * depend on where a row sits in the view, so the results are those of W. */
static void rows_rel(cpu_backend *be, const float *x, size_t act_stride, int t0, int T, const matrix *W,
                     const float *bias, float *y, size_t ldy, int64_t r0, int64_t r1, int thread) {
    matrix v = *W;
    size_t off;
    int64_t tile = W->packed && be->kern->packed_rows ? be->kern->packed_rows(W) : 4;
    if (r0 % tile) {
        /* a packed tile of more than 4 rows (quantized weights only) begins
         * before r0: its rows up to the next tile go through a small buffer
         * (the view must start at a tile, and y has no rows before r0) */
        int64_t ra = r0 - r0 % tile, re = ra + tile < r1 ? ra + tile : r1;
        float buf[64 * 64];
        matrix head = *W;
        head.rows = ra;
        v.data = (const char *)W->data + be->kern->packed_bytes(&head);
        v.rows = W->rows - ra;
        assert(tile <= 64 && dtype_is_quant(W->dtype));
        for (int tb = 0; tb < T; tb += 64) {
            int nt = T - tb < 64 ? T - tb : 64;
            rows_abs(be, x, act_stride, t0 + tb, nt, &v, bias ? bias + ra : NULL, buf, (size_t)tile, r0 - ra, re - ra,
                     thread);
            for (int t = 0; t < nt; t++)
                memcpy(y + (size_t)(tb + t) * ldy, buf + (size_t)t * (size_t)tile + (r0 - ra),
                       sizeof(float) * (size_t)(re - r0));
        }
        if (re < r1) rows_rel(be, x, act_stride, t0, T, W, bias, y + (re - r0), ldy, re, r1, thread);
        return;
    }
    if (W->packed) {
        matrix head = *W;
        head.rows = r0;
        off = r0 ? be->kern->packed_bytes(&head) : 0;
    } else {
        off = (size_t)r0 * (dtype_is_quant(W->dtype) ? quant_row_bytes(W->dtype, W->group, W->cols)
                                                          : (size_t)W->cols * dtype_size(W->dtype));
    }
    v.data = (const char *)W->data + off;
    v.rows = W->rows - r0;
    rows_abs(be, x, act_stride, t0, T, &v, bias ? bias + r0 : NULL, y, ldy, 0, r1 - r0, thread);
}

/* The order of a fused task's work: blocks of tokens whose prepared
 * activations stay in L2 (as inside the GEMM kernels: the same ~384 KiB),
 * and within a block, rows a few at a time (a multiple of ROW_TILE) so that
 * the block's outputs (about 64 KiB) are used while still in cache. Rows in
 * the outer loop instead would stream every token's activations again for
 * each few rows (at T = 512 and 2048 columns, 1.1 MB per 64 rows). At small
 * T, one block and the whole range at once (one weight stream for the
 * prefetchers). Each output's arithmetic is the kernel's whatever the
 * blocks (kernels.h), so the order does not change results. */
int op_fuse_tokens(const cpu_backend *be, const matrix *W, int T) {
    size_t per_token = dtype_is_quant(W->dtype) ? be->act_stride : (size_t)W->cols * sizeof(float);
    int tb = kernels_token_block(per_token, (size_t)384 << 10, 8);
    return T < tb ? T : tb;
}

static int64_t fuse_rows(int T) {
    int64_t r = 16384 / (T > 0 ? T : 1);
    if (r < 64) r = 64;
    return r - r % ROW_TILE;
}

typedef struct {
    cpu_backend *be;
    const float *x;
    int T;
    const matrix *W;
    const float *bias;
    float *y, *tmp;
    int add;
    size_t act_stride;
} matmul_job;

static void matmul_tiles(void *p, size_t u0, size_t u1, int thread) {
    matmul_job *j = p;
    const matrix *W = j->W;
    size_t n = (size_t)W->rows;
    int64_t r0 = (int64_t)u0 * ROW_TILE, r1 = (int64_t)u1 * ROW_TILE;
    if (r1 > W->rows) r1 = W->rows;
    if (!j->add) {
        rows_abs(j->be, j->x, j->act_stride, 0, j->T, W, j->bias, j->y, n, r0, r1, thread);
        return;
    }
    /* y += x W^T + bias: the rows into tmp, then added while in cache */
    int tb = op_fuse_tokens(j->be, W, j->T);
    for (int t0 = 0; t0 < j->T; t0 += tb) {
        int nt = j->T - t0 < tb ? j->T - t0 : tb;
        int64_t step = fuse_rows(nt);
        for (int64_t c0 = r0; c0 < r1; c0 += step) {
            int64_t c1 = c0 + step < r1 ? c0 + step : r1;
            rows_abs(j->be, j->x, j->act_stride, t0, nt, W, j->bias, j->tmp + (size_t)t0 * n, n, c0, c1, thread);
            for (int t = t0; t < t0 + nt; t++) {
                float *yr = j->y + (size_t)t * n;
                const float *tr = j->tmp + (size_t)t * n;
                for (int64_t r = c0; r < c1; r++) yr[r] += tr[r];
            }
        }
    }
}

typedef struct {
    cpu_backend *be;
    const float *x;
    int64_t cols;
    unsigned have;
    size_t act_stride;
} prepare_job;

static void prepare_tokens(void *p, size_t t0, size_t t1, int thread) {
    prepare_job *j = p;
    (void)thread;
    for (size_t t = t0; t < t1; t++)
        prepare_row(j->be, j->have, j->x + t * (size_t)j->cols, j->cols, j->be->act + t * j->act_stride);
}

/* per token, so the split does not matter; threads only for big batches */
static size_t tokens_per_thread(int64_t cols) {
    size_t per_tok = cols > 0 ? (size_t)cols : 1;
    return per_tok >= 65536 ? 1 : 65536 / per_tok;
}

/* The preparation's record: be->act holds T rows of x (cols wide) with the
 * sections in have. */
static void act_record(cpu_backend *be, const float *x, int T, int64_t cols, unsigned have) {
    be->act_have = have;
    be->act_stride = act_stride_of(be, have, cols);
    be->act_x = x;
    be->act_cols = cols;
    be->act_T = T;
}

/* Prepare T rows of x with the sections in have (threaded over tokens). */
static void act_prepare_sections(cpu_backend *be, const float *x, int T, int64_t cols, unsigned have) {
    prepare_job j = {be, x, cols, have, act_stride_of(be, have, cols)};
    threadpool_run(be->tp, (size_t)T, tokens_per_thread(cols), prepare_tokens, &j);
    act_record(be, x, T, cols, have);
}

/* be->act holds x's rows for a matrix of cols columns, with the sections need. */
static int act_holds(const cpu_backend *be, const float *x, int T, int64_t cols, unsigned need) {
    return be->act_x == x && be->act_cols == cols && be->act_T >= T && (be->act_have & need) == need;
}

/* Make be->act hold x's T rows with the sections need. Not ready: x is
 * prepared (its rows may have changed since an earlier preparation of the
 * same buffer). Ready (x is the last BE_PREPARE rmsnorm's output, so what be->act
 * holds of it is current): prepared again only for a section it lacks, with
 * those it has; the section is learnt, so the norms prepare it from then on. */
static void act_ensure(cpu_backend *be, const float *x, int T, int64_t cols, unsigned need, int ready) {
    if (!need) return;
    if (!ready) {
        act_prepare_sections(be, x, T, cols, need);
        return;
    }
    if (act_holds(be, x, T, cols, need)) return;
    be->act_norm_need |= need;
    int same = be->act_x == x && be->act_cols == cols && be->act_T >= T;
    act_prepare_sections(be, x, T, cols, need | (same ? be->act_have : 0u));
}

void op_act_prepare(cpu_backend *be, const float *x, int T, const matrix *const *W, int n, unsigned flags) {
    if (T <= 0 || n <= 0) return;
    unsigned need = 0;
    for (int i = 0; i < n; i++) need |= act_need(be, W[i]);
    act_ensure(be, x, T, W[0]->cols, need, (flags & OP_ACT_READY) != 0);
}

size_t op_units_per_thread(const cpu_backend *be, const matrix *W, int T, size_t n_units, size_t rows_per_unit) {
    (void)be;
    int planned = W->plan_threads[mm_bucket(T)];
    if (planned > 0) /* the planner's measured choice for this shape and batch size */
        return n_units ? (n_units + (size_t)planned - 1) / (size_t)planned : 1;
    /* at least ~32k multiply-adds per thread, or threading costs more than it gains */
    size_t per_unit = (size_t)W->cols * (size_t)(T > 0 ? T : 1) * (rows_per_unit ? rows_per_unit : 1);
    return per_unit >= 32768 ? 1 : 32768 / per_unit;
}

/* Run a job over row tiles (ROW_TILE rows each). With several threads the tiles
 * go out in chunks from a shared counter (threadpool_run_chunked), ~8 chunks per
 * thread of whole 64-row groups (the widest packed tile, so a chunk seldom
 * starts inside one): a thread that a neighbouring process slows takes fewer
 * chunks, where a fixed split would make the whole step wait for it. Each row's
 * arithmetic does not depend on the range it comes in (rows_rel), so the
 * results are those of a fixed split. Too few tiles for that: a fixed split. */
static void run_row_tiles(cpu_backend *be, size_t units, size_t min_per_thread, op_task_fn fn, void *ctx) {
    size_t group = 64 / ROW_TILE, nt = (size_t)be->n_threads;
    if (!be->row_chunks || nt < 2 || units < 4 * group * nt) {
        threadpool_run(be->tp, units, min_per_thread, fn, ctx);
        return;
    }
    size_t chunk = (units / (8 * nt) + group - 1) / group * group;
    threadpool_run_chunked(be->tp, units, min_per_thread, chunk, fn, ctx); /* >= group: units >= 4 group nt */
}

void op_run(cpu_backend *be, size_t n_units, size_t min_per_thread, op_task_fn fn, void *ctx) {
    threadpool_run(be->tp, n_units, min_per_thread, fn, ctx);
}

void op_matmul_rows(cpu_backend *be, const float *x, int t0, int T, const matrix *W, const float *bias, int64_t r0,
                    int64_t r1, float *y, size_t ldy, int thread) {
    if (T <= 0 || r1 <= r0) return;
    size_t stride = 0;
    if (dtype_is_quant(W->dtype)) {
        stride = be->act_stride;
        assert(act_holds(be, x, t0 + T, W->cols, act_need(be, W)));
    }
    rows_rel(be, x, stride, t0, T, W, bias, y, ldy, r0, r1, thread);
}

void op_matmul_ex(cpu_backend *be, const float *x, int T, const matrix *W, const float *bias, float *y, float *tmp,
                  unsigned flags) {
    if (T <= 0) return;
    matmul_job j = {be, x, T, W, bias, y, tmp, (flags & OP_ADD) != 0, 0};
    if (dtype_is_quant(W->dtype)) {
        act_ensure(be, x, T, W->cols, act_need(be, W), (flags & OP_ACT_READY) != 0);
        j.act_stride = be->act_stride;
    }
    size_t units = ((size_t)W->rows + ROW_TILE - 1) / ROW_TILE;
    run_row_tiles(be, units, op_units_per_thread(be, W, T, units, ROW_TILE), matmul_tiles, &j);
}

void op_matmul(cpu_backend *be, const float *x, int T, const matrix *W, const float *bias, float *y) {
    op_matmul_ex(be, x, T, W, bias, y, NULL, 0);
}

typedef struct {
    cpu_backend *be;
    const float *x, *w;
    float eps;
    int n;
    unsigned have; /* the sections each row's activations get (0: none) */
    float *out;
    size_t act_stride;
} rmsnorm_job;

static void rmsnorm_tokens(void *p, size_t t0, size_t t1, int thread) {
    rmsnorm_job *j = p;
    (void)thread;
    for (size_t t = t0; t < t1; t++) {
        float *o = j->out + t * (size_t)j->n;
        op_rmsnorm(j->x + t * (size_t)j->n, j->w, j->eps, j->n, 1, o, j->be->arith_llama);
        if (j->have) prepare_row(j->be, j->have, o, j->n, j->be->act + t * j->act_stride);
    }
}

void op_rmsnorm_act(cpu_backend *be, const float *x, const float *w, float eps, int n, int T, float *out, int prepare) {
    if (T <= 0) return;
    unsigned have = prepare ? be->act_norm_need : 0u;
    rmsnorm_job j = {be, x, w, eps, n, have, out, act_stride_of(be, have, n)};
    threadpool_run(be->tp, (size_t)T, tokens_per_thread(n), rmsnorm_tokens, &j);
    if (have) act_record(be, out, T, n, have);
    else if (be->act_x == out) be->act_x = NULL; /* its rows are no longer what was prepared */
}

typedef struct {
    cpu_backend *be;
    const float *x;
    int T;
    const matrix *G, *U;
    int64_t g0, u0, I;
    const float *gb, *ub;
    float *h, *tmp;
    size_t sg, su;
} silu_job;

static void silu_tiles(void *p, size_t u0, size_t u1, int thread) {
    silu_job *j = p;
    size_t I = (size_t)j->I;
    int64_t r0 = (int64_t)u0 * ROW_TILE, r1 = (int64_t)u1 * ROW_TILE;
    if (r1 > j->I) r1 = j->I;
    int tb = op_fuse_tokens(j->be, j->G, j->T);
    for (int t0 = 0; t0 < j->T; t0 += tb) {
        int nt = j->T - t0 < tb ? j->T - t0 : tb;
        int64_t step = fuse_rows(nt);
        float *h = j->h + (size_t)t0 * I, *tmp = j->tmp + (size_t)t0 * I;
        for (int64_t c0 = r0; c0 < r1; c0 += step) {
            int64_t c1 = c0 + step < r1 ? c0 + step : r1;
            /* gate rows straight into h, up rows into tmp (both [T][I]) */
            rows_rel(j->be, j->x, j->sg, t0, nt, j->G, j->gb, h + c0, I, j->g0 + c0, j->g0 + c1, thread);
            rows_rel(j->be, j->x, j->su, t0, nt, j->U, j->ub, tmp + c0, I, j->u0 + c0, j->u0 + c1, thread);
            for (int t = 0; t < nt; t++)
                op_silu_mul(h + (size_t)t * I + (size_t)c0, tmp + (size_t)t * I + (size_t)c0, (size_t)(c1 - c0),
                            j->be->arith_llama);
        }
    }
}

void op_matmul_silu_mul(cpu_backend *be, const float *x, int T, const matrix *G, int64_t g0, const float *gb,
                        const matrix *U, int64_t u0, const float *ub, int64_t I, float *h, float *tmp,
                        unsigned flags) {
    if (T <= 0 || I <= 0) return;
    assert(g0 % ROW_TILE == 0 && u0 % ROW_TILE == 0 && G->cols == U->cols);
    silu_job j = {be, x, T, G, U, g0, u0, I, gb, ub, h, tmp, 0, 0};
    int qg = dtype_is_quant(G->dtype), qu = dtype_is_quant(U->dtype);
    if (qg || qu) {
        act_ensure(be, x, T, G->cols, act_need(be, G) | act_need(be, U), (flags & OP_ACT_READY) != 0);
        if (qg) j.sg = be->act_stride;
        if (qu) j.su = be->act_stride;
    }
    size_t units = ((size_t)I + ROW_TILE - 1) / ROW_TILE;
    run_row_tiles(be, units, op_units_per_thread(be, G, T, units, 2 * ROW_TILE), silu_tiles, &j);
}

void op_rmsnorm(const float *x, const float *w, float eps, int n, int rows, float *out, int llama) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * (size_t)n;
        float *o = out + (size_t)r * (size_t)n;
        float inv;
        if (llama) { /* llama.cpp: the squares (rounded to float) summed in double, the mean rounded to float */
            double ss = 0;
            for (int i = 0; i < n; i++) ss += (double)(xr[i] * xr[i]);
            inv = 1.0f / sqrtf((float)(ss / n) + eps);
        } else {
            float ss = 0;
            for (int i = 0; i < n; i++) ss += xr[i] * xr[i];
            inv = 1.0f / sqrtf(ss / (float)n + eps);
        }
        for (int i = 0; i < n; i++) o[i] = w[i] * (xr[i] * inv);
    }
}

