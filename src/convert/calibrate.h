/*
 * calibrate.h - activation statistics for activation-aware quantization.
 *
 * The f32 model runs over sample text while an observer accumulates, for the
 * input of every linear layer, the mean square of each input channel
 * (E[x_c^2]). That is the weight of channel c in the expected squared output
 * error of a quantized matmul, which the converter uses twice: to choose
 * per-channel scales before int4 quantization (AWQ-like) and to choose each
 * group's clipping range.
 */
#ifndef XLLM_CONVERT_CALIBRATE_H
#define XLLM_CONVERT_CALIBRATE_H

#include "model/model.h"
#include "xllm.h"

typedef struct calib_stats {
    int n_layers, n_experts;
    int cols[OBS_COUNT];       /* input width per observe point (dense) */
    int expert_cols;           /* moe_intermediate (down input of an expert) */
    int shared_cols;           /* shared_expert_intermediate */
    double **sum_sq;           /* [layer * OBS_COUNT + point][cols] */
    int64_t *count;            /* [layer * OBS_COUNT + point] rows seen */
    double **cov;              /* [layer * OBS_COUNT + point][cols * cols] sum of x x^T (upper triangle), or NULL
                                  when over the memory budget: then GPTQ is skipped for that input */
    double **exp_sum_sq;       /* [layer * (n_experts + 1) + e][cols]; e == n_experts: shared expert */
    int64_t *exp_count;
    int tokens;
} calib_stats;

/* Run the model at src over the text file (at most max_tokens tokens). */
xllm_status calib_collect(const char *src, const char *text_file, int max_tokens, int n_threads,
                          const xllm_model_options *mo, xllm_progress_fn progress, void *progress_user, calib_stats *out, xllm_error *err);
/* E[x x^T] (cols x cols, full symmetric, caller-owned out); 0 = not collected. */
int calib_hessian(const calib_stats *s, int layer, observe_point p, double *out, int cols);
/* Mean square per channel (cols floats, caller-owned out); 0 = no data. */
int calib_importance(const calib_stats *s, int layer, observe_point p, int expert, float *out, int cols);
void calib_free(calib_stats *s);

#endif
