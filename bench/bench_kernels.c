/*
 * bench_kernels.c - throughput of each CPU kernel at every level this CPU
 * runs, one thread, scalar as the reference ratio in the same run.
 *
 *   bench_kernels [--quick] [--level NAME] [--only SUBSTRING] [--no-scalar] [--prefetch-sweep] [--packed]
 *                 [--attn-decode [DEPTH]]
 *
 * --packed: quantized matrices in each level's packed layout (backend_pack_matrix),
 * as models load them; without it, as stored.
 *
 * llama.cpp's types (rows named "kq ..."): Q4_K, Q6_K, IQ4_NL, IQ4_XS, Q5_0,
 * Q5_1, Q2_K, Q3_K: matmul_kq on their activations (Q8K or Q80), weights
 * from kq_quantize_row (random blocks for the types it lacks), counted in
 * stored bytes.
 *
 * GEMV (T = 1) figures are GB/s of weights streamed (the decode bound), on a
 * matrix bigger than the caches; GEMM figures are GFLOP/s (2 * rows * cols * T)
 * on a cache-resident matrix; activation quantization is GB/s of f32 input;
 * attention is GFLOP/s of the q.k and weighted-V loops. On CPUs with
 * AVX-512 VNNI, "int8 peak" measures one core's vpdpbusd throughput (with the
 * core clock, per cycle) and the "prefill" lines give the Q4 / Q8 GEMMs of a
 * 2048 x 2048 matrix over 512 tokens as a fraction of it. Prints figures only.
 */
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"
#include "base/alloc.h"
#include "quant/kquant.h"
#include "quant/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static unsigned g_seed = 1;
static float frand(void) {
    g_seed = g_seed * 1664525u + 1013904223u;
    return ((g_seed >> 8) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static double g_min_time = 0.4;

/* Seconds per call: best of repeated timings lasting g_min_time in all. */
#define TIME_IT(result, stmt)                                                                                      \
    do {                                                                                                           \
        stmt;                                                                                                      \
        double best_ = 1e30, start_ = now();                                                                       \
        int reps_ = 0;                                                                                             \
        while (now() - start_ < g_min_time || reps_ < 2) {                                                         \
            double t0_ = now();                                                                                    \
            stmt;                                                                                                  \
            double dt_ = now() - t0_;                                                                              \
            if (dt_ < best_) best_ = dt_;                                                                          \
            reps_++;                                                                                               \
        }                                                                                                          \
        result = best_;                                                                                            \
    } while (0)

typedef struct {
    const char *name;
    double value[8]; /* per kernel table */
    const char *unit;
} row_t;

static const cpu_kernels *g_k[8];
static int g_nk;
static const char *g_only; /* run only the benchmarks whose name contains this */

static int wanted(const char *name) { return !g_only || strstr(name, g_only) != NULL; }

static void print_row(const row_t *r) {
    printf("%-34s", r->name);
    for (int i = 0; i < g_nk; i++) printf(" %9.2f", r->value[i]);
    printf("  %-7s", r->unit);
    if (g_nk > 1 && r->value[0] > 0)
        for (int i = 1; i < g_nk; i++) printf(" %6.1fx", r->value[i] / r->value[0]);
    printf("\n");
    fflush(stdout);
}

static void *quant_matrix(dtype_t t, int group, int64_t rows, int64_t cols) {
    size_t rb = quant_row_bytes(t, group, cols);
    unsigned char *w = mem_malloc_aligned(rb * (size_t)rows);
    float *tmp = malloc(sizeof(float) * (size_t)cols);
    for (int64_t r = 0; r < rows; r++) {
        /* quantize a few distinct rows, copy them around (quantizing is slow) */
        if (r < 16) {
            for (int64_t c = 0; c < cols; c++) tmp[c] = frand();
            quant_quantize_row(t, group, tmp, cols, NULL, w + (size_t)r * rb);
        } else {
            memcpy(w + (size_t)r * rb, w + (size_t)(r % 16) * rb, rb);
        }
    }
    free(tmp);
    return w;
}

static int g_packed;

/* W as level K reads it: repacked into *owned with --packed (where K has a
 * packed layout), else W itself. */
static matrix level_matrix(const cpu_kernels *K, const matrix *W, void **owned) {
    matrix Wk = *W;
    *owned = NULL;
    if (g_packed && K->packed_bytes && K->packed_bytes(W)) {
        *owned = mem_malloc_aligned(K->packed_bytes(W));
        K->repack(W, 0, (W->rows + 3) / 4, *owned);
        Wk.data = *owned;
        Wk.packed = 1;
    }
    return Wk;
}

static void bench_quant(dtype_t t, int group, int64_t rows, int64_t cols, int T, int gemv) {
    matrix W = {t, group, rows, cols, quant_matrix(t, group, rows, cols), {0}, {0}, 0};
    float *x = malloc(sizeof(float) * (size_t)cols * (size_t)T), *y = malloc(sizeof(float) * (size_t)rows * (size_t)T);
    for (int64_t i = 0; i < cols * T; i++) x[i] = frand();
    row_t r = {0};
    char name[80];
    snprintf(name, sizeof name, "%s %s/g%d %lldx%lld T=%d%s", gemv ? "gemv" : "gemm", dtype_name(t), group,
             (long long)rows, (long long)cols, T, g_packed ? " packed" : "");
    r.name = name;
    r.unit = gemv ? "GB/s" : "GFLOP/s";
    if (!wanted(name)) {
        mem_free_aligned((void *)W.data);
        free(x);
        free(y);
        return;
    }
    double bytes = (double)quant_row_bytes(t, group, cols) * (double)rows, flops = 2.0 * rows * cols * T;
    for (int k = 0; k < g_nk; k++) {
        const cpu_kernels *K = g_k[k];
        size_t as = K->act_bytes(cols);
        void *act = mem_malloc_aligned(as * (size_t)T), *scr = mem_malloc_aligned(K->scratch_bytes(cols));
        for (int i = 0; i < T; i++) K->act_prepare(x + (size_t)i * cols, cols, (char *)act + (size_t)i * as, 0);
        void *pk;
        matrix Wk = level_matrix(K, &W, &pk);
        double s;
        TIME_IT(s, K->matmul_q(&Wk, act, as, T, NULL, y, (size_t)rows, 0, rows, scr));
        r.value[k] = gemv ? bytes / s / 1e9 : flops / s / 1e9;
        mem_free_aligned(pk);
        mem_free_aligned(act);
        mem_free_aligned(scr);
    }
    print_row(&r);
    mem_free_aligned((void *)W.data);
    free(x);
    free(y);
}

/* GEMV (T = 1) or a small-batch GEMM (T > 1, decode of T sequences) on a
 * model's shapes, cycling through enough copies of the matrix (>= 256 MB)
 * that every call streams its weights from memory, as decode does. GB/s of
 * weights; for T > 1 also GFLOP/s. */
static void bench_stream_t(dtype_t t, int group, int64_t rows, int64_t cols, int T) {
    size_t rb = quant_row_bytes(t, group, cols), mb = rb * (size_t)rows;
    int copies = (int)(((size_t)256 << 20) / mb) + 1;
    char name[80];
    if (T == 1)
        snprintf(name, sizeof name, "gemv stream %s/g%d %lldx%lld%s", dtype_name(t), group, (long long)rows,
                 (long long)cols, g_packed ? " packed" : "");
    else
        snprintf(name, sizeof name, "gemm stream %s/g%d %lldx%lld T=%d%s", dtype_name(t), group,
                 (long long)rows, (long long)cols, T, g_packed ? " packed" : "");
    if (!wanted(name)) return;
    matrix *W = malloc(sizeof(matrix) * (size_t)copies);
    W[0] = (matrix){.dtype = t, .group = group, .rows = rows, .cols = cols, .data = quant_matrix(t, group, rows, cols)};
    for (int i = 1; i < copies; i++) {
        void *d = mem_malloc_aligned(mb);
        memcpy(d, W[0].data, mb);
        W[i] = (matrix){.dtype = t, .group = group, .rows = rows, .cols = cols, .data = d};
    }
    float *x = malloc(sizeof(float) * (size_t)cols * (size_t)T), *y = malloc(sizeof(float) * (size_t)rows * (size_t)T);
    for (int64_t i = 0; i < cols * T; i++) x[i] = frand();
    row_t r = {0}, rf = {0};
    char fname[96];
    snprintf(fname, sizeof fname, "%s (compute)", name);
    r.name = name;
    r.unit = "GB/s";
    rf.name = fname;
    rf.unit = "GFLOP/s";
    for (int k = 0; k < g_nk; k++) {
        const cpu_kernels *K = g_k[k];
        size_t as = K->act_bytes(cols);
        void *act = mem_malloc_aligned(as * (size_t)T), *scr = mem_malloc_aligned(K->scratch_bytes(cols));
        for (int i = 0; i < T; i++) K->act_prepare(x + (size_t)i * cols, cols, (char *)act + (size_t)i * as, 0);
        double s;
        int n = copies < 64 ? copies : 64;
        matrix *Wk = malloc(sizeof(matrix) * (size_t)n);
        void **pk = malloc(sizeof(void *) * (size_t)n);
        for (int i = 0; i < n; i++) Wk[i] = level_matrix(K, &W[i], &pk[i]);
        TIME_IT(s, for (int i = 0; i < n; i++) K->matmul_q(&Wk[i], act, as, T, NULL, y, (size_t)rows, 0, rows, scr));
        r.value[k] = (double)mb * n / s / 1e9;
        rf.value[k] = 2.0 * (double)rows * (double)cols * T * n / s / 1e9;
        for (int i = 0; i < n; i++) mem_free_aligned(pk[i]);
        free(Wk);
        free(pk);
        mem_free_aligned(act);
        mem_free_aligned(scr);
    }
    print_row(&r);
    if (T > 1) print_row(&rf);
    for (int i = 0; i < copies; i++) mem_free_aligned((void *)W[i].data);
    free(W);
    free(x);
    free(y);
}

static void bench_gemv_stream(dtype_t t, int group, int64_t rows, int64_t cols) {
    bench_stream_t(t, group, rows, cols, 1);
}

/* ------------------------------------------------ llama.cpp's K-quants */

/* Bytes of one row of a K-quant type. */
static size_t kq_row_bytes(dtype_t t, int64_t cols) { return (size_t)(cols / kq_block_elems(t)) * kq_block_bytes(t); }

/* Types kq_quantize_row lacks (Q5_0, Q5_1, IQ4_XS): random bytes, the f16
 * d (and Q5_1's m) at the start of each block set to a small value. */
static void kq_random_row(dtype_t t, int64_t cols, unsigned char *row) {
    size_t bb = kq_block_bytes(t);
    for (size_t i = 0; i < kq_row_bytes(t, cols); i++) row[i] = (unsigned char)(frand() * 127.0f + 128.0f);
    uint16_t d = f32_to_f16(0.01f);
    for (int64_t b = 0; b < cols / kq_block_elems(t); b++) {
        memcpy(row + (size_t)b * bb, &d, 2);
        if (t == XLLM_DT_Q5_1) memcpy(row + (size_t)b * bb + 2, &d, 2);
    }
}

static void *kq_matrix(dtype_t t, int64_t rows, int64_t cols) {
    size_t rb = kq_row_bytes(t, cols);
    unsigned char *w = mem_malloc_aligned(rb * (size_t)rows);
    float *tmp = malloc(sizeof(float) * (size_t)cols);
    for (int64_t r = 0; r < rows; r++) {
        if (r < 16) {
            for (int64_t c = 0; c < cols; c++) tmp[c] = frand();
            if (kq_can_quantize(t)) kq_quantize_row(t, tmp, cols, NULL, w + (size_t)r * rb);
            else kq_random_row(t, cols, w + (size_t)r * rb);
        } else {
            memcpy(w + (size_t)r * rb, w + (size_t)(r % 16) * rb, rb);
        }
    }
    free(tmp);
    return w;
}

/* matmul_kq of T tokens over W (as K reads it: level_matrix). copies > 1:
 * cycle through that many copies (GEMV from memory). Seconds per matrix. */
static double time_kq(const cpu_kernels *K, matrix *W, int copies, int T) {
    int64_t cols = W[0].cols, rows = W[0].rows;
    const int kind = kq_act_kind(W[0].dtype);
    size_t as = kq_act_bytes(kind, cols);
    unsigned char *act = mem_malloc_aligned(as * (size_t)T);
    void *scr = mem_malloc_aligned(K->scratch_bytes(cols));
    float *x = malloc(sizeof(float) * (size_t)cols), *y = malloc(sizeof(float) * (size_t)rows * (size_t)T);
    for (int i = 0; i < T; i++) {
        for (int64_t c = 0; c < cols; c++) x[c] = frand();
        kq_act_prepare(kind, x, cols, act + (size_t)i * as);
    }
    matrix *Wk = malloc(sizeof(matrix) * (size_t)copies);
    void **pk = malloc(sizeof(void *) * (size_t)copies);
    for (int i = 0; i < copies; i++) Wk[i] = level_matrix(K, &W[i], &pk[i]);
    double s;
    if (K->matmul_kq)
        TIME_IT(s, for (int i = 0; i < copies; i++) K->matmul_kq(&Wk[i], act, as, T, NULL, y, (size_t)rows, 0, rows, scr));
    else /* the level has none: the reference, as cpu_ops falls back to */
        TIME_IT(s, for (int i = 0; i < copies; i++)
                       kq_matmul_ref(Wk[i].dtype, Wk[i].data, cols, act, as, T, NULL, y, (size_t)rows, 0, rows));
    for (int i = 0; i < copies; i++) mem_free_aligned(pk[i]);
    free(Wk);
    free(pk);
    mem_free_aligned(act);
    mem_free_aligned(scr);
    free(x);
    free(y);
    return s / copies;
}

/* GEMM (T > 1, cache-resident matrix, GFLOP/s; stream: >= 256 MB of copies,
 * as decode of T sequences reads them) or streaming GEMV (T = 1, GB/s of
 * stored bytes) of a K-quant matrix. */
static void bench_kq_s(dtype_t t, int64_t rows, int64_t cols, int T, int stream) {
    row_t r = {0};
    char name[80];
    if (T == 1) stream = 1;
    snprintf(name, sizeof name, "kq %s %s %lldx%lld%s", T == 1 ? "gemv stream" : stream ? "gemm stream" : "gemm",
             dtype_name(t), (long long)rows, (long long)cols, g_packed ? " packed" : "");
    if (T > 1) snprintf(name + strlen(name), sizeof name - strlen(name), " T=%d", T);
    r.name = name;
    r.unit = T == 1 ? "GB/s" : "GFLOP/s";
    if (!wanted(name)) return;
    size_t mb = (size_t)rows * kq_row_bytes(t, cols);
    int copies = stream ? (int)(((size_t)256 << 20) / mb) + 1 : 1;
    if (copies > 64) copies = 64;
    matrix *W = malloc(sizeof(matrix) * (size_t)copies);
    W[0] = (matrix){.dtype = t, .group = kq_block_elems(t), .rows = rows, .cols = cols, .data = kq_matrix(t, rows, cols)};
    for (int i = 1; i < copies; i++) {
        void *d = mem_malloc_aligned(mb);
        memcpy(d, W[0].data, mb);
        W[i] = W[0];
        W[i].data = d;
    }
    for (int k = 0; k < g_nk; k++) {
        double s = time_kq(g_k[k], W, copies, T);
        r.value[k] = T == 1 ? (double)mb / s / 1e9 : 2.0 * (double)rows * (double)cols * T / s / 1e9;
    }
    print_row(&r);
    for (int i = 0; i < copies; i++) mem_free_aligned((void *)W[i].data);
    free(W);
}

static void bench_kq(dtype_t t, int64_t rows, int64_t cols, int T) { bench_kq_s(t, rows, cols, T, 0); }

/* GEMV (T = 1) of a matrix that stays in L2 (the same matrix every call):
 * GB/s of stored bytes with no memory stall, the kernel's arithmetic ceiling
 * for the streaming GEMV's figure next to it. */
static void bench_kq_gemv_cached(dtype_t t, int64_t rows, int64_t cols) {
    row_t r = {0};
    char name[80];
    snprintf(name, sizeof name, "kq gemv cached %s %lldx%lld%s", dtype_name(t), (long long)rows, (long long)cols,
             g_packed ? " packed" : "");
    r.name = name;
    r.unit = "GB/s";
    if (!wanted(name)) return;
    size_t mb = (size_t)rows * kq_row_bytes(t, cols);
    matrix W = {.dtype = t, .group = kq_block_elems(t), .rows = rows, .cols = cols, .data = kq_matrix(t, rows, cols)};
    for (int k = 0; k < g_nk; k++) r.value[k] = (double)mb / time_kq(g_k[k], &W, 1, 1) / 1e9;
    print_row(&r);
    mem_free_aligned((void *)W.data);
}

static volatile uint64_t g_sink;
static void sum_words(const uint64_t *buf, size_t n) {
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i < n; i += 4) a += buf[i], b += buf[i + 1], c += buf[i + 2], d += buf[i + 3];
    g_sink += a + b + c + d;
}

/* The reference for streaming GEMV: plain reads of 256 MB (summing 64-bit
 * words, 4 accumulators), in the same run. */
static double read_gbs(void) {
    size_t n = ((size_t)256 << 20) / 8;
    uint64_t *buf = mem_malloc_aligned(n * 8);
    for (size_t i = 0; i < n; i++) buf[i] = i;
    double s;
    TIME_IT(s, sum_words(buf, n));
    mem_free_aligned(buf);
    return (double)n * 8 / s / 1e9;
}

static void bench_float(dtype_t t, int64_t rows, int64_t cols, int T, int gemv) {
    size_t es = dtype_size(t);
    uint16_t *w = mem_malloc_aligned(es * (size_t)rows * (size_t)cols);
    for (int64_t i = 0; i < rows * cols; i++) {
        float f = frand();
        if (t == XLLM_DT_F32) ((float *)w)[i] = f;
        else w[i] = t == XLLM_DT_F16 ? f32_to_f16(f) : f32_to_bf16(f);
    }
    matrix W = {t, 0, rows, cols, w, {0}, {0}, 0};
    float *x = malloc(sizeof(float) * (size_t)cols * (size_t)T), *y = malloc(sizeof(float) * (size_t)rows * (size_t)T);
    for (int64_t i = 0; i < cols * T; i++) x[i] = frand();
    row_t r = {0};
    char name[80];
    snprintf(name, sizeof name, "%s %s %lldx%lld T=%d", gemv ? "gemv" : "gemm", dtype_name(t), (long long)rows,
             (long long)cols, T);
    r.name = name;
    r.unit = gemv ? "GB/s" : "GFLOP/s";
    if (!wanted(name)) {
        mem_free_aligned(w);
        free(x);
        free(y);
        return;
    }
    double bytes = (double)es * rows * cols, flops = 2.0 * rows * cols * T;
    for (int k = 0; k < g_nk; k++) {
        void *scr = mem_malloc_aligned(g_k[k]->scratch_bytes(cols));
        double s;
        TIME_IT(s, g_k[k]->matmul_f(&W, x, T, NULL, y, (size_t)rows, 0, rows, scr));
        r.value[k] = gemv ? bytes / s / 1e9 : flops / s / 1e9;
        mem_free_aligned(scr);
    }
    print_row(&r);
    mem_free_aligned(w);
    free(x);
    free(y);
}

static void bench_act(int64_t cols, int T) {
    float *x = malloc(sizeof(float) * (size_t)cols * (size_t)T);
    for (int64_t i = 0; i < cols * T; i++) x[i] = frand();
    row_t r = {0};
    char name[80];
    snprintf(name, sizeof name, "act_prepare %lldx%d", (long long)cols, T);
    r.name = name;
    r.unit = "GB/s";
    if (!wanted(name)) {
        free(x);
        return;
    }
    for (int k = 0; k < g_nk; k++) {
        size_t as = g_k[k]->act_bytes(cols);
        char *act = mem_malloc_aligned(as * (size_t)T);
        double s;
        TIME_IT(s, for (int i = 0; i < T; i++) g_k[k]->act_prepare(x + (size_t)i * cols, cols, act + (size_t)i * as, 0));
        r.value[k] = 4.0 * cols * T / s / 1e9;
        mem_free_aligned(act);
    }
    print_row(&r);
    free(x);
}

static void bench_attn(int hd, int n, int accum) {
    size_t stride = (size_t)hd * 4; /* 4 KV heads interleaved, as in the cache */
    float *kv = malloc(sizeof(float) * stride * (size_t)n), *q = malloc(sizeof(float) * (size_t)hd);
    float *sc = malloc(sizeof(float) * (size_t)n), *acc = calloc((size_t)hd, sizeof(float));
    for (size_t i = 0; i < stride * (size_t)n; i++) kv[i] = frand();
    for (int i = 0; i < hd; i++) q[i] = frand();
    for (int i = 0; i < n; i++) sc[i] = frand() * 0.01f;
    row_t r = {0};
    char name[80];
    snprintf(name, sizeof name, "attn_%s hd=%d n=%d", accum ? "accum" : "scores", hd, n);
    r.name = name;
    r.unit = "GFLOP/s";
    for (int k = 0; k < g_nk && wanted(name); k++) {
        double s;
        if (accum) TIME_IT(s, g_k[k]->attn->accum(acc, sc, kv, stride, n, hd));
        else TIME_IT(s, g_k[k]->attn->scores(q, kv, stride, n, hd, 0.125f, sc));
        r.value[k] = 2.0 * hd * n / s / 1e9;
    }
    if (wanted(name)) print_row(&r);
    free(kv);
    free(q);
    free(sc);
    free(acc);
}

/* The multi-query loops (K/V sharing): nq queries against the same n keys,
 * in calls of `run` keys (0: one call; the shared-KV prefill calls per KV block
 * of 16); GFLOP/s over all queries, to compare with the single-query rows above. */
static void bench_attn_multi(int hd, int n, int nq, int accum, int run) {
    size_t stride = (size_t)hd * 4;
    float *kv = malloc(sizeof(float) * stride * (size_t)n), *q = malloc(sizeof(float) * (size_t)hd * (size_t)nq);
    float *sc = malloc(sizeof(float) * (size_t)n * (size_t)nq), *acc = calloc((size_t)hd * (size_t)nq, sizeof(float));
    for (size_t i = 0; i < stride * (size_t)n; i++) kv[i] = frand();
    for (int i = 0; i < hd * nq; i++) q[i] = frand();
    for (int i = 0; i < n * nq; i++) sc[i] = frand() * 0.01f;
    row_t r = {0};
    char name[80];
    const char *what = accum ? "accum" : "scores";
    if (run > 0 && run < n) snprintf(name, sizeof name, "attn_%s_multi hd=%d n=%d nq=%d run=%d", what, hd, n, nq, run);
    else snprintf(name, sizeof name, "attn_%s_multi hd=%d n=%d nq=%d", what, hd, n, nq), run = n;
    r.name = name;
    r.unit = "GFLOP/s";
    for (int k = 0; k < g_nk && wanted(name); k++) {
        const cpu_attn_kernels *A = g_k[k]->attn;
        double s;
        if (accum)
            TIME_IT(s, for (int i = 0; i < n; i += run) A->accum_multi(acc, (size_t)hd, nq, sc + i, (size_t)n,
                                                                       kv + (size_t)i * stride, stride,
                                                                       n - i < run ? n - i : run, hd));
        else
            TIME_IT(s, for (int i = 0; i < n; i += run) A->scores_multi(q, (size_t)hd, nq, kv + (size_t)i * stride,
                                                                        stride, n - i < run ? n - i : run, hd, 0.125f,
                                                                        sc + i, (size_t)n));
        r.value[k] = 2.0 * hd * n * nq / s / 1e9;
    }
    if (wanted(name)) print_row(&r);
    free(kv);
    free(q);
    free(sc);
    free(acc);
}

/* The level's softmax of nq queries' n scores (in place; repeated calls see
 * weights in (0, 1], as good as scores for timing): G weights per second. */
static void bench_attn_softmax(int n, int nq) {
    float *s = malloc(sizeof(float) * (size_t)n * (size_t)nq), *part = malloc(sizeof(float) * 2 * (size_t)nq);
    int *ns = malloc(sizeof(int) * (size_t)nq);
    for (int i = 0; i < n * nq; i++) s[i] = frand() * 4.0f;
    for (int r = 0; r < nq; r++) ns[r] = n;
    row_t r = {0};
    char name[80];
    snprintf(name, sizeof name, "attn_softmax n=%d nq=%d", n, nq);
    r.name = name;
    r.unit = "Gw/s";
    for (int k = 0; k < g_nk && wanted(name); k++) {
        double sec;
        TIME_IT(sec, g_k[k]->attn->softmax(s, (size_t)n, nq, ns, part, 2));
        r.value[k] = (double)n * nq / sec / 1e9;
    }
    if (wanted(name)) print_row(&r);
    free(s);
    free(part);
    free(ns);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#if defined(__x86_64__)
/*
 * int8 peak: what one core's vpdpbusd can do, measured as instruction tables
 * state it, so that a GEMM can be given as a fraction of it.
 *  - N independent accumulator chains, one vpdpbusd each per loop pass,
 *    written as one asm block (the compiler can neither merge identical
 *    chains nor add register copies), operands in registers: no memory
 *    traffic in the loop; the loop's dec/jnz go to the integer pipes;
 *  - after the loop the accumulators are summed and stored, and the sum goes
 *    into g_sink (the asm is volatile as well): nothing can be dropped;
 *  - N = 1 gives the latency, N = 2..24 show throughput rising until enough
 *    chains hide it; the peak is the best N;
 *  - the clock is measured in the same run by a chain of dependent register
 *    adds (1 cycle each on every x86-64 core) and checked by a chain of
 *    dependent imuls (3 cycles each on AMD Zen and Intel since Sandy Bridge),
 *    so throughput is also given per cycle, which is what documentation
 *    gives: 64 multiply-adds (128 int8 ops) per zmm vpdpbusd.
 * ymm (256-bit) is measured beside zmm: on a core that runs 512-bit ops as
 * two 256-bit halves (Zen 4) zmm does half as many instructions per cycle
 * as ymm, and the same ops per cycle; on one with 512-bit datapaths (Zen 5
 * desktop and server parts) zmm doubles the ops.
 */
#define VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"), noinline))
#define DPZ(i) "vpdpbusd %%zmm30, %%zmm31, %%zmm" #i "\n\t"
#define DPY(i) "vpdpbusd %%ymm30, %%ymm31, %%ymm" #i "\n\t"
#define CH1(D) D(0)
#define CH2(D) CH1(D) D(1)
#define CH4(D) CH2(D) D(2) D(3)
#define CH6(D) CH4(D) D(4) D(5)
#define CH8(D) CH6(D) D(6) D(7)
#define CH10(D) CH8(D) D(8) D(9)
#define CH12(D) CH10(D) D(10) D(11)
#define CH16(D) CH12(D) D(12) D(13) D(14) D(15)
#define CH24(D) CH16(D) D(16) D(17) D(18) D(19) D(20) D(21) D(22) D(23)
/* zero the 24 accumulators, load the operands, loop, sum into register 0, store */
#define ZERO24(V)                                                                                                  \
    "vpxord %%" V "0, %%" V "0, %%" V "0\n\t" "vmovdqa64 %%" V "0, %%" V "1\n\t" "vmovdqa64 %%" V "0, %%" V "2\n\t"  \
    "vmovdqa64 %%" V "0, %%" V "3\n\t" "vmovdqa64 %%" V "0, %%" V "4\n\t" "vmovdqa64 %%" V "0, %%" V "5\n\t"        \
    "vmovdqa64 %%" V "0, %%" V "6\n\t" "vmovdqa64 %%" V "0, %%" V "7\n\t" "vmovdqa64 %%" V "0, %%" V "8\n\t"        \
    "vmovdqa64 %%" V "0, %%" V "9\n\t" "vmovdqa64 %%" V "0, %%" V "10\n\t" "vmovdqa64 %%" V "0, %%" V "11\n\t"      \
    "vmovdqa64 %%" V "0, %%" V "12\n\t" "vmovdqa64 %%" V "0, %%" V "13\n\t" "vmovdqa64 %%" V "0, %%" V "14\n\t"     \
    "vmovdqa64 %%" V "0, %%" V "15\n\t" "vmovdqa64 %%" V "0, %%" V "16\n\t" "vmovdqa64 %%" V "0, %%" V "17\n\t"     \
    "vmovdqa64 %%" V "0, %%" V "18\n\t" "vmovdqa64 %%" V "0, %%" V "19\n\t" "vmovdqa64 %%" V "0, %%" V "20\n\t"     \
    "vmovdqa64 %%" V "0, %%" V "21\n\t" "vmovdqa64 %%" V "0, %%" V "22\n\t" "vmovdqa64 %%" V "0, %%" V "23\n\t"
#define SUM24(V)                                                                                                   \
    "vpaddd %%" V "1, %%" V "0, %%" V "0\n\t" "vpaddd %%" V "2, %%" V "0, %%" V "0\n\t"                            \
    "vpaddd %%" V "3, %%" V "0, %%" V "0\n\t" "vpaddd %%" V "4, %%" V "0, %%" V "0\n\t"                            \
    "vpaddd %%" V "5, %%" V "0, %%" V "0\n\t" "vpaddd %%" V "6, %%" V "0, %%" V "0\n\t"                            \
    "vpaddd %%" V "7, %%" V "0, %%" V "0\n\t" "vpaddd %%" V "8, %%" V "0, %%" V "0\n\t"                            \
    "vpaddd %%" V "9, %%" V "0, %%" V "0\n\t" "vpaddd %%" V "10, %%" V "0, %%" V "0\n\t"                           \
    "vpaddd %%" V "11, %%" V "0, %%" V "0\n\t" "vpaddd %%" V "12, %%" V "0, %%" V "0\n\t"                          \
    "vpaddd %%" V "13, %%" V "0, %%" V "0\n\t" "vpaddd %%" V "14, %%" V "0, %%" V "0\n\t"                          \
    "vpaddd %%" V "15, %%" V "0, %%" V "0\n\t" "vpaddd %%" V "16, %%" V "0, %%" V "0\n\t"                          \
    "vpaddd %%" V "17, %%" V "0, %%" V "0\n\t" "vpaddd %%" V "18, %%" V "0, %%" V "0\n\t"                          \
    "vpaddd %%" V "19, %%" V "0, %%" V "0\n\t" "vpaddd %%" V "20, %%" V "0, %%" V "0\n\t"                          \
    "vpaddd %%" V "21, %%" V "0, %%" V "0\n\t" "vpaddd %%" V "22, %%" V "0, %%" V "0\n\t"                          \
    "vpaddd %%" V "23, %%" V "0, %%" V "0\n\t"
#define VNNI_CLOBBERS                                                                                              \
    "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",     \
        "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23",        \
        "xmm30", "xmm31", "memory", "cc"
#define VNNI_FN(NAME, V, MOV, BODY)                                                                                \
    VNNI_TARGET static void NAME(long iters, const void *a, const void *b, int32_t *out) {                        \
        __asm__ volatile(ZERO24(V) MOV " (%[a]), %%" V "30\n\t" MOV " (%[b]), %%" V "31\n\t"                      \
                         "1:\n\t" BODY "dec %[n]\n\t" "jnz 1b\n\t" SUM24(V) MOV " %%" V "0, (%[o])\n\t" "vzeroupper\n\t" \
                         : [n] "+r"(iters)                                                                         \
                         : [a] "r"(a), [b] "r"(b), [o] "r"(out)                                                    \
                         : VNNI_CLOBBERS);                                                                         \
    }
VNNI_FN(vnni_z1, "zmm", "vmovdqu64", CH1(DPZ))
VNNI_FN(vnni_z2, "zmm", "vmovdqu64", CH2(DPZ))
VNNI_FN(vnni_z4, "zmm", "vmovdqu64", CH4(DPZ))
VNNI_FN(vnni_z6, "zmm", "vmovdqu64", CH6(DPZ))
VNNI_FN(vnni_z8, "zmm", "vmovdqu64", CH8(DPZ))
VNNI_FN(vnni_z10, "zmm", "vmovdqu64", CH10(DPZ))
VNNI_FN(vnni_z12, "zmm", "vmovdqu64", CH12(DPZ))
VNNI_FN(vnni_z16, "zmm", "vmovdqu64", CH16(DPZ))
VNNI_FN(vnni_z24, "zmm", "vmovdqu64", CH24(DPZ))
VNNI_FN(vnni_y1, "ymm", "vmovdqu64", CH1(DPY))
VNNI_FN(vnni_y4, "ymm", "vmovdqu64", CH4(DPY))
VNNI_FN(vnni_y8, "ymm", "vmovdqu64", CH8(DPY))
VNNI_FN(vnni_y12, "ymm", "vmovdqu64", CH12(DPY))
VNNI_FN(vnni_y16, "ymm", "vmovdqu64", CH16(DPY))
VNNI_FN(vnni_y24, "ymm", "vmovdqu64", CH24(DPY))

typedef void (*vnni_fn)(long, const void *, const void *, int32_t *);

/* Seconds of one run of iters passes. */
static double vnni_time(vnni_fn f, long iters) {
    static const uint8_t a[64] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};
    static const int8_t b[64] = {2, -7, 1, 8, -2, 8, 1, -8, 2, 8};
    int32_t out[16] = {0};
    double t0 = now();
    f(iters, a, b, out);
    double dt = now() - t0;
    for (int i = 0; i < 16; i++) g_sink += (uint64_t)out[i];
    return dt;
}

/* Core clock (GHz) from a chain of 16 x iters dependent instructions: adds
 * (1 cycle each) or imuls (3 cycles each); best of `reps` runs. */
__attribute__((noinline)) static double clock_ghz(int imul, long iters, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        long x = 1, n = iters;
        double t0 = now();
        if (imul)
#define I16 "imul %[o], %[x]\n\t"
            __asm__ volatile("1:\n\t" I16 I16 I16 I16 I16 I16 I16 I16 I16 I16 I16 I16 I16 I16 I16 I16
                             "dec %[n]\n\t" "jnz 1b" : [x] "+r"(x), [n] "+r"(n) : [o] "r"(1L) : "cc");
        else
#define A16 "add %[o], %[x]\n\t"
            __asm__ volatile("1:\n\t" A16 A16 A16 A16 A16 A16 A16 A16 A16 A16 A16 A16 A16 A16 A16 A16
                             "dec %[n]\n\t" "jnz 1b" : [x] "+r"(x), [n] "+r"(n) : [o] "r"(1L) : "cc");
        double dt = now() - t0;
        if (dt < best) best = dt;
        g_sink += (uint64_t)x;
    }
#undef I16
#undef A16
    return 16.0 * (double)iters * (imul ? 3 : 1) / best / 1e9;
}

/* A rate measured between two clock readings, per cycle. The clock moves on
 * a shared host (turbo under other cores' load; a vCPU descheduled counts as
 * time), so each round is bracketed by clock readings and kept only when they
 * agree within 3%; the result is the median of the kept rounds' per-cycle
 * rates (0 when none were steady), *ghz their median clock. */
#define PAIRED_ROUNDS 9
typedef double (*rate_fn)(void *ctx); /* units per second */
static double per_cycle(rate_fn f, void *ctx, double *ghz, int *kept) {
    double pc[PAIRED_ROUNDS], gh[PAIRED_ROUNDS];
    int n = 0;
    for (int r = 0; r < PAIRED_ROUNDS; r++) {
        double g0 = clock_ghz(0, 200000, 3), rate = f(ctx), g1 = clock_ghz(0, 200000, 3);
        if (g0 <= 0 || g1 <= 0 || g0 / g1 > 1.03 || g1 / g0 > 1.03) continue;
        gh[n] = 0.5 * (g0 + g1);
        pc[n] = rate / (gh[n] * 1e9);
        n++;
    }
    *kept = n;
    if (!n) return *ghz = 0, 0;
    qsort(pc, (size_t)n, sizeof *pc, cmp_double);
    qsort(gh, (size_t)n, sizeof *gh, cmp_double);
    *ghz = gh[n / 2];
    return pc[n / 2];
}

typedef struct {
    vnni_fn f;
    long iters;
    int chains;
} vnni_job;

static double vnni_rate(void *p) { /* instructions per second */
    vnni_job *j = p;
    return (double)j->iters * j->chains / vnni_time(j->f, j->iters);
}

/* Prints the measurement; returns the peak in int8 ops (2 per multiply-add)
 * per cycle, 0 without AVX-512 VNNI; *ghz: the clock it ran at. */
static double int8_peak_report(double *ghz_out) {
    cpu_features f;
    cpu_features_detect(&f);
    if (!f.avx512vnni || !f.os_zmm) return 0;
    vnni_job warm = {vnni_z12, 4000000, 12};
    vnni_rate(&warm); /* wake the vector unit and the clock */
    printf("%-34s %9.2f  GHz (dependent adds; dependent imuls %.2f)\n", "core clock", clock_ghz(0, 1000000, 5),
           clock_ghz(1, 333333, 5));
    static const struct {
        vnni_fn f;
        int n, zmm;
    } cfg[] = {{vnni_z1, 1, 1},  {vnni_z2, 2, 1},   {vnni_z4, 4, 1},   {vnni_z6, 6, 1},   {vnni_z8, 8, 1},
               {vnni_z10, 10, 1}, {vnni_z12, 12, 1}, {vnni_z16, 16, 1}, {vnni_z24, 24, 1}, {vnni_y1, 1, 0},
               {vnni_y4, 4, 0},  {vnni_y8, 8, 0},   {vnni_y12, 12, 0}, {vnni_y16, 16, 0}, {vnni_y24, 24, 0}};
    int ncfg = (int)(sizeof cfg / sizeof *cfg), best_n = 0, kept_min = PAIRED_ROUNDS;
    double ipc[16], best_z = 0, best_y = 0, ghz_z = 0;
    for (int i = 0; i < ncfg; i++) {
        vnni_job j = {cfg[i].f, cfg[i].n == 1 ? 1000000 : 8000000 / cfg[i].n, cfg[i].n}; /* ~4 ms */
        double g;
        int kept;
        ipc[i] = per_cycle(vnni_rate, &j, &g, &kept);
        if (kept < kept_min) kept_min = kept;
        if (cfg[i].zmm && ipc[i] > best_z) best_z = ipc[i], best_n = cfg[i].n, ghz_z = g;
        if (!cfg[i].zmm && ipc[i] > best_y) best_y = ipc[i];
    }
    for (int z = 1; z >= 0; z--) {
        printf("vpdpbusd %s instr/cycle by chains:", z ? "zmm" : "ymm");
        for (int i = 0; i < ncfg; i++)
            if (cfg[i].zmm == z) printf(" %d:%.2f", cfg[i].n, ipc[i]);
        for (int i = 0; i < ncfg; i++)
            if (cfg[i].zmm == z && cfg[i].n == 1 && ipc[i] > 0) printf("  (latency %.2f cycles)", 1 / ipc[i]);
        printf("\n");
    }
    printf("%-34s %9.1f  int8 ops/cycle (vpdpbusd zmm, %d chains: %.2f/cycle x 128 ops; ymm %.2f/cycle x 64 = %.1f)"
           " = %.0f GOPS at %.2f GHz; median of steady rounds (fewest kept: %d of %d)\n",
           "int8 peak", best_z * 128, best_n, best_z, best_y, best_y * 64, best_z * 128 * ghz_z, ghz_z, kept_min,
           PAIRED_ROUNDS);
    fflush(stdout);
    *ghz_out = ghz_z;
    return best_z * 128;
}

typedef struct {
    const cpu_kernels *K;
    const matrix *W;
    const void *act;
    size_t as;
    int T;
    float *y;
    void *scr;
} gemm_job;

static double gemm_rate(void *p) { /* ops (2 per multiply-add) per second: best of 3 calls */
    gemm_job *j = p;
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        double t0 = now();
        j->K->matmul_q(j->W, j->act, j->as, j->T, NULL, j->y, (size_t)j->W->rows, 0, j->W->rows, j->scr);
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    return 2.0 * (double)j->W->rows * (double)j->W->cols * j->T / best;
}

/* The prefill GEMMs of the issue (2048 x 2048, 512 tokens, packed as models
 * load them) on the best level, one thread, per cycle as a fraction of the
 * peak per cycle (both clock-bracketed, so a clock that moves between them
 * does not count). */
static void bench_peak_fraction(double peak) {
    const cpu_kernels *all[8];
    int n = cpu_kernels_all(all, 8);
    const cpu_kernels *K = all[n - 1];
    static const dtype_t ts[] = {XLLM_DT_Q4, XLLM_DT_Q8};
    const int64_t rows = 2048, cols = 2048;
    const int T = 512;
    float *x = malloc(sizeof(float) * (size_t)cols * T), *y = malloc(sizeof(float) * (size_t)rows * T);
    for (int64_t i = 0; i < cols * T; i++) x[i] = frand();
    size_t as = K->act_bytes(cols);
    void *act = mem_malloc_aligned(as * (size_t)T), *scr = mem_malloc_aligned(K->scratch_bytes(cols));
    for (int i = 0; i < T; i++) K->act_prepare(x + (size_t)i * cols, cols, (char *)act + (size_t)i * as, 0);
    for (int i = 0; i < 2; i++) {
        char name[80];
        snprintf(name, sizeof name, "prefill %s/g32 %lldx%lld T=%d packed", dtype_name(ts[i]), (long long)rows,
                 (long long)cols, T);
        matrix W = {ts[i], 32, rows, cols, quant_matrix(ts[i], 32, rows, cols), {0}, {0}, 0};
        int keep = g_packed;
        g_packed = 1;
        void *pk;
        matrix Wk = level_matrix(K, &W, &pk);
        g_packed = keep;
        gemm_job j = {K, &Wk, act, as, T, y, scr};
        double g;
        int kept;
        double opc = per_cycle(gemm_rate, &j, &g, &kept);
        printf("%-34s %9.1f  int8 ops/cycle = %.0f GOPS at %.2f GHz (%s, 1 thread; %d steady rounds): %.1f%% of the "
               "int8 peak\n",
               name, opc, opc * g, g, K->name, kept, peak > 0 ? 100 * opc / peak : 0.0);
        mem_free_aligned(pk);
        mem_free_aligned((void *)W.data);
    }
    mem_free_aligned(act);
    mem_free_aligned(scr);
    free(x);
    free(y);
}
#else
static double int8_peak_report(double *ghz) { return *ghz = 0, 0; }
static void bench_peak_fraction(double peak) { (void)peak; }
#endif

/*
 * --attn-decode: one decode step's attention over a deep context, as a model
 * runs it (the backend's attention operation, its threads, a paged pool):
 * TinyLlama's heads (32 query heads, 4 KV heads, head_dim 64), 22 layers of
 * their own K/V so the step reads its 4096 positions' rows from memory, a
 * block table in allocation order, the best level, 2 threads. K/V prefetch
 * hints on and off alternate in each round (cpu_backend.attn_no_prefetch),
 * with a third setting that reads layer 0's rows 22 times (from the caches:
 * the loops' own time); ms per step (median of rounds, min-max) and GB/s of
 * K/V read.
 */
static int bench_attn_decode(int depth) {
    enum { L = 22, NH = 32, NKV = 4, HD = 64, BS = 16, ROUNDS = 15 };
    int nb = (depth + BS) / BS + 1;
    static const kv_dtype dts[] = {KV_F32, KV_F16, KV_Q8};
    printf("attention of one decode step at depth %d: %d layers, %d heads / %d KV heads, head_dim %d, 2 threads\n", depth,
           L, NH, NKV, HD);
    for (size_t di = 0; di < sizeof dts / sizeof *dts; di++) {
        kv_dtype dt = dts[di];
        backend be;
        backend_options o = {0};
        o.n_threads = 2;
        o.max_cols = 2048;
        o.max_tokens = 1;
        o.n_heads = NH;
        o.n_kv_heads = NKV;
        o.head_dim = HD;
        o.max_positions = depth + 1;
        xllm_error err;
        if (backend_create(&be, "cpu", &o, &err)) {
            fprintf(stderr, "%s\n", err.message);
            return 1;
        }
        cpu_backend *cb = cpu_backend_of(&be);
        size_t rb = kvq_row_bytes(dt, HD), layer = (size_t)nb * BS * NKV * rb;
        unsigned char *k = mem_malloc_aligned(layer * L), *v = mem_malloc_aligned(layer * L);
        int32_t *table = malloc(sizeof *table * (size_t)nb);
        float *q = malloc(sizeof *q * NH * HD), *out = malloc(sizeof *out * NH * HD), row[HD];
        int ok = k && v && table && q && out;
        if (!ok) fprintf(stderr, "out of memory\n");
        for (size_t r = 0; ok && r < layer * L / rb; r++) {
            for (int i = 0; i < HD; i++) row[i] = frand();
            kvq_store_row(dt, row, HD, k + r * rb);
            for (int i = 0; i < HD; i++) row[i] = frand();
            kvq_store_row(dt, row, HD, v + r * rb);
        }
        for (int i = 0; ok && i < nb; i++) table[i] = i;
        for (int i = 0; ok && i < NH * HD; i++) q[i] = frand();
        int32_t pos = depth, seq = 0;
        const int32_t *tables[1] = {table};
        be_attn d = {1, q, out, NULL, NULL, BS, NH, NKV, HD, 0, &pos, &seq, tables, dt, 0, 0, 0};
        /* setting s: prefetch on / off over the 22 layers' rows (from memory),
         * then prefetch on over layer 0's 22 times (from the caches: the
         * compute's own time) */
        double t[3][ROUNDS];
        for (int r = 0; ok && r < ROUNDS; r++)
            for (int st = 0; st < 3; st++) {
                cb->attn_no_prefetch = st == 1;
                double t0 = now();
                for (int l = 0; l < L; l++) {
                    size_t ll = st == 2 ? 0 : (size_t)l;
                    d.k_cache = k + ll * layer;
                    d.v_cache = v + ll * layer;
                    be.ops->attention(be.ctx, &d);
                }
                t[st][r] = now() - t0;
            }
        double kv_bytes = 2.0 * L * (depth + 1) * NKV * (double)rb;
        static const char *what[3] = {"prefetch on ", "prefetch off", "cached      "};
        for (int st = 0; ok && st < 3; st++) {
            qsort(t[st], ROUNDS, sizeof(double), cmp_double);
            double med = t[st][ROUNDS / 2];
            printf("attn decode %s d=%d %s %8.3f ms (%.3f-%.3f)  %6.2f GB/s of K/V\n", kvq_name(dt), depth, what[st],
                   1e3 * med, 1e3 * t[st][0], 1e3 * t[st][ROUNDS - 1], kv_bytes / med / 1e9);
        }
        mem_free_aligned(k);
        mem_free_aligned(v);
        free(table);
        free(q);
        free(out);
        backend_destroy(&be);
        if (!ok) return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    int quick = 0, no_scalar = 0, sweep = 0;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--level") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) g_only = argv[++i];
        else if (!strcmp(argv[i], "--no-scalar")) no_scalar = 1; /* for profiling one level */
        else if (!strcmp(argv[i], "--prefetch-sweep")) sweep = 1;
        else if (!strcmp(argv[i], "--packed")) g_packed = 1;
        else if (!strcmp(argv[i], "--attn-decode")) {
            int depth = i + 1 < argc ? atoi(argv[i + 1]) : 4096;
            if (depth < 1 || depth > 32768) {
                fprintf(stderr, "--attn-decode DEPTH: 1 to 32768\n");
                return 2;
            }
            return bench_attn_decode(depth);
        }
        else {
            fprintf(stderr, "usage: %s [--quick] [--level NAME] [--only SUBSTRING] [--no-scalar] [--prefetch-sweep] [--packed] [--attn-decode [DEPTH]]\n", argv[0]);
            return 2;
        }
    }
    if (quick) g_min_time = 0.1;
    if (sweep) { /* GEMV software prefetch distance (kernels.h), settings interleaved, best level */
        g_nk = 0;
        const cpu_kernels *all2[8];
        int n2 = cpu_kernels_all(all2, 8);
        g_k[g_nk++] = all2[n2 - 1];
        static const size_t d[] = {0, 256, 512, 1024, 2048};
        for (int rep = 0; rep < 2; rep++)
            for (size_t i = 0; i < sizeof d / sizeof *d; i++) {
                kernels_prefetch_bytes = d[i];
                printf("prefetch %4zu: ", d[i]);
                bench_gemv_stream(XLLM_DT_Q8, 32, 2304, 768);
                printf("prefetch %4zu: ", d[i]);
                bench_gemv_stream(XLLM_DT_Q4, 32, 2304, 768);
                printf("prefetch %4zu: ", d[i]);
                bench_gemv_stream(XLLM_DT_Q4, 32, 2048, 4096);
            }
        printf("%-34s %9.2f  GB/s\n", "read 256 MB", read_gbs());
        return 0;
    }
    const cpu_kernels *all[8];
    int n = cpu_kernels_all(all, 8);
    for (int i = 0; i < n; i++)
        if ((i == 0 && !no_scalar) || (i > 0 && (!only || !strcmp(all[i]->name, only)))) g_k[g_nk++] = all[i];
    cpu_features f;
    cpu_features_detect(&f);
    printf("levels: best %s; columns:", cpu_level_name(cpu_level_best()));
    for (int i = 0; i < g_nk; i++) printf(" %s", g_k[i]->name);
    printf("; ratios vs %s; 1 thread\n", g_k[0]->name);
    printf("%-34s", "kernel");
    for (int i = 0; i < g_nk; i++) printf(" %9s", g_k[i]->name);
    printf("\n");

    int64_t big_r = quick ? 4096 : 8192, big_c = 4096; /* GEMV: bigger than the caches */
    static const dtype_t qt[] = {XLLM_DT_Q4, XLLM_DT_Q8, XLLM_DT_Q4M};
    for (int i = 0; i < 3; i++) bench_quant(qt[i], 32, big_r, big_c, 1, 1);
    bench_quant(XLLM_DT_Q4, 128, big_r, big_c, 1, 1);
    bench_quant(XLLM_DT_Q4, 32, 256, 2048, 1, 1); /* cache-resident: the kernel's arithmetic ceiling */
    bench_quant(XLLM_DT_Q4, 32, 64, 5632, 1, 1);
    if (wanted("gemv stream")) printf("%-34s %9.2f  GB/s (memory read bandwidth, the bound for streaming GEMV)\n", "read 256 MB", read_gbs());
    bench_gemv_stream(XLLM_DT_Q4, 32, 2304, 768); /* small-120m qkv */
    bench_gemv_stream(XLLM_DT_Q8, 32, 2304, 768);
    bench_gemv_stream(XLLM_DT_Q4, 32, 768, 2304); /* down */
    bench_gemv_stream(XLLM_DT_Q8, 32, 32000, 768); /* lm_head */
    bench_gemv_stream(XLLM_DT_Q8, 32, 2048, 4096);
    bench_gemv_stream(XLLM_DT_Q4, 32, 2048, 4096);
    bench_gemv_stream(XLLM_DT_Q4, 32, 5632, 2048); /* TinyLlama's gate/up and down at decode */
    bench_gemv_stream(XLLM_DT_Q4, 32, 2048, 5632);
    /* decode of 16 sequences (the server's 16 clients), TinyLlama's gate/up and down */
    bench_stream_t(XLLM_DT_Q4, 32, 5632, 2048, 16);
    bench_stream_t(XLLM_DT_Q4, 32, 2048, 5632, 16);
    bench_stream_t(XLLM_DT_Q4, 32, 5632, 2048, 8);
    if (wanted("int8 peak") || wanted("prefill")) { /* the bound for quantized GEMM, and the prefill GEMMs against it */
        double ghz, pk = int8_peak_report(&ghz);
        if (pk > 0) bench_peak_fraction(pk);
    }
    for (int i = 0; i < 3; i++) bench_quant(qt[i], 32, 512, 2048, 64, 0);
    bench_quant(XLLM_DT_Q4, 128, 512, 2048, 64, 0);
    bench_quant(XLLM_DT_Q4, 32, 512, 2048, 4, 0);
    /* K-quants on TinyLlama-1.1B's shapes: qkv/o (2048x2048), gate/up (5632x2048), down (2048x5632) */
    static const dtype_t kqt[] = {XLLM_DT_Q4_K, XLLM_DT_Q6_K, XLLM_DT_IQ4_NL, XLLM_DT_IQ4_XS,
                                     XLLM_DT_Q5_0,  XLLM_DT_Q5_1, XLLM_DT_Q2_K,   XLLM_DT_Q3_K,  XLLM_DT_Q5_K};
    for (int i = 0; i < (int)(sizeof kqt / sizeof *kqt); i++) {
        bench_kq(kqt[i], 2048, 2048, 1);
        bench_kq(kqt[i], 5632, 2048, 1);
        bench_kq(kqt[i], 2048, 5632, 1);
        bench_kq_gemv_cached(kqt[i], 256, 2048);
        bench_kq_gemv_cached(kqt[i], 64, 5632);
        bench_kq(kqt[i], 512, 2048, 64);
        bench_kq(kqt[i], 512, 5632, 64);
        bench_kq(kqt[i], 512, 2048, 4);
        bench_kq_s(kqt[i], 5632, 2048, 16, 1); /* decode of 16 sequences */
        bench_kq(kqt[i], 2816, 2048, 512); /* prefill: half of gate/up per thread, TinyLlama pp512 */
        bench_kq(kqt[i], 1024, 5632, 512); /* prefill: half of down */
    }
    static const dtype_t ft[] = {XLLM_DT_F32, XLLM_DT_F16, XLLM_DT_BF16};
    for (int i = 0; i < 3; i++) bench_float(ft[i], big_r / 2, big_c, 1, 1);
    for (int i = 0; i < 3; i++) bench_float(ft[i], 256, 2048, 64, 0);
    bench_act(4096, 64);
    bench_attn(64, 512, 0);
    bench_attn(64, 512, 1);
    bench_attn(128, 512, 0);
    bench_attn(128, 512, 1);
    for (int accum = 0; accum < 2; accum++) {
        bench_attn_multi(64, 128, 4, accum, 0);
        bench_attn_multi(64, 128, 8, accum, 0);
        bench_attn_multi(64, 128, 16, accum, 0);
        bench_attn_multi(128, 128, 8, accum, 0);
    }
    /* one chunk of the shared-KV prefill: a GQA group's tile (TinyLlama: 8 heads x 8 tokens) over ATTN_CHUNK
     * keys, a call per KV block of 16; and a single block */
    bench_attn_multi(64, 128, 64, 0, 16);
    bench_attn_multi(128, 128, 64, 0, 16);
    bench_attn_multi(80, 128, 64, 0, 16);
    bench_attn_multi(64, 128, 16, 0, 16);
    bench_attn_multi(64, 16, 64, 0, 0);
    bench_attn_softmax(128, 1);
    bench_attn_softmax(128, 8);
    return 0;
}
