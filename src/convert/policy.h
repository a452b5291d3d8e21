/*
 * policy.h - the precision policy: which stored type each class of tensor
 * gets when a model is converted.
 *
 * Tensors fall into classes by their HF name (embed, attn, mlp, lm_head,
 * norm, router); a policy maps each class to a type. Defaults follow the
 * brief's mixed precision: norms (and all 1-D tensors) and MoE routers f32,
 * embeddings and lm_head int8 when matmuls are quantized, matmuls in the
 * requested type. A type that cannot hold a given matrix (rows not divisible
 * by the group) falls back to the next wider one, and the file records what
 * each tensor actually got.
 */
#ifndef XLLM_CONVERT_POLICY_H
#define XLLM_CONVERT_POLICY_H

#include <stdint.h>
#include "base/dtype.h"
#include "xllm.h"

typedef enum tensor_class { TC_EMBED = 0, TC_ATTN, TC_MLP, TC_LM_HEAD, TC_NORM, TC_ROUTER, TC_OTHER, TC_COUNT } tensor_class;

typedef struct qtype {
    dtype_t dtype;
    int group;        /* quantized types only */
} qtype;

typedef struct policy {
    qtype cls[TC_COUNT];
    /* a K-quant mix by name (--dtype q3_k_m, q4_k_m, q5_k_m: mix = 3, 4, 5):
     * the attn and mlp classes' type, except (q4_k_m, q5_k_m) v_proj and
     * down_proj in the layers llama.cpp gives more bits (the first and last
     * eighth, every third between), which get `more` (Q6_K), or (q3_k_m)
     * v_proj in layers 0-1 and down_proj in the first sixteenth `more`
     * (Q5_K), the other v_proj, down_proj and o_proj Q4_K; lm_head Q6_K.
     * n_layers: the model's (set by the caller). */
    int mix;
    qtype more;
    int n_layers;
} policy;

const char *tensor_class_name(tensor_class c);
tensor_class tensor_class_of(const char *name, int ndim);
/* Parse a type name ("f32", "f16", "bf16", "q8", "q4", "q4m", or llama.cpp's
 * "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl") with the q4 group. */
xllm_status qtype_parse(const char *s, int group, qtype *out, xllm_error *err);
const char *qtype_name(qtype t, char *buf, size_t cap);
/* Defaults for dtype, then the overrides in spec ("class=type,..."; may be NULL). */
xllm_status policy_make(const char *dtype, int group, const char *spec, policy *p, xllm_error *err);
/* The type a tensor of this class and shape gets, after fallbacks. */
qtype policy_pick(const policy *p, tensor_class c, int ndim, int64_t cols);
/* The mix's rule in words (recorded in the file's policy), or NULL. */
const char *policy_mix_rule(const policy *p);
/* The same for the tensor of this HF name (a mix picks by name). */
qtype policy_pick_named(const policy *p, const char *name, tensor_class c, int ndim, int64_t cols);

#endif
