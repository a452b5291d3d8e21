/*
 * kq_pack32_avx512.c - IQ4_NL, Q5_0, Q5_1 (blocks of 32) and IQ4_XS at the
 * avx512 level (VNNI) in 16-row tiles ("P32"), the scheme of kq_pack_avx512.c's
 * KR16: 16 weight rows in the 16 int32 lanes of a vector, one token's 4
 * activation bytes broadcast, and one vpdpbusd does 4 multiply-adds for each
 * of the 16 rows. Models load these weights repacked (backend_pack_matrix);
 * a stored matrix (XLLM_REPACK=0) has each tile put in this order in scratch
 * first, so both give the same bits. Needs cols a multiple of 256 (a tile's
 * "group" is 256 values: 8 blocks of 32, or one IQ4_XS super-block); other
 * shapes stay as stored and take kq_kernels_x86.h's 256-bit code.
 *
 * vpdpbusd multiplies unsigned weight bytes by signed activations, so every
 * code is stored as an unsigned u and the offset comes back through the
 * activations' sums, per token (exact integers throughout):
 *  - IQ4_NL / IQ4_XS: u = table value + 128 (1..241), looked up from the
 *    nibbles by vpshufb; the sum starts at -128 x (sum of the 32 activations);
 *  - Q5_0: u = the 5-bit code (0..31), value u - 16: starts at -16 x sum;
 *  - Q5_1: u = the 5-bit code, value d u + m: starts at 0; m_w s_a is a float term.
 * The fifth bits of Q5_x are rearranged at load so that one shift and mask
 * put them on bit 4 of the code bytes (H below).
 * Per (row, token, block of 32) P = the block's exact integer S_b (kquant.h);
 * IQ4_XS: S_b = sum over its 8 sub-blocks of (scale - 32) x P_j (vpmulld).
 * Float part per block (IQ4_XS: per super-block), 16 lanes (rows), in block
 * order, the same sequence in GEMV and GEMM:
 *   f = fma(float(P), d_w * d_a, f)
 *   f = fma(m_w, s_a, f)                       (Q5_1)
 * and y = f + bias: results do not depend on T, tiling, the thread split or
 * repacking. They differ from the 256-bit code (other levels) by float
 * rounding only (the order of additions), as KR16's Q4_K / Q6_K do.
 *
 * Packed tile of 16 rows (rows past the end: zeros), per group of 256 values,
 * in the order the GEMV reads it (one sequential stream; with the d's of a
 * group first and the codes after, Q5_0's GEMV streamed at a third of the
 * speed), whole cache lines:
 *   IQ4_NL 4 x 576 bytes, a pair of blocks each: [2][16] f16 d, QS[2]
 *   Q5_0   4 x 704: [2][16] f16 d, H[2], QS[2]
 *   Q5_1   4 x 768: [2][16] f16 d, [2][16] f16 m, H[2], QS[2]
 *   IQ4_XS 2240 bytes: [16] f16 d, 32 zero bytes, [8][16] i8 scale - 32, QS[8]
 * QS (256 bytes) [4 n][16 lanes][4]: lane i = row i's stored qs[4n .. 4n+3] of
 * the block (low nibbles: elements 4n .. 4n+3, high ones 16 further); H (64
 * bytes) [16 lanes][4]: byte k of lane i has bit n = the fifth bit of
 * element 4n + k and bit 4 + n that of element 16 + 4n + k.
 *
 * GEMV (one token): the tile streamed once, decoded in registers. GEMM: per
 * 16-row tile and group the codes are decoded once into a small buffer and
 * every token of a block (up to 64), in register tiles of 8, runs over it.
 *
 * Thread-safe: writes only the rows of y (and the scratch) it is given.
 */
#if defined(__x86_64__)
#include "backend/cpu/kq_kernels.h"
#include "quant/kquant.h"

#include <immintrin.h>
#include <string.h>

#include "backend/cpu/simd_avx512.h" /* fetch_ahead */

#define AI static inline __attribute__((always_inline))
#include "backend/cpu/kq_pack32_layout.h"

#define PTB 64 /* most tokens per token block */

int kq_p32_type(const matrix *W) { return p32_is_type(W); }
size_t kq_p32_packed_bytes(const matrix *W) { return p32_packed_bytes(W); }
void kq_p32_repack(const matrix *W, int64_t q0, int64_t q1, void *out) { p32_repack(W, q0, q1, out); }

/* ------------------------------------------------------------ activations */

/*
 * Per token, the integer each block's (IQ4_XS: sub-block's) sum starts from:
 * e[cols / 32] int32 (-128 or -16 x the activations' sum, or 0 for Q5_1).
 * Q80 rows: q[cols], f32 d[cols / 32], f32 s[cols / 32]; Q8K rows: q[cols],
 * f32 d[cols / 256], int16 sums per 16.
 */
static void p32_prepare(dtype_t t, const uint8_t *act, size_t astride, int n, int64_t cols, int32_t *ex) {
    const int64_t nb = cols / 32;
    const __m512i ones = _mm512_set1_epi8(1);
    for (int j = 0; j < n; j++) {
        const uint8_t *a = act + (size_t)j * astride;
        int32_t *e = ex + (size_t)j * (size_t)nb;
        if (t == XLLM_DT_Q5_1) {
            memset(e, 0, sizeof(int32_t) * (size_t)nb);
        } else if (t == XLLM_DT_IQ4_XS) {
            const int16_t *bs = (const int16_t *)(a + cols + 4 * (size_t)(cols / QK_K));
            for (int64_t b = 0; b < nb; b++) e[b] = -128 * ((int32_t)bs[2 * b] + bs[2 * b + 1]);
        } else {
            const int32_t mul = t == XLLM_DT_Q5_0 ? -16 : -128;
            for (int64_t b = 0; b < nb; b += 2) {
                __m512i s4 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(a + 32 * b));
                e[b] = mul * _mm512_mask_reduce_add_epi32(0x00ff, s4);
                if (b + 1 < nb) e[b + 1] = mul * _mm512_mask_reduce_add_epi32(0xff00, s4);
            }
        }
    }
}

AI __m512i bc4(const int8_t *p) { /* 4 activation bytes to every lane */
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

AI __m512 f16x16(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

AI __m512i iq4_table(void) { /* llama.cpp's levels + 128, unsigned */
    __m128i t = _mm_add_epi8(_mm_loadu_si128((const __m128i *)kq_iq4_values), _mm_set1_epi8((char)128));
    return _mm512_broadcast_i32x4(t);
}

/* The codes of vector n of a block: lo (elements 4n + k), hi (16 + 4n + k).
 * v: the QS vector; h: the block's H vector (Q5_x). */
AI void codes(dtype_t t, __m512i v, __m512i h, int n, __m512i tbl, __m512i *lo, __m512i *hi) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), b4 = _mm512_set1_epi8(0x10);
    __m512i l = _mm512_and_si512(v, m4), u = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    if (t == XLLM_DT_IQ4_NL || t == XLLM_DT_IQ4_XS) {
        *lo = _mm512_shuffle_epi8(tbl, l);
        *hi = _mm512_shuffle_epi8(tbl, u);
    } else { /* A | (B & C): 0xF8 */
        __m512i hl = _mm512_slli_epi16(h, 4 - n), hh = n == 0 ? h : _mm512_srli_epi16(h, n);
        *lo = _mm512_ternarylogic_epi32(l, hl, b4, 0xF8);
        *hi = _mm512_ternarylogic_epi32(u, hh, b4, 0xF8);
    }
}

/* Store rows [rs, min(r + 16, r1)) of a tile's f (y: the token's row). */
AI void p32_store(__m512 f, const float *bias, float *y, int64_t r, int64_t rs, int64_t r1) {
    int64_t n = r1 - r < PR ? r1 - r : PR, skip = rs - r;
    __mmask16 m = (__mmask16)(((1u << n) - 1) & ~((1u << skip) - 1));
    if (bias) f = _mm512_add_ps(f, _mm512_maskz_loadu_ps(m, bias + r));
    _mm512_mask_storeu_ps(y + r, m, f);
}

/* ------------------------------------------------------------------ GEMV */

/* The integer sum of one block of 32 (sub-block for IQ4_XS) from e0, 16 rows. */
AI __m512i block_sum(dtype_t t, const uint8_t *grp, const p32_layout *L, int k, const int8_t *q, int32_t e0,
                     __m512i tbl) {
    const __m512i h = t == XLLM_DT_Q5_0 || t == XLLM_DT_Q5_1 ? _mm512_loadu_si512(grp + h_at(L, k)) : tbl;
    __m512i p0 = _mm512_set1_epi32(e0), p1 = _mm512_setzero_si512();
    for (int n = 0; n < 4; n++) {
        __m512i lo, hi;
        codes(t, _mm512_loadu_si512(grp + qs_at(L, k) + 64 * n), h, n, tbl, &lo, &hi);
        p0 = _mm512_dpbusd_epi32(p0, lo, bc4(q + 4 * n));
        p1 = _mm512_dpbusd_epi32(p1, hi, bc4(q + 16 + 4 * n));
    }
    return _mm512_add_epi32(p0, p1);
}

/* IQ4_NL's GEMV: the tile is a run of 576-byte block pairs ([2][16] f16 d,
 * QS[2]), walked with one pointer and fixed offsets, each activation word an
 * embedded broadcast, 4 int32 chains per block. Per block the same exact P
 * and the same float step as gemv_t's, in block order: the same bits.
 * gemv_t's loop recomputes the layout's offsets per block and broadcasts
 * each activation word on its own: about 60 instructions per block of 16 x
 * 32 weights against 42 here. Measured (bench_kernels, one thread): the
 * cache-resident rate is the same (~115 GB/s, bound by the vpshufb and
 * vpdpbusd ports), 4-5x what one core streams from memory, so the decode
 * GEMV waits on memory either way; fewer instructions leave more of the
 * out-of-order window to the loads. */
AI __m512 gemv_nl(const uint8_t *tile, int64_t ng, const uint8_t *a, int64_t cols, const int32_t *e) {
    const __m512i tbl = iq4_table(), m4 = _mm512_set1_epi8(0x0f);
    const int8_t *q = (const int8_t *)a;
    const float *da = (const float *)(a + cols);
    __m512 f = _mm512_setzero_ps();
    const int64_t np = 4 * ng; /* pairs of blocks, contiguous across groups */
    for (int64_t p = 0; p < np; p++, tile += 576, q += 64) {
        fetch_ahead(tile, 576);
        for (int h = 0; h < 2; h++) {
            const uint8_t *qs = tile + 64 + 256 * h;
            const int8_t *x = q + 32 * h;
            const __m512i v0 = _mm512_loadu_si512(qs), v1 = _mm512_loadu_si512(qs + 64);
            const __m512i v2 = _mm512_loadu_si512(qs + 128), v3 = _mm512_loadu_si512(qs + 192);
            __m512i s0 = _mm512_set1_epi32(e[2 * p + h]), s1, s2, s3;
            s0 = dpbusd_b4(s0, _mm512_shuffle_epi8(tbl, _mm512_and_si512(v0, m4)), x);
            s1 = dpbusd_b4(_mm512_setzero_si512(), _mm512_shuffle_epi8(tbl, _mm512_and_si512(v1, m4)), x + 4);
            s2 = dpbusd_b4(_mm512_setzero_si512(), _mm512_shuffle_epi8(tbl, _mm512_and_si512(v2, m4)), x + 8);
            s3 = dpbusd_b4(_mm512_setzero_si512(), _mm512_shuffle_epi8(tbl, _mm512_and_si512(v3, m4)), x + 12);
            s0 = dpbusd_b4(s0, _mm512_shuffle_epi8(tbl, _mm512_and_si512(_mm512_srli_epi16(v0, 4), m4)), x + 16);
            s1 = dpbusd_b4(s1, _mm512_shuffle_epi8(tbl, _mm512_and_si512(_mm512_srli_epi16(v1, 4), m4)), x + 20);
            s2 = dpbusd_b4(s2, _mm512_shuffle_epi8(tbl, _mm512_and_si512(_mm512_srli_epi16(v2, 4), m4)), x + 24);
            s3 = dpbusd_b4(s3, _mm512_shuffle_epi8(tbl, _mm512_and_si512(_mm512_srli_epi16(v3, 4), m4)), x + 28);
            const __m512i P = _mm512_add_epi32(_mm512_add_epi32(s0, s1), _mm512_add_epi32(s2, s3));
            f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(P), _mm512_mul_ps(f16x16(tile + 32 * h), _mm512_set1_ps(da[2 * p + h])), f);
        }
    }
    return f;
}

AI __m512 gemv_t(dtype_t t, const uint8_t *tile, int64_t ng, const uint8_t *a, int64_t cols, const int32_t *e) {
    if (t == XLLM_DT_IQ4_NL) return gemv_nl(tile, ng, a, cols, e);
    const p32_layout L = layout_of(t);
    const __m512i tbl = iq4_table();
    const int8_t *q = (const int8_t *)a;
    const float *da = (const float *)(a + cols), *sa = da + cols / 32;
    __m512 f = _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *grp = tile + (size_t)g * L.bytes;
        fetch_ahead(grp, L.bytes);
        if (t == XLLM_DT_IQ4_XS) {
            __m512i S = _mm512_setzero_si512();
            for (int j = 0; j < 8; j++) {
                __m512i P = block_sum(t, grp, &L, j, q + 256 * g + 32 * j, e[8 * g + j], tbl);
                __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(grp + L.sc + 16 * j)));
                S = _mm512_add_epi32(S, _mm512_mullo_epi32(P, sc));
            }
            f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_mul_ps(f16x16(grp), _mm512_set1_ps(da[g])), f);
            continue;
        }
        for (int k = 0; k < 8; k++) {
            const int64_t b = 8 * g + k;
            __m512i P = block_sum(t, grp, &L, k, q + 32 * b, e[b], tbl);
            f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(P), _mm512_mul_ps(f16x16(grp + d_at(&L, k)), _mm512_set1_ps(da[b])), f);
            if (t == XLLM_DT_Q5_1) f = _mm512_fmadd_ps(f16x16(grp + m_at(&L, k)), _mm512_set1_ps(sa[b]), f);
        }
    }
    return f;
}

/* ------------------------------------------------------------------ GEMM */

typedef struct {
    __m512i c[64]; /* lane i: row i's unsigned codes of elements 4v .. 4v + 3 */
    __m512i sc[8]; /* IQ4_XS: int32 sub-block scales */
    __m512 dv[8];  /* d per block (IQ4_XS: dv[0]) */
    __m512 mv[8];  /* Q5_1: m per block */
} pdec;

AI void decode_group(dtype_t t, const uint8_t *grp, pdec *u) {
    const p32_layout L = layout_of(t);
    const __m512i tbl = iq4_table();
    for (int k = 0; k < 8; k++) {
        const __m512i h = t == XLLM_DT_Q5_0 || t == XLLM_DT_Q5_1 ? _mm512_loadu_si512(grp + h_at(&L, k)) : tbl;
        for (int n = 0; n < 4; n++)
            codes(t, _mm512_loadu_si512(grp + qs_at(&L, k) + 64 * n), h, n, tbl, &u->c[8 * k + n], &u->c[8 * k + 4 + n]);
        if (t == XLLM_DT_IQ4_XS) {
            u->sc[k] = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(grp + L.sc + 16 * k)));
        } else {
            u->dv[k] = f16x16(grp + d_at(&L, k));
            if (t == XLLM_DT_Q5_1) u->mv[k] = f16x16(grp + m_at(&L, k));
        }
    }
    if (t == XLLM_DT_IQ4_XS) u->dv[0] = f16x16(grp);
}

#define PJ(F) F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7)

/* NT (1..8) tokens (rows of act astride bytes apart, from a) against group g
 * decoded in u; e: their extras (nb apart); F: their 16 floats each. */
AI void p32_tokens(dtype_t t, int NT, const pdec *u, int64_t g, const uint8_t *a, size_t astride, int64_t cols,
                   const int32_t *e, int64_t nb, float *F) {
#define P_DECL(j)                                                                                                 \
    const int8_t *q##j = (const int8_t *)(a + astride * (size_t)((j) < NT ? (j) : 0)) + 256 * g;                 \
    const float *d##j = (const float *)((const uint8_t *)(a + astride * (size_t)((j) < NT ? (j) : 0)) + cols);     \
    const int32_t *e##j = e + (size_t)nb * (size_t)((j) < NT ? (j) : 0) + 8 * g;                                  \
    __m512 f##j = (j) < NT ? _mm512_loadu_ps(F + 16 * (j)) : _mm512_setzero_ps();                                 \
    __m512i P##j, S##j = _mm512_setzero_si512();
    PJ(P_DECL)
    for (int k = 0; k < 8; k++) {
#define P_INIT(j) if ((j) < NT) P##j = _mm512_set1_epi32(e##j[k]);
        PJ(P_INIT)
        for (int m = 0; m < 8; m++) {
            const __m512i c = u->c[8 * k + m];
#define P_DP(j) if ((j) < NT) P##j = _mm512_dpbusd_epi32(P##j, c, bc4(q##j + 32 * k + 4 * m));
            PJ(P_DP)
        }
        if (t == XLLM_DT_IQ4_XS) {
#define P_XS(j) if ((j) < NT) S##j = _mm512_add_epi32(S##j, _mm512_mullo_epi32(P##j, u->sc[k]));
            PJ(P_XS)
        } else {
#define P_FL(j)                                                                                                   \
    if ((j) < NT) {                                                                                               \
        f##j = _mm512_fmadd_ps(_mm512_cvtepi32_ps(P##j), _mm512_mul_ps(u->dv[k], _mm512_set1_ps(d##j[8 * g + k])), \
                               f##j);                                                                             \
        if (t == XLLM_DT_Q5_1) f##j = _mm512_fmadd_ps(u->mv[k], _mm512_set1_ps(d##j[cols / 32 + 8 * g + k]), f##j); \
    }
            PJ(P_FL)
        }
    }
#define P_END(j)                                                                                                  \
    if ((j) < NT) {                                                                                               \
        if (t == XLLM_DT_IQ4_XS)                                                                                  \
            f##j = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S##j), _mm512_mul_ps(u->dv[0], _mm512_set1_ps(d##j[g])), f##j); \
        _mm512_storeu_ps(F + 16 * (j), f##j);                                                                     \
    }
    PJ(P_END)
}

AI void p32_tokens_any(dtype_t t, int nt, const pdec *u, int64_t g, const uint8_t *a, size_t astride, int64_t cols,
                       const int32_t *e, int64_t nb, float *F) {
    switch (nt) {
#define P_CASE(N)                                                                                                  \
    case N: p32_tokens(t, N, u, g, a, astride, cols, e, nb, F); break;
        P_CASE(8) P_CASE(7) P_CASE(6) P_CASE(5) P_CASE(4) P_CASE(3) P_CASE(2)
    default: p32_tokens(t, 1, u, g, a, astride, cols, e, nb, F); break;
    }
}

size_t kq_p32_scratch_bytes(int64_t cols) {
    if (cols < QK_K) cols = QK_K;
    return al64(tile_bytes(XLLM_DT_Q5_1, cols)) + al64((size_t)PTB * (size_t)(cols / 32) * 4) +
           (size_t)PTB * 16 * sizeof(float) + 64;
}

AI void p32_matmul_t(dtype_t t, const matrix *W, const uint8_t *act, size_t astride, int T, const float *bias,
                     float *y, size_t ldy, int64_t r0, int64_t r1, void *scratch) {
    const int64_t cols = W->cols, ng = cols / QK_K, nb = cols / 32;
    const size_t tb = tile_bytes(t, cols), gb = layout_of(t).bytes;
    uint8_t *own = scratch;
    int32_t *ex = (int32_t *)(own + al64(tile_bytes(XLLM_DT_Q5_1, cols)));
    float *F = (float *)((uint8_t *)ex + al64((size_t)PTB * (size_t)nb * 4));
    for (int t0 = 0; t0 < T; t0 += PTB) {
        const int n = T - t0 < PTB ? T - t0 : PTB;
        const uint8_t *a0 = act + (size_t)t0 * astride;
        p32_prepare(t, a0, astride, n, cols, ex);
        for (int64_t tl = r0 / PR; tl * PR < r1; tl++) {
            const int64_t r = tl * PR, rs = r > r0 ? r : r0;
            const uint8_t *tile = (const uint8_t *)W->data + (size_t)tl * tb;
            if (!W->packed) {
                put_tile(own, W, tl);
                tile = own;
            }
            if (n == 1) {
                p32_store(gemv_t(t, tile, ng, a0, cols, ex), bias, y + (size_t)t0 * ldy, r, rs, r1);
                continue;
            }
            memset(F, 0, sizeof(float) * 16 * (size_t)n);
            for (int64_t g = 0; g < ng; g++) {
                pdec u;
                fetch_ahead(tile + (size_t)g * gb, gb);
                decode_group(t, tile + (size_t)g * gb, &u);
                for (int tt = 0; tt < n; tt += 8)
                    p32_tokens_any(t, n - tt < 8 ? n - tt : 8, &u, g, a0 + (size_t)tt * astride, astride, cols,
                                   ex + (size_t)tt * (size_t)nb, nb, F + 16 * tt);
            }
            for (int j = 0; j < n; j++) p32_store(_mm512_loadu_ps(F + 16 * j), bias, y + (size_t)(t0 + j) * ldy, r, rs, r1);
        }
    }
}

void kq_p32_matmul(const matrix *W, const void *act, size_t astride, int T, const float *bias, float *y, size_t ldy,
                   int64_t r0, int64_t r1, void *scratch) {
    if (r1 <= r0 || T <= 0) return;
    switch (W->dtype) {
    case XLLM_DT_IQ4_NL: p32_matmul_t(XLLM_DT_IQ4_NL, W, act, astride, T, bias, y, ldy, r0, r1, scratch); break;
    case XLLM_DT_Q5_0: p32_matmul_t(XLLM_DT_Q5_0, W, act, astride, T, bias, y, ldy, r0, r1, scratch); break;
    case XLLM_DT_Q5_1: p32_matmul_t(XLLM_DT_Q5_1, W, act, astride, T, bias, y, ldy, r0, r1, scratch); break;
    default: p32_matmul_t(XLLM_DT_IQ4_XS, W, act, astride, T, bias, y, ldy, r0, r1, scratch); break;
    }
}

#else
typedef int no_kq_pack32_avx512_on_this_arch;
#endif
