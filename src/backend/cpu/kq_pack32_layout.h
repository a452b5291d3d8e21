/*
 * kq_pack32_layout.h - the "P32" 16-row tile layout of IQ4_NL, Q5_0, Q5_1
 * and IQ4_XS (described in kq_pack32_avx512.c) and its repacking, plain C,
 * shared by the avx512 (kq_pack32_avx512.c) and avx2 (kq_pack32_avx2.c)
 * levels, and the NEON levels (kq_pack32_neon_impl.h): all read the same
 * packed bytes. Included by those files only (static inline functions,
 * compiled with each level's flags).
 * Thread-safe: the repack writes only the tiles it is given.
 */
#ifndef XLLM_BACKEND_CPU_KQ_PACK32_LAYOUT_H
#define XLLM_BACKEND_CPU_KQ_PACK32_LAYOUT_H

#include "backend/cpu/kq_kernels.h"
#include "quant/kquant.h"

#include <string.h>

#ifndef AI
#define AI static inline __attribute__((always_inline))
#endif
#define PR 16  /* rows per tile */

static inline int p32_is_type(const matrix *W) {
    dtype_t t = W->dtype;
    return (t == XLLM_DT_IQ4_NL || t == XLLM_DT_Q5_0 || t == XLLM_DT_Q5_1 || t == XLLM_DT_IQ4_XS) && W->cols > 0 &&
           W->cols % QK_K == 0;
}

/* Byte offsets of block k's parts within a group (the layout comment above):
 * Q80 types in pairs of blocks (pb bytes: d, m, h, qs of the pair); IQ4_XS
 * (one super-block): d at 0, sc, qs. */
typedef struct {
    size_t pb, m, h, qs, sc, bytes;
} p32_layout;

AI p32_layout layout_of(dtype_t t) {
    p32_layout L = {0, 0, 0, 0, 0, 0};
    switch (t) {
    case XLLM_DT_IQ4_NL: L.pb = 576, L.qs = 64; break;
    case XLLM_DT_Q5_0: L.pb = 704, L.h = 64, L.qs = 192; break;
    case XLLM_DT_Q5_1: L.pb = 768, L.m = 64, L.h = 128, L.qs = 256; break;
    default: L.sc = 64, L.qs = 192, L.bytes = 2240; break; /* IQ4_XS */
    }
    if (L.pb) L.bytes = 4 * L.pb;
    return L;
}

AI size_t d_at(const p32_layout *L, int k) { return L->pb * (size_t)(k / 2) + 32 * (size_t)(k % 2); }
AI size_t m_at(const p32_layout *L, int k) { return d_at(L, k) + L->m; }
AI size_t h_at(const p32_layout *L, int k) { return L->pb * (size_t)(k / 2) + L->h + 64 * (size_t)(k % 2); }
AI size_t qs_at(const p32_layout *L, int k) {
    return L->pb ? L->pb * (size_t)(k / 2) + L->qs + 256 * (size_t)(k % 2) : L->qs + 256 * (size_t)k;
}

static inline size_t tile_bytes(dtype_t t, int64_t cols) { return (size_t)(cols / QK_K) * layout_of(t).bytes; }
static inline size_t al64(size_t n) { return (n + 63) & ~(size_t)63; }

static inline size_t p32_packed_bytes(const matrix *W) {
    if (!p32_is_type(W)) return 0;
    return (size_t)((W->rows + PR - 1) / PR) * tile_bytes(W->dtype, W->cols);
}

/* ------------------------------------------------------------- repacking */

/* qh's 32 fifth bits into H's order (the layout comment above) */
static inline uint32_t h_word(uint32_t qh) {
    uint32_t w = 0;
    for (int k = 0; k < 4; k++)
        for (int n = 0; n < 4; n++) {
            w |= ((qh >> (4 * n + k)) & 1u) << (8 * k + n);
            w |= ((qh >> (16 + 4 * n + k)) & 1u) << (8 * k + 4 + n);
        }
    return w;
}

/* Row i (lane i) of a tile from its stored row; row NULL: zeros. */
static inline void put_row(uint8_t *tile, dtype_t t, int64_t ng, const uint8_t *row, int i) {
    const p32_layout L = layout_of(t);
    const size_t bb = kq_block_bytes(t);
    for (int64_t g = 0; g < ng; g++) {
        uint8_t *o = tile + (size_t)g * L.bytes;
        if (t == XLLM_DT_IQ4_XS) {
            const uint8_t *s = row ? row + (size_t)g * bb : NULL;
            if (i == 0) memset(o + 32, 0, 32);
            if (s) memcpy(o + 2 * i, s, 2);
            else memset(o + 2 * i, 0, 2);
            uint16_t sh = 0;
            if (s) memcpy(&sh, s + 2, 2);
            for (int j = 0; j < 8; j++) {
                int ls = s ? (((s[4 + j / 2] >> (4 * (j % 2))) & 0xf) | ((sh >> (2 * j)) & 3) << 4) : 32;
                o[L.sc + 16 * (size_t)j + (size_t)i] = (uint8_t)(int8_t)(ls - 32);
                for (int n = 0; n < 4; n++) {
                    uint8_t *dq = o + qs_at(&L, j) + 64 * (size_t)n + 4 * (size_t)i;
                    if (s) memcpy(dq, s + 8 + 16 * j + 4 * n, 4);
                    else memset(dq, 0, 4);
                }
            }
            continue;
        }
        for (int k = 0; k < 8; k++) {
            const uint8_t *s = row ? row + (size_t)(8 * g + k) * bb : NULL;
            int hdr = t == XLLM_DT_Q5_1 ? 4 : 2; /* qh (Q5_x) after d (and m) */
            int qoff = t == XLLM_DT_IQ4_NL ? 2 : hdr + 4;
            if (s) memcpy(o + d_at(&L, k) + 2 * i, s, 2);
            else memset(o + d_at(&L, k) + 2 * i, 0, 2);
            if (t == XLLM_DT_Q5_1) {
                if (s) memcpy(o + m_at(&L, k) + 2 * i, s + 2, 2);
                else memset(o + m_at(&L, k) + 2 * i, 0, 2);
            }
            if (t != XLLM_DT_IQ4_NL) {
                uint32_t qh = 0;
                if (s) memcpy(&qh, s + hdr, 4);
                uint32_t w = h_word(qh);
                memcpy(o + h_at(&L, k) + 4 * (size_t)i, &w, 4);
            }
            for (int n = 0; n < 4; n++) {
                uint8_t *dq = o + qs_at(&L, k) + 64 * (size_t)n + 4 * (size_t)i;
                if (s) memcpy(dq, s + qoff + 4 * n, 4);
                else memset(dq, 0, 4);
            }
        }
    }
}

static inline void put_tile(uint8_t *tile, const matrix *W, int64_t tl) {
    int64_t ng = W->cols / QK_K;
    size_t rb = (size_t)(W->cols / kq_block_elems(W->dtype)) * kq_block_bytes(W->dtype);
    for (int i = 0; i < PR; i++) {
        int64_t r = tl * PR + i;
        put_row(tile, W->dtype, ng, r < W->rows ? (const uint8_t *)W->data + (size_t)r * rb : NULL, i);
    }
}

static inline void p32_repack(const matrix *W, int64_t q0, int64_t q1, void *out) {
    int64_t ng = W->cols / QK_K, nq = (W->rows + 3) / 4;
    size_t tb = tile_bytes(W->dtype, W->cols);
    size_t rb = (size_t)(W->cols / kq_block_elems(W->dtype)) * kq_block_bytes(W->dtype);
    for (int64_t q = q0; q < q1; q++) {
        uint8_t *tile = (uint8_t *)out + (size_t)(q / 4) * tb;
        int i0 = (int)(q % 4) * 4, i1 = q == nq - 1 ? PR : i0 + 4; /* the last quad fills the tile */
        for (int i = i0; i < i1; i++) {
            int64_t r = q / 4 * PR + i;
            put_row(tile, W->dtype, ng, r < W->rows ? (const uint8_t *)W->data + (size_t)r * rb : NULL, i);
        }
    }
}

#endif
