/*
 * llama_math.h - llama.cpp's own exp (ggml_v_expf, its AVX-512 form, one
 * lane at a time) for the ops that follow its arithmetic (arithmetic
 * "llama": silu.c, attention_f16.c). Not libm's: a Cody-Waite
 * reduction by ln 2 in two parts, a degree-5 polynomial in fmas, scaled by
 * 2^n; it differs from a correctly rounded exp in the last bits, and those
 * bits move llama.cpp's outputs. fmaf is exact wherever it runs; the steps
 * between are single roundings as written (no contraction: an explicit fmaf
 * is the only fused operation). Thread-safe (pure).
 */
#ifndef XLLM_BACKEND_CPU_LLAMA_MATH_H
#define XLLM_BACKEND_CPU_LLAMA_MATH_H

#include <math.h>

static inline float llama_expf(float x) {
    const float r = 0x1.8p23f;
    float z = fmaf(x, 0x1.715476p+0f, r);
    float n = z - r;
    float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    if (fabsf(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
    float u = b * b;
    float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                   fmaf(0x1.ffffecp-1f, b, 1.0f));
    return ldexpf(j, (int)n); /* _mm512_scalef_ps(j, n), n a whole number here */
}

#endif
