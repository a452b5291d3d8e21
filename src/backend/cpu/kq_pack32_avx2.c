/*
 * kq_pack32_avx2.c - IQ4_NL, Q5_0, Q5_1 and IQ4_XS at the avx2 level in the
 * same 16-row "P32" tiles as the avx512 level (kq_pack32_layout.h; the layout
 * and the arithmetic are described in kq_pack32_avx512.c). A tile's 16 rows
 * are two halves of 8 int32 lanes; the codes come from the nibbles by
 * vpshufb as there, and AVX2's int8 dot product is vpmaddubsw + vpmaddwd:
 *  - Q5_0 / Q5_1: the unsigned 5-bit codes times the signed activations
 *    (pairs <= 2 x 31 x 127, no saturation, and four vpmaddubsw results add
 *    up in int16, <= 31496, before one vpmaddwd); Q5_0's -16 offset comes back
 *    through the activations' block sums as at avx512;
 *  - IQ4_NL / IQ4_XS: the signed table values, |w| times sign(a, w) (pairs
 *    <= 2 x 127 x 127: activations are -127..127), so no offset at all.
 * Every block's integer sum is exact, and the float steps per lane are the
 * avx512 level's, in the same order: results equal the avx512 level's bit
 * for bit, and do not depend on T, tiling, the thread split or repacking.
 *
 * GEMV: the tile streamed once, both halves per block. GEMM: per tile and
 * group the codes are decoded once into a buffer and tokens run over it in
 * register tiles of 4.
 * Thread-safe: writes only the rows of y (and the scratch) it is given.
 */
#if defined(__x86_64__)
#include "backend/cpu/kq_pack32_layout.h"

#include <immintrin.h>

#define PTB 64 /* most tokens per token block */

int kq_p32_avx2_type(const matrix *W) { return p32_is_type(W); }
size_t kq_p32_avx2_packed_bytes(const matrix *W) { return p32_packed_bytes(W); }
void kq_p32_avx2_repack(const matrix *W, int64_t q0, int64_t q1, void *out) { p32_repack(W, q0, q1, out); }

/* Per token, the integer each block's sum starts from (Q5_0: -16 x the sum of
 * its 32 activations; the other types 0). */
static void p32_prepare(dtype_t t, const uint8_t *act, size_t astride, int n, int64_t cols, int32_t *ex) {
    const int64_t nb = cols / 32;
    for (int j = 0; j < n; j++) {
        const int8_t *a = (const int8_t *)(act + (size_t)j * astride);
        int32_t *e = ex + (size_t)j * (size_t)nb;
        for (int64_t b = 0; b < nb; b++) {
            int32_t s = 0;
            if (t == XLLM_DT_Q5_0)
                for (int i = 0; i < 32; i++) s += a[32 * b + i];
            e[b] = -16 * s;
        }
    }
}

AI __m256i bc4(const int8_t *p) { /* 4 activation bytes to every lane */
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

AI __m256 f16x8(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

AI __m256i iq4_table(void) { return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kq_iq4_values)); }

AI int is_iq4(dtype_t t) { return t == XLLM_DT_IQ4_NL || t == XLLM_DT_IQ4_XS; }

/* The codes of vector n of a block (8 lanes): lo (elements 4n + k), hi
 * (16 + 4n + k); signed table values (IQ4) or unsigned codes (Q5_x). */
AI void codes(dtype_t t, __m256i v, __m256i h, int n, __m256i tbl, __m256i *lo, __m256i *hi) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), b4 = _mm256_set1_epi8(0x10);
    __m256i l = _mm256_and_si256(v, m4), u = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if (is_iq4(t)) {
        *lo = _mm256_shuffle_epi8(tbl, l);
        *hi = _mm256_shuffle_epi8(tbl, u);
    } else {
        __m256i hl = _mm256_slli_epi16(h, 4 - n), hh = n == 0 ? h : _mm256_srli_epi16(h, n);
        *lo = _mm256_or_si256(l, _mm256_and_si256(hl, b4));
        *hi = _mm256_or_si256(u, _mm256_and_si256(hh, b4));
    }
}

/* P + the 4-byte dot products of each lane: w unsigned (Q5_x), or w = |code|
 * and a already given code's sign (IQ4). */
AI __m256i dot4(__m256i P, __m256i w, __m256i a) {
    return _mm256_add_epi32(P, _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1)));
}

AI __m256i dot_code(dtype_t t, __m256i P, __m256i c, __m256i a) {
    if (is_iq4(t)) return dot4(P, _mm256_sign_epi8(c, c), _mm256_sign_epi8(a, c));
    return dot4(P, c, a);
}

/* Store rows [rs, min(r + 8, r1)) of a half tile's f (r: its first row). */
AI void p32_store8(__m256 f, const float *bias, float *y, int64_t r, int64_t rs, int64_t r1) {
    float v[8];
    _mm256_storeu_ps(v, f);
    for (int i = 0; i < 8; i++) {
        int64_t row = r + i;
        if (row < rs || row >= r1) continue;
        y[row] = v[i] + (bias ? bias[row] : 0.0f);
    }
}

/* ------------------------------------------------------------------ GEMV */

/* The integer sum of one block of 32 (sub-block for IQ4_XS), 8 rows (half hf). */
AI __m256i block_sum(dtype_t t, const uint8_t *grp, const p32_layout *L, int k, int hf, const int8_t *q, int32_t e0,
                     __m256i tbl) {
    const __m256i h = t == XLLM_DT_Q5_0 || t == XLLM_DT_Q5_1
                          ? _mm256_loadu_si256((const __m256i *)(grp + h_at(L, k) + 32 * hf))
                          : tbl;
    __m256i p0 = _mm256_set1_epi32(e0), p1 = _mm256_setzero_si256();
    if (!is_iq4(t)) { /* Q5_x: 4 vpmaddubsw pairs add up in int16 (<= 4 x 2 x 31 x 127) */
        __m256i s0 = _mm256_setzero_si256(), s1 = s0;
        for (int n = 0; n < 4; n++) {
            __m256i lo, hi;
            codes(t, _mm256_loadu_si256((const __m256i *)(grp + qs_at(L, k) + 64 * n + 32 * hf)), h, n, tbl, &lo, &hi);
            s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(lo, bc4(q + 4 * n)));
            s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(hi, bc4(q + 16 + 4 * n)));
        }
        const __m256i one = _mm256_set1_epi16(1);
        return _mm256_add_epi32(_mm256_add_epi32(p0, _mm256_madd_epi16(s0, one)), _mm256_madd_epi16(s1, one));
    }
    for (int n = 0; n < 4; n++) {
        __m256i lo, hi;
        codes(t, _mm256_loadu_si256((const __m256i *)(grp + qs_at(L, k) + 64 * n + 32 * hf)), h, n, tbl, &lo, &hi);
        p0 = dot_code(t, p0, lo, bc4(q + 4 * n));
        p1 = dot_code(t, p1, hi, bc4(q + 16 + 4 * n));
    }
    return _mm256_add_epi32(p0, p1);
}

AI void gemv_t(dtype_t t, const uint8_t *tile, int64_t ng, const uint8_t *a, int64_t cols, const int32_t *e,
               __m256 *out) {
    const p32_layout L = layout_of(t);
    const __m256i tbl = iq4_table();
    const int8_t *q = (const int8_t *)a;
    const float *da = (const float *)(a + cols), *sa = da + cols / 32;
    __m256 f[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *grp = tile + (size_t)g * L.bytes;
        for (int hf = 0; hf < 2; hf++) {
            if (t == XLLM_DT_IQ4_XS) {
                __m256i S = _mm256_setzero_si256();
                for (int j = 0; j < 8; j++) {
                    __m256i P = block_sum(t, grp, &L, j, hf, q + 256 * g + 32 * j, e[8 * g + j], tbl);
                    __m256i sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(grp + L.sc + 16 * j + 8 * hf)));
                    S = _mm256_add_epi32(S, _mm256_mullo_epi32(P, sc));
                }
                f[hf] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S), _mm256_mul_ps(f16x8(grp + 16 * hf), _mm256_set1_ps(da[g])),
                                        f[hf]);
                continue;
            }
            for (int k = 0; k < 8; k++) {
                const int64_t b = 8 * g + k;
                __m256i P = block_sum(t, grp, &L, k, hf, q + 32 * b, e[b], tbl);
                f[hf] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(P),
                                        _mm256_mul_ps(f16x8(grp + d_at(&L, k) + 16 * hf), _mm256_set1_ps(da[b])), f[hf]);
                if (t == XLLM_DT_Q5_1)
                    f[hf] = _mm256_fmadd_ps(f16x8(grp + m_at(&L, k) + 16 * hf), _mm256_set1_ps(sa[b]), f[hf]);
            }
        }
    }
    out[0] = f[0];
    out[1] = f[1];
}

/* ------------------------------------------------------------------ GEMM */

typedef struct {
    __m256i c[2][64]; /* [half] lane i: row i's codes of elements 4v .. 4v + 3 */
    __m256i sc[2][8]; /* IQ4_XS: int32 sub-block scales */
    __m256 dv[2][8];  /* d per block (IQ4_XS: dv[h][0]) */
    __m256 mv[2][8];  /* Q5_1: m per block */
} pdec;

AI void decode_group(dtype_t t, const uint8_t *grp, pdec *u) {
    const p32_layout L = layout_of(t);
    const __m256i tbl = iq4_table();
    for (int hf = 0; hf < 2; hf++) {
        for (int k = 0; k < 8; k++) {
            const __m256i h = t == XLLM_DT_Q5_0 || t == XLLM_DT_Q5_1
                                  ? _mm256_loadu_si256((const __m256i *)(grp + h_at(&L, k) + 32 * hf))
                                  : tbl;
            for (int n = 0; n < 4; n++)
                codes(t, _mm256_loadu_si256((const __m256i *)(grp + qs_at(&L, k) + 64 * n + 32 * hf)), h, n, tbl,
                      &u->c[hf][8 * k + n], &u->c[hf][8 * k + 4 + n]);
            if (t == XLLM_DT_IQ4_XS) {
                u->sc[hf][k] = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(grp + L.sc + 16 * k + 8 * hf)));
            } else {
                u->dv[hf][k] = f16x8(grp + d_at(&L, k) + 16 * hf);
                if (t == XLLM_DT_Q5_1) u->mv[hf][k] = f16x8(grp + m_at(&L, k) + 16 * hf);
            }
        }
        if (t == XLLM_DT_IQ4_XS) u->dv[hf][0] = f16x8(grp + 16 * hf);
    }
}

#define PJ(F) F(0) F(1) F(2) F(3)

/* NT (1..4) tokens against half hf of group g decoded in u; e: their extras
 * (nb apart); F: their 16 floats each (this half: 8 of them). */
AI void p32_tokens(dtype_t t, int NT, const pdec *u, int hf, int64_t g, const uint8_t *a, size_t astride,
                   int64_t cols, const int32_t *e, int64_t nb, float *F) {
#define P_DECL(j)                                                                                                 \
    const int8_t *q##j = (const int8_t *)(a + astride * (size_t)((j) < NT ? (j) : 0)) + 256 * g;                 \
    const float *d##j = (const float *)((const uint8_t *)(a + astride * (size_t)((j) < NT ? (j) : 0)) + cols);     \
    const int32_t *e##j = e + (size_t)nb * (size_t)((j) < NT ? (j) : 0) + 8 * g;                                  \
    __m256 f##j = (j) < NT ? _mm256_loadu_ps(F + 16 * (j) + 8 * hf) : _mm256_setzero_ps();                        \
    __m256i P##j = _mm256_setzero_si256(), S##j = _mm256_setzero_si256(), H##j = _mm256_setzero_si256();
    PJ(P_DECL)
    for (int k = 0; k < 8; k++) {
#define P_INIT(j) if ((j) < NT) P##j = _mm256_set1_epi32(e##j[k]);
        PJ(P_INIT)
        for (int m = 0; m < 8; m++) {
            const __m256i c = u->c[hf][8 * k + m];
            if (is_iq4(t)) {
                const __m256i ca = _mm256_sign_epi8(c, c);
#define P_DPS(j) if ((j) < NT) P##j = dot4(P##j, ca, _mm256_sign_epi8(bc4(q##j + 32 * k + 4 * m), c));
                PJ(P_DPS)
            } else { /* Q5_x: 4 vpmaddubsw pairs add up in int16 (<= 4 x 2 x 31 x 127), then one vpmaddwd */
#define P_DP(j) if ((j) < NT) H##j = _mm256_add_epi16(H##j, _mm256_maddubs_epi16(c, bc4(q##j + 32 * k + 4 * m)));
                PJ(P_DP)
                if (m % 4 == 3) {
#define P_H(j)                                                                                                    \
    if ((j) < NT) {                                                                                               \
        P##j = _mm256_add_epi32(P##j, _mm256_madd_epi16(H##j, _mm256_set1_epi16(1)));                             \
        H##j = _mm256_setzero_si256();                                                                            \
    }
                    PJ(P_H)
                }
            }
        }
        if (t == XLLM_DT_IQ4_XS) {
#define P_XS(j) if ((j) < NT) S##j = _mm256_add_epi32(S##j, _mm256_mullo_epi32(P##j, u->sc[hf][k]));
            PJ(P_XS)
        } else {
#define P_FL(j)                                                                                                   \
    if ((j) < NT) {                                                                                               \
        f##j = _mm256_fmadd_ps(_mm256_cvtepi32_ps(P##j),                                                          \
                               _mm256_mul_ps(u->dv[hf][k], _mm256_set1_ps(d##j[8 * g + k])), f##j);               \
        if (t == XLLM_DT_Q5_1)                                                                                    \
            f##j = _mm256_fmadd_ps(u->mv[hf][k], _mm256_set1_ps(d##j[cols / 32 + 8 * g + k]), f##j);              \
    }
            PJ(P_FL)
        }
    }
#define P_END(j)                                                                                                  \
    if ((j) < NT) {                                                                                               \
        if (t == XLLM_DT_IQ4_XS)                                                                                  \
            f##j = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S##j), _mm256_mul_ps(u->dv[hf][0], _mm256_set1_ps(d##j[g])), \
                                   f##j);                                                                         \
        _mm256_storeu_ps(F + 16 * (j) + 8 * hf, f##j);                                                            \
    }
    PJ(P_END)
}

AI void p32_tokens_any(dtype_t t, int nt, const pdec *u, int hf, int64_t g, const uint8_t *a, size_t astride,
                       int64_t cols, const int32_t *e, int64_t nb, float *F) {
    switch (nt) {
    case 4: p32_tokens(t, 4, u, hf, g, a, astride, cols, e, nb, F); break;
    case 3: p32_tokens(t, 3, u, hf, g, a, astride, cols, e, nb, F); break;
    case 2: p32_tokens(t, 2, u, hf, g, a, astride, cols, e, nb, F); break;
    default: p32_tokens(t, 1, u, hf, g, a, astride, cols, e, nb, F); break;
    }
}

size_t kq_p32_avx2_scratch_bytes(int64_t cols) {
    if (cols < QK_K) cols = QK_K;
    return al64(tile_bytes(XLLM_DT_Q5_1, cols)) + al64((size_t)PTB * (size_t)(cols / 32) * 4) +
           (size_t)PTB * 16 * sizeof(float) + al64(sizeof(pdec)) + 64;
}

AI void p32_matmul_t(dtype_t t, const matrix *W, const uint8_t *act, size_t astride, int T, const float *bias,
                     float *y, size_t ldy, int64_t r0, int64_t r1, void *scratch) {
    const int64_t cols = W->cols, ng = cols / QK_K, nb = cols / 32;
    const size_t tb = tile_bytes(t, cols), gb = layout_of(t).bytes;
    uint8_t *own = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    int32_t *ex = (int32_t *)(own + al64(tile_bytes(XLLM_DT_Q5_1, cols)));
    float *F = (float *)((uint8_t *)ex + al64((size_t)PTB * (size_t)nb * 4));
    pdec *u = (pdec *)((uint8_t *)F + (size_t)PTB * 16 * sizeof(float));
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
            float *y0 = y + (size_t)t0 * ldy;
            if (n == 1) {
                __m256 f[2];
                gemv_t(t, tile, ng, a0, cols, ex, f);
                p32_store8(f[0], bias, y0, r, rs, r1);
                p32_store8(f[1], bias, y0, r + 8, rs, r1);
                continue;
            }
            memset(F, 0, sizeof(float) * 16 * (size_t)n);
            for (int64_t g = 0; g < ng; g++) {
                decode_group(t, tile + (size_t)g * gb, u);
                for (int hf = 0; hf < 2; hf++)
                    for (int tt = 0; tt < n; tt += 4)
                        p32_tokens_any(t, n - tt < 4 ? n - tt : 4, u, hf, g, a0 + (size_t)tt * astride, astride, cols,
                                       ex + (size_t)tt * (size_t)nb, nb, F + 16 * tt);
            }
            for (int j = 0; j < n; j++) {
                p32_store8(_mm256_loadu_ps(F + 16 * j), bias, y0 + (size_t)j * ldy, r, rs, r1);
                p32_store8(_mm256_loadu_ps(F + 16 * j + 8), bias, y0 + (size_t)j * ldy, r + 8, rs, r1);
            }
        }
    }
}

void kq_p32_avx2_matmul(const matrix *W, const void *act, size_t astride, int T, const float *bias, float *y,
                        size_t ldy, int64_t r0, int64_t r1, void *scratch) {
    if (r1 <= r0 || T <= 0) return;
    switch (W->dtype) {
    case XLLM_DT_IQ4_NL: p32_matmul_t(XLLM_DT_IQ4_NL, W, act, astride, T, bias, y, ldy, r0, r1, scratch); break;
    case XLLM_DT_Q5_0: p32_matmul_t(XLLM_DT_Q5_0, W, act, astride, T, bias, y, ldy, r0, r1, scratch); break;
    case XLLM_DT_Q5_1: p32_matmul_t(XLLM_DT_Q5_1, W, act, astride, T, bias, y, ldy, r0, r1, scratch); break;
    default: p32_matmul_t(XLLM_DT_IQ4_XS, W, act, astride, T, bias, y, ldy, r0, r1, scratch); break;
    }
}

#else
typedef int no_kq_pack32_avx2_on_this_arch;
#endif
