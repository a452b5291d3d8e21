/*
 * kq_kernels_neon.c - the NEON matmuls for llama.cpp's block types on any
 * aarch64 CPU (vmull_s8 products); the dotprod variant is
 * kq_kernels_neon_dot.c, both from kq_kernels_neon_impl.h, identical results.
 */
#if defined(__aarch64__)
#define NEON_DOT 0
#define KQ_NEON_FN kq_matmul_neon
#include "backend/cpu/kq_kernels_neon_impl.h"
#include "quant/quant.h"

/* llama.cpp's activations (kq_act_prepare, kquant.c) 4 floats at a time in
 * kq_act_frame.h's loops, the same bytes: the same float products (no fma),
 * rounded to nearest even by fcvtns as lrintf rounds, a product that is not
 * finite or above 128 in magnitude coded 0 as there (NaN skipped in the
 * largest magnitude: fmaxnm keeps the number). */
static float nk_amax(const float *x, int n) {
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int i = 0; i < n; i += 4) m = vmaxnmq_f32(vabsq_f32(vld1q_f32(x + i)), m);
    return vmaxnmvq_f32(m);
}

/* 4 codes of x * s */
static inline int32x4_t nk_codes4(const float *x, float32x4_t s) {
    float32x4_t p = vmulq_f32(vld1q_f32(x), s);
    uint32x4_t ok = vcaleq_f32(p, vdupq_n_f32(128.0f));
    return vandq_s32(vcvtnq_s32_f32(p), vreinterpretq_s32_u32(ok));
}

/* 16 codes (each at most 128 in magnitude) to bytes, in order */
static inline int8x16_t nk_pack16(int32x4_t a, int32x4_t b, int32x4_t c, int32x4_t d) {
    int16x8_t ab = vcombine_s16(vqmovn_s32(a), vqmovn_s32(b)), cd = vcombine_s16(vqmovn_s32(c), vqmovn_s32(d));
    return vcombine_s8(vqmovn_s16(ab), vqmovn_s16(cd));
}

static void nk_act_q8k(const float *xb, float iscale, int8_t *qb, int16_t *bs) {
    const int32x4_t c127 = vdupq_n_s32(127);
    const float32x4_t s = vdupq_n_f32(iscale);
    for (int i = 0; i < QK_K; i += 16) {
        int32x4_t c0 = vminq_s32(nk_codes4(xb + i, s), c127), c1 = vminq_s32(nk_codes4(xb + i + 4, s), c127),
                  c2 = vminq_s32(nk_codes4(xb + i + 8, s), c127), c3 = vminq_s32(nk_codes4(xb + i + 12, s), c127);
        vst1q_s8(qb + i, nk_pack16(c0, c1, c2, c3));
        bs[i / 16] = (int16_t)vaddvq_s32(vaddq_s32(vaddq_s32(c0, c1), vaddq_s32(c2, c3)));
    }
}

static int32_t nk_act_q80(const float *xb, float id, int8_t *qb) {
    const float32x4_t sv = vdupq_n_f32(id);
    int32x4_t sum = vdupq_n_s32(0);
    for (int i = 0; i < 32; i += 16) {
        int32x4_t c0 = nk_codes4(xb + i, sv), c1 = nk_codes4(xb + i + 4, sv), c2 = nk_codes4(xb + i + 8, sv),
                  c3 = nk_codes4(xb + i + 12, sv);
        vst1q_s8(qb + i, nk_pack16(c0, c1, c2, c3));
        sum = vaddq_s32(sum, vaddq_s32(vaddq_s32(c0, c1), vaddq_s32(c2, c3)));
    }
    return vaddvq_s32(sum);
}

#define KQA_NAME nk_act
#define KQA_AMAX nk_amax
#define KQA_Q8K nk_act_q8k
#define KQA_Q80 nk_act_q80
#include "quant/kq_act_frame.h"

void kq_act_neon(int kind, const float *x, int64_t cols, void *out) { nk_act(kind, x, cols, out); }
#else
typedef int no_kq_neon_on_this_arch;
#endif
