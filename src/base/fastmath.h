/*
 * fastmath.h - branch-free elementary functions that vectorize, for the hot
 * loops (softmax weights in attention and sampling).
 */
#ifndef XLLM_BASE_FASTMATH_H
#define XLLM_BASE_FASTMATH_H

#include <stdint.h>

/* exp(x) for x <= 0, and exactly 0 for x < -87 (so -inf, and NaN, give 0):
 * x = n*ln2 + r with |r| <= ln2/2, a degree-7 Taylor polynomial for exp(r),
 * and 2^n built in the exponent bits. n is read from the bits of the
 * round-to-nearest sum x*log2e + 1.5*2^23, and out-of-range lanes are masked
 * with integer ops, so there is no branch, call or float-to-int conversion
 * and the loops using it vectorize. Relative error about 2e-7. */
static inline float fast_exp_nonpos(float x) {
    const float log2e = 1.44269504088896341f;
    const float ln2_hi = 0.693145751953125f, ln2_lo = 1.428606765330187e-06f;
    const float magic = 12582912.0f; /* 1.5 * 2^23, bits 0x4B400000 */
    float tt = x * log2e + magic;
    float n = tt - magic;
    float r = (x - n * ln2_hi) - n * ln2_lo;
    float q = 1.0f / 5040.0f;
    q = q * r + 1.0f / 720.0f;
    q = q * r + 1.0f / 120.0f;
    q = q * r + 1.0f / 24.0f;
    q = q * r + 1.0f / 6.0f;
    q = q * r + 0.5f;
    q = q * r + 1.0f;
    q = q * r + 1.0f;
    union { float f; uint32_t u; } tb = {tt}, sc, y;
    sc.u = (tb.u - 0x4B400000u + 127u) << 23; /* 2^n, n in [-126, 0] */
    y.f = q * sc.f;
    y.u &= (uint32_t)-(int32_t)(x >= -87.0f);
    return y.f;
}

#endif
