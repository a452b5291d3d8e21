/*
 * model.h - a loaded decoder-only transformer and its forward pass.
 *
 * Weights are views into the mmap-ed checkpoint (matrices used in their
 * stored dtype); only 1-D tensors (norms, biases) are converted to owned f32
 * copies. model_forward runs ONE flattened batch of tokens from any number of
 * sequences - prefill chunks, decode tokens, or both mixed - and reads/writes
 * each sequence's K/V through its block table in the paged kv_cache.
 *
 * Everything runs through the backend chosen at load (m->be, backend.h):
 * the model layer owns the weights' bindings, the scratch layout and the
 * order of operations; it never touches device memory or threads itself.
 */
#ifndef XLLM_MODEL_H
#define XLLM_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "backend/backend.h"
#include "format/safetensors.h"
#include "model/kv_cache.h"
#include "model/model_config.h"

typedef struct layer_weights {
    float *attn_norm, *mlp_norm, *q_norm, *k_norm; /* attn_norm / mlp_norm: before the block (NULL: none) */
    float *attn_post_norm, *mlp_post_norm;         /* on the block's output before the residual (NULL: none) */
    matrix q, k, v, o;
    float *q_bias, *k_bias, *v_bias, *o_bias;
    matrix qkv;          /* fused q/k/v (rows q, k, v) when the file has it; then q/k/v are unset */
    float *qkv_bias;
    matrix gate_up;      /* fused gate/up (rows gate, up) when the file has it */
    /* dense MLP (also used by MoE models on mlp-only layers) */
    matrix gate, up, down;
    float *gate_bias, *up_bias, *down_bias;
    /* mixture of experts */
    matrix router;
    matrix *exp_gate, *exp_up, *exp_down;   /* n_experts each */
    matrix sh_gate, sh_up, sh_down, sh_router;
    float *sel_bias;     /* DeepSeek-V3: added to the router's probabilities to choose experts (NULL: none) */
    /* multi-head latent attention (cfg.mla_dim > 0): q is q_proj or q_b_proj(norm(q_a_proj x));
     * kv_a -> [latent | rope key]; per head k_b [kv_lora][qk_nope] takes q_nope into
     * the latent space, v_b [v_head][kv_lora] the attended latent out of it */
    matrix q_a, kv_a;
    float *q_a_norm, *kv_a_norm;
    matrix *k_b, *v_b;   /* n_heads each */
} layer_weights;

/* Activation scratch: device buffers (the backend's alloc), sized once. */
typedef struct model_scratch {
    int max_tokens;
    size_t bytes;        /* the buffers below that alloc_scratch sizes by max_tokens */
    float *x, *xn, *q, *k, *v, *att, *tmp, *h1, *h2;
    float *moe_acc, *xg, *yg, *router_logits;
    float *fused;        /* output of a fused qkv or gate_up matmul */
    float *logits;       /* lm_head rows before the read-back (backends without unified memory): */
    int head_rows;       /*   this many; the head runs over the wanted rows in chunks of it */
    float *rope_cos, *rope_sin;
    float *rope_cos_local, *rope_sin_local; /* the sliding layers' tables (cfg.rope_local_theta > 0) */
    int32_t *route_ids, *expert_tokens, *expert_count;
    float *route_w, *expert_w;
} model_scratch;

/* Where calibration can observe the inputs of the linear layers. The observer
 * gets the backend's buffers as they are: it reads them directly, which only a
 * backend with unified memory (the CPU) allows; calibration runs there. */
typedef enum observe_point { OBS_ATTN_IN = 0, OBS_O_IN, OBS_MLP_IN, OBS_DOWN_IN, OBS_COUNT } observe_point;
/* x: T rows of cols activations entering the layer's matmul(s); expert: MoE
 * expert index for OBS_DOWN_IN inside a MoE block (-1 otherwise). */
typedef void (*model_observer)(void *ctx, int layer, observe_point point, int expert, const float *x, int T, int cols);
/* The attention-weights reference path (src/model/attention_probs.c): each
 * layer's q, k and v as the attention reads them (q/k after their norm and
 * RoPE), in host memory: q [T][n_heads * head_dim], k and v [T][n_kv_heads *
 * head_dim], for the batch's T tokens (b->pos, b->seq). Called before the
 * layer's attention; the fused kernels are not changed by it.
 * Multi-head latent attention (cfg.mla_dim > 0) passes what its attention
 * reads and what came before it: q [T][n_heads][mla_dim] the absorbed query
 * rows [k_b q_nope | rope(q_pe)], k [T][mla_dim] the latent rows [norm(c) |
 * rope(k_pe)] (key and value alike), and v [T][n_heads][qk_nope + qk_rope]
 * the projected query before absorption and RoPE (its q_nope parts). */
struct fwd_batch;
typedef void (*model_attn_observer)(void *ctx, int layer, const struct fwd_batch *b, const float *q, const float *k,
                                    const float *v);

typedef struct model {
    model_config cfg;
    char *dir;                     /* checkpoint directory or file (for messages) */
    cJSON *meta;                   /* .xllm metadata (NULL for HF directories) */
    /* tokenizer.json / tokenizer_config.json carried by a model file (.xllm
     * blobs or synthesized from GGUF); NULL for directories (read from disk) */
    const char *tok_json, *tok_config;
    size_t tok_json_len, tok_config_len;
    char *owned_tok_json, *owned_tok_config; /* GGUF: synthesized texts */
    st_archive *weights_file;
    backend be;                    /* the execution backend (model_load_options.backend) */
    int fuse;                      /* 1: the fused operators (the default); 0: the unfused sequence */
    matrix embed, lm_head;
    float *final_norm;
    layer_weights *layers;
    double *inv_freq;              /* head_dim / 2 RoPE frequencies (scaling applied) */
    float rope_theta_scale;        /* > 0: RoPE angles as llama.cpp takes them (rope_tables) */
    double *inv_freq_local;        /* sliding layers' frequencies when cfg.rope_local_theta > 0, else NULL */
    float rope_theta_scale_local;
    int rope_long;                 /* LongRoPE: the long factor set is in use (model_rope_context) */
    model_scratch s;
    model_observer observe;        /* NULL except during calibration */
    void *observe_ctx;
    model_attn_observer attn_observe; /* NULL except while attention weights are taken */
    void *attn_observe_ctx;
    void **owned;                  /* host allocations freed with the model */
    size_t n_owned, cap_owned;
    void **dev;                    /* device buffers (1-D weights, scratch, uploaded matrices): the backend's free */
    size_t n_dev, cap_dev;
    /* a part of the model (a pipeline stage): layers [layer_begin, layer_end)
     * are bound; embed only when layer_begin == 0, final_norm and lm_head only
     * when layer_end == n_layers (whole model: 0, n_layers) */
    int layer_begin, layer_end;
    size_t bound_bytes;            /* bytes of the checkpoint's tensors this model bound (its share of the file) */
} model;

/* Which part of the model to load: layers [layer_begin, layer_end) (0, 0 =
 * all), or, when n_stages > 1, stage `stage` of a split of the layers into
 * n_stages ranges (split: "8,8,6" layers per stage, NULL = as even as can be,
 * earlier stages taking the extra layers). */
typedef struct model_part {
    int layer_begin, layer_end;
    int stage, n_stages;
    const char *split;
} model_part;
/* How to load: the backend and its switches (xllm_model_options' fields). */
typedef struct model_load_options {
    int n_threads;          /* 0: all online CPUs */
    int max_tokens;         /* the most tokens one forward call may carry (scratch is sized for it) */
    const char *backend;    /* NULL: "cpu" */
    const char *cpu_level;  /* NULL: the best this CPU has */
    const char *attention;  /* NULL: chosen per step; per-item | split | shared */
    int no_fuse;            /* the unfused operator sequence (same bits) */
    int no_repack;          /* quantized matrices in their stored layout (same bits) */
    const model_part *part; /* NULL: the whole model */
    const char *plan_cache; /* the planner's cache file; NULL: none */
    int arith_llama;        /* llama.cpp's arithmetic where it differs from ours (xllm_model_options.arithmetic) */
    int device;             /* device backends: which device (xllm_model_options.device) */
} model_load_options;

/* Load config + weights from a HF checkpoint directory, an .xllm or a GGUF
 * file onto the backend o->backend. Not thread-safe for one model. */
model *model_load_ex(const char *dir, const model_load_options *o, xllm_error *err);
/* model_load_ex with the defaults (the best CPU level, planner's choices, fused). */
model *model_load(const char *dir, int n_threads, int max_tokens, xllm_error *err);

/* As model_load, binding (and so reading from the mmap) only the part's
 * tensors: its layers, the embedding on the first stage, final norm and
 * lm_head on the last. part NULL = the whole model. Thread-safe (each call
 * makes its own model). */
model *model_load_part(const char *dir, int n_threads, int max_tokens, const model_part *part, xllm_error *err);
/* The layer range of stage `stage` of n_stages (split as in model_part).
 * A split that does not have n_stages entries, has one below 1 or does not
 * sum to n_layers is XLLM_ERR_INVALID_ARGUMENT, saying which. Thread-safe. */
xllm_status model_split_layers(int n_layers, int n_stages, const char *split, int stage, int *l0, int *l1,
                               xllm_error *err);
void model_free(model *m);
/* LongRoPE (cfg.rope == ROPE_LONGROPE): choose the factor set for a context
 * of `context` tokens per sequence, as llama.cpp does: the long factors when
 * context > original_max_position_embeddings, else the short ones (load
 * picks by max_position_embeddings; xllm_model_load then by its
 * max_context). Returns 1 when the long set is in use. Other models: no-op,
 * 0. Not thread-safe: call before forward passes. */
int model_rope_context(model *m, int context);
/* The backend's load-time planning over every matrix a matmul reads;
 * *report: JSON (caller frees). */
xllm_status model_plan(model *m, int budget_ms, cJSON **report, xllm_error *err);

/* One flattened batch: token i belongs to sequence seq[i] at position pos[i];
 * block_tables[s] is sequence s's block table. Within a sequence, tokens must
 * come in increasing positions and all earlier positions must already be in
 * the cache or earlier in this batch. Logits are produced for the n_out token
 * indices in out_idx, into logits[n_out][vocab]. */
typedef struct fwd_batch {
    int n_tokens;
    const int32_t *tokens;
    const int32_t *pos;
    const int32_t *seq;
    const int32_t *const *block_tables;
    int n_out;
    const int32_t *out_idx;
} fwd_batch;

/* The whole pass (a whole model only): model_embed, model_layers over every
 * layer, model_head. Not thread-safe (one forward at a time per model). */
xllm_status model_forward(model *m, kv_cache *kv, const fwd_batch *b, float *logits, xllm_error *err);
/* The three parts a pipeline stage calls. model_embed (first stage): checks
 * the batch and writes the tokens' embedding rows into model_hidden(m).
 * model_layers: layers [l0, l1) (inside the part's range) over the hidden
 * states, in place, with K/V through kv (whose layer0 is the part's first
 * layer); a stage may call it layer by layer, the call starting at
 * layer_begin prepares the batch's RoPE tables. model_head (last stage):
 * final norm + lm_head of the n_out rows into logits[n_out][vocab]. The
 * hidden states are n_tokens rows of cfg.hidden floats. Not thread-safe. */
xllm_status model_embed(model *m, const fwd_batch *b, xllm_error *err);
void model_layers(model *m, kv_cache *kv, const fwd_batch *b, int l0, int l1);
void model_head(model *m, const fwd_batch *b, float *logits);
float *model_hidden(model *m);

/* logits.c (src/model): logits of one sequence of ids, on a private KV pool. */
xllm_status model_logits_once(model *m, const int32_t *ids, size_t n, int all_positions, kv_dtype kv_type, float *out,
                              xllm_error *err);
/* attention_probs.c: the attention probabilities of one sequence of ids for
 * the listed layers (layers NULL: every layer, n_layers ignored), per head or
 * averaged over heads, in *probs[layer][head][n][n] (mem_malloc; shape: those
 * four sizes), recomputed on the host from each layer's q and k (the attention
 * observer above); on a private KV pool. The caller serializes forward passes
 * on the model. */
xllm_status model_attention_once(model *m, const int32_t *ids, size_t n, const int32_t *layers, size_t n_layers,
                                 int average_heads, kv_dtype kv_type, float **probs, int64_t shape[4],
                                 xllm_error *err);
/* embed.c (src/model): k sequences' final hidden states pooled (0 mean, 1 last, 2 first),
 * L2-normalized when normalize, into out[k][hidden]; on private KV pools. */
xllm_status model_embed_batch(model *m, const int32_t *const *ids, const size_t *n, size_t k, int pooling, int normalize,
                              kv_dtype kv_type, float *out, xllm_error *err);

/* fingerprint.c: a hash of the configuration and a sample of every tensor's
 * bytes (0 when out of memory). Thread-safe (reads the mapped weights only). */
uint64_t model_fingerprint(const model *m);

#endif
