/*
 * kernels_avx2.c - AVX2 + FMA + F16C kernels (x86-64 since Haswell / Zen 1).
 * Compiled with those target flags; called only when the CPU has them.
 *
 * Quantized matmul, integer part, with vpmaddubsw (unsigned x signed bytes,
 * pairs summed into saturating int16) and vpmaddwd (int16 pairs into int32),
 * exact in every case:
 *  - Q4 / Q4M: nibbles (0..15, unsigned) times int8 activations: a pair is
 *    at most 2 * 15 * 127 and the two halves of a block added in int16 stay
 *    below 2^15. Q4's -8 is a per-token lane constant: lanes start from
 *    -8 * (sum of the lane's activations), prepared with the activations;
 *  - Q8: |w| (unsigned) times a with w's sign (vpsignb): |pair| <= 2 * 128 * 127.
 * Layout: a chunk is 64 columns (2 blocks); A0 = [b0 e0..15 | b1 e0..15],
 * A1 = [b0 e16..31 | b1 e16..31], 4 int32 lanes per block (lane 4b + l sums
 * elements 4l..4l+3 and 16+4l..16+4l+3 of block b). Float part per lane:
 * acc = fma(dw * da, float(isum), acc) (+ fma(mw, da * s, acc) on lane 4b for
 * Q4M), one 8-lane accumulator per output, blocks in column order, a fixed
 * horizontal sum; identical in the GEMV and GEMM (4 rows x 2 tokens) paths.
 *
 * Float weights: two 8-lane fma accumulators per output (16 lanes), exact F16
 * (vcvtph2ps) and BF16 (shift) conversion, zero-padded tails.
 */
#if defined(__x86_64__)
#include "backend/cpu/kernels.h"
#include "quant/quant.h"

#include <immintrin.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

#define CH 64   /* columns per chunk */
#define ACH 160 /* prepared activations per chunk: q[64] int8, da[8] f32, da*s[8] f32, -8*lanesum[8] i32 */
#define PS 160  /* packed weight bytes per row and chunk */
#define MR 4
#define NT 2
#define MRF 3
#define NTF 2

static int64_t n_chunks(int64_t cols) { return (cols + CH - 1) / CH; }

AI float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

AI int32_t hsum8i(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

/* ------------------------------------------------------------ activations */

/* One block of 32 as quant_activations computes it: 32 int8 levels in order. */
AI __m256i quant_block(const float *x, float *d, int32_t *s) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8), x2 = _mm256_loadu_ps(x + 16),
           x3 = _mm256_loadu_ps(x + 24);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, x0), _mm256_andnot_ps(sign, x1)),
                             _mm256_max_ps(_mm256_andnot_ps(sign, x2), _mm256_andnot_ps(sign, x3)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    float amax = _mm_cvtss_f32(m4);
    float db = amax / 127.0f, id = db != 0 ? 1.0f / db : 0.0f;
    __m256 vid = _mm256_set1_ps(id);
    __m256i v0 = _mm256_cvtps_epi32(_mm256_mul_ps(x0, vid)), v1 = _mm256_cvtps_epi32(_mm256_mul_ps(x1, vid));
    __m256i v2 = _mm256_cvtps_epi32(_mm256_mul_ps(x2, vid)), v3 = _mm256_cvtps_epi32(_mm256_mul_ps(x3, vid));
    *d = db;
    *s = hsum8i(_mm256_add_epi32(_mm256_add_epi32(v0, v1), _mm256_add_epi32(v2, v3)));
    __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(v0, v1), _mm256_packs_epi32(v2, v3));
    return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static void quant_act(const float *x, int64_t cols, int8_t *q, float *d, int32_t *s) {
    for (int64_t b = 0; b < cols / QK; b++)
        _mm256_storeu_si256((__m256i *)(q + b * QK), quant_block(x + b * QK, &d[b], &s[b]));
}

static size_t act_bytes(int64_t cols) { return (size_t)n_chunks(cols) * ACH; }

static void act_prepare(const float *x, int64_t cols, void *out) {
    int64_t nb = cols / QK;
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int64_t c = 0; c < n_chunks(cols); c++) {
        uint8_t *o = (uint8_t *)out + c * ACH;
        float *dx = (float *)(o + CH), *dm = dx + 8;
        for (int j = 0; j < 2; j++) {
            int64_t b = c * 2 + j;
            float db = 0, dsum = 0;
            __m256i v = _mm256_setzero_si256(); /* a = 0 beyond the row */
            if (b < nb) {
                int32_t sb;
                v = quant_block(x + b * QK, &db, &sb);
                dsum = db * (float)sb;
            }
            _mm_storeu_si128((__m128i *)(o + 16 * j), _mm256_castsi256_si128(v));
            _mm_storeu_si128((__m128i *)(o + 32 + 16 * j), _mm256_extracti128_si256(v, 1));
            for (int l = 0; l < 4; l++) dx[4 * j + l] = db, dm[4 * j + l] = l == 0 ? dsum : 0.0f;
        }
        /* -8 * the lane sums of the activations (Q4's offset) */
        __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(ones8, _mm256_loadu_si256((const __m256i *)o)),
                                     _mm256_maddubs_epi16(ones8, _mm256_loadu_si256((const __m256i *)(o + 32))));
        __m256i ls = _mm256_madd_epi16(p, ones16);
        _mm256_storeu_si256((__m256i *)(o + CH + 64), _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(ls, 3)));
    }
}

/* ---------------------------------------------------------------- weights */

typedef struct {
    __m256i w0, w1, x0, x1; /* Q8: w and |w|; Q4, Q4M: the nibbles */
    __m256 dw, mw;
} wchunk;

AI uint16_t rd16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

AI __m256 expand2(uint16_t a, uint16_t b) {
    return _mm256_cvtph_ps(_mm_set_epi16((short)b, (short)b, (short)b, (short)b, (short)a, (short)a, (short)a, (short)a));
}

/* Chunk c of a row, nsub (1..2) of its 2 sub-blocks present (the rest zero);
 * g: the group, a multiple of 32 (constant when inlined). */
AI wchunk unpack(const uint8_t *row, xllm_dtype t, int g, size_t bb, int64_t c, int nsub) {
    wchunk w;
    const uint8_t *bp[2] = {row, row};
    int off[2] = {0, 0};
    uint16_t dh[2] = {0, 0}, mh[2] = {0, 0};
    for (int j = 0; j < nsub; j++) {
        int64_t e = (c * 2 + j) * QK;
        bp[j] = row + (size_t)(e / g) * bb;
        off[j] = (int)(e % g);
        dh[j] = rd16(bp[j]);
        if (t == XLLM_DT_Q4M) mh[j] = rd16(bp[j] + 2);
    }
    if (t == XLLM_DT_Q8) {
        __m256i s0 = _mm256_loadu_si256((const __m256i *)(bp[0] + 2 + off[0]));
        __m256i s1 = nsub > 1 ? _mm256_loadu_si256((const __m256i *)(bp[1] + 2 + off[1])) : _mm256_setzero_si256();
        w.w0 = _mm256_permute2x128_si256(s0, s1, 0x20);
        w.w1 = _mm256_permute2x128_si256(s0, s1, 0x31);
        w.x0 = _mm256_abs_epi8(w.w0);
        w.x1 = _mm256_abs_epi8(w.w1);
    } else {
        int hdr = t == XLLM_DT_Q4M ? 4 : 2;
        __m128i s0 = _mm_loadu_si128((const __m128i *)(bp[0] + hdr + off[0] / 2));
        __m128i s1 = nsub > 1 ? _mm_loadu_si128((const __m128i *)(bp[1] + hdr + off[1] / 2)) : _mm_setzero_si128();
        __m256i v = _mm256_set_m128i(s1, s0);
        const __m256i m4 = _mm256_set1_epi8(0x0f);
        w.w0 = _mm256_and_si256(v, m4);
        w.w1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        w.x0 = w.x1 = _mm256_setzero_si256();
    }
    w.dw = expand2(dh[0], dh[1]);
    w.mw = t == XLLM_DT_Q4M ? expand2(mh[0], mh[1]) : _mm256_setzero_ps();
    return w;
}

typedef struct {
    __m256i a0, a1, c8;
    __m256 dx, dm;
} achunk;

AI achunk load_act(const uint8_t *a, xllm_dtype t) {
    achunk r;
    r.a0 = _mm256_loadu_si256((const __m256i *)a);
    r.a1 = _mm256_loadu_si256((const __m256i *)(a + 32));
    r.dx = _mm256_loadu_ps((const float *)(a + CH));
    r.dm = t == XLLM_DT_Q4M ? _mm256_loadu_ps((const float *)(a + CH + 32)) : _mm256_setzero_ps();
    r.c8 = t == XLLM_DT_Q4 ? _mm256_loadu_si256((const __m256i *)(a + CH + 64)) : _mm256_setzero_si256();
    return r;
}

/* The per-output arithmetic of one chunk, shared by GEMV and GEMM. */
AI __m256 step(__m256 acc, xllm_dtype t, __m256i w0, __m256i w1, __m256i x0, __m256i x1, __m256 dw, __m256 mw,
               achunk a) {
    const __m256i ones16 = _mm256_set1_epi16(1);
    __m256i is;
    if (t == XLLM_DT_Q8) {
        __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(x0, _mm256_sign_epi8(a.a0, w0)), ones16);
        __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(x1, _mm256_sign_epi8(a.a1, w1)), ones16);
        is = _mm256_add_epi32(p0, p1);
    } else {
        __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(w0, a.a0), _mm256_maddubs_epi16(w1, a.a1));
        is = _mm256_madd_epi16(p, ones16);
        if (t == XLLM_DT_Q4) is = _mm256_add_epi32(is, a.c8);
    }
    acc = _mm256_fmadd_ps(_mm256_mul_ps(dw, a.dx), _mm256_cvtepi32_ps(is), acc);
    if (t == XLLM_DT_Q4M) acc = _mm256_fmadd_ps(mw, a.dm, acc);
    return acc;
}

/* ------------------------------------------------------- quantized matmul */

/* Explicit accumulators (arrays of vectors may be kept in memory). */
#define ROWS_I(F) F(0) F(1) F(2) F(3)
#define TILE_IJ(F) F(0, 0) F(0, 1) F(1, 0) F(1, 1) F(2, 0) F(2, 1) F(3, 0) F(3, 1)

/* GEMV: one row against one token; rows are read one after another, in
 * memory order (4 interleaved row streams starve the hardware prefetchers). */
AI void gemv_q(const uint8_t *W, size_t rb, xllm_dtype t, int g, size_t bb, int64_t cols, const uint8_t *act,
               const float *bias, float *y, int64_t r, const uint8_t *end) {
    int64_t nfull = cols / CH, nch = n_chunks(cols);
    int tail = (int)(cols % CH) / QK;
    const uint8_t *row = W + (size_t)r * rb;
    size_t cb = rb / (size_t)nch; /* about a chunk's bytes */
    __m256 acc = _mm256_setzero_ps();
    for (int64_t c = 0; c < nch; c++) {
        kernels_prefetch_ahead(row + (size_t)c * cb, cb, end);
        wchunk w = c < nfull ? unpack(row, t, g, bb, c, 2) : unpack(row, t, g, bb, c, tail);
        acc = step(acc, t, w.w0, w.w1, w.x0, w.x1, w.dw, w.mw, load_act(act + c * ACH, t));
    }
    y[r] = hsum8(acc) + (bias ? bias[r] : 0.0f);
}

/* Unpack rows r + i (i < 4, clamped) into pack: chunk-major, row-minor. */
AI void pack_q(const uint8_t *W, size_t rb, xllm_dtype t, int g, size_t bb, int64_t cols, int64_t r, int64_t r1,
               uint8_t *pack) {
    int64_t nfull = cols / CH, nch = n_chunks(cols);
    int tail = (int)(cols % CH) / QK;
    for (int64_t c = 0; c < nch; c++)
        for (int i = 0; i < MR; i++) {
            const uint8_t *row = W + (size_t)(r + i < r1 ? r + i : r1 - 1) * rb;
            wchunk w = c < nfull ? unpack(row, t, g, bb, c, 2) : unpack(row, t, g, bb, c, tail);
            uint8_t *p = pack + (size_t)(c * MR + i) * PS;
            _mm256_store_si256((__m256i *)p, w.w0);
            _mm256_store_si256((__m256i *)(p + 32), w.w1);
            /* |w| (Q8) or mw (Q4M) */
            _mm256_store_si256((__m256i *)(p + 64), t == XLLM_DT_Q4M ? _mm256_castps_si256(w.mw) : w.x0);
            _mm256_store_si256((__m256i *)(p + 96), w.x1);
            _mm256_store_ps((float *)(p + 128), w.dw);
        }
}

/* Register tile: 4 packed rows x nt (1..2) tokens; stores rows below r1. */
AI void tile_q(const uint8_t *pack, int64_t nch, xllm_dtype t, int nt, const uint8_t *act, size_t astride,
               const float *bias, float *y, size_t ldy, int64_t r, int64_t r1) {
#define TQ_DECL(i, j) __m256 c##i##j = _mm256_setzero_ps();
    TILE_IJ(TQ_DECL)
    for (int64_t c = 0; c < nch; c++) {
        const uint8_t *p = pack + (size_t)(c * MR) * PS;
        achunk a0 = load_act(act + c * ACH, t);
        achunk a1 = nt > 1 ? load_act(act + astride + c * ACH, t) : a0;
#define TQ_ROW(i)                                                                                                  \
    {                                                                                                              \
        const uint8_t *q = p + (size_t)(i)*PS;                                                                     \
        __m256i w0 = _mm256_load_si256((const __m256i *)q), w1 = _mm256_load_si256((const __m256i *)(q + 32));    \
        __m256i x0 = t == XLLM_DT_Q8 ? _mm256_load_si256((const __m256i *)(q + 64)) : _mm256_setzero_si256();      \
        __m256i x1 = t == XLLM_DT_Q8 ? _mm256_load_si256((const __m256i *)(q + 96)) : _mm256_setzero_si256();      \
        __m256 mw = t == XLLM_DT_Q4M ? _mm256_load_ps((const float *)(q + 64)) : _mm256_setzero_ps();              \
        __m256 dw = _mm256_load_ps((const float *)(q + 128));                                                      \
        c##i##0 = step(c##i##0, t, w0, w1, x0, x1, dw, mw, a0);                                                    \
        if (nt > 1) c##i##1 = step(c##i##1, t, w0, w1, x0, x1, dw, mw, a1);                                        \
    }
        ROWS_I(TQ_ROW)
    }
#define TQ_STORE(i, j)                                                                                             \
    if (r + i < r1 && j < nt) y[(size_t)(j)*ldy + (size_t)(r + i)] = hsum8(c##i##j) + (bias ? bias[r + i] : 0.0f);
    TILE_IJ(TQ_STORE)
}

#define TQ_CASE(TY)                                                                                                \
    case TY:                                                                                                       \
        if (nt == 2) tile_q(pack, nch, TY, 2, act, astride, bias, y, ldy, r, r1);                                  \
        else tile_q(pack, nch, TY, 1, act, astride, bias, y, ldy, r, r1);                                          \
        break;

static void tile_q_any(const uint8_t *pack, int64_t nch, xllm_dtype t, int nt, const uint8_t *act, size_t astride,
                       const float *bias, float *y, size_t ldy, int64_t r, int64_t r1) {
    switch (t) {
        TQ_CASE(XLLM_DT_Q8) TQ_CASE(XLLM_DT_Q4) TQ_CASE(XLLM_DT_Q4M)
    default: break;
    }
}

static int token_block(size_t bytes_per_token) {
    size_t tb = ((size_t)256 << 10) / (bytes_per_token ? bytes_per_token : 1);
    if (tb < NT) tb = NT;
    if (tb > 96) tb = 96;
    return (int)(tb / NT * NT);
}

AI void matmul_q_t(const matrix *W, xllm_dtype t, int g, const void *act_, size_t astride, int T, const float *bias,
                   float *y, size_t ldy, int64_t r0, int64_t r1, void *scratch) {
    const uint8_t *Wd = W->data, *act = act_;
    size_t bb = quant_block_bytes(t, g), rb = quant_row_bytes(t, g, W->cols);
    int64_t cols = W->cols;
    if (T == 1) {
        for (int64_t r = r0; r < r1; r++) gemv_q(Wd, rb, t, g, bb, cols, act, bias, y, r, Wd + (size_t)r1 * rb);
        return;
    }
    int64_t nch = n_chunks(cols);
    uint8_t *pack = scratch;
    int TB = token_block(astride);
    for (int t0 = 0; t0 < T; t0 += TB) {
        int t1 = t0 + TB < T ? t0 + TB : T;
        for (int64_t r = r0; r < r1; r += MR) {
            pack_q(Wd, rb, t, g, bb, cols, r, r1, pack);
            for (int tt = t0; tt < t1; tt += NT) {
                int nt = t1 - tt < NT ? t1 - tt : NT;
                tile_q_any(pack, nch, t, nt, act + (size_t)tt * astride, astride, bias, y + (size_t)tt * ldy, ldy, r,
                           r1);
            }
        }
    }
}

#define MM_CASE(TY, G)                                                                                             \
    if (W->dtype == TY && W->group == G) {                                                                         \
        matmul_q_t(W, TY, G, act, astride, T, bias, y, ldy, r0, r1, scratch);                                      \
        return;                                                                                                    \
    }

static void matmul_q(const matrix *W, const void *act, size_t astride, int T, const float *bias, float *y, size_t ldy,
                     int64_t r0, int64_t r1, void *scratch) {
    if (r1 <= r0) return;
    MM_CASE(XLLM_DT_Q8, 32) MM_CASE(XLLM_DT_Q8, 64) MM_CASE(XLLM_DT_Q8, 128)
    MM_CASE(XLLM_DT_Q4, 32) MM_CASE(XLLM_DT_Q4, 64) MM_CASE(XLLM_DT_Q4, 128)
    MM_CASE(XLLM_DT_Q4M, 32) MM_CASE(XLLM_DT_Q4M, 64) MM_CASE(XLLM_DT_Q4M, 128)
    if (W->dtype == XLLM_DT_Q8) matmul_q_t(W, XLLM_DT_Q8, W->group, act, astride, T, bias, y, ldy, r0, r1, scratch);
    else if (W->dtype == XLLM_DT_Q4) matmul_q_t(W, XLLM_DT_Q4, W->group, act, astride, T, bias, y, ldy, r0, r1, scratch);
    else matmul_q_t(W, XLLM_DT_Q4M, W->group, act, astride, T, bias, y, ldy, r0, r1, scratch);
}

static size_t scratch_bytes(int64_t cols) { return (size_t)MR * (size_t)n_chunks(cols) * PS + 64; }

/* ----------------------------------------------------------- float matmul */

AI __m256i tail_mask(int n) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); }

/* 8 weights from element i of a row (n of them present, the rest zero), as f32. */
AI __m256 load_w(const void *row, xllm_dtype t, int64_t i, int n) {
    if (t == XLLM_DT_F32)
        return n == 8 ? _mm256_loadu_ps((const float *)row + i) : _mm256_maskload_ps((const float *)row + i, tail_mask(n));
    __m128i h;
    if (n == 8) {
        h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + i));
    } else {
        uint16_t buf[8] = {0};
        memcpy(buf, (const uint16_t *)row + i, (size_t)n * 2);
        h = _mm_loadu_si128((const __m128i *)buf);
    }
    if (t == XLLM_DT_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* Float weights: two 8-lane accumulators per output (columns 16k..16k+7 and
 * 16k+8..16k+15, like the scalar level's 16 lanes), so a GEMV row has two
 * independent fma chains; a tail of n < 16 columns goes min(n, 8) to the
 * first and the rest to the second, zero-padded; the result is
 * hsum8(a + b) + bias, the same in the GEMV and in the 3 rows x 2 tokens tile. */
#define FTILE_IJ(F) F(0, 0) F(0, 1) F(1, 0) F(1, 1) F(2, 0) F(2, 1)

/* Rows r + i (i < 3, clamped to r1 - 1) x nt (1..2) tokens. */
AI void tile_f(const uint8_t *W, size_t rb, xllm_dtype t, int64_t cols, int nt, const float *x, size_t xs,
               const float *bias, float *y, size_t ldy, int64_t r, int64_t r1) {
    const uint8_t *row0 = W + (size_t)r * rb, *row1 = W + (size_t)(r + 1 < r1 ? r + 1 : r) * rb;
    const uint8_t *row2 = W + (size_t)(r + 2 < r1 ? r + 2 : r) * rb;
#define TF_DECL(i, j) __m256 a##i##j = _mm256_setzero_ps(), b##i##j = _mm256_setzero_ps();
    FTILE_IJ(TF_DECL)
#define TF_HALF(acc, off, n)                                                                                       \
    {                                                                                                              \
        __m256i m_ = tail_mask(n);                                                                                 \
        __m256 x0 = (n) == 8 ? _mm256_loadu_ps(x + c + (off)) : _mm256_maskload_ps(x + c + (off), m_);            \
        __m256 x1 = nt > 1 ? ((n) == 8 ? _mm256_loadu_ps(x + xs + c + (off)) : _mm256_maskload_ps(x + xs + c + (off), m_)) : x0; \
        __m256 w = load_w(row0, t, c + (off), n);                                                                  \
        acc##00 = _mm256_fmadd_ps(w, x0, acc##00);                                                                 \
        if (nt > 1) acc##01 = _mm256_fmadd_ps(w, x1, acc##01);                                                     \
        w = load_w(row1, t, c + (off), n);                                                                         \
        acc##10 = _mm256_fmadd_ps(w, x0, acc##10);                                                                 \
        if (nt > 1) acc##11 = _mm256_fmadd_ps(w, x1, acc##11);                                                     \
        w = load_w(row2, t, c + (off), n);                                                                         \
        acc##20 = _mm256_fmadd_ps(w, x0, acc##20);                                                                 \
        if (nt > 1) acc##21 = _mm256_fmadd_ps(w, x1, acc##21);                                                     \
    }
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16) {
        TF_HALF(a, 0, 8)
        TF_HALF(b, 8, 8)
    }
    if (c < cols) {
        int n = (int)(cols - c), n0 = n < 8 ? n : 8;
        TF_HALF(a, 0, n0)
        if (n > 8) TF_HALF(b, 8, n - 8)
    }
#define TF_STORE(i, j)                                                                                             \
    if (r + i < r1 && j < nt)                                                                                      \
        y[(size_t)(j)*ldy + (size_t)(r + i)] = hsum8(_mm256_add_ps(a##i##j, b##i##j)) + (bias ? bias[r + i] : 0.0f);
    FTILE_IJ(TF_STORE)
}

AI void tile_f_any(const uint8_t *W, size_t rb, xllm_dtype t, int64_t cols, int nt, const float *x, size_t xs,
                   const float *bias, float *y, size_t ldy, int64_t r, int64_t r1) {
    if (nt == 2) tile_f(W, rb, t, cols, 2, x, xs, bias, y, ldy, r, r1);
    else tile_f(W, rb, t, cols, 1, x, xs, bias, y, ldy, r, r1);
}

/* GEMV: one row against one token, rows in memory order; the same
 * arithmetic per output as tile_f. */
AI void gemv_f(const uint8_t *W, size_t rb, xllm_dtype t, int64_t cols, const float *x, const float *bias, float *y,
               int64_t r, const uint8_t *end) {
    const uint8_t *row = W + (size_t)r * rb;
    size_t es = rb / (size_t)cols;
    __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16) {
        kernels_prefetch_ahead(row + (size_t)c * es, 16 * es, end);
        a = _mm256_fmadd_ps(load_w(row, t, c, 8), _mm256_loadu_ps(x + c), a);
        b = _mm256_fmadd_ps(load_w(row, t, c + 8, 8), _mm256_loadu_ps(x + c + 8), b);
    }
    if (c < cols) {
        int n = (int)(cols - c), n0 = n < 8 ? n : 8;
        a = _mm256_fmadd_ps(load_w(row, t, c, n0), _mm256_maskload_ps(x + c, tail_mask(n0)), a);
        if (n > 8) b = _mm256_fmadd_ps(load_w(row, t, c + 8, n - 8), _mm256_maskload_ps(x + c + 8, tail_mask(n - 8)), b);
    }
    y[r] = hsum8(_mm256_add_ps(a, b)) + (bias ? bias[r] : 0.0f);
}

AI void matmul_f_t(const matrix *W, xllm_dtype t, const float *x, int T, const float *bias, float *y, size_t ldy,
                   int64_t r0, int64_t r1) {
    int64_t cols = W->cols;
    size_t rb = (size_t)cols * xllm_dtype_size(t), xs = (size_t)cols;
    if (T == 1) {
        for (int64_t r = r0; r < r1; r++) gemv_f(W->data, rb, t, cols, x, bias, y, r, (const uint8_t *)W->data + (size_t)r1 * rb);
        return;
    }
    int TB = (int)(((size_t)192 << 10) / (xs * sizeof(float) + 1));
    TB = TB < NTF ? NTF : TB > 120 ? 120 : TB / NTF * NTF;
    for (int t0 = 0; t0 < T; t0 += TB) {
        int t1 = t0 + TB < T ? t0 + TB : T;
        for (int64_t r = r0; r < r1; r += MRF)
            for (int tt = t0; tt < t1; tt += NTF) {
                int nt = t1 - tt < NTF ? t1 - tt : NTF;
                tile_f_any(W->data, rb, t, cols, nt, x + (size_t)tt * xs, xs, bias, y + (size_t)tt * ldy, ldy, r, r1);
            }
    }
}

static void matmul_f(const matrix *W, const float *x, int T, const float *bias, float *y, size_t ldy, int64_t r0,
                     int64_t r1, void *scratch) {
    (void)scratch;
    if (r1 <= r0) return;
    switch (W->dtype) {
    case XLLM_DT_F16: matmul_f_t(W, XLLM_DT_F16, x, T, bias, y, ldy, r0, r1); break;
    case XLLM_DT_BF16: matmul_f_t(W, XLLM_DT_BF16, x, T, bias, y, ldy, r0, r1); break;
    default: matmul_f_t(W, XLLM_DT_F32, x, T, bias, y, ldy, r0, r1); break;
    }
}

const cpu_kernels cpu_kernels_avx2 = {
    .level = CPU_AVX2,
    .name = "avx2",
    .act_bytes = act_bytes,
    .act_prepare = act_prepare,
    .quant_act = quant_act,
    .scratch_bytes = scratch_bytes,
    .matmul_q = matmul_q,
    .matmul_f = matmul_f,
    .attn = &cpu_attn_avx2,
};

#else
typedef int xllm_no_avx2_on_this_arch;
#endif
