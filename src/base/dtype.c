/* dtype.c - dtype table and bulk conversion to f32 (see dtype.h). */
#include "base/dtype.h"

#include <assert.h>

static const struct { const char *name; size_t size; } k_types[XLLM_DT_COUNT] = {
    [XLLM_DT_F32] = {"F32", 4}, [XLLM_DT_F16] = {"F16", 2},  [XLLM_DT_BF16] = {"BF16", 2},
    [XLLM_DT_F64] = {"F64", 8}, [XLLM_DT_I8] = {"I8", 1},    [XLLM_DT_U8] = {"U8", 1},
    [XLLM_DT_I16] = {"I16", 2}, [XLLM_DT_I32] = {"I32", 4},  [XLLM_DT_I64] = {"I64", 8},
    [XLLM_DT_BOOL] = {"BOOL", 1}, [XLLM_DT_Q8] = {"Q8", 0}, [XLLM_DT_Q4] = {"Q4", 0},
    [XLLM_DT_Q4M] = {"Q4M", 0},
};

size_t xllm_dtype_size(xllm_dtype t) { return (unsigned)t < XLLM_DT_COUNT ? k_types[t].size : 0; }

const char *xllm_dtype_name(xllm_dtype t) {
    return (unsigned)t < XLLM_DT_COUNT ? k_types[t].name : "?";
}

void xllm_to_f32(xllm_dtype t, const void *src, float *dst, size_t n) {
    switch (t) {
    case XLLM_DT_F32: memcpy(dst, src, n * 4); break;
    /* memcpy per element: stored tensors need not be 2-byte aligned */
    case XLLM_DT_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, (const char *)src + 2 * i, 2);
            dst[i] = xllm_f16_to_f32(h);
        }
        break;
    case XLLM_DT_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, (const char *)src + 2 * i, 2);
            dst[i] = xllm_bf16_to_f32(h);
        }
        break;
    default: assert(!"xllm_to_f32: not a float type");
    }
}
