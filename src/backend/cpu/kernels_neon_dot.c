/*
 * kernels_neon_dot.c - the NEON level with the dot-product extension
 * (vdotq_s32; compiled with -march=armv8.2-a+dotprod, called only when
 * getauxval reports HWCAP_ASIMDDP). Same code as kernels_neon.c otherwise.
 */
#if defined(__aarch64__)
#define NEON_DOT 1
#define NEON_TABLE cpu_kernels_neon_dot
#define NEON_NAME "neon+dotprod"
#include "backend/cpu/kernels_neon_impl.h"
#else
typedef int no_neon_dot_on_this_arch;
#endif
