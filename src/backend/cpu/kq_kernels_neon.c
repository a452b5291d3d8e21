/*
 * kq_kernels_neon.c - the NEON matmuls for llama.cpp's block types on any
 * aarch64 CPU (vmull_s8 products); the dotprod variant is
 * kq_kernels_neon_dot.c, both from kq_kernels_neon_impl.h, identical results.
 */
#if defined(__aarch64__)
#define NEON_DOT 0
#define KQ_NEON_FN kq_matmul_neon
#include "backend/cpu/kq_kernels_neon_impl.h"
#else
typedef int no_kq_neon_on_this_arch;
#endif
