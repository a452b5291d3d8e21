/*
 * test_kquant.c - llama.cpp's block formats (src/quant/kquant.c):
 *  - hand-built blocks of every type whose values were worked out by hand
 *    from the format description (docs/FORMAT.md), element by element;
 *  - Q8K / Q80 activation quantization on hand-computed inputs;
 *  - the reference dot product equal to the dequantized weights times the
 *    dequantized activations, on random blocks of every type;
 *  - (every level's matmul_kq: test_kq_kernels.c, which also runs on aarch64)
 *  - every tensor of llama.cpp's own quantized fixtures (tests/data/kquants)
 *    dequantized close to the same tensor of the F16 file they were made
 *    from (a wrong bit position or scale packing shows as an error of the
 *    order of the values themselves).
 */
#include "test.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"
#include "format/gguf.h"
#include "quant/kquant.h"
#include "quant/quant.h"

#include <stdlib.h>
#include <string.h>

static void put16(uint8_t *p, float f) {
    uint16_t h = f32_to_f16(f);
    memcpy(p, &h, 2);
}

static float deq1(dtype_t t, const uint8_t *blk, int i) {
    float out[QK_K];
    kq_dequantize_row(t, blk, kq_block_elems(t), out);
    return out[i];
}

static void test_hand_blocks(void) {
    uint8_t b[256];
    /* Q5_0: d = 0.5, qh bit j = high bit of element j; element j low nibble
     * of qs[j], element j + 16 the high nibble; value (q - 16) * d. */
    memset(b, 0, sizeof b);
    put16(b, 0.5f);
    uint32_t qh = (1u << 0) | (1u << 17);
    memcpy(b + 2, &qh, 4);
    b[6 + 0] = 0x3f; /* e0: lo 15 | hi bit 1 -> 31; e16: 3, hi bit 0 -> 3 */
    b[6 + 1] = 0x70; /* e1: 0 -> 0; e17: 7 | 16 -> 23 */
    CHECK(deq1(XLLM_DT_Q5_0, b, 0) == (31 - 16) * 0.5f);
    CHECK(deq1(XLLM_DT_Q5_0, b, 16) == (3 - 16) * 0.5f);
    CHECK(deq1(XLLM_DT_Q5_0, b, 1) == (0 - 16) * 0.5f);
    CHECK(deq1(XLLM_DT_Q5_0, b, 17) == (23 - 16) * 0.5f);
    /* Q5_1: d = 0.25, m = -1; value q * d + m */
    memset(b, 0, sizeof b);
    put16(b, 0.25f);
    put16(b + 2, -1.0f);
    qh = 1u << 31;
    memcpy(b + 4, &qh, 4);
    b[8 + 15] = 0xa5; /* e15: 5; e31: 10 | 16 = 26 */
    CHECK(deq1(XLLM_DT_Q5_1, b, 15) == 5 * 0.25f - 1.0f);
    CHECK(deq1(XLLM_DT_Q5_1, b, 31) == 26 * 0.25f - 1.0f);
    /* IQ4_NL: d = 2, value d * table[nibble] */
    memset(b, 0, sizeof b);
    put16(b, 2.0f);
    b[2 + 3] = 0xf0; /* e3: table[0] = -127; e19: table[15] = 113 */
    CHECK(deq1(XLLM_DT_IQ4_NL, b, 3) == -254.0f);
    CHECK(deq1(XLLM_DT_IQ4_NL, b, 19) == 226.0f);

    /* Q4_K: d = 1, dmin = 0.5; scales[12]: sub-block 0: scale 3, min 5
     * (bytes 0 and 4, low 6 bits); sub-block 5: scale = (byte 9 & 15) |
     * (byte 1 >> 6) << 4, min = (byte 9 >> 4) | (byte 5 >> 6) << 4.
     * qs: 4 groups of 32 bytes; group g's low nibbles are sub-block 2g,
     * high nibbles sub-block 2g + 1. */
    memset(b, 0, sizeof b);
    put16(b, 1.0f);
    put16(b + 2, 0.5f);
    b[4 + 0] = 3;
    b[4 + 4] = 5;
    b[4 + 1] = 0xc0 | 7;  /* sub-block 1: scale 7; high bits 3 for sub-block 5's scale */
    b[4 + 5] = 0x40 | 2;  /* sub-block 1: min 2; high bits 1 for sub-block 5's min */
    b[4 + 9] = 0x9a;      /* sub-block 5: scale 10 | 3 << 4 = 58, min 9 | 1 << 4 = 25 */
    b[16 + 0] = 0x4b;     /* e0 (sub 0) = 11, e32 (sub 1) = 4 */
    b[16 + 64 + 2] = 0xe1; /* group 2, byte 2: e130 (sub 4) = 1; e162 (sub 5) = 14 */
    CHECK(deq1(XLLM_DT_Q4_K, b, 0) == 3.0f * 11 - 0.5f * 5);
    CHECK(deq1(XLLM_DT_Q4_K, b, 32) == 7.0f * 4 - 0.5f * 2);
    CHECK(deq1(XLLM_DT_Q4_K, b, 162) == 58.0f * 14 - 0.5f * 25);
    CHECK(deq1(XLLM_DT_Q4_K, b, 161) == 58.0f * 0 - 0.5f * 25);
    /* Q5_K: as Q4_K, qh[32] before qs: bit k of qh[l] is the high bit of
     * element 32k + l. */
    memset(b, 0, sizeof b);
    put16(b, 1.0f);
    put16(b + 2, 0.5f);
    b[4 + 1] = 7;    /* sub 1: scale 7 */
    b[4 + 5] = 2;    /* sub 1: min 2 */
    b[16 + 3] = 0x02; /* element 35 (sub 1, l = 3) has its high bit */
    b[48 + 3] = 0x60; /* e3 (sub 0) = 0; e35 = 6 | 16 = 22 */
    CHECK(deq1(XLLM_DT_Q5_K, b, 35) == 7.0f * 22 - 0.5f * 2);
    CHECK(deq1(XLLM_DT_Q5_K, b, 3) == 0.0f);
    /* Q6_K: ql[128] qh[64] scales[16] (int8) d. Element e: half h = e / 128,
     * r = e % 128, k = r / 32, l = r % 32: low 4 bits from ql[64h + l + 32(k&1)]
     * (low nibble for k < 2), high 2 bits from qh[32h + l] >> 2k; scale e / 16;
     * value d * scale * (q - 32). */
    memset(b, 0, sizeof b);
    put16(b + 208, 0.5f);
    b[192 + 0] = 4;
    b[192 + 12] = (uint8_t)-3; /* scale of elements 192..207 */
    b[0] = 0x5f;     /* e0 low 15; e64 low 5 */
    b[128] = 0x0e;   /* e0 high bits 2 (-> 47), e32 high bits 3, e64 high 0 */
    b[64 + 2] = 0x09; /* ql[64 + 2] low nibble: e128 + 2 = 130 low 9 */
    b[128 + 32 + 2] = 0x40; /* qh[32 + 2] >> 6: e(128 + 96 + 2) = 226 high 1; e130 high 0 */
    b[64 + 32 + 2] = 0x70;  /* ql[64 + 32 + 2] high nibble: e226 low 7 -> 23 */
    CHECK(deq1(XLLM_DT_Q6_K, b, 0) == 0.5f * 4 * (47 - 32));
    CHECK(deq1(XLLM_DT_Q6_K, b, 32) == 0.5f * 0 * (48 - 32));
    CHECK(deq1(XLLM_DT_Q6_K, b, 64) == 0.5f * 0 * (5 - 32));
    CHECK(deq1(XLLM_DT_Q6_K, b, 2) == 0.5f * 4 * (0 - 32));
    CHECK(deq1(XLLM_DT_Q6_K, b, 130) == 0.0f);
    b[192 + 8] = 2; /* scale of elements 128..143 */
    CHECK(deq1(XLLM_DT_Q6_K, b, 130) == 0.5f * 2 * (9 - 32));
    b[192 + 14] = 5; /* scale of elements 224..239 */
    CHECK(deq1(XLLM_DT_Q6_K, b, 226) == 0.5f * 5 * (23 - 32));
    /* Q2_K: scales[16] (low nibble scale, high nibble min) qs[64] d dmin.
     * Element e: h = e / 128, j = (e % 128) / 32, l = e % 32: 2 bits of
     * qs[32h + l] >> 2j; value d * scale(e/16) * q - dmin * min(e/16). */
    memset(b, 0, sizeof b);
    put16(b + 80, 0.5f);
    put16(b + 82, 0.25f);
    b[0] = 0x32;   /* sub 0: scale 2, min 3 */
    b[13] = 0x7f;  /* sub 13 (elements 208..223): scale 15, min 7 */
    b[16 + 0] = 0x03 | (2 << 2); /* e0 = 3, e32 = 2 */
    b[16 + 32 + 16] = 1 << 4;    /* h 1, l 16, j 2: e = 128 + 64 + 16 = 208 -> 1 */
    CHECK(deq1(XLLM_DT_Q2_K, b, 0) == 0.5f * 2 * 3 - 0.25f * 3);
    CHECK(deq1(XLLM_DT_Q2_K, b, 208) == 0.5f * 15 * 1 - 0.25f * 7);
    CHECK(deq1(XLLM_DT_Q2_K, b, 32) == 0.0f * 2); /* sub 2: scale 0, min 0 */
    /* Q3_K: hmask[32] qs[64] scales[12] d. q = 2 low bits (as Q2_K) minus 4
     * unless bit (4h + j) of hmask[l] is set; 6-bit scales: low 4 bits from
     * byte k (k < 8) or the high nibble of byte k - 8, high 2 bits from
     * byte 8 + k % 4 >> 2(k / 4); value d * (scale - 32) * q. */
    memset(b, 0, sizeof b);
    put16(b + 108, 0.5f);
    b[96 + 0] = 0x05;              /* scale 0 low 5 */
    b[96 + 8] = 0x02;              /* scale 0 high 2 -> 37 -> +5 */
    b[96 + 1] = 0xb0;              /* scale 9 low 11 */
    b[96 + 9] = 0x01 << 4;         /* scale 9 (k % 4 = 1, k / 4 = 2): high 1 -> 27 -> -5 */
    b[32 + 0] = 0x02;              /* e0: 2 */
    b[0] |= 0x01;                  /* e0's hmask bit set: 2 */
    b[32 + 32 + 16] = 0x03;        /* e = 128 + 16 = 144 (sub 9): 3; hmask bit 4 clear: 3 - 4 */
    CHECK(deq1(XLLM_DT_Q3_K, b, 0) == 0.5f * 5 * 2);
    CHECK(deq1(XLLM_DT_Q3_K, b, 144) == 0.5f * -5 * -1);
    CHECK(deq1(XLLM_DT_Q3_K, b, 1) == 0.5f * 5 * -4);
    /* IQ4_XS: d, scales_h (u16), scales_l[4], qs[128]; sub-block j's scale:
     * nibble j % 2 of scales_l[j / 2] | 2 bits (2j) of scales_h << 4, minus 32;
     * sub-block j's 16 bytes qs[16j..]: low nibbles elements 0..15. */
    memset(b, 0, sizeof b);
    put16(b, 0.25f);
    uint16_t sh = (uint16_t)(2u << (2 * 3)); /* sub 3 high bits 2 */
    memcpy(b + 2, &sh, 2);
    b[4 + 1] = 0x70;       /* sub 3 low nibble 7 -> 39 -> +7; sub 2: 0 -> -32 */
    b[8 + 48 + 5] = 0x9e;  /* sub 3, e 96 + 5 = table[14] = 89; e 96 + 21 = table[9] = 13 */
    CHECK(deq1(XLLM_DT_IQ4_XS, b, 101) == 0.25f * 7 * 89);
    CHECK(deq1(XLLM_DT_IQ4_XS, b, 117) == 0.25f * 7 * 13);
    CHECK(deq1(XLLM_DT_IQ4_XS, b, 64) == 0.25f * -32 * -127);
}

static void test_activations(void) {
    float x[256];
    for (int i = 0; i < 256; i++) x[i] = 1.0f;
    x[0] = -2.0f; /* the largest magnitude: iscale = -127 / -2 = 63.5 */
    x[17] = 0.5f; /* 31.75 -> 32 */
    uint8_t a[512];
    CHECK(kq_act_bytes(KQ_ACT_Q8K, 256) == 320);
    CHECK(kq_act_bytes(KQ_ACT_Q8K, 200) == 0);
    kq_act_prepare(KQ_ACT_Q8K, x, 256, a);
    const int8_t *q = (const int8_t *)a;
    float d;
    memcpy(&d, a + 256, 4);
    int16_t bs[16];
    memcpy(bs, a + 260, 32);
    CHECK(q[0] == -127 && q[1] == 64 && q[17] == 32); /* 63.5 rounds to even: 64 */
    CHECK(d == 1.0f / 63.5f);
    CHECK(bs[0] == -127 + 15 * 64 && bs[1] == 15 * 64 + 32 && bs[15] == 16 * 64);
    /* the largest value positive: iscale negative, codes negated */
    x[0] = 2.0f;
    kq_act_prepare(KQ_ACT_Q8K, x, 256, a);
    memcpy(&d, a + 256, 4);
    CHECK(q[0] == -127 && q[1] == -64 && d == 1.0f / -63.5f);
    /* Q80: d = f16(amax / 127), q = x * 127 / amax rounded to even, s = f16(d * sum) */
    for (int i = 0; i < 32; i++) x[i] = 0.0f;
    x[0] = 2.54f;
    x[1] = -1.27f; /* 63.5 -> 64 in exact arithmetic; f32 gives just under or over: checked below */
    x[2] = 0.02f;  /* 1 */
    kq_act_prepare(KQ_ACT_Q80, x, 32, a);
    float d0, s0;
    memcpy(&d0, a + 32, 4);
    memcpy(&s0, a + 36, 4);
    CHECK(q[0] == 127 && (q[1] == -64 || q[1] == -63) && q[2] == 1 && q[3] == 0);
    CHECK(d0 == f16_to_f32(f32_to_f16(2.54f / 127.0f)));
    CHECK(s0 == f16_to_f32(f32_to_f16(2.54f / 127.0f * (float)(127 + q[1] + 1))));
}

static uint32_t rng = 12345;
static uint32_t rnd(void) {
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}

static void test_dot_random(void) {
    const dtype_t types[] = {XLLM_DT_Q5_0, XLLM_DT_Q5_1, XLLM_DT_IQ4_NL, XLLM_DT_Q2_K, XLLM_DT_Q3_K,
                                XLLM_DT_Q4_K, XLLM_DT_Q5_K, XLLM_DT_Q6_K, XLLM_DT_IQ4_XS};
    const int64_t cols = 512;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        dtype_t t = types[ti];
        int n = kq_block_elems(t);
        size_t bb = kq_block_bytes(t), rb = (size_t)(cols / n) * bb;
        uint8_t *row = malloc(rb);
        for (size_t i = 0; i < rb; i++) row[i] = (uint8_t)rnd();
        /* sane f16 scales: small positive d (and dmin / m) */
        for (int64_t b = 0; b < cols / n; b++) {
            uint8_t *p = row + b * bb;
            float d = 0.001f * (float)(1 + rnd() % 50), m = 0.0005f * (float)(1 + rnd() % 50);
            switch (t) {
            case XLLM_DT_Q5_0: case XLLM_DT_IQ4_NL: case XLLM_DT_IQ4_XS: put16(p, d); break;
            case XLLM_DT_Q5_1: case XLLM_DT_Q4_K: case XLLM_DT_Q5_K: put16(p, d), put16(p + 2, t == XLLM_DT_Q5_1 ? -m : m); break;
            case XLLM_DT_Q2_K: put16(p + 80, d), put16(p + 82, m); break;
            case XLLM_DT_Q3_K: put16(p + 108, d); break;
            case XLLM_DT_Q6_K: put16(p + 208, d); break;
            default: break;
            }
        }
        float w[512], x[512], xa[512];
        kq_dequantize_row(t, row, cols, w);
        for (int i = 0; i < cols; i++) x[i] = (float)((int)(rnd() % 2001) - 1000) / 300.0f;
        int kind = kq_act_kind(t);
        uint8_t *act = malloc(kq_act_bytes(kind, cols));
        kq_act_prepare(kind, x, cols, act);
        /* the activations as the dot sees them: q * d per block */
        const int8_t *q = (const int8_t *)act;
        const float *da = (const float *)(act + cols);
        int ab = kind == KQ_ACT_Q8K ? 256 : 32;
        for (int i = 0; i < cols; i++) xa[i] = (float)q[i] * da[i / ab];
        double ref = 0, mag = 0;
        for (int i = 0; i < cols; i++) ref += (double)w[i] * xa[i], mag += fabs((double)w[i] * xa[i]);
        if (t == XLLM_DT_Q5_1) { /* the dot uses s = f16(d * sum) for the m term: same within f16 */
            const float *sa = da + cols / 32;
            ref = 0;
            for (int b = 0; b < cols / 32; b++) {
                uint16_t mh;
                memcpy(&mh, row + b * bb + 2, 2);
                float m = f16_to_f32(mh);
                for (int i = 0; i < 32; i++) ref += (double)(w[b * 32 + i] - m) * xa[b * 32 + i];
                ref += (double)m * sa[b];
            }
        }
        float got = kq_dot(t, row, act, cols);
        CHECK_MSG(fabs(got - ref) <= 1e-5 * mag + 1e-6, "%s: dot %.7g vs %.7g", dtype_name(t), got, ref);
        /* the matmul reference is the dot, per element */
        float y[2];
        kq_matmul_ref(t, row, cols, act, 0, 2, NULL, y, 1, 0, 1);
        CHECK(y[0] == got && y[1] == got);
        free(act);
        free(row);
    }
}

/* llama.cpp's quantized fixture tensors vs the F16 tensors they came from:
 * relative RMS error below what each type's bits allow. */
static void test_fixtures(void) {
    static const struct { const char *file; dtype_t t; double max_rel; } files[] = {
        {"kq-pure-Q2_K.gguf", XLLM_DT_Q2_K, 0.35},   {"kq-pure-Q3_K.gguf", XLLM_DT_Q3_K, 0.18},
        {"kq-pure-Q4_K.gguf", XLLM_DT_Q4_K, 0.09},   {"kq-pure-Q5_K.gguf", XLLM_DT_Q5_K, 0.045},
        {"kq-pure-Q6_K.gguf", XLLM_DT_Q6_K, 0.025},   {"kq-pure-Q5_0.gguf", XLLM_DT_Q5_0, 0.055},
        {"kq-pure-Q5_1.gguf", XLLM_DT_Q5_1, 0.05},   {"kq-pure-IQ4_NL.gguf", XLLM_DT_IQ4_NL, 0.095},
        {"kq-pure-IQ4_XS.gguf", XLLM_DT_IQ4_XS, 0.095},
    };
    xllm_error err;
    gguf_model ref;
    CHECK(gguf_open(XLLM_SOURCE_DIR "/tests/data/kquants/kq-F16.gguf", &ref, &err) == XLLM_OK);
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        char path[512];
        snprintf(path, sizeof path, "%s/tests/data/kquants/%s", XLLM_SOURCE_DIR, files[f].file);
        gguf_model g;
        CHECK_MSG(gguf_open(path, &g, &err) == XLLM_OK, "%s: %s", path, err.message);
        int seen = 0;
        double worst = 0, ours_worst = 0;
        for (size_t i = 0; i < st_count(g.tensors); i++) {
            const st_tensor *t = st_at(g.tensors, i);
            if (t->ndim != 2) continue;
            const st_tensor *r = st_find(ref.tensors, t->name);
            CHECK(r && r->dtype == XLLM_DT_F16 && r->shape[0] == t->shape[0] && r->shape[1] == t->shape[1]);
            if (!r) continue;
            CHECK_MSG(t->dtype == files[f].t, "%s %s: %s", files[f].file, t->name, dtype_name(t->dtype));
            int64_t rows = t->shape[0], cols = t->shape[1];
            size_t rb = quant_row_bytes(t->dtype, t->group, cols);
            CHECK(t->nbytes == (size_t)rows * rb);
            float *a = malloc(sizeof(float) * (size_t)cols), *b = malloc(sizeof(float) * (size_t)cols);
            double se = 0, ss = 0;
            for (int64_t row = 0; row < rows; row++) {
                quant_dequantize_row(t->dtype, t->group, (const char *)t->data + row * rb, cols, a);
                dtype_to_f32(XLLM_DT_F16, (const char *)r->data + row * cols * 2, b, (size_t)cols);
                for (int64_t c = 0; c < cols; c++) se += (double)(a[c] - b[c]) * (a[c] - b[c]), ss += (double)b[c] * b[c];
            }
            double rel = sqrt(se / ss);
            worst = fmax(worst, rel);
            CHECK_MSG(rel <= files[f].max_rel, "%s %s: relative RMS error %.4f", files[f].file, t->name, rel);
            if (kq_can_quantize(t->dtype)) { /* our quantizer on the same F16 rows: no worse than llama-quantize's */
                uint8_t *qrow = malloc(rb);
                double se2 = 0;
                for (int64_t row = 0; row < rows; row++) {
                    dtype_to_f32(XLLM_DT_F16, (const char *)r->data + row * cols * 2, b, (size_t)cols);
                    kq_quantize_row(t->dtype, b, cols, NULL, qrow);
                    quant_dequantize_row(t->dtype, t->group, qrow, cols, a);
                    for (int64_t c = 0; c < cols; c++) se2 += (double)(a[c] - b[c]) * (a[c] - b[c]);
                }
                double ours = sqrt(se2 / ss);
                ours_worst = fmax(ours_worst, ours / rel);
                CHECK_MSG(ours <= 1.05 * rel, "%s %s: our quantizer's relative RMS error %.4f vs llama.cpp's %.4f",
                          files[f].file, t->name, ours, rel);
                free(qrow);
            }
            free(a);
            free(b);
            seen++;
        }
        CHECK(seen >= 14); /* 2 layers x 7 matrices, embeddings, output */
        fprintf(stderr, "  %-22s worst relative RMS error vs F16 %.4f over %d matrices", files[f].file, worst, seen);
        if (ours_worst > 0) fprintf(stderr, "; ours / llama.cpp's at worst %.3f", ours_worst);
        fputc('\n', stderr);
        gguf_close(&g);
    }
    gguf_close(&ref);
}

int main(void) {
    test_hand_blocks();
    test_activations();
    test_dot_random();
    test_fixtures();
    return test_report("test_kquant");
}
