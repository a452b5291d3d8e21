/*
 * kq_kernels_avx512.c - AVX-512 (BW, VL, VNNI) matmuls for llama.cpp's block
 * types (quant/kquant.h), compiled with the avx512 level's target flags:
 * Q4_K, Q5_K and Q6_K in the 16-row "KR16" layout of kq_pack_avx512.c
 * (repacked at load), IQ4_NL, IQ4_XS, Q5_0, Q5_1 in kq_pack32_avx512.c's
 * "P32" and Q2_K, Q3_K in kq_pack23_avx512.c's "Q23" (cols a multiple of
 * 256), the other types through the 256-bit code of kq_kernels_x86.h
 * (AVX-512VL encodings of the same scheme). (Q5_K had its own 512-bit
 * per-row decoder here until it joined KR16: 2x its GEMV's arithmetic rate,
 * 2.5x its GEMM's.)
 */
#if defined(__x86_64__)
#include "backend/cpu/kq_kernels.h"
#include "backend/cpu/simd_avx512.h"
#include "backend/cpu/kq_kernels_x86.h"

void kq_matmul_avx512(const matrix *W, const void *act, size_t astride, int T, const float *bias, float *y,
                      size_t ldy, int64_t r0, int64_t r1, void *scratch) {
    if (kq_r16_type(W)) kq_r16_matmul(W, act, astride, T, bias, y, ldy, r0, r1, scratch); /* Q4_K, Q5_K, Q6_K */
    else if (kq_p32_type(W)) kq_p32_matmul(W, act, astride, T, bias, y, ldy, r0, r1, scratch); /* IQ4_NL, IQ4_XS, Q5_x */
    else if (kq_q23_type(W)) kq_q23_matmul(W, act, astride, T, bias, y, ldy, r0, r1, scratch); /* Q2_K, Q3_K */
    else kq_matmul_x86_256(W, act, astride, T, bias, y, ldy, r0, r1);
}

void kq_act_avx512(int kind, const float *x, int64_t cols, void *out) { kq_act_x86(kind, x, cols, out); }

#else
typedef int no_avx512_on_this_arch;
#endif
