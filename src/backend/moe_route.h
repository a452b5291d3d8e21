/*
 * moe_route.h - DeepSeek's expert routing of one token (moe_route.c), for the
 * backends' moe operations. Thread-safe (pure function of its arguments).
 */
#ifndef XLLM_MOE_ROUTE_H
#define XLLM_MOE_ROUTE_H
#include "backend/backend.h"

/* rl: the token's n_experts router probabilities (sigmoid or softmax already
 * applied); sel_bias: d->sel_bias as host memory (NULL: none). Chooses
 * d->n_used experts by rl + sel_bias within the topk_group best groups (ties
 * keep the lower id / group) into ids, their weights (rl of the chosen,
 * normalized when norm_topk, times w_scale) into w. llama: llama.cpp's
 * normalization (sum in double, clamped at 6.1e-5). */
void moe_route_deepseek(const be_moe *d, const float *sel_bias, const float *rl, int32_t *ids, float *w, int llama);

#endif
