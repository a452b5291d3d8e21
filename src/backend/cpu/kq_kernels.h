/*
 * kq_kernels.h - the SIMD matmuls for llama.cpp's block types (quant/kquant.h)
 * at each level that has them: the kernel table's matmul_kq (kernels.h).
 * Types a level has no kernel for go to the reference, kq_matmul_ref.
 * Thread-safe: they write only the rows of y they are given.
 */
#ifndef XLLM_BACKEND_CPU_KQ_KERNELS_H
#define XLLM_BACKEND_CPU_KQ_KERNELS_H

#include "backend/cpu/kernels.h"

#if defined(__x86_64__)
void kq_matmul_avx512(const matrix *W, const void *act, size_t act_stride, int T, const float *bias, float *y,
                      size_t ldy, int64_t r0, int64_t r1, void *scratch);
void kq_matmul_avx2(const matrix *W, const void *act, size_t act_stride, int T, const float *bias, float *y,
                    size_t ldy, int64_t r0, int64_t r1, void *scratch);
#endif
#if defined(__aarch64__)
void kq_matmul_neon(const matrix *W, const void *act, size_t act_stride, int T, const float *bias, float *y,
                    size_t ldy, int64_t r0, int64_t r1, void *scratch);
void kq_matmul_neon_dot(const matrix *W, const void *act, size_t act_stride, int T, const float *bias, float *y,
                        size_t ldy, int64_t r0, int64_t r1, void *scratch);
#endif

#endif
