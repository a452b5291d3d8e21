/*
 * model.h - a loaded decoder-only transformer and its forward pass.
 *
 * Weights are views into the mmap-ed checkpoint (matrices used in their
 * stored dtype); only 1-D tensors (norms, biases) are converted to owned f32
 * copies. model_forward runs ONE flattened batch of tokens from any number of
 * sequences - prefill chunks, decode tokens, or both mixed - and reads/writes
 * each sequence's K/V through its block table in the paged kv_cache.
 */
#ifndef XLLM_MODEL_H
#define XLLM_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "backend/backend.h"
#include "format/safetensors.h"
#include "model/kv_cache.h"
#include "model/model_config.h"

/* Keys scored at a time per (token, head) in attention (partials folded per chunk). */
#define ATTN_CHUNK 128
/* split-KV partials kept for at most this many keys per item (longer: per-item strategy) */
#define ATTN_SPLIT_MAX_KEYS 32768

typedef enum attn_strategy { ATTN_PER_ITEM = 0, ATTN_SPLIT_KV, ATTN_SHARED_KV } attn_strategy;

typedef struct layer_weights {
    float *attn_norm, *mlp_norm, *q_norm, *k_norm;
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
} layer_weights;

typedef struct model_scratch {
    int max_tokens;
    size_t bytes;        /* the buffers below that alloc_scratch sizes by max_tokens */
    float *x, *xn, *q, *k, *v, *att, *tmp, *h1, *h2;
    float *moe_acc, *xg, *yg, *router_logits;
    float *fused;        /* output of a fused qkv or gate_up matmul */
    float *attn_part;    /* split-KV partials: attn_part_items x (head_dim + 2) */
    size_t attn_part_items;
    /* shared-KV attention (attention.c, made on first use): per thread
     * attn_tile_floats of group buffers; the step's token tiles (max_tokens + 1);
     * state 0 = not made yet, 1 = made, -1 = could not be allocated */
    float *attn_tile;
    size_t attn_tile_floats;
    int32_t *attn_tiles;
    int attn_tile_state;
    float *rope_cos, *rope_sin;
    int32_t *route_ids, *expert_tokens, *expert_count;
    float *route_w, *expert_w;
} model_scratch;

/* Where calibration can observe the inputs of the linear layers. */
typedef enum observe_point { OBS_ATTN_IN = 0, OBS_O_IN, OBS_MLP_IN, OBS_DOWN_IN, OBS_COUNT } observe_point;
/* x: T rows of cols activations entering the layer's matmul(s); expert: MoE
 * expert index for OBS_DOWN_IN inside a MoE block (-1 otherwise). */
typedef void (*model_observer)(void *ctx, int layer, observe_point point, int expert, const float *x, int T, int cols);

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
    backend be;
    matrix embed, lm_head;
    float *final_norm;
    layer_weights *layers;
    double *inv_freq;              /* head_dim / 2 RoPE frequencies (scaling applied) */
    model_scratch s;
    int attn_force;                /* XLLM_ATTN: 0 = the planner decides, 1 = per item, 2 = split-KV,
                                      3 = shared-KV ("shared") */
    model_observer observe;        /* NULL except during calibration */
    void *observe_ctx;
    void **owned;                  /* f32 copies of 1-D tensors, freed with the model */
    size_t n_owned, cap_owned;
    void **packed;                 /* matrices repacked for the kernel level (backend_pack_matrix) */
    size_t n_packed, cap_packed;
    /* a part of the model (a pipeline stage): layers [layer_begin, layer_end)
     * are bound; embed only when layer_begin == 0, final_norm and lm_head only
     * when layer_end == n_layers (whole model: 0, n_layers) */
    int layer_begin, layer_end;
    size_t bound_bytes;            /* bytes of the checkpoint's tensors this model bound (its share of the file) */
} model;

/* Load config + weights from a HF checkpoint directory. max_tokens: the most
 * tokens one forward call may carry (scratch is sized for it). */
model *model_load(const char *dir, int n_threads, int max_tokens, xllm_error *err);

/* Which part of the model to load: layers [layer_begin, layer_end) (0, 0 =
 * all), or, when n_stages > 1, stage `stage` of a split of the layers into
 * n_stages ranges (split: "8,8,6" layers per stage, NULL = as even as can be,
 * earlier stages taking the extra layers). */
typedef struct model_part {
    int layer_begin, layer_end;
    int stage, n_stages;
    const char *split;
} model_part;
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
/* The attention strategy model_forward uses for this batch and layer (the
 * planner's per-step choice; results are identical either way). */
attn_strategy attention_strategy(const model *m, const fwd_batch *b, int layer, int *max_chunks);
/* Attention of the batch's tokens at layer l (attention.c): s.q against the
 * cache, where this step's K/V are already written, into s.att. */
void attention_run(model *m, const kv_cache *kv, const fwd_batch *b, int l);

#endif
