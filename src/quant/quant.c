/*
 * quant.c - reference (scalar) quantization, dequantization and dot kernels
 * for the block formats of quant.h. Every SIMD kernel is tested against these.
 */
#include "quant/quant.h"
#include "quant/kquant.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <string.h>

/* ----------------------------------------------------------- f16 helpers */

static float rd16(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return f16_to_f32(h);
}

static void wr16(unsigned char *p, float f) {
    uint16_t h = f32_to_f16(f);
    memcpy(p, &h, 2);
}

/* ----------------------------------------------------------------- sizes */

size_t quant_block_bytes(dtype_t t, int group) {
    switch (t) {
    case XLLM_DT_Q8: return 2 + (size_t)group;
    case XLLM_DT_Q4: return 2 + (size_t)group / 2;
    case XLLM_DT_Q4M: return 4 + (size_t)group / 2;
    default: return kq_block_bytes(t); /* llama.cpp's types: a fixed block (group = its size) */
    }
}

int quant_format_ok(dtype_t t, int group, int64_t cols) {
    if (!dtype_is_quant(t)) return 0;
    if (dtype_is_kq(t)) return group == kq_block_elems(t) && cols > 0 && cols % group == 0;
    if (group < QK || group % QK || group > 4096) return 0;
    return cols > 0 && cols % group == 0;
}

size_t quant_row_bytes(dtype_t t, int group, int64_t cols) {
    if (!dtype_is_quant(t)) return (size_t)cols * dtype_size(t);
    return (size_t)(cols / group) * quant_block_bytes(t, group);
}

/* ------------------------------------------------------------ quantizing */

/* Nibble position of element i of a group: sub-block i/32, byte (i%32)%16, high if (i%32)>=16. */
static void put_nibble(unsigned char *q, int i, int v) {
    int sb = i / QK, j = i % QK;
    unsigned char *b = q + sb * (QK / 2) + (j % 16);
    if (j < 16) *b = (unsigned char)((*b & 0xf0) | (v & 0xf));
    else *b = (unsigned char)((*b & 0x0f) | ((v & 0xf) << 4));
}

static int get_nibble(const unsigned char *q, int i) {
    int sb = i / QK, j = i % QK;
    unsigned char b = q[sb * (QK / 2) + (j % 16)];
    return j < 16 ? (b & 0xf) : (b >> 4);
}

/* Quantize one group of n values with range clipped by `clip`; writes the
 * block and returns the importance-weighted squared error. */
static double quant_group(dtype_t t, const float *x, int n, float clip, const float *imp, unsigned char *blk) {
    double errsum = 0;
    if (t == XLLM_DT_Q8) {
        float amax = 0;
        for (int i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
        float d = amax * clip / 127.0f;
        wr16(blk, d);
        float dq = rd16(blk), id = dq != 0 ? 1.0f / dq : 0.0f;
        int8_t *q = (int8_t *)(blk + 2);
        for (int i = 0; i < n; i++) {
            int v = (int)lrintf(x[i] * id);
            v = v > 127 ? 127 : v < -127 ? -127 : v;
            q[i] = (int8_t)v;
            double e = x[i] - v * dq;
            errsum += (imp ? imp[i] : 1.0) * e * e;
        }
    } else if (t == XLLM_DT_Q4) {
        /* levels -8..7: the value of largest magnitude maps to -8; then the scale is
         * refitted by weighted least squares to the rounded levels */
        float amax = 0, vmax = 0;
        for (int i = 0; i < n; i++)
            if (fabsf(x[i]) > amax) amax = fabsf(x[i]), vmax = x[i];
        float d = vmax * clip / -8.0f;
        int q[4096];
        for (int pass = 0; pass < 2; pass++) {
            float id = d != 0 ? 1.0f / d : 0.0f;
            double sxq = 0, sqq = 0;
            for (int i = 0; i < n; i++) {
                int v = (int)lrintf(x[i] * id);
                v = v > 7 ? 7 : v < -8 ? -8 : v;
                q[i] = v;
                double w = imp ? imp[i] : 1.0;
                sxq += w * x[i] * v;
                sqq += w * v * v;
            }
            if (sqq > 0) d = (float)(sxq / sqq);
        }
        wr16(blk, d);
        float dq = rd16(blk);
        unsigned char *qb = blk + 2;
        memset(qb, 0, (size_t)n / 2);
        for (int i = 0; i < n; i++) {
            put_nibble(qb, i, q[i] + 8);
            double e = x[i] - q[i] * dq;
            errsum += (imp ? imp[i] : 1.0) * e * e;
        }
    } else {
        /* levels 0..15 over [min, max] (shrunk by clip), then d and m refitted by
         * weighted least squares to the rounded levels */
        float mn = x[0], mx = x[0];
        for (int i = 1; i < n; i++) mn = fminf(mn, x[i]), mx = fmaxf(mx, x[i]);
        float mid = 0.5f * (mn + mx), half = 0.5f * (mx - mn) * clip;
        float m = mid - half, d = 2.0f * half / 15.0f;
        int q[4096];
        for (int pass = 0; pass < 2; pass++) {
            float id = d != 0 ? 1.0f / d : 0.0f;
            double sw = 0, sq = 0, sqq = 0, sx = 0, sxq = 0;
            for (int i = 0; i < n; i++) {
                int v = (int)lrintf((x[i] - m) * id);
                v = v > 15 ? 15 : v < 0 ? 0 : v;
                q[i] = v;
                double w = imp ? imp[i] : 1.0;
                sw += w, sq += w * v, sqq += w * v * v, sx += w * x[i], sxq += w * x[i] * v;
            }
            double det = sw * sqq - sq * sq;
            if (det > 1e-20 * sw * sqq) {
                d = (float)((sw * sxq - sq * sx) / det);
                m = (float)((sqq * sx - sq * sxq) / det);
            }
        }
        wr16(blk, d);
        wr16(blk + 2, m);
        float dq = rd16(blk), mq = rd16(blk + 2);
        unsigned char *qb = blk + 4;
        memset(qb, 0, (size_t)n / 2);
        for (int i = 0; i < n; i++) {
            put_nibble(qb, i, q[i]);
            double e = x[i] - (q[i] * dq + mq);
            errsum += (imp ? imp[i] : 1.0) * e * e;
        }
    }
    return errsum;
}

void quant_quantize_row(dtype_t t, int group, const float *x, int64_t cols, const float *importance, void *out) {
    assert(quant_format_ok(t, group, cols) && !dtype_is_kq(t));
    size_t bb = quant_block_bytes(t, group);
    unsigned char *o = out;
    unsigned char tmp[4 + 4096];
    for (int64_t g = 0; g < cols / group; g++, o += bb) {
        const float *xg = x + g * group;
        const float *imp = importance ? importance + g * group : NULL;
        double best = quant_group(t, xg, group, 1.0f, imp, o);
        for (int k = 1; k <= 20 && t != XLLM_DT_Q8; k++) { /* clip factors 0.98 .. 0.6 */
            double e = quant_group(t, xg, group, 1.0f - 0.02f * (float)k, imp, tmp);
            if (e < best) {
                best = e;
                memcpy(o, tmp, bb);
            }
        }
    }
}

void quant_group_params(dtype_t t, int group, const float *x, const float *importance, float *d, float *m) {
    unsigned char blk[4 + 4096], tmp[4 + 4096];
    size_t bb = quant_block_bytes(t, group);
    double best = quant_group(t, x, group, 1.0f, importance, blk);
    for (int k = 1; k <= 20 && t != XLLM_DT_Q8; k++) {
        double e = quant_group(t, x, group, 1.0f - 0.02f * (float)k, importance, tmp);
        if (e < best) {
            best = e;
            memcpy(blk, tmp, bb);
        }
    }
    *d = rd16(blk);
    *m = t == XLLM_DT_Q4M ? rd16(blk + 2) : 0.0f;
}

int quant_level(dtype_t t, float x, float d, float m) {
    float id = d != 0 ? 1.0f / d : 0.0f;
    int v;
    switch (t) {
    case XLLM_DT_Q8: v = (int)lrintf(x * id); return v > 127 ? 127 : v < -127 ? -127 : v;
    case XLLM_DT_Q4: v = (int)lrintf(x * id); return v > 7 ? 7 : v < -8 ? -8 : v;
    default: v = (int)lrintf((x - m) * id); return v > 15 ? 15 : v < 0 ? 0 : v;
    }
}

float quant_value(dtype_t t, int q, float d, float m) { return t == XLLM_DT_Q4M ? q * d + m : q * d; }

void quant_pack_row(dtype_t t, int group, const int8_t *q, const float *d, const float *m, int64_t cols, void *out) {
    size_t bb = quant_block_bytes(t, group);
    unsigned char *b = out;
    for (int64_t g = 0; g < cols / group; g++, b += bb) {
        const int8_t *qg = q + g * group;
        wr16(b, d[g]);
        if (t == XLLM_DT_Q8) {
            memcpy(b + 2, qg, (size_t)group);
        } else if (t == XLLM_DT_Q4) {
            memset(b + 2, 0, (size_t)group / 2);
            for (int i = 0; i < group; i++) put_nibble(b + 2, i, qg[i] + 8);
        } else {
            wr16(b + 2, m[g]);
            memset(b + 4, 0, (size_t)group / 2);
            for (int i = 0; i < group; i++) put_nibble(b + 4, i, qg[i]);
        }
    }
}

void quant_dequantize_row(dtype_t t, int group, const void *row, int64_t cols, float *out) {
    if (dtype_is_kq(t)) {
        kq_dequantize_row(t, row, cols, out);
        return;
    }
    size_t bb = quant_block_bytes(t, group);
    const unsigned char *b = row;
    for (int64_t g = 0; g < cols / group; g++, b += bb) {
        float *o = out + g * group;
        if (t == XLLM_DT_Q8) {
            float d = rd16(b);
            const int8_t *q = (const int8_t *)(b + 2);
            for (int i = 0; i < group; i++) o[i] = q[i] * d;
        } else if (t == XLLM_DT_Q4) {
            float d = rd16(b);
            for (int i = 0; i < group; i++) o[i] = (get_nibble(b + 2, i) - 8) * d;
        } else {
            float d = rd16(b), m = rd16(b + 2);
            for (int i = 0; i < group; i++) o[i] = get_nibble(b + 4, i) * d + m;
        }
    }
}

/* ----------------------------------------------------------- activations */

void quant_activations(const float *x, int64_t cols, int8_t *q, float *d, int32_t *s, float *ds, int llama) {
    for (int64_t b = 0; b < cols / QK; b++) {
        const float *xb = x + b * QK;
        float amax = 0;
        int finite = 1;
        for (int i = 0; i < QK; i++) amax = fmaxf(amax, fabsf(xb[i])), finite &= fabsf(xb[i]) <= FLT_MAX;
        float db, id;
        quant_act_scale(amax, llama, &db, &id);
        /* Every kernel level does the same: a block holding inf or NaN becomes
         * q = 0, s = 0, d = NaN (the NaN reaches the outputs, where the engine
         * can see it; lrintf(NaN) and the sum of its INT_MINs are undefined);
         * a block so small that 1/d overflows (subnormal amax) becomes zeros. */
        if (!finite || !(id <= FLT_MAX)) {
            memset(q + b * QK, 0, QK);
            d[b] = finite ? db : NAN;
            s[b] = 0;
            ds[b] = d[b] * 0.0f;
            continue;
        }
        int32_t sum = 0;
        for (int i = 0; i < QK; i++) {
            int v = (int)lrintf(xb[i] * id);
            q[b * QK + i] = (int8_t)v;
            sum += v;
        }
        d[b] = db;
        s[b] = sum;
        ds[b] = quant_act_dsum(amax, db, sum, llama);
    }
}

/* ------------------------------------------------------------------- dot */

float quant_dot(dtype_t t, int group, const void *row, const int8_t *q, const float *d, const int32_t *s,
                const float *ds, int64_t cols) {
    size_t bb = quant_block_bytes(t, group);
    const unsigned char *b = row;
    int per = group / QK;
    float acc = 0;
    for (int64_t g = 0; g < cols / group; g++, b += bb) {
        if (t == XLLM_DT_Q8) {
            float dw = rd16(b);
            const int8_t *w = (const int8_t *)(b + 2);
            for (int k = 0; k < per; k++) {
                int64_t ab = g * per + k;
                int32_t isum = 0;
                for (int i = 0; i < QK; i++) isum += w[k * QK + i] * q[ab * QK + i];
                acc += dw * d[ab] * (float)isum;
            }
        } else if (t == XLLM_DT_Q4) {
            float dw = rd16(b);
            const unsigned char *w = b + 2;
            for (int k = 0; k < per; k++) {
                int64_t ab = g * per + k;
                const unsigned char *wb = w + k * (QK / 2);
                const int8_t *qa = q + ab * QK;
                int32_t isum = 0;
                for (int i = 0; i < 16; i++) isum += (wb[i] & 0xf) * qa[i] + (wb[i] >> 4) * qa[i + 16];
                /* (q - 8) * a = q * a - 8 * a */
                acc += dw * d[ab] * (float)(isum - 8 * s[ab]);
            }
        } else {
            float dw = rd16(b), mw = rd16(b + 2);
            const unsigned char *w = b + 4;
            for (int k = 0; k < per; k++) {
                int64_t ab = g * per + k;
                const unsigned char *wb = w + k * (QK / 2);
                const int8_t *qa = q + ab * QK;
                int32_t isum = 0;
                for (int i = 0; i < 16; i++) isum += (wb[i] & 0xf) * qa[i] + (wb[i] >> 4) * qa[i + 16];
                acc += dw * d[ab] * (float)isum + mw * ds[ab];
            }
        }
    }
    return acc;
}
