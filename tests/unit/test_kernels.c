/*
 * test_kernels.c - every CPU kernel at every level this machine runs (and
 * both NEON variants under qemu), against the scalar reference and against
 * an exact (double) evaluation of the same quantized arithmetic:
 *  - activation quantization bit-identical to quant_activations;
 *  - quantized matmul (Q8/Q4/Q4M, groups 32/64/128) and float matmul
 *    (F32/F16/BF16) on random shapes with odd sizes (T = 1, 2, 3, 5, 17; rows
 *    not a multiple of the tiles; cols 32..4096, any cols for float weights),
 *    within a float-summation error bound;
 *  - bit identity within a level: a token's outputs are the same whether it is
 *    computed alone (GEMV) or inside a batch (GEMM), and whatever the row split
 *    between threads (also through op_matmul with 1..3 threads); the NEON
 *    variants (with and without dotprod) agree bit for bit;
 *  - attention scores and weighted V sums against double, and independent of
 *    how the keys are cut into runs; the multi-query (K/V sharing) loops
 *    bit-identical to the single-query ones for every query; each level's
 *    softmax bit-identical to the reference (attn_softmax_ref);
 *  - XLLM_CPU parsing: unknown and unsupported levels are clear errors.
 *
 * Error bound. Every level computes exact int32 sums per 32-block and then
 * accumulates float terms: at most one rounding for the scale product, one
 * for the term (or the fma), and a sum of at most n terms, so the error
 * against the exact value is below (n + 4) * 2^-24 * sum |terms| (the
 * classic gamma_n bound for recursive summation, u = 2^-24, with n terms per
 * output: blocks for quantized weights, columns for float weights). We check
 * |y - exact| <= (n + 8) * 2^-24 * sum|w_i a_i| + 1e-30, sum|w_i a_i| being
 * an upper bound of sum |terms| computed in double. The scalar reference meets
 * the same bound, so levels agree with it to twice that.
 */
#include "test.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"
#include "base/alloc.h"
#include "base/error.h"
#include "quant/quant.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

static unsigned g_seed = 12345;
static unsigned rnd(void) {
    g_seed = g_seed * 1664525u + 1013904223u;
    return g_seed >> 8;
}
static float frand(void) { return (float)(rnd() & 0xffffff) / 16777216.0f * 2.0f - 1.0f; }
static int irand(int lo, int hi) { return lo + (int)(rnd() % (unsigned)(hi - lo + 1)); }

static const cpu_kernels *g_levels[8];
static int g_nlevels;

/* Activations with varied block magnitudes, an all-zero block and spikes. */
static void fill_act(float *x, int64_t n) {
    for (int64_t b = 0; b < (n + 31) / 32; b++) {
        int kind = irand(0, 9);
        float scale = kind == 0 ? 0.0f : kind == 1 ? 1e-3f : kind == 2 ? 50.0f : 1.0f;
        for (int64_t i = b * 32; i < n && i < b * 32 + 32; i++) x[i] = frand() * scale;
        int64_t spike = b * 32 + irand(0, 31);
        if (kind == 3 && spike < n) x[spike] = -8.0f;
    }
}

static uint16_t rand_f16(float lo, float hi) { return f32_to_f16(lo + (hi - lo) * (frand() * 0.5f + 0.5f)); }

/* Random quantized row: random integer levels (all byte patterns, so Q8 may
 * hold -128) and random f16 scales of both signs. */
static void rand_qrow(dtype_t t, int group, int64_t cols, unsigned char *out) {
    size_t bb = quant_block_bytes(t, group);
    for (int64_t g = 0; g < cols / group; g++, out += bb) {
        uint16_t d = rand_f16(-0.05f, 0.05f), m = rand_f16(-0.2f, 0.2f);
        memcpy(out, &d, 2);
        size_t hdr = 2;
        if (t == XLLM_DT_Q4M) memcpy(out + 2, &m, 2), hdr = 4;
        for (size_t i = hdr; i < bb; i++) out[i] = (unsigned char)rnd();
    }
}

/* Exact value of one quantized row times one quantized activation row, and
 * sum |w_i a_i|, in double from the dequantized values. */
static void exact_qdot(dtype_t t, int group, const void *row, const int8_t *q, const float *d, int64_t cols,
                       double *val, double *abs_sum) {
    float *w = malloc(sizeof(float) * (size_t)cols);
    quant_dequantize_row(t, group, row, cols, w);
    size_t bb = quant_block_bytes(t, group);
    double s = 0, a = 0;
    for (int64_t i = 0; i < cols; i++) {
        double ai = (double)q[i] * (double)d[i / QK], m = 0;
        if (t == XLLM_DT_Q4M) { /* the level sums q*dw*a and m*a separately: |q dw| + |m| <= |w| + 2|m| */
            uint16_t h;
            memcpy(&h, (const unsigned char *)row + (size_t)(i / group) * bb + 2, 2);
            m = fabs((double)f16_to_f32(h));
        }
        s += (double)w[i] * ai;
        a += (fabs((double)w[i]) + 2 * m) * fabs(ai);
    }
    free(w);
    *val = s;
    *abs_sum = a;
}

static double bound(double n_terms, double abs_sum) { return (n_terms + 8) * 5.960464477539063e-08 * abs_sum + 1e-30; }

/* ------------------------------------------------------------- activations */

static void check_quant_act(const cpu_kernels *k) {
    for (int it = 0; it < 40; it++) {
        int llama = it % 2; /* ours, and llama.cpp's scales (arithmetic "llama") */
        int64_t cols = 32 * irand(1, 128);
        float *x = malloc(sizeof(float) * (size_t)cols);
        fill_act(x, cols);
        int8_t *q0 = malloc((size_t)cols), *q1 = malloc((size_t)cols);
        float *d0 = malloc(sizeof(float) * (size_t)cols / 32), *d1 = malloc(sizeof(float) * (size_t)cols / 32);
        int32_t *s0 = malloc(sizeof(int32_t) * (size_t)cols / 32), *s1 = malloc(sizeof(int32_t) * (size_t)cols / 32);
        float *e0 = malloc(sizeof(float) * (size_t)cols / 32), *e1 = malloc(sizeof(float) * (size_t)cols / 32);
        quant_activations(x, cols, q0, d0, s0, e0, llama);
        k->quant_act(x, cols, q1, d1, s1, e1, llama);
        int same = !memcmp(q0, q1, (size_t)cols) && !memcmp(d0, d1, sizeof(float) * (size_t)cols / 32) &&
                   !memcmp(s0, s1, sizeof(int32_t) * (size_t)cols / 32) &&
                   !memcmp(e0, e1, sizeof(float) * (size_t)cols / 32);
        CHECK_MSG(same, "%s: quant_act differs from quant_activations (cols %lld, llama %d)", k->name, (long long)cols,
                  llama);
        for (int64_t b = 0; llama && b < cols / 32; b++) { /* llama.cpp's scale: amax / 127 rounded to f16 */
            float amax = 0;
            for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[b * 32 + i]));
            CHECK(d0[b] == f16_to_f32(f32_to_f16(amax / 127.0f)));
            /* and Q8_1's sum: f16(amax / 127 x s), the scale unrounded */
            CHECK(e0[b] == f16_to_f32(f32_to_f16(amax / 127.0f * (float)s0[b])));
        }
        free(x), free(q0), free(q1), free(d0), free(d1), free(s0), free(s1), free(e0), free(e1);
    }
}

/* Non-finite activations (a model whose weights overflow) and subnormal
 * blocks: every level must give the scalar's bits (a block with inf or NaN:
 * q = 0, s = 0, d = NaN; a block whose 1/d overflows: zeros) without ever
 * converting NaN or inf to an int (undefined in C, INT_MIN sums on x86), and a
 * matmul over such a row must give NaN, not a number. */
static void run_q(const cpu_kernels *k, const matrix *W, const float *x, int T, const float *bias, float *y,
                  int64_t r0, int64_t r1);

static void check_quant_act_nonfinite(const cpu_kernels *k) {
    const float specials[] = {INFINITY, -INFINITY, NAN, -NAN, 1e-44f, -3e-45f, FLT_MAX, -FLT_MAX};
    for (int it = 0; it < 64; it++) {
        int64_t cols = 32 * irand(1, 8);
        float *x = malloc(sizeof(float) * (size_t)cols);
        fill_act(x, cols);
        int64_t b = irand(0, (int)(cols / 32) - 1);
        if (it % 4 == 3) { /* a block of subnormals only */
            for (int i = 0; i < 32; i++) x[b * 32 + i] = (float)irand(-3, 3) * 1e-45f;
        } else {
            x[b * 32 + irand(0, 31)] = specials[it % 8];
        }
        int8_t *q0 = malloc((size_t)cols), *q1 = malloc((size_t)cols);
        float *d0 = malloc(sizeof(float) * (size_t)cols / 32), *d1 = malloc(sizeof(float) * (size_t)cols / 32);
        int32_t *s0 = malloc(sizeof(int32_t) * (size_t)cols / 32), *s1 = malloc(sizeof(int32_t) * (size_t)cols / 32);
        float *e0 = malloc(sizeof(float) * (size_t)cols / 32), *e1 = malloc(sizeof(float) * (size_t)cols / 32);
        quant_activations(x, cols, q0, d0, s0, e0, it % 16 >= 8);
        k->quant_act(x, cols, q1, d1, s1, e1, it % 16 >= 8);
        int same = !memcmp(q0, q1, (size_t)cols) && !memcmp(s0, s1, sizeof(int32_t) * (size_t)cols / 32);
        for (int64_t j = 0; j < cols / 32; j++) {
            same &= (isnan(d0[j]) && isnan(d1[j])) || d0[j] == d1[j];
            same &= (isnan(e0[j]) && isnan(e1[j])) || e0[j] == e1[j];
        }
        CHECK_MSG(same, "%s: quant_act differs from quant_activations on special value %d", k->name, it % 8);
        int finite = 1;
        for (int i = 0; i < 32; i++) finite &= isfinite(x[b * 32 + i]);
        if (!finite) CHECK(isnan(d0[b]) && s0[b] == 0);
        if (!finite) {
            /* through a Q8 matmul: the row's output is NaN */
            matrix W = {XLLM_DT_Q8, 32, 2, cols, NULL, {0}, {0}, 0};
            size_t rb = quant_row_bytes(XLLM_DT_Q8, 32, cols);
            unsigned char *w = mem_malloc_aligned(rb * 2);
            for (int r = 0; r < 2; r++) rand_qrow(XLLM_DT_Q8, 32, cols, w + (size_t)r * rb);
            W.data = w;
            float y[2] = {0, 0};
            run_q(k, &W, x, 1, NULL, y, 0, 2);
            CHECK_MSG(isnan(y[0]) && isnan(y[1]), "%s: non-finite activations gave %g %g", k->name, y[0], y[1]);
            mem_free_aligned(w);
        }
        free(x), free(q0), free(q1), free(d0), free(d1), free(s0), free(s1), free(e0), free(e1);
    }
}

/* --------------------------------------------------------- quantized matmul */

static void run_q(const cpu_kernels *k, const matrix *W, const float *x, int T, const float *bias, float *y,
                  int64_t r0, int64_t r1) {
    size_t as = k->act_bytes(W->cols);
    unsigned char *act = mem_malloc_aligned(as * (size_t)T);
    void *scr = mem_malloc_aligned(k->scratch_bytes(W->cols));
    for (int t = 0; t < T; t++) k->act_prepare(x + (size_t)t * (size_t)W->cols, W->cols, act + (size_t)t * as, 0);
    k->matmul_q(W, act, as, T, bias, y, (size_t)W->rows, r0, r1, scr);
    mem_free_aligned(act);
    mem_free_aligned(scr);
}

static void check_qmatmul(dtype_t t, int group, int64_t rows, int64_t cols, int T) {
    size_t rb = quant_row_bytes(t, group, cols);
    unsigned char *w = mem_malloc_aligned(rb * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) rand_qrow(t, group, cols, w + (size_t)r * rb);
    matrix W = {t, group, rows, cols, w, {0}, {0}, 0};
    float *x = malloc(sizeof(float) * (size_t)(cols * T)), *bias = malloc(sizeof(float) * (size_t)rows);
    fill_act(x, cols * T);
    for (int64_t r = 0; r < rows; r++) bias[r] = frand();
    int use_bias = irand(0, 1);
    size_t ny = (size_t)rows * (size_t)T;
    float *ya = malloc(sizeof(float) * ny), *yb = malloc(sizeof(float) * ny), *ys = malloc(sizeof(float) * ny);
    /* the exact values */
    double *ex = malloc(sizeof(double) * ny), *ab = malloc(sizeof(double) * ny);
    int8_t *q = malloc((size_t)cols);
    float *d = malloc(sizeof(float) * (size_t)cols / QK);
    int32_t *s = malloc(sizeof(int32_t) * (size_t)cols / QK);
    float *ds = malloc(sizeof(float) * (size_t)cols / QK);
    for (int tt = 0; tt < T; tt++) {
        quant_activations(x + (size_t)tt * (size_t)cols, cols, q, d, s, ds, 0);
        for (int64_t r = 0; r < rows; r++) {
            exact_qdot(t, group, w + (size_t)r * rb, q, d, cols, &ex[(size_t)tt * rows + r], &ab[(size_t)tt * rows + r]);
            if (use_bias) ex[(size_t)tt * rows + r] += bias[r];
        }
    }
    double nterms = (double)(cols / QK) * (t == XLLM_DT_Q4M ? 2 : 1);
    float *yl[8] = {0};
    for (int l = 0; l < g_nlevels; l++) {
        const cpu_kernels *k = g_levels[l];
        const float *bp = use_bias ? bias : NULL;
        run_q(k, &W, x, T, bp, ya, 0, rows);
        if (l == 0) memcpy(ys, ya, sizeof(float) * ny);
        /* variants of one level (NEON with and without dotprod) agree bit for bit */
        yl[l] = malloc(sizeof(float) * ny);
        memcpy(yl[l], ya, sizeof(float) * ny);
        for (int m = 0; m < l; m++)
            if (g_levels[m]->level == k->level)
                CHECK_MSG(!memcmp(yl[m], ya, sizeof(float) * ny), "%s and %s differ (%s/g%d)", g_levels[m]->name,
                          k->name, dtype_name(t), group);
        int bad = 0;
        for (size_t i = 0; i < ny && bad < 3; i++) {
            double tol = bound(nterms, ab[i] + (use_bias ? fabs(bias[i % (size_t)rows]) : 0));
            if (!(fabs(ya[i] - ex[i]) <= tol)) {
                bad++;
                CHECK_MSG(0, "%s %s/g%d %lldx%lld T=%d: y[%zu] = %.9g, exact %.9g (tol %.3g)", k->name,
                          dtype_name(t), group, (long long)rows, (long long)cols, T, i, ya[i], ex[i], tol);
            }
            if (!(fabs(ya[i] - ys[i]) <= 2 * tol)) {
                bad++;
                CHECK_MSG(0, "%s vs scalar %s/g%d: y[%zu] = %.9g vs %.9g", k->name, dtype_name(t), group, i, ya[i],
                          ys[i]);
            }
        }
        g_test_checks++;
        /* GEMV vs GEMM: each token alone gives the same bits */
        for (int tt = 0; tt < T; tt++) {
            float *y1 = malloc(sizeof(float) * (size_t)rows);
            run_q(k, &W, x + (size_t)tt * (size_t)cols, 1, bp, y1, 0, rows);
            CHECK_MSG(!memcmp(y1, ya + (size_t)tt * rows, sizeof(float) * (size_t)rows),
                      "%s %s/g%d %lldx%lld: token %d of %d differs alone vs in the batch", k->name, dtype_name(t),
                      group, (long long)rows, (long long)cols, tt, T);
            free(y1);
        }
        /* a different row split (as another thread count would give) */
        int64_t cut = irand(0, (int)rows);
        run_q(k, &W, x, T, bp, yb, 0, cut);
        run_q(k, &W, x, T, bp, yb, cut, rows);
        CHECK_MSG(!memcmp(ya, yb, sizeof(float) * ny), "%s %s/g%d: row split at %lld changes results", k->name,
                  dtype_name(t), group, (long long)cut);
    }
    for (int l = 0; l < g_nlevels; l++) free(yl[l]);
    mem_free_aligned(w);
    free(x), free(bias), free(ya), free(yb), free(ys), free(ex), free(ab), free(q), free(d), free(s), free(ds);
}

/* ------------------------------------------------------------- float matmul */

static void check_fmatmul(dtype_t t, int64_t rows, int64_t cols, int T) {
    size_t es = dtype_size(t);
    /* offset by one element so rows are not 64-byte aligned */
    unsigned char *buf = mem_malloc_aligned(es * (size_t)(rows * cols + 1));
    unsigned char *w = buf + es;
    float *wf = malloc(sizeof(float) * (size_t)(rows * cols));
    for (int64_t i = 0; i < rows * cols; i++) {
        float f = frand();
        if (t == XLLM_DT_F32) memcpy(w + 4 * i, &f, 4);
        else {
            uint16_t h = t == XLLM_DT_F16 ? f32_to_f16(f) : f32_to_bf16(f);
            memcpy(w + 2 * i, &h, 2);
        }
    }
    dtype_to_f32(t, w, wf, (size_t)(rows * cols));
    matrix W = {t, 0, rows, cols, w, {0}, {0}, 0};
    float *x = malloc(sizeof(float) * (size_t)(cols * T));
    fill_act(x, cols * T);
    size_t ny = (size_t)rows * (size_t)T;
    float *ya = malloc(sizeof(float) * ny), *yb = malloc(sizeof(float) * ny), *ys = malloc(sizeof(float) * ny);
    for (int l = 0; l < g_nlevels; l++) {
        const cpu_kernels *k = g_levels[l];
        void *scr = mem_malloc_aligned(k->scratch_bytes(cols));
        k->matmul_f(&W, x, T, NULL, ya, (size_t)rows, 0, rows, scr);
        if (l == 0) memcpy(ys, ya, sizeof(float) * ny);
        int bad = 0;
        for (int tt = 0; tt < T && bad < 3; tt++)
            for (int64_t r = 0; r < rows && bad < 3; r++) {
                double e = 0, a = 0;
                for (int64_t c = 0; c < cols; c++) {
                    double p = (double)wf[r * cols + c] * (double)x[(size_t)tt * cols + c];
                    e += p;
                    a += fabs(p);
                }
                double got = ya[(size_t)tt * rows + r], tol = bound((double)cols, a);
                if (!(fabs(got - e) <= tol)) {
                    bad++;
                    CHECK_MSG(0, "%s %s %lldx%lld T=%d: y[%d][%lld] = %.9g, exact %.9g (tol %.3g)", k->name,
                              dtype_name(t), (long long)rows, (long long)cols, T, tt, (long long)r, got, e, tol);
                }
            }
        g_test_checks++;
        for (int tt = 0; tt < T; tt++) {
            float *y1 = malloc(sizeof(float) * (size_t)rows);
            k->matmul_f(&W, x + (size_t)tt * cols, 1, NULL, y1, (size_t)rows, 0, rows, scr);
            CHECK_MSG(!memcmp(y1, ya + (size_t)tt * rows, sizeof(float) * (size_t)rows),
                      "%s %s %lldx%lld: token %d of %d differs alone vs in the batch", k->name, dtype_name(t),
                      (long long)rows, (long long)cols, tt, T);
            free(y1);
        }
        int64_t cut = irand(0, (int)rows);
        k->matmul_f(&W, x, T, NULL, yb, (size_t)rows, 0, cut, scr);
        k->matmul_f(&W, x, T, NULL, yb, (size_t)rows, cut, rows, scr);
        CHECK_MSG(!memcmp(ya, yb, sizeof(float) * ny), "%s %s: row split changes results", k->name, dtype_name(t));
        mem_free_aligned(scr);
    }
    mem_free_aligned(buf);
    free(wf), free(x), free(ya), free(yb), free(ys);
}

/* ---------------------------------------------------------------- attention */

static void check_attention(int hd, int n, int heads) {
    size_t stride = (size_t)hd * (size_t)heads;
    float *k = malloc(sizeof(float) * stride * (size_t)n), *q = malloc(sizeof(float) * (size_t)hd);
    float *w = malloc(sizeof(float) * (size_t)n), *sc = malloc(sizeof(float) * (size_t)n);
    float *acc = malloc(sizeof(float) * (size_t)hd), *acc0 = malloc(sizeof(float) * (size_t)hd);
    for (size_t i = 0; i < stride * (size_t)n; i++) k[i] = frand();
    for (int i = 0; i < hd; i++) q[i] = frand(), acc0[i] = frand();
    for (int i = 0; i < n; i++) w[i] = frand() * 0.5f + 0.5f;
    float scale = 1.0f / sqrtf((float)hd);
    for (int l = 0; l < g_nlevels; l++) {
        const cpu_kernels *K = g_levels[l];
        K->attn->scores(q, k, stride, n, hd, scale, sc);
        int bad = 0;
        for (int i = 0; i < n && !bad; i++) {
            double e = 0, a = 0;
            for (int d = 0; d < hd; d++) e += (double)q[d] * k[i * stride + d], a += fabs((double)q[d] * k[i * stride + d]);
            /* + one rounding for the scale */
            double tol = bound(hd + 2, a) * scale;
            if (!(fabs(sc[i] - e * scale) <= tol)) {
                bad = 1;
                CHECK_MSG(0, "%s attn_scores hd=%d n=%d: [%d] %.9g vs %.9g", K->name, hd, n, i, sc[i], e * scale);
            }
        }
        /* a key's score does not depend on where its run starts (chunks of
         * keys are cut differently when the attention is split differently) */
        if (n > 1) {
            int cut = irand(1, n - 1);
            float *sc2 = malloc(sizeof(float) * (size_t)n);
            K->attn->scores(q, k, stride, cut, hd, scale, sc2);
            K->attn->scores(q, k + (size_t)cut * stride, stride, n - cut, hd, scale, sc2 + cut);
            CHECK_MSG(!memcmp(sc, sc2, sizeof(float) * (size_t)n), "%s attn_scores: split at %d of %d changes scores",
                      K->name, cut, n);
            memcpy(acc, acc0, sizeof(float) * (size_t)hd);
            K->attn->accum(acc, w, k, stride, cut, hd);
            K->attn->accum(acc, w + cut, k + (size_t)cut * stride, stride, n - cut, hd);
            float *acc2 = malloc(sizeof(float) * (size_t)hd);
            memcpy(acc2, acc0, sizeof(float) * (size_t)hd);
            K->attn->accum(acc2, w, k, stride, n, hd);
            CHECK_MSG(!memcmp(acc, acc2, sizeof(float) * (size_t)hd), "%s attn_accum: split at %d of %d changes sums",
                      K->name, cut, n);
            free(acc2);
            free(sc2);
        }
        memcpy(acc, acc0, sizeof(float) * (size_t)hd);
        K->attn->accum(acc, w, k, stride, n, hd);
        for (int d = 0; d < hd && !bad; d++) {
            double e = acc0[d], a = fabs(acc0[d]);
            for (int i = 0; i < n; i++) e += (double)w[i] * k[i * stride + d], a += fabs((double)w[i] * k[i * stride + d]);
            if (!(fabs(acc[d] - e) <= bound(n + 1, a))) {
                bad = 1;
                CHECK_MSG(0, "%s attn_accum hd=%d n=%d: [%d] %.9g vs %.9g", K->name, hd, n, d, acc[d], e);
            }
        }
        g_test_checks++;
    }
    free(k), free(q), free(w), free(sc), free(acc), free(acc0);
}

/* The multi-query loops (K/V sharing) against the single-query ones, bit for
 * bit, per level: nq queries (rows ldq apart) over n keys/values, outputs and
 * accumulators in rows with padding; odd hd, n and nq reach every tail. */
static void check_attention_multi(int hd, int n, int nq, int heads, int tiny) {
    size_t stride = (size_t)hd * (size_t)heads, ldq = (size_t)hd + (size_t)irand(0, 3);
    size_t ldo = (size_t)n + (size_t)irand(0, 5), lda = (size_t)hd + (size_t)irand(0, 3);
    float *k = malloc(sizeof(float) * stride * (size_t)n), *q = malloc(sizeof(float) * ldq * (size_t)nq);
    float *w = malloc(sizeof(float) * ldo * (size_t)nq), *acc0 = malloc(sizeof(float) * lda * (size_t)nq);
    float *sc = malloc(sizeof(float) * ldo * (size_t)nq), *sc1 = malloc(sizeof(float) * (size_t)n);
    float *acc = malloc(sizeof(float) * lda * (size_t)nq), *acc1 = malloc(sizeof(float) * (size_t)hd);
    /* tiny 1: products near the subnormal floor; 2: every product rounds to a zero of its query row's sign,
     * so the scores are -0 or +0 (the zeros' signs: a masked tail step adds +0 to its lanes) */
    float mag = tiny == 1 ? 0x1p-72f : tiny == 2 ? 0x1p-76f : 1.0f;
    for (size_t i = 0; i < stride * (size_t)n; i++) k[i] = tiny == 2 ? fabsf(frand()) * mag : frand() * mag;
    for (size_t r = 0; r < (size_t)nq; r++) {
        float sg = tiny == 2 && irand(0, 1) ? -1.0f : 1.0f;
        for (size_t i = 0; i < ldq; i++) q[r * ldq + i] = (tiny == 2 ? fabsf(frand()) * sg : frand()) * mag;
    }
    for (size_t i = 0; i < ldo * (size_t)nq; i++) w[i] = frand() * 0.5f + 0.5f;
    for (size_t i = 0; i < lda * (size_t)nq; i++) acc0[i] = frand();
    float scale = 1.0f / sqrtf((float)hd);
    for (int l = 0; l < g_nlevels; l++) {
        const cpu_attn_kernels *A = g_levels[l]->attn;
        const char *name = g_levels[l]->name;
        for (size_t i = 0; i < ldo * (size_t)nq; i++) sc[i] = -7.0f; /* padding must stay untouched */
        A->scores_multi(q, ldq, nq, k, stride, n, hd, scale, sc, ldo);
        memcpy(acc, acc0, sizeof(float) * lda * (size_t)nq);
        A->accum_multi(acc, lda, nq, w, ldo, k, stride, n, hd);
        for (int r = 0; r < nq; r++) {
            A->scores(q + (size_t)r * ldq, k, stride, n, hd, scale, sc1);
            CHECK_MSG(!memcmp(sc1, sc + (size_t)r * ldo, sizeof(float) * (size_t)n),
                      "%s attn scores_multi hd=%d n=%d nq=%d: query %d differs from scores", name, hd, n, nq, r);
            for (size_t i = (size_t)n; i < ldo; i++)
                CHECK_MSG(sc[(size_t)r * ldo + i] == -7.0f, "%s attn scores_multi: wrote past n", name);
            memcpy(acc1, acc0 + (size_t)r * lda, sizeof(float) * (size_t)hd);
            A->accum(acc1, w + (size_t)r * ldo, k, stride, n, hd);
            CHECK_MSG(!memcmp(acc1, acc + (size_t)r * lda, sizeof(float) * (size_t)hd),
                      "%s attn accum_multi hd=%d n=%d nq=%d: query %d differs from accum", name, hd, n, nq, r);
            for (size_t d = (size_t)hd; d < lda; d++)
                CHECK_MSG(acc[(size_t)r * lda + d] == acc0[(size_t)r * lda + d], "%s attn accum_multi: wrote past hd", name);
        }
        g_test_checks++;
    }
    free(k), free(q), free(w), free(acc0), free(sc), free(sc1), free(acc), free(acc1);
}

/* The loops over stored KV rows (f16, q8) at every level: bit for bit the
 * level's f32 loops over the dequantized rows (kvq.h: dequantization is exact),
 * single- and multi-query, split anywhere; kv[KV_F32] is the f32 entry with a
 * byte stride; and each level within a rounding bound of the scalar level. */
static void check_attention_kv(kv_dtype dt, int hd, int n, int nq, int heads) {
    if (!kvq_supported(dt, hd)) return;
    size_t rb = kvq_row_bytes(dt, hd), sb = rb * (size_t)heads, sf = (size_t)hd * (size_t)heads;
    unsigned char *kq = malloc(sb * (size_t)n + 16);
    float *kf = malloc(sizeof(float) * sf * (size_t)n), *x = malloc(sizeof(float) * (size_t)hd);
    float *q = malloc(sizeof(float) * (size_t)hd * (size_t)nq), *w = malloc(sizeof(float) * (size_t)n * (size_t)nq);
    float *acc0 = malloc(sizeof(float) * (size_t)hd * (size_t)nq);
    float *s1 = malloc(sizeof(float) * (size_t)n * (size_t)nq), *s2 = malloc(sizeof(float) * (size_t)n * (size_t)nq);
    float *s3 = malloc(sizeof(float) * (size_t)n * (size_t)nq);
    float *a1 = malloc(sizeof(float) * (size_t)hd * (size_t)nq), *a2 = malloc(sizeof(float) * (size_t)hd * (size_t)nq);
    float *a3 = malloc(sizeof(float) * (size_t)hd * (size_t)nq);
    for (int i = 0; i < n; i++)
        for (int h = 0; h < heads; h++) {
            float mag = (float)irand(1, 40) * 0.25f; /* rows of different ranges */
            for (int d = 0; d < hd; d++) x[d] = frand() * mag;
            unsigned char *row = kq + (size_t)i * sb + (size_t)h * rb;
            kvq_store_row(dt, x, hd, row);
            kvq_load_row(dt, row, hd, kf + (size_t)i * sf + (size_t)h * (size_t)hd);
        }
    for (int i = 0; i < hd * nq; i++) q[i] = frand(), acc0[i] = frand();
    for (int i = 0; i < n * nq; i++) w[i] = frand() * 0.5f + 0.5f;
    float scale = 1.0f / sqrtf((float)hd);
    int h = irand(0, heads - 1), cut = n > 1 ? irand(1, n - 1) : 1;
    const unsigned char *kh = kq + (size_t)h * rb;
    const float *fh = kf + (size_t)h * (size_t)hd;
    const cpu_attn_kv *S = &cpu_attn_scalar.kv[dt];
    for (int l = 0; l < g_nlevels; l++) {
        const cpu_attn_kernels *A = g_levels[l]->attn;
        const cpu_attn_kv *K = &A->kv[dt];
        const char *name = g_levels[l]->name;
        /* single query, and a split run */
        K->scores(q, kh, sb, n, hd, scale, s1);
        A->scores(q, fh, sf, n, hd, scale, s2);
        CHECK_MSG(!memcmp(s1, s2, sizeof(float) * (size_t)n), "%s %s scores hd=%d n=%d: differ from f32 over the dequantized rows",
                  name, kvq_name(dt), hd, n);
        A->kv[KV_F32].scores(q, fh, sf * 4, n, hd, scale, s3);
        CHECK_MSG(!memcmp(s3, s2, sizeof(float) * (size_t)n), "%s kv[f32].scores differs from scores", name);
        if (n > 1) {
            K->scores(q, kh, sb, cut, hd, scale, s3);
            K->scores(q, kh + (size_t)cut * sb, sb, n - cut, hd, scale, s3 + cut);
            CHECK_MSG(!memcmp(s1, s3, sizeof(float) * (size_t)n), "%s %s scores: split at %d of %d changes scores", name,
                      kvq_name(dt), cut, n);
        }
        S->scores(q, kh, sb, n, hd, scale, s3);
        for (int i = 0; i < n; i++) {
            double a = 0;
            for (int d = 0; d < hd; d++) a += fabs((double)q[d] * fh[(size_t)i * sf + (size_t)d]);
            CHECK_MSG(fabs(s1[i] - s3[i]) <= 2 * bound(hd + 2, a) * scale, "%s %s scores [%d]: %.9g vs scalar %.9g", name,
                      kvq_name(dt), i, s1[i], s3[i]);
        }
        memcpy(a1, acc0, sizeof(float) * (size_t)hd);
        memcpy(a2, acc0, sizeof(float) * (size_t)hd);
        K->accum(a1, w, kh, sb, n, hd);
        A->accum(a2, w, fh, sf, n, hd);
        CHECK_MSG(!memcmp(a1, a2, sizeof(float) * (size_t)hd), "%s %s accum hd=%d n=%d: differs from f32 over the dequantized rows",
                  name, kvq_name(dt), hd, n);
        if (n > 1) {
            memcpy(a3, acc0, sizeof(float) * (size_t)hd);
            K->accum(a3, w, kh, sb, cut, hd);
            K->accum(a3, w + cut, kh + (size_t)cut * sb, sb, n - cut, hd);
            CHECK_MSG(!memcmp(a1, a3, sizeof(float) * (size_t)hd), "%s %s accum: split at %d of %d changes sums", name,
                      kvq_name(dt), cut, n);
        }
        memcpy(a3, acc0, sizeof(float) * (size_t)hd);
        S->accum(a3, w, kh, sb, n, hd);
        for (int d = 0; d < hd; d++) {
            double a = fabs(acc0[d]);
            for (int i = 0; i < n; i++) a += fabs((double)w[i] * fh[(size_t)i * sf + (size_t)d]);
            CHECK_MSG(fabs(a1[d] - a3[d]) <= 2 * bound(n + 1, a), "%s %s accum [%d]: %.9g vs scalar %.9g", name,
                      kvq_name(dt), d, a1[d], a3[d]);
        }
        /* several queries */
        K->scores_multi(q, (size_t)hd, nq, kh, sb, n, hd, scale, s1, (size_t)n);
        A->scores_multi(q, (size_t)hd, nq, fh, sf, n, hd, scale, s2, (size_t)n);
        CHECK_MSG(!memcmp(s1, s2, sizeof(float) * (size_t)n * (size_t)nq), "%s %s scores_multi hd=%d n=%d nq=%d: differ from f32",
                  name, kvq_name(dt), hd, n, nq);
        memcpy(a1, acc0, sizeof(float) * (size_t)hd * (size_t)nq);
        memcpy(a2, acc0, sizeof(float) * (size_t)hd * (size_t)nq);
        K->accum_multi(a1, (size_t)hd, nq, w, (size_t)n, kh, sb, n, hd);
        A->accum_multi(a2, (size_t)hd, nq, w, (size_t)n, fh, sf, n, hd);
        CHECK_MSG(!memcmp(a1, a2, sizeof(float) * (size_t)hd * (size_t)nq), "%s %s accum_multi hd=%d n=%d nq=%d: differs from f32",
                  name, kvq_name(dt), hd, n, nq);
        g_test_checks++;
    }
    free(kq), free(kf), free(x), free(q), free(w), free(acc0), free(s1), free(s2), free(s3), free(a1), free(a2), free(a3);
}

/* The level's softmax (several queries at once, nondecreasing key counts)
 * against attn_softmax_ref compiled here with the baseline flags (what the
 * attention used before the levels had their own), bit for bit: weights, max
 * and sum; scores spread wide enough that some weights underflow to 0. */
static void check_attention_softmax(int nq, int maxn) {
    size_t lds = (size_t)maxn + (size_t)irand(0, 3), pst = (size_t)irand(2, 5);
    int *n = malloc(sizeof(int) * (size_t)nq);
    float *s0 = malloc(sizeof(float) * lds * (size_t)nq), *s = malloc(sizeof(float) * lds * (size_t)nq);
    float *ref = malloc(sizeof(float) * lds * (size_t)nq), *part = malloc(sizeof(float) * pst * (size_t)nq);
    float pref[2];
    for (int r = 0; r < nq; r++) n[r] = r ? irand(n[r - 1], maxn) : irand(1, maxn);
    int kind = irand(0, 3);
    for (size_t i = 0; i < lds * (size_t)nq; i++) {
        s0[i] = kind == 0 ? frand() * 8.0f : kind == 1 ? frand() * 120.0f : (float)irand(-3, 3); /* ties */
        if (kind == 3) { /* NaN and -inf scores (the max passes NaNs over) and ties of +0 and -0 */
            int c = irand(0, 9);
            s0[i] = c == 0 ? NAN : c == 1 ? -INFINITY : c == 2 ? -0.0f : c == 3 ? 0.0f : -fabsf(frand()) * 4.0f;
        }
    }
    if (kind == 3) /* a NaN last: a max that keeps NaNs ends on it */
        for (int r = 0; r < nq; r++)
            if (irand(0, 1)) s0[(size_t)r * lds + (size_t)n[r] - 1] = NAN;
    for (int l = 0; l < g_nlevels; l++) {
        const cpu_attn_kernels *A = g_levels[l]->attn;
        memcpy(s, s0, sizeof(float) * lds * (size_t)nq);
        A->softmax(s, lds, nq, n, part, pst);
        for (int r = 0; r < nq; r++) {
            float *rr = ref + (size_t)r * lds;
            memcpy(rr, s0 + (size_t)r * lds, sizeof(float) * lds);
            attn_softmax_ref(rr, n[r], pref);
            CHECK_MSG(!memcmp(rr, s + (size_t)r * lds, sizeof(float) * (size_t)n[r]) &&
                          !memcmp(pref, part + (size_t)r * pst, sizeof pref),
                      "%s attn softmax nq=%d query %d (n=%d): differs from the reference", g_levels[l]->name, nq, r, n[r]);
            CHECK_MSG(!memcmp(s0 + (size_t)r * lds + n[r], s + (size_t)r * lds + n[r], sizeof(float) * (lds - (size_t)n[r])),
                      "%s attn softmax: wrote past n", g_levels[l]->name);
        }
        g_test_checks++;
    }
    free(n), free(s0), free(s), free(ref), free(part);
}

/* ---------------------------------------------------- backend orchestration */

/* op_matmul with 1, 2 and 3 threads gives the same bits as the kernel run
 * over all rows at once, for every level. */
static void check_backend(void) {
    int64_t rows = 45, cols = 96 * 3;
    int T = 7;
    size_t rb = quant_row_bytes(XLLM_DT_Q4, 32, cols);
    unsigned char *w = mem_malloc_aligned(rb * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) rand_qrow(XLLM_DT_Q4, 32, cols, w + (size_t)r * rb);
    matrix Wq = {XLLM_DT_Q4, 32, rows, cols, w, {0}, {0}, 0};
    float *wf = malloc(sizeof(float) * (size_t)(rows * cols));
    for (int64_t i = 0; i < rows * cols; i++) wf[i] = frand();
    matrix Wf = {XLLM_DT_F32, 0, rows, cols, wf, {0}, {0}, 0};
    float *x = malloc(sizeof(float) * (size_t)(cols * T));
    fill_act(x, cols * T);
    float *y0 = malloc(sizeof(float) * (size_t)(rows * T)), *y1 = malloc(sizeof(float) * (size_t)(rows * T));
    for (int l = 0; l < g_nlevels; l++) {
        const cpu_kernels *k = g_levels[l];
        for (int m = 0; m < 2; m++) {
            const matrix *W = m ? &Wf : &Wq;
            if (m) {
                void *scr = mem_malloc_aligned(k->scratch_bytes(cols));
                k->matmul_f(W, x, T, NULL, y0, (size_t)rows, 0, rows, scr);
                mem_free_aligned(scr);
            } else {
                run_q(k, W, x, T, NULL, y0, 0, rows);
            }
            for (int nt = 1; nt <= 3; nt++) {
                cpu_backend be;
                xllm_error err;
                CHECK(backend_init_kernels(&be, nt, (size_t)cols, (size_t)T, k, &err) == XLLM_OK);
                CHECK(!strcmp(backend_level_name(&be), k->name));
                op_matmul(&be, x, T, W, NULL, y1);
                CHECK_MSG(!memcmp(y0, y1, sizeof(float) * (size_t)(rows * T)), "%s: op_matmul with %d threads differs",
                          k->name, nt);
                backend_free(&be);
            }
        }
    }
    mem_free_aligned(w);
    free(wf), free(x), free(y0), free(y1);
}

static void check_env(void) {
    cpu_level l;
    xllm_error err;
    CHECK(cpu_level_from_env(NULL, &l, &err) == XLLM_OK && l == cpu_level_best());
    CHECK(cpu_level_from_env("scalar", &l, &err) == XLLM_OK && l == CPU_SCALAR);
    CHECK(cpu_level_from_env("bogus", &l, &err) == XLLM_ERR_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "XLLM_CPU=bogus") != NULL);
#if defined(__x86_64__)
    CHECK(cpu_level_from_env("neon", &l, &err) == XLLM_ERR_UNSUPPORTED);
    CHECK(strstr(err.message, "neon") != NULL && strstr(err.message, "available") != NULL);
#else
    CHECK(cpu_level_from_env("avx512", &l, &err) == XLLM_ERR_UNSUPPORTED);
#endif
    for (int i = 0; i < CPU_LEVEL_COUNT; i++)
        if (cpu_level_supported((cpu_level)i)) CHECK(cpu_kernels_for((cpu_level)i) != NULL);
#if defined(__aarch64__)
    cpu_features f;
    cpu_features_detect(&f);
    CHECK(cpu_level_best() == CPU_NEON);
    CHECK(!strcmp(cpu_kernels_for(CPU_NEON)->name, f.dotprod ? "neon+dotprod" : "neon"));
#endif
}

int main(int argc, char **argv) {
    /* XLLM_TEST_QUICK (or --quick): fewer shapes, for emulated runs */
    int quick = (argc > 1 && !strcmp(argv[1], "--quick")) || getenv("XLLM_TEST_QUICK");
    g_nlevels = cpu_kernels_all(g_levels, 8);
    cpu_features f;
    cpu_features_detect(&f);
    fprintf(stderr, "test_kernels: levels");
    for (int i = 0; i < g_nlevels; i++) fprintf(stderr, " %s", g_levels[i]->name);
    fprintf(stderr, " (best: %s)\n", cpu_level_name(cpu_level_best()));
    check_env();
    for (int i = 0; i < g_nlevels; i++) check_quant_act(g_levels[i]);
    for (int i = 0; i < g_nlevels; i++) check_quant_act_nonfinite(g_levels[i]);

    static const int Ts[] = {1, 2, 3, 5, 17};
    static const dtype_t qt[] = {XLLM_DT_Q8, XLLM_DT_Q4, XLLM_DT_Q4M};
    static const int groups[] = {32, 64, 128};
    for (int ti = 0; ti < 3; ti++)
        for (int gi = 0; gi < 3; gi++)
            for (int k = 0; k < 5; k++) {
                int T = Ts[k];
                int64_t rows = irand(1, quick ? 13 : 23);
                int64_t cols = (int64_t)groups[gi] * irand(1, 4096 / groups[gi] / (k == 4 ? 8 : 1));
                check_qmatmul(qt[ti], groups[gi], rows, cols, T);
            }
    /* the model-like widths, tails of every size */
    for (int i = 0; i < (quick ? 3 : 8); i++) check_qmatmul(XLLM_DT_Q4, 32, irand(1, 9), 32 * irand(1, 9), irand(1, 6));
    check_qmatmul(XLLM_DT_Q4, 32, 9, 4096, 3);
    check_qmatmul(XLLM_DT_Q8, 32, 5, 4096, 2);

    static const dtype_t ft[] = {XLLM_DT_F32, XLLM_DT_F16, XLLM_DT_BF16};
    for (int ti = 0; ti < 3; ti++)
        for (int k = 0; k < 5; k++) {
            int64_t cols = k == 0 ? irand(1, 40) : irand(1, 4096 / (k == 4 ? 8 : 1));
            check_fmatmul(ft[ti], irand(1, quick ? 11 : 19), cols, Ts[k]);
        }
    check_fmatmul(XLLM_DT_F32, 6, 4096, 2);

    static const int hds[] = {32, 64, 80, 96, 128, 256, 17};
    for (size_t i = 0; i < sizeof hds / sizeof *hds; i++) check_attention(hds[i], irand(1, 200), irand(1, 4));
    for (size_t i = 0; i < sizeof hds / sizeof *hds; i++) check_attention_multi(hds[i], irand(1, 140), irand(1, 11), irand(1, 4), 0);
    for (int i = 0; i < (quick ? 12 : 40); i++) check_attention_multi(irand(1, 140), irand(1, 140), irand(1, 13), irand(1, 3), 0);
    /* many queries (a GQA group's tile: the avx512 level's keys-in-lanes path), runs of 16 keys and others */
    static const int mhds[] = {64, 128, 80, 72, 256, 17, 8, 300};
    for (size_t i = 0; i < sizeof mhds / sizeof *mhds; i++)
        for (int tiny = 0; tiny < 3; tiny++) {
            check_attention_multi(mhds[i], 16, irand(16, 70), irand(1, 2), tiny);
            check_attention_multi(mhds[i], irand(1, 70), irand(8, 70), irand(1, 2), tiny);
        }
    for (int i = 0; i < (quick ? 12 : 40); i++) check_attention_softmax(irand(1, 11), irand(1, 130));
    static const int kv_hds[] = {8, 16, 24, 32, 64, 128, 80, 12, 20, 36};
    for (int dt = KV_F16; dt <= KV_Q8; dt++)
        for (size_t i = 0; i < sizeof kv_hds / sizeof *kv_hds; i++)
            check_attention_kv((kv_dtype)dt, kv_hds[i], irand(1, 150), irand(1, 11), irand(1, 4)),
                check_attention_kv((kv_dtype)dt, kv_hds[i], irand(1, 40), irand(16, 40), irand(1, 2));
    check_backend();
    return test_report("test_kernels");
}
