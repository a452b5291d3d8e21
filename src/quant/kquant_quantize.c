/*
 * kquant_quantize.c - quantizers for llama.cpp's Q2_K, Q3_K, Q4_K, Q5_K,
 * Q6_K and IQ4_NL (kq_quantize_row, kquant.h), written from the format
 * (docs/FORMAT.md).
 *
 * The idea: fit each sub-block first, then the super-block's two f16 scales
 * to the fitted sub-block scales, then the codes again against the scales as
 * stored (6-bit, or int8 for Q6_K), so the codes see exactly the arithmetic
 * the kernels will do. Sub-block fits minimise the importance-weighted
 * squared error (importance: per column, e.g. mean activation^2 from
 * calibration; NULL weighs all alike, plus |x| so large weights count more):
 *  - Q2_K / Q4_K / Q5_K (affine, levels 0..L; Q2_K on sub-blocks of 16 with
 *    4-bit scales and mins): for 16 candidate ranges [min, max]
 *    shrunk by factors 1 .. 0.7, codes by rounding, then scale and offset
 *    refitted by weighted least squares to those codes; the best fit wins.
 *    The offset is kept <= 0 (stored as a non-negative min).
 *  - Q3_K / Q6_K (symmetric, levels -4..3 / -32..31 on sub-blocks of 16):
 *    the value of largest magnitude maps to the lowest level times clip
 *    factors 1 .. 0.7, scale refitted by least squares; the super-block
 *    scale maps the largest sub-block scale to the lowest 6-bit / 8-bit one.
 *  - IQ4_NL (blocks of 32, one f16 scale, codes index the non-linear table):
 *    candidate scales around the one mapping the largest magnitude to -127,
 *    each value to its nearest table level, the scale refitted by least
 *    squares to those levels; the best fit wins.
 */
#include "quant/kquant.h"

#include <math.h>
#include <string.h>

static void wr16(uint8_t *p, float f) {
    uint16_t h = f32_to_f16(f);
    memcpy(p, &h, 2);
}

static float rd16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return f16_to_f32(h);
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Affine fit of n values to levels 0..L: x ~ s * q - m with s >= 0, m >= 0. */
static void fit_affine(const float *x, const float *w, int n, int L, float *s_out, float *m_out) {
    float mn = x[0], mx = x[0];
    for (int i = 1; i < n; i++) mn = fminf(mn, x[i]), mx = fmaxf(mx, x[i]);
    if (mn > 0) mn = 0;
    if (mx <= mn) {
        *s_out = 0, *m_out = -mn;
        return;
    }
    double best = INFINITY;
    float bs = (mx - mn) / (float)L, bm = -mn;
    for (int k = 0; k < 16; k++) {
        float f = 1.0f - 0.02f * (float)k;
        float lo = mn * f, hi = mx * f, s = (hi - lo) / (float)L, m = -lo;
        for (int pass = 0; pass < 2; pass++) {
            if (s <= 0) break;
            float is = 1.0f / s;
            double sw = 0, sq = 0, sqq = 0, sx = 0, sxq = 0;
            for (int i = 0; i < n; i++) {
                int q = clampi((int)lrintf((x[i] + m) * is), 0, L);
                sw += w[i], sq += w[i] * q, sqq += w[i] * q * q, sx += w[i] * x[i], sxq += w[i] * x[i] * q;
            }
            double det = sw * sqq - sq * sq;
            if (det <= 1e-20 * sw * sqq) break;
            double ns = (sw * sxq - sq * sx) / det, nm = -(sqq * sx - sq * sxq) / det;
            if (nm < 0) { /* offset must be <= 0: refit the scale alone */
                nm = 0;
                ns = sqq > 0 ? sxq / sqq : 0;
            }
            if (ns <= 0) break;
            s = (float)ns, m = (float)nm;
        }
        if (s <= 0) continue;
        float is = 1.0f / s;
        double e = 0;
        for (int i = 0; i < n; i++) {
            int q = clampi((int)lrintf((x[i] + m) * is), 0, L);
            double d = x[i] - (s * q - m);
            e += w[i] * d * d;
        }
        if (e < best) best = e, bs = s, bm = m;
    }
    *s_out = bs, *m_out = bm;
}

/* Symmetric fit to levels lo..-lo-1 (lo = -32 or -4): x ~ s * q. */
static float fit_sym(const float *x, const float *w, int n, int lo) {
    float amax = 0, vmax = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), vmax = x[i];
    if (amax == 0) return 0;
    double best = INFINITY;
    float bs = vmax / (float)lo;
    for (int k = 0; k < 16; k++) {
        float s = vmax * (1.0f - 0.02f * (float)k) / (float)lo;
        for (int pass = 0; pass < 2; pass++) {
            float is = 1.0f / s;
            double sxq = 0, sqq = 0;
            for (int i = 0; i < n; i++) {
                int q = clampi((int)lrintf(x[i] * is), lo, -lo - 1);
                sxq += w[i] * x[i] * q, sqq += w[i] * q * q;
            }
            if (sqq <= 0 || sxq == 0) break;
            s = (float)(sxq / sqq);
        }
        float is = 1.0f / s;
        double e = 0;
        for (int i = 0; i < n; i++) {
            int q = clampi((int)lrintf(x[i] * is), lo, -lo - 1);
            double d = x[i] - s * q;
            e += w[i] * d * d;
        }
        if (e < best) best = e, bs = s;
    }
    return bs;
}

static void weights(const float *x, const float *imp, int n, float *w) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float rms = (float)sqrt(ss / n);
    for (int i = 0; i < n; i++) w[i] = (imp ? imp[i] : 1.0f) * (rms + fabsf(x[i]));
}

static void q45k_block(dtype_t t, const float *x, const float *imp, uint8_t *b) {
    int L = t == XLLM_DT_Q5_K ? 31 : 15;
    float w[QK_K], s[8], m[8], smax = 0, mmax = 0;
    weights(x, imp, QK_K, w);
    for (int j = 0; j < 8; j++) {
        fit_affine(x + 32 * j, w + 32 * j, 32, L, &s[j], &m[j]);
        smax = fmaxf(smax, s[j]), mmax = fmaxf(mmax, m[j]);
    }
    memset(b, 0, kq_block_bytes(t));
    wr16(b, smax / 63.0f);
    wr16(b + 2, mmax / 63.0f);
    float d = rd16(b), dmin = rd16(b + 2);
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(d > 0 ? clampi((int)lrintf(s[j] / d), 0, 63) : 0);
        mn[j] = (uint8_t)(dmin > 0 ? clampi((int)lrintf(m[j] / dmin), 0, 63) : 0);
    }
    uint8_t *S = b + 4; /* 6-bit packing: see kq_unpack_block */
    for (int j = 0; j < 4; j++) {
        S[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        S[j + 4] = (uint8_t)(mn[j] | (mn[j + 4] >> 4) << 6);
        S[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
    }
    uint8_t *qh = b + 16, *qs = b + (t == XLLM_DT_Q5_K ? 48 : 16);
    for (int e = 0; e < QK_K; e++) {
        int j = e / 32;
        float ds = d * (float)sc[j], dm = dmin * (float)mn[j];
        int q = ds > 0 ? clampi((int)lrintf((x[e] + dm) / ds), 0, L) : 0;
        int g = e / 64, l = e % 64;
        qs[32 * g + l % 32] |= (uint8_t)((q & 15) << (l < 32 ? 0 : 4));
        if (t == XLLM_DT_Q5_K && (q & 16)) qh[l % 32] |= (uint8_t)(1 << j);
    }
}

static void q6k_block(const float *x, const float *imp, uint8_t *b) {
    float w[QK_K], s[16], amax = 0, vmax = 0;
    weights(x, imp, QK_K, w);
    for (int k = 0; k < 16; k++) {
        s[k] = fit_sym(x + 16 * k, w + 16 * k, 16, -32);
        if (fabsf(s[k]) > amax) amax = fabsf(s[k]), vmax = s[k];
    }
    memset(b, 0, 210);
    wr16(b + 208, vmax / -128.0f); /* the largest sub-block scale maps to -128 */
    float d = rd16(b + 208);
    int8_t *sc = (int8_t *)(b + 192);
    for (int k = 0; k < 16; k++) sc[k] = (int8_t)(d != 0 ? clampi((int)lrintf(s[k] / d), -128, 127) : 0);
    for (int e = 0; e < QK_K; e++) {
        float ds = d * (float)sc[e / 16];
        int q = ds != 0 ? clampi((int)lrintf(x[e] / ds), -32, 31) + 32 : 32;
        int h = e / 128, k = (e % 128) / 32, l = e % 32;
        b[64 * h + l + 32 * (k & 1)] |= (uint8_t)((q & 15) << (k < 2 ? 0 : 4));
        b[128 + 32 * h + l] |= (uint8_t)((q >> 4) << (2 * k));
    }
}

/* Q2_K: scales[16] (scale | min << 4), qs[64], d, dmin; levels 0..3 per 16 */
static void q2k_block(const float *x, const float *imp, uint8_t *b) {
    float w[QK_K], s[16], m[16], smax = 0, mmax = 0;
    weights(x, imp, QK_K, w);
    for (int k = 0; k < 16; k++) {
        fit_affine(x + 16 * k, w + 16 * k, 16, 3, &s[k], &m[k]);
        smax = fmaxf(smax, s[k]), mmax = fmaxf(mmax, m[k]);
    }
    memset(b, 0, 84);
    wr16(b + 80, smax / 15.0f);
    wr16(b + 82, mmax / 15.0f);
    float d = rd16(b + 80), dmin = rd16(b + 82);
    int sc[16], mn[16];
    for (int k = 0; k < 16; k++) {
        sc[k] = d > 0 ? clampi((int)lrintf(s[k] / d), 0, 15) : 0;
        mn[k] = dmin > 0 ? clampi((int)lrintf(m[k] / dmin), 0, 15) : 0;
        b[k] = (uint8_t)(sc[k] | mn[k] << 4);
    }
    for (int e = 0; e < QK_K; e++) {
        int k = e / 16;
        float ds = d * (float)sc[k], dm = dmin * (float)mn[k];
        int q = ds > 0 ? clampi((int)lrintf((x[e] + dm) / ds), 0, 3) : 0;
        int h = e / 128, j = (e % 128) / 32, l = e % 32;
        b[16 + 32 * h + l] |= (uint8_t)(q << (2 * j));
    }
}

/* Q3_K: hmask[32], qs[64], scales[12] (6-bit, stored + 32), d; levels -4..3 per 16 */
static void q3k_block(const float *x, const float *imp, uint8_t *b) {
    float w[QK_K], s[16], amax = 0, vmax = 0;
    weights(x, imp, QK_K, w);
    for (int k = 0; k < 16; k++) {
        s[k] = fit_sym(x + 16 * k, w + 16 * k, 16, -4);
        if (fabsf(s[k]) > amax) amax = fabsf(s[k]), vmax = s[k];
    }
    memset(b, 0, 110);
    wr16(b + 108, vmax / -32.0f); /* the largest sub-block scale maps to -32 */
    float d = rd16(b + 108);
    uint8_t *S = b + 96;
    int sc[16];
    for (int k = 0; k < 16; k++) {
        sc[k] = d != 0 ? clampi((int)lrintf(s[k] / d), -32, 31) : 0;
        int v = sc[k] + 32;
        if (k < 8) S[k] |= (uint8_t)(v & 15);
        else S[k - 8] |= (uint8_t)((v & 15) << 4);
        S[8 + k % 4] |= (uint8_t)((v >> 4) << (2 * (k / 4)));
    }
    for (int e = 0; e < QK_K; e++) {
        float ds = d * (float)sc[e / 16];
        int u = (ds != 0 ? clampi((int)lrintf(x[e] / ds), -4, 3) : 0) + 4; /* 0..7 */
        int h = e / 128, j = (e % 128) / 32, l = e % 32;
        b[32 + 32 * h + l] |= (uint8_t)((u & 3) << (2 * j));
        if (u & 4) b[l] |= (uint8_t)(1 << (4 * h + j));
    }
}

/* The table index nearest v (kq_iq4_values ascends; ties to the lower). */
static int iq4_nearest(float v) {
    int lo = 0, hi = 15;
    while (hi - lo > 1) { /* kq_iq4_values[lo] <= v < kq_iq4_values[hi], or v outside */
        int mid = (lo + hi) / 2;
        if (v < (float)kq_iq4_values[mid]) hi = mid;
        else lo = mid;
    }
    return fabsf(v - (float)kq_iq4_values[lo]) <= fabsf(v - (float)kq_iq4_values[hi]) ? lo : hi;
}

/* IQ4_NL: d, qs[16] (element j low nibble, j + 16 high) */
static void iq4nl_block(const float *x, const float *imp, uint8_t *b) {
    float w[32], amax = 0, vmax = 0;
    weights(x, imp, 32, w);
    for (int i = 0; i < 32; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), vmax = x[i];
    memset(b, 0, 18);
    if (amax == 0) return;
    double best = INFINITY;
    float bd = vmax / -127.0f;
    for (int k = -4; k <= 4; k++) {
        float d = vmax / (-127.0f + 12.0f * (float)k);
        for (int pass = 0; pass < 1; pass++) { /* one refit: more passes gained < 0.5% on the fixtures */
            float id = 1.0f / d;
            double sxt = 0, stt = 0;
            for (int i = 0; i < 32; i++) {
                float t = kq_iq4_values[iq4_nearest(x[i] * id)];
                sxt += w[i] * x[i] * t, stt += w[i] * t * t;
            }
            if (stt <= 0 || sxt == 0) break;
            d = (float)(sxt / stt);
        }
        float dq = f16_to_f32(f32_to_f16(d)), id = 1.0f / dq;
        double e = 0;
        for (int i = 0; i < 32; i++) {
            double r = x[i] - dq * kq_iq4_values[iq4_nearest(x[i] * id)];
            e += w[i] * r * r;
        }
        if (e < best) best = e, bd = d;
    }
    wr16(b, bd);
    float d = rd16(b), id = d != 0 ? 1.0f / d : 0.0f;
    for (int i = 0; i < 16; i++)
        b[2 + i] = (uint8_t)(iq4_nearest(x[i] * id) | iq4_nearest(x[i + 16] * id) << 4);
}

int kq_can_quantize(dtype_t t) {
    return t == XLLM_DT_Q2_K || t == XLLM_DT_Q3_K || t == XLLM_DT_Q4_K || t == XLLM_DT_Q5_K || t == XLLM_DT_Q6_K ||
           t == XLLM_DT_IQ4_NL;
}

void kq_quantize_row(dtype_t t, const float *x, int64_t cols, const float *importance, void *out) {
    size_t bb = kq_block_bytes(t);
    int n = kq_block_elems(t);
    for (int64_t b = 0; b < cols / n; b++) {
        const float *xb = x + b * n, *ib = importance ? importance + b * n : NULL;
        uint8_t *o = (uint8_t *)out + (size_t)b * bb;
        switch (t) {
        case XLLM_DT_Q2_K: q2k_block(xb, ib, o); break;
        case XLLM_DT_Q3_K: q3k_block(xb, ib, o); break;
        case XLLM_DT_Q6_K: q6k_block(xb, ib, o); break;
        case XLLM_DT_IQ4_NL: iq4nl_block(xb, ib, o); break;
        default: q45k_block(t, xb, ib, o); break;
        }
    }
}
