/*
 * kq_pack23_layout.h - the "Q23" 16-row tile layout of Q2_K and Q3_K
 * (described in kq_pack23_avx512.c) and its repacking, plain C, shared by the
 * avx512 (kq_pack23_avx512.c) and avx2 (kq_pack23_avx2.c) levels: both read
 * the same packed bytes. Included by those two files only (static functions,
 * compiled with each level's flags).
 * Thread-safe: the repack writes only the tiles it is given.
 */
#ifndef XLLM_BACKEND_CPU_KQ_PACK23_LAYOUT_H
#define XLLM_BACKEND_CPU_KQ_PACK23_LAYOUT_H

#include "backend/cpu/kq_kernels.h"
#include "quant/kquant.h"

#include <string.h>

#ifndef AI
#define AI static inline __attribute__((always_inline))
#endif
#define QR 16  /* rows per tile */

enum { Q2B = 1344, Q2_D = 0, Q2_DMIN = 32, Q2_SM = 64, Q2_QS = 320 };
enum { Q3B = 1856, Q3_D = 0, Q3_SC = 64, Q3_HQ = 320 };

/* Where QS vector (h, n) and (Q3_K) H vector n sit in a super-block, in the
 * order the GEMV reads them, per n: (H n,) QS (0, n), QS (1, n): one stream
 * (with H and QS apart, Q3_K's GEMV streamed at a third of the speed). */
AI size_t q23_qs_at(int q2, int h, int n) { return q2 ? Q2_QS + 64 * (size_t)(2 * n + h) : Q3_HQ + 192 * (size_t)n + 64 + 64 * (size_t)h; }
AI size_t q23_h_at(int n) { return Q3_HQ + 192 * (size_t)n; }

static inline int q23_is_type(const matrix *W) {
    return (W->dtype == XLLM_DT_Q2_K || W->dtype == XLLM_DT_Q3_K) && W->cols > 0 && W->cols % QK_K == 0;
}

static inline size_t sb_bytes(dtype_t t) { return t == XLLM_DT_Q2_K ? Q2B : Q3B; }
static inline size_t q23_tile_bytes(dtype_t t, int64_t cols) { return (size_t)(cols / QK_K) * sb_bytes(t); }
static inline size_t q23_al64(size_t n) { return (n + 63) & ~(size_t)63; }

static inline size_t q23_packed_bytes(const matrix *W) {
    if (!q23_is_type(W)) return 0;
    return (size_t)((W->rows + QR - 1) / QR) * q23_tile_bytes(W->dtype, W->cols);
}

/* ------------------------------------------------------------- repacking */

/* Q3_K's 16 six-bit scales (-32 .. 31) from the 12 stored bytes. */
static inline void q3_scales(const uint8_t *s, int8_t *sc) {
    for (int i = 0; i < 16; i++) {
        int lo = i < 8 ? s[i] & 0xf : s[i - 8] >> 4;
        int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        sc[i] = (int8_t)((lo | hi << 4) - 32);
    }
}

/* Row i (lane i) of a tile from its stored row; row NULL: zeros. */
static inline void q23_put_row(uint8_t *tile, dtype_t t, int64_t nb, const uint8_t *row, int i) {
    const size_t bb = kq_block_bytes(t);
    const int q2 = t == XLLM_DT_Q2_K;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *s = row ? row + (size_t)b * bb : NULL;
        uint8_t *o = tile + (size_t)b * sb_bytes(t);
        const uint8_t *qs = s ? s + (q2 ? 16 : 32) : NULL;
        if (q2) {
            if (s) memcpy(o + Q2_D + 2 * i, s + 80, 2), memcpy(o + Q2_DMIN + 2 * i, s + 82, 2);
            else memset(o + Q2_D + 2 * i, 0, 2), memset(o + Q2_DMIN + 2 * i, 0, 2);
            for (int p = 0; p < 8; p++)
                for (int x = 0; x < 2; x++) o[Q2_SM + 32 * p + 2 * i + x] = s ? s[2 * p + x] : 0;
        } else {
            int8_t sc[16] = {0};
            if (i == 0) memset(o + 32, 0, 32);
            if (s) memcpy(o + Q3_D + 2 * i, s + 108, 2), q3_scales(s + 96, sc);
            else memset(o + Q3_D + 2 * i, 0, 2);
            for (int j = 0; j < 16; j++) o[Q3_SC + 16 * j + i] = (uint8_t)sc[j];
            for (int n = 0; n < 8; n++) {
                uint8_t *d = o + q23_h_at(n) + 4 * i;
                if (s) memcpy(d, s + 4 * n, 4);
                else memset(d, 0, 4);
            }
        }
        for (int n = 0; n < 16; n++) { /* n = 8h + n' */
            uint8_t *d = o + q23_qs_at(q2, n / 8, n % 8) + 4 * i;
            if (qs) memcpy(d, qs + 4 * n, 4);
            else memset(d, 0, 4);
        }
    }
}

static inline void q23_put_tile(uint8_t *tile, const matrix *W, int64_t tl) {
    int64_t nb = W->cols / QK_K;
    size_t rb = (size_t)nb * kq_block_bytes(W->dtype);
    for (int i = 0; i < QR; i++) {
        int64_t r = tl * QR + i;
        q23_put_row(tile, W->dtype, nb, r < W->rows ? (const uint8_t *)W->data + (size_t)r * rb : NULL, i);
    }
}

static inline void q23_repack(const matrix *W, int64_t q0, int64_t q1, void *out) {
    int64_t nb = W->cols / QK_K, nq = (W->rows + 3) / 4;
    size_t tb = q23_tile_bytes(W->dtype, W->cols), rb = (size_t)nb * kq_block_bytes(W->dtype);
    for (int64_t q = q0; q < q1; q++) {
        uint8_t *tile = (uint8_t *)out + (size_t)(q / 4) * tb;
        int i0 = (int)(q % 4) * 4, i1 = q == nq - 1 ? QR : i0 + 4; /* the last quad fills the tile */
        for (int i = i0; i < i1; i++) {
            int64_t r = q / 4 * QR + i;
            q23_put_row(tile, W->dtype, nb, r < W->rows ? (const uint8_t *)W->data + (size_t)r * rb : NULL, i);
        }
    }
}

#endif
