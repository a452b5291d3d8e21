/*
 * gelu.c - GeGLU's gelu(g) * u (GELU's tanh approximation), ours and
 * llama.cpp's.
 *
 * Ours: 0.5 g (1 + tanh(y)), y = sqrt(2/pi) g (1 + 0.044715 g^2), as PyTorch's
 * gelu(approximate="tanh") writes it, with tanh(y) = sign(y) (1 - e) / (1 + e),
 * e = exp(-2|y|) from fast_exp_nonpos (relative error ~2e-7; what 1 + tanh
 * carries is an absolute error of a few 1e-7, so gelu's relative error stays
 * there too, also where tanh(y) is near 0 or -1). Branch-free and call-free,
 * so the loop vectorizes (libm's tanhf per value made GeGLU a quarter of a
 * Gemma 2 prefill); on x86 an AVX-512 copy is picked by the CPU, and the file
 * is compiled without floating-point contraction, so both copies give the
 * same bits.
 * llama.cpp's (arithmetic "llama"; its CPU build defines GGML_GELU_FP16):
 * g rounded to f16, looked up in a table of the same formula's f16-rounded
 * values (its compiler fuses 1 + a g^2 into an fma; we compute the entry
 * instead of storing 64K of them), times u;
 * g <= -10 gives 0 and g >= 10 gives g * u, as its loop does. Thread-safe
 * (pure).
 */
#include "backend/cpu/cpu_backend.h"
#include "base/dtype.h"
#include "base/fastmath.h"

#include <math.h>

static inline __attribute__((always_inline)) void gelu_mul(float *g, const float *u, size_t n) {
    const float c = 0.79788456080286535587989211986876f, a = 0.044715f;
    for (size_t i = 0; i < n; i++) {
        float x = g[i];
        float y = c * x * (1.0f + a * x * x);
        float e = fast_exp_nonpos(-2.0f * fabsf(y));
        float t = (1.0f - e) / (1.0f + e);
        t = y < 0.0f ? -t : t;
        g[i] = 0.5f * x * (1.0f + t) * u[i];
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) static void gelu_mul_avx512(float *g, const float *u, size_t n) {
    gelu_mul(g, u, n);
}
#endif

/* ggml_gelu_f32 as its x86 build compiles it: 1 + a x^2 contracted into
 * one fma (measured: the plain form moves one gemma2 prompt by 8e-4) */
static inline float gelu_tanh_llama(float x) {
    const float c = 0.79788456080286535587989211986876f, a = 0.044715f;
    return 0.5f * x * (1.0f + tanhf(c * x * fmaf(a * x, x, 1.0f)));
}

void op_gelu_mul(float *g, const float *u, size_t n, int llama) {
    if (!llama) {
#if defined(__x86_64__) && defined(__GNUC__)
        if (__builtin_cpu_supports("avx512f")) {
            gelu_mul_avx512(g, u, n);
            return;
        }
#endif
        gelu_mul(g, u, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float x = g[i];
        if (x <= -10.0f)
            g[i] = 0.0f;
        else if (x >= 10.0f)
            g[i] = x * u[i];
        else
            g[i] = f16_round(gelu_tanh_llama(f16_round(x))) * u[i];
    }
}
