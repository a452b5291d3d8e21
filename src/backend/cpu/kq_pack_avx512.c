/*
 * kq_pack_avx512.c - Q4_K and Q6_K at the avx512 level (VNNI) in "KR16", a
 * layout of 16 weight rows in the 16 int32 lanes of a vector, after R16
 * (kernels_avx512.c, before r16_tile): one token's 4 activation bytes are
 * broadcast and one vpdpbusd does 4 multiply-adds for each of 16 rows. Models
 * load these weights repacked (backend_pack_matrix), replacing the stored copy;
 * a stored matrix (XLLM_REPACK=0) has each 16-row tile put in this order in
 * scratch first, so both give the same bits.
 *
 * Integer part, per (row, token, super-block of 256 values), all exact:
 *  - Q4_K: codes 0..15 (unsigned operand) x the Q8K int8 activations. A
 *    half sub-block (16 values, 4 vpdpbusd from zero) sums to at most
 *    16 * 15 * 127 = 30480 in magnitude, so it fits an int16, and vpdpwssd by
 *    the lane (scale, 0) adds scale x sum to S (the int16 pair's high half
 *    times 0). M = sum over sub-blocks of min x (activation sum of the
 *    sub-block): vpdpwssd of the lane (min 2p, min 2p+1) by the token's
 *    broadcast pair of 32-sums, 4 per super-block.
 *  - Q5_K: Q4_K's scheme with 5-bit codes 0..31 (the fifth bit put on bit 4
 *    by one shift and a ternary-logic per code vector). 16 values could
 *    reach 16 * 31 * 127 in magnitude, past an int16, so each group of 8
 *    (2 vpdpbusd from zero, at most 31496) gets its own vpdpwssd by
 *    (scale, 0). M as Q4_K's.
 *  - Q6_K: codes 0..63 unsigned; a group of 8 values starts from
 *    -32 x (sum of its 8 activations), a per-token constant, so after 2
 *    vpdpbusd it holds sum (q - 32) a, at most 8 * 32 * 127 = 32512 in
 *    magnitude: an int16 again, and vpdpwssd by (scale, 0) adds it to S.
 * These are the reference's S_b and M_b (kquant.h) exactly. Float part per
 * super-block b, 16 lanes (rows), in block order, the same in GEMV and GEMM:
 *   f = fma(float(S), d_w * d_a, f)
 *   f = fnmadd(float(M), dmin_w * d_a, f)     (Q4_K, Q5_K)
 * and y = f + bias. So results do not depend on T, tiling, the thread split
 * or repacking.
 *
 * Packed tile of 16 rows (rows past the end: zeros), per super-block:
 *   Q4_K (2368 bytes, 148 per row; stored: 144)
 *     [16] f16 d, [16] f16 dmin, [8][16] u8 scales, [4][16][2] u8 min pairs,
 *     [32][16][4] codes: vector n, lane i = row i's stored qs[4n .. 4n+3]
 *     (low nibbles: elements 64(n/8) + 4(n%8) + 0..3, high ones 32 further)
 *   Q5_K (2880 bytes, 180 per row; stored: 176) Q4_K's 320 header bytes,
 *     then H: [8][16][4], vector b, lane i = row i's stored qh[4b .. 4b+3]
 *     (bit 2a of each byte: the fifth bit of the low nibbles of code vector
 *     8a + b, bit 2a + 1 of its high nibbles), then the codes as Q4_K's
 *   Q6_K (3392 bytes, 212 per row; stored: 210)
 *     [16] f16 d, 32 zero bytes, then 4 segments (h, kh) = (0, 0), (0, 1),
 *     (1, 0), (1, 1) of 832 bytes in the order the GEMV reads them:
 *       [4][16] i8 scales of sub-blocks 8h + 2c + kh (c = 0..3),
 *       for k = 4kh .. 4kh + 3: ql vectors 16h + k and 16h + 8 + k, qh
 *       vector 8h + k ([16][4] each: lane i = row i's stored ql[4n .. 4n+3]
 *       or qh[4n .. 4n+3] for vector n)
 *     (read out of order, three streams per super-block, the GEMV got a
 *     third of the memory bandwidth)
 * (whole cache lines; the codes are the stored bytes, transposed 4 at a time).
 *
 * GEMV (one token): the tile streamed once, codes decoded in registers. GEMM:
 * the activations of a block of tokens (about 384 KiB: 120 tokens at 2048
 * columns, 40 at 5632) are
 * rearranged by super-block (kr_prepare); per pair of 16-row tiles and
 * super-block the codes are decoded once into small buffers (bytes in
 * element order, scales widened) and every token of the block, in register
 * tiles of 4 tokens x 2 tiles, runs over them (kr_tokens: one broadcast of a
 * token's 4 activation bytes feeds both tiles; a lone last tile runs alone
 * in the same code; Q4_K and Q6_K multiply by vpdpbusd, Q5_K by vpmaddubsw
 * into int16 pair sums, whichever needs fewer scale multiplies for the same
 * integers); the 16 float accumulators per token and tile
 * wait in scratch between super-blocks. Zen 4, one thread, a thread's half of
 * TinyLlama's gate/up at T = 512 (bench_kernels): Q4_K 652 -> 730, Q6_K
 * 552 -> 613 GFLOP/s; the accumulators are zeroed by vpxord (zero_idiom),
 * not copied from a zero register (+10% of that).
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
#define KR 16  /* rows per tile */
#define KTB 256 /* most tokens per token block (kr_token_block's 384 KiB budget decides below that) */

enum { Q4B = 2368, Q5B = 2880, Q6B = 3392 }; /* bytes of one super-block of a tile */
enum { Q4_D = 0, Q4_DMIN = 32, Q4_SC = 64, Q4_MN = 192, Q4_QS = 320 };
enum { Q5_H = 320, Q5_QS = 832 }; /* Q5_K: Q4_K's header, then H, then the codes */
enum { Q6_D = 0, Q6_SEG = 64, Q6_SEGB = 832 };

/* Q6_K's parts within a super-block of a tile (the layout comment above) */
AI size_t q6_sc_at(int j) { return Q6_SEG + Q6_SEGB * (size_t)(2 * (j / 8) + j % 2) + 16 * (size_t)(j % 8 / 2); }
AI size_t q6_ql_at(int h, int s, int k) { return Q6_SEG + Q6_SEGB * (size_t)(2 * h + k / 4) + 64 + 192 * (size_t)(k % 4) + 64 * (size_t)s; }
AI size_t q6_qh_at(int h, int k) { return Q6_SEG + Q6_SEGB * (size_t)(2 * h + k / 4) + 64 + 192 * (size_t)(k % 4) + 128; }

int kq_r16_type(const matrix *W) {
    return W->dtype == XLLM_DT_Q4_K || W->dtype == XLLM_DT_Q5_K || W->dtype == XLLM_DT_Q6_K;
}

static size_t sb_bytes(dtype_t t) { return t == XLLM_DT_Q4_K ? Q4B : t == XLLM_DT_Q5_K ? Q5B : Q6B; }
static size_t tile_bytes(dtype_t t, int64_t cols) { return (size_t)(cols / QK_K) * sb_bytes(t); }
static size_t al64(size_t n) { return (n + 63) & ~(size_t)63; }
/* int32 words per token and super-block of the token extras (kr_prepare) */
static size_t ex_words(dtype_t t) { return t == XLLM_DT_Q6_K ? 32 : 4; }

size_t kq_r16_packed_bytes(const matrix *W) {
    if (!kq_r16_type(W) || W->cols <= 0 || W->cols % QK_K) return 0;
    return (size_t)((W->rows + KR - 1) / KR) * tile_bytes(W->dtype, W->cols);
}

/* ------------------------------------------------------------- repacking */

/* Row i (lane i) of a tile from its stored row; row NULL: zeros. Q6_K's
 * padding is written with lane 0. */
static void put_row(uint8_t *tile, dtype_t t, int64_t nb, const uint8_t *row, int i) {
    size_t bb = kq_block_bytes(t);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *s = row ? row + (size_t)b * bb : NULL;
        if (t == XLLM_DT_Q4_K || t == XLLM_DT_Q5_K) {
            const int q5 = t == XLLM_DT_Q5_K;
            uint8_t *o = tile + (size_t)b * (q5 ? Q5B : Q4B);
            const size_t qs = q5 ? Q5_QS : Q4_QS, sq = q5 ? 48 : 16; /* the codes: packed, stored */
            uint64_t scw = 0, mnw = 0;
            uint8_t sc[8], mn[8];
            if (s) kq_k4_scales(s, &scw, &mnw);
            memcpy(sc, &scw, 8);
            memcpy(mn, &mnw, 8);
            if (s) memcpy(o + Q4_D + 2 * i, s, 2), memcpy(o + Q4_DMIN + 2 * i, s + 2, 2);
            else memset(o + Q4_D + 2 * i, 0, 2), memset(o + Q4_DMIN + 2 * i, 0, 2);
            for (int j = 0; j < 8; j++) o[Q4_SC + 16 * j + i] = sc[j];
            for (int p = 0; p < 4; p++) o[Q4_MN + 32 * p + 2 * i] = mn[2 * p], o[Q4_MN + 32 * p + 2 * i + 1] = mn[2 * p + 1];
            for (int n = 0; n < 32; n++) {
                if (s) memcpy(o + qs + 64 * n + 4 * i, s + sq + 4 * n, 4);
                else memset(o + qs + 64 * n + 4 * i, 0, 4);
            }
            for (int n = 0; q5 && n < 8; n++) { /* H vector n: the stored qh[4n .. 4n+3] */
                if (s) memcpy(o + Q5_H + 64 * n + 4 * i, s + 16 + 4 * n, 4);
                else memset(o + Q5_H + 64 * n + 4 * i, 0, 4);
            }
        } else {
            uint8_t *o = tile + (size_t)b * Q6B;
            if (i == 0) memset(o + 32, 0, 32);
            if (s) memcpy(o + Q6_D + 2 * i, s + 208, 2);
            else memset(o + Q6_D + 2 * i, 0, 2);
            for (int j = 0; j < 16; j++) o[q6_sc_at(j) + (size_t)i] = s ? s[192 + j] : 0;
            for (int n = 0; n < 32; n++) { /* stored ql[4n ..]: n = 16h + 8s + k */
                uint8_t *d = o + q6_ql_at(n / 16, n / 8 % 2, n % 8) + 4 * i;
                if (s) memcpy(d, s + 4 * n, 4);
                else memset(d, 0, 4);
            }
            for (int n = 0; n < 16; n++) { /* stored qh[4n ..]: n = 8h + k */
                uint8_t *d = o + q6_qh_at(n / 8, n % 8) + 4 * i;
                if (s) memcpy(d, s + 128 + 4 * n, 4);
                else memset(d, 0, 4);
            }
        }
    }
}

/* Tile tl of W (stored layout) into tile. */
static void put_tile(uint8_t *tile, const matrix *W, int64_t tl) {
    int64_t nb = W->cols / QK_K;
    size_t rb = (size_t)nb * kq_block_bytes(W->dtype);
    for (int i = 0; i < KR; i++) {
        int64_t r = tl * KR + i;
        put_row(tile, W->dtype, nb, r < W->rows ? (const uint8_t *)W->data + (size_t)r * rb : NULL, i);
    }
}

void kq_r16_repack(const matrix *W, int64_t q0, int64_t q1, void *out) {
    int64_t nb = W->cols / QK_K, nq = (W->rows + 3) / 4;
    size_t tb = tile_bytes(W->dtype, W->cols), rb = (size_t)nb * kq_block_bytes(W->dtype);
    for (int64_t q = q0; q < q1; q++) {
        uint8_t *tile = (uint8_t *)out + (size_t)(q / 4) * tb;
        int i0 = (int)(q % 4) * 4, i1 = q == nq - 1 ? KR : i0 + 4; /* the last quad fills the tile */
        for (int i = i0; i < i1; i++) {
            int64_t r = q / 4 * KR + i;
            put_row(tile, W->dtype, nb, r < W->rows ? (const uint8_t *)W->data + (size_t)r * rb : NULL, i);
        }
    }
}

/* ------------------------------------------------------------ activations */

/*
 * A block of n tokens' Q8K activations (astride bytes apart) rearranged by
 * super-block, so that a register tile's tokens sit at fixed offsets from one
 * pointer: q[b][j][256] int8, d[b][j] f32 and ex[b][j][ex_words(t)] int32:
 * Q4_K 4 int16 pairs (B 2p, B 2p+1) of the sub-blocks' activation sums
 * (B s = the sums per 16, 2s and 2s + 1); Q6_K -32 x the sum of each group of
 * 8 activations.
 */
typedef struct {
    int8_t *q;
    float *d;
    int32_t *ex;
} kr_acts;

static void kr_prepare(dtype_t t, const uint8_t *act, size_t astride, int n, int64_t cols, const kr_acts *o) {
    int64_t nb = cols / QK_K;
    size_t ew = ex_words(t);
    const __m512i ones = _mm512_set1_epi8(1);
    for (int j = 0; j < n; j++) {
        const uint8_t *a = act + (size_t)j * astride;
        const float *da = (const float *)(a + cols);
        const int16_t *bs = (const int16_t *)(da + nb);
        for (int64_t b = 0; b < nb; b++) {
            size_t bj = (size_t)b * (size_t)n + (size_t)j;
            memcpy(o->q + bj * QK_K, a + b * QK_K, QK_K);
            o->d[bj] = da[b];
            int32_t *e = o->ex + bj * ew;
            if (t != XLLM_DT_Q6_K) {
                for (int p = 0; p < 4; p++) {
                    const int16_t *s = bs + 16 * b + 4 * p;
                    uint32_t lo = (uint16_t)(int16_t)(s[0] + s[1]), hi = (uint16_t)(int16_t)(s[2] + s[3]);
                    e[p] = (int32_t)(lo | hi << 16);
                }
            } else {
                for (int c = 0; c < 4; c++) { /* 64 activations: 8 groups */
                    __m512i s4 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(a + b * QK_K + 64 * c));
                    __m256i s8 = _mm512_cvtepi64_epi32(_mm512_add_epi32(s4, _mm512_srli_epi64(s4, 32)));
                    s8 = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(s8, 5));
                    _mm256_storeu_si256((__m256i *)(e + 8 * c), s8);
                }
            }
        }
    }
}

AI __m512i bc4(const int8_t *p) { /* 4 activation bytes to every lane (an embedded broadcast) */
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* Q6_K: 4 code vectors (crumb c = 0..3 of qh) from ql vectors L0 (s = 0),
 * L1 (s = 1) and qh vector H; code = nibble | crumb << 4, bytes 0..63. */
AI void q6_codes(__m512i L0, __m512i L1, __m512i H, __m512i *c0, __m512i *c1, __m512i *c2, __m512i *c3) {
    const __m512i m33 = _mm512_set1_epi8(0x33), m0f = _mm512_set1_epi8(0x0f);
    __m512i hl = _mm512_and_si512(H, m33), hh = _mm512_and_si512(_mm512_srli_epi16(H, 2), m33);
    /* bits 0..3 from the first operand, 4..7 from the second (0xE4: m0f ? a : b) */
    *c0 = _mm512_ternarylogic_epi32(L0, _mm512_slli_epi16(hl, 4), m0f, 0xE4);
    *c1 = _mm512_ternarylogic_epi32(L1, _mm512_slli_epi16(hh, 4), m0f, 0xE4);
    *c2 = _mm512_ternarylogic_epi32(_mm512_srli_epi16(L0, 4), hl, m0f, 0xE4);
    *c3 = _mm512_ternarylogic_epi32(_mm512_srli_epi16(L1, 4), hh, m0f, 0xE4);
}

/* Q6_K scale vector of sub-block j: lanes (scale, 0) as int16 pairs */
AI __m512i q6_scale(const uint8_t *blk, int j) {
    return _mm512_cvtepu16_epi32(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + q6_sc_at(j)))));
}

AI __m512i q4_scale(const uint8_t *blk, int j) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(blk + Q4_SC + 16 * j)));
}

AI __m512i q4_minpair(const uint8_t *blk, int p) {
    return _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(blk + Q4_MN + 32 * p)));
}

AI __m512 f16x16(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

/* Q5_K: the 5-bit codes of vector n = 8a + b of a super-block (a = n / 8):
 * v its 4-bit codes (QS), h the H vector b (lane i: row i's stored
 * qh[4b .. 4b+3]), whose bit 2a (low nibbles) and 2a + 1 (high nibbles) of
 * each byte is the fifth bit. Every shift stays inside the byte for bit 4
 * (16-bit shifts by at most 4 left or 3 right). A | (B & C): 0xF8. */
AI void q5_codes(__m512i v, __m512i h, int a, __m512i *lo, __m512i *hi) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), b4 = _mm512_set1_epi8(0x10);
    __m512i hl, hh;
    switch (a) {
    case 0: hl = _mm512_slli_epi16(h, 4), hh = _mm512_slli_epi16(h, 3); break;
    case 1: hl = _mm512_slli_epi16(h, 2), hh = _mm512_slli_epi16(h, 1); break;
    case 2: hl = h, hh = _mm512_srli_epi16(h, 1); break;
    default: hl = _mm512_srli_epi16(h, 2), hh = _mm512_srli_epi16(h, 3); break;
    }
    *lo = _mm512_ternarylogic_epi32(_mm512_and_si512(v, m4), hl, b4, 0xF8);
    *hi = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), hh, b4, 0xF8);
}

/* ------------------------------------------------------------------ GEMV */

/* One tile x one token (A prepared with n = 1): the 16 rows' f. */
AI __m512 gemv_q4k(const uint8_t *tile, int64_t nb, const kr_acts *A) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512 f = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = tile + (size_t)b * Q4B;
        fetch_ahead(blk, Q4B);
        const int8_t *q = A->q + b * QK_K;
        const int32_t *e = A->ex + 4 * b;
        __m512i s0 = _mm512_setzero_si512(), s1 = s0, m = s0;
        for (int jp = 0; jp < 4; jp++) {
            __m512i sl = q4_scale(blk, 2 * jp), sh = q4_scale(blk, 2 * jp + 1);
            for (int h = 0; h < 2; h++) {
                __m512i pl = _mm512_setzero_si512(), ph = pl;
                for (int k = 0; k < 4; k++) {
                    __m512i v = _mm512_loadu_si512(blk + Q4_QS + 64 * (8 * jp + 4 * h + k));
                    const int8_t *qa = q + 64 * jp + 16 * h + 4 * k;
                    pl = _mm512_dpbusd_epi32(pl, _mm512_and_si512(v, m4), bc4(qa));
                    ph = _mm512_dpbusd_epi32(ph, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4), bc4(qa + 32));
                }
                s0 = _mm512_dpwssd_epi32(s0, pl, sl);
                s1 = _mm512_dpwssd_epi32(s1, ph, sh);
            }
        }
        for (int p = 0; p < 4; p++) m = _mm512_dpwssd_epi32(m, q4_minpair(blk, p), _mm512_set1_epi32(e[p]));
        __m512 da = _mm512_set1_ps(A->d[b]);
        f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), _mm512_mul_ps(f16x16(blk + Q4_D), da), f);
        f = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(f16x16(blk + Q4_DMIN), da), f);
    }
    return f;
}

/* Q5_K: Q4_K's sequence with 5-bit codes (0..31). A group of 8 values (2
 * vpdpbusd from zero) sums to at most 8 * 31 * 127 = 31496 in magnitude
 * (Q8K activations are within +-127), an int16, so each group, not each half
 * sub-block, gets its vpdpwssd by (scale, 0). S and M are the reference's
 * S_b and M_b exactly. The 8 H vectors are loaded once per super-block. */
AI __m512 gemv_q5k(const uint8_t *tile, int64_t nb, const kr_acts *A) {
    __m512 f = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = tile + (size_t)b * Q5B;
        fetch_ahead(blk, Q5B);
        const int8_t *q = A->q + b * QK_K;
        const int32_t *e = A->ex + 4 * b;
        __m512i H[8];
        for (int n = 0; n < 8; n++) H[n] = _mm512_loadu_si512(blk + Q5_H + 64 * n);
        __m512i s0 = _mm512_setzero_si512(), s1 = s0, m = s0;
        for (int jp = 0; jp < 4; jp++) {
            __m512i sl = q4_scale(blk, 2 * jp), sh = q4_scale(blk, 2 * jp + 1);
            for (int g = 0; g < 4; g++) { /* vectors 8jp + 2g, + 1: elements 64jp + 8g .. + 7 (and 32 further) */
                __m512i pl = _mm512_setzero_si512(), ph = pl;
                for (int k = 2 * g; k < 2 * g + 2; k++) {
                    __m512i lo, hi;
                    q5_codes(_mm512_loadu_si512(blk + Q5_QS + 64 * (8 * jp + k)), H[k], jp, &lo, &hi);
                    const int8_t *qa = q + 64 * jp + 4 * k;
                    pl = _mm512_dpbusd_epi32(pl, lo, bc4(qa));
                    ph = _mm512_dpbusd_epi32(ph, hi, bc4(qa + 32));
                }
                s0 = _mm512_dpwssd_epi32(s0, pl, sl);
                s1 = _mm512_dpwssd_epi32(s1, ph, sh);
            }
        }
        for (int p = 0; p < 4; p++) m = _mm512_dpwssd_epi32(m, q4_minpair(blk, p), _mm512_set1_epi32(e[p]));
        __m512 da = _mm512_set1_ps(A->d[b]);
        f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), _mm512_mul_ps(f16x16(blk + Q4_D), da), f);
        f = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(f16x16(blk + Q4_DMIN), da), f);
    }
    return f;
}

AI __m512 gemv_q6k(const uint8_t *tile, int64_t nb, const kr_acts *A) {
    __m512 f = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = tile + (size_t)b * Q6B;
        fetch_ahead(blk, Q6B);
        const int8_t *q = A->q + b * QK_K;
        const int32_t *eb = A->ex + 32 * b;
        __m512i s[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
        for (int h = 0; h < 2; h++)
            for (int kh = 0; kh < 2; kh++) {
                __m512i sc[4]; /* sub-blocks 8h + 2c + kh */
                for (int c = 0; c < 4; c++) sc[c] = q6_scale(blk, 8 * h + 2 * c + kh);
                for (int kk = 0; kk < 2; kk++) {
                    int k0 = 4 * kh + 2 * kk;
                    __m512i cv[2][4];
                    for (int x = 0; x < 2; x++) {
                        int k = k0 + x;
                        q6_codes(_mm512_loadu_si512(blk + q6_ql_at(h, 0, k)), _mm512_loadu_si512(blk + q6_ql_at(h, 1, k)),
                                 _mm512_loadu_si512(blk + q6_qh_at(h, k)), &cv[x][0], &cv[x][1], &cv[x][2], &cv[x][3]);
                    }
                    for (int c = 0; c < 4; c++) { /* code vectors 32h + 8c + k0, +1: group 16h + 4c + k0 / 2 */
                        int v = 32 * h + 8 * c + k0;
                        __m512i p = _mm512_set1_epi32(eb[v / 2]);
                        p = _mm512_dpbusd_epi32(p, cv[0][c], bc4(q + 4 * v));
                        p = _mm512_dpbusd_epi32(p, cv[1][c], bc4(q + 4 * v + 4));
                        s[c] = _mm512_dpwssd_epi32(s[c], p, sc[c]);
                    }
                }
            }
        __m512i st = _mm512_add_epi32(_mm512_add_epi32(s[0], s[1]), _mm512_add_epi32(s[2], s[3]));
        __m512 da = _mm512_set1_ps(A->d[b]);
        f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(st), _mm512_mul_ps(f16x16(blk + Q6_D), da), f);
    }
    return f;
}

/* ------------------------------------------------------------------ GEMM */

/* One super-block of a tile decoded for the GEMM: codes in element order. */
typedef struct {
    __m512i c[64];  /* lane i: row i's codes 4v .. 4v + 3 */
    __m512i sc[16]; /* lanes (scale, 0): Q4_K sub-blocks 0..7, Q6_K 0..15; Q5_K (scale, scale) */
    __m512i mn[4];  /* Q4_K: lanes (min 2p, min 2p + 1) */
    __m512 dv, dmv;
} kdec;

AI void decode_q4k(const uint8_t *blk, kdec *u) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    for (int n = 0; n < 32; n++) { /* low nibbles: elements 64(n/8) + 4(n%8); high: 32 further */
        __m512i v = _mm512_loadu_si512(blk + Q4_QS + 64 * n);
        u->c[16 * (n / 8) + n % 8] = _mm512_and_si512(v, m4);
        u->c[16 * (n / 8) + 8 + n % 8] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    }
    for (int j = 0; j < 8; j++) u->sc[j] = q4_scale(blk, j);
    for (int p = 0; p < 4; p++) u->mn[p] = q4_minpair(blk, p);
    u->dv = f16x16(blk + Q4_D);
    u->dmv = f16x16(blk + Q4_DMIN);
}

AI void decode_q5k(const uint8_t *blk, kdec *u) {
    for (int n = 0; n < 32; n++) /* as decode_q4k, 5-bit codes */
        q5_codes(_mm512_loadu_si512(blk + Q5_QS + 64 * n), _mm512_loadu_si512(blk + Q5_H + 64 * (n % 8)), n / 8,
                 &u->c[16 * (n / 8) + n % 8], &u->c[16 * (n / 8) + 8 + n % 8]);
    for (int j = 0; j < 8; j++) { /* the scale in both int16 halves: kr_tokens' vpmaddubsw pair sums */
        const __m512i sc = q4_scale(blk, j);
        u->sc[j] = _mm512_or_si512(sc, _mm512_slli_epi32(sc, 16));
    }
    for (int p = 0; p < 4; p++) u->mn[p] = q4_minpair(blk, p);
    u->dv = f16x16(blk + Q4_D);
    u->dmv = f16x16(blk + Q4_DMIN);
}

AI void decode_q6k(const uint8_t *blk, kdec *u) {
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 8; k++)
            q6_codes(_mm512_loadu_si512(blk + q6_ql_at(h, 0, k)), _mm512_loadu_si512(blk + q6_ql_at(h, 1, k)),
                     _mm512_loadu_si512(blk + q6_qh_at(h, k)), &u->c[32 * h + k], &u->c[32 * h + 8 + k],
                     &u->c[32 * h + 16 + k], &u->c[32 * h + 24 + k]);
    for (int j = 0; j < 16; j++) u->sc[j] = q6_scale(blk, j);
    u->dv = f16x16(blk + Q6_D);
}

/* Super-block blk of a tile of type t decoded for the GEMM, its weights
 * fetched FETCH_AHEAD_BYTES ahead first (they stream from memory when the
 * matrix does not fit the caches: bench_kernels "kq gemm stream", one
 * thread, 5632x2048 at T = 16, Q4_K 304 -> 433-453 GFLOP/s, Q6_K 271 ->
 * 353-379). */
AI void decode_kr(dtype_t t, const uint8_t *blk, kdec *u) {
    fetch_ahead(blk, sb_bytes(t));
    if (t == XLLM_DT_Q5_K) decode_q5k(blk, u);
    else if (t == XLLM_DT_Q4_K) decode_q4k(blk, u);
    else decode_q6k(blk, u);
}

/* A zeroed register by vpxord (a zero idiom: no execution unit); compilers
 * otherwise copy one zero register into each accumulator (a vector move). */
AI __m512i zero_idiom(void) {
    __m512i z;
    __asm__ volatile("vpxord %0, %0, %0" : "=v"(z));
    return z;
}

/* TW (1 or 2) tiles' decoded super-blocks u0, u1 (rows r..r+15 and
 * r+16..r+31; u1 unread when TW is 1) against NT (1..4) tokens: their
 * activations at q (QK_K apart), d and extras (ew apart); F0, F1: the tiles'
 * 16 floats per token. Each token's 4 activation bytes are broadcast into a
 * register once and feed both tiles, so a code step takes 2 + NT loads for
 * 2 NT vpdpbusd (one tile and 8 tokens took 1 + 8 for 8; the loads, not the
 * vpdpbusd, bounded it). Every (row, token) gets the same integer sums and
 * float steps in the same order whatever TW and NT: the same bits. */
#define K4(F) F(0) F(1) F(2) F(3)
#define KR_QA(j, v) (q + QK_K * (j) + 4 * (v))
AI void kr_tokens(int q4, int q5, int TW, int NT, const kdec *u0, const kdec *u1, const int8_t *q, const float *d,
                  const int32_t *e, float *F0, float *F1) {
    const int ew = q4 ? 4 : 32;
#define K2_DECL(j) __m512i S##j = _mm512_setzero_si512(), T##j = S##j, P##j = S##j, R##j = S##j;
    K4(K2_DECL)
#define K2_DP(j)                                                                                                   \
    if ((j) < NT) {                                                                                                \
        const __m512i a_ = bc4(KR_QA(j, v));                                                                       \
        P##j = _mm512_dpbusd_epi32(P##j, c0, a_);                                                                  \
        if (TW == 2) R##j = _mm512_dpbusd_epi32(R##j, c1, a_);                                                     \
    }
#define K2_SW(j)                                                                                                   \
    if ((j) < NT) {                                                                                                \
        S##j = _mm512_dpwssd_epi32(S##j, P##j, sc0);                                                               \
        if (TW == 2) T##j = _mm512_dpwssd_epi32(T##j, R##j, sc1);                                                  \
    }
#define K2_Z(j) P##j = zero_idiom(), R##j = TW == 2 ? zero_idiom() : R##j;
    if (q5) {
        /* Q5_K: per code vector one vpmaddubsw (64 products into 32 int16
         * pair sums; codes < 32 and |a| <= 128 never saturate), the pair sums
         * of a half sub-block's 4 vectors added in int16 (8 products of at
         * most 31 x 128 < 32768), then one vpdpwssd with the scale in both
         * halves of each lane adds scale x (their sum) to the int32 total:
         * the integers of the vpdpbusd scheme exactly, with 8 + 2 multiplies
         * per sub-block and token instead of 8 + 4 (Q5_K's 5-bit codes let
         * an int16 hold only 8 products). bench_kernels, one thread, T = 512:
         * 2816x2048 597-625 -> 652-688 GFLOP/s. Q4_K keeps vpdpbusd: the
         * same scheme with 8 vectors per sum (8 + 1 multiplies) ran at
         * 605-649 against 663-678, its 7 int16 adds per sum not free. */
#define K2_MB(j)                                                                                                   \
    if ((j) < NT) {                                                                                                \
        const __m512i a_ = bc4(KR_QA(j, v));                                                                       \
        P##j = k ? _mm512_add_epi16(P##j, _mm512_maddubs_epi16(c0, a_)) : _mm512_maddubs_epi16(c0, a_);            \
        if (TW == 2) R##j = k ? _mm512_add_epi16(R##j, _mm512_maddubs_epi16(c1, a_)) : _mm512_maddubs_epi16(c1, a_); \
    }
/* the step's sums kept in registers here: without it the compiler hoists
 * every step's vpmaddubsw ahead of the adds and spills their results */
#define K2_PIN(j)                                                                                                  \
    if ((j) < NT) {                                                                                                \
        __asm__("" : "+v"(P##j));                                                                                  \
        if (TW == 2) __asm__("" : "+v"(R##j));                                                                     \
    }
        for (int s = 0; s < 8; s++) {
            const __m512i sc0 = u0->sc[s], sc1 = TW == 2 ? u1->sc[s] : sc0; /* (scale, scale): decode_q5k */
            for (int h = 0; h < 2; h++) {
                for (int k = 0; k < 4; k++) {
                    const int v = 8 * s + 4 * h + k;
                    const __m512i c0 = u0->c[v], c1 = TW == 2 ? u1->c[v] : c0;
                    K4(K2_MB)
                    K4(K2_PIN)
                }
                K4(K2_SW)
            }
        }
    } else if (q4) {
        for (int s = 0; s < 8; s++) {
            const __m512i sc0 = u0->sc[s], sc1 = TW == 2 ? u1->sc[s] : sc0;
            for (int h = 0; h < 2; h++) { /* 4 vectors: 16 products per lane, within the int16 vpdpwssd reads */
                K4(K2_Z)
                for (int k = 0; k < 4; k++) {
                    const int v = 8 * s + 4 * h + k;
                    const __m512i c0 = u0->c[v], c1 = TW == 2 ? u1->c[v] : c0;
                    K4(K2_DP)
                }
                K4(K2_SW)
            }
        }
    }
    if (q4) {
        K4(K2_Z)
        for (int p = 0; p < 4; p++) {
            const __m512i m0 = u0->mn[p], m1 = TW == 2 ? u1->mn[p] : m0;
#define K2_MN(j)                                                                                                   \
    if ((j) < NT) {                                                                                                \
        const __m512i b_ = _mm512_set1_epi32(e[ew * (j) + p]);                                                     \
        P##j = _mm512_dpwssd_epi32(P##j, m0, b_);                                                                  \
        if (TW == 2) R##j = _mm512_dpwssd_epi32(R##j, m1, b_);                                                     \
    }
            K4(K2_MN)
        }
    } else {
        for (int s = 0; s < 16; s++) {
            const __m512i sc0 = u0->sc[s], sc1 = TW == 2 ? u1->sc[s] : sc0;
            for (int g = 0; g < 2; g++) {
#define K2_PI(j) if ((j) < NT) P##j = R##j = _mm512_set1_epi32(e[ew * (j) + 2 * s + g]);
                K4(K2_PI)
                for (int k = 0; k < 2; k++) {
                    const int v = 4 * s + 2 * g + k;
                    const __m512i c0 = u0->c[v], c1 = TW == 2 ? u1->c[v] : c0;
                    K4(K2_DP)
                }
                K4(K2_SW)
            }
        }
    }
#define K2_FLOAT(j)                                                                                                \
    if ((j) < NT) {                                                                                                \
        const __m512 da_ = _mm512_set1_ps(d[j]);                                                                   \
        __m512 f_ = _mm512_loadu_ps(F0 + 16 * (j));                                                                \
        f_ = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S##j), _mm512_mul_ps(u0->dv, da_), f_);                            \
        if (q4) f_ = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(P##j), _mm512_mul_ps(u0->dmv, da_), f_);                  \
        _mm512_storeu_ps(F0 + 16 * (j), f_);                                                                       \
        if (TW == 2) {                                                                                             \
            __m512 g_ = _mm512_loadu_ps(F1 + 16 * (j));                                                            \
            g_ = _mm512_fmadd_ps(_mm512_cvtepi32_ps(T##j), _mm512_mul_ps(u1->dv, da_), g_);                        \
            if (q4) g_ = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(R##j), _mm512_mul_ps(u1->dmv, da_), g_);              \
            _mm512_storeu_ps(F1 + 16 * (j), g_);                                                                   \
        }                                                                                                          \
    }
    K4(K2_FLOAT)
}

AI void kr_tokens_any(int q4, int q5, int tw, int nt, const kdec *u0, const kdec *u1, const int8_t *q, const float *d,
                      const int32_t *e, float *F0, float *F1) {
    switch (tw * 4 + nt) {
#define KR_CASE(TW, N)                                                                                             \
    case TW * 4 + N: kr_tokens(q4, q5, TW, N, u0, u1, q, d, e, F0, F1); break;
        KR_CASE(2, 4) KR_CASE(2, 3) KR_CASE(2, 2) KR_CASE(2, 1) KR_CASE(1, 4) KR_CASE(1, 3) KR_CASE(1, 2)
    default: kr_tokens(q4, q5, 1, 1, u0, u1, q, d, e, F0, F1); break;
    }
}

/* Bytes per token of a prepared block (kr_acts) at most: q, d, extras. */
static size_t kr_token_bytes(int64_t cols) { return (size_t)cols + (size_t)(cols / QK_K) * (4 + 32 * 4); }

/* Tokens per block: their prepared activations about 384 KiB (L2), a
 * multiple of 8, at most KTB. */
static int kr_token_block(int64_t cols) {
    size_t tb = ((size_t)384 << 10) / kr_token_bytes(cols);
    if (tb < 8) tb = 8;
    if (tb > KTB) tb = KTB;
    return (int)(tb / 8 * 8);
}

/* For a matrix of cols columns or fewer: the token block's part is bounded
 * by a function that grows with cols (kr_token_block's product need not). */
size_t kq_r16_scratch_bytes(int64_t cols) {
    if (cols < QK_K) cols = QK_K;
    size_t tok = kr_token_bytes(cols), lo = (size_t)8 * tok > ((size_t)384 << 10) ? (size_t)8 * tok : (size_t)384 << 10;
    size_t blk = (size_t)KTB * tok < lo ? (size_t)KTB * tok : lo;
    return 2 * al64(tile_bytes(XLLM_DT_Q6_K, cols)) + 3 * 64 + blk + 2 * (size_t)KTB * 16 * sizeof(float) + 64;
}

/* Store rows [rs, min(r + 16, r1)) of a tile's f (y: the token's row). */
AI void kr_store(__m512 f, const float *bias, float *y, int64_t r, int64_t rs, int64_t r1) {
    int64_t n = r1 - r < KR ? r1 - r : KR, skip = rs - r;
    __mmask16 m = (__mmask16)(((1u << n) - 1) & ~((1u << skip) - 1));
    if (bias) f = _mm512_add_ps(f, _mm512_maskz_loadu_ps(m, bias + r));
    _mm512_mask_storeu_ps(y + r, m, f);
}

AI void kr_matmul_t(dtype_t t, const matrix *W, const uint8_t *act, size_t astride, int T, const float *bias,
                    float *y, size_t ldy, int64_t r0, int64_t r1, void *scratch) {
    const int q5 = t == XLLM_DT_Q5_K, q4 = t == XLLM_DT_Q4_K || q5; /* q4: has mins */
    const int64_t cols = W->cols, nb = cols / QK_K;
    const size_t tb = tile_bytes(t, cols), ew = ex_words(t), sbb = sb_bytes(t);
    const int TB = kr_token_block(cols);
    uint8_t *own = scratch, *own1 = own + al64(tile_bytes(XLLM_DT_Q6_K, cols)), *p = own1 + al64(tile_bytes(XLLM_DT_Q6_K, cols));
    kr_acts A;
    A.q = (int8_t *)p;
    p += al64((size_t)TB * (size_t)cols);
    A.d = (float *)p;
    p += al64((size_t)TB * (size_t)nb * 4);
    A.ex = (int32_t *)p;
    p += al64((size_t)TB * (size_t)nb * ew * 4);
    float *F = (float *)p;
    for (int t0 = 0; t0 < T; t0 += TB) {
        const int n = T - t0 < TB ? T - t0 : TB;
        kr_prepare(t, act + (size_t)t0 * astride, astride, n, cols, &A);
        for (int64_t tl = r0 / KR; tl * KR < r1; tl++) {
            const int64_t r = tl * KR, rs = r > r0 ? r : r0;
            const uint8_t *tile = (const uint8_t *)W->data + (size_t)tl * tb;
            if (!W->packed) {
                put_tile(own, W, tl);
                tile = own;
            }
            if (n == 1) { /* GEMV */
                __m512 f = q5 ? gemv_q5k(tile, nb, &A) : q4 ? gemv_q4k(tile, nb, &A) : gemv_q6k(tile, nb, &A);
                kr_store(f, bias, y + (size_t)t0 * ldy, r, rs, r1);
                continue;
            }
            /* GEMM: this tile and the next one at once where it is in the range */
            const int tw = (tl + 1) * KR < r1 ? 2 : 1;
            const uint8_t *tile1 = tile;
            if (tw == 2) {
                tile1 = (const uint8_t *)W->data + (size_t)(tl + 1) * tb;
                if (!W->packed) {
                    put_tile(own1, W, tl + 1);
                    tile1 = own1;
                }
            }
            float *F1 = F + 16 * (size_t)n;
            memset(F, 0, sizeof(float) * 16 * (size_t)n * (size_t)tw);
            for (int64_t b = 0; b < nb; b++) {
                kdec u0, u1;
                decode_kr(t, tile + (size_t)b * sbb, &u0);
                if (tw == 2) decode_kr(t, tile1 + (size_t)b * sbb, &u1);
                const size_t bn = (size_t)b * (size_t)n;
                for (int tt = 0; tt < n; tt += 4)
                    kr_tokens_any(q4, q5, tw, n - tt < 4 ? n - tt : 4, &u0, tw == 2 ? &u1 : &u0, A.q + (bn + (size_t)tt) * QK_K,
                                  A.d + bn + tt, A.ex + (bn + (size_t)tt) * ew, F + 16 * tt, F1 + 16 * tt);
            }
            for (int j = 0; j < n; j++) {
                kr_store(_mm512_loadu_ps(F + 16 * j), bias, y + (size_t)(t0 + j) * ldy, r, rs, r1);
                if (tw == 2) kr_store(_mm512_loadu_ps(F1 + 16 * j), bias, y + (size_t)(t0 + j) * ldy, r + KR, r + KR, r1);
            }
            tl += tw - 1;
        }
    }
}

void kq_r16_matmul(const matrix *W, const void *act, size_t astride, int T, const float *bias, float *y, size_t ldy,
                   int64_t r0, int64_t r1, void *scratch) {
    if (r1 <= r0 || T <= 0) return;
    if (W->dtype == XLLM_DT_Q4_K) kr_matmul_t(XLLM_DT_Q4_K, W, act, astride, T, bias, y, ldy, r0, r1, scratch);
    else if (W->dtype == XLLM_DT_Q5_K) kr_matmul_t(XLLM_DT_Q5_K, W, act, astride, T, bias, y, ldy, r0, r1, scratch);
    else kr_matmul_t(XLLM_DT_Q6_K, W, act, astride, T, bias, y, ldy, r0, r1, scratch);
}

#else
typedef int no_kq_pack_avx512_on_this_arch;
#endif
