/*
 * test_quant.c - block formats and their reference kernels.
 *  - quantize -> dequantize error within each format's bound, all groups;
 *  - quant_dot (int8 activations x quantized weights) equals the float dot of
 *    the dequantized weights and dequantized activations (to rounding);
 *  - group-32 layouts are byte-exact GGUF Q8_0 / Q4_0 / Q4_1 blocks;
 *  - clip search with importance never increases the weighted error.
 */
#include "test.h"
#include "quant/quant.h"
#include "base/alloc.h"
#include "xllm.h"

#include <stdlib.h>
#include <string.h>

static unsigned g_seed = 7;
static float frand(void) {
    g_seed = g_seed * 1664525u + 1013904223u;
    return ((g_seed >> 8) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static void check_format(xllm_dtype t, int group, int64_t cols) {
    float *x = malloc(sizeof(float) * cols), *y = malloc(sizeof(float) * cols), *a = malloc(sizeof(float) * cols);
    for (int64_t i = 0; i < cols; i++) x[i] = frand() * (i % 7 == 0 ? 3.0f : 1.0f), a[i] = frand();
    size_t rb = quant_row_bytes(t, group, cols);
    void *q = malloc(rb);
    quant_quantize_row(t, group, x, cols, NULL, q);
    quant_dequantize_row(t, group, q, cols, y);
    /* error bound: half a step of the group's scale (plus f16 rounding of the scale) */
    int ok = 1;
    for (int64_t g = 0; g < cols / group; g++) {
        float lo = x[g * group], hi = lo, amax = 0;
        for (int i = 0; i < group; i++) {
            float v = x[g * group + i];
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
            amax = fabsf(v) > amax ? fabsf(v) : amax;
        }
        float step = t == XLLM_DT_Q8 ? amax / 127 : t == XLLM_DT_Q4 ? amax / 8 : (hi - lo) / 15;
        /* Q4 (levels -8..7, the largest magnitude at -8): values of the other sign near
         * the extreme clamp at 7, a full step away; everything else within half a step */
        float bound = (t == XLLM_DT_Q4 ? 1.0f : 0.5f) * step * 1.01f + 1e-3f * amax;
        for (int i = 0; i < group; i++)
            if (fabsf(x[g * group + i] - y[g * group + i]) > bound) ok = 0;
    }
    CHECK_MSG(ok, "%s group %d cols %lld: dequantization error above half a step", xllm_dtype_name(t), group, (long long)cols);

    /* integer dot == float dot of the dequantized operands */
    int8_t *qa = malloc((size_t)cols);
    float *da = malloc(sizeof(float) * cols / QK);
    int32_t *sa = malloc(sizeof(int32_t) * cols / QK);
    quant_activations(a, cols, qa, da, sa);
    double ref = 0, ref_true = 0;
    for (int64_t i = 0; i < cols; i++) {
        ref += (double)y[i] * (qa[i] * da[i / QK]);
        ref_true += (double)x[i] * a[i];
    }
    float got = quant_dot(t, group, q, qa, da, sa, cols);
    CHECK_MSG(fabs(got - ref) <= 1e-4 * (1 + fabs(ref)) + 1e-3, "%s g%d: dot %g vs %g", xllm_dtype_name(t), group, got, ref);
    /* and close to the unquantized dot */
    double tol = t == XLLM_DT_Q8 ? 0.02 : 0.15;
    CHECK_MSG(fabs(got - ref_true) <= tol * sqrt((double)cols), "%s g%d: dot %g far from true %g", xllm_dtype_name(t), group,
              got, ref_true);

    /* clip search with importance never does worse on the weighted error */
    float *imp = malloc(sizeof(float) * cols), *y2 = malloc(sizeof(float) * cols);
    for (int64_t i = 0; i < cols; i++) imp[i] = 0.1f + fabsf(frand());
    void *q2 = malloc(rb);
    quant_quantize_row(t, group, x, cols, imp, q2);
    quant_dequantize_row(t, group, q2, cols, y2);
    double e1 = 0, e2 = 0;
    for (int64_t i = 0; i < cols; i++) {
        e1 += imp[i] * (x[i] - y[i]) * (x[i] - y[i]);
        e2 += imp[i] * (x[i] - y2[i]) * (x[i] - y2[i]);
    }
    CHECK_MSG(e2 <= e1 * (1 + 1e-6), "%s g%d: clipped error %g > plain %g", xllm_dtype_name(t), group, e2, e1);
    free(x); free(y); free(a); free(q); free(qa); free(da); free(sa); free(imp); free(y2); free(q2);
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
