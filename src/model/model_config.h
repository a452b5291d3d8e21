/*
 * model_config.h - the architecture of a decoder-only model, read from a
 * HuggingFace config.json (+ generation_config.json).
 *
 * One struct describes every supported family (the rows of arch.c): the
 * differences between them are flags and sizes here (norm placement,
 * biases, q/k norm, activation, soft-caps, sliding windows and RoPE bases per
 * layer, MoE layout), not separate code paths in the forward pass.
 */
#ifndef XLLM_MODEL_CONFIG_H
#define XLLM_MODEL_CONFIG_H

#include <stdint.h>
#include <cjson/cJSON.h>
#include "format/arch.h"
#include "xllm.h"

#define MODEL_MAX_LAYERS 512
#define MODEL_MAX_EOS 8

#define MODEL_MAX_ROPE_FACTORS 256 /* LongRoPE: rope_dim / 2 factors per set (rope_dim <= 512) */

typedef enum rope_type { ROPE_DEFAULT = 0, ROPE_LINEAR, ROPE_LLAMA3, ROPE_LONGROPE, ROPE_YARN } rope_type;

typedef struct model_config {
    char model_type[32];
    const arch_info *arch; /* the family's row (arch.h) */
    int hidden;            /* hidden_size */
    int intermediate;      /* intermediate_size (dense MLP) */
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    int vocab;
    int max_positions;     /* max_position_embeddings */
    float rms_eps;
    double rope_theta;
    rope_type rope;
    double rope_factor;              /* linear / llama3 / yarn */
    double rope_low_freq_factor;     /* llama3 */
    double rope_high_freq_factor;    /* llama3 */
    double rope_original_max_pos;    /* llama3, longrope, yarn */
    /* LongRoPE (Phi-3 / Phi-3.5 / Phi-4-mini 128k): frequency i divided by
     * short[i] or long[i] (long when the context run is over
     * rope_original_max_pos: model_rope_context), cos and sin multiplied by
     * rope_attn_factor (both sets) */
    double rope_short[MODEL_MAX_ROPE_FACTORS], rope_long[MODEL_MAX_ROPE_FACTORS];
    double rope_attn_factor;         /* longrope, yarn: cos and sin x this (q.k x its square) */
    /* YaRN (DeepSeek-V2/V3, Qwen2.5/Qwen3 long context): frequency i takes
     * theta_i / factor (interpolation) below the ramp, theta_i itself
     * (extrapolation) above it, a linear mix between the correction dims of
     * beta_fast and beta_slow rotations over rope_original_max_pos positions
     * (rounded outward unless yarn_truncate is 0); cos, sin x rope_attn_factor */
    double rope_beta_fast, rope_beta_slow;
    int rope_yarn_truncate;
    double rope_yarn_mscale_all;     /* DeepSeek's mscale_all_dim (0: none): the score scale x mscale(factor, it)^2 */
    int qkv_bias;          /* q/k/v projections have bias */
    int o_bias;            /* o_proj has bias */
    int mlp_bias;
    int qk_norm;           /* RMSNorm of q and k: 1 per head (qwen3), 2 over the whole projection (olmo2) */
    int rope_interleaved;  /* RoPE rotates pairs (2i, 2i+1) instead of (i, i+d/2): GGUF llama Q/K layout */
    int tie_embeddings;    /* 1 tied, 0 separate lm_head required, -1 not said (tied when there is no lm_head) */
    int layer_window[MODEL_MAX_LAYERS]; /* sliding window per layer, 0 = full attention */
    float norm_offset;     /* added to every stored norm weight at load (HF Gemma: 1; its GGUF form: 0) */
    int embed_scale;       /* input embeddings x sqrt(hidden) */
    arch_act act;          /* the gated MLP's activation */
    float attn_scale;      /* attention score scale; 0: 1 / sqrt(head_dim) */
    float attn_softcap;    /* scores -> c tanh(s / c); 0: off */
    float final_softcap;   /* logits -> c tanh(z / c); 0: off */
    double rope_local_theta; /* > 0: sliding layers' RoPE base, unscaled (Gemma 3) */
    int rope_dim;          /* values RoPE rotates per head: head_dim, the first int(head_dim x
                            * partial_rotary_factor) (arch_rope_dims; the rest pass through), or MLA's
                            * qk_rope_dim (the last ones of its rows). LongRoPE's sets hold rope_dim / 2. */

    /* multi-head latent attention (DeepSeek-V2/V3; arch->mla): kv_lora_rank > 0.
     * The cache holds one latent row per token, [kv_lora_rank normed | qk_rope_dim
     * roped], mla_dim values: its first half in the K pool, the rest in the V
     * pool (head_dim = mla_dim / 2, n_kv_heads = 1), so the pool's bytes per
     * token are the latent's, and everything that moves K/V rows works as is. */
    int q_lora_rank;       /* 0: a plain q_proj */
    int kv_lora_rank, qk_nope_dim, qk_rope_dim, v_head_dim;
    int mla_dim;           /* kv_lora_rank + qk_rope_dim */

    /* mixture of experts */
    moe_naming moe;
    int n_experts;
    int n_experts_used;            /* num_experts_per_tok */
    int moe_intermediate;
    int shared_expert_intermediate; /* 0 = no shared expert */
    int norm_topk_prob;
    int shared_gated;              /* the shared expert has a sigmoid gate (Qwen); 0: added as is (DeepSeek) */
    int moe_sigmoid;               /* router probabilities: sigmoid (DeepSeek-V3) instead of softmax */
    int moe_sel_bias;              /* a per-expert bias added for choosing only (e_score_correction_bias) */
    int n_group, topk_group;       /* group-limited routing: only the topk_group best of n_group groups (0: off) */
    int group_max;                 /* a group's score: its best expert (V2's group_limited_greedy); 0: its two best summed */
    float routed_scale;            /* routed weights x this (routed_scaling_factor); 0: 1 */
    uint8_t layer_is_moe[MODEL_MAX_LAYERS];

    int32_t bos_id;                 /* -1 if none */
    int n_eos;
    int32_t eos_ids[MODEL_MAX_EOS];
} model_config;

/* Parse a config.json object and an optional generation_config.json object
 * (gen may be NULL); path/gen_path name them in messages. */

xllm_status model_config_parse(const cJSON *config, const cJSON *gen, const char *path, const char *gen_path,
                               model_config *cfg, xllm_error *err);
/* Parse dir/config.json and (if present) dir/generation_config.json. */
xllm_status model_config_load(const char *dir, model_config *cfg, xllm_error *err);

#endif
