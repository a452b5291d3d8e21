/*
 * quant.h - block-quantized weight formats and their reference kernels.
 *
 * A quantized row of `cols` weights is cols/group blocks laid out one after
 * another; each block holds its scale (and minimum) as f16 followed by the
 * packed integers. Group 32 blocks are bit-identical to GGUF's Q8_0 / Q4_0 /
 * Q4_1, so those GGUF tensors are used in place. 4-bit values are packed per
 * 32-element sub-block: byte j holds element j in its low nibble and element
 * j + 16 in its high nibble (the order SIMD unpacking wants).
 *
 * Matmuls against quantized weights quantize the activations to int8 in
 * blocks of 32 (one f32 scale and the integer sum per block), then use
 * integer dot products per block: this is the arithmetic the SIMD kernels
 * (VNNI, NEON dot) implement, and these scalar versions are their reference.
 */
#ifndef XLLM_QUANT_H
#define XLLM_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include "base/dtype.h"

#define QK 32 /* activation block, and the smallest weight group */

/* The functions below also describe llama.cpp's block types (kquant.h:
 * dtype_is_kq, group = the type's block of 32 or 256) for sizes, format
 * checks and dequantization; quantizing and quant_dot are for Q8/Q4/Q4M. */

/* Bytes of one block of `group` weights. */
size_t quant_block_bytes(dtype_t t, int group);
/* Bytes of one row of `cols` weights (cols % group == 0), or of a plain-typed row. */
size_t quant_row_bytes(dtype_t t, int group, int64_t cols);
/* Is (t, group) a valid quantized format for rows of `cols`? */
int quant_format_ok(dtype_t t, int group, int64_t cols);

/* Quantize one row. For 4-bit types each group's range is clipped by the
 * factor in [0.6, 1] and its scale (and minimum) refitted by least squares
 * so as to minimise the squared error weighted by importance: per column,
 * e.g. mean activation^2 from calibration; NULL weighs all columns alike. */
void quant_quantize_row(dtype_t t, int group, const float *x, int64_t cols, const float *importance, void *out);
/* The pieces of quant_quantize_row, for quantizers that choose levels
 * themselves (GPTQ): a group's stored scale d and minimum m (0 unless Q4M)
 * after the same search; the level of one value; its dequantized value; and
 * packing levels (Q4: -8..7, Q4M: 0..15, Q8: -127..127) with per-group d, m. */
void quant_group_params(dtype_t t, int group, const float *x, const float *importance, float *d, float *m);
int quant_level(dtype_t t, float x, float d, float m);
float quant_value(dtype_t t, int q, float d, float m);
void quant_pack_row(dtype_t t, int group, const int8_t *q, const float *d, const float *m, int64_t cols, void *out);
void quant_dequantize_row(dtype_t t, int group, const void *row, int64_t cols, float *out);

/* Activations quantized to int8 in blocks of QK: q[cols], d[cols/QK], s[cols/QK] = sum of q. */
typedef struct qact {
    int8_t *q;
    float *d;
    int32_t *s;
} qact;
/* llama: as llama.cpp quantizes activations for its Q4_0 / Q4_1 / Q8_0 dot
 * products (arithmetic "llama"): the codes with 127 / amax, the block scale
 * rounded to f16 (ours: 1 / d and d = amax / 127 in f32). ds[b]: the block's
 * d x s as Q4M's min term takes it (quant_act_dsum). */
void quant_activations(const float *x, int64_t cols, int8_t *q, float *d, int32_t *s, float *ds, int llama);

/* A block's scale d and code multiplier id from its largest magnitude, as
 * quant_activations takes them (every kernel level calls this). */
static inline void quant_act_scale(float amax, int llama, float *d, float *id) {
    float db = amax / 127.0f;
    if (llama) {
        *id = amax != 0 ? 127.0f / amax : 0.0f;
        *d = f16_round(db);
    } else {
        *id = db != 0 ? 1.0f / db : 0.0f;
        *d = db;
    }
}

/* A block's d x s for Q4M's min term (mw x ds): ours d x s in f32; llama.cpp's
 * Q8_1 keeps f16(amax / 127 x s), the unrounded scale times the sum rounded
 * to f16. amax, d and s as quant_act_scale and the codes give them. */
static inline float quant_act_dsum(float amax, float d, int32_t s, int llama) {
    return llama ? f16_round(amax / 127.0f * (float)s) : d * (float)s;
}

/* Dot product of one quantized weight row with one quantized activation row. */
float quant_dot(dtype_t t, int group, const void *row, const int8_t *q, const float *d, const int32_t *s,
                const float *ds, int64_t cols);

#endif
