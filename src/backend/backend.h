/*
 * backend.h - the boundary between the model layer and an execution backend.
 *
 * A backend is a table of operations (backend_ops) over an opaque context,
 * chosen by name when a model is loaded (backend_create; "cpu" is the only
 * one today, src/backend/cpu/). Everything above this header (src/model,
 * src/engine, src/api) is backend-agnostic: it allocates device memory, moves
 * data and runs coarse operations over a whole flattened batch only through
 * the table, and never touches threads, SIMD, kernel levels or the backend's
 * scratch. A new backend is a new directory under src/backend with one
 * backend_ops table, registered in backend.c; src/model does not change.
 *
 * What a backend must guarantee:
 *  - Determinism: every output element of every operation is computed the
 *    same way whatever the batch composition (which other tokens and
 *    sequences share the step, in what order), the batch size and the
 *    backend's own split of the work (threads, tiles, streams). So a
 *    sequence's tokens never depend on what else runs, on chunking, on
 *    preemption or on a prefix-cache hit (the engine's tests check it).
 *    Choices the backend makes for speed (kernel variants, attention
 *    strategies, fusion) must not change any bit.
 *  - Memory: buffers from alloc() are device memory. The model layer may do
 *    pointer arithmetic on them (row offsets, a layer's part of the KV pool)
 *    but never reads or writes through them; data crosses with copy()
 *    (host <-> device, device <-> device). This covers the activation
 *    scratch, the 1-D weights (norms, biases, uploaded at load), the KV pool
 *    (kv_cache.c: allocation, copy-on-write, swap to the host pool and the
 *    knowledge KV files all go through copy()) and the logits (read back).
 *    Weight matrices are views into the model file's mmap (host memory) until
 *    upload_matrix() gives the backend its own copy (repacked, or on the
 *    device). Inputs that describe the batch (token ids, positions, sequence
 *    ids, block tables, the RoPE frequencies) are host memory the backend
 *    reads (uploading them if it must) during the call. A backend whose
 *    device memory is host memory sets unified_memory; the model layer then
 *    lets it write the logits straight into the caller's buffer.
 *  - Calls are synchronous from the caller's view: when an operation
 *    returns, its outputs are visible to the next operation and to copy().
 *  - The KV pool layout is fixed: per layer, K (and V alike) is
 *    [n_blocks][block_size][n_kv_heads] rows of head_dim values, each row
 *    stored in the pool's kv_dtype (quant/kvq.h: f32, f16, or q8 = int8
 *    values then their f16 scales; kvq_row_bytes(kv_dtype, head_dim) bytes);
 *    position p of a sequence is block table[p / block_size], slot
 *    p % block_size. The backend converts when it writes a K/V slot
 *    (qkv_rope_kv, rope_kv) and reads the stored form in attention; a row
 *    reads back as the same f32 values every time (kvq.h).
 *  - A backend's operations are called from one thread at a time per
 *    context (the model's forward lock); none is thread-safe on its own.
 */
#ifndef XLLM_BACKEND_H
#define XLLM_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include "base/dtype.h"
#include "quant/kvq.h"
#include "quant/quant.h"
#include "xllm.h"

struct cJSON;

/* Batch-size buckets the planner tunes separately: T = 1, 2-8, 9-64, > 64. */
#define MM_BUCKETS 4
static inline int mm_bucket(int T) { return T <= 1 ? 0 : T <= 8 ? 1 : T <= 64 ? 2 : 3; }

/* Row-major [rows][cols] matrix in its stored dtype: F32, F16, BF16, or a
 * block-quantized type (Q8, Q4, Q4M, llama.cpp's) with `group` weights per scale. */
typedef struct matrix {
    dtype_t dtype;
    int group;
    int64_t rows, cols;
    const void *data;
    /* threads the planner measured best per batch bucket (0: the default
     * work-size rule). The thread split never changes results. */
    uint8_t plan_threads[MM_BUCKETS];
    /* the kernel variant (1-based index into the level's variant names,
     * kernels.h) the planner measured best per batch bucket; 0: the level's
     * default. Variants differ in loop order and tiling only: same results. */
    uint8_t plan_kernel[MM_BUCKETS];
    /* 1: data is in the backend's own layout (upload_matrix); only the
     * backend's matmuls read it. 0: as stored. */
    uint8_t packed;
} matrix;

/* Work of a matmul of T tokens (for profiles). */
static inline double mm_flops(const matrix *W, int T) { return 2.0 * (double)T * (double)W->rows * (double)W->cols; }
/* weights streamed once, activations in and out */
static inline double mm_bytes(const matrix *W, int T) {
    return (double)W->rows * (double)quant_row_bytes(W->dtype, W->group, W->cols) +
           4.0 * (double)T * (double)(W->cols + W->rows);
}

/* matmul / rmsnorm flags.
 * BE_PREPARE (rmsnorm): the next matmuls read this output; a backend that
 *   prepares activations for quantized weights may do it now, in the same pass.
 * BE_ACT_READY (matmul): x is the output of the last rmsnorm with BE_PREPARE
 *   (a hint: such a backend need not prepare it again).
 * BE_ADD (matmul): y += (x W^T + bias), per element, with the rounding of a
 *   separate residual pass; tmp ([T][W.rows]) may hold the result on the way. */
#define BE_ACT_READY 1u
#define BE_ADD 2u
#define BE_PREPARE 4u

typedef enum be_copy_kind { BE_HOST_TO_DEVICE = 0, BE_DEVICE_TO_HOST, BE_DEVICE_TO_DEVICE } be_copy_kind;

/* One layer's q/k/v step over the batch: (fused) the q/k/v rows of x, then
 * per head the q/k RMSNorm (q_norm, k_norm; NULL: none) and RoPE, and each
 * token's K/V written into its cache slot. */
typedef struct be_qkv {
    int T;
    const float *x;               /* [T][cols]: normed input (qkv_rope_kv) */
    const matrix *W[3];           /* q, k, v: one fused qkv matrix three times, or three */
    int64_t row0[3];              /* where each part starts in its matrix */
    const float *bias[3];         /* indexed by the matrix's row; NULL: none */
    unsigned flags;               /* BE_ACT_READY */
    float *q, *k, *v;             /* [T][n_heads * head_dim], [T][n_kv_heads * head_dim] x 2 */
    const float *q_norm, *k_norm; /* [head_dim] each, or NULL */
    float eps;
    const float *rope_cos, *rope_sin; /* [T][rope_dim / 2] (rope_tables) */
    int rope_interleaved;         /* pairs (2i, 2i + 1) instead of (i, i + half) */
    int n_heads, n_kv_heads, head_dim;
    /* RoPE rotates the first rope_dim values of each q / k head (even, <=
     * head_dim; pairs (i, i + rope_dim / 2), or (2i, 2i + 1) interleaved);
     * the rest pass through (partial rotary: Phi-4-mini). 0: head_dim. */
    int rope_dim;
    void *k_cache, *v_cache;      /* this layer's part of the KV pool */
    kv_dtype kv_type;             /* how its rows are stored */
    int block_size;
    const int32_t *pos, *seq;     /* host: each token's position and sequence */
    const int32_t *const *block_tables; /* host: per sequence */
    /* 0 (the default): q_norm / k_norm per head ([head_dim] each). 1: one
     * RMSNorm over each token's whole q (n_heads * head_dim values, q_norm
     * that long) and whole k (n_kv_heads * head_dim, k_norm), before RoPE
     * (OLMo 2). A backend may answer qkv_rope_kv with 0 for it; rope_kv must
     * do it. */
    int qk_norm_all;
} be_qkv;

/* Causal attention of the batch over the paged cache for one layer: token t
 * attends over positions [window start, pos[t]] of its own sequence (this
 * step's K/V already written). */
typedef struct be_attn {
    int T;
    const float *q;               /* [T][n_heads * head_dim] after RoPE */
    float *out;                   /* [T][n_heads * head_dim] */
    const void *k_cache, *v_cache; /* rows stored as kv_type */
    int block_size, n_heads, n_kv_heads, head_dim;
    int window;                   /* 0: none */
    const int32_t *pos, *seq;
    const int32_t *const *block_tables;
    kv_dtype kv_type;
    /* The score of a key: s = scale * (q . k), with scale = 1 / sqrt(head_dim)
     * when this field is 0 (the default); then, when softcap > 0, soft-capped
     * before the softmax: s = softcap * tanh(s / softcap), computed as
     * softcap * tanhf((q . k) * (scale / softcap)) (Gemma 2; llama.cpp's
     * order). softcap 0 (the default): no cap. */
    float scale;
    float softcap;
    /* 1: multi-head latent attention (DeepSeek, be_mla): one latent row per
     * position, head_dim values, whose first head_dim / 2 are the K pool's
     * row and the rest the V pool's (pool rows of head_dim / 2, n_kv_heads 1);
     * the key and the value are that whole row, so out gets head_dim values
     * per head (the caller reads the first kv_lora_rank); q and out are
     * [T][n_heads][head_dim]. Under arithmetic "llama" the scale multiplies
     * the scores (llama.cpp's MLA), never q first. 0 (the default): K and V
     * rows of head_dim in their own pools. */
    int latent;
} be_attn;

/* Multi-head latent attention's step before the attention (DeepSeek-V2/V3):
 * per token, RoPE (rope_tables' cos / sin, rope_dim / 2 each) over the last
 * rope_dim values of each query head's row and of the latent row, then the
 * latent row written into the token's cache slot: its first row / 2 values
 * as the K pool's row, the rest as the V pool's (head_dim row / 2, one KV
 * head, be_attn.latent). */
typedef struct be_mla {
    int T;
    float *q;                     /* [T][n_heads][row] */
    float *kv;                    /* [T][row]: [latent (normed) | rope key] */
    int n_heads, row, rope_dim;
    const float *rope_cos, *rope_sin;
    int rope_interleaved;         /* pairs (2i, 2i + 1) instead of (i, i + half) */
    void *k_cache, *v_cache;      /* this layer's part of the pool */
    kv_dtype kv_type;
    int block_size;
    const int32_t *pos, *seq;
    const int32_t *const *block_tables;
} be_mla;

/* A mixture-of-experts feed-forward over the batch: router softmax, top-k
 * (ties keep the lower id; norm_topk: weights renormalized), each expert
 * once over the tokens routed to it, the weighted outputs summed per token
 * in expert order; a shared expert (sh_gate->data set) gated by
 * sigmoid(sh_router . x) added. out = the block's output (not yet added to
 * the residual stream). The scratch buffers are device memory the model
 * layer sized for max_tokens. */
typedef struct be_moe {
    int T, hidden, n_experts, n_used, norm_topk;
    const float *x;               /* [T][hidden], normed */
    float *out;                   /* [T][hidden] */
    const matrix *router;
    const matrix *exp_gate, *exp_up, *exp_down; /* n_experts each */
    const matrix *sh_gate, *sh_up, *sh_down, *sh_router;
    float *router_logits, *route_w, *expert_w, *acc, *xg, *yg, *h1, *h2;
    int32_t *route_ids, *expert_tokens;
    /* DeepSeek's routing; zero = off for each. sigmoid: p = sigmoid(logit)
     * instead of the softmax. sel_bias ([n_experts], NULL: none) is added to p
     * to choose the experts, never to weigh them. n_group > 1: the experts
     * form n_group equal groups, a group's score is the sum of its two best
     * (group_max: its best) chosen scores, and only the topk_group best
     * groups' experts may be chosen (ties keep the lower id). The weights (p
     * of the chosen, normalized when norm_topk) are multiplied by w_scale
     * (0: 1). sh_router NULL or without data: the shared expert is added
     * ungated. */
    int sigmoid, n_group, topk_group, group_max;
    const float *sel_bias;
    float w_scale;
    /* calibration: the input of each expert's down projection (expert -2: the shared one); NULL: none */
    void (*observe)(void *octx, int expert, const float *x, int T, int cols);
    void *octx;
} be_moe;

/* What a model may need of a backend beyond the always-present operations
 * (backend_ops.supports). New model features get a new entry here; a backend
 * that does not know an entry answers 0, so the model refuses to load with a
 * clear error instead of running something the backend ignores. */
typedef enum be_feature {
    BE_FEAT_WEIGHT_DTYPE = 0, /* arg: an dtype_t of a weight matrix */
    BE_FEAT_KV_DTYPE,         /* arg: a kv_dtype */
    BE_FEAT_HEAD_DIM,         /* arg: head_dim */
    BE_FEAT_ATTN_WINDOW,      /* sliding-window attention (be_attn.window) */
    BE_FEAT_QK_NORM,          /* per-head q/k RMSNorm (be_qkv.q_norm) */
    BE_FEAT_BIAS,             /* matmul biases */
    BE_FEAT_MOE,              /* mixture-of-experts layers (moe) */
    BE_FEAT_ATTN_SCALE,       /* be_attn.scale other than 1 / sqrt(head_dim) */
    BE_FEAT_SOFTCAP,          /* be_attn.softcap (attention soft-capping) */
    BE_FEAT_QK_NORM_ALL,      /* be_qkv.qk_norm_all (q/k RMSNorm over the whole projection) */
    BE_FEAT_MLA,              /* multi-head latent attention: mla_rope_kv and be_attn.latent; arg: the latent row's width (mla_dim) */
    BE_FEAT_MOE_ROUTING,      /* be_moe's DeepSeek routing fields (sigmoid, sel_bias, groups, w_scale, no gate) */
    BE_FEAT_COUNT
} be_feature;

typedef struct backend_ops {
    const char *name;
    /* 1: device memory is host memory (the model layer may hand host buffers as outputs) */
    int unified_memory;
    void (*destroy)(void *ctx);
    /* what runs ("cpu avx512"): for reports */
    const char *(*describe)(const void *ctx);

    /* ------------------------------------------------------- memory */
    /* Device memory (64-byte aligned), NULL when out of memory. */
    void *(*alloc)(void *ctx, size_t bytes);
    void (*free)(void *ctx, void *p);
    void (*copy)(void *ctx, void *dst, const void *src, size_t bytes, be_copy_kind kind);
    /* Take a weight matrix for the backend's matmuls (repack into its own
     * layout, or upload): W->data may then point at *storage (released with
     * free) and W->packed be set; *storage NULL when W stays as it is.
     * Results are bit-identical either way. */
    xllm_status (*upload_matrix)(void *ctx, matrix *W, void **storage, xllm_error *err);
    /* Load-time planning over the model's matrices (may set their
     * plan_threads / plan_kernel; never changes results); *report: a JSON
     * object describing the choices (caller frees). */
    xllm_status (*plan)(void *ctx, matrix *const *ws, size_t n, int max_tokens, int budget_ms,
                        struct cJSON **report, xllm_error *err);

    /* -------------------------------------- operations over a batch */
    /* x[t] = row tokens[t] of E (tokens: host; E as the model file stores it, in host
     * memory: the embedding table is looked up, never uploaded) */
    void (*embed)(void *ctx, const matrix *E, const int32_t *tokens, int T, float *x);
    /* cos/sin [T][half] of pos[t] * inv_freq[i] (pos, inv_freq: host); theta_scale > 0:
     * llama.cpp's angles instead (plain RoPE, arithmetic "llama"): (float)pos[t]
     * multiplied by theta_scale i times in float, cosf / sinf */
    void (*rope_tables)(void *ctx, const int32_t *pos, int T, const double *inv_freq, float theta_scale, int half,
                        float *cos, float *sin);
    /* out[i] = rmsnorm(x row rows[i]) * w for i < T rows of n (rows: host, NULL: row i);
     * flags: BE_PREPARE (only with rows NULL) */
    void (*rmsnorm)(void *ctx, const float *x, const int32_t *rows, int T, const float *w, float eps, int n,
                    float *out, unsigned flags);
    /* y[t][r] = x[t] . W[r] + bias[r] (bias may be NULL); flags BE_ACT_READY, BE_ADD (tmp) */
    void (*matmul)(void *ctx, const float *x, int T, const matrix *W, const float *bias, float *y, float *tmp,
                   unsigned flags);
    /* h[t][r] = silu(G[g0 + r] . x_t + gb) * (U[u0 + r] . x_t + ub), r < I, in one
     * pass (G and U may be one fused gate_up matrix); tmp [T][I]. Returns 0
     * (nothing done) when the backend has no fused form for these shapes. */
    int (*matmul_silu_mul)(void *ctx, const float *x, int T, const matrix *G, int64_t g0, const float *gb,
                           const matrix *U, int64_t u0, const float *ub, int64_t I, float *h, float *tmp,
                           unsigned flags);
    /* h[t][i] = silu(g[t][i]) * u[t][i], i < n; g, u rows ldg, ldu apart, h rows n apart (h may be g) */
    void (*silu_mul)(void *ctx, float *h, const float *g, size_t ldg, const float *u, size_t ldu, int T, size_t n);
    /* x[i] += y[i] */
    void (*add)(void *ctx, float *x, const float *y, size_t n);
    /* dst[t][0..n) = src[t][0..n), rows ldd and lds apart */
    void (*copy_rows)(void *ctx, float *dst, size_t ldd, const float *src, size_t lds, int T, size_t n);
    /* The fused q/k/v step (matmuls + q/k norm + RoPE + KV write, be_qkv).
     * Returns 0 (nothing done) when the backend has no fused form for these shapes. */
    int (*qkv_rope_kv)(void *ctx, const be_qkv *d);
    /* The same after the matmuls: q/k norm, RoPE on d->q, d->k, K/V written. */
    void (*rope_kv)(void *ctx, const be_qkv *d);
    void (*attention)(void *ctx, const be_attn *d);
    void (*moe)(void *ctx, const be_moe *d);
    /* As silu_mul with GELU's tanh approximation (PyTorch's
     * gelu(approximate="tanh")): h[t][i] = gelu(g[t][i]) * u[t][i],
     * gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (GeGLU:
     * Gemma). NULL: the backend has none, and models that need it are
     * refused at load. */
    void (*gelu_mul)(void *ctx, float *h, const float *g, size_t ldg, const float *u, size_t ldu, int T, size_t n);
    /* x[i] *= s, i < n, one float product each (Gemma's embedding scale).
     * NULL: the backend has none, and models that need it are refused at load. */
    void (*scale)(void *ctx, float *x, size_t n, float s);
    /* Multi-head latent attention's RoPE + latent cache write (be_mla).
     * NULL: the backend has none, and models that need it are refused at load. */
    void (*mla_rope_kv)(void *ctx, const be_mla *d);

    /* ------------------------------------------------ capabilities */
    /* 1 when the backend implements feature f (for arg, see be_feature);
     * NULL: everything. Asked at load, so what a backend lacks is a clear
     * error there, never a crash in the middle of a step. */
    int (*supports)(void *ctx, be_feature f, int arg);

    /* ------------------------------------------------ pinned host memory */
    /* Host memory the device copies to and from directly (a GPU's
     * page-locked, host-visible memory), for the engine's KV swap pool: a
     * block swapped out or in is one device copy, no bounce through a
     * staging buffer. The host may read and write it like any memory; copy()
     * takes it as the host side. NULL, or host_alloc answering NULL: the
     * caller uses ordinary memory (the CPU; a unified-memory device). */
    void *(*host_alloc)(void *ctx, size_t bytes);
    void (*host_free)(void *ctx, void *p);

    /* ------------------------------------------------ own memory */
    /* The most memory the backend holds for itself, besides what alloc() and
     * host_alloc() hand out: its scratch, the host-visible ring of step
     * inputs, the staging pool, split attention's partials - device memory or
     * pinned host memory, whatever is allocated now and at most later, for the
     * options it was created with, a KV pool of block_size-token blocks and
     * contexts of at most max_context tokens.
     * The engine's memory plan counts it inside memory.workspace_size, before
     * the KV pool is sized. NULL: none (the CPU: its scratch is ordinary
     * process memory). Not thread-safe (the model's forward lock). */
    size_t (*own_bytes)(void *ctx, int block_size, int max_context);
} backend_ops;



/* A backend instance: its table and its context. */
typedef struct backend {
    const backend_ops *ops;
    void *ctx;
} backend;

/* backend_ops.supports, or 1 when the backend answers for everything. */
static inline int backend_supports(const backend *be, be_feature f, int arg) {
    return !be->ops->supports || be->ops->supports(be->ctx, f, arg);
}

/* What a model asks of a backend at creation: sizes its scratch once. Fields
 * a backend has no use for are ignored. */
typedef struct backend_options {
    int n_threads;          /* 0: all online CPUs */
    size_t max_cols;        /* widest matrix row a matmul will see */
    size_t max_tokens;      /* most tokens one operation gets */
    /* attention scratch; head_dim: a query / output row per head (be_attn.head_dim),
     * which for latent attention (MLA) is the latent row (mla_dim), not half of it */
    int n_heads, n_kv_heads, head_dim, max_positions;
    const char *cpu_level;  /* cpu: kernel level (scalar, avx2, avx512, neon; NULL or "auto": the best) */
    const char *attention;  /* cpu: attention strategy (per-item, split, shared; NULL: chosen per step) */
    int no_repack;          /* cpu: keep quantized matrices in their stored layout */
    const char *plan_cache; /* cpu: the planner's cache file (NULL: measure at every load) */
    int arith_llama;        /* llama.cpp's arithmetic where it differs (xllm_model_options.arithmetic) */
    int device;             /* device backends (vulkan): which device, 0 = the first */
} backend_options;

typedef xllm_status (*backend_create_fn)(backend *be, const backend_options *o, xllm_error *err);

/* Create the backend called `name` (NULL or "": "cpu"). An unknown name is
 * XLLM_ERR_UNSUPPORTED naming the known backends. Thread-safe once every
 * backend_register call has returned. */
xllm_status backend_create(backend *be, const char *name, const backend_options *o, xllm_error *err);
/* Free the context (the memory it handed out must be freed first). */
void backend_destroy(backend *be);
/* Add a backend under `name` (a string that outlives the process's use of
 * it) besides the built-in ones; a name taken is XLLM_ERR_INVALID_ARGUMENT.
 * Not thread-safe: call it before loading models. */
xllm_status backend_register(const char *name, backend_create_fn create, xllm_error *err);
/* The known backends' names, comma-separated ("cpu"). Not thread-safe. */
const char *backend_names(void);

#endif
