/*
 * kernels_avx512.c - AVX-512 (F, BW, VL, VNNI) kernels. Compiled with those
 * target flags; called only when the CPU has them (cpu_features.c).
 *
 * Q4 and Q8 weights (any group that is a multiple of 32) run in the "R16"
 * layout described before r16_tile below: 16 weight rows in the lanes, the
 * activations broadcast, one float step per 32-column block and row. What
 * follows describes the other quantized path, Q4M (and Q4/Q8 shapes R16 does
 * not take), with columns in the lanes.
 *
 * Quantized matmul, integer part. vpdpbusd multiplies unsigned bytes by
 * signed bytes and adds groups of four products into int32 lanes; the int32
 * lane sums are exact:
 *  - Q4 / Q4M: the nibbles (0..15) are the unsigned operand, the int8
 *    activations the signed one. Q4's -8 offset is a per-token constant per
 *    lane: lanes start from -8 * (sum of the lane's activations), prepared
 *    with the activations, so sum (q - 8) a comes out directly.
 *  - Q8: the activations offset by 128 (a ^ 0x80 = a + 128, unsigned) times
 *    the signed weights, lanes starting from -128 * (sum of the lane's
 *    weights), computed once per row and chunk.
 * Layout: a chunk is 128 columns (4 activation blocks of 32). Its 128 bytes
 * are two vectors, A0 = [b0 e0..15 | b1 e0..15 | b2 e0..15 | b3 e0..15] and
 * A1 = the same with e16..31. That is the order 4-bit weights unpack in (low
 * nibbles are elements 0..15 of a block, high nibbles 16..31), and two
 * vpdpbusd into one accumulator leave 4 int32 lanes per block (lane 4b + l of
 * block b sums elements 4l..4l+3 and 16+4l..16+4l+3). Float part, per lane:
 * acc = fma(dw * da, float(isum), acc) (+ fma(mw, da * s, acc) on lane 4b for
 * Q4M), blocks in column order, one 16-lane accumulator per output, reduced
 * by _mm512_reduce_add_ps. The GEMV (T == 1) and GEMM paths run exactly this
 * float arithmetic per output element: GEMV unpacks weights into registers,
 * GEMM unpacks a tile of 4 rows once into scratch and runs a 4 rows x 3
 * tokens register tile over it.
 *
 * Float weights: one 16-lane fma accumulator per output (F16 via vcvtph2ps,
 * BF16 by a 16-bit shift, both exact), masked tails, same reduction.
 */
#if defined(__x86_64__)
#include "backend/cpu/kernels.h"
#include "backend/cpu/kq_kernels.h"
#include "backend/cpu/simd_avx512.h"
#include "quant/quant.h"

#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <string.h>


#define CH 128  /* columns per chunk */
#define ACH 320 /* prepared activations per chunk: q[128] int8, da[16] f32, da*s[16] f32, -8*lanesum[16] i32 */
#define PQ 256  /* packed weight bytes per row and chunk: w0, w1, init (Q8) or mw (Q4M), dw */
#define MR 4    /* GEMM tile: rows */
#define NT 3    /* GEMM tile: tokens */
#define MRF 4   /* float GEMM tile */
#define NTF 4

static int64_t n_chunks(int64_t cols) { return (cols + CH - 1) / CH; }

/* ------------------------------------------------------------ activations */

/* One block of 32, exactly as quant_activations computes it. */
AI void quant_block(const float *x, __m512i *v0, __m512i *v1, float *d, int32_t *s, float *ds, int llama) {
    __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
    float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1))), db, id;
    quant_act_scale(amax, llama, &db, &id);
    const __m512 big = _mm512_set1_ps(FLT_MAX);
    __mmask16 bad = _mm512_cmp_ps_mask(_mm512_abs_ps(x0), big, _CMP_NLE_UQ) |
                    _mm512_cmp_ps_mask(_mm512_abs_ps(x1), big, _CMP_NLE_UQ); /* inf or NaN */
    if (bad || !(id <= FLT_MAX)) { /* as quant_activations: no int conversion of NaN or inf */
        *v0 = *v1 = _mm512_setzero_si512();
        *d = bad ? NAN : db;
        *s = 0;
        *ds = *d * 0.0f;
        return;
    }
    __m512 vid = _mm512_set1_ps(id);
    *v0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, vid)); /* round to nearest even, as lrintf */
    *v1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, vid));
    *d = db;
    *s = _mm512_reduce_add_epi32(_mm512_add_epi32(*v0, *v1));
    *ds = quant_act_dsum(amax, db, *s, llama);
}

static void quant_act(const float *x, int64_t cols, int8_t *q, float *d, int32_t *s, float *ds, int llama) {
    for (int64_t b = 0; b < cols / QK; b++) {
        __m512i v0, v1;
        quant_block(x + b * QK, &v0, &v1, &d[b], &s[b], &ds[b], llama);
        _mm_storeu_si128((__m128i *)(q + b * QK), _mm512_cvtepi32_epi8(v0));
        _mm_storeu_si128((__m128i *)(q + b * QK + 16), _mm512_cvtepi32_epi8(v1));
    }
}

static size_t act_bytes(int64_t cols) { return (size_t)n_chunks(cols) * ACH; }

static void act_prepare(const float *x, int64_t cols, void *out, int llama) {
    int64_t nb = cols / QK;
    const __m512i ones = _mm512_set1_epi8(1);
    for (int64_t c = 0; c < n_chunks(cols); c++) {
        uint8_t *o = (uint8_t *)out + c * ACH;
        float *dx = (float *)(o + CH), *dm = dx + 16;
        for (int j = 0; j < 4; j++) {
            int64_t b = c * 4 + j;
            float db = 0, dsum = 0;
            __m128i lo = _mm_setzero_si128(), hi = lo; /* a = 0 beyond the row */
            if (b < nb) {
                __m512i v0, v1;
                int32_t sb;
                quant_block(x + b * QK, &v0, &v1, &db, &sb, &dsum, llama);
                lo = _mm512_cvtepi32_epi8(v0);
                hi = _mm512_cvtepi32_epi8(v1);
            }
            _mm_storeu_si128((__m128i *)(o + 16 * j), lo);
            _mm_storeu_si128((__m128i *)(o + 64 + 16 * j), hi);
            for (int l = 0; l < 4; l++) dx[4 * j + l] = db, dm[4 * j + l] = l == 0 ? dsum : 0.0f;
        }
        /* -8 * the lane sums of the activations (Q4's offset) */
        __m512i ls = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(o));
        ls = _mm512_dpbusd_epi32(ls, ones, _mm512_loadu_si512(o + 64));
        _mm512_storeu_si512(o + CH + 128, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(ls, 3)));
    }
}

/* ---------------------------------------------------------------- weights */

typedef struct {
    __m512i w0, w1, init;
    __m512 dw, mw;
} wchunk;

/* Where a full chunk's pieces lie, for groups 32, 64 and 128 (a chunk is then
 * 128/g whole blocks, cb bytes, all fields at even offsets): word indices for
 * vpermt2w / vpermw over the chunk's first 128 bytes. */
typedef struct {
    int fast;          /* group 32, 64 or 128 */
    size_t cb;         /* bytes per chunk */
    __m512i idx_nib;   /* 4-bit: the 4 sub-blocks' 16 nibble bytes, in order */
    __m512i idx_dm;    /* words 0..15: d of lane l's sub-block (l / 4); 16..31: m */
} qlayout;

static qlayout make_layout(dtype_t t, int g) {
    qlayout L;
    memset(&L, 0, sizeof L);
    if (g != 32 && g != 64 && g != 128) return L;
    size_t bb = quant_block_bytes(t, g), hdr = t == XLLM_DT_Q4M ? 4 : 2;
    L.fast = 1;
    L.cb = (size_t)(CH / g) * bb;
    uint16_t nib[32], dm[32];
    for (int w = 0; w < 32; w++) {
        int j = w / 8, k = w % 8;
        size_t off = (size_t)(32 * j / g) * bb + hdr + (size_t)(32 * j % g) / 2 + 2 * (size_t)k;
        nib[w] = (uint16_t)(off / 2);
        int jd = (w % 16) / 4;
        size_t doff = (size_t)(32 * jd / g) * bb;
        dm[w] = (uint16_t)(doff / 2 + (w >= 16 && t == XLLM_DT_Q4M ? 1 : 0));
    }
    memcpy(&L.idx_nib, nib, 64);
    memcpy(&L.idx_dm, dm, 64);
    return L;
}

AI __m512 expand4(__m128i halves) { /* 4 f16 -> 16 f32 lanes, 4 each */
    const __m512i idx = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_cvtph_ps(halves)));
}

AI uint16_t rd16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

/* -128 * lane sums of the signed weights: the int32 accumulators' start. */
AI __m512i weight_init(__m512i w0, __m512i w1) {
    const __m512i c128 = _mm512_set1_epi8((char)0x80);
    __m512i ws = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c128, w0);
    ws = _mm512_dpbusd_epi32(ws, c128, w1);
    return _mm512_sub_epi32(_mm512_setzero_si512(), ws);
}

AI void nibbles(__m512i v, __m512i *w0, __m512i *w1) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    *w0 = _mm512_and_si512(v, m4);
    *w1 = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
}

/* n (2..64) bytes at p, zero-extended to a vector, with one plain load (a
 * masked load is much slower on memory not yet in cache on some CPUs). n
 * is a constant once inlined. */
AI __m512i load_rest(const uint8_t *p, size_t n) {
    uint16_t h;
    uint32_t u;
    uint64_t v;
    switch (n) {
    case 2: memcpy(&h, p, 2); return _mm512_zextsi128_si512(_mm_cvtsi32_si128(h));
    case 4: memcpy(&u, p, 4); return _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)u));
    case 8: memcpy(&v, p, 8); return _mm512_zextsi128_si512(_mm_cvtsi64_si128((long long)v));
    case 16: return _mm512_zextsi128_si512(_mm_loadu_si128((const __m128i *)p));
    case 64: return _mm512_loadu_si512(p);
    default: return _mm512_maskz_loadu_epi8(((__mmask64)1 << n) - 1, p);
    }
}

/* A full chunk c of a row through its layout (group 32, 64 or 128). */
AI wchunk unpack_fast(const uint8_t *row, dtype_t t, int g, size_t bb, int64_t c, const qlayout *L) {
    wchunk w;
    const uint8_t *p = row + (size_t)c * L->cb;
    __m512i lo = _mm512_loadu_si512(p), hi = load_rest(p + 64, L->cb > 128 ? 64 : L->cb - 64);
    __m512i s = t == XLLM_DT_Q8 ? _mm512_permutex2var_epi16(lo, L->idx_dm, hi) : _mm512_permutexvar_epi16(L->idx_dm, lo);
    w.dw = _mm512_cvtph_ps(_mm512_castsi512_si256(s));
    w.mw = t == XLLM_DT_Q4M ? _mm512_cvtph_ps(_mm512_extracti64x4_epi64(s, 1)) : _mm512_setzero_ps();
    if (t == XLLM_DT_Q8) {
        __m256i q[4];
        for (int j = 0; j < 4; j++)
            q[j] = _mm256_loadu_si256((const __m256i *)(p + (size_t)(32 * j / g) * bb + 2 + (size_t)(32 * j % g)));
        __m512i z01 = _mm512_inserti64x4(_mm512_castsi256_si512(q[0]), q[1], 1);
        __m512i z23 = _mm512_inserti64x4(_mm512_castsi256_si512(q[2]), q[3], 1);
        w.w0 = _mm512_shuffle_i64x2(z01, z23, 0x88);
        w.w1 = _mm512_shuffle_i64x2(z01, z23, 0xDD);
        w.init = weight_init(w.w0, w.w1);
    } else {
        nibbles(_mm512_permutex2var_epi16(lo, L->idx_nib, hi), &w.w0, &w.w1);
        w.init = _mm512_setzero_si512();
    }
    return w;
}

/* Chunk c of a quantized row with nsub (1..4) of its 4 sub-blocks present
 * (the rest zero), any group that is a multiple of 32: the tail chunk, and
 * groups without a fast layout. */
AI wchunk unpack_any(const uint8_t *row, dtype_t t, int g, size_t bb, int64_t c, int nsub) {
    wchunk w;
    const uint8_t *bp[4];
    int off[4];
    uint16_t dh[4] = {0, 0, 0, 0}, mh[4] = {0, 0, 0, 0};
    for (int j = 0; j < 4; j++) {
        bp[j] = row;
        off[j] = 0;
        if (j < nsub) {
            int64_t e = (c * 4 + j) * QK;
            bp[j] = row + (size_t)(e / g) * bb;
            off[j] = (int)(e % g);
            dh[j] = rd16(bp[j]);
            if (t == XLLM_DT_Q4M) mh[j] = rd16(bp[j] + 2);
        }
    }
    if (t == XLLM_DT_Q8) {
        __m256i s[4];
        for (int j = 0; j < 4; j++)
            s[j] = j < nsub ? _mm256_loadu_si256((const __m256i *)(bp[j] + 2 + off[j])) : _mm256_setzero_si256();
        __m512i z01 = _mm512_inserti64x4(_mm512_castsi256_si512(s[0]), s[1], 1);
        __m512i z23 = _mm512_inserti64x4(_mm512_castsi256_si512(s[2]), s[3], 1);
        w.w0 = _mm512_shuffle_i64x2(z01, z23, 0x88);
        w.w1 = _mm512_shuffle_i64x2(z01, z23, 0xDD);
    } else {
        int hdr = t == XLLM_DT_Q4M ? 4 : 2;
        __m128i s[4];
        for (int j = 0; j < 4; j++)
            s[j] = j < nsub ? _mm_loadu_si128((const __m128i *)(bp[j] + hdr + off[j] / 2)) : _mm_setzero_si128();
        __m512i v = _mm512_castsi128_si512(s[0]);
        v = _mm512_inserti32x4(v, s[1], 1);
        v = _mm512_inserti32x4(v, s[2], 2);
        v = _mm512_inserti32x4(v, s[3], 3);
        nibbles(v, &w.w0, &w.w1);
    }
    w.init = t == XLLM_DT_Q8 ? weight_init(w.w0, w.w1) : _mm512_setzero_si512();
    w.dw = expand4(_mm_set_epi16(0, 0, 0, 0, (short)dh[3], (short)dh[2], (short)dh[1], (short)dh[0]));
    w.mw = t == XLLM_DT_Q4M ? expand4(_mm_set_epi16(0, 0, 0, 0, (short)mh[3], (short)mh[2], (short)mh[1], (short)mh[0]))
                            : _mm512_setzero_ps();
    return w;
}

AI wchunk unpack(const uint8_t *row, dtype_t t, int g, size_t bb, int64_t c, int64_t nfull, int tail,
                 const qlayout *L) {
    if (c < nfull) return L->fast ? unpack_fast(row, t, g, bb, c, L) : unpack_any(row, t, g, bb, c, 4);
    return unpack_any(row, t, g, bb, c, tail);
}

/* One token's chunk of prepared activations, as type t wants them. */
typedef struct {
    __m512i a0, a1, c8;
    __m512 dx, dm;
} achunk;

AI achunk load_act(const uint8_t *a, dtype_t t) {
    achunk r;
    r.a0 = _mm512_loadu_si512(a);
    r.a1 = _mm512_loadu_si512(a + 64);
    if (t == XLLM_DT_Q8) { /* the unsigned operand: a + 128 */
        const __m512i off = _mm512_set1_epi8((char)0x80);
        r.a0 = _mm512_xor_si512(r.a0, off);
        r.a1 = _mm512_xor_si512(r.a1, off);
    }
    r.dx = _mm512_loadu_ps(a + CH);
    r.dm = t == XLLM_DT_Q4M ? _mm512_loadu_ps(a + CH + 64) : _mm512_setzero_ps();
    r.c8 = t == XLLM_DT_Q4 ? _mm512_loadu_si512(a + CH + 128) : _mm512_setzero_si512();
    return r;
}

/* The per-output arithmetic of one chunk, shared by GEMV and GEMM: exact
 * int32 lanes, then the float part. */
AI __m512 step(__m512 acc, dtype_t t, __m512i w0, __m512i w1, __m512i init, __m512 dw, __m512 mw, achunk a) {
    __m512i is;
    if (t == XLLM_DT_Q8) {
        is = _mm512_dpbusd_epi32(init, a.a0, w0);
        is = _mm512_dpbusd_epi32(is, a.a1, w1);
    } else {
        is = _mm512_dpbusd_epi32(t == XLLM_DT_Q4 ? a.c8 : _mm512_setzero_si512(), w0, a.a0);
        is = _mm512_dpbusd_epi32(is, w1, a.a1);
    }
    acc = _mm512_fmadd_ps(_mm512_mul_ps(dw, a.dx), _mm512_cvtepi32_ps(is), acc);
    if (t == XLLM_DT_Q4M) acc = _mm512_fmadd_ps(mw, a.dm, acc);
    return acc;
}

/* ------------------------------------------------------- quantized matmul */

/* Explicit accumulators (arrays of vectors get spilled): row i, token j. */
#define TILE_IJ(F) F(0, 0) F(0, 1) F(0, 2) F(1, 0) F(1, 1) F(1, 2) F(2, 0) F(2, 1) F(2, 2) F(3, 0) F(3, 1) F(3, 2)
#define ROWS_I(F) F(0) F(1) F(2) F(3)

/* GEMV: one row against one token; rows are read one after another, in
 * memory order (4 interleaved row streams starve the hardware prefetchers). */
AI void gemv_q(const uint8_t *W, size_t rb, dtype_t t, int g, size_t bb, int64_t cols, const uint8_t *act,
               const qlayout *L, const float *bias, float *y, int64_t r, const uint8_t *end) {
    int64_t nfull = cols / CH, nch = (cols + CH - 1) / CH;
    int tail = (int)(cols % CH) / QK;
    const uint8_t *row = W + (size_t)r * rb;
    size_t cb = rb / (size_t)nch; /* about a chunk's bytes */
    __m512 acc = _mm512_setzero_ps();
    for (int64_t c = 0; c < nch; c++) {
        kernels_prefetch_ahead(row + (size_t)c * cb, cb, end);
        wchunk w = unpack(row, t, g, bb, c, nfull, tail, L);
        acc = step(acc, t, w.w0, w.w1, w.init, w.dw, w.mw, load_act(act + c * ACH, t));
    }
    y[r] = reduce1(acc) + (bias ? bias[r] : 0.0f);
}

/* One row's chunk in the GEMM's scratch format (PQ bytes): w0, w1, init (Q8)
 * or mw (Q4M), dw. */
AI void store_unpacked(uint8_t *p, dtype_t t, wchunk w) {
    _mm512_store_si512(p, w.w0);
    _mm512_store_si512(p + 64, w.w1);
    if (t == XLLM_DT_Q8) _mm512_store_si512(p + 128, w.init);
    if (t == XLLM_DT_Q4M) _mm512_store_ps(p + 128, w.mw);
    _mm512_store_ps(p + 192, w.dw);
}

/* Unpack rows r + i (i < 4, clamped to r1 - 1) into pack: chunk-major,
 * row-minor, ps bytes each. */
AI void pack_q(const uint8_t *W, size_t rb, dtype_t t, int g, size_t bb, int64_t cols, const qlayout *L, int64_t r,
               int64_t r1, uint8_t *pack) {
    int64_t nfull = cols / CH, nch = (cols + CH - 1) / CH;
    int tail = (int)(cols % CH) / QK;
    for (int64_t c = 0; c < nch; c++)
        for (int i = 0; i < MR; i++) {
            wchunk w = unpack(W + (size_t)(r + i < r1 ? r + i : r1 - 1) * rb, t, g, bb, c, nfull, tail, L);
            store_unpacked(pack + (size_t)(c * MR + i) * PQ, t, w);
        }
}

/* The end of a register tile: each token's 4 row sums by reduce4, plus bias,
 * stored for rows below r1. */
#define TILE_STORE()                                                                                               \
    {                                                                                                              \
        __m128 o_[NT];                                                                                             \
        o_[0] = reduce4(c00, c10, c20, c30);                                                                       \
        o_[1] = nt > 1 ? reduce4(c01, c11, c21, c31) : o_[0];                                                      \
        o_[2] = nt > 2 ? reduce4(c02, c12, c22, c32) : o_[0];                                                      \
        for (int j_ = 0; j_ < nt; j_++) {                                                                          \
            float v_[4];                                                                                           \
            _mm_storeu_ps(v_, o_[j_]);                                                                             \
            for (int i_ = 0; i_ < 4 && r + i_ < r1; i_++)                                                          \
                y[(size_t)j_ * ldy + (size_t)(r + i_)] = v_[i_] + (bias ? bias[r + i_] : 0.0f);                    \
        }                                                                                                          \
    }

/* Register tile: 4 packed rows x nt (1..3) tokens over all chunks; stores
 * rows below r1 only. */
AI void tile_q(const uint8_t *pack, int64_t nch, dtype_t t, int nt, const uint8_t *act, size_t astride,
               const float *bias, float *y, size_t ldy, int64_t r, int64_t r1) {
#define TQ_DECL(i, j) __m512 c##i##j = _mm512_setzero_ps();
    TILE_IJ(TQ_DECL)
    for (int64_t c = 0; c < nch; c++) {
        const uint8_t *p = pack + (size_t)(c * MR) * PQ;
        achunk a0 = load_act(act + c * ACH, t);
        achunk a1 = nt > 1 ? load_act(act + astride + c * ACH, t) : a0;
        achunk a2 = nt > 2 ? load_act(act + 2 * astride + c * ACH, t) : a0;
#define TQ_ROW(i)                                                                                                  \
    {                                                                                                              \
        const uint8_t *q = p + (size_t)(i)*PQ;                                                                     \
        __m512i w0 = _mm512_load_si512(q), w1 = _mm512_load_si512(q + 64);                                         \
        __m512i init = t == XLLM_DT_Q8 ? _mm512_load_si512(q + 128) : _mm512_setzero_si512();                      \
        __m512 mw = t == XLLM_DT_Q4M ? _mm512_load_ps(q + 128) : _mm512_setzero_ps();                              \
        __m512 dw = _mm512_load_ps(q + 192);                                                                       \
        c##i##0 = step(c##i##0, t, w0, w1, init, dw, mw, a0);                                                      \
        if (nt > 1) c##i##1 = step(c##i##1, t, w0, w1, init, dw, mw, a1);                                          \
        if (nt > 2) c##i##2 = step(c##i##2, t, w0, w1, init, dw, mw, a2);                                          \
    }
        ROWS_I(TQ_ROW)
    }
    TILE_STORE()
}

#define TQ_CASE(TY)                                                                                                \
    case TY:                                                                                                       \
        if (nt == 3) tile_q(pack, nch, TY, 3, act, astride, bias, y, ldy, r, r1);                                  \
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

/* ------------------------------------------- Q4 / Q8: 16 rows in the lanes */

/*
 * Q4 and Q8 (any group that is a multiple of 32) use "R16", a layout with 16
 * weight rows in the 16 int32 lanes of a vector and one token's 4 activation
 * bytes broadcast to all of them: one vpdpbusd then does 4 multiply-adds for
 * each of 16 rows, and a 32-column block of 16 rows takes 8 of them before
 * its float step, instead of 2 per float step with columns in the lanes (the
 * float work, not the integer work, bounded the GEMM). Per output element:
 *
 *   isum_b = sum over the block's 32 columns of w * a   (exact int32; Q4's
 *            w = q - 8 and Q8's a + 128 offsets come out through the
 *            per-(token, block) correction -off * sum(a), the lanes' start)
 *   acc    = fma(float(isum_b), dw_b * da_b, acc)  for blocks b in column order
 *   y      = acc + bias
 *
 * GEMV and GEMM, packed and stored layouts, all run exactly this, so results
 * do not depend on T, tiling, thread split or repacking.
 *
 * Packed tile of 16 rows (rows past the end: zeros), per 32-column block:
 *   [16 x f16]         dw of each row (its group's scale)
 *   Q4: [4][16][4]     4 vectors: lane i = row i's stored bytes 4k..4k+3 of
 *                      the sub-block (low nibbles: columns 4k..4k+3, high:
 *                      16+4k..16+4k+3); the GGUF Q4_0 byte order as it is
 *   Q8: [8][16][4]     8 vectors: lane i = row i's columns 4m..4m+3 (m < 4)
 *                      or 16+4(m-4).. (m >= 4), each byte w + 128 (unsigned)
 * matching the order of the prepared activations (act_prepare: a chunk's
 * q[16j + e] is column e of block j for e < 16, q[64 + 16j + e] column 16+e).
 */
#define R16_ROWS 16

AI size_t r16_block_bytes(dtype_t t) { return t == XLLM_DT_Q8 ? 32 + 512 : 32 + 256; }

static int r16_type(const matrix *W) {
    return (W->dtype == XLLM_DT_Q4 || W->dtype == XLLM_DT_Q8) && W->group % QK == 0 && W->cols % QK == 0 &&
           W->cols % W->group == 0;
}

static size_t r16_tile_bytes(dtype_t t, int64_t cols) {
    return ((size_t)(cols / QK) * r16_block_bytes(t) + 63) & ~(size_t)63;
}

/* Row r's part of a 16-row tile (lane i = r % 16), from its stored row;
 * row NULL: zeros. */
static void r16_put_row(uint8_t *tile, dtype_t t, int g, int64_t cols, const uint8_t *row, int i) {
    size_t bb = quant_block_bytes(t, g), BB = r16_block_bytes(t);
    for (int64_t b = 0; b < cols / QK; b++) {
        uint8_t *blk = tile + (size_t)b * BB;
        int64_t e = b * QK;
        const uint8_t *gb = row ? row + (size_t)(e / g) * bb : NULL;
        int off = (int)(e % g);
        if (gb) memcpy(blk + 2 * i, gb, 2);
        else memset(blk + 2 * i, 0, 2);
        if (t == XLLM_DT_Q4) {
            for (int k = 0; k < 4; k++) {
                uint8_t *q = blk + 32 + 64 * k + 4 * i;
                if (gb) memcpy(q, gb + 2 + off / 2 + 4 * k, 4);
                else memset(q, 0x88, 4); /* level 8: weight 0 */
            }
        } else {
            for (int m = 0; m < 8; m++) {
                uint8_t *q = blk + 32 + 64 * m + 4 * i;
                int c0 = m < 4 ? 4 * m : 16 + 4 * (m - 4);
                for (int x = 0; x < 4; x++) q[x] = gb ? (uint8_t)(gb[2 + off + c0 + x] ^ 0x80) : 0x80;
            }
        }
    }
}

/* 4 activation bytes broadcast to every lane (an embedded broadcast once compiled). */
AI __m512i bcast4(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* Per token and 32-column block the int32 lanes' start: -off * (sum of the
 * block's activations), off 8 (Q4) or 128 (Q8), from the prepared -8 * lane
 * sums of token row a. */
AI int32_t r16_corr1(const uint8_t *a, int64_t b, dtype_t t) {
    const int32_t *ls = (const int32_t *)(a + (size_t)(b / 4) * ACH + CH + 128) + 4 * (b % 4);
    int32_t s = ls[0] + ls[1] + ls[2] + ls[3];
    return t == XLLM_DT_Q8 ? s * 16 : s;
}

/* Block b's activation scale in token row a. */
AI float r16_da1(const uint8_t *a, int64_t b) {
    float da;
    memcpy(&da, a + (size_t)(b / 4) * ACH + CH + 16 * (size_t)(b % 4), 4);
    return da;
}

#define R16_J(F) F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7)
#define R16_NT 8

/*
 * A token tile's activations for the GEMM, gathered once per block of tokens
 * into a panel that one pointer walks with constant offsets (the register
 * tile then spends no instructions on addresses): per 32-column block,
 *   int32 corr[8]   each token's lanes' start (r16_corr1)
 *   f32   da[8]     each token's block scale
 *   q[8][32]        each token's 32 codes: columns 0..15, then 16..31
 * 320 bytes; tokens past the tile's are zeros.
 */
#define R16_PB 320

AI size_t r16_panel_bytes(int64_t nb) { return (size_t)nb * R16_PB; }

/* Tokens [0, nt) of act (astride bytes apart) into panel, blocks [0, nb). */
AI void r16_pack_panel(const uint8_t *act, size_t astride, int nt, int64_t nb, dtype_t t, uint8_t *panel) {
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *p = panel + (size_t)b * R16_PB;
        int32_t *corr = (int32_t *)p;
        float *da = (float *)(p + 32);
        const size_t ab = (size_t)(b / 4) * ACH + 16 * (size_t)(b % 4);
        for (int j = 0; j < R16_NT; j++) {
            uint8_t *q = p + 64 + 32 * j;
            if (j < nt) {
                const uint8_t *a = act + (size_t)j * astride;
                corr[j] = r16_corr1(a, b, t);
                da[j] = r16_da1(a, b);
                _mm_storeu_si128((__m128i *)q, _mm_loadu_si128((const __m128i *)(a + ab)));
                _mm_storeu_si128((__m128i *)(q + 16), _mm_loadu_si128((const __m128i *)(a + ab + 64)));
            } else {
                corr[j] = 0;
                da[j] = 0.0f;
                memset(q, 0, 32);
            }
        }
    }
}

/* The tile's lanes that are stored: rows [rs, r1) of r..r+15. */
AI __mmask16 r16_mask(int64_t r, int64_t rs, int64_t r1) {
    int64_t n = r1 - r < R16_ROWS ? r1 - r : R16_ROWS, skip = rs - r;
    return (__mmask16)(((1u << n) - 1) & ~((1u << skip) - 1));
}

/* Dword k (0..3) of each 128-bit lane of a, in every lane. */
AI __m512i r16_pick(__m512i a, int k) {
    switch (k) {
    case 0: return _mm512_shuffle_epi32(a, (_MM_PERM_ENUM)0x00);
    case 1: return _mm512_shuffle_epi32(a, (_MM_PERM_ENUM)0x55);
    case 2: return _mm512_shuffle_epi32(a, (_MM_PERM_ENUM)0xaa);
    default: return _mm512_shuffle_epi32(a, (_MM_PERM_ENUM)0xff);
    }
}

/* One 16-row tile (rows r..r+15 of the view) x nt (1..8) tokens of a panel
 * over all blocks; stores rows [rs, r1) (rs >= r). pf: this pass is the
 * first over the tile (its weights come from memory): prefetch ahead. */
AI void r16_tile(const uint8_t *tile, int64_t nb, dtype_t t, int nt, const uint8_t *panel, const float *bias,
                 float *y, size_t ldy, int64_t r, int64_t rs, int64_t r1, int pf) {
    const size_t BB = r16_block_bytes(t);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
#define R16_DECL(j) __m512 f##j = _mm512_setzero_ps();
    R16_J(R16_DECL)
    const uint8_t *p = panel;
    for (int64_t b = 0; b < nb; b++, p += R16_PB) {
        const uint8_t *blk = tile + (size_t)b * BB;
        if (pf)
            fetch_ahead(blk, BB);
        __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
#define R16_INIT(j) __m512i i##j = _mm512_set1_epi32(((const int32_t *)p)[j]);
        R16_J(R16_INIT)
        /* tokens 0 and 1 take their codes from 16-byte loads spread by shuffles
         * (r16_pick), the others by broadcasts from memory: fewer loads */
        __m512i a0l = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(p + 64)));
        __m512i a0h = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(p + 80)));
        __m512i a1l = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(p + 96)));
        __m512i a1h = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(p + 112)));
        if (t == XLLM_DT_Q4) {
            for (int k = 0; k < 4; k++) {
                __m512i v = _mm512_loadu_si512(blk + 32 + 64 * k);
                __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
#define R16_Q4(j)                                                                                                  \
    if (j < nt && j >= 2) {                                                                                        \
        i##j = dpbusd_b4(i##j, lo, p + 64 + 32 * (j) + 4 * k);                                                     \
        i##j = dpbusd_b4(i##j, hi, p + 64 + 32 * (j) + 16 + 4 * k);                                                \
    }
                R16_J(R16_Q4)
                i0 = _mm512_dpbusd_epi32(i0, lo, r16_pick(a0l, k));
                i0 = _mm512_dpbusd_epi32(i0, hi, r16_pick(a0h, k));
                if (nt > 1) {
                    i1 = _mm512_dpbusd_epi32(i1, lo, r16_pick(a1l, k));
                    i1 = _mm512_dpbusd_epi32(i1, hi, r16_pick(a1h, k));
                }
            }
        } else {
            for (int m = 0; m < 8; m++) {
                __m512i w = _mm512_loadu_si512(blk + 32 + 64 * m);
#define R16_Q8(j)                                                                                                  \
    if (j < nt && j >= 2) i##j = dpbusd_b4(i##j, w, p + 64 + 32 * (j) + 4 * m);
                R16_J(R16_Q8)
                i0 = _mm512_dpbusd_epi32(i0, w, r16_pick(m < 4 ? a0l : a0h, m & 3));
                if (nt > 1) i1 = _mm512_dpbusd_epi32(i1, w, r16_pick(m < 4 ? a1l : a1h, m & 3));
            }
        }
#define R16_STEP(j)                                                                                                \
    if (j < nt) {                                                                                                  \
        float da_;                                                                                                 \
        memcpy(&da_, p + 32 + 4 * (j), 4);                                                                         \
        f##j = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i##j), _mm512_mul_ps(dw, _mm512_set1_ps(da_)), f##j);           \
    }
        R16_J(R16_STEP)
    }
    __mmask16 m = r16_mask(r, rs, r1);
    __m512 bv = bias ? _mm512_maskz_loadu_ps(m, bias + r) : _mm512_setzero_ps();
#define R16_STORE(j)                                                                                               \
    if (j < nt) _mm512_mask_storeu_ps(y + (size_t)(j)*ldy + (size_t)r, m, bias ? _mm512_add_ps(f##j, bv) : f##j);
    R16_J(R16_STORE)
}

/* The GEMV: one 16-row tile against one token (act: its prepared row); the
 * block's 8 vpdpbusd go into 4 independent int32 accumulators (one chain of
 * 8 would bound the stream by their latency), summed after: integer sums are
 * exact, so the result is r16_tile's to the bit. */
AI void r16_tile1(const uint8_t *tile, int64_t nb, dtype_t t, const uint8_t *act, const float *bias, float *y,
                  int64_t r, int64_t rs, int64_t r1) {
    const size_t BB = r16_block_bytes(t);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512 f0 = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = tile + (size_t)b * BB;
        const size_t ab = (size_t)(b / 4) * ACH + 16 * (size_t)(b % 4);
        __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
        __m512i s0 = _mm512_set1_epi32(r16_corr1(act, b, t)), s1 = _mm512_setzero_si512(), s2 = s1, s3 = s1;
        if (t == XLLM_DT_Q4) {
            __m512i v0 = _mm512_loadu_si512(blk + 32), v1 = _mm512_loadu_si512(blk + 96);
            __m512i v2 = _mm512_loadu_si512(blk + 160), v3 = _mm512_loadu_si512(blk + 224);
            s0 = _mm512_dpbusd_epi32(s0, _mm512_and_si512(v0, m4), bcast4(act + ab));
            s1 = _mm512_dpbusd_epi32(s1, _mm512_and_si512(v1, m4), bcast4(act + ab + 4));
            s2 = _mm512_dpbusd_epi32(s2, _mm512_and_si512(v2, m4), bcast4(act + ab + 8));
            s3 = _mm512_dpbusd_epi32(s3, _mm512_and_si512(v3, m4), bcast4(act + ab + 12));
            s0 = _mm512_dpbusd_epi32(s0, _mm512_and_si512(_mm512_srli_epi16(v0, 4), m4), bcast4(act + ab + 64));
            s1 = _mm512_dpbusd_epi32(s1, _mm512_and_si512(_mm512_srli_epi16(v1, 4), m4), bcast4(act + ab + 68));
            s2 = _mm512_dpbusd_epi32(s2, _mm512_and_si512(_mm512_srli_epi16(v2, 4), m4), bcast4(act + ab + 72));
            s3 = _mm512_dpbusd_epi32(s3, _mm512_and_si512(_mm512_srli_epi16(v3, 4), m4), bcast4(act + ab + 76));
        } else {
            s0 = _mm512_dpbusd_epi32(s0, _mm512_loadu_si512(blk + 32), bcast4(act + ab));
            s1 = _mm512_dpbusd_epi32(s1, _mm512_loadu_si512(blk + 96), bcast4(act + ab + 4));
            s2 = _mm512_dpbusd_epi32(s2, _mm512_loadu_si512(blk + 160), bcast4(act + ab + 8));
            s3 = _mm512_dpbusd_epi32(s3, _mm512_loadu_si512(blk + 224), bcast4(act + ab + 12));
            s0 = _mm512_dpbusd_epi32(s0, _mm512_loadu_si512(blk + 288), bcast4(act + ab + 64));
            s1 = _mm512_dpbusd_epi32(s1, _mm512_loadu_si512(blk + 352), bcast4(act + ab + 68));
            s2 = _mm512_dpbusd_epi32(s2, _mm512_loadu_si512(blk + 416), bcast4(act + ab + 72));
            s3 = _mm512_dpbusd_epi32(s3, _mm512_loadu_si512(blk + 480), bcast4(act + ab + 76));
        }
        __m512i is = _mm512_add_epi32(_mm512_add_epi32(s0, s1), _mm512_add_epi32(s2, s3));
        f0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(dw, _mm512_set1_ps(r16_da1(act, b))), f0);
    }
    __mmask16 m = r16_mask(r, rs, r1);
    if (bias) f0 = _mm512_add_ps(f0, _mm512_maskz_loadu_ps(m, bias + r));
    _mm512_mask_storeu_ps(y + (size_t)r, m, f0);
}

AI void r16_tile_any(const uint8_t *tile, int64_t nb, dtype_t t, int nt, const uint8_t *panel, const float *bias,
                     float *y, size_t ldy, int64_t r, int64_t rs, int64_t r1, int pf) {
    switch (nt) {
#define R16_CASE(N)                                                                                                \
    case N: r16_tile(tile, nb, t, N, panel, bias, y, ldy, r, rs, r1, pf); break;
        R16_CASE(8) R16_CASE(7) R16_CASE(6) R16_CASE(5) R16_CASE(4) R16_CASE(3) R16_CASE(2)
    default: r16_tile(tile, nb, t, 1, panel, bias, y, ldy, r, rs, r1, pf); break;
    }
}

/* Tokens per block whose panels stay in L2 (a multiple of R16_NT): their
 * panels take at most R16_PANEL_BUDGET bytes, or one panel when that alone
 * is more. */
#define R16_PANEL_BUDGET ((size_t)384 << 10)
static int r16_token_block(int64_t nb) {
    return kernels_token_block(r16_panel_bytes(nb) / R16_NT, R16_PANEL_BUDGET, R16_NT);
}

/* Rows [r0, r1) of W (packed R16, or stored: each 16-row tile is then put in
 * R16 order in scratch first) for T tokens. T == 1: the GEMV, straight from
 * the prepared row. Else for each block of tokens, their panels, then every
 * row tile with every token tile. */
AI void r16_matmul_t(const matrix *W, dtype_t t, const uint8_t *act, size_t astride, int T, const float *bias,
                     float *y, size_t ldy, int64_t r0, int64_t r1, void *scratch) {
    int64_t nb = W->cols / QK;
    size_t tb = r16_tile_bytes(t, W->cols), rb = quant_row_bytes(t, W->group, W->cols);
    int TB = T == 1 ? 1 : r16_token_block(nb);
    uint8_t *panels = scratch;
    uint8_t *own = panels + (T == 1 ? 0 : (size_t)(TB / R16_NT) * r16_panel_bytes(nb));
    for (int t0 = 0; t0 < T; t0 += TB) {
        int t1 = t0 + TB < T ? t0 + TB : T;
        if (T > 1)
            for (int tt = t0; tt < t1; tt += R16_NT)
                r16_pack_panel(act + (size_t)tt * astride, astride, t1 - tt < R16_NT ? t1 - tt : R16_NT, nb, t,
                               panels + (size_t)((tt - t0) / R16_NT) * r16_panel_bytes(nb));
        for (int64_t tl = r0 / R16_ROWS; tl * R16_ROWS < r1; tl++) {
            int64_t r = tl * R16_ROWS, rs = r > r0 ? r : r0;
            const uint8_t *tile;
            if (W->packed) {
                tile = (const uint8_t *)W->data + (size_t)tl * tb;
            } else {
                for (int i = 0; i < R16_ROWS; i++)
                    r16_put_row(own, t, W->group, W->cols,
                                r + i < W->rows ? (const uint8_t *)W->data + (size_t)(r + i) * rb : NULL, i);
                tile = own;
            }
            if (T == 1) {
                r16_tile1(tile, nb, t, act, bias, y, r, rs, r1);
                continue;
            }
            for (int tt = t0; tt < t1; tt += R16_NT) {
                int nt = t1 - tt < R16_NT ? t1 - tt : R16_NT;
                r16_tile_any(tile, nb, t, nt, panels + (size_t)((tt - t0) / R16_NT) * r16_panel_bytes(nb), bias,
                             y + (size_t)tt * ldy, ldy, r, rs, r1, tt == t0);
            }
        }
    }
}

/* Tiles [q0, q1) of 4 rows into the packed matrix: each writes its rows'
 * lanes; the first of a 16-row tile also its padding, the last of the
 * matrix the lanes past the end. */
static void r16_repack(const matrix *W, int64_t q0, int64_t q1, void *out) {
    dtype_t t = W->dtype;
    size_t tb = r16_tile_bytes(t, W->cols), rb = quant_row_bytes(t, W->group, W->cols);
    size_t used = (size_t)(W->cols / QK) * r16_block_bytes(t);
    int64_t nq = (W->rows + 3) / 4;
    for (int64_t q = q0; q < q1; q++) {
        uint8_t *tile = (uint8_t *)out + (size_t)(q / 4) * tb;
        if (q % 4 == 0) memset(tile + used, 0, tb - used);
        int i1 = q == nq - 1 ? R16_ROWS : (int)(q % 4) * 4 + 4;
        for (int i = (int)(q % 4) * 4; i < i1; i++) {
            int64_t r = q / 4 * R16_ROWS + i;
            r16_put_row(tile, t, W->group, W->cols, r < W->rows ? (const uint8_t *)W->data + (size_t)r * rb : NULL, i);
        }
    }
}

/* --------------------------------------------------------- packed layout */

/*
 * Q4 and Q4M weights repacked at load (backend_pack_matrix) into the order
 * the kernels stream them. Rows go in tiles of 4 (rows past the end are zeros); a tile is
 * a sequence of chunk pairs (the last one alone when the chunk count is odd),
 * each pair
 *   [2][4 rows][64]  the chunks' weights as unpack() leaves them: the 64
 *                    nibble bytes whose low nibbles are w0 and high ones w1;
 *   [2][SB]          scales: 16 f16 d[row][sub-block], then for Q4M 16 f16 m
 *                    (SB 32 or 64);
 * so a pair is whole cache lines (576 or 640 bytes) and a tile one
 * sequential stream (padded to 64 bytes). These are the stored blocks' bytes
 * without the group structure (any group packs the same way): the GEMV runs
 * 4 rows at once from one stream, and the GEMM's tile unpack is plain loads.
 * Each output is computed by the same operations as from the stored layout
 * (same lanes, same step(), same reduce4 tree): identical results.
 */
#define PQB 64 /* weight bytes per row and chunk */
#define PSB(t) ((t) == XLLM_DT_Q4M ? 64 : 32)

static size_t pair_bytes(dtype_t t) { return (size_t)(8 * PQB + 2 * PSB(t)); }

static size_t packed_tile_bytes(dtype_t t, int64_t cols) {
    int64_t nch = n_chunks(cols);
    size_t b = (size_t)(nch / 2) * pair_bytes(t) + (size_t)(nch % 2) * (size_t)(4 * PQB + PSB(t));
    return (b + 63) & ~(size_t)63;
}

/* Chunk c of a tile: its 4 rows' weights, and its scales. */
AI const uint8_t *chunk_w(const uint8_t *tile, dtype_t t, int64_t c) {
    return tile + (size_t)(c / 2) * pair_bytes(t) + (size_t)(c % 2) * 4 * PQB;
}
AI const uint8_t *chunk_s(const uint8_t *tile, dtype_t t, int64_t c, int64_t nch) {
    int in_pair = c / 2 * 2 + 1 < nch ? 2 : 1;
    return tile + (size_t)(c / 2) * pair_bytes(t) + (size_t)in_pair * 4 * PQB + (size_t)(c % 2) * PSB(t);
}

/* Q8 stays as stored: its packed GEMV streamed slower than the stored one
 * (TinyLlama Q8_0 decode, 2 threads: 22 vs 28.5 tokens/s; one thread, a
 * 2048x4096 stream: 22-24 vs 26 GB/s, prefetch distances 0-4 KiB tried),
 * while packing gained only ~5% in prefill. Q4 and Q4M gain in both. */
static size_t packed_bytes(const matrix *W) {
    if (dtype_is_kq(W->dtype)) /* Q4_K, Q5_K, Q6_K: KR16; IQ4_NL, IQ4_XS, Q5_x: P32; Q2_K, Q3_K: Q23 */
        return kq_r16_type(W) ? kq_r16_packed_bytes(W) : kq_p32_type(W) ? kq_p32_packed_bytes(W) : kq_q23_packed_bytes(W);
    if (r16_type(W)) return (size_t)((W->rows + R16_ROWS - 1) / R16_ROWS) * r16_tile_bytes(W->dtype, W->cols);
    if (!dtype_is_quant(W->dtype) || W->dtype == XLLM_DT_Q8 || W->group % QK) return 0;
    return (size_t)((W->rows + 3) / 4) * packed_tile_bytes(W->dtype, W->cols);
}

static int64_t packed_rows(const matrix *W) {
    return r16_type(W) || kq_r16_type(W) || kq_p32_type(W) || kq_q23_type(W) ? R16_ROWS : 4;
}

/* Pack tiles [tile0, tile1) of W (stored layout) into out (the packed
 * matrix's start). */
static void repack(const matrix *W, int64_t tile0, int64_t tile1, void *out) {
    if (kq_r16_type(W)) {
        kq_r16_repack(W, tile0, tile1, out);
        return;
    }
    if (kq_p32_type(W)) {
        kq_p32_repack(W, tile0, tile1, out);
        return;
    }
    if (kq_q23_type(W)) {
        kq_q23_repack(W, tile0, tile1, out);
        return;
    }
    if (r16_type(W)) {
        r16_repack(W, tile0, tile1, out);
        return;
    }
    dtype_t t = W->dtype;
    int g = W->group;
    size_t bb = quant_block_bytes(t, g), rb = quant_row_bytes(t, g, W->cols), tb = packed_tile_bytes(t, W->cols);
    int64_t cols = W->cols, nch = n_chunks(cols), nfull = cols / CH;
    int tail = (int)(cols % CH) / QK;
    qlayout L = make_layout(t, g);
    for (int64_t tile = tile0; tile < tile1; tile++) {
        uint8_t *base = (uint8_t *)out + (size_t)tile * tb;
        memset(base, 0, tb);
        for (int64_t c = 0; c < nch; c++)
            for (int i = 0; i < 4; i++) {
                int64_t r = tile * 4 + i;
                if (r >= W->rows) continue;
                wchunk w = unpack((const uint8_t *)W->data + (size_t)r * rb, t, g, bb, c, nfull, tail, &L);
                uint8_t *q = (uint8_t *)chunk_w(base, t, c) + (size_t)i * PQB;
                _mm512_storeu_si512(q, _mm512_or_si512(w.w0, _mm512_slli_epi16(w.w1, 4)));
                /* lane 4b holds sub-block b's scale; f32 -> f16 is exact (it came from f16) */
                uint16_t d[16], m[16];
                _mm256_storeu_si256((__m256i *)d, _mm512_cvtps_ph(w.dw, _MM_FROUND_TO_NEAREST_INT));
                _mm256_storeu_si256((__m256i *)m, _mm512_cvtps_ph(w.mw, _MM_FROUND_TO_NEAREST_INT));
                uint16_t *sd = (uint16_t *)chunk_s(base, t, c, nch);
                for (int b = 0; b < 4; b++) {
                    sd[4 * i + b] = d[4 * b];
                    if (t == XLLM_DT_Q4M) sd[16 + 4 * i + b] = m[4 * b];
                }
            }
    }
}

/* Row i's 16 lanes (sub-block b's value on lanes 4b..4b+3) from the 16
 * scales [row][sub-block] of a chunk. */
AI __m512 row_lanes(__m512 s, int i) {
    const __m512i base = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    return _mm512_permutexvar_ps(_mm512_add_epi32(base, _mm512_set1_epi32(4 * i)), s);
}

/* Chunk c of row i of a packed tile, as unpack() gives it. */
AI wchunk packed_chunk(const uint8_t *wc, __m512 sd, __m512 sm, dtype_t t, int i) {
    wchunk w;
    nibbles(_mm512_loadu_si512(wc + (size_t)i * PQB), &w.w0, &w.w1);
    w.init = _mm512_setzero_si512();
    w.dw = row_lanes(sd, i);
    w.mw = t == XLLM_DT_Q4M ? row_lanes(sm, i) : _mm512_setzero_ps();
    return w;
}

AI void chunk_scales(const uint8_t *p, dtype_t t, __m512 *sd, __m512 *sm) {
    *sd = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
    *sm = t == XLLM_DT_Q4M ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 32))) : _mm512_setzero_ps();
}

/* GEMV over one packed tile: rows r..r+3 (stores those below r1). */
AI void gemv_packed(const uint8_t *tile, int64_t nch, dtype_t t, const uint8_t *act, const float *bias, float *y,
                    int64_t r, int64_t r1, const uint8_t *end) {
    __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
    for (int64_t c = 0; c < nch; c++) {
        achunk a = load_act(act + c * ACH, t);
        const uint8_t *wc = chunk_w(tile, t, c);
        /* software prefetch one chunk ahead: the pair layout's uneven
         * strides (weights, weights, scales) keep the hardware prefetchers
         * from locking on (measured on a 2048x4096 Q4 stream, one thread:
         * 21.9 GB/s without, 24.1 with; longer distances were slower) */
        for (size_t o = 0; o < (size_t)(4 * PQB + PSB(t)); o += 64) {
            const uint8_t *q = wc + 4 * PQB + o;
            if (q < end) _mm_prefetch((const char *)q, _MM_HINT_T0);
        }
        __m512 sd, sm;
        chunk_scales(chunk_s(tile, t, c, nch), t, &sd, &sm);
#define GP_ROW(i)                                                                                                  \
    {                                                                                                              \
        wchunk w = packed_chunk(wc, sd, sm, t, i);                                                                 \
        c##i = step(c##i, t, w.w0, w.w1, w.init, w.dw, w.mw, a);                                                   \
    }
        ROWS_I(GP_ROW)
    }
    float v[4];
    _mm_storeu_ps(v, reduce4(c0, c1, c2, c3));
    for (int i = 0; i < 4 && r + i < r1; i++) y[r + i] = v[i] + (bias ? bias[r + i] : 0.0f);
}

/* The GEMM's tile unpack (pack_q's format) from a packed tile. */
AI void pack_q_packed(const uint8_t *tile, dtype_t t, int64_t nch, uint8_t *pack) {
    for (int64_t c = 0; c < nch; c++) {
        const uint8_t *wc = chunk_w(tile, t, c);
        __m512 sd, sm;
        chunk_scales(chunk_s(tile, t, c, nch), t, &sd, &sm);
        for (int i = 0; i < MR; i++) {
            store_unpacked(pack + (size_t)(c * MR + i) * PQ, t, packed_chunk(wc, sd, sm, t, i));
        }
    }
}

/* Register tile straight from a packed tile (no unpack into scratch): 4 rows
 * x nt (1..3) tokens, weights unpacked in registers for every token tile.
 * The same per-output operations as tile_q. */
AI void tile_q_direct(const uint8_t *tile, int64_t nch, dtype_t t, int nt, const uint8_t *act, size_t astride,
                      const float *bias, float *y, size_t ldy, int64_t r, int64_t r1) {
    TILE_IJ(TQ_DECL)
    for (int64_t c = 0; c < nch; c++) {
        const uint8_t *wc = chunk_w(tile, t, c);
        __m512 sd, sm;
        chunk_scales(chunk_s(tile, t, c, nch), t, &sd, &sm);
        achunk a0 = load_act(act + c * ACH, t);
        achunk a1 = nt > 1 ? load_act(act + astride + c * ACH, t) : a0;
        achunk a2 = nt > 2 ? load_act(act + 2 * astride + c * ACH, t) : a0;
#define TD_ROW(i)                                                                                                  \
    {                                                                                                              \
        wchunk w = packed_chunk(wc, sd, sm, t, i);                                                                 \
        c##i##0 = step(c##i##0, t, w.w0, w.w1, w.init, w.dw, w.mw, a0);                                            \
        if (nt > 1) c##i##1 = step(c##i##1, t, w.w0, w.w1, w.init, w.dw, w.mw, a1);                                \
        if (nt > 2) c##i##2 = step(c##i##2, t, w.w0, w.w1, w.init, w.dw, w.mw, a2);                                \
    }
        ROWS_I(TD_ROW)
    }
    TILE_STORE()
}

AI void tile_direct(const uint8_t *tile, int64_t nch, dtype_t t, int nt, const uint8_t *act, size_t astride,
                    const float *bias, float *y, size_t ldy, int64_t r, int64_t r1) {
    if (nt == 3) tile_q_direct(tile, nch, t, 3, act, astride, bias, y, ldy, r, r1);
    else if (nt == 2) tile_q_direct(tile, nch, t, 2, act, astride, bias, y, ldy, r, r1);
    else tile_q_direct(tile, nch, t, 1, act, astride, bias, y, ldy, r, r1);
}

/* The loops (kernels_driver_q.h). Packed variants (kernels.h): "direct"
 * (token tiles straight from the packed rows) or "pack/N" (each 4-row tile
 * unpacked once into scratch for a block of N tokens, whose activations stay
 * in L2). Default (measured by the planner on small-120m shapes): direct for
 * up to 8 tokens, else pack with the block that fits QMM_BLOCK_BYTES of
 * activations. */
#define QMM_BLOCK_BYTES ((size_t)384 << 10)
#define DIRECT_MAX_T 8
#define KD_PACKED
#include "backend/cpu/kernels_driver_q.h"

static void matmul_q(const matrix *W, const void *act, size_t astride, int T, const float *bias, float *y, size_t ldy,
                     int64_t r0, int64_t r1, void *scratch) {
    if (r1 <= r0) return;
    if (r16_type(W)) {
        if (W->dtype == XLLM_DT_Q4) r16_matmul_t(W, XLLM_DT_Q4, act, astride, T, bias, y, ldy, r0, r1, scratch);
        else r16_matmul_t(W, XLLM_DT_Q8, act, astride, T, bias, y, ldy, r0, r1, scratch);
        return;
    }
    if (W->packed) { /* r0 is a multiple of 4: cpu_ops splits rows in tiles of 4 */
        if (W->dtype == XLLM_DT_Q4) matmul_packed_t(W, XLLM_DT_Q4, act, astride, T, bias, y, ldy, r0, r1, scratch);
        else matmul_packed_t(W, XLLM_DT_Q4M, act, astride, T, bias, y, ldy, r0, r1, scratch);
        return;
    }
    matmul_q_stored(W, act, astride, T, bias, y, ldy, r0, r1, scratch);
}

/* the largest of the 4-row GEMM's unpacked tile, R16's corrections plus one
 * stored tile put in order, KR16's (kq_pack_avx512.c), P32's and Q23's (kq_pack32/23_avx512.c) */
static size_t scratch_bytes(int64_t cols) {
    size_t old = (size_t)MR * (size_t)n_chunks(cols) * PQ + 64;
    /* a narrower W may take more tokens per block, but its panels never
     * exceed the block budget unless one tile of 8 tokens alone does */
    size_t panels = r16_panel_bytes(cols / QK) > R16_PANEL_BUDGET ? r16_panel_bytes(cols / QK) : R16_PANEL_BUDGET;
    size_t r16 = panels + r16_tile_bytes(XLLM_DT_Q8, cols) + 64;
    size_t kr16 = kq_r16_scratch_bytes(cols), p32 = kq_p32_scratch_bytes(cols);
    if (p32 > kr16) kr16 = p32;
    if (kq_q23_scratch_bytes(cols) > kr16) kr16 = kq_q23_scratch_bytes(cols);
    size_t m = old > r16 ? old : r16;
    return m > kr16 ? m : kr16;
}

/* ----------------------------------------------------------- float matmul */

/* 16 weights from element i of a row (m: which lanes), as f32, zeros elsewhere. */
AI __m512 load_w(const void *row, dtype_t t, int64_t i, __mmask16 m) {
    if (t == XLLM_DT_F32)
        return m == 0xffff ? _mm512_loadu_ps((const float *)row + i) : _mm512_maskz_loadu_ps(m, (const float *)row + i);
    __m256i h = m == 0xffff ? _mm256_loadu_si256((const __m256i *)((const uint16_t *)row + i))
                            : _mm256_maskz_loadu_epi16(m, (const uint16_t *)row + i);
    if (t == XLLM_DT_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

#define FTILE_IJ(F)                                                                                                \
    F(0, 0) F(0, 1) F(0, 2) F(0, 3) F(1, 0) F(1, 1) F(1, 2) F(1, 3) F(2, 0) F(2, 1) F(2, 2) F(2, 3) F(3, 0) F(3, 1)  \
        F(3, 2) F(3, 3)
#define TOKS_J(F) F(0) F(1) F(2) F(3)

/* Rows r + i (i < 4, clamped to r1 - 1) x nt (1..4) tokens; one 16-lane
 * accumulator each, columns in order, the tail masked. nt == 1 is the GEMV. */
AI void tile_f(const uint8_t *W, size_t rb, dtype_t t, int64_t cols, int nt, const float *x, size_t xs,
               const float *bias, float *y, size_t ldy, int64_t r, int64_t r1) {
    const uint8_t *row[4];
    for (int i = 0; i < 4; i++) row[i] = W + (size_t)(r + i < r1 ? r + i : r1 - 1) * rb;
#define TF_DECL(i, j) __m512 c##i##j = _mm512_setzero_ps();
    FTILE_IJ(TF_DECL)
    /* full 16-column steps with plain loads, then the tail masked (zeros) */
#define TF_X(j) __m512 x##j = j < nt ? _mm512_maskz_loadu_ps(m, x + (size_t)(j)*xs + c) : _mm512_setzero_ps();
#define TF_ROW(i)                                                                                                  \
    {                                                                                                              \
        __m512 w = load_w(row[i], t, c, m);                                                                        \
        c##i##0 = _mm512_fmadd_ps(w, x0, c##i##0);                                                                 \
        if (nt > 1) c##i##1 = _mm512_fmadd_ps(w, x1, c##i##1);                                                     \
        if (nt > 2) c##i##2 = _mm512_fmadd_ps(w, x2, c##i##2);                                                     \
        if (nt > 3) c##i##3 = _mm512_fmadd_ps(w, x3, c##i##3);                                                     \
    }
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16) {
        const __mmask16 m = 0xffff;
        TOKS_J(TF_X)
        ROWS_I(TF_ROW)
    }
    if (c < cols) {
        const __mmask16 m = (__mmask16)((1u << (cols - c)) - 1);
        TOKS_J(TF_X)
        ROWS_I(TF_ROW)
    }
#define TF_STORE(i, j)                                                                                             \
    if (r + i < r1 && j < nt) y[(size_t)(j)*ldy + (size_t)(r + i)] = _mm512_reduce_add_ps(c##i##j) + (bias ? bias[r + i] : 0.0f);
    FTILE_IJ(TF_STORE)
}

AI void tile_f_any(const uint8_t *W, size_t rb, dtype_t t, int64_t cols, int nt, const float *x, size_t xs,
                   const float *bias, float *y, size_t ldy, int64_t r, int64_t r1) {
    switch (nt) {
    case 4: tile_f(W, rb, t, cols, 4, x, xs, bias, y, ldy, r, r1); break;
    case 3: tile_f(W, rb, t, cols, 3, x, xs, bias, y, ldy, r, r1); break;
    case 2: tile_f(W, rb, t, cols, 2, x, xs, bias, y, ldy, r, r1); break;
    default: tile_f(W, rb, t, cols, 1, x, xs, bias, y, ldy, r, r1); break;
    }
}

/* GEMV: one row against one token, rows in memory order; the same
 * arithmetic per output as tile_f. */
AI void gemv_f(const uint8_t *W, size_t rb, dtype_t t, int64_t cols, const float *x, const float *bias, float *y,
               int64_t r, const uint8_t *end) {
    const uint8_t *row = W + (size_t)r * rb;
    size_t es = rb / (size_t)cols;
    __m512 acc = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16) {
        kernels_prefetch_ahead(row + (size_t)c * es, 16 * es, end);
        acc = _mm512_fmadd_ps(load_w(row, t, c, 0xffff), _mm512_loadu_ps(x + c), acc);
    }
    if (c < cols) {
        __mmask16 m = (__mmask16)((1u << (cols - c)) - 1);
        acc = _mm512_fmadd_ps(load_w(row, t, c, m), _mm512_maskz_loadu_ps(m, x + c), acc);
    }
    y[r] = _mm512_reduce_add_ps(acc) + (bias ? bias[r] : 0.0f);
}

/* The loops (kernels_driver_f.h): blocks of tokens whose inputs fit 256 KiB. */
#define FMM_BLOCK_BYTES ((size_t)256 << 10)
#define FMM_BLOCK_MAX 128
#include "backend/cpu/kernels_driver_f.h"

const cpu_kernels cpu_kernels_avx512 = {
    .level = CPU_AVX512,
    .name = "avx512",
    .act_bytes = act_bytes,
    .act_prepare = act_prepare,
    .quant_act = quant_act,
    .scratch_bytes = scratch_bytes,
    .matmul_q = matmul_q,
    .matmul_f = matmul_f,
    .matmul_kq = kq_matmul_avx512,
    .kq_act = kq_act_avx512,
    .packed_bytes = packed_bytes,
    .repack = repack,
    .packed_rows = packed_rows,
    .n_variants = 4,
    .variant_names = packed_variants,
    .attn = &cpu_attn_avx512,
};

#else
typedef int no_avx512_on_this_arch;
#endif
