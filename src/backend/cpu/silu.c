/*
 * silu.c - SwiGLU's silu(g) * u, ours and llama.cpp's.
 *
 * op_silu_mul takes ours or, with llama set, llama.cpp's. Ours: g * sigmoid(g),
 * with e = exp(-|g|) in (0, 1]: sigmoid(g) is 1 / (1 + e) for g >= 0 and
 * e / (1 + e) below. Branch-free on fast_exp_nonpos (relative error ~2e-7),
 * so the loop vectorizes; NaN stays NaN. On x86 a copy for AVX-512 (16 values an instruction; the baseline
 * copy has SSE2's 4) is picked by the CPU: this file is compiled without
 * floating-point contraction, so both copies round every step alike and give
 * the same bits.
 *
 * llama.cpp's (arithmetic "llama"), as its x86 build computes it: its
 * vectorized silu, x / (1 + expf(-x)), takes e^x from its own polynomial (ggml_v_expf: a Cody-Waite reduction by ln 2 in
 * two parts, a degree-5 polynomial in fmas, scaled by 2^n), not from libm.
 * Its results differ from a correctly rounded exp in the last bits, and the
 * MLP's next matmul rounds its input to int8, so those bits move llama.cpp's
 * outputs (tests/unit/test_kquant_models.c). The same float steps one value
 * at a time here (fmaf is exact wherever it runs; the file is compiled with
 * -ffp-contract=off, so nothing else is fused): the same bits at every level.
 * Thread-safe (pure).
 */
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/llama_math.h"
#include "base/fastmath.h"

#include <math.h>

static inline __attribute__((always_inline)) void silu_mul(float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float g = a[i];
        float e = fast_exp_nonpos(-fabsf(g));
        a[i] = g * ((g >= 0.0f ? 1.0f : e) / (1.0f + e)) * b[i];
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) static void silu_mul_avx512(float *a, const float *b, size_t n) {
    silu_mul(a, b, n);
}
#endif

static void silu_mul_llama(float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = a[i];
        a[i] = x / (1.0f + llama_expf(0.0f - x)) * b[i];
    }
}

void op_silu_mul(float *a, const float *b, size_t n, int llama) {
    if (llama) {
        silu_mul_llama(a, b, n);
        return;
    }
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx512f")) {
        silu_mul_avx512(a, b, n);
        return;
    }
#endif
    silu_mul(a, b, n);
}

