/*
 * kq_pack23_avx512.c - Q2_K and Q3_K at the avx512 level (VNNI) in 16-row
 * tiles ("Q23"), the scheme of kq_pack_avx512.c's KR16: 16 weight rows in
 * the 16 int32 lanes of a vector, one token's 4 activation bytes broadcast,
 * one vpdpbusd does 4 multiply-adds for each of the 16 rows. Models load
 * these weights repacked (backend_pack_matrix); a stored matrix
 * (XLLM_REPACK=0) has each tile put in this order in scratch first, so both
 * give the same bits.
 *
 * Integer part, per (row, token, super-block of 256 values), all exact, on
 * the Q8K activations (q, d, int16 sums per 16 bs):
 *  - Q2_K: codes 0..3 (unsigned operand); a sub-block of 16 values (4
 *    vpdpbusd from zero) sums to at most 16 * 3 * 127 = 6096 in magnitude,
 *    an int16, and vpdpwssd by the lane (scale, 0) adds scale x sum to S.
 *    M = sum over sub-blocks of min x bs: vpdpwssd of the lane (min 2p,
 *    min 2p + 1) by the token's broadcast pair (bs 2p, bs 2p + 1), 8 per
 *    super-block.
 *  - Q3_K: codes u = 2 bits | high bit << 2 (0..7), value u - 4; a sub-block
 *    starts from -4 x bs (a per-token constant), so after 4 vpdpbusd it holds
 *    sum (u - 4) q, at most 16 * 4 * 127 = 8128 in magnitude: an int16, and
 *    vpdpwssd by (scale - 32, 0) adds it.
 * These are the reference's S_b and M_b (kquant.h). Float part per
 * super-block b, 16 lanes (rows), the same in GEMV and GEMM:
 *   f = fma(float(S), d_w * d_a, f)
 *   f = fnmadd(float(M), dmin_w * d_a, f)     (Q2_K)
 * and y = f + bias. So results do not depend on T, tiling, the thread split
 * or repacking; they differ from the 256-bit code of other levels by float
 * rounding only (as KR16's Q4_K / Q6_K).
 *
 * Packed tile of 16 rows (rows past the end: zeros), per super-block, whole
 * cache lines in the order the GEMV reads them:
 *   Q2_K (1344 bytes, 84 per row as stored): [16] f16 d, [16] f16 dmin,
 *     SM [8 p][16 lanes][2] the stored scale bytes (scale | min << 4) of
 *     sub-blocks 2p, 2p + 1, QS
 *   Q3_K (1856 bytes, 116 per row; stored 110): [16] f16 d, 32 zero bytes,
 *     SC [16 s][16 lanes] i8 scale - 32, then per n = 0..7: H n ([16 lanes][4]:
 *     row i's stored hmask[4n .. 4n+3]), QS (0, n), QS (1, n)
 *   QS (h, n) [16 lanes][4]: row i's stored qs[32h + 4n .. +3] (Q2_K: in the
 *     order (0, 0), (1, 0), (0, 1), (1, 1) ..); bits 2j,
 *     2j + 1 of byte k are element 128h + 32j + 4n + k (Q3_K's high bit:
 *     bit 4h + j of the same H byte).
 *
 * GEMV (one token): the tile streamed once, decoded in registers. GEMM: per
 * 16-row tile and super-block the codes are decoded once into a small buffer
 * (element order) and every token of a block (up to 64), in register tiles
 * of 8, runs over it.
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
#define QTB 64 /* most tokens per token block */
#include "backend/cpu/kq_pack23_layout.h"

int kq_q23_type(const matrix *W) { return q23_is_type(W); }
size_t kq_q23_packed_bytes(const matrix *W) { return q23_packed_bytes(W); }
void kq_q23_repack(const matrix *W, int64_t q0, int64_t q1, void *out) { q23_repack(W, q0, q1, out); }

/* ---------------------------------------------------------------- pieces */

AI __m512i bc4(const void *p) { /* 4 bytes to every lane */
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

AI __m512 f16x16(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

/* Code vector (h, j) of QS vector v (Q3_K: with H vector hv): crumb j, and
 * Q3_K's high bit 4h + j on bit 2. */
AI __m512i code(int q2, __m512i v, __m512i hv, int h, int j) {
    __m512i c = _mm512_and_si512(_mm512_srli_epi16(v, 2 * j), _mm512_set1_epi8(3));
    if (q2) return c;
    const int b = 4 * h + j; /* bit b of each H byte to bit 2 */
    __m512i hb = b >= 2 ? _mm512_srli_epi16(hv, b - 2) : _mm512_slli_epi16(hv, 2 - b);
    return _mm512_ternarylogic_epi32(c, hb, _mm512_set1_epi8(4), 0xF8); /* c | (hb & 4) */
}

/* Sub-block s's scale lane (scale, 0): Q2_K from the SM bytes, Q3_K from SC. */
AI __m512i scale_lane(int q2, const uint8_t *blk, int s) {
    if (q2) {
        __m512i x = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(blk + Q2_SM + 32 * (s / 2))));
        x = s % 2 ? _mm512_srli_epi32(x, 16) : x;
        return _mm512_and_si512(x, _mm512_set1_epi32(0xf));
    }
    return _mm512_cvtepu16_epi32(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + Q3_SC + 16 * s))));
}

/* Q2_K's lane (min 2p, min 2p + 1) */
AI __m512i min_pair(const uint8_t *blk, int p) {
    __m512i x = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(blk + Q2_SM + 32 * p)));
    return _mm512_srli_epi16(x, 4);
}

/* ------------------------------------------------------------------ GEMV */

AI __m512 gemv_t(int q2, const uint8_t *tile, int64_t nb, const uint8_t *a, int64_t cols) {
    const int8_t *qa = (const int8_t *)a;
    const float *da = (const float *)(a + cols);
    const int16_t *bs = (const int16_t *)(da + nb);
    const size_t sbb = q2 ? Q2B : Q3B;
    __m512 f = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = tile + (size_t)b * sbb;
        fetch_ahead(blk, sbb);
        const int8_t *q = qa + b * QK_K;
        const int16_t *bsb = bs + 16 * b;
        __m512i S = _mm512_setzero_si512(), M = S;
        for (int half = 0; half < 2; half++) {
            __m512i P[2][4];
            for (int h = 0; h < 2; h++)
                for (int j = 0; j < 4; j++) /* sub-block 8h + 2j + half */
                    P[h][j] = q2 ? _mm512_setzero_si512() : _mm512_set1_epi32(-4 * bsb[8 * h + 2 * j + half]);
            for (int n4 = 0; n4 < 4; n4++) {
                const int n = 4 * half + n4;
                const __m512i hv = q2 ? _mm512_setzero_si512() : _mm512_loadu_si512(blk + q23_h_at(n));
                for (int h = 0; h < 2; h++) {
                    __m512i v = _mm512_loadu_si512(blk + q23_qs_at(q2, h, n));
                    for (int j = 0; j < 4; j++)
                        P[h][j] = _mm512_dpbusd_epi32(P[h][j], code(q2, v, hv, h, j), bc4(q + 128 * h + 32 * j + 4 * n));
                }
            }
            for (int h = 0; h < 2; h++)
                for (int j = 0; j < 4; j++)
                    S = _mm512_dpwssd_epi32(S, P[h][j], scale_lane(q2, blk, 8 * h + 2 * j + half));
        }
        __m512 dd = _mm512_set1_ps(da[b]);
        f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_mul_ps(f16x16(blk), dd), f);
        if (q2) {
            for (int p = 0; p < 8; p++) M = _mm512_dpwssd_epi32(M, min_pair(blk, p), bc4(bsb + 2 * p));
            f = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(f16x16(blk + Q2_DMIN), dd), f);
        }
    }
    return f;
}

/* ------------------------------------------------------------------ GEMM */

typedef struct {
    __m512i c[64];  /* lane i: row i's codes of elements 4v .. 4v + 3 */
    __m512i sc[16]; /* scale lanes */
    __m512i mn[8];  /* Q2_K: min pairs */
    __m512 dv, dmv;
} qdec;

AI void decode_sb(int q2, const uint8_t *blk, qdec *u) {
    for (int h = 0; h < 2; h++)
        for (int n = 0; n < 8; n++) {
            __m512i v = _mm512_loadu_si512(blk + q23_qs_at(q2, h, n));
            __m512i hv = q2 ? v : _mm512_loadu_si512(blk + q23_h_at(n));
            for (int j = 0; j < 4; j++) u->c[32 * h + 8 * j + n] = code(q2, v, hv, h, j);
        }
    for (int s = 0; s < 16; s++) u->sc[s] = scale_lane(q2, blk, s);
    u->dv = f16x16(blk);
    if (q2) {
        for (int p = 0; p < 8; p++) u->mn[p] = min_pair(blk, p);
        u->dmv = f16x16(blk + Q2_DMIN);
    }
}

#define QJ(F) F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7)

/* NT (1..8) tokens (astride bytes apart from a) against super-block b
 * decoded in u; F: their 16 floats each. */
AI void q23_tokens(int q2, int NT, const qdec *u, int64_t b, int64_t nb, const uint8_t *a, size_t astride,
                   int64_t cols, float *F) {
#define Q_DECL(j)                                                                                                 \
    const uint8_t *a##j = a + astride * (size_t)((j) < NT ? (j) : 0);                                             \
    const int8_t *x##j = (const int8_t *)a##j + QK_K * b;                                                         \
    const float *d##j = (const float *)(a##j + cols);                                                             \
    const int16_t *s##j = (const int16_t *)(d##j + nb) + 16 * b;                                                  \
    __m512i S##j = _mm512_setzero_si512(), P##j;
    QJ(Q_DECL)
    for (int s = 0; s < 16; s++) {
#define Q_INIT(j) if ((j) < NT) P##j = q2 ? _mm512_setzero_si512() : _mm512_set1_epi32(-4 * s##j[s]);
        QJ(Q_INIT)
        for (int k = 0; k < 4; k++) {
            const __m512i c = u->c[4 * s + k];
#define Q_DP(j) if ((j) < NT) P##j = _mm512_dpbusd_epi32(P##j, c, bc4(x##j + 16 * s + 4 * k));
            QJ(Q_DP)
        }
        const __m512i sc = u->sc[s];
#define Q_SW(j) if ((j) < NT) S##j = _mm512_dpwssd_epi32(S##j, P##j, sc);
        QJ(Q_SW)
    }
#define Q_FL(j)                                                                                                   \
    if ((j) < NT) {                                                                                               \
        __m512 dd = _mm512_set1_ps(d##j[b]), f = _mm512_loadu_ps(F + 16 * (j));                                  \
        f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S##j), _mm512_mul_ps(u->dv, dd), f);                               \
        if (q2) {                                                                                                 \
            __m512i M = _mm512_setzero_si512();                                                                   \
            for (int p = 0; p < 8; p++) M = _mm512_dpwssd_epi32(M, u->mn[p], bc4(s##j + 2 * p));                  \
            f = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(u->dmv, dd), f);                            \
        }                                                                                                         \
        _mm512_storeu_ps(F + 16 * (j), f);                                                                        \
    }
    QJ(Q_FL)
}

AI void q23_tokens_any(int q2, int nt, const qdec *u, int64_t b, int64_t nb, const uint8_t *a, size_t astride,
                       int64_t cols, float *F) {
    switch (nt) {
#define Q_CASE(N)                                                                                                  \
    case N: q23_tokens(q2, N, u, b, nb, a, astride, cols, F); break;
        Q_CASE(8) Q_CASE(7) Q_CASE(6) Q_CASE(5) Q_CASE(4) Q_CASE(3) Q_CASE(2)
    default: q23_tokens(q2, 1, u, b, nb, a, astride, cols, F); break;
    }
}

size_t kq_q23_scratch_bytes(int64_t cols) {
    if (cols < QK_K) cols = QK_K;
    return q23_al64(q23_tile_bytes(XLLM_DT_Q3_K, cols)) + (size_t)QTB * 16 * sizeof(float) + 64;
}

/* Store rows [rs, min(r + 16, r1)) of a tile's f (y: the token's row). */
AI void q23_store(__m512 f, const float *bias, float *y, int64_t r, int64_t rs, int64_t r1) {
    int64_t n = r1 - r < QR ? r1 - r : QR, skip = rs - r;
    __mmask16 m = (__mmask16)(((1u << n) - 1) & ~((1u << skip) - 1));
    if (bias) f = _mm512_add_ps(f, _mm512_maskz_loadu_ps(m, bias + r));
    _mm512_mask_storeu_ps(y + r, m, f);
}

AI void q23_matmul_t(int q2, const matrix *W, const uint8_t *act, size_t astride, int T, const float *bias, float *y,
                     size_t ldy, int64_t r0, int64_t r1, void *scratch) {
    const dtype_t t = q2 ? XLLM_DT_Q2_K : XLLM_DT_Q3_K;
    const int64_t cols = W->cols, nb = cols / QK_K;
    const size_t tb = q23_tile_bytes(t, cols), sbb = sb_bytes(t);
    uint8_t *own = scratch;
    float *F = (float *)(own + q23_al64(q23_tile_bytes(XLLM_DT_Q3_K, cols)));
    for (int t0 = 0; t0 < T; t0 += QTB) {
        const int n = T - t0 < QTB ? T - t0 : QTB;
        const uint8_t *a0 = act + (size_t)t0 * astride;
        for (int64_t tl = r0 / QR; tl * QR < r1; tl++) {
            const int64_t r = tl * QR, rs = r > r0 ? r : r0;
            const uint8_t *tile = (const uint8_t *)W->data + (size_t)tl * tb;
            if (!W->packed) {
                q23_put_tile(own, W, tl);
                tile = own;
            }
            if (n == 1) {
                q23_store(gemv_t(q2, tile, nb, a0, cols), bias, y + (size_t)t0 * ldy, r, rs, r1);
                continue;
            }
            memset(F, 0, sizeof(float) * 16 * (size_t)n);
            for (int64_t b = 0; b < nb; b++) {
                qdec u;
                fetch_ahead(tile + (size_t)b * sbb, sbb);
                decode_sb(q2, tile + (size_t)b * sbb, &u);
                for (int tt = 0; tt < n; tt += 8)
                    q23_tokens_any(q2, n - tt < 8 ? n - tt : 8, &u, b, nb, a0 + (size_t)tt * astride, astride, cols,
                                   F + 16 * tt);
            }
            for (int j = 0; j < n; j++) q23_store(_mm512_loadu_ps(F + 16 * j), bias, y + (size_t)(t0 + j) * ldy, r, rs, r1);
        }
    }
}

void kq_q23_matmul(const matrix *W, const void *act, size_t astride, int T, const float *bias, float *y, size_t ldy,
                   int64_t r0, int64_t r1, void *scratch) {
    if (r1 <= r0 || T <= 0) return;
    if (W->dtype == XLLM_DT_Q2_K) q23_matmul_t(1, W, act, astride, T, bias, y, ldy, r0, r1, scratch);
    else q23_matmul_t(0, W, act, astride, T, bias, y, ldy, r0, r1, scratch);
}

#else
typedef int no_kq_pack23_avx512_on_this_arch;
#endif
