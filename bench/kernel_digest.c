/*
 * kernel_digest.c - a 64-bit hash (FNV-1a) of the output bits of every
 * matmul kernel table this CPU runs, over a fixed set of shapes, so that a
 * change to the kernels' code that must not change their arithmetic (shared
 * loops, reordered files) can be shown to leave every bit as it was: build
 * the old and the new tree, run both, diff the output.
 *
 *   kernel_digest [--level NAME]
 *
 * Covers Q8 / Q4 / Q4M (groups 32, 64, 96, 128, 256), stored and, where the
 * level has one, packed (the level's default rule and each planner variant
 * forced), GEMV and GEMM (T = 1..130), bias or none, whole row ranges and
 * ranges cut as thread splits cut them; F32 / F16 / BF16 weights (rows not
 * aligned, any width). Inputs come from a fixed seed, so each line is a
 * function of the kernels alone. Prints hashes only; no pass/fail.
 */
#include "backend/cpu/kernels.h"
#include "base/alloc.h"
#include "quant/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned g_seed = 2026;
static unsigned rnd(void) {
    g_seed = g_seed * 1664525u + 1013904223u;
    return g_seed >> 8;
}
static float frand(void) { return (float)(rnd() & 0xffffff) / 16777216.0f * 2.0f - 1.0f; }

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Activations with varied block magnitudes (as the models' are). */
static void fill_x(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float s = (i / 32) % 7 == 0 ? 30.0f : (i / 32) % 5 == 0 ? 1e-3f : 1.0f;
        x[i] = frand() * s;
    }
}

/* Outputs of rows [0, rows) for T tokens: whole, then cut at `cut` (a
 * multiple of `tile`), into y (rows x T), hashed. */
static uint64_t run_q(const cpu_kernels *K, const matrix *W, const void *act, size_t as, int T, const float *bias,
                      int64_t tile, void *scr) {
    size_t ny = (size_t)W->rows * (size_t)T;
    float *y = malloc(sizeof(float) * ny);
    memset(y, 0xff, sizeof(float) * ny);
    K->matmul_q(W, act, as, T, bias, y, (size_t)W->rows, 0, W->rows, scr);
    uint64_t h = fnv(1469598103934665603ull, y, sizeof(float) * ny);
    int64_t cut = W->rows / 2 / tile * tile;
    if (cut > 0) {
        /* the second part through a view that starts at the cut, as cpu_ops gives it */
        matrix v = *W;
        size_t off;
        if (W->packed) {
            matrix head = *W;
            head.rows = cut;
            off = K->packed_bytes(&head);
        } else {
            off = (size_t)cut * quant_row_bytes(W->dtype, W->group, W->cols);
        }
        v.data = (const char *)W->data + off;
        v.rows = W->rows - cut;
        memset(y, 0xff, sizeof(float) * ny);
        K->matmul_q(W, act, as, T, bias, y, (size_t)W->rows, 0, cut, scr);
        K->matmul_q(&v, act, as, T, bias ? bias + cut : NULL, y + cut, (size_t)W->rows, 0, v.rows, scr);
        h = fnv(h, y, sizeof(float) * ny);
    }
    free(y);
    return h;
}

static void digest_q(const cpu_kernels *K, dtype_t t, int g, int64_t rows, int64_t cols, int T, int use_bias) {
    if (!quant_format_ok(t, g, cols)) return;
    size_t rb = quant_row_bytes(t, g, cols);
    unsigned char *w = mem_malloc_aligned(rb * (size_t)rows);
    float *tmp = malloc(sizeof(float) * (size_t)cols), *x = malloc(sizeof(float) * (size_t)cols * (size_t)T);
    float *bias = malloc(sizeof(float) * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) tmp[c] = frand();
        quant_quantize_row(t, g, tmp, cols, NULL, w + (size_t)r * rb);
        bias[r] = frand();
    }
    fill_x(x, cols * T);
    size_t as = K->act_bytes(cols);
    void *act = mem_malloc_aligned(as * (size_t)T), *scr = mem_malloc_aligned(K->scratch_bytes(cols));
    for (int i = 0; i < T; i++) K->act_prepare(x + (size_t)i * (size_t)cols, cols, (char *)act + (size_t)i * as, 0);
    matrix W = {t, g, rows, cols, w, {0}, {0}, 0};
    const float *b = use_bias ? bias : NULL;
    printf("%s %s/g%d %lldx%lld T=%d%s stored %016llx", K->name, dtype_name(t), g, (long long)rows,
           (long long)cols, T, use_bias ? " bias" : "", (unsigned long long)run_q(K, &W, act, as, T, b, 1, scr));
    size_t pb = K->packed_bytes ? K->packed_bytes(&W) : 0;
    if (pb) {
        void *pk = mem_malloc_aligned(pb);
        K->repack(&W, 0, (rows + 3) / 4, pk);
        matrix P = W;
        P.data = pk;
        P.packed = 1;
        int64_t tile = K->packed_rows ? K->packed_rows(&W) : 4;
        for (int v = 0; v <= K->n_variants; v++) {
            memset(P.plan_kernel, v, sizeof P.plan_kernel);
            printf(" packed/%d %016llx", v, (unsigned long long)run_q(K, &P, act, as, T, b, tile, scr));
        }
        mem_free_aligned(pk);
    }
    printf("\n");
    mem_free_aligned(act);
    mem_free_aligned(scr);
    mem_free_aligned(w);
    free(tmp), free(x), free(bias);
}

static void digest_f(const cpu_kernels *K, dtype_t t, int64_t rows, int64_t cols, int T, int use_bias) {
    size_t es = dtype_size(t), ny = (size_t)rows * (size_t)T;
    unsigned char *buf = mem_malloc_aligned(es * (size_t)(rows * cols + 1)), *w = buf + es; /* rows not aligned */
    for (int64_t i = 0; i < rows * cols; i++) {
        float f = frand();
        if (t == XLLM_DT_F32) memcpy(w + 4 * i, &f, 4);
        else {
            uint16_t h = t == XLLM_DT_F16 ? f32_to_f16(f) : f32_to_bf16(f);
            memcpy(w + 2 * i, &h, 2);
        }
    }
    float *x = malloc(sizeof(float) * (size_t)(cols * T)), *bias = malloc(sizeof(float) * (size_t)rows);
    float *y = malloc(sizeof(float) * ny);
    fill_x(x, cols * T);
    for (int64_t r = 0; r < rows; r++) bias[r] = frand();
    const float *b = use_bias ? bias : NULL;
    void *scr = mem_malloc_aligned(K->scratch_bytes(cols));
    matrix W = {t, 0, rows, cols, w, {0}, {0}, 0};
    memset(y, 0xff, sizeof(float) * ny);
    K->matmul_f(&W, x, T, b, y, (size_t)rows, 0, rows, scr);
    uint64_t h = fnv(1469598103934665603ull, y, sizeof(float) * ny);
    int64_t cut = rows / 3;
    memset(y, 0xff, sizeof(float) * ny);
    K->matmul_f(&W, x, T, b, y, (size_t)rows, 0, cut, scr);
    K->matmul_f(&W, x, T, b, y, (size_t)rows, cut, rows, scr);
    h = fnv(h, y, sizeof(float) * ny);
    printf("%s %s %lldx%lld T=%d%s %016llx\n", K->name, dtype_name(t), (long long)rows, (long long)cols, T,
           use_bias ? " bias" : "", (unsigned long long)h);
    mem_free_aligned(scr);
    mem_free_aligned(buf);
    free(x), free(bias), free(y);
}

int main(int argc, char **argv) {
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--level") && i + 1 < argc) only = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--level NAME]\n", argv[0]);
            return 2;
        }
    }
    const cpu_kernels *all[8];
    int n = cpu_kernels_all(all, 8);
    static const int Ts[] = {1, 2, 3, 4, 5, 8, 9, 13, 24, 33, 64, 100, 130};
    static const dtype_t qt[] = {XLLM_DT_Q8, XLLM_DT_Q4, XLLM_DT_Q4M};
    static const int groups[] = {32, 64, 96, 128, 256};
    static const int64_t qrows[] = {1, 7, 37, 70};
    static const int64_t qcols[] = {32, 160, 768, 1152, 2080};
    static const dtype_t ft[] = {XLLM_DT_F32, XLLM_DT_F16, XLLM_DT_BF16};
    static const int64_t frows[] = {1, 5, 19};
    static const int64_t fcols[] = {1, 7, 16, 17, 40, 100, 1000, 4097};
    for (int k = 0; k < n; k++) {
        const cpu_kernels *K = all[k];
        if (only && strcmp(K->name, only)) continue;
        g_seed = 2026; /* each level sees the same inputs */
        int i = 0;
        for (size_t a = 0; a < sizeof qt / sizeof *qt; a++)
            for (size_t gi = 0; gi < sizeof groups / sizeof *groups; gi++)
                for (size_t ri = 0; ri < sizeof qrows / sizeof *qrows; ri++)
                    for (size_t ci = 0; ci < sizeof qcols / sizeof *qcols; ci++, i++)
                        digest_q(K, qt[a], groups[gi], qrows[ri], qcols[ci], Ts[i % 13], i % 3 == 0);
        for (size_t a = 0; a < sizeof ft / sizeof *ft; a++)
            for (size_t ri = 0; ri < sizeof frows / sizeof *frows; ri++)
                for (size_t ci = 0; ci < sizeof fcols / sizeof *fcols; ci++, i++)
                    digest_f(K, ft[a], frows[ri], fcols[ci], Ts[i % 13], i % 3 == 0);
        /* every T on one model-like shape each */
        for (int ti = 0; ti < 13; ti++) {
            digest_q(K, XLLM_DT_Q4, 32, 70, 2048, Ts[ti], 0);
            digest_q(K, XLLM_DT_Q8, 32, 70, 2048, Ts[ti], 1);
            digest_q(K, XLLM_DT_Q4M, 64, 70, 2048, Ts[ti], 0);
            digest_f(K, XLLM_DT_F16, 21, 2048, Ts[ti], 0);
        }
    }
    return 0;
}
