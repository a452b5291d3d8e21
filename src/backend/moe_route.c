/*
 * moe_route.c - DeepSeek's expert routing of one token (be_moe's sigmoid /
 * bias / group / scale fields), shared by the backends that route on the
 * host (cpu_backend.c; the Vulkan backend after reading the router's logits
 * back), so both choose the same experts with the same weights.
 */
#include "backend/moe_route.h"

#include <math.h>
#include <string.h>

/* DeepSeek's routing of one token (be_moe): p = rl (already sigmoid or
 * softmax), choice by p + sel_bias within the best groups, weights p of the
 * chosen (in choice order), normalized (the sum in double as ggml's
 * sum_rows, clamped at ggml's 6.1e-5) and scaled. */
#define MOE_MAX_GROUPS 1024
void moe_route_deepseek(const be_moe *d, const float *sel_bias, const float *rl, int32_t *ids, float *w, int llama) {
    int E = d->n_experts, K = d->n_used, G = d->n_group > 1 ? d->n_group : 1, per = E / G;
    unsigned char allowed[MOE_MAX_GROUPS];
#define SEL(e) (sel_bias ? rl[e] + sel_bias[e] : rl[e])
    memset(allowed, 1, (size_t)G);
    if (G > 1 && G <= MOE_MAX_GROUPS && d->topk_group < G) {
        float score[MOE_MAX_GROUPS];
        for (int g = 0; g < G; g++) { /* the group's best (group_max) or two best summed */
            float b1 = -INFINITY, b2 = -INFINITY;
            for (int e = g * per; e < (g + 1) * per; e++) {
                float v = SEL(e);
                if (v > b1) b2 = b1, b1 = v;
                else if (v > b2) b2 = v;
            }
            score[g] = d->group_max ? b1 : b1 + b2;
            allowed[g] = 0;
        }
        for (int k = 0; k < d->topk_group; k++) { /* ties keep the lower group */
            int best = -1;
            for (int g = 0; g < G; g++)
                if (!allowed[g] && (best < 0 || score[g] > score[best])) best = g;
            allowed[best] = 1;
        }
    }
    double dsum = 0.0;
    float fsum = 0.0f;
    for (int k = 0; k < K; k++) { /* top-k by selection score among the allowed groups; ties keep the lower id */
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = !allowed[e / per];
            for (int q = 0; q < k && !taken; q++) taken = ids[q] == e;
            if (!taken && (best < 0 || SEL(e) > SEL(best))) best = e;
        }
        ids[k] = best;
        w[k] = rl[best];
        dsum += (double)w[k];
        fsum += w[k];
    }
#undef SEL
    if (d->norm_topk) {
        float s = llama ? (float)dsum : fsum;
        if (llama && s < 6.103515625e-5f) s = 6.103515625e-5f;
        for (int k = 0; k < K; k++) w[k] /= s;
    }
    if (d->w_scale > 0 && d->w_scale != 1.0f)
        for (int k = 0; k < K; k++) w[k] *= d->w_scale;
}
