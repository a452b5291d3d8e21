/*
 * kernels_neon_dot.c - the NEON level with the dot-product extension
 * (vdotq_s32; compiled with -march=armv8.2-a+dotprod, called only when
 * getauxval reports HWCAP_ASIMDDP). Same code as kernels_neon.c otherwise.
 */
#if defined(__aarch64__)
#define NEON_DOT 1
#include "backend/cpu/kernels_neon_impl.h"

const cpu_kernels cpu_kernels_neon_dot = {
    .level = CPU_NEON,
    .name = "neon+dotprod",
    .act_bytes = act_bytes,
    .act_prepare = act_prepare,
    .quant_act = quant_act,
    .scratch_bytes = scratch_bytes,
    .matmul_q = matmul_q,
    .matmul_f = matmul_f,
    .attn = &cpu_attn_neon,
};
#else
typedef int xllm_no_neon_dot_on_this_arch;
#endif
