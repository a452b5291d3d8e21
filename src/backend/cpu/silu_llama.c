/*
 * silu_llama.c - SwiGLU's silu(g) * u as llama.cpp's x86 build computes it
 * (arithmetic "llama"): its vectorized silu, x / (1 + expf(-x)), takes e^x
 * from its own polynomial (ggml_v_expf: a Cody-Waite reduction by ln 2 in
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

#include <math.h>

void op_silu_mul_llama(float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = a[i];
        a[i] = x / (1.0f + llama_expf(0.0f - x)) * b[i];
    }
}
