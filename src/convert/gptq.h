/*
 * gptq.h - error-compensating quantization of a weight matrix (GPTQ-style).
 *
 * Columns are quantized left to right; the rounding error of each column is
 * pushed onto the columns not yet quantized, weighted through the inverse of
 * the input's second-moment matrix H = E[x x^T] from calibration, so that the
 * layer's OUTPUT error on calibration-like inputs is minimised rather than the
 * weights' own error. Each group's scale is chosen (clip search + least
 * squares, weighted by diag(H)) when its first column is reached.
 */
#ifndef XLLM_CONVERT_GPTQ_H
#define XLLM_CONVERT_GPTQ_H

#include <stdint.h>
#include "base/dtype.h"
#include "xllm.h"

/* W: rows x cols f32 (overwritten), H: cols x cols (symmetric), out: the
 * quantized rows in the block format of (t, group). Returns XLLM_ERR_FORMAT
 * when H cannot be factorised even after damping (caller falls back). */
xllm_status gptq_quantize(dtype_t t, int group, float *W, int64_t rows, int64_t cols, const double *H, void *out,
                          xllm_error *err);

#endif
