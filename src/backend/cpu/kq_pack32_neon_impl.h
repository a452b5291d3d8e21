/*
 * kq_pack32_neon_impl.h - IQ4_NL, Q5_0, Q5_1 and IQ4_XS at the NEON levels
 * in the same 16-row "P32" tiles as the x86 levels (kq_pack32_layout.h, the
 * layout described in kq_pack32_avx512.c); included by
 * kq_kernels_neon_impl.h, so compiled twice: NEON_DOT 1 (vdotq_laneq_s32)
 * and NEON_DOT 0 (vmull_s8 + vpadalq_s16).
 *
 * A tile's 16 rows are four quads of 4 int32 lanes. In a packed vector, quad
 * g's 16 bytes are rows 4g .. 4g + 3's 4 code bytes each, so one sdot by an
 * activation lane (4 bytes) does 4 multiply-adds for each of 4 rows, the
 * scheme vpdpbusd gives the x86 levels. NEON multiplies signed by signed
 * bytes, so the codes are the signed values the block scale multiplies (IQ4
 * table values, Q5_0 q - 16, Q5_1 q): no offset through the activation sums.
 * Each block's integer sum S_b (IQ4_XS: sum over sub-blocks of scale x dot)
 * is exact, and the float steps per lane are the reference's, in block
 * order, unfused (kq_kernels_neon_impl.h's own):
 *   f = f + (d_w * d_a) * S_b;  f = f + m_w * s_a   (Q5_1)
 * so these kernels give kq_matmul_ref's bits, as the rest of the NEON code,
 * packed or stored, whatever T and the row split. (The x86 levels' P32 fuse
 * those steps: x86 and NEON differ by float rounding.)
 *
 * Per tile and group (256 values) the codes are decoded once into a buffer
 * in scratch and every token runs over it.
 * Thread-safe: writes only the rows of y (and the scratch) it is given.
 */
#include "backend/cpu/kq_pack32_layout.h"

#include <arm_neon.h>

/* one group decoded: codes [block k][quad g][vector v: n (lo) / 4 + n (hi)] */
typedef struct {
    int8x16_t c[8][4][8];
    float32x4_t d[8][4]; /* per block (IQ4_XS: d[0] only) */
    float32x4_t m[8][4]; /* Q5_1 */
    int32x4_t sc[8][4];  /* IQ4_XS: sub-block scale - 32 */
} p32n_dec;

static inline float32x4_t pkn_f16x4(const uint8_t *p) {
    float v[4];
    for (int i = 0; i < 4; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        v[i] = f16_to_f32(h);
    }
    return vld1q_f32(v);
}

static void p32n_decode(dtype_t t, const uint8_t *grp, p32n_dec *u) {
    const p32_layout L = layout_of(t);
    const int8x16_t tbl = vld1q_s8(kq_iq4_values);
    const uint8x16_t m4 = vdupq_n_u8(0x0f), b1 = vdupq_n_u8(1);
    for (int k = 0; k < 8; k++)
        for (int g = 0; g < 4; g++) {
            const uint8x16_t h = t == XLLM_DT_Q5_0 || t == XLLM_DT_Q5_1 ? vld1q_u8(grp + h_at(&L, k) + 16 * g) : m4;
            for (int n = 0; n < 4; n++) {
                const uint8x16_t v = vld1q_u8(grp + qs_at(&L, k) + 64 * n + 16 * g);
                const uint8x16_t lo = vandq_u8(v, m4), hi = vshrq_n_u8(v, 4);
                if (t == XLLM_DT_IQ4_NL || t == XLLM_DT_IQ4_XS) {
                    u->c[k][g][n] = vqtbl1q_s8(tbl, lo);
                    u->c[k][g][4 + n] = vqtbl1q_s8(tbl, hi);
                } else { /* bit n of an H byte: element 4n + k's fifth bit, bit 4 + n: 16 + 4n + k's */
                    const uint8x16_t h0 = vshlq_n_u8(vandq_u8(vshlq_u8(h, vdupq_n_s8((int8_t)-n)), b1), 4);
                    const uint8x16_t h1 = vshlq_n_u8(vandq_u8(vshlq_u8(h, vdupq_n_s8((int8_t)(-4 - n))), b1), 4);
                    int8x16_t c0 = vreinterpretq_s8_u8(vorrq_u8(lo, h0)), c1 = vreinterpretq_s8_u8(vorrq_u8(hi, h1));
                    if (t == XLLM_DT_Q5_0) c0 = vsubq_s8(c0, vdupq_n_s8(16)), c1 = vsubq_s8(c1, vdupq_n_s8(16));
                    u->c[k][g][n] = c0;
                    u->c[k][g][4 + n] = c1;
                }
            }
            if (t == XLLM_DT_IQ4_XS) {
                const int8_t *s = (const int8_t *)grp + L.sc + 16 * k + 4 * g;
                int32_t v[4] = {s[0], s[1], s[2], s[3]};
                u->sc[k][g] = vld1q_s32(v);
                if (k == 0) u->d[0][g] = pkn_f16x4(grp + 8 * g);
            } else {
                u->d[k][g] = pkn_f16x4(grp + d_at(&L, k) + 8 * g);
                if (t == XLLM_DT_Q5_1) u->m[k][g] = pkn_f16x4(grp + m_at(&L, k) + 8 * g);
            }
        }
}

/* The exact dots of 4 rows (a quad: c[v]'s bytes 4i .. 4i + 3 are row i's
 * codes of elements 4v .. 4v + 3) with the 16 activations q. */
static inline int32x4_t pkn_dot4(const int8x16_t c[4], const int8_t *q) {
#if NEON_DOT
    const int8x16_t a = vld1q_s8(q);
    int32x4_t p = vdupq_n_s32(0);
    p = vdotq_laneq_s32(p, c[0], a, 0);
    p = vdotq_laneq_s32(p, c[1], a, 1);
    p = vdotq_laneq_s32(p, c[2], a, 2);
    p = vdotq_laneq_s32(p, c[3], a, 3);
    return p;
#else
    /* pair sums: rows 0, 1 in s01 (two lanes each), rows 2, 3 in s23 */
    int32x4_t s01 = vdupq_n_s32(0), s23 = s01;
    for (int v = 0; v < 4; v++) {
        int32_t w; /* the 4 activations of code vector v, in every lane */
        memcpy(&w, q + 4 * v, 4);
        const int8x16_t aw = vreinterpretq_s8_s32(vdupq_n_s32(w));
        s01 = vpadalq_s16(s01, vmull_s8(vget_low_s8(c[v]), vget_low_s8(aw)));
        s23 = vpadalq_s16(s23, vmull_high_s8(c[v], aw));
    }
    return vpaddq_s32(s01, s23);
#endif
}

/* The exact dot of block k's quad g with its 32 activations q: 4 rows. */
static inline int32x4_t p32n_dot(const p32n_dec *u, int k, int g, const int8_t *q) {
    return vaddq_s32(pkn_dot4(u->c[k][g], q), pkn_dot4(u->c[k][g] + 4, q + 16));
}

/* Store rows [rs, min(r + 16, r1)) of a tile's four quads f (+ bias). */
static inline void pkn_store(const float32x4_t f[4], const float *bias, float *y, int64_t r, int64_t rs, int64_t r1) {
    float v[16];
    for (int g = 0; g < 4; g++) vst1q_f32(v + 4 * g, f[g]);
    for (int i = 0; i < 16; i++) {
        const int64_t row = r + i;
        if (row < rs || row >= r1) continue;
        y[row] = v[i] + (bias ? bias[row] : 0.0f);
    }
}

/* One token (its prepared Q80 / Q8K row a) against the decoded group g of
 * a tile: f[quad] (4 rows each) carried on. */
static inline void p32n_token(dtype_t t, const p32n_dec *u, int64_t grp, const uint8_t *a, int64_t cols,
                              float32x4_t f[4]) {
    const int8_t *q = (const int8_t *)a;
    const float *da = (const float *)(a + cols), *sa = da + cols / 32;
    for (int g = 0; g < 4; g++) {
        if (t == XLLM_DT_IQ4_XS) {
            int32x4_t S = vdupq_n_s32(0);
            for (int k = 0; k < 8; k++) S = vmlaq_s32(S, p32n_dot(u, k, g, q + 256 * grp + 32 * k), u->sc[k][g]);
            f[g] = vaddq_f32(f[g], vmulq_f32(vmulq_n_f32(u->d[0][g], da[grp]), vcvtq_f32_s32(S)));
            continue;
        }
        for (int k = 0; k < 8; k++) {
            const int64_t b = 8 * grp + k;
            const int32x4_t P = p32n_dot(u, k, g, q + 32 * b);
            f[g] = vaddq_f32(f[g], vmulq_f32(vmulq_n_f32(u->d[k][g], da[b]), vcvtq_f32_s32(P)));
            if (t == XLLM_DT_Q5_1) f[g] = vaddq_f32(f[g], vmulq_n_f32(u->m[k][g], sa[b]));
        }
    }
}

static inline size_t p32n_scratch_bytes(int64_t cols) {
    if (cols < QK_K) cols = QK_K;
    return al64(tile_bytes(XLLM_DT_Q5_1, cols)) + al64(sizeof(p32n_dec)) + 64;
}

/* Rows [r0, r1) of W (P32 type; packed, or stored: each tile put in order
 * in scratch first) for T tokens; F: scratch for T x 16 accumulators. */
static void p32n_matmul(const matrix *W, const uint8_t *act, size_t astride, int T, const float *bias, float *y,
                        size_t ldy, int64_t r0, int64_t r1, void *scratch) {
    const dtype_t t = W->dtype;
    const int64_t cols = W->cols, ng = cols / QK_K;
    const size_t tb = tile_bytes(t, cols), gb = layout_of(t).bytes;
    uint8_t *own = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    p32n_dec *u = (p32n_dec *)(own + al64(tile_bytes(XLLM_DT_Q5_1, cols)));
    for (int64_t tl = r0 / PR; tl * PR < r1; tl++) {
        const int64_t r = tl * PR, rs = r > r0 ? r : r0;
        const uint8_t *tile = (const uint8_t *)W->data + (size_t)tl * tb;
        if (!W->packed) {
            put_tile(own, W, tl);
            tile = own;
        }
        for (int j0 = 0; j0 < T; j0 += KQ_TB) { /* tokens in blocks: their accumulators on the stack */
            const int nt = T - j0 < KQ_TB ? T - j0 : KQ_TB;
            float32x4_t f[KQ_TB][4];
            for (int j = 0; j < nt; j++)
                for (int g = 0; g < 4; g++) f[j][g] = vdupq_n_f32(0);
            for (int64_t g = 0; g < ng; g++) {
                p32n_decode(t, tile + (size_t)g * gb, u);
                for (int j = 0; j < nt; j++) p32n_token(t, u, g, act + (size_t)(j0 + j) * astride, cols, f[j]);
            }
            for (int j = 0; j < nt; j++) pkn_store(f[j], bias, y + (size_t)(j0 + j) * ldy, r, rs, r1);
        }
    }
}
