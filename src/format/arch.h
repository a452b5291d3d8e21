/*
 * arch.h - the model families xLLM runs, one row of one table each.
 *
 * A family is described once (src/format/arch.c): its HF config.json
 * model_type and GGUF general.architecture names, the tensor names in both
 * formats, where its norms sit and how their weights are stored, the
 * embedding scale, the activation, soft-capping, the sliding-window pattern,
 * per-layer RoPE bases, q/k norms, biases and the MoE layout. The config
 * parser (model_config.c), the loader (model_load.c) and the GGUF reader and
 * writer (gguf.c, gguf_write.c) read the row instead of testing family names;
 * the forward pass reads only model_config. Adding a family is one row plus
 * its tests (docs/ARCHITECTURE.md, "Adding a model family").
 *
 * It lives in src/format (the lowest room that both the GGUF reader / writer
 * and the model layer may include). Everything here is constant data:
 * thread-safe.
 */
#ifndef XLLM_FORMAT_ARCH_H
#define XLLM_FORMAT_ARCH_H

/* Which layers slide (config key sliding_window > 0; HF's layer_types, when
 * the config has it, overrides every rule). */
typedef enum arch_window {
    ARCH_WIN_ALL = 0,  /* every layer (Mistral, Mixtral) */
    ARCH_WIN_QWEN,     /* only with use_sliding_window, layers >= max_window_layers */
    ARCH_WIN_EVEN,     /* layers 0, 2, 4, ... (Gemma 2) */
    ARCH_WIN_PATTERN,  /* all but every sliding_window_pattern-th (Gemma 3: 5 of 6) */
    ARCH_WIN_NONE      /* the key is ignored (Phi-3: llama.cpp disables it too) */
} arch_window;

typedef enum arch_act { ARCH_ACT_SILU = 0, ARCH_ACT_GELU_TANH } arch_act;

/* How MoE tensors are named: Mixtral's block_sparse_moe.{gate,experts.E.w1/w2/w3},
 * Qwen's mlp.{gate,experts.E.gate_proj/up_proj/down_proj,shared_expert...} or
 * DeepSeek's mlp.{gate(.e_score_correction_bias),experts.E.*,shared_experts.*}
 * (DeepSeek also reads its routing keys: scoring_func, n_group / topk_group,
 * routed_scaling_factor, first_k_dense_replace, n_shared_experts). */
typedef enum moe_naming { MOE_NONE = 0, MOE_MIXTRAL, MOE_QWEN, MOE_DEEPSEEK } moe_naming;

/* Norm slots of a layer: before/after attention, before/after the MLP. */
enum { ARCH_NORM_ATTN_IN = 0, ARCH_NORM_ATTN_OUT, ARCH_NORM_MLP_IN, ARCH_NORM_MLP_OUT, ARCH_NORMS };

/* A per-layer tensor base name in GGUF (blk.N.<gguf>) and HF
 * (model.layers.N.<hf>); an hf name holding %d is one per expert (or per
 * head: DeepSeek's attn_k_b / attn_v_b), whose GGUF tensor stacks them along
 * its outermost dimension. An hf name ending in "_bias" is a whole tensor
 * name (DeepSeek-V3's mlp.gate.e_score_correction_bias = GGUF <gguf>.bias). */
typedef struct arch_name {
    const char *gguf, *hf;
} arch_name;

typedef struct arch_info {
    const char *hf_type;      /* config.json model_type */
    const char *hf_class;     /* architectures[0] for a config built from GGUF */
    const char *gguf_arch;    /* general.architecture; NULL: no GGUF form */
    int gguf_experts;         /* 1: this row is the GGUF arch's form with expert_count > 0 (llama -> mixtral) */
    const char *norm[ARCH_NORMS]; /* HF base names (model.layers.N.<name>.weight); NULL: the layer has none */
    float norm_offset;        /* HF stores norm weights as (w - offset) (Gemma: 1); GGUF stores w */
    int embed_scale;          /* input embeddings x sqrt(hidden) */
    arch_act act;
    int qkv_bias;             /* 1: q/k/v biases always (Qwen2); 0: from attention_bias */
    int qk_norm;              /* 0: none; 1: RMSNorm per head; 2: over the whole q (k) projection (OLMo 2) */
    int softcap;              /* reads attn_logit_softcapping / final_logit_softcapping (HF); GGUF: 2 = llama.cpp's
                               * defaults 50 / 30 when the keys are absent (Gemma 2), 1 = only when present */
    arch_window window;
    int rope_local;           /* sliding layers use rope_local_base_freq, unscaled (Gemma 3) */
    int rope_interleaved_gguf; /* the GGUF form stores q/k rows for adjacent-pair RoPE (llama) */
    moe_naming moe;
    int norm_topk;            /* -1: config's norm_topk_prob; 0 / 1: fixed */
    int shared_expert;        /* reads shared_expert_intermediate_size */
    const arch_name *names;   /* per-layer tensors, NULL-terminated */
    int gguf_writable;        /* gguf_write.c writes this family's keys (xllm convert --to gguf) */
    int mla;                  /* multi-head latent attention (DeepSeek-V2/V3: q_lora_rank, kv_lora_rank, ...) */
} arch_info;

/* The row of a config.json model_type; NULL if unknown. */
const arch_info *arch_by_hf(const char *model_type);
/* The row of a GGUF general.architecture (experts: expert_count > 0); NULL if unknown. */
const arch_info *arch_by_gguf(const char *gguf_arch, int experts);
/* The supported names, comma-separated ("llama, mistral, ..."), for messages. */
const char *arch_hf_list(void);
const char *arch_gguf_list(void);
/* A layer tensor's name in the other format, within family a: GGUF
 * "blk.N.<gguf>.weight|bias" -> "model.layers.N.<hf>.weight|bias" (to_hf) or
 * back. A GGUF tensor that stacks the experts maps to expert e's HF name
 * (to_hf; the reader calls it once per expert) and an HF expert name to the
 * stacked GGUF name with *expert set to its index (from_hf; -1 otherwise).
 * Global tensors (embedding, final norm, output) are the same in every
 * family. Returns 0 when the name is not the family's, 2 when it is a
 * stacked-experts tensor (to_hf), 1 otherwise. */
int arch_name_to_hf(const arch_info *a, const char *gguf, int e, char *out, unsigned long cap);
int arch_name_from_hf(const arch_info *a, const char *hf, char *out, unsigned long cap, int *expert);

/* Partial rotary embeddings (any family; Phi-4-mini: partial_rotary_factor
 * 0.75): the values RoPE rotates at the start of each head, rot_dims =
 * int(head_dim * factor) as transformers computes it (a 1e-9 slack, so that
 * a factor written as rot / head_dim gives rot back); the pairs are
 * (i, i + rot_dims / 2) (or adjacent pairs in an interleaved layout) and the
 * rest of the head passes through. GGUF stores rot_dims itself as
 * <arch>.rope.dimension_count. Returns 0 unless 2 <= rot_dims <= head_dim
 * and rot_dims is even (the caller's error). */
int arch_rope_dims(int head_dim, double partial_rotary_factor);

/* YaRN's magnitude correction for a context factor s and coefficient m
 * (HF's get_mscale, DeepSeek's yarn_get_mscale): 1 + 0.1 m ln s, 1 when
 * s <= 1. The config parser (model_config.c: the cos/sin scale and
 * DeepSeek's softmax scale) and the GGUF reader and writer (their YaRN keys)
 * share it. Pure: thread-safe. */
double arch_yarn_mscale(double s, double m);

#endif
