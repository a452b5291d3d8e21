/*
 * kq_pack23_neon_impl.h - Q2_K and Q3_K at the NEON levels in the same
 * 16-row "Q23" tiles as the x86 levels (kq_pack23_layout.h, the layout
 * described in kq_pack23_avx512.c); included by kq_kernels_neon_impl.h after
 * kq_pack32_neon_impl.h (whose pkn_dot4 it shares), so compiled with and
 * without dotprod.
 *
 * A tile is four quads of 4 rows, as P32 at NEON: per 16-value sub-block s
 * (elements 16s ..), four code vectors (QS (h, 4 nh + n'), crumb j, s = 8h +
 * 2j + nh) against the activations 16s + 4n' .. give the 4 rows' exact dot;
 * the codes are the signed values the scale multiplies (Q2_K 0..3, Q3_K
 * 2 bits | high bit << 2, minus 4), so S_b = sum of scale x dot and Q2_K's
 * M_b = sum of min x the activations' sums per 16, exact integers; the float
 * steps are the reference's, unfused, in super-block order:
 *   f = f + (d_w * d_a) * S_b;  f = f - (dmin_w * d_a) * M_b   (Q2_K)
 * so these kernels give kq_matmul_ref's bits, packed or stored, whatever T
 * and the row split (the x86 Q23 fuse them: x86 and NEON differ by float
 * rounding). Per tile and super-block the codes are decoded once into
 * scratch and every token runs over them.
 * Thread-safe: writes only the rows of y (and the scratch) it is given.
 */
#include "backend/cpu/kq_pack23_layout.h"

#include <arm_neon.h>

typedef struct {
    int8x16_t c[4][16][4]; /* [quad][sub-block][n'] */
    int32x4_t sc[4][16];   /* scales (Q3_K: - 32) */
    int32x4_t mn[4][16];   /* Q2_K mins */
    float32x4_t d[4], dmin[4];
} q23n_dec;

static void q23n_decode(int q2, const uint8_t *blk, q23n_dec *u) {
    const uint8x16_t m3 = vdupq_n_u8(3), b1 = vdupq_n_u8(1);
    for (int g = 0; g < 4; g++) {
        for (int h = 0; h < 2; h++)
            for (int n = 0; n < 8; n++) {
                const uint8x16_t v = vld1q_u8(blk + q23_qs_at(q2, h, n) + 16 * g);
                const uint8x16_t hv = q2 ? v : vld1q_u8(blk + q23_h_at(n) + 16 * g);
                for (int j = 0; j < 4; j++) {
                    uint8x16_t c = vandq_u8(vshlq_u8(v, vdupq_n_s8((int8_t)(-2 * j))), m3);
                    int8x16_t sc;
                    if (q2) {
                        sc = vreinterpretq_s8_u8(c);
                    } else { /* high bit 4h + j of the hmask byte on bit 2, value - 4 */
                        c = vorrq_u8(c, vshlq_n_u8(vandq_u8(vshlq_u8(hv, vdupq_n_s8((int8_t)-(4 * h + j))), b1), 2));
                        sc = vsubq_s8(vreinterpretq_s8_u8(c), vdupq_n_s8(4));
                    }
                    u->c[g][8 * h + 2 * j + n / 4][n % 4] = sc;
                }
            }
        for (int s = 0; s < 16; s++) {
            int32_t a[4], b[4];
            for (int i = 0; i < 4; i++) {
                const int row = 4 * g + i;
                if (q2) {
                    const uint8_t x = blk[Q2_SM + 32 * (s / 2) + 2 * row + s % 2];
                    a[i] = x & 0xf, b[i] = x >> 4;
                } else {
                    a[i] = (int8_t)blk[Q3_SC + 16 * s + row], b[i] = 0;
                }
            }
            u->sc[g][s] = vld1q_s32(a);
            u->mn[g][s] = vld1q_s32(b);
        }
        u->d[g] = pkn_f16x4(blk + Q2_D + 8 * g);
        if (q2) u->dmin[g] = pkn_f16x4(blk + Q2_DMIN + 8 * g);
    }
}

/* One token (its prepared Q8K row a) against super-block b decoded in u:
 * f[quad] carried on. */
static inline void q23n_token(int q2, const q23n_dec *u, int64_t b, int64_t nb, const uint8_t *a, int64_t cols,
                              float32x4_t f[4]) {
    const int8_t *q = (const int8_t *)a + QK_K * b;
    const float *da = (const float *)(a + cols);
    const int16_t *bs = (const int16_t *)(da + nb) + 16 * b;
    for (int g = 0; g < 4; g++) {
        int32x4_t S = vdupq_n_s32(0), M = S;
        for (int s = 0; s < 16; s++) {
            S = vmlaq_s32(S, pkn_dot4(u->c[g][s], q + 16 * s), u->sc[g][s]);
            if (q2) M = vmlaq_n_s32(M, u->mn[g][s], bs[s]);
        }
        f[g] = vaddq_f32(f[g], vmulq_f32(vmulq_n_f32(u->d[g], da[b]), vcvtq_f32_s32(S)));
        if (q2) f[g] = vsubq_f32(f[g], vmulq_f32(vmulq_n_f32(u->dmin[g], da[b]), vcvtq_f32_s32(M)));
    }
}

static inline size_t q23n_scratch_bytes(int64_t cols) {
    if (cols < QK_K) cols = QK_K;
    return q23_al64(q23_tile_bytes(XLLM_DT_Q3_K, cols)) + q23_al64(sizeof(q23n_dec)) + 64;
}

/* Rows [r0, r1) of W (Q2_K / Q3_K; packed, or stored: each tile put in
 * order in scratch first) for T tokens. */
static void q23n_matmul(const matrix *W, const uint8_t *act, size_t astride, int T, const float *bias, float *y,
                        size_t ldy, int64_t r0, int64_t r1, void *scratch) {
    const int q2 = W->dtype == XLLM_DT_Q2_K;
    const int64_t cols = W->cols, nb = cols / QK_K;
    const size_t tb = q23_tile_bytes(W->dtype, cols), sbb = sb_bytes(W->dtype);
    uint8_t *own = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    q23n_dec *u = (q23n_dec *)(own + q23_al64(q23_tile_bytes(XLLM_DT_Q3_K, cols)));
    for (int64_t tl = r0 / QR; tl * QR < r1; tl++) {
        const int64_t r = tl * QR, rs = r > r0 ? r : r0;
        const uint8_t *tile = (const uint8_t *)W->data + (size_t)tl * tb;
        if (!W->packed) {
            q23_put_tile(own, W, tl);
            tile = own;
        }
        for (int j0 = 0; j0 < T; j0 += KQ_TB) {
            const int nt = T - j0 < KQ_TB ? T - j0 : KQ_TB;
            float32x4_t f[KQ_TB][4];
            for (int j = 0; j < nt; j++)
                for (int g = 0; g < 4; g++) f[j][g] = vdupq_n_f32(0);
            for (int64_t b = 0; b < nb; b++) {
                q23n_decode(q2, tile + (size_t)b * sbb, u);
                for (int j = 0; j < nt; j++) q23n_token(q2, u, b, nb, act + (size_t)(j0 + j) * astride, cols, f[j]);
            }
            for (int j = 0; j < nt; j++) pkn_store(f[j], bias, y + (size_t)(j0 + j) * ldy, r, rs, r1);
        }
    }
}
