/*
 * profile.h - per-operator kernel profiling (the brief's
 * --enable-kernel-profiling): wall time, calls, floating-point operations and
 * bytes moved per operator class, summed over the whole process.
 *
 * Off by default and then one predictable branch per operator call; turned on
 * by XLLM_PROFILE=1 at model load or xllm_profile_enable(). The forward pass
 * wraps each operator in PROF(op, flops, bytes, statement).
 */
#ifndef XLLM_BASE_PROFILE_H
#define XLLM_BASE_PROFILE_H

#include <stdint.h>

typedef enum prof_op {
    PROF_EMBED = 0,
    PROF_RMSNORM,
    PROF_RMSNORM_ACT,        /* fused: RMSNorm + the activations' quantization for the next matmuls */
    PROF_MATMUL_QKV,
    PROF_ROPE_KV,
    PROF_QKV_ROPE_KV,        /* fused: q/k/v matmul + q/k norm + RoPE + K/V cache write */
    PROF_ATTENTION,
    PROF_MATMUL_O,
    PROF_MATMUL_O_RESIDUAL,  /* fused: o-proj added into the residual stream */
    PROF_MATMUL_GATE_UP,
    PROF_SILU_MUL,
    PROF_GATE_UP_SILU,       /* fused: gate/up matmul + silu(gate) * up */
    PROF_MATMUL_DOWN,
    PROF_MATMUL_DOWN_RESIDUAL, /* fused: down-proj added into the residual stream */
    PROF_MOE_ROUTER,
    PROF_RESIDUAL,
    PROF_LM_HEAD,
    PROF_SAMPLE,
    PROF_COUNT
} prof_op;

extern int prof_enabled;
uint64_t prof_now_ns(void);
void prof_add(prof_op op, uint64_t t0_ns, double flops, double bytes);
const char *prof_op_name(prof_op op);

#define PROF(op, flops, bytes, stmt)                                      \
    do {                                                                  \
        uint64_t prof_t0_ = prof_enabled ? prof_now_ns() : 0;             \
        stmt;                                                             \
        if (prof_enabled) prof_add((op), prof_t0_, (flops), (bytes));     \
    } while (0)

#endif
