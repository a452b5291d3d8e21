/*
 * kq_kernels_neon_dot.c - the NEON matmuls for llama.cpp's block types with
 * the dot-product extension (vdotq_s32; compiled with
 * -march=armv8.2-a+dotprod, called only from the neon+dotprod table).
 * Same code as kq_kernels_neon.c otherwise (kq_kernels_neon_impl.h).
 */
#if defined(__aarch64__)
#define NEON_DOT 1
#define KQ_NEON_FN kq_matmul_neon_dot
#include "backend/cpu/kq_kernels_neon_impl.h"
#else
typedef int no_kq_neon_dot_on_this_arch;
#endif
