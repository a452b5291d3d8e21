/*
 * kernels_neon.c - the NEON level for any aarch64 CPU (armv8-a baseline:
 * int8 products with vmull_s8). The dotprod variant is kernels_neon_dot.c;
 * both share kernels_neon_impl.h and give identical results.
 */
#if defined(__aarch64__)
#define NEON_DOT 0
#include "backend/cpu/kernels_neon_impl.h"

const cpu_kernels cpu_kernels_neon = {
    .level = CPU_NEON,
    .name = "neon",
    .act_bytes = act_bytes,
    .act_prepare = act_prepare,
    .quant_act = quant_act,
    .scratch_bytes = scratch_bytes,
    .matmul_q = matmul_q,
    .matmul_f = matmul_f,
    .attn = &cpu_attn_neon,
};
#else
typedef int xllm_no_neon_on_this_arch;
#endif
