/*
 * kq_pack23_avx2.c - Q2_K and Q3_K at the avx2 level in the same 16-row
 * "Q23" tiles as the avx512 level (kq_pack23_layout.h; the layout and the
 * arithmetic are described in kq_pack23_avx512.c). A tile's 16 rows are two
 * halves of 8 int32 lanes; AVX2's int8 dot product is vpmaddubsw (unsigned
 * codes x signed activations) + vpmaddwd:
 *  - a sub-block of 16 values is 4 vpmaddubsw results added in int16 (Q2_K
 *    codes 0..3: <= 4 x 2 x 3 x 127; Q3_K u = 0..7: <= 4 x 2 x 7 x 127 =
 *    7112), then one vpmaddwd by (scale, scale) adds scale x sum to S;
 *  - Q3_K's -4 offset: S -= 4 x sum over sub-blocks of (scale - 32) x bs,
 *    by vpmaddwd of the lane (scale 2p, scale 2p + 1) and the token's pair
 *    (bs 2p, bs 2p + 1); Q2_K's M (mins x bs) the same way, as at avx512.
 * Every integer is exact, so S and M are avx512's, and the float steps per
 * lane are avx512's, in the same order (fma(S, d_w d_a), then Q2_K's
 * fnmadd(M, dmin_w d_a)): results equal the avx512 level's bit for bit and
 * do not depend on T, tiling, the thread split or repacking.
 *
 * GEMV: the tile streamed once, both halves per super-block. GEMM: per tile
 * and super-block the codes are decoded once into a buffer (on the stack)
 * and tokens run over it in register tiles of 4.
 * Thread-safe: writes only the rows of y (and the scratch) it is given.
 */
#if defined(__x86_64__)
#include "backend/cpu/kq_pack23_layout.h"

#include <immintrin.h>

#define QTB 64 /* most tokens per token block */

int kq_q23_avx2_type(const matrix *W) { return q23_is_type(W); }
size_t kq_q23_avx2_packed_bytes(const matrix *W) { return q23_packed_bytes(W); }
void kq_q23_avx2_repack(const matrix *W, int64_t q0, int64_t q1, void *out) { q23_repack(W, q0, q1, out); }

/* ---------------------------------------------------------------- pieces */

AI __m256i bc4(const void *p) { /* 4 bytes to every lane */
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

AI __m256 f16x8(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

/* Code vector (h, j) of QS half-vector v (Q3_K: with H half-vector hv):
 * crumb j, and Q3_K's high bit 4h + j on bit 2. */
AI __m256i code(int q2, __m256i v, __m256i hv, int h, int j) {
    __m256i c = _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), _mm256_set1_epi8(3));
    if (q2) return c;
    const int b = 4 * h + j; /* bit b of each H byte to bit 2 */
    __m256i hb = b >= 2 ? _mm256_srli_epi16(hv, b - 2) : _mm256_slli_epi16(hv, 2 - b);
    return _mm256_or_si256(c, _mm256_and_si256(hb, _mm256_set1_epi8(4)));
}

/* Sub-block s's scale in both int16 halves of each lane (half hf). */
AI __m256i scale_dup(int q2, const uint8_t *blk, int s, int hf) {
    __m256i x;
    if (q2) {
        x = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(blk + Q2_SM + 32 * (s / 2) + 16 * hf)));
        x = _mm256_and_si256(s % 2 ? _mm256_srli_epi32(x, 16) : x, _mm256_set1_epi32(0xf));
    } else {
        x = _mm256_cvtepu16_epi32(_mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(blk + Q3_SC + 16 * s + 8 * hf))));
    }
    return _mm256_or_si256(x, _mm256_slli_epi32(x, 16));
}

/* The lane pair for sub-blocks 2p, 2p + 1: Q2_K (min 2p, min 2p + 1), Q3_K
 * (scale 2p - 32, scale 2p + 1 - 32), int16 each (half hf). */
AI __m256i pair_lane(int q2, const uint8_t *blk, int p, int hf) {
    if (q2)
        return _mm256_srli_epi16(
            _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(blk + Q2_SM + 32 * p + 16 * hf))), 4);
    __m128i a = _mm_loadl_epi64((const __m128i *)(blk + Q3_SC + 32 * p + 8 * hf));
    __m128i b = _mm_loadl_epi64((const __m128i *)(blk + Q3_SC + 32 * p + 16 + 8 * hf));
    return _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a, b));
}

/* f += S d_w d_a, then Q2_K: f -= M dmin_w d_a; Q3_K: S -= 4 M first (M:
 * sum of the pair lanes times the token's bs pairs), as avx512's order. */
AI __m256 q23_float(int q2, __m256 f, __m256i S, __m256i M, const uint8_t *blk, int hf, float da) {
    const __m256 dd = _mm256_set1_ps(da);
    if (!q2) S = _mm256_sub_epi32(S, _mm256_slli_epi32(M, 2));
    f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S), _mm256_mul_ps(f16x8(blk + Q2_D + 16 * hf), dd), f);
    if (q2) f = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(M), _mm256_mul_ps(f16x8(blk + Q2_DMIN + 16 * hf), dd), f);
    return f;
}

/* ------------------------------------------------------------------ GEMV */

AI __m256 gemv_half(int q2, const uint8_t *tile, int64_t nb, const uint8_t *a, int64_t cols, int hf) {
    const int8_t *qa = (const int8_t *)a;
    const float *da = (const float *)(a + cols);
    const int16_t *bs = (const int16_t *)(da + nb);
    const size_t sbb = q2 ? Q2B : Q3B;
    __m256 f = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = tile + (size_t)b * sbb;
        const int8_t *q = qa + b * QK_K;
        const int16_t *bsb = bs + 16 * b;
        __m256i S = _mm256_setzero_si256(), M = S;
        for (int nh = 0; nh < 2; nh++) {
            __m256i H[2][4];
            for (int h = 0; h < 2; h++)
                for (int j = 0; j < 4; j++) H[h][j] = _mm256_setzero_si256(); /* sub-block 8h + 2j + nh */
            for (int n4 = 0; n4 < 4; n4++) {
                const int n = 4 * nh + n4;
                const __m256i hv =
                    q2 ? _mm256_setzero_si256() : _mm256_loadu_si256((const __m256i *)(blk + q23_h_at(n) + 32 * hf));
                for (int h = 0; h < 2; h++) {
                    __m256i v = _mm256_loadu_si256((const __m256i *)(blk + q23_qs_at(q2, h, n) + 32 * hf));
                    for (int j = 0; j < 4; j++)
                        H[h][j] = _mm256_add_epi16(
                            H[h][j], _mm256_maddubs_epi16(code(q2, v, hv, h, j), bc4(q + 128 * h + 32 * j + 4 * n)));
                }
            }
            for (int h = 0; h < 2; h++)
                for (int j = 0; j < 4; j++)
                    S = _mm256_add_epi32(S, _mm256_madd_epi16(H[h][j], scale_dup(q2, blk, 8 * h + 2 * j + nh, hf)));
        }
        for (int p = 0; p < 8; p++) M = _mm256_add_epi32(M, _mm256_madd_epi16(pair_lane(q2, blk, p, hf), bc4(bsb + 2 * p)));
        f = q23_float(q2, f, S, M, blk, hf, da[b]);
    }
    return f;
}

/* ------------------------------------------------------------------ GEMM */

typedef struct {
    __m256i c[2][64];  /* [half] lane i: row i's codes of elements 4v .. 4v + 3 */
    __m256i sc[2][16]; /* scale_dup */
    __m256i pr[2][8];  /* pair_lane */
} qdec2;

AI void decode_sb(int q2, const uint8_t *blk, qdec2 *u) {
    for (int hf = 0; hf < 2; hf++) {
        for (int h = 0; h < 2; h++)
            for (int n = 0; n < 8; n++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(blk + q23_qs_at(q2, h, n) + 32 * hf));
                __m256i hv = q2 ? v : _mm256_loadu_si256((const __m256i *)(blk + q23_h_at(n) + 32 * hf));
                for (int j = 0; j < 4; j++) u->c[hf][32 * h + 8 * j + n] = code(q2, v, hv, h, j);
            }
        for (int s = 0; s < 16; s++) u->sc[hf][s] = scale_dup(q2, blk, s, hf);
        for (int p = 0; p < 8; p++) u->pr[hf][p] = pair_lane(q2, blk, p, hf);
    }
}

#define QJ(F) F(0) F(1) F(2) F(3)

/* NT (1..4) tokens (astride bytes apart from a) against half hf of
 * super-block b decoded in u; F: their 16 floats each. */
AI void q23_tokens(int q2, int NT, const qdec2 *u, const uint8_t *blk, int hf, int64_t b, int64_t nb,
                   const uint8_t *a, size_t astride, int64_t cols, float *F) {
#define Q_DECL(j)                                                                                                 \
    const uint8_t *a##j = a + astride * (size_t)((j) < NT ? (j) : 0);                                             \
    const int8_t *x##j = (const int8_t *)a##j + QK_K * b;                                                         \
    const float *d##j = (const float *)(a##j + cols);                                                             \
    const int16_t *s##j = (const int16_t *)(d##j + nb) + 16 * b;                                                  \
    __m256i S##j = _mm256_setzero_si256(), M##j = S##j, H##j;
    QJ(Q_DECL)
    for (int s = 0; s < 16; s++) {
#define Q_INIT(j) H##j = _mm256_setzero_si256();
        QJ(Q_INIT)
        for (int k = 0; k < 4; k++) {
            const __m256i c = u->c[hf][4 * s + k];
#define Q_DP(j) if ((j) < NT) H##j = _mm256_add_epi16(H##j, _mm256_maddubs_epi16(c, bc4(x##j + 16 * s + 4 * k)));
            QJ(Q_DP)
        }
        const __m256i sc = u->sc[hf][s];
#define Q_SW(j) if ((j) < NT) S##j = _mm256_add_epi32(S##j, _mm256_madd_epi16(H##j, sc));
        QJ(Q_SW)
    }
    for (int p = 0; p < 8; p++) {
        const __m256i pr = u->pr[hf][p];
#define Q_M(j) if ((j) < NT) M##j = _mm256_add_epi32(M##j, _mm256_madd_epi16(pr, bc4(s##j + 2 * p)));
        QJ(Q_M)
    }
#define Q_FL(j)                                                                                                   \
    if ((j) < NT)                                                                                                 \
        _mm256_storeu_ps(F + 16 * (j) + 8 * hf,                                                                   \
                         q23_float(q2, _mm256_loadu_ps(F + 16 * (j) + 8 * hf), S##j, M##j, blk, hf, d##j[b]));
    QJ(Q_FL)
}

AI void q23_tokens_any(int q2, int nt, const qdec2 *u, const uint8_t *blk, int hf, int64_t b, int64_t nb,
                       const uint8_t *a, size_t astride, int64_t cols, float *F) {
    switch (nt) {
    case 4: q23_tokens(q2, 4, u, blk, hf, b, nb, a, astride, cols, F); break;
    case 3: q23_tokens(q2, 3, u, blk, hf, b, nb, a, astride, cols, F); break;
    case 2: q23_tokens(q2, 2, u, blk, hf, b, nb, a, astride, cols, F); break;
    default: q23_tokens(q2, 1, u, blk, hf, b, nb, a, astride, cols, F); break;
    }
}

size_t kq_q23_avx2_scratch_bytes(int64_t cols) {
    if (cols < QK_K) cols = QK_K;
    return q23_al64(q23_tile_bytes(XLLM_DT_Q3_K, cols)) + (size_t)QTB * 16 * sizeof(float) + q23_al64(sizeof(qdec2)) + 64;
}

/* Store rows [rs, min(r + 8, r1)) of a half tile's f (r: its first row). */
AI void q23_store8(__m256 f, const float *bias, float *y, int64_t r, int64_t rs, int64_t r1) {
    float v[8];
    _mm256_storeu_ps(v, f);
    for (int i = 0; i < 8; i++) {
        int64_t row = r + i;
        if (row < rs || row >= r1) continue;
        y[row] = v[i] + (bias ? bias[row] : 0.0f);
    }
}

AI void q23_matmul_t(int q2, const matrix *W, const uint8_t *act, size_t astride, int T, const float *bias, float *y,
                     size_t ldy, int64_t r0, int64_t r1, void *scratch) {
    const dtype_t t = q2 ? XLLM_DT_Q2_K : XLLM_DT_Q3_K;
    const int64_t cols = W->cols, nb = cols / QK_K;
    const size_t tb = q23_tile_bytes(t, cols), sbb = sb_bytes(t);
    uint8_t *own = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *F = (float *)(own + q23_al64(q23_tile_bytes(XLLM_DT_Q3_K, cols)));
    qdec2 *u = (qdec2 *)((uint8_t *)F + (size_t)QTB * 16 * sizeof(float));
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
            float *y0 = y + (size_t)t0 * ldy;
            if (n == 1) {
                q23_store8(gemv_half(q2, tile, nb, a0, cols, 0), bias, y0, r, rs, r1);
                q23_store8(gemv_half(q2, tile, nb, a0, cols, 1), bias, y0, r + 8, rs, r1);
                continue;
            }
            memset(F, 0, sizeof(float) * 16 * (size_t)n);
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *blk = tile + (size_t)b * sbb;
                decode_sb(q2, blk, u);
                for (int hf = 0; hf < 2; hf++)
                    for (int tt = 0; tt < n; tt += 4)
                        q23_tokens_any(q2, n - tt < 4 ? n - tt : 4, u, blk, hf, b, nb, a0 + (size_t)tt * astride,
                                       astride, cols, F + 16 * tt);
            }
            for (int j = 0; j < n; j++) {
                q23_store8(_mm256_loadu_ps(F + 16 * j), bias, y0 + (size_t)j * ldy, r, rs, r1);
                q23_store8(_mm256_loadu_ps(F + 16 * j + 8), bias, y0 + (size_t)j * ldy, r + 8, rs, r1);
            }
        }
    }
}

void kq_q23_avx2_matmul(const matrix *W, const void *act, size_t astride, int T, const float *bias, float *y,
                        size_t ldy, int64_t r0, int64_t r1, void *scratch) {
    if (r1 <= r0 || T <= 0) return;
    if (W->dtype == XLLM_DT_Q2_K) q23_matmul_t(1, W, act, astride, T, bias, y, ldy, r0, r1, scratch);
    else q23_matmul_t(0, W, act, astride, T, bias, y, ldy, r0, r1, scratch);
}

#else
typedef int no_kq_pack23_avx2_on_this_arch;
#endif
