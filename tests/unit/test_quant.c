/*
 * test_quant.c - block formats and their reference kernels.
 *  - q8 quantize -> dequantize within half a step, all shapes;
 *  - quant_dot (int8 activations x quantized weights) equals the float dot of
 *    the dequantized weights and dequantized activations (to rounding);
 *  - group-32 layouts are byte-exact GGUF Q8_0 / Q4_0 / Q4_1 blocks;
 *  - 4-bit scale search never does worse than round-to-nearest (weighted or not);
 *  - GPTQ gives a lower output error than per-weight quantization on correlated inputs.
 */
#include "test.h"
#include "quant/quant.h"
#include "convert/gptq.h"
#include "base/alloc.h"
#include "xllm.h"

#include <stdlib.h>
#include <string.h>

static unsigned g_seed = 7;
static float frand(void) {
    g_seed = g_seed * 1664525u + 1013904223u;
    return ((g_seed >> 8) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

/* Plain round-to-nearest reference: Q4 d = signed absmax / -8, Q4M over
 * [min, max]; (importance-weighted) squared error, scales rounded to f16. */
static double rtn_error(dtype_t t, int group, const float *x, int64_t cols, const float *imp) {
    double e = 0;
    for (int64_t g = 0; g < cols / group; g++) {
        const float *xg = x + g * group;
        float amax = 0, vmax = 0, lo = xg[0], hi = xg[0];
        for (int i = 0; i < group; i++) {
            if (fabsf(xg[i]) > amax) amax = fabsf(xg[i]), vmax = xg[i];
            lo = fminf(lo, xg[i]);
            hi = fmaxf(hi, xg[i]);
        }
        float d = t == XLLM_DT_Q4 ? vmax / -8 : (hi - lo) / 15, m = t == XLLM_DT_Q4 ? 0 : lo;
        d = f16_to_f32(f32_to_f16(d));
        m = f16_to_f32(f32_to_f16(m));
        for (int i = 0; i < group; i++) {
            float v = quant_value(t, quant_level(t, xg[i], d, m), d, m);
            e += (imp ? imp[g * group + i] : 1.0) * (double)(xg[i] - v) * (xg[i] - v);
        }
    }
    return e;
}

/* GPTQ lowers the OUTPUT error on correlated inputs compared with quantizing
 * each weight alone (activation-weighted clip search included). */
static void check_gptq(dtype_t t, int64_t rows, int64_t cols, int64_t n) {
    float *W = malloc(sizeof(float) * rows * cols), *W2 = malloc(sizeof(float) * rows * cols);
    float *X = malloc(sizeof(float) * n * cols), *deq = malloc(sizeof(float) * cols), *imp = malloc(sizeof(float) * cols);
    double *H = calloc((size_t)(cols * cols), sizeof(double));
    for (int64_t i = 0; i < rows * cols; i++) W[i] = W2[i] = frand();
    for (int64_t s = 0; s < n; s++) { /* correlated features with uneven scales */
        float base = frand();
        for (int64_t c = 0; c < cols; c++) X[s * cols + c] = (0.7f * base + 0.3f * frand()) * (1.0f + (float)(c % 5));
    }
    for (int64_t s = 0; s < n; s++)
        for (int64_t a = 0; a < cols; a++)
            for (int64_t b = 0; b < cols; b++) H[a * cols + b] += (double)X[s * cols + a] * X[s * cols + b] / (double)n;
    for (int64_t c = 0; c < cols; c++) imp[c] = (float)H[c * cols + c];
    size_t rb = quant_row_bytes(t, 32, cols);
    char *qg = malloc(rb * rows), *qp = malloc(rb * rows);
    xllm_error err;
    CHECK(gptq_quantize(t, 32, W2, rows, cols, H, qg, &err) == XLLM_OK);
    for (int64_t r = 0; r < rows; r++) quant_quantize_row(t, 32, W + r * cols, cols, imp, qp + r * rb);
    double e_gptq = 0, e_plain = 0;
    float *dg = malloc(sizeof(float) * rows * cols), *dp = malloc(sizeof(float) * rows * cols);
    for (int64_t r = 0; r < rows; r++) {
        quant_dequantize_row(t, 32, qg + r * rb, cols, dg + r * cols);
        quant_dequantize_row(t, 32, qp + r * rb, cols, dp + r * cols);
    }
    for (int64_t s = 0; s < n; s++)
        for (int64_t r = 0; r < rows; r++) {
            double ref = 0, a = 0, b = 0;
            for (int64_t c = 0; c < cols; c++) {
                ref += (double)X[s * cols + c] * W[r * cols + c];
                a += (double)X[s * cols + c] * dg[r * cols + c];
                b += (double)X[s * cols + c] * dp[r * cols + c];
            }
            e_gptq += (a - ref) * (a - ref);
            e_plain += (b - ref) * (b - ref);
        }
    CHECK_MSG(e_gptq < 0.8 * e_plain, "%s: GPTQ output error %g not below plain %g", dtype_name(t), e_gptq, e_plain);
    fprintf(stderr, "%s GPTQ output error / weighted-clip error = %.3f\n", dtype_name(t), e_gptq / e_plain);
    free(W); free(W2); free(X); free(deq); free(imp); free(H); free(qg); free(qp); free(dg); free(dp);
}

static void check_format(dtype_t t, int group, int64_t cols) {
    float *x = malloc(sizeof(float) * cols), *y = malloc(sizeof(float) * cols), *a = malloc(sizeof(float) * cols);
    for (int64_t i = 0; i < cols; i++) x[i] = frand() * (i % 7 == 0 ? 3.0f : 1.0f), a[i] = frand();
    size_t rb = quant_row_bytes(t, group, cols);
    void *q = malloc(rb);
    quant_quantize_row(t, group, x, cols, NULL, q);
    quant_dequantize_row(t, group, q, cols, y);
    if (t == XLLM_DT_Q8) {
        /* q8 rounds to nearest: within half a step of the group's scale */
        int ok = 1;
        for (int64_t g = 0; g < cols / group; g++) {
            float amax = 0;
            for (int i = 0; i < group; i++) amax = fmaxf(amax, fabsf(x[g * group + i]));
            for (int i = 0; i < group; i++)
                if (fabsf(x[g * group + i] - y[g * group + i]) > 0.5f * amax / 127 * 1.01f + 1e-6f) ok = 0;
        }
        CHECK_MSG(ok, "Q8 cols %lld: error above half a step", (long long)cols);
    } else {
        /* 4-bit: the searched scales never do worse than plain round-to-nearest */
        double e_search = 0, e_rtn = rtn_error(t, group, x, cols, NULL);
        for (int64_t i = 0; i < cols; i++) e_search += (double)(x[i] - y[i]) * (x[i] - y[i]);
        CHECK_MSG(e_search <= e_rtn * 1.001, "%s g%d cols %lld: search error %g > round-to-nearest %g", dtype_name(t),
                  group, (long long)cols, e_search, e_rtn);
    }

    /* integer dot == float dot of the dequantized operands */
    int8_t *qa = malloc((size_t)cols);
    float *da = malloc(sizeof(float) * cols / QK);
    int32_t *sa = malloc(sizeof(int32_t) * cols / QK);
    float *dsa = malloc(sizeof(float) * cols / QK);
    quant_activations(a, cols, qa, da, sa, dsa, 0);
    double ref = 0, ref_true = 0;
    for (int64_t i = 0; i < cols; i++) {
        ref += (double)y[i] * (qa[i] * da[i / QK]);
        ref_true += (double)x[i] * a[i];
    }
    float got = quant_dot(t, group, q, qa, da, sa, dsa, cols);
    CHECK_MSG(fabs(got - ref) <= 1e-4 * (1 + fabs(ref)) + 1e-3, "%s g%d: dot %g vs %g", dtype_name(t), group, got, ref);
    /* and close to the unquantized dot */
    double tol = t == XLLM_DT_Q8 ? 0.02 : 0.15;
    CHECK_MSG(fabs(got - ref_true) <= tol * sqrt((double)cols), "%s g%d: dot %g far from true %g", dtype_name(t), group,
              got, ref_true);

    /* with importance, the weighted error is no worse than weighted round-to-nearest */
    float *imp = malloc(sizeof(float) * cols), *y2 = malloc(sizeof(float) * cols);
    for (int64_t i = 0; i < cols; i++) imp[i] = 0.1f + fabsf(frand());
    void *q2 = malloc(rb);
    quant_quantize_row(t, group, x, cols, imp, q2);
    quant_dequantize_row(t, group, q2, cols, y2);
    double e1 = t == XLLM_DT_Q8 ? 0 : rtn_error(t, group, x, cols, imp), e2 = 0;
    for (int64_t i = 0; i < cols; i++) {
        if (t == XLLM_DT_Q8) e1 += imp[i] * (x[i] - y[i]) * (x[i] - y[i]);
        e2 += imp[i] * (x[i] - y2[i]) * (x[i] - y2[i]);
    }
    CHECK_MSG(e2 <= e1 * 1.001, "%s g%d: weighted error %g > round-to-nearest %g", dtype_name(t), group, e2, e1);
    free(x); free(y); free(a); free(q); free(qa); free(da); free(sa); free(dsa); free(imp); free(y2); free(q2);
}

int main(void) {
    size_t before = xllm_allocated_bytes();
    int64_t cols_list[] = {32, 64, 128, 256, 384, 1024, 2048 + 128};
    for (size_t k = 0; k < sizeof cols_list / sizeof *cols_list; k++) {
        int64_t cols = cols_list[k];
        check_format(XLLM_DT_Q8, 32, cols);
        for (int g = 32; g <= 128; g *= 2) {
            if (cols % g) continue;
            check_format(XLLM_DT_Q4, g, cols);
            check_format(XLLM_DT_Q4M, g, cols);
        }
    }
    check_gptq(XLLM_DT_Q4, 24, 128, 400);
    check_gptq(XLLM_DT_Q4M, 24, 128, 400);
    /* sizes = GGUF block sizes at group 32 */
    CHECK(quant_block_bytes(XLLM_DT_Q8, 32) == 34);
    CHECK(quant_block_bytes(XLLM_DT_Q4, 32) == 18);
    CHECK(quant_block_bytes(XLLM_DT_Q4M, 32) == 20);
    CHECK(!quant_format_ok(XLLM_DT_Q4, 64, 96));
    CHECK(!quant_format_ok(XLLM_DT_Q4, 48, 96));
    CHECK(quant_format_ok(XLLM_DT_Q4, 32, 96));

    /* a hand-made Q4_0 block: d = 0.5 (f16 0x3800), bytes 0x98 => elem j = 8 - 8 = 0 (low), 9 - 8 = 1 (high) */
    unsigned char blk[18];
    blk[0] = 0x00;
    blk[1] = 0x38;
    for (int j = 0; j < 16; j++) blk[2 + j] = (unsigned char)(0x98);
    float out[32];
    quant_dequantize_row(XLLM_DT_Q4, 32, blk, 32, out);
    CHECK(out[0] == 0.0f && out[15] == 0.0f && out[16] == 0.5f && out[31] == 0.5f);
    /* Q8_0: d = 1.0 (0x3c00), q = -3 */
    unsigned char b8[34] = {0x00, 0x3c};
    for (int j = 0; j < 32; j++) b8[2 + j] = (unsigned char)(int8_t)-3;
    quant_dequantize_row(XLLM_DT_Q8, 32, b8, 32, out);
    CHECK(out[0] == -3.0f && out[31] == -3.0f);
    CHECK(xllm_allocated_bytes() == before);
    return test_report("test_quant");
}
