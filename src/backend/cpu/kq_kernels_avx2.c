/*
 * kq_kernels_avx2.c - AVX2 matmuls for llama.cpp's block types (Q2_K .. Q6_K,
 * IQ4_XS on Q8K activations; Q5_0, Q5_1, IQ4_NL on Q80; quant/kquant.h): the
 * 256-bit code of kq_kernels_x86.h (which describes the scheme), compiled
 * with the avx2 level's target flags (AVX2, FMA, F16C).
 */
#if defined(__x86_64__)
#include "backend/cpu/kq_kernels.h"
#include "backend/cpu/kq_kernels_x86.h"

void kq_matmul_avx2(const matrix *W, const void *act, size_t astride, int T, const float *bias, float *y, size_t ldy,
                    int64_t r0, int64_t r1, void *scratch) {
    if (kq_p32_avx2_type(W)) { /* IQ4_NL, IQ4_XS, Q5_0, Q5_1: P32 tiles (kq_pack32_avx2.c) */
        kq_p32_avx2_matmul(W, act, astride, T, bias, y, ldy, r0, r1, scratch);
        return;
    }
    if (kq_q23_avx2_type(W)) { /* Q2_K, Q3_K: Q23 tiles (kq_pack23_avx2.c) */
        kq_q23_avx2_matmul(W, act, astride, T, bias, y, ldy, r0, r1, scratch);
        return;
    }
    kq_matmul_x86_256(W, act, astride, T, bias, y, ldy, r0, r1);
}

void kq_act_avx2(int kind, const float *x, int64_t cols, void *out) { kq_act_x86(kind, x, cols, out); }

#else
typedef int no_avx2_on_this_arch;
#endif
