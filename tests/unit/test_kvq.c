/*
 * test_kvq.c - the KV cache's storage formats (src/quant/kvq.h): sizes, the
 * quantize / dequantize round trip against the format's own bound (q8: half a
 * step of the group's f16 scale; f16: half an ulp of a half), the exactness
 * the attention kernels rely on (kvq_get is the value; f16 rows store back to
 * the same bytes), and bad values (zeros, inf, NaN, huge).
 */
#include "test.h"
#include "quant/kvq.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint32_t g_seed = 12345;
static float frand(void) {
    g_seed = g_seed * 1664525u + 1013904223u;
    return (float)(g_seed >> 8) / 16777216.0f * 2.0f - 1.0f;
}

static void check_sizes(void) {
    /* 0.27x of f32 or less at the usual head sizes */
    int hds[] = {64, 128, 256, 96};
    for (size_t i = 0; i < sizeof hds / sizeof *hds; i++) {
        double r = (double)kvq_row_bytes(KV_Q8, hds[i]) / (double)kvq_row_bytes(KV_F32, hds[i]);
        CHECK_MSG(r <= 0.27, "q8 row of %d: %.4f of f32", hds[i], r);
        CHECK(kvq_row_bytes(KV_F16, hds[i]) * 2 == kvq_row_bytes(KV_F32, hds[i]));
    }
    /* the largest of 32, 16, 8, 4 dividing head_dim with two scales per row at least */
    CHECK(kvq_group(64) == 32 && kvq_group(128) == 32 && kvq_group(48) == 16 && kvq_group(32) == 16);
    CHECK(kvq_group(8) == 4 && kvq_group(16) == 8 && kvq_group(24) == 8 && kvq_group(40) == 8 && kvq_group(80) == 16);
    CHECK(kvq_group(12) == 4 && kvq_group(20) == 4 && kvq_group(36) == 4 && kvq_group(0) == 0);
    CHECK(kvq_group(4) == 0 && kvq_group(10) == 0 && kvq_group(6) == 0); /* one scale a row, or no group */
    CHECK(kvq_row_bytes(KV_Q8, 20) == 30);
    CHECK(kvq_row_bytes(KV_Q8, 8) == 12 && kvq_row_bytes(KV_Q8, 64) == 68);
    CHECK(!kvq_supported(KV_Q8, 10) && kvq_supported(KV_Q8, 12) && kvq_supported(KV_F16, 10) &&
          kvq_supported(KV_F32, 7));
    kv_dtype dt = KV_F32;
    int au = 0;
    CHECK(!kvq_parse(NULL, &dt, &au) && dt == KV_F32 && !au);
    CHECK(!kvq_parse("q8", &dt, &au) && dt == KV_Q8 && !au);
    CHECK(!kvq_parse("f16", &dt, &au) && dt == KV_F16);
    CHECK(!kvq_parse("auto", &dt, &au) && au);
    CHECK(kvq_parse("int8", &dt, &au) == -1 && kvq_parse("Q8", &dt, &au) == -1);
    CHECK(!strcmp(kvq_name(KV_Q8), "q8") && !strcmp(kvq_name(KV_F16), "f16") && !strcmp(kvq_name(KV_F32), "f32"));
}

static void check_round_trip(kv_dtype dt, int hd) {
    float *x = malloc(sizeof(float) * (size_t)hd), *y = malloc(sizeof(float) * (size_t)hd);
    unsigned char *row = malloc(kvq_row_bytes(dt, hd)), *row2 = malloc(kvq_row_bytes(dt, hd));
    for (int rep = 0; rep < 50; rep++) {
        float mag = rep % 5 == 0 ? 1e-3f : rep % 5 == 1 ? 300.0f : 1.0f + (float)rep;
        for (int i = 0; i < hd; i++) x[i] = frand() * mag;
        if (rep == 7) x[hd / 2] = 0; /* a zero among others */
        kvq_store_row(dt, x, hd, row);
        kvq_load_row(dt, row, hd, y);
        int G = dt == KV_Q8 ? kvq_group(hd) : 1;
        for (int g = 0; g < hd / G; g++) {
            float amax = 0;
            for (int i = g * G; i < (g + 1) * G; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
            /* q8: half a step of the stored scale df (amax/127 rounded to f16), or what clamping to
             * 127 leaves when df rounded down; f16: half an ulp of a half (2^-11 relative, 2^-25
             * absolute for subnormals) */
            double df = f16_to_f32(f32_to_f16(amax / 127.0f));
            double qtol = fmax(0.5 * df, (double)amax - 127.0 * df) * (1.0 + 1e-5) + 1e-12;
            for (int i = g * G; i < (g + 1) * G; i++) {
                double err = fabs((double)y[i] - (double)x[i]);
                double tol = dt == KV_Q8 ? qtol : fabs((double)x[i]) * (1.0 / 2048) + 3e-8;
                CHECK_MSG(err <= tol, "%s hd=%d [%d]: %.9g stored as %.9g (tolerance %.3g)", kvq_name(dt), hd, i, x[i],
                          y[i], tol);
                CHECK(kvq_get(dt, row, hd, i) == y[i]);
            }
        }
        /* f16 / f32: what loads back stores to the same bytes (the value is exact) */
        if (dt != KV_Q8) kvq_store_row(dt, y, hd, row2);
        else memcpy(row2, row, kvq_row_bytes(dt, hd)); /* q8 may pick another scale for its own output */
        CHECK_MSG(!memcmp(row, row2, kvq_row_bytes(dt, hd)), "%s hd=%d: a loaded row does not store back to itself",
                  kvq_name(dt), hd);
    }
    /* a zero group stores zeros; a group with NaN or inf reads back NaN (only that group) */
    if (dt == KV_Q8) {
        int G = kvq_group(hd);
        for (int i = 0; i < hd; i++) x[i] = i < G ? 0.0f : frand();
        x[hd - 1] = NAN;
        kvq_store_row(dt, x, hd, row);
        kvq_load_row(dt, row, hd, y);
        if (hd / G >= 2)
            for (int i = 0; i < G; i++) CHECK(y[i] == 0.0f && !signbit(y[i]));
        CHECK(isnan(y[hd - 1]));
        if (hd / G > 2) CHECK(!isnan(y[G]));
        x[hd - 1] = INFINITY;
        kvq_store_row(dt, x, hd, row);
        CHECK(isnan(kvq_get(dt, row, hd, hd - 1)));
        /* huge values: the scale saturates at the largest half; no overflow to inf */
        for (int i = 0; i < hd; i++) x[i] = 1e30f;
        kvq_store_row(dt, x, hd, row);
        CHECK(isfinite(kvq_get(dt, row, hd, 0)) && kvq_get(dt, row, hd, 0) > 8e6f);
    }
    free(x), free(y), free(row), free(row2);
}

int main(void) {
    check_sizes();
    int hds[] = {8, 16, 24, 32, 64, 128, 80};
    for (size_t i = 0; i < sizeof hds / sizeof *hds; i++) {
        check_round_trip(KV_Q8, hds[i]);
        check_round_trip(KV_F16, hds[i]);
        check_round_trip(KV_F32, hds[i]);
    }
    check_round_trip(KV_F16, 7);
    return test_report("test_kvq");
}
