/*
 * kernels_avx2.c - AVX2 + FMA + F16C kernels (x86-64 since Haswell / Zen 1).
 * Compiled with those target flags; called only when the CPU has them.
 *
 * Quantized matmul, integer part, with vpmaddubsw (unsigned x signed bytes,
 * pairs summed into saturating int16) and vpmaddwd (int16 pairs into int32),
 * exact in every case:
 *  - Q4 / Q4M: nibbles (0..15, unsigned) times int8 activations: a pair is
 *    at most 2 * 15 * 127 and the two halves of a block added in int16 stay
 *    below 2^15. Q4's -8 is a per-token block constant (-8 * the block's
 *    activation sum), prepared with the activations;
 *  - Q8: |w| (unsigned) times a with w's sign (vpsignb): |pair| <= 2 * 128 * 127.
 * Layout: a chunk is 64 columns (2 blocks); A0 = [b0 e0..15 | b1 e0..15],
 * A1 = [b0 e16..31 | b1 e16..31]. Each row's int32 lanes are summed (exactly)
 * into block sums, 4 rows at once: [b0: r0 r1 r2 r3 | b1: r0 r1 r2 r3]
 * (reduce_rows), and the float part runs on those lanes: acc = fma(dw * da,
 * float(bsum), acc), Q4M acc + fma(dw * da, float(bsum), mw * da * s),
 * chunks in column order; output = lane (b0) + lane (b1) + bias. The stored
 * GEMV runs the same per-lane operations on one row's [b0 x4 | b1 x4] lanes,
 * the GEMM (4 rows x 4 tokens from scratch), the packed GEMV (4 rows from
 * one stream) and the packed "direct" GEMM on 4 rows' lanes: every path
 * gives the same bits.
 *
 * Float weights: two 8-lane fma accumulators per output (16 lanes), exact F16
 * (vcvtph2ps) and BF16 (shift) conversion, zero-padded tails.
 */
#if defined(__x86_64__)
#include "backend/cpu/kernels.h"
#include "backend/cpu/kq_kernels.h"
#include "quant/quant.h"

#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

#define CH 64   /* columns per chunk */
#define ACH 160 /* prepared activations per chunk: q[64] int8, da[8] f32, da*s[8] f32, -8*s[8] i32 ([b0 x4 | b1 x4]) */
#define MR 4
#define DIRECT_MAX_T 32 /* packed, default rule: "direct" up to this many tokens, then pack/N */
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
AI __m256i quant_block(const float *x, float *d, int32_t *s, float *ds, int llama) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8), x2 = _mm256_loadu_ps(x + 16),
           x3 = _mm256_loadu_ps(x + 24);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, x0), _mm256_andnot_ps(sign, x1)),
                             _mm256_max_ps(_mm256_andnot_ps(sign, x2), _mm256_andnot_ps(sign, x3)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    float amax = _mm_cvtss_f32(m4), db, id;
    quant_act_scale(amax, llama, &db, &id);
    const __m256 big = _mm256_set1_ps(FLT_MAX);
    __m256 bad = _mm256_or_ps(_mm256_or_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, x0), big, _CMP_NLE_UQ),
                                           _mm256_cmp_ps(_mm256_andnot_ps(sign, x1), big, _CMP_NLE_UQ)),
                              _mm256_or_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, x2), big, _CMP_NLE_UQ),
                                           _mm256_cmp_ps(_mm256_andnot_ps(sign, x3), big, _CMP_NLE_UQ)));
    int nonfinite = _mm256_movemask_ps(bad) != 0;
    if (nonfinite || !(id <= FLT_MAX)) { /* as quant_activations: no int conversion of NaN or inf */
        *d = nonfinite ? NAN : db;
        *s = 0;
        *ds = *d * 0.0f;
        return _mm256_setzero_si256();
    }
    __m256 vid = _mm256_set1_ps(id);
    __m256i v0 = _mm256_cvtps_epi32(_mm256_mul_ps(x0, vid)), v1 = _mm256_cvtps_epi32(_mm256_mul_ps(x1, vid));
    __m256i v2 = _mm256_cvtps_epi32(_mm256_mul_ps(x2, vid)), v3 = _mm256_cvtps_epi32(_mm256_mul_ps(x3, vid));
    *d = db;
    *s = hsum8i(_mm256_add_epi32(_mm256_add_epi32(v0, v1), _mm256_add_epi32(v2, v3)));
    *ds = quant_act_dsum(amax, db, *s, llama);
    __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(v0, v1), _mm256_packs_epi32(v2, v3));
    return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static void quant_act(const float *x, int64_t cols, int8_t *q, float *d, int32_t *s, float *ds, int llama) {
    for (int64_t b = 0; b < cols / QK; b++)
        _mm256_storeu_si256((__m256i *)(q + b * QK), quant_block(x + b * QK, &d[b], &s[b], &ds[b], llama));
}

static size_t act_bytes(int64_t cols) { return (size_t)n_chunks(cols) * ACH; }

static void act_prepare(const float *x, int64_t cols, void *out, int llama) {
    int64_t nb = cols / QK;
    for (int64_t c = 0; c < n_chunks(cols); c++) {
        uint8_t *o = (uint8_t *)out + c * ACH;
        float *dx = (float *)(o + CH), *dm = dx + 8;
        int32_t *c8 = (int32_t *)(dm + 8);
        for (int j = 0; j < 2; j++) {
            int64_t b = c * 2 + j;
            float db = 0, dsum = 0;
            int32_t sb = 0;
            __m256i v = _mm256_setzero_si256(); /* a = 0 beyond the row */
            if (b < nb) {
                v = quant_block(x + b * QK, &db, &sb, &dsum, llama);
            }
            _mm_storeu_si128((__m128i *)(o + 16 * j), _mm256_castsi256_si128(v));
            _mm_storeu_si128((__m128i *)(o + 32 + 16 * j), _mm256_extracti128_si256(v, 1));
            for (int l = 0; l < 4; l++) dx[4 * j + l] = db, dm[4 * j + l] = dsum, c8[4 * j + l] = -8 * sb;
        }
    }
}

/* ---------------------------------------------------------------- weights */

typedef struct {
    __m256i w0, w1, x0, x1; /* Q8: w and |w|; Q4, Q4M: the nibbles */
    __m256 dw, mw;          /* lanes 0..3: block 0's scale, 4..7: block 1's */
} wchunk;

AI uint16_t rd16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

AI __m256 expand2(uint16_t a, uint16_t b) {
    return _mm256_cvtph_ps(_mm_set_epi16((short)b, (short)b, (short)b, (short)b, (short)a, (short)a, (short)a, (short)a));
}

/* Chunk c of a stored row, nsub (1..2) of its 2 sub-blocks present (the rest
 * zero); g: the group, a multiple of 32 (constant when inlined). */
AI wchunk unpack(const uint8_t *row, dtype_t t, int g, size_t bb, int64_t c, int nsub) {
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

AI achunk load_act(const uint8_t *a, dtype_t t) {
    achunk r;
    r.a0 = _mm256_loadu_si256((const __m256i *)a);
    r.a1 = _mm256_loadu_si256((const __m256i *)(a + 32));
    r.dx = _mm256_loadu_ps((const float *)(a + CH));
    r.dm = t == XLLM_DT_Q4M ? _mm256_loadu_ps((const float *)(a + CH + 32)) : _mm256_setzero_ps();
    r.c8 = t == XLLM_DT_Q4 ? _mm256_loadu_si256((const __m256i *)(a + CH + 64)) : _mm256_setzero_si256();
    return r;
}

/* Exact int32 lanes of one row and chunk (lane 4b + l: elements 4l..4l+3 and
 * 16+4l..16+4l+3 of block b); any exact integer route gives the same sums. */
AI __m256i isum(dtype_t t, __m256i w0, __m256i w1, __m256i x0, __m256i x1, __m256i a0, __m256i a1) {
    const __m256i ones16 = _mm256_set1_epi16(1);
    if (t == XLLM_DT_Q8) {
        __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(x0, _mm256_sign_epi8(a0, w0)), ones16);
        __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(x1, _mm256_sign_epi8(a1, w1)), ones16);
        return _mm256_add_epi32(p0, p1);
    }
    __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(w0, a0), _mm256_maddubs_epi16(w1, a1));
    return _mm256_madd_epi16(p, ones16);
}

/* The block sums of 4 rows: [b0: r0 r1 r2 r3 | b1: r0 r1 r2 r3] (exact). */
AI __m256i reduce_rows(__m256i i0, __m256i i1, __m256i i2, __m256i i3) {
    return _mm256_hadd_epi32(_mm256_hadd_epi32(i0, i1), _mm256_hadd_epi32(i2, i3));
}

/* The float part of one chunk, per lane (each lane one row and block parity):
 * s the block sums (Q4's -8 offset added here), sd / sm the weights' scales
 * in the same lanes. The GEMV of the stored layout runs it on one row's
 * [b0 x4 | b1 x4] lanes, everything else on 4 rows' lanes: same operations
 * per output, so every path gives the same bits. */
AI __m256 fstep(__m256 acc, dtype_t t, __m256i s, __m256 sd, __m256 sm, const achunk *a) {
    if (t == XLLM_DT_Q4) s = _mm256_add_epi32(s, a->c8);
    __m256 p = _mm256_mul_ps(sd, a->dx);
    if (t == XLLM_DT_Q4M) return _mm256_add_ps(acc, _mm256_fmadd_ps(p, _mm256_cvtepi32_ps(s), _mm256_mul_ps(sm, a->dm)));
    return _mm256_fmadd_ps(p, _mm256_cvtepi32_ps(s), acc);
}

/* ------------------------------------------------------- quantized matmul */

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

/* GEMV from the stored layout: one row against one token; rows are read one
 * after another, in memory order (4 interleaved row streams starve the
 * hardware prefetchers). Output = lane 0 + lane 4 (block parities). */
AI void gemv_q(const uint8_t *W, size_t rb, dtype_t t, int g, size_t bb, int64_t cols, const uint8_t *act,
               const qlayout *L, const float *bias, float *y, int64_t r, const uint8_t *end) {
    (void)L;
    int64_t nfull = cols / CH, nch = n_chunks(cols);
    int tail = (int)(cols % CH) / QK;
    const uint8_t *row = W + (size_t)r * rb;
    size_t cb = rb / (size_t)nch; /* about a chunk's bytes */
    __m256 acc = _mm256_setzero_ps();
    for (int64_t c = 0; c < nch; c++) {
        kernels_prefetch_ahead(row + (size_t)c * cb, cb, end);
        wchunk w = c < nfull ? unpack(row, t, g, bb, c, 2) : unpack(row, t, g, bb, c, tail);
        achunk a = load_act(act + c * ACH, t);
        __m256i is = isum(t, w.w0, w.w1, w.x0, w.x1, a.a0, a.a1);
        is = _mm256_hadd_epi32(is, is);
        is = _mm256_hadd_epi32(is, is);
        acc = fstep(acc, t, is, w.dw, w.mw, &a);
    }
    __m128 o = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    y[r] = _mm_cvtss_f32(o) + (bias ? bias[r] : 0.0f);
}

/*
 * GEMM scratch: a tile of 4 rows unpacked, chunk-major, QS bytes a chunk:
 * [4 rows][w0 w1 x0 x1] (32 bytes each; x: Q8's |w|), then the f32 scales
 * sd[8] and (Q4M) sm[8] in reduce_rows' lane order.
 */
#define QS 576

/* One row's chunk weights in the scratch format (128 bytes): w0, w1, and for
 * Q8 x0, x1. */
AI void store_w(uint8_t *q, dtype_t t, wchunk w) {
    _mm256_store_si256((__m256i *)q, w.w0);
    _mm256_store_si256((__m256i *)(q + 32), w.w1);
    if (t == XLLM_DT_Q8) {
        _mm256_store_si256((__m256i *)(q + 64), w.x0);
        _mm256_store_si256((__m256i *)(q + 96), w.x1);
    }
}

/* Stored rows r + i (i < 4, clamped to r1 - 1) into scratch. */
AI void pack_q(const uint8_t *W, size_t rb, dtype_t t, int g, size_t bb, int64_t cols, const qlayout *L, int64_t r,
               int64_t r1, uint8_t *pack) {
    (void)L;
    int64_t nfull = cols / CH, nch = n_chunks(cols);
    int tail = (int)(cols % CH) / QK;
    for (int64_t c = 0; c < nch; c++) {
        uint8_t *p = pack + (size_t)c * QS;
        float *sd = (float *)(p + 512), *sm = sd + 8;
        for (int i = 0; i < MR; i++) {
            const uint8_t *row = W + (size_t)(r + i < r1 ? r + i : r1 - 1) * rb;
            wchunk w = c < nfull ? unpack(row, t, g, bb, c, 2) : unpack(row, t, g, bb, c, tail);
            store_w(p + (size_t)i * 128, t, w);
            float d[8], m[8];
            _mm256_storeu_ps(d, w.dw);
            _mm256_storeu_ps(m, w.mw);
            sd[i] = d[0], sd[4 + i] = d[4];
            sm[i] = m[0], sm[4 + i] = m[4];
        }
    }
}

/*
 * Packed layout (weights repacked at load, backend_pack_matrix). Rows in
 * tiles of 4 (rows past the end zeros); a tile is a sequence of chunk quads
 * (256 columns; the last one shorter when the chunk count is not a multiple
 * of 4), each quad
 *   [k][4 rows][QB]  the chunks' weights: Q4/Q4M the 32 bytes whose low
 *                    nibbles are w0 and high ones w1 (QB 32), Q8 w0 then w1
 *                    (QB 64);
 *   [k][SB]          scales: 8 f16 d in reduce_rows' order [b0: r0..r3 |
 *                    b1: r0..r3], then for Q4M 8 f16 m (SB 16 or 32);
 * so a full quad is whole cache lines (576, 1088 or 640 bytes, as the stored
 * blocks' bytes without the group structure) and a tile one sequential
 * stream (padded to 64 bytes). Any group packs the same way.
 */
#define QB(t) ((t) == XLLM_DT_Q8 ? 64 : 32)
#define SB(t) ((t) == XLLM_DT_Q4M ? 32 : 16)

static size_t quad_bytes(dtype_t t, int k) { return (size_t)k * (size_t)(4 * QB(t) + SB(t)); }

static size_t packed_tile_bytes(dtype_t t, int64_t cols) {
    int64_t nch = n_chunks(cols);
    size_t b = (size_t)(nch / 4) * quad_bytes(t, 4) + quad_bytes(t, (int)(nch % 4));
    return (b + 63) & ~(size_t)63;
}

static size_t packed_bytes(const matrix *W) {
    if (kq_p32_avx2_type(W)) return kq_p32_avx2_packed_bytes(W); /* IQ4_NL, IQ4_XS, Q5_x: P32 (kq_pack32_avx2.c) */
    if (kq_q23_avx2_type(W)) return kq_q23_avx2_packed_bytes(W); /* Q2_K, Q3_K: Q23 (kq_pack23_avx2.c) */
    if (!dtype_is_quant(W->dtype) || dtype_is_kq(W->dtype) || W->group % QK) return 0; /* other kq: as stored */
    return (size_t)((W->rows + 3) / 4) * packed_tile_bytes(W->dtype, W->cols);
}

/* Tiles [tile0, tile1) of W (stored layout) into out (the packed matrix's start). */
static void repack(const matrix *W, int64_t tile0, int64_t tile1, void *out) {
    if (kq_p32_avx2_type(W)) {
        kq_p32_avx2_repack(W, tile0, tile1, out);
        return;
    }
    if (kq_q23_avx2_type(W)) {
        kq_q23_avx2_repack(W, tile0, tile1, out);
        return;
    }
    dtype_t t = W->dtype;
    int g = W->group;
    size_t bb = quant_block_bytes(t, g), rb = quant_row_bytes(t, g, W->cols), tb = packed_tile_bytes(t, W->cols);
    int64_t cols = W->cols, nch = n_chunks(cols), nfull = cols / CH;
    int tail = (int)(cols % CH) / QK;
    for (int64_t tile = tile0; tile < tile1; tile++) {
        uint8_t *base = (uint8_t *)out + (size_t)tile * tb;
        memset(base, 0, tb);
        for (int64_t c = 0; c < nch; c++) {
            int64_t q4 = c / 4;
            int k = (int)(c % 4), nq = nch - 4 * q4 < 4 ? (int)(nch - 4 * q4) : 4;
            uint8_t *quad = base + (size_t)q4 * quad_bytes(t, 4);
            uint8_t *wc = quad + (size_t)k * 4 * QB(t);
            uint16_t *sd = (uint16_t *)(quad + (size_t)nq * 4 * QB(t) + (size_t)k * SB(t));
            for (int i = 0; i < 4; i++) {
                int64_t r = tile * 4 + i;
                if (r >= W->rows) continue;
                const uint8_t *row = (const uint8_t *)W->data + (size_t)r * rb;
                wchunk w = c < nfull ? unpack(row, t, g, bb, c, 2) : unpack(row, t, g, bb, c, tail);
                uint8_t *q = wc + (size_t)i * QB(t);
                if (t == XLLM_DT_Q8) {
                    _mm256_storeu_si256((__m256i *)q, w.w0);
                    _mm256_storeu_si256((__m256i *)(q + 32), w.w1);
                } else {
                    _mm256_storeu_si256((__m256i *)q, _mm256_or_si256(w.w0, _mm256_slli_epi16(w.w1, 4)));
                }
                /* f32 -> f16 is exact (the scales came from f16) */
                uint16_t d[8], m[8];
                _mm_storeu_si128((__m128i *)d, _mm256_cvtps_ph(w.dw, _MM_FROUND_TO_NEAREST_INT));
                _mm_storeu_si128((__m128i *)m, _mm256_cvtps_ph(w.mw, _MM_FROUND_TO_NEAREST_INT));
                sd[i] = d[0], sd[4 + i] = d[4];
                if (t == XLLM_DT_Q4M) sd[8 + i] = m[0], sd[12 + i] = m[4];
            }
        }
    }
}

/* Explicit accumulators, one per token (arrays of vectors may be kept in memory). */
#define TOKS_J(F) F(0) F(1) F(2) F(3)
#define NT 4 /* GEMM tile: tokens (4 rows each) */

/* Row i's weights of a chunk: from scratch (src = the chunk's QS bytes) or
 * from a packed chunk (src = its 4 rows' weights). */
AI wchunk row_w(const uint8_t *src, dtype_t t, int i, int packed) {
    wchunk w;
    if (!packed) {
        const uint8_t *q = src + (size_t)i * 128;
        w.w0 = _mm256_load_si256((const __m256i *)q);
        w.w1 = _mm256_load_si256((const __m256i *)(q + 32));
        w.x0 = t == XLLM_DT_Q8 ? _mm256_load_si256((const __m256i *)(q + 64)) : _mm256_setzero_si256();
        w.x1 = t == XLLM_DT_Q8 ? _mm256_load_si256((const __m256i *)(q + 96)) : _mm256_setzero_si256();
    } else if (t == XLLM_DT_Q8) {
        const uint8_t *q = src + (size_t)i * 64;
        w.w0 = _mm256_loadu_si256((const __m256i *)q);
        w.w1 = _mm256_loadu_si256((const __m256i *)(q + 32));
        w.x0 = _mm256_abs_epi8(w.w0);
        w.x1 = _mm256_abs_epi8(w.w1);
    } else {
        const __m256i m4 = _mm256_set1_epi8(0x0f);
        __m256i v = _mm256_loadu_si256((const __m256i *)(src + (size_t)i * 32));
        w.w0 = _mm256_and_si256(v, m4);
        w.w1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        w.x0 = w.x1 = _mm256_setzero_si256();
    }
    w.dw = w.mw = _mm256_setzero_ps();
    return w;
}

/* Register tile: 4 rows x nt (1..NT) tokens over chunks [0, nch) of one tile,
 * from scratch (packed 0) or straight from a packed tile (packed 1, weights
 * unpacked in registers; nt == 1 is the packed GEMV). Stores rows below r1. */
AI void tile_q(const uint8_t *src, int64_t nch, dtype_t t, int packed, int nt, const uint8_t *act,
               size_t astride, const float *bias, float *y, size_t ldy, int64_t r, int64_t r1, const uint8_t *end) {
#define TQ_DECL(j) __m256 acc##j = _mm256_setzero_ps();
    TOKS_J(TQ_DECL)
    (void)end;
    for (int64_t c0 = 0; c0 < nch; c0 += 4) {
        int nq = nch - c0 < 4 ? (int)(nch - c0) : 4;
        const uint8_t *quad = packed ? src + (size_t)(c0 / 4) * quad_bytes(t, 4) : NULL;
        if (packed) kernels_prefetch_ahead(quad, quad_bytes(t, nq), end);
        for (int k = 0; k < nq; k++) {
            int64_t c = c0 + k;
            const uint8_t *wsrc;
            __m256 sd, sm;
            if (packed) {
                wsrc = quad + (size_t)k * 4 * QB(t);
                const uint8_t *sp = quad + (size_t)nq * 4 * QB(t) + (size_t)k * SB(t);
                sd = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)sp));
                sm = t == XLLM_DT_Q4M ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sp + 16))) : _mm256_setzero_ps();
            } else {
                wsrc = src + (size_t)c * QS;
                sd = _mm256_load_ps((const float *)(wsrc + 512));
                sm = t == XLLM_DT_Q4M ? _mm256_load_ps((const float *)(wsrc + 544)) : _mm256_setzero_ps();
            }
            wchunk w0 = row_w(wsrc, t, 0, packed), w1 = row_w(wsrc, t, 1, packed);
            wchunk w2 = row_w(wsrc, t, 2, packed), w3 = row_w(wsrc, t, 3, packed);
#define TQ_TOK(j)                                                                                                  \
    if (j < nt) {                                                                                                  \
        achunk a = load_act(act + (size_t)(j)*astride + c * ACH, t);                                               \
        __m256i s = reduce_rows(isum(t, w0.w0, w0.w1, w0.x0, w0.x1, a.a0, a.a1),                                   \
                                isum(t, w1.w0, w1.w1, w1.x0, w1.x1, a.a0, a.a1),                                   \
                                isum(t, w2.w0, w2.w1, w2.x0, w2.x1, a.a0, a.a1),                                   \
                                isum(t, w3.w0, w3.w1, w3.x0, w3.x1, a.a0, a.a1));                                  \
        acc##j = fstep(acc##j, t, s, sd, sm, &a);                                                                      \
    }
            TOKS_J(TQ_TOK)
        }
    }
#define TQ_STORE(j)                                                                                                \
    if (j < nt) {                                                                                                  \
        float v_[4];                                                                                               \
        _mm_storeu_ps(v_, _mm_add_ps(_mm256_castps256_ps128(acc##j), _mm256_extractf128_ps(acc##j, 1)));             \
        for (int i_ = 0; i_ < 4 && r + i_ < r1; i_++)                                                              \
            y[(size_t)(j)*ldy + (size_t)(r + i_)] = v_[i_] + (bias ? bias[r + i_] : 0.0f);                        \
    }
    TOKS_J(TQ_STORE)
}

#define TQ_CASE(TY)                                                                                                \
    case TY:                                                                                                       \
        if (nt == 4) tile_q(src, nch, TY, packed, 4, act, astride, bias, y, ldy, r, r1, NULL);                     \
        else if (nt == 3) tile_q(src, nch, TY, packed, 3, act, astride, bias, y, ldy, r, r1, NULL);                \
        else if (nt == 2) tile_q(src, nch, TY, packed, 2, act, astride, bias, y, ldy, r, r1, NULL);                \
        else tile_q(src, nch, TY, packed, 1, act, astride, bias, y, ldy, r, r1, NULL);                             \
        break;

static void tile_q_any(const uint8_t *src, int64_t nch, dtype_t t, int nt, const uint8_t *act, size_t astride,
                       const float *bias, float *y, size_t ldy, int64_t r, int64_t r1) {
    const int packed = 0;
    switch (t) {
        TQ_CASE(XLLM_DT_Q8) TQ_CASE(XLLM_DT_Q4) TQ_CASE(XLLM_DT_Q4M)
    default: break;
    }
}

static void tile_direct(const uint8_t *src, int64_t nch, dtype_t t, int nt, const uint8_t *act, size_t astride,
                        const float *bias, float *y, size_t ldy, int64_t r, int64_t r1) {
    const int packed = 1;
    switch (t) {
        TQ_CASE(XLLM_DT_Q8) TQ_CASE(XLLM_DT_Q4) TQ_CASE(XLLM_DT_Q4M)
    default: break;
    }
}

/* The packed GEMV: a tile's 4 rows against one token. */
AI void gemv_packed(const uint8_t *tile, int64_t nch, dtype_t t, const uint8_t *act, const float *bias, float *y,
                    int64_t r, int64_t r1, const uint8_t *end) {
    tile_q(tile, nch, t, 1, 1, act, 0, bias, y, 0, r, r1, end);
}

/* A packed tile into scratch (pack_q's format). */
AI void pack_q_packed(const uint8_t *tile, dtype_t t, int64_t nch, uint8_t *pack) {
    for (int64_t c0 = 0; c0 < nch; c0 += 4) {
        int nq = nch - c0 < 4 ? (int)(nch - c0) : 4;
        const uint8_t *quad = tile + (size_t)(c0 / 4) * quad_bytes(t, 4);
        for (int k = 0; k < nq; k++) {
            const uint8_t *wc = quad + (size_t)k * 4 * QB(t), *sp = quad + (size_t)nq * 4 * QB(t) + (size_t)k * SB(t);
            uint8_t *p = pack + (size_t)(c0 + k) * QS;
            for (int i = 0; i < MR; i++) {
                wchunk w = row_w(wc, t, i, 1);
                store_w(p + (size_t)i * 128, t, w);
            }
            _mm256_store_ps((float *)(p + 512), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)sp)));
            if (t == XLLM_DT_Q4M) _mm256_store_ps((float *)(p + 544), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sp + 16))));
        }
    }
}

/* The loops (kernels_driver_q.h). Packed variants (kernels.h): "direct"
 * (token tiles straight from the packed rows) or "pack/N" (each 4-row tile
 * unpacked once into scratch for a block of N tokens, whose activations stay
 * in L2). Default: direct up to DIRECT_MAX_T tokens (measured on small-120m
 * shapes: direct about as fast as or faster than pack/N up to T = 32), then
 * pack with the block that fits QMM_BLOCK_BYTES of activations. */
#define QMM_BLOCK_BYTES ((size_t)256 << 10)
#define KD_PACKED
#include "backend/cpu/kernels_driver_q.h"

static void matmul_q(const matrix *W, const void *act, size_t astride, int T, const float *bias, float *y, size_t ldy,
                     int64_t r0, int64_t r1, void *scratch) {
    if (r1 <= r0) return;
    if (W->packed) { /* r0 is a multiple of 4: cpu_ops splits rows in tiles of 4 */
        if (W->dtype == XLLM_DT_Q8) matmul_packed_t(W, XLLM_DT_Q8, act, astride, T, bias, y, ldy, r0, r1, scratch);
        else if (W->dtype == XLLM_DT_Q4) matmul_packed_t(W, XLLM_DT_Q4, act, astride, T, bias, y, ldy, r0, r1, scratch);
        else matmul_packed_t(W, XLLM_DT_Q4M, act, astride, T, bias, y, ldy, r0, r1, scratch);
        return;
    }
    matmul_q_stored(W, act, astride, T, bias, y, ldy, r0, r1, scratch);
}

/* the 4-row GEMM's unpacked tile, or P32's / Q23's (kq_pack32/23_avx2.c) */
static size_t scratch_bytes(int64_t cols) {
    size_t old = (size_t)n_chunks(cols) * QS + 64, p32 = kq_p32_avx2_scratch_bytes(cols), q23 = kq_q23_avx2_scratch_bytes(cols);
    if (q23 > p32) p32 = q23;
    return old > p32 ? old : p32;
}

static int64_t packed_rows(const matrix *W) { return kq_p32_avx2_type(W) || kq_q23_avx2_type(W) ? 16 : 4; }

/* ----------------------------------------------------------- float matmul */

AI __m256i tail_mask(int n) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); }

/* 8 weights from element i of a row (n of them present, the rest zero), as f32. */
AI __m256 load_w(const void *row, dtype_t t, int64_t i, int n) {
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
AI void tile_f(const uint8_t *W, size_t rb, dtype_t t, int64_t cols, int nt, const float *x, size_t xs,
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

/* The loops (kernels_driver_f.h): blocks of tokens whose inputs fit 192 KiB. */
#define FMM_BLOCK_BYTES ((size_t)192 << 10)
#define FMM_BLOCK_MAX 120
#include "backend/cpu/kernels_driver_f.h"

const cpu_kernels cpu_kernels_avx2 = {
    .level = CPU_AVX2,
    .name = "avx2",
    .act_bytes = act_bytes,
    .act_prepare = act_prepare,
    .quant_act = quant_act,
    .scratch_bytes = scratch_bytes,
    .matmul_q = matmul_q,
    .matmul_f = matmul_f,
    .matmul_kq = kq_matmul_avx2,
    .kq_act = kq_act_avx2,
    .packed_bytes = packed_bytes,
    .repack = repack,
    .packed_rows = packed_rows,
    .n_variants = 4,
    .variant_names = packed_variants,
    .attn = &cpu_attn_avx2,
};

#else
typedef int no_avx2_on_this_arch;
#endif
