/*
 * kquant.c - llama.cpp's block formats (kquant.h): unpacking a block into
 * integer codes and scales, dequantization, llama.cpp's activation
 * quantization (Q8K, Q80) and the reference dot product every SIMD kernel is
 * tested against. Written from the format's description (docs/FORMAT.md).
 */
#include "quant/kquant.h"
#include "quant/quant.h"

#include <math.h>
#include <string.h>

const int8_t kq_iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static float f16at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return f16_to_f32(h);
}

int kq_block_elems(dtype_t t) {
    switch (t) {
    case XLLM_DT_Q5_0: case XLLM_DT_Q5_1: case XLLM_DT_IQ4_NL: return 32;
    case XLLM_DT_Q2_K: case XLLM_DT_Q3_K: case XLLM_DT_Q4_K: case XLLM_DT_Q5_K: case XLLM_DT_Q6_K:
    case XLLM_DT_IQ4_XS: return QK_K;
    default: return 0;
    }
}

size_t kq_block_bytes(dtype_t t) {
    switch (t) {
    case XLLM_DT_Q5_0: return 22;
    case XLLM_DT_Q5_1: return 24;
    case XLLM_DT_IQ4_NL: return 18;
    case XLLM_DT_Q2_K: return 84;
    case XLLM_DT_Q3_K: return 110;
    case XLLM_DT_Q4_K: return 144;
    case XLLM_DT_Q5_K: return 176;
    case XLLM_DT_Q6_K: return 210;
    case XLLM_DT_IQ4_XS: return 136;
    default: return 0;
    }
}

int kq_act_kind(dtype_t t) {
    int n = kq_block_elems(t);
    return n == QK_K ? KQ_ACT_Q8K : n == 32 ? KQ_ACT_Q80 : 0;
}

/* ------------------------------------------------------------ activations */

size_t kq_act_bytes(int kind, int64_t cols) {
    size_t n;
    if (kind == KQ_ACT_Q8K) {
        if (cols <= 0 || cols % QK_K) return 0;
        n = (size_t)cols + (size_t)cols / QK_K * 4 + (size_t)cols / 16 * 2;
    } else {
        if (cols <= 0 || cols % 32) return 0;
        n = (size_t)cols + (size_t)cols / 32 * 8;
    }
    return (n + 63) & ~(size_t)63;
}

/* The code of a scaled activation p (kq_act_frame.h). */
static long kq_act_code(float p) { return fabsf(p) <= 128.0f ? lrintf(p) : 0; }

static float kqa_amax(const float *x, int n) {
    float amax = 0;
    for (int i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    return amax;
}

static void kqa_q8k(const float *xb, float iscale, int8_t *qb, int16_t *bs) {
    for (int i = 0; i < QK_K; i++) {
        long v = kq_act_code(iscale * xb[i]);
        qb[i] = (int8_t)(v > 127 ? 127 : v);
    }
    for (int j = 0; j < 16; j++) {
        int s = 0;
        for (int i = 0; i < 16; i++) s += qb[16 * j + i];
        bs[j] = (int16_t)s;
    }
}

static int32_t kqa_q80(const float *xb, float id, int8_t *qb) {
    int32_t sum = 0;
    for (int i = 0; i < 32; i++) {
        int v = (int)kq_act_code(xb[i] * id);
        qb[i] = (int8_t)v;
        sum += v;
    }
    return sum;
}

#define KQA_NAME kq_act_frame_ref
#define KQA_AMAX kqa_amax
#define KQA_Q8K kqa_q8k
#define KQA_Q80 kqa_q80
#include "quant/kq_act_frame.h"

void kq_act_prepare(int kind, const float *x, int64_t cols, void *out) { kq_act_frame_ref(kind, x, cols, out); }

/* ------------------------------------------------------------- unpacking */

/* Q4_K / Q5_K: sub-block j's 6-bit scale and min from the 12 packed bytes. */
static void scale_min_k4(int j, const uint8_t *s, int16_t *sc, int16_t *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (int16_t)((s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4));
        *mn = (int16_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

int kq_unpack_block(dtype_t t, const void *blk, int8_t *codes, int16_t *sc, int16_t *mn, float *d, float *dmin) {
    const uint8_t *b = blk;
    *dmin = 0;
    switch (t) {
    case XLLM_DT_Q5_0:
    case XLLM_DT_Q5_1: {
        int hdr = t == XLLM_DT_Q5_1 ? 4 : 2;
        uint32_t qh;
        memcpy(&qh, b + hdr, 4);
        const uint8_t *qs = b + hdr + 4;
        for (int j = 0; j < 16; j++) {
            int lo = (qs[j] & 0xf) | (int)((qh >> j) & 1) << 4;
            int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            codes[j] = (int8_t)(t == XLLM_DT_Q5_0 ? lo - 16 : lo);
            codes[j + 16] = (int8_t)(t == XLLM_DT_Q5_0 ? hi - 16 : hi);
        }
        *d = f16at(b);
        if (t == XLLM_DT_Q5_1) *dmin = f16at(b + 2);
        sc[0] = 1, mn[0] = 0;
        return 32;
    }
    case XLLM_DT_Q8: /* xLLM's Q8 / Q4 / Q4M at group 32: GGUF's Q8_0 / Q4_0 / Q4_1 blocks */
        memcpy(codes, b + 2, 32);
        *d = f16at(b);
        sc[0] = 1, mn[0] = 0;
        return 32;
    case XLLM_DT_Q4:
    case XLLM_DT_Q4M: {
        int hdr = t == XLLM_DT_Q4M ? 4 : 2, off = t == XLLM_DT_Q4 ? 8 : 0;
        for (int j = 0; j < 16; j++) {
            codes[j] = (int8_t)((b[hdr + j] & 0xf) - off);
            codes[j + 16] = (int8_t)((b[hdr + j] >> 4) - off);
        }
        *d = f16at(b);
        if (t == XLLM_DT_Q4M) *dmin = f16at(b + 2);
        sc[0] = 1, mn[0] = 0;
        return 32;
    }
    case XLLM_DT_IQ4_NL:
        for (int j = 0; j < 16; j++) {
            codes[j] = kq_iq4_values[b[2 + j] & 0xf];
            codes[j + 16] = kq_iq4_values[b[2 + j] >> 4];
        }
        *d = f16at(b);
        sc[0] = 1, mn[0] = 0;
        return 32;
    case XLLM_DT_Q2_K: { /* scales[16] qs[64] d dmin */
        const uint8_t *qs = b + 16;
        for (int e = 0; e < QK_K; e++) {
            int h = e / 128, j = (e % 128) / 32, l = e % 32;
            codes[e] = (int8_t)((qs[32 * h + l] >> (2 * j)) & 3);
        }
        for (int k = 0; k < 16; k++) sc[k] = b[k] & 0xf, mn[k] = b[k] >> 4;
        *d = f16at(b + 80);
        *dmin = f16at(b + 82);
        return 16;
    }
    case XLLM_DT_Q3_K: { /* hmask[32] qs[64] scales[12] d */
        const uint8_t *hm = b, *qs = b + 32, *s = b + 96;
        for (int e = 0; e < QK_K; e++) {
            int h = e / 128, j = (e % 128) / 32, l = e % 32;
            int q = (qs[32 * h + l] >> (2 * j)) & 3;
            codes[e] = (int8_t)(q - ((hm[l] >> (4 * h + j)) & 1 ? 0 : 4));
        }
        for (int k = 0; k < 16; k++) {
            int lo = k < 8 ? s[k] & 0xf : s[k - 8] >> 4;
            int hi = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
            sc[k] = (int16_t)((lo | hi << 4) - 32);
            mn[k] = 0;
        }
        *d = f16at(b + 108);
        return 16;
    }
    case XLLM_DT_Q4_K:
    case XLLM_DT_Q5_K: { /* d dmin scales[12] (qh[32]) qs[128] */
        const uint8_t *qh = b + 16, *qs = b + (t == XLLM_DT_Q5_K ? 48 : 16);
        for (int e = 0; e < QK_K; e++) {
            int g = e / 64, l = e % 64;
            uint8_t byte = qs[32 * g + l % 32];
            int q = l < 32 ? byte & 0xf : byte >> 4;
            if (t == XLLM_DT_Q5_K) q |= ((qh[l % 32] >> (e / 32)) & 1) << 4;
            codes[e] = (int8_t)q;
        }
        for (int j = 0; j < 8; j++) scale_min_k4(j, b + 4, &sc[j], &mn[j]);
        *d = f16at(b);
        *dmin = f16at(b + 2);
        return 32;
    }
    case XLLM_DT_Q6_K: { /* ql[128] qh[64] scales[16] d */
        const uint8_t *ql = b, *qh = b + 128;
        for (int e = 0; e < QK_K; e++) {
            int h = e / 128, k = (e % 128) / 32, l = e % 32;
            uint8_t lb = ql[64 * h + l + 32 * (k & 1)];
            int lo = k < 2 ? lb & 0xf : lb >> 4;
            int hi = (qh[32 * h + l] >> (2 * k)) & 3;
            codes[e] = (int8_t)((lo | hi << 4) - 32);
        }
        for (int k = 0; k < 16; k++) sc[k] = (int8_t)b[192 + k], mn[k] = 0;
        *d = f16at(b + 208);
        return 16;
    }
    case XLLM_DT_IQ4_XS: { /* d scales_h(u16) scales_l[4] qs[128] */
        uint16_t sh;
        memcpy(&sh, b + 2, 2);
        const uint8_t *sl = b + 4, *qs = b + 8;
        for (int j = 0; j < 8; j++) {
            int ls = ((sl[j / 2] >> (4 * (j % 2))) & 0xf) | ((sh >> (2 * j)) & 3) << 4;
            sc[j] = (int16_t)(ls - 32);
            mn[j] = 0;
            for (int i = 0; i < 16; i++) {
                codes[32 * j + i] = kq_iq4_values[qs[16 * j + i] & 0xf];
                codes[32 * j + i + 16] = kq_iq4_values[qs[16 * j + i] >> 4];
            }
        }
        *d = f16at(b);
        return 32;
    }
    default: return 0;
    }
}

static int has_mins(dtype_t t) { return t == XLLM_DT_Q2_K || t == XLLM_DT_Q4_K || t == XLLM_DT_Q5_K; }

void kq_dequantize_row(dtype_t t, const void *row, int64_t cols, float *out) {
    int n = kq_block_elems(t);
    size_t bb = kq_block_bytes(t);
    int8_t codes[QK_K];
    int16_t sc[16], mn[16];
    float d, dmin;
    for (int64_t b = 0; b < cols / n; b++) {
        int sub = kq_unpack_block(t, (const uint8_t *)row + (size_t)b * bb, codes, sc, mn, &d, &dmin);
        float *o = out + b * n;
        if (n == 32) { /* Q5_1: d * q + m; Q5_0, IQ4_NL: d * q */
            for (int i = 0; i < 32; i++) o[i] = t == XLLM_DT_Q5_1 ? (float)codes[i] * d + dmin : (float)codes[i] * d;
            continue;
        }
        for (int i = 0; i < n; i++) {
            int k = i / sub;
            float dl = d * (float)sc[k];
            o[i] = has_mins(t) ? dl * (float)codes[i] - dmin * (float)mn[k] : dl * (float)codes[i];
        }
    }
}

/* ------------------------------------------------------------------- dot */

float kq_dot(dtype_t t, const void *row, const void *act, int64_t cols) {
    int n = kq_block_elems(t);
    size_t bb = kq_block_bytes(t);
    const int8_t *q = act;
    const float *da = (const float *)(q + cols);
    int8_t codes[QK_K];
    int16_t sc[16], mn[16];
    float d, dmin, acc = 0;
    int64_t nb = cols / n;
    if (n == 32) {
        const float *sa = da + nb;
        for (int64_t b = 0; b < nb; b++) {
            kq_unpack_block(t, (const uint8_t *)row + (size_t)b * bb, codes, sc, mn, &d, &dmin);
            int32_t is = 0;
            for (int i = 0; i < 32; i++) is += codes[i] * q[b * 32 + i];
            acc += (d * da[b]) * (float)is;
            if (t == XLLM_DT_Q5_1) acc += dmin * sa[b];
        }
        return acc;
    }
    const int16_t *bs = (const int16_t *)(da + nb);
    for (int64_t b = 0; b < nb; b++) {
        int sub = kq_unpack_block(t, (const uint8_t *)row + (size_t)b * bb, codes, sc, mn, &d, &dmin);
        const int8_t *qb = q + b * QK_K;
        int32_t S = 0, M = 0;
        for (int k = 0; k < QK_K / sub; k++) {
            int32_t is = 0;
            for (int i = 0; i < sub; i++) is += codes[k * sub + i] * qb[k * sub + i];
            S += sc[k] * is;
            if (has_mins(t)) {
                int32_t as = sub == 16 ? bs[b * 16 + k] : bs[b * 16 + 2 * k] + bs[b * 16 + 2 * k + 1];
                M += mn[k] * as;
            }
        }
        acc += (d * da[b]) * (float)S;
        if (has_mins(t)) acc -= (dmin * da[b]) * (float)M;
    }
    return acc;
}

void kq_matmul_ref(dtype_t t, const void *W, int64_t cols, const void *act, size_t act_stride, int T,
                   const float *bias, float *y, size_t ldy, int64_t r0, int64_t r1) {
    size_t rb = (size_t)(cols / kq_block_elems(t)) * kq_block_bytes(t);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)W + (size_t)r * rb;
        float b = bias ? bias[r] : 0.0f;
        for (int tk = 0; tk < T; tk++)
            y[(size_t)tk * ldy + (size_t)r] = kq_dot(t, row, (const uint8_t *)act + (size_t)tk * act_stride, cols) + b;
    }
}
