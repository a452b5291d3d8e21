/*
 * test_kq_kernels.c - every kernel level's matmul_kq (kq_kernels_*.c: avx2,
 * avx512, neon, neon+dotprod) on random blocks of every llama.cpp type
 * (quant/kquant.h) against the reference kq_matmul_ref: within float
 * rounding (1e-5 of the outputs' RMS), bit-identical whatever the batch size
 * T, the token's position in the batch and the row range (the GEMV/GEMM
 * determinism guarantee of kernels.h); the NEON variants equal the
 * reference bit for bit (same float sequence, kq_kernels_neon_impl.h) and so
 * each other. Where a level packs a type (x86 KR16 / P32 / Q23, NEON P32),
 * the packed matrix gives the stored layout's bits. Needs only the CPU backend and quant code, so tests/arm/run.sh
 * runs it under qemu too.
 */
#include "test.h"
#include "backend/cpu/kernels.h"
#include "quant/kquant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { TMAX_ALL = 19 };

static uint32_t rng = 12345;
static uint32_t rnd(void) {
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}

static void put16(uint8_t *p, float f) {
    uint16_t h = f32_to_f16(f);
    memcpy(p, &h, 2);
}

/* Random weights with sane f16 scales (as test_dot_random). */
static uint8_t *random_rows(dtype_t t, int64_t rows, int64_t cols) {
    int n = kq_block_elems(t);
    size_t bb = kq_block_bytes(t), nbk = (size_t)(rows * cols / n);
    uint8_t *w = malloc(nbk * bb);
    for (size_t i = 0; i < nbk * bb; i++) w[i] = (uint8_t)rnd();
    for (size_t b = 0; b < nbk; b++) {
        uint8_t *p = w + b * bb;
        float d = 0.001f * (float)(1 + rnd() % 50), m = 0.0005f * (float)(1 + rnd() % 50);
        switch (t) {
        case XLLM_DT_Q5_0: case XLLM_DT_IQ4_NL: case XLLM_DT_IQ4_XS: put16(p, d); break;
        case XLLM_DT_Q5_1: case XLLM_DT_Q4_K: case XLLM_DT_Q5_K: put16(p, d), put16(p + 2, m); break;
        case XLLM_DT_Q2_K: put16(p + 80, d), put16(p + 82, m); break;
        case XLLM_DT_Q3_K: put16(p + 108, d); break;
        case XLLM_DT_Q6_K: put16(p + 208, d); break;
        default: break;
        }
    }
    return w;
}

static int packed_checked;
static void test_levels(void) {
    const cpu_kernels *ks[8];
    int nk = cpu_kernels_all(ks, 8);
    const dtype_t types[] = {XLLM_DT_Q4_K, XLLM_DT_Q6_K, XLLM_DT_Q5_K, XLLM_DT_Q3_K, XLLM_DT_Q2_K,
                                XLLM_DT_IQ4_XS, XLLM_DT_Q5_0, XLLM_DT_Q5_1, XLLM_DT_IQ4_NL};
    const int64_t rows = 13, cols = 768;
    enum { TMAX = TMAX_ALL };
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        dtype_t t = types[ti];
        uint8_t *w = random_rows(t, rows, cols);
        int kind = kq_act_kind(t);
        size_t as = kq_act_bytes(kind, cols);
        uint8_t *act = malloc(as * TMAX);
        float x[768], bias[13];
        for (int tk = 0; tk < TMAX; tk++) {
            for (int i = 0; i < cols; i++) x[i] = (float)((int)(rnd() % 2001) - 1000) / 300.0f;
            kq_act_prepare(kind, x, cols, act + (size_t)tk * as);
        }
        for (int r = 0; r < rows; r++) bias[r] = 0.01f * (float)r;
        matrix W;
        memset(&W, 0, sizeof W);
        W.dtype = t, W.group = kq_block_elems(t), W.rows = rows, W.cols = cols, W.data = w;
        float ref[TMAX][13], all[TMAX][13], one[13], part[TMAX][13];
        kq_matmul_ref(t, w, cols, act, as, TMAX, bias, &ref[0][0], 13, 0, rows);
        for (int k = 0; k < nk; k++) {
            if (!ks[k]->matmul_kq) continue;
            void *scr = malloc(ks[k]->scratch_bytes(cols)); /* the kernels' per-thread scratch */
            ks[k]->matmul_kq(&W, act, as, TMAX, bias, &all[0][0], 13, 0, rows, scr);
            double worst = 0, rms = 0;
            int same = 1;
            for (int tk = 0; tk < TMAX; tk++)
                for (int r = 0; r < rows; r++) rms += (double)ref[tk][r] * ref[tk][r] / (TMAX * rows);
            rms = sqrt(rms);
            for (int tk = 0; tk < TMAX; tk++) {
                /* alone (GEMV), at its place in the batch */
                ks[k]->matmul_kq(&W, act + (size_t)tk * as, as, 1, bias, one, 13, 0, rows, scr);
                for (int r = 0; r < rows; r++) {
                    same &= memcmp(&one[r], &all[tk][r], 4) == 0;
                    worst = fmax(worst, fabs(all[tk][r] - ref[tk][r]) / rms);
                }
            }
            /* rows in uneven ranges, tokens from an odd start */
            ks[k]->matmul_kq(&W, act + 3 * as, as, TMAX - 3, bias, &part[3][0], 13, 0, 5, scr);
            ks[k]->matmul_kq(&W, act + 3 * as, as, TMAX - 3, bias, &part[3][0], 13, 5, rows, scr);
            for (int tk = 3; tk < TMAX; tk++) same &= memcmp(part[tk], all[tk], sizeof part[tk]) == 0;
            CHECK_MSG(same, "%s %s: results depend on T, position or row range", ks[k]->name, dtype_name(t));
            /* float rounding only: within 1e-5 of the outputs' RMS */
            CHECK_MSG(worst < 1e-5, "%s %s: %.3g x RMS off the reference", ks[k]->name, dtype_name(t), worst);
            if (!strncmp(ks[k]->name, "neon", 4))
                CHECK_MSG(!memcmp(all, ref, sizeof all), "%s %s: not the reference's bits", ks[k]->name,
                          dtype_name(t));
            /* the level's packed layout, where it packs this type: the stored layout's bits */
            size_t pb = ks[k]->packed_bytes && ks[k]->repack ? ks[k]->packed_bytes(&W) : 0;
            if (pb) {
                matrix P = W;
                void *pd = malloc(pb);
                ks[k]->repack(&W, 0, (rows + 3) / 4, pd);
                P.data = pd, P.packed = 1;
                float pk[TMAX][13], p1[13];
                ks[k]->matmul_kq(&P, act, as, TMAX, bias, &pk[0][0], 13, 0, rows, scr);
                ks[k]->matmul_kq(&P, act + 5 * as, as, 1, bias, p1, 13, 0, rows, scr);
                CHECK_MSG(!memcmp(pk, all, sizeof pk) && !memcmp(p1, all[5], sizeof p1), "%s %s: packed != stored",
                          ks[k]->name, dtype_name(t));
                packed_checked++;
                free(pd);
            }
            free(scr);
        }
        free(act);
        free(w);
    }
}

/* Each level's kq_act gives kq_act_prepare's bytes: random blocks, blocks
 * whose largest magnitude comes twice with both signs (the first decides
 * Q8K's sign), products on a rounding tie, zeros and -0, subnormals, and
 * blocks holding inf or NaN. */
static int act_checked;
static void test_act_levels(void) {
    const cpu_kernels *ks[8];
    int nk = cpu_kernels_all(ks, 8);
    enum { COLS = 1024, CASES = 9 };
    static float x[COLS];
    static uint8_t ref[2048], got[2048];
    for (int c = 0; c < CASES * 8; c++) {
        int kase = c % CASES;
        for (int i = 0; i < COLS; i++) x[i] = (float)((int)(rnd() % 20001) - 10000) / 3000.0f;
        switch (kase) {
        case 1: x[37] = 5.0f, x[12] = -5.0f, x[300] = 5.0f, x[290] = -5.0f; break; /* tied magnitudes */
        case 2: for (int i = 0; i < COLS; i++) x[i] = (float)((int)(rnd() % 255) - 127) * 0.5f; break; /* ties */
        case 3: memset(x + 256, 0, 256 * sizeof(float)), x[300] = -0.0f, memset(x, 0, 32 * sizeof(float)); break;
        case 4: for (int i = 512; i < 768; i++) x[i] *= 1e-40f; break; /* subnormal blocks */
        case 5: x[5] = INFINITY, x[600] = -INFINITY; break;
        case 6: x[7] = NAN, x[520] = NAN, x[521] = -NAN; break;
        case 7: for (int i = 0; i < 256; i++) x[i] = NAN; break;
        case 8: x[100] = 3e38f, x[101] = -3e38f; break;
        default: break;
        }
        for (int kind = KQ_ACT_Q8K; kind <= KQ_ACT_Q80; kind++) {
            kq_act_prepare(kind, x, COLS, ref);
            for (int k = 0; k < nk; k++) {
                if (!ks[k]->kq_act) continue;
                memset(got, 0xa5, sizeof got);
                ks[k]->kq_act(kind, x, COLS, got);
                /* the row's bytes up to the padding (kq_act_bytes rounds up to 64) */
                size_t used = COLS + (kind == KQ_ACT_Q8K ? COLS / QK_K * 4 + COLS / 16 * 2 : COLS / 32 * 8);
                CHECK_MSG(!memcmp(got, ref, used), "%s %s case %d: not kq_act_prepare's bytes", ks[k]->name,
                          kind == KQ_ACT_Q8K ? "Q8K" : "Q80", kase);
                act_checked++;
            }
        }
    }
}

int main(void) {
    test_levels();
    test_act_levels();
    printf("test_kq_kernels: %d packed matrices checked against the stored layout, %d activation rows\n",
           packed_checked, act_checked);
    return test_report("test_kq_kernels");
}
