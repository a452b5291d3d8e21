/*
 * kernels_neon_impl.h - the NEON (aarch64) level, included twice: by
 * kernels_neon.c for baseline armv8-a (NEON_DOT 0: int8 products with
 * vmull_s8 + vpadalq_s16) and by kernels_neon_dot.c, compiled with
 * +dotprod (NEON_DOT 1: vdotq_s32). Both variants compute the same exact
 * int32 total per 32-block, so they give identical results; dispatch picks
 * the dotprod one when HWCAP_ASIMDDP says the CPU has it.
 *
 * Quantized matmul: signed weights (Q8 -127..127; Q4/Q4M nibbles 0..15) times
 * int8 activations; a chunk is 128 columns (4 blocks); the four block totals
 * are gathered into one int32x4 by pairwise adds (Q4 adds -8 * block sum,
 * prepared with the activations), then per block lane:
 * acc = fma(dw * da, float(total), acc) (+ fma(mw, da * s, acc) for Q4M), one
 * 4-lane accumulator per output, chunks in column order, vaddvq_f32 at the
 * end; the same in the GEMV and the GEMM (4 rows x 4 tokens) paths.
 * Float weights: four 4-lane fma accumulators per output (F16 by vcvt_f32_f16,
 * BF16 by a 16-bit shift, both exact), zero-padded tails.
 */
#include "backend/cpu/kernels.h"
#include "backend/cpu/kq_kernels.h"
#include "quant/quant.h"

#include <arm_neon.h>
#include <float.h>
#include <math.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

#define CH 128  /* columns per chunk */
#define ACH 192 /* prepared activations per chunk: q[128] int8, da[4], da*s[4] f32, -8*s[4] i32, pad */
#define PS 160  /* packed weight bytes per row and chunk: w[128], dw[4], mw[4], pad */
#define MR 4
#define NT 4

static int64_t n_chunks(int64_t cols) { return (cols + CH - 1) / CH; }

/* ------------------------------------------------------------ activations */

/* One block of 32 as quant_activations computes it. */
AI void quant_block(const float *x, int8_t *q, float *d, int32_t *s, float *ds, int llama) {
    float32x4_t v[8];
    for (int i = 0; i < 8; i++) v[i] = vld1q_f32(x + 4 * i);
    float32x4_t m = vabsq_f32(v[0]);
    for (int i = 1; i < 8; i++) m = vmaxq_f32(m, vabsq_f32(v[i]));
    float amax = vmaxvq_f32(m), db, id;
    quant_act_scale(amax, llama, &db, &id);
    uint32x4_t ok = vdupq_n_u32(~0u); /* |x| <= FLT_MAX: false for inf and NaN */
    for (int i = 0; i < 8; i++) ok = vandq_u32(ok, vcleq_f32(vabsq_f32(v[i]), vdupq_n_f32(FLT_MAX)));
    int nonfinite = vminvq_u32(ok) == 0;
    if (nonfinite || !(id <= FLT_MAX)) { /* as quant_activations: no int conversion of NaN or inf */
        vst1q_s8(q, vdupq_n_s8(0));
        vst1q_s8(q + 16, vdupq_n_s8(0));
        *d = nonfinite ? NAN : db;
        *s = 0;
        *ds = *d * 0.0f;
        return;
    }
    int32x4_t sum = vdupq_n_s32(0);
    int16x8_t h[4];
    for (int i = 0; i < 4; i++) {
        int32x4_t a = vcvtnq_s32_f32(vmulq_n_f32(v[2 * i], id)); /* nearest even, as lrintf */
        int32x4_t b = vcvtnq_s32_f32(vmulq_n_f32(v[2 * i + 1], id));
        sum = vaddq_s32(sum, vaddq_s32(a, b));
        h[i] = vcombine_s16(vmovn_s32(a), vmovn_s32(b));
    }
    vst1q_s8(q, vcombine_s8(vmovn_s16(h[0]), vmovn_s16(h[1])));
    vst1q_s8(q + 16, vcombine_s8(vmovn_s16(h[2]), vmovn_s16(h[3])));
    *d = db;
    *s = vaddvq_s32(sum);
    *ds = quant_act_dsum(amax, db, *s, llama);
}

static void quant_act(const float *x, int64_t cols, int8_t *q, float *d, int32_t *s, float *ds, int llama) {
    for (int64_t b = 0; b < cols / QK; b++) quant_block(x + b * QK, q + b * QK, &d[b], &s[b], &ds[b], llama);
}

static size_t act_bytes(int64_t cols) { return (size_t)n_chunks(cols) * ACH; }

static void act_prepare(const float *x, int64_t cols, void *out, int llama) {
    int64_t nb = cols / QK;
    for (int64_t c = 0; c < n_chunks(cols); c++) {
        uint8_t *o = (uint8_t *)out + c * ACH;
        float *dx = (float *)(o + CH), *ds = dx + 4;
        int32_t *c8 = (int32_t *)(ds + 4);
        for (int j = 0; j < 4; j++) {
            int64_t b = c * 4 + j;
            float db = 0, dsum = 0;
            int32_t sb = 0;
            if (b < nb) quant_block(x + b * QK, (int8_t *)o + 32 * j, &db, &sb, &dsum, llama);
            else memset(o + 32 * j, 0, 32); /* a = 0 beyond the row */
            dx[j] = db;
            ds[j] = dsum;
            c8[j] = -8 * sb;
        }
    }
}

/* ---------------------------------------------------------------- weights */

/* Exact int32 total of 32 products, as 4 partial lanes (grouping differs
 * between the variants; the total does not). */
AI int32x4_t dot32(int8x16_t w0, int8x16_t w1, const int8_t *a) {
    int8x16_t a0 = vld1q_s8(a), a1 = vld1q_s8(a + 16);
#if NEON_DOT
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, a0), w1, a1);
#else
    int32x4_t p = vpaddlq_s16(vmull_s8(vget_low_s8(w0), vget_low_s8(a0)));
    p = vpadalq_s16(p, vmull_high_s8(w0, a0));
    p = vpadalq_s16(p, vmull_s8(vget_low_s8(w1), vget_low_s8(a1)));
    return vpadalq_s16(p, vmull_high_s8(w1, a1));
#endif
}

typedef struct {
    int8x16_t w[8]; /* 4 sub-blocks x 2 halves */
    float32x4_t dw, mw;
} wchunk;

AI uint16_t rd16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

AI float32x4_t f16x4(const uint16_t *h) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h))); }

/* Chunk c of a row, nsub (1..4) of its 4 sub-blocks present (the rest zero). */
AI wchunk unpack(const uint8_t *row, dtype_t t, int g, size_t bb, int64_t c, int nsub) {
    wchunk w;
    uint16_t dh[4] = {0, 0, 0, 0}, mh[4] = {0, 0, 0, 0};
    for (int j = 0; j < 4; j++) {
        if (j >= nsub) {
            w.w[2 * j] = w.w[2 * j + 1] = vdupq_n_s8(0);
            continue;
        }
        int64_t e = (c * 4 + j) * QK;
        const uint8_t *bp = row + (size_t)(e / g) * bb;
        int off = (int)(e % g);
        dh[j] = rd16(bp);
        if (t == XLLM_DT_Q8) {
            w.w[2 * j] = vld1q_s8((const int8_t *)(bp + 2 + off));
            w.w[2 * j + 1] = vld1q_s8((const int8_t *)(bp + 2 + off + 16));
        } else {
            int hdr = t == XLLM_DT_Q4M ? 4 : 2;
            if (t == XLLM_DT_Q4M) mh[j] = rd16(bp + 2);
            uint8x16_t v = vld1q_u8(bp + hdr + off / 2);
            w.w[2 * j] = vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0f)));
            w.w[2 * j + 1] = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
        }
    }
    w.dw = f16x4(dh);
    w.mw = t == XLLM_DT_Q4M ? f16x4(mh) : vdupq_n_f32(0);
    return w;
}

/* The per-output arithmetic of one chunk, shared by GEMV and GEMM. */
AI float32x4_t step(float32x4_t acc, dtype_t t, const int8x16_t *w, float32x4_t dw, float32x4_t mw,
                    const uint8_t *a) {
    const int8_t *q = (const int8_t *)a;
    int32x4_t p0 = dot32(w[0], w[1], q), p1 = dot32(w[2], w[3], q + 32);
    int32x4_t p2 = dot32(w[4], w[5], q + 64), p3 = dot32(w[6], w[7], q + 96);
    int32x4_t tot = vpaddq_s32(vpaddq_s32(p0, p1), vpaddq_s32(p2, p3)); /* block totals */
    if (t == XLLM_DT_Q4) tot = vaddq_s32(tot, vld1q_s32((const int32_t *)(a + CH + 32)));
    float32x4_t da = vld1q_f32((const float *)(a + CH));
    acc = vfmaq_f32(acc, vmulq_f32(dw, da), vcvtq_f32_s32(tot));
    if (t == XLLM_DT_Q4M) acc = vfmaq_f32(acc, mw, vld1q_f32((const float *)(a + CH + 16)));
    return acc;
}

/* ------------------------------------------------------- quantized matmul */

#define ROWS_I(F) F(0) F(1) F(2) F(3)
#define TILE_IJ(F)                                                                                                 \
    F(0, 0) F(0, 1) F(0, 2) F(0, 3) F(1, 0) F(1, 1) F(1, 2) F(1, 3) F(2, 0) F(2, 1) F(2, 2) F(2, 3) F(3, 0) F(3, 1)  \
        F(3, 2) F(3, 3)

/* What unpacking a stored row needs beyond its type and group (the shared
 * driver, kernels_driver_q.h, passes it): nothing at this level. */
typedef struct {
    char none;
} qlayout;

AI qlayout make_layout(dtype_t t, int g) {
    (void)t, (void)g;
    qlayout L = {0};
    return L;
}

/* GEMV: one row against one token; rows are read one after another, in
 * memory order. */
AI void gemv_q(const uint8_t *W, size_t rb, dtype_t t, int g, size_t bb, int64_t cols, const uint8_t *act,
               const qlayout *L, const float *bias, float *y, int64_t r, const uint8_t *end) {
    (void)L;
    int64_t nfull = cols / CH, nch = n_chunks(cols);
    int tail = (int)(cols % CH) / QK;
    const uint8_t *row = W + (size_t)r * rb;
    size_t cb = rb / (size_t)nch; /* about a chunk's bytes */
    float32x4_t acc = vdupq_n_f32(0);
    for (int64_t c = 0; c < nch; c++) {
        kernels_prefetch_ahead(row + (size_t)c * cb, cb, end);
        wchunk w = c < nfull ? unpack(row, t, g, bb, c, 4) : unpack(row, t, g, bb, c, tail);
        acc = step(acc, t, w.w, w.dw, w.mw, act + c * ACH);
    }
    y[r] = vaddvq_f32(acc) + (bias ? bias[r] : 0.0f);
}

AI void pack_q(const uint8_t *W, size_t rb, dtype_t t, int g, size_t bb, int64_t cols, const qlayout *L, int64_t r,
               int64_t r1, uint8_t *pack) {
    (void)L;
    int64_t nfull = cols / CH, nch = n_chunks(cols);
    int tail = (int)(cols % CH) / QK;
    for (int64_t c = 0; c < nch; c++)
        for (int i = 0; i < MR; i++) {
            const uint8_t *row = W + (size_t)(r + i < r1 ? r + i : r1 - 1) * rb;
            wchunk w = c < nfull ? unpack(row, t, g, bb, c, 4) : unpack(row, t, g, bb, c, tail);
            uint8_t *p = pack + (size_t)(c * MR + i) * PS;
            for (int k = 0; k < 8; k++) vst1q_s8((int8_t *)p + 16 * k, w.w[k]);
            vst1q_f32((float *)(p + 128), w.dw);
            vst1q_f32((float *)(p + 144), w.mw);
        }
}

/* Register tile: 4 packed rows x nt (1..4) tokens; stores rows below r1. */
AI void tile_q(const uint8_t *pack, int64_t nch, dtype_t t, int nt, const uint8_t *act, size_t astride,
               const float *bias, float *y, size_t ldy, int64_t r, int64_t r1) {
#define TQ_DECL(i, j) float32x4_t c##i##j = vdupq_n_f32(0);
    TILE_IJ(TQ_DECL)
    for (int64_t c = 0; c < nch; c++) {
        const uint8_t *p = pack + (size_t)(c * MR) * PS;
        const uint8_t *a0 = act + c * ACH, *a1 = a0 + astride, *a2 = a1 + astride, *a3 = a2 + astride;
#define TQ_ROW(i)                                                                                                  \
    {                                                                                                              \
        const uint8_t *q = p + (size_t)(i)*PS;                                                                     \
        int8x16_t w[8];                                                                                            \
        for (int k = 0; k < 8; k++) w[k] = vld1q_s8((const int8_t *)q + 16 * k);                                   \
        float32x4_t dw = vld1q_f32((const float *)(q + 128)), mw = vld1q_f32((const float *)(q + 144));            \
        c##i##0 = step(c##i##0, t, w, dw, mw, a0);                                                                 \
        if (nt > 1) c##i##1 = step(c##i##1, t, w, dw, mw, a1);                                                     \
        if (nt > 2) c##i##2 = step(c##i##2, t, w, dw, mw, a2);                                                     \
        if (nt > 3) c##i##3 = step(c##i##3, t, w, dw, mw, a3);                                                     \
    }
        ROWS_I(TQ_ROW)
    }
#define TQ_STORE(i, j)                                                                                             \
    if (r + i < r1 && j < nt) y[(size_t)(j)*ldy + (size_t)(r + i)] = vaddvq_f32(c##i##j) + (bias ? bias[r + i] : 0.0f);
    TILE_IJ(TQ_STORE)
}

#define TQ_CASE(TY)                                                                                                \
    case TY:                                                                                                       \
        if (nt == 4) tile_q(pack, nch, TY, 4, act, astride, bias, y, ldy, r, r1);                                  \
        else if (nt == 3) tile_q(pack, nch, TY, 3, act, astride, bias, y, ldy, r, r1);                             \
        else if (nt == 2) tile_q(pack, nch, TY, 2, act, astride, bias, y, ldy, r, r1);                             \
        else tile_q(pack, nch, TY, 1, act, astride, bias, y, ldy, r, r1);                                          \
        break;

static void tile_q_any(const uint8_t *pack, int64_t nch, dtype_t t, int nt, const uint8_t *act, size_t astride,
                       const float *bias, float *y, size_t ldy, int64_t r, int64_t r1) {
    switch (t) {
        TQ_CASE(XLLM_DT_Q8) TQ_CASE(XLLM_DT_Q4) TQ_CASE(XLLM_DT_Q4M)
    default: break;
    }
}

/* The loops (kernels_driver_q.h): blocks of tokens whose activations fit 256 KiB. */
#define QMM_BLOCK_BYTES ((size_t)256 << 10)
#include "backend/cpu/kernels_driver_q.h"

static void matmul_q(const matrix *W, const void *act, size_t astride, int T, const float *bias, float *y, size_t ldy,
                     int64_t r0, int64_t r1, void *scratch) {
    if (r1 <= r0) return;
    matmul_q_stored(W, act, astride, T, bias, y, ldy, r0, r1, scratch);
}

/* matmul_q's unpacked rows, or the P32 / Q23 kernels' tile and decoded group (kq_pack32/23_neon_impl.h) */
static size_t scratch_bytes(int64_t cols) {
    size_t q = (size_t)MR * (size_t)n_chunks(cols) * PS + 64, p32 = kq_pk_neon_scratch_bytes(cols);
    return q > p32 ? q : p32;
}

/* The level's packed layout: only llama.cpp's IQ4_NL, IQ4_XS, Q5_0, Q5_1
 * (P32) and Q2_K, Q3_K (Q23), tiles of 16 rows read by matmul_kq; everything
 * else stays as stored. */
static int64_t packed_rows(const matrix *W) { return kq_pk_neon_type(W) ? 16 : 4; }

/* ----------------------------------------------------------- float matmul */

/* 4 weights from element i of a row (n of them present, the rest zero), as f32. */
AI float32x4_t load_w(const void *row, dtype_t t, int64_t i, int n) {
    if (t == XLLM_DT_F32) {
        if (n == 4) return vld1q_f32((const float *)row + i);
        float buf[4] = {0, 0, 0, 0};
        memcpy(buf, (const float *)row + i, (size_t)n * 4);
        return vld1q_f32(buf);
    }
    uint16x4_t h;
    if (n == 4) {
        h = vld1_u16((const uint16_t *)row + i);
    } else {
        uint16_t buf[4] = {0, 0, 0, 0};
        memcpy(buf, (const uint16_t *)row + i, (size_t)n * 2);
        h = vld1_u16(buf);
    }
    if (t == XLLM_DT_F16) return vcvt_f32_f16(vreinterpret_f16_u16(h));
    return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
}

AI float32x4_t load_x(const float *x, int n) {
    if (n == 4) return vld1q_f32(x);
    float buf[4] = {0, 0, 0, 0};
    memcpy(buf, x, (size_t)n * 4);
    return vld1q_f32(buf);
}

/* Float weights: four 4-lane accumulators per output, one per quarter of
 * each 16 columns (the scalar level's 16 lanes), so a GEMV row has four
 * independent fma chains; a tail of n < 16 columns is split the same way
 * (zero-padded quarters); the result is the pairwise sum
 * vaddvq((q0 + q1) + (q2 + q3)) + bias, the same in the GEMV and in the
 * 3 rows x 2 tokens tile. */
#define MRF 3
#define NTF 2
#define FTILE_IJ(F) F(0, 0) F(0, 1) F(1, 0) F(1, 1) F(2, 0) F(2, 1)

AI float sum4q(float32x4_t q0, float32x4_t q1, float32x4_t q2, float32x4_t q3) {
    return vaddvq_f32(vaddq_f32(vaddq_f32(q0, q1), vaddq_f32(q2, q3)));
}

AI void tile_f(const uint8_t *W, size_t rb, dtype_t t, int64_t cols, int nt, const float *x, size_t xs,
               const float *bias, float *y, size_t ldy, int64_t r, int64_t r1) {
    const uint8_t *row0 = W + (size_t)r * rb, *row1 = W + (size_t)(r + 1 < r1 ? r + 1 : r) * rb;
    const uint8_t *row2 = W + (size_t)(r + 2 < r1 ? r + 2 : r) * rb;
#define TF_DECL(i, j)                                                                                              \
    float32x4_t p##i##j = vdupq_n_f32(0), q##i##j = p##i##j, u##i##j = p##i##j, v##i##j = p##i##j;
    FTILE_IJ(TF_DECL)
#define TF_Q(acc, off, n)                                                                                          \
    {                                                                                                              \
        float32x4_t x0 = load_x(x + c + (off), n), x1 = nt > 1 ? load_x(x + xs + c + (off), n) : x0;              \
        float32x4_t w = load_w(row0, t, c + (off), n);                                                             \
        acc##00 = vfmaq_f32(acc##00, w, x0);                                                                       \
        if (nt > 1) acc##01 = vfmaq_f32(acc##01, w, x1);                                                           \
        w = load_w(row1, t, c + (off), n);                                                                         \
        acc##10 = vfmaq_f32(acc##10, w, x0);                                                                       \
        if (nt > 1) acc##11 = vfmaq_f32(acc##11, w, x1);                                                           \
        w = load_w(row2, t, c + (off), n);                                                                         \
        acc##20 = vfmaq_f32(acc##20, w, x0);                                                                       \
        if (nt > 1) acc##21 = vfmaq_f32(acc##21, w, x1);                                                           \
    }
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16) {
        TF_Q(p, 0, 4)
        TF_Q(q, 4, 4)
        TF_Q(u, 8, 4)
        TF_Q(v, 12, 4)
    }
    if (c < cols) {
        int n = (int)(cols - c);
        TF_Q(p, 0, n < 4 ? n : 4)
        if (n > 4) TF_Q(q, 4, n - 4 < 4 ? n - 4 : 4)
        if (n > 8) TF_Q(u, 8, n - 8 < 4 ? n - 8 : 4)
        if (n > 12) TF_Q(v, 12, n - 12)
    }
#define TF_STORE(i, j)                                                                                             \
    if (r + i < r1 && j < nt)                                                                                      \
        y[(size_t)(j)*ldy + (size_t)(r + i)] = sum4q(p##i##j, q##i##j, u##i##j, v##i##j) + (bias ? bias[r + i] : 0.0f);
    FTILE_IJ(TF_STORE)
}

AI void tile_f_any(const uint8_t *W, size_t rb, dtype_t t, int64_t cols, int nt, const float *x, size_t xs,
                   const float *bias, float *y, size_t ldy, int64_t r, int64_t r1) {
    if (nt == 2) tile_f(W, rb, t, cols, 2, x, xs, bias, y, ldy, r, r1);
    else tile_f(W, rb, t, cols, 1, x, xs, bias, y, ldy, r, r1);
}

/* GEMV: one row against one token, rows in memory order; the same
 * arithmetic per output as tile_f. */
AI void gemv_f(const uint8_t *W, size_t rb, dtype_t t, int64_t cols, const float *x, const float *bias, float *y,
               int64_t r, const uint8_t *end) {
    const uint8_t *row = W + (size_t)r * rb;
    size_t es = rb / (size_t)cols;
    float32x4_t p = vdupq_n_f32(0), q = p, u = p, v = p;
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16) {
        kernels_prefetch_ahead(row + (size_t)c * es, 16 * es, end);
        p = vfmaq_f32(p, load_w(row, t, c, 4), load_x(x + c, 4));
        q = vfmaq_f32(q, load_w(row, t, c + 4, 4), load_x(x + c + 4, 4));
        u = vfmaq_f32(u, load_w(row, t, c + 8, 4), load_x(x + c + 8, 4));
        v = vfmaq_f32(v, load_w(row, t, c + 12, 4), load_x(x + c + 12, 4));
    }
    if (c < cols) {
        int n = (int)(cols - c);
        p = vfmaq_f32(p, load_w(row, t, c, n < 4 ? n : 4), load_x(x + c, n < 4 ? n : 4));
        if (n > 4) q = vfmaq_f32(q, load_w(row, t, c + 4, n - 4 < 4 ? n - 4 : 4), load_x(x + c + 4, n - 4 < 4 ? n - 4 : 4));
        if (n > 8) u = vfmaq_f32(u, load_w(row, t, c + 8, n - 8 < 4 ? n - 8 : 4), load_x(x + c + 8, n - 8 < 4 ? n - 8 : 4));
        if (n > 12) v = vfmaq_f32(v, load_w(row, t, c + 12, n - 12), load_x(x + c + 12, n - 12));
    }
    y[r] = sum4q(p, q, u, v) + (bias ? bias[r] : 0.0f);
}

/* The loops (kernels_driver_f.h): blocks of tokens whose inputs fit 192 KiB. */
#define FMM_BLOCK_BYTES ((size_t)192 << 10)
#define FMM_BLOCK_MAX 128
#include "backend/cpu/kernels_driver_f.h"

/* The level's table: kernels_neon.c and kernels_neon_dot.c define NEON_TABLE
 * and NEON_NAME before including this file. */
const cpu_kernels NEON_TABLE = {
    .level = CPU_NEON,
    .name = NEON_NAME,
    .act_bytes = act_bytes,
    .act_prepare = act_prepare,
    .quant_act = quant_act,
    .scratch_bytes = scratch_bytes,
    .matmul_q = matmul_q,
    .matmul_f = matmul_f,
    .matmul_kq = NEON_DOT ? kq_matmul_neon_dot : kq_matmul_neon,
    .kq_act = kq_act_neon,
    .packed_bytes = kq_pk_neon_packed_bytes,
    .repack = kq_pk_neon_repack,
    .packed_rows = packed_rows,
    .attn = &cpu_attn_neon,
};
