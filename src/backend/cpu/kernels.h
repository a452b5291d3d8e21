/*
 * kernels.h - CPU kernel levels, run-time dispatch, and the table of kernels
 * each level provides.
 *
 * Levels: scalar (portable C, the reference: today's arithmetic), avx2
 * (AVX2+FMA+F16C), avx512 (F+BW+VL+VNNI), neon (aarch64; with the dot-product
 * extension when the CPU has it). Each level lives in its own file compiled
 * with its own target flags (kernels_<level>.c); only the file of a level the
 * CPU has is ever called, so the binary runs on any x86-64. cpu_ops.c (the
 * orchestrator: threads, activation preparation, row splits) calls a level
 * only through this table.
 *
 * Determinism (results do not depend on batch composition): for one level,
 * every output element of a matmul is computed by the same sequence of
 * operations whatever T is, whichever row tile or token tile it falls in and
 * whatever the thread split. Quantized matmuls do exact int32 sums per block
 * and accumulate them in float in a fixed lane layout and block order shared
 * by the GEMV (T == 1) and GEMM (register-blocked, T > 1) paths; float matmuls
 * use the same lane layout and reduction in both paths. Different levels may
 * differ from each other by rounding.
 */
#ifndef XLLM_BACKEND_CPU_KERNELS_H
#define XLLM_BACKEND_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include "backend/backend.h"
#include "backend/cpu/attn_kernels.h"

typedef enum cpu_level { CPU_SCALAR = 0, CPU_AVX2, CPU_AVX512, CPU_NEON, CPU_LEVEL_COUNT } cpu_level;

typedef struct cpu_features {
    int avx, avx2, fma, f16c, os_ymm;                                 /* x86-64 */
    int avx512f, avx512bw, avx512vl, avx512vnni, avx512bf16, os_zmm;
    int neon, dotprod;                                                /* aarch64 */
} cpu_features;

typedef struct cpu_kernels {
    cpu_level level;
    const char *name;         /* "avx512", "neon+dotprod", ... */

    /* Quantized activations in the level's own layout: one row of `cols`
     * (a multiple of 32) takes act_bytes(cols) bytes (a multiple of 64). */
    size_t (*act_bytes)(int64_t cols);
    void (*act_prepare)(const float *x, int64_t cols, void *out, int llama);
    /* The same quantization in the reference layout (quant_activations, llama
     * as there): bit-identical to it at every level. */
    void (*quant_act)(const float *x, int64_t cols, int8_t *q, float *d, int32_t *s, float *ds, int llama);

    /* Per-thread scratch the matmuls need for rows of up to `cols` columns. */
    size_t (*scratch_bytes)(int64_t cols);
    /* y[t * ldy + r] = W[r] . x_t (+ bias[r]) for rows r in [r0, r1) and
     * tokens t < T. Quantized W: act holds T prepared rows, act_stride bytes
     * apart. Float W (F32/F16/BF16): x is [T][W->cols] f32. */
    void (*matmul_q)(const matrix *W, const void *act, size_t act_stride, int T, const float *bias, float *y,
                     size_t ldy, int64_t r0, int64_t r1, void *scratch);
    void (*matmul_f)(const matrix *W, const float *x, int T, const float *bias, float *y, size_t ldy, int64_t r0,
                     int64_t r1, void *scratch);

    /* llama.cpp's block types (quant/kquant.h), rows [r0, r1) as matmul_q:
     * act points at token 0's section of the type's activations (Q8K or
     * Q80), act_stride bytes per token. NULL, or a type the level has no
     * kernel for: the reference, kq_matmul_ref. */
    void (*matmul_kq)(const matrix *W, const void *act, size_t act_stride, int T, const float *bias, float *y,
                      size_t ldy, int64_t r0, int64_t r1, void *scratch);
    /* Those types' activations, kq_act_prepare's bytes exactly; NULL: that
     * function itself. */
    void (*kq_act)(int kind, const float *x, int64_t cols, void *out);

    /* The level's own weight layout (NULL where it has none): bytes of W
     * packed (0: this W stays as stored), and tiles [tile0, tile1) of 4 rows
     * of W, stored layout, written into the packed matrix at out. matmul_q
     * (matmul_kq for llama.cpp's types the level packs: avx512's Q4_K, Q6_K)
     * reads W->packed matrices in that layout, r0 a multiple of 4. */
    size_t (*packed_bytes)(const matrix *W);
    void (*repack)(const matrix *W, int64_t tile0, int64_t tile1, void *out);
    /* Rows per tile of W's packed layout (a multiple of 4, at most 64);
     * NULL: 4. A view of a packed matrix (cpu_ops) starts at a tile. */
    int64_t (*packed_rows)(const matrix *W);
    /* Variants of matmul_q on packed matrices the planner may choose between
     * (matrix.plan_kernel = 1 + index; 0 = the level's own rule), by name.
     * They differ in loop order and tiling only: identical results. */
    int n_variants;
    const char *const *variant_names;

    /* The level's attention inner loops (attn_kernels.h). */
    const struct cpu_attn_kernels *attn;
} cpu_kernels;

/* GEMV software prefetch, off by default. A GEMV reads its rows one after
 * another, in memory order, and then the hardware prefetchers do best alone
 * (measured: bench_kernels --prefetch-sweep; reading 4 short rows
 * interleaved, as an earlier version did, starved them instead). When on:
 * while the len bytes at p are used, fetch the bytes kernels_prefetch_bytes
 * further on (across row ends: rows are contiguous), never at or past end. */
extern size_t kernels_prefetch_bytes; /* 0: off (the default) */
static inline void kernels_prefetch_ahead(const void *p, size_t len, const void *end) {
    if (!kernels_prefetch_bytes) return;
    const char *q = (const char *)p + kernels_prefetch_bytes;
    for (size_t o = 0; o < len; o += 64)
        if (q + o < (const char *)end) __builtin_prefetch(q + o);
}

/* Tokens per block of a GEMM whose prepared activations (bytes_per_token
 * each) fit `budget` bytes (the level's share of L2): a multiple of nt (the
 * register tile's tokens) between nt and 96. Thread-safe. */
static inline int kernels_token_block(size_t bytes_per_token, size_t budget, int nt) {
    size_t tb = budget / (bytes_per_token ? bytes_per_token : 1);
    if (tb < (size_t)nt) tb = (size_t)nt;
    if (tb > 96) tb = 96;
    return (int)(tb / (size_t)nt * (size_t)nt);
}

void cpu_features_detect(cpu_features *f);
const char *cpu_level_name(cpu_level l);
/* Compiled into this binary and supported by this CPU (and its OS). */
int cpu_level_supported(cpu_level l);
/* The fastest supported level. */
cpu_level cpu_level_best(void);
/* The level XLLM_CPU asks for (NULL or "" or "auto": the best). An unknown
 * name is XLLM_ERR_INVALID_ARGUMENT, a level this CPU lacks
 * XLLM_ERR_UNSUPPORTED, both with a message naming what is available. */
xllm_status cpu_level_from_env(const char *value, cpu_level *out, xllm_error *err);
/* The kernels of a supported level (NULL if unsupported). */
const cpu_kernels *cpu_kernels_for(cpu_level l);
/* Every kernel table usable on this CPU, all levels and variants (NEON with
 * and without dotprod), for tests and benchmarks. Returns the count. */
int cpu_kernels_all(const cpu_kernels **out, int max);

/* The per-level tables (defined only where the architecture has them). */
extern const cpu_kernels cpu_kernels_scalar;
#if defined(__x86_64__)
extern const cpu_kernels cpu_kernels_avx2;
extern const cpu_kernels cpu_kernels_avx512;
#endif
#if defined(__aarch64__)
extern const cpu_kernels cpu_kernels_neon;
extern const cpu_kernels cpu_kernels_neon_dot;
#endif

#endif
