/* dtype.c - dtype table and bulk conversion to f32 (see dtype.h). */
#include "base/dtype.h"

#include <assert.h>

static const struct { const char *name; size_t size; } k_types[XLLM_DT_COUNT] = {
    [XLLM_DT_F32] = {"F32", 4}, [XLLM_DT_F16] = {"F16", 2},  [XLLM_DT_BF16] = {"BF16", 2},
    [XLLM_DT_F64] = {"F64", 8}, [XLLM_DT_I8] = {"I8", 1},    [XLLM_DT_U8] = {"U8", 1},
    [XLLM_DT_I16] = {"I16", 2}, [XLLM_DT_I32] = {"I32", 4},  [XLLM_DT_I64] = {"I64", 8},
    [XLLM_DT_BOOL] = {"BOOL", 1}, [XLLM_DT_Q8] = {"Q8", 0}, [XLLM_DT_Q4] = {"Q4", 0},
    [XLLM_DT_Q4M] = {"Q4M", 0}, [XLLM_DT_Q5_0] = {"Q5_0", 0}, [XLLM_DT_Q5_1] = {"Q5_1", 0},
    [XLLM_DT_IQ4_NL] = {"IQ4_NL", 0}, [XLLM_DT_Q2_K] = {"Q2_K", 0}, [XLLM_DT_Q3_K] = {"Q3_K", 0},
    [XLLM_DT_Q4_K] = {"Q4_K", 0}, [XLLM_DT_Q5_K] = {"Q5_K", 0}, [XLLM_DT_Q6_K] = {"Q6_K", 0},
    [XLLM_DT_IQ4_XS] = {"IQ4_XS", 0},
};

size_t dtype_size(dtype_t t) { return (unsigned)t < XLLM_DT_COUNT ? k_types[t].size : 0; }

const char *dtype_name(dtype_t t) {
    return (unsigned)t < XLLM_DT_COUNT ? k_types[t].name : "?";
}

void dtype_to_f32(dtype_t t, const void *src, float *dst, size_t n) {
    switch (t) {
    case XLLM_DT_F32: memcpy(dst, src, n * 4); break;
    /* memcpy per element: stored tensors need not be 2-byte aligned */
    case XLLM_DT_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, (const char *)src + 2 * i, 2);
            dst[i] = f16_to_f32(h);
        }
        break;
    case XLLM_DT_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, (const char *)src + 2 * i, 2);
            dst[i] = bf16_to_f32(h);
        }
        break;
    default: assert(!"dtype_to_f32: not a float type");
    }
}

/* round to nearest even, overflow to inf, subnormals kept */
uint16_t f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t mant = x & 0x7fffff;
    if (((x >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 : 0));
    if (exp >= 31) return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) {
        if (exp < -10) return (uint16_t)sign;
        mant |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = mant >> shift, rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)exp << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++; /* may carry into the exponent: correct */
    return (uint16_t)half;
}

uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
