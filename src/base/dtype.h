/*
 * dtype.h - element types of stored tensors and their conversions to f32.
 *
 * Weights stay in the type they are stored in (mmap, no copy); kernels read
 * them through these conversions.
 */
#ifndef XLLM_BASE_DTYPE_H
#define XLLM_BASE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum dtype_t {
    XLLM_DT_F32 = 0,
    XLLM_DT_F16,
    XLLM_DT_BF16,
    XLLM_DT_F64,
    XLLM_DT_I8,
    XLLM_DT_U8,
    XLLM_DT_I16,
    XLLM_DT_I32,
    XLLM_DT_I64,
    XLLM_DT_BOOL,
    /* block-quantized weights (src/quant/quant.h): a row is cols/group blocks */
    XLLM_DT_Q8,    /* [f16 d][int8 q x group]             value = q * d          (group 32 = GGUF Q8_0) */
    XLLM_DT_Q4,    /* [f16 d][group/2 bytes of nibbles]   value = (q - 8) * d    (group 32 = GGUF Q4_0) */
    XLLM_DT_Q4M,   /* [f16 d][f16 m][group/2 bytes]       value = q * d + m      (group 32 = GGUF Q4_1) */
    /* llama.cpp's block types, byte for byte as GGUF stores them (src/quant/kquant.h,
     * docs/FORMAT.md); the group is the type's block: 32, or 256 for the K-quants */
    XLLM_DT_Q5_0,
    XLLM_DT_Q5_1,
    XLLM_DT_IQ4_NL,
    XLLM_DT_Q2_K,
    XLLM_DT_Q3_K,
    XLLM_DT_Q4_K,
    XLLM_DT_Q5_K,
    XLLM_DT_Q6_K,
    XLLM_DT_IQ4_XS,
    XLLM_DT_COUNT
} dtype_t;

/* Bytes per element of a plain type; 0 for block-quantized types. */
size_t dtype_size(dtype_t t);
static inline int dtype_is_quant(dtype_t t) { return t >= XLLM_DT_Q8 && t <= XLLM_DT_IQ4_XS; }
/* One of llama.cpp's block types (kquant.h): read by their own kernels, on their own activations. */
static inline int dtype_is_kq(dtype_t t) { return t >= XLLM_DT_Q5_0 && t <= XLLM_DT_IQ4_XS; }
const char *dtype_name(dtype_t t);

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, u;
    if (exp == 0) {
        if (mant == 0) {
            u = sign;
        } else { /* subnormal: renormalize */
            exp = 127 - 15 + 1;
            while (!(mant & 0x400)) { mant <<= 1; exp--; }
            mant &= 0x3ff;
            u = sign | (exp << 23) | (mant << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (mant << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t f32_to_f16(float f);
uint16_t f32_to_bf16(float f);
/* f rounded to the nearest f16 value (ties to even), as a float. */
static inline float f16_round(float f) { return f16_to_f32(f32_to_f16(f)); }

/* Convert n elements of type t at src to f32 (t must be F32, F16 or BF16). */
void dtype_to_f32(dtype_t t, const void *src, float *dst, size_t n);

#endif
