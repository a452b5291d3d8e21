/*
 * kvq.h - the storage formats of the KV cache: f32, f16, or q8 (int8 with an
 * f16 scale per group of values), chosen per KV pool (xllm_model_options.kv_dtype).
 *
 * The unit is one head's row of head_dim values (one K or V vector of one
 * KV head at one position). A row is stored as
 *   f32: head_dim floats;   f16: head_dim IEEE halves;
 *   q8:  int8 q[head_dim], then f16 d[head_dim / G]   value i = q[i] * d[i / G]
 * with G = kvq_group(head_dim): the largest of 32, 16, 8, 4 that divides
 * head_dim and leaves at least two scales per row (q8 needs head_dim % 4 ==
 * 0 and head_dim >= 8). So a q8 row takes 34/128 = 0.266 of f32's bytes at
 * head_dim 64, 128 or more; small heads pay more for their scales (head_dim 32: 0.281, 8: 0.375).
 * Why two scales per row at least: K rows carry outlier channels, and one
 * scale per row lets the largest set the step of all the others (measured on
 * stories260k, head_dim 8: KL vs f32 KV 0.0020 with one scale per row, 0.0006
 * with two; docs/QUALITY.md).
 *
 * The idea that keeps the attention kernels exact: every stored value
 * converts to an f32 exactly (a half is an f32; int8 times an f16 scale needs
 * 8 + 11 significant bits), so a kernel that dequantizes as it loads computes
 * exactly what the f32 kernel computes over the dequantized rows, bit for bit
 * (tested at every level). Quantization happens once, when a position's K/V
 * is written: q = round(x / d) with d = max|x| / 127 rounded to f16 (clamped to
 * the largest half); a group holding inf or NaN stores q = 0, d = NaN, so the
 * NaN reaches the output as it would in f32. f16 rows round to nearest even
 * (values beyond 65504 become inf).
 *
 * All functions are thread-safe (pure).
 */
#ifndef XLLM_QUANT_KVQ_H
#define XLLM_QUANT_KVQ_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "base/dtype.h"

typedef enum kv_dtype { KV_F32 = 0, KV_F16 = 1, KV_Q8 = 2 } kv_dtype;
#define KV_DTYPES 3

/* log2 of the q8 values per scale for rows of hd values (hd % 4 == 0, hd >=
 * 8): of 32, 16, 8, 4 the largest that divides hd and is at most hd / 2. */
static inline int kvq_group_shift(int hd) {
    int s = 5;
    while (s > 2 && ((1 << s) > hd / 2 || hd % (1 << s))) s--;
    return s;
}
/* q8 values per scale for rows of hd values (0: q8 cannot store such rows:
 * hd not a multiple of 4, or under 8). Rows of 8k + 4 values (12, 20, ...:
 * DeepSeek-V2's latent halves, 20 in tests/data/archs/deepseek2) take groups
 * of 4; every level's loops read them (wide loads only where d + width <= hd,
 * the group of value d at d >> shift), tested in test_kernels. */
static inline int kvq_group(int hd) { return hd >= 8 && hd % 4 == 0 ? 1 << kvq_group_shift(hd) : 0; }
/* Can rows of hd values be stored as dt? */
static inline int kvq_supported(kv_dtype dt, int hd) { return hd > 0 && (dt != KV_Q8 || kvq_group(hd) > 0); }
/* Bytes of one row of hd values. */
static inline size_t kvq_row_bytes(kv_dtype dt, int hd) {
    return dt == KV_F32 ? (size_t)hd * 4 : dt == KV_F16 ? (size_t)hd * 2 : (size_t)hd + 2 * (size_t)(hd / kvq_group(hd));
}
/* Value i of a stored row (the reference every kernel's loads reproduce). */
static inline float kvq_get(kv_dtype dt, const void *row, int hd, int i) {
    const unsigned char *r = row;
    uint16_t h;
    if (dt == KV_F32) {
        float f;
        memcpy(&f, r + (size_t)i * 4, 4);
        return f;
    }
    if (dt == KV_F16) {
        memcpy(&h, r + (size_t)i * 2, 2);
        return f16_to_f32(h);
    }
    memcpy(&h, r + hd + 2 * (i >> kvq_group_shift(hd)), 2);
    return (float)(int8_t)r[i] * f16_to_f32(h);
}

/* "f32", "f16", "q8" */
const char *kvq_name(kv_dtype dt);
/* Parse a kv_dtype option: NULL, "" and "f32" -> KV_F32, "f16", "q8"; "auto"
 * -> *is_auto = 1 (dt untouched). Returns 0, or -1 for anything else. */
int kvq_parse(const char *s, kv_dtype *dt, int *is_auto);
/* Store / load one row of hd values (kvq_supported(dt, hd)). */
void kvq_store_row(kv_dtype dt, const float *x, int hd, void *dst);
void kvq_load_row(kv_dtype dt, const void *src, int hd, float *out);

#endif
