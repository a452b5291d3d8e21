/*
 * kernels_neon.c - the NEON level for any aarch64 CPU (armv8-a baseline:
 * int8 products with vmull_s8). The dotprod variant is kernels_neon_dot.c;
 * both share kernels_neon_impl.h and give identical results.
 */
#if defined(__aarch64__)
#define NEON_DOT 0
#define NEON_TABLE cpu_kernels_neon
#define NEON_NAME "neon"
#include "backend/cpu/kernels_neon_impl.h"
#else
typedef int no_neon_on_this_arch;
#endif
