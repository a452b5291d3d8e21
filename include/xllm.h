/*
 * xllm.h - the one public C interface of libxllm.
 *
 * Opaque handles with _load/_free pairs, *_default() option structs, status
 * codes plus a caller-owned error struct. Every function says what it returns
 * on failure and who frees what. Memory handed to the caller (id arrays,
 * strings, result arrays) is released with xllm_free() or the named *_free().
 */
#ifndef XLLM_H
#define XLLM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define XLLM_VERSION "0.1.0"

/* Every function of this header is marked XLLM_API: libxllm.so is built
 * with hidden visibility and exports exactly these (the ctest check_exports
 * compares the library's exported symbols with this header). The pragma
 * below keeps an unmarked declaration exported all the same, so a missing
 * mark fails check_exports by name, never a program at run time. */
#if defined(__GNUC__) || defined(__clang__)
#define XLLM_API __attribute__((visibility("default")))
#pragma GCC visibility push(default)
#else
#define XLLM_API
#endif

typedef enum xllm_status {
    XLLM_OK = 0,
    XLLM_ERR_INVALID_ARGUMENT = 1, /* a parameter the caller passed is wrong */
    XLLM_ERR_IO = 2,               /* a file could not be opened/read/mapped */
    XLLM_ERR_FORMAT = 3,           /* a file is malformed (bad JSON, bad header, ...) */
    XLLM_ERR_UNSUPPORTED = 4,      /* valid input we do not handle (model_type, dtype...) */
    XLLM_ERR_OUT_OF_MEMORY = 5,
    XLLM_ERR_CONTEXT_OVERFLOW = 6, /* prompt (+ generation) longer than the context */
    XLLM_ERR_INTERNAL = 7
} xllm_status;

/* Caller-owned error report. Functions fill it on failure (code != XLLM_OK);
 * a NULL pointer is allowed and means "don't report". */
typedef struct xllm_error {
    xllm_status code;
    char message[1024];
} xllm_error;

/* Release memory that libxllm handed to the caller (ids, strings). NULL is ok. */
XLLM_API void xllm_free(void *ptr);

/* ---------------------------------------------------------------- tokenizer */

typedef struct xllm_tokenizer xllm_tokenizer;

/* Load a tokenizer from a directory holding tokenizer.json (and optionally
 * tokenizer_config.json), or from a tokenizer.json path. On failure returns
 * NULL and fills err. Free with xllm_tokenizer_free(). */
XLLM_API xllm_tokenizer *xllm_tokenizer_load(const char *path, xllm_error *err);
XLLM_API void xllm_tokenizer_free(xllm_tokenizer *tok);

/* Encode UTF-8 text. add_special: add the post-processor's special tokens
 * (e.g. BOS). On success *ids (free with xllm_free) holds *n_ids ids. */
XLLM_API xllm_status xllm_tokenize(const xllm_tokenizer *tok, const char *text, size_t len,
                          int add_special, int32_t **ids, size_t *n_ids, xllm_error *err);

/* xllm_tokenize_ex's flags. */
enum {
    XLLM_TOKENIZE_ADD_SPECIAL = 1,   /* the post-processor's special tokens (e.g. BOS) */
    XLLM_TOKENIZE_PARSE_SPECIAL = 2, /* a special token's text in the input becomes that token (HF's default);
                                        without it, and without MARKED, special-token text is plain text */
    XLLM_TOKENIZE_MARKED = 4         /* special-token text becomes the token except between U+FDD0 and U+FDD1
                                        (the marks are removed): text from xllm_tokenizer_mark_special placed
                                        into markup, e.g. request text rendered by a chat template */
};

/* xllm_tokenize with flags (XLLM_TOKENIZE_*); xllm_tokenize(.., add_special, ..)
 * is xllm_tokenize_ex(.., PARSE_SPECIAL | (add_special ? ADD_SPECIAL : 0), ..).
 * Thread-safe (any number of calls at once on one tokenizer). */
XLLM_API xllm_status xllm_tokenize_ex(const xllm_tokenizer *tok, const char *text, size_t len, unsigned flags,
                             int32_t **ids, size_t *n_ids, xllm_error *err);

/* Copy text with every special token's text wrapped in U+FDD0 ... U+FDD1 (a
 * U+FDD0 or U+FDD1 already in the text becomes U+FFFD), so that after it is
 * placed into a template's markup, xllm_tokenize_ex(.., XLLM_TOKENIZE_MARKED)
 * reads it as plain text and the markup's special tokens as tokens. *out is
 * NUL-terminated (free with xllm_free). Thread-safe. */
XLLM_API xllm_status xllm_tokenizer_mark_special(const xllm_tokenizer *tok, const char *text, size_t len, char **out,
                                        size_t *out_len, xllm_error *err);

/* Decode ids to UTF-8 text; skip_special drops special tokens. On success
 * *text (NUL-terminated, free with xllm_free) and, when text_len is not NULL,
 * its length in bytes (the text may itself hold NUL bytes, e.g. <0x00>). */
XLLM_API xllm_status xllm_detokenize(const xllm_tokenizer *tok, const int32_t *ids, size_t n_ids,
                            int skip_special, char **text, size_t *text_len, xllm_error *err);

XLLM_API int32_t xllm_tokenizer_vocab_size(const xllm_tokenizer *tok);

/* -------------------------------------------------------------------- model */

typedef struct xllm_model xllm_model;

typedef struct xllm_model_options {
    int n_threads;        /* 0 = all online CPUs */
    int max_context;      /* 0 = the model's max_position_embeddings (capped at 8192) */
    int kv_block_size;    /* tokens per KV block; 0 = 16 */
    int max_batch_seqs;   /* sequences in flight at once; 0 = 16 */
    int64_t kv_tokens;    /* KV pool capacity in tokens; 0 = max_batch_seqs sequences of max_context
                             tokens, each in whole KV blocks (capped at 1 GiB) */
    int max_step_tokens;  /* most tokens in one forward step (prefill is chunked to fit); 0 = 512 */
    /* A part of the model: layers [layer_begin, layer_end) only, their tensors
     * alone bound (and so read from the file), plus the embedding when
     * layer_begin is 0 and the final norm + lm_head when layer_end is the
     * layer count; its KV pool holds those layers. 0, 0 = the whole model. A
     * part cannot generate by itself (xllm_generate fails); pipeline
     * parallelism below loads parts. */
    int layer_begin, layer_end;
    /* Pipeline parallelism over MPI (docs/ARCHITECTURE.md): pp_size > 1 makes
     * this process one of pp_size ranks of an MPI job (mpirun -np pp_size);
     * each rank loads the same path with the same options and gets its part
     * of the layers. Rank 0 generates as usual; the others call
     * xllm_model_pp_worker. */
    int pp_size;
    const char *pp_layers;      /* layers per rank, e.g. "8,8,6"; NULL = as even as can be */
    int pp_microbatches;        /* micro-batches per step (stages overlap); 0 = 2 */
    int pp_timeout_ms;          /* a rank waiting this long for another ends the job; 0 = 60000 */
    int pp_stats;               /* 1 = each rank prints a stats line at the end (layers, bound bytes, RSS, bubble) */
    int pp_test_fail_after;     /* tests: rank 1 exits (or hangs, pp_test_fail_hang) after this many steps */
    int pp_test_fail_hang;
    /* Execution switches (added at the end: the struct's prefix is unchanged). The
     * library never reads the environment; the CLI and the Python package set
     * these from the environment variables named below. Zero = the default. */
    const char *backend;   /* execution backend by name; NULL or "" = "cpu" (unknown: XLLM_ERR_UNSUPPORTED) */
    const char *cpu_level; /* CPU kernel level: scalar, avx2, avx512, neon; NULL/"auto" = the best (XLLM_CPU) */
    const char *attention; /* attention strategy: per-item, split, shared; NULL = chosen per step (XLLM_ATTN) */
    int no_fuse;           /* 1 = run the unfused operator sequence, same bits (XLLM_FUSE=0) */
    int no_repack;         /* 1 = keep quantized weights in their stored layout, same bits (XLLM_REPACK=0) */
    int no_plan;           /* 1 = skip the load-time planner (XLLM_PLAN=0) */
    int profile;           /* 1 = turn per-operator profiling on at load (XLLM_PROFILE=1) */
    int debug_checks;      /* 1 = engines on this model check the KV pool's invariants every step (XLLM_DEBUG=1) */
    /* The load-time planner's cache file: plans measured once per machine and
     * model shape, reused by later loads (NULL = measure at every load; the
     * CLI and Python default to ~/.cache/xllm/plans.json, XLLM_PLAN_CACHE) */
    const char *plan_cache;
    /* Progress of the load (NULL = none), called on the loading thread:
     * stage "loading" with fractions from 0 (the weights as they are read and
     * repacked for the kernels; a load with nothing to repack jumps to 1) up
     * to 1, then "planning" 0 and 1 around the load-time plan when there is
     * one. Typedef below (xllm_progress_fn). */
    void (*progress)(void *user, const char *stage, double fraction);
    void *progress_user;
    /* How the KV cache stores K and V (docs/ARCHITECTURE.md): "f32" (NULL or ""),
     * "f16", "q8" (int8 with an f16 scale per 32 values: 0.27x of f32's bytes at
     * head_dim 64 and up; head_dim a multiple of 4, at least 8), or "auto": each engine picks the widest of
     * f32, f16, q8 in which max_batch_size full contexts fit its KV budget
     * (workspace_size's share, else the f32 pool of kv_tokens) and reports
     * it (xllm_engine_stats "kv_dtype"). Anything else: XLLM_ERR_INVALID_ARGUMENT. */
    const char *kv_dtype;
    /* Whose floating-point arithmetic (XLLM_ARITH): "xllm" (NULL or "") or
     * "llama": llama.cpp's CPU arithmetic where it differs from ours, to give
     * its numbers on its GGUF files (docs/ARCHITECTURE.md, "Arithmetic"): its
     * activation scales for Q4_0/Q4_1/Q8_0 weights (rounded to f16),
     * RMSNorm's sum of squares in double, plain RoPE's angles as powers of
     * theta^(-2/head_dim) taken in float, and, for batches under 64 tokens,
     * its flash attention's f16 arithmetic (query, keys and values rounded to
     * f16, the weighted sum of values kept in f16). Use with kv_dtype "f16"
     * (llama.cpp's cache). Slower attention; results otherwise as fast.
     * Anything else: XLLM_ERR_INVALID_ARGUMENT. */
    const char *arithmetic;
    /* Which device a device backend (backend "vulkan") runs on: 0 = the
     * first the driver lists (xllm info --devices lists them; XLLM_DEVICE). */
    int device;
} xllm_model_options;

XLLM_API xllm_model_options xllm_model_options_default(void);

/* Load a model from a HuggingFace checkpoint directory. Weights are mmap-ed.
 * opts may be NULL (defaults). Returns NULL and fills err on failure.
 * Free with xllm_model_free(). */
XLLM_API xllm_model *xllm_model_load(const char *path, const xllm_model_options *opts, xllm_error *err);
XLLM_API void xllm_model_free(xllm_model *model);

/* The model's tokenizer; borrowed, lives as long as the model. May be NULL
 * when the checkpoint has no tokenizer.json. */
XLLM_API const xllm_tokenizer *xllm_model_tokenizer(const xllm_model *model);
XLLM_API int32_t xllm_model_vocab_size(const xllm_model *model);
/* The load-time plan as JSON: kernel level, threads, and per weight shape and
 * batch bucket the measured thread choice (options.no_plan skips planning).
 * *json freed with xllm_free. */
XLLM_API xllm_status xllm_model_plan(const xllm_model *model, char **json, xllm_error *err);
XLLM_API int32_t xllm_model_context_size(const xllm_model *model);

/* Pipeline parallelism: this process's rank (0 when pp_size <= 1). Thread-safe. */
XLLM_API int xllm_model_pp_rank(const xllm_model *model);
/* Ranks 1..pp_size-1: run this rank's stage until rank 0 frees its model,
 * then return XLLM_OK (free the model after). A peer that fails or stops
 * answering ends the whole job with a message (MPI_Abort). Fails at once on
 * rank 0 or on a model loaded without pp_size > 1. Not thread-safe: call it
 * once, from the thread that loaded the model. */
XLLM_API xllm_status xllm_model_pp_worker(xllm_model *model, xllm_error *err);

/* Logits of a single sequence of ids (no BOS added). out must hold
 * vocab floats (all_positions = 0: last position only) or n_ids * vocab
 * floats (all_positions = 1, row-major). */
XLLM_API xllm_status xllm_model_logits(xllm_model *model, const int32_t *ids, size_t n_ids,
                              int all_positions, float *out, xllm_error *err);

/* Attention probabilities of a single sequence of ids (no BOS added): for
 * each asked-for layer (layers[0..n_layers), in that order, each once;
 * layers NULL: every layer in order, n_layers ignored), each query head's
 * softmax(scale * q.k + mask) over the keys, computed on a reference path
 * (the host, double precision, from the layer's q and k after q/k norm and
 * RoPE as the model's attention reads them; the fused attention kernels are
 * not used and not slowed) with everything the model's family applies: its
 * attention scale, soft-capping, the layer's sliding window (query i sees
 * keys i - window + 1 .. i), the causal mask, grouped-query heads (query head
 * h reads KV head h / (heads / kv_heads)). average_heads = 1 averages over
 * the query heads. On success *probs (free with xllm_free) holds
 * shape[0] x shape[1] x shape[2] x shape[3] floats = layers x heads x n_ids x
 * n_ids, row-major [layer][head][query][key] (heads = 1 when averaged):
 * masked entries are 0, each query's row sums to 1. The output, and the q/k kept meanwhile, are each limited to
 * XLLM_ATTENTION_MAX_BYTES (XLLM_ERR_INVALID_ARGUMENT past it: ask for fewer
 * layers, average the heads, or a shorter sequence). Not with --pp. Multi-head
 * latent attention (DeepSeek-V2/V3): per head, q_h . k_h with the decompressed
 * key k_h = [K_b,h c | k_pe] (kv_b's rows for the head times the latent, the
 * shared rope key) and scale 1 / sqrt(qk_nope + qk_rope), one KV head.
 * Thread-safe: serialized with the model's other forward passes. */
#define XLLM_ATTENTION_MAX_BYTES (1 << 30)
XLLM_API xllm_status xllm_model_attention(xllm_model *model, const int32_t *ids, size_t n_ids, const int32_t *layers,
                                          size_t n_layers, int average_heads, float **probs, int64_t shape[4],
                                          xllm_error *err);

/* ------------------------------------------------------------- embeddings */

typedef enum xllm_pooling {
    XLLM_POOLING_MEAN = 0,   /* the mean over the sequence's tokens */
    XLLM_POOLING_LAST = 1,   /* the last token's (decoder embedding models) */
    XLLM_POOLING_CLS = 2     /* the first token's */
} xllm_pooling;

/* Floats per embedding (the model's hidden size). */
XLLM_API int32_t xllm_model_hidden_size(const xllm_model *model);

/* Embeddings of n_inputs id sequences (no BOS added): the final hidden
 * states, after the model's final norm, pooled per sequence, L2-normalized
 * when normalize is 1; out holds n_inputs x xllm_model_hidden_size floats.
 * Short sequences share forward passes (packed up to the model's step size,
 * each attending only to itself); a sequence longer than the context is
 * XLLM_ERR_CONTEXT_OVERFLOW. Thread-safe: serialized with the model's other
 * forward passes (an engine's steps wait meanwhile). */
XLLM_API xllm_status xllm_model_embed(xllm_model *model, const int32_t *const *ids, const size_t *n_ids, size_t n_inputs,
                             xllm_pooling pooling, int normalize, float *out, xllm_error *err);

/* ------------------------------------------------------------- generation */

#define XLLM_MAX_STOP_STRINGS 16
#define XLLM_MAX_STOP_IDS 16
#define XLLM_MAX_TOP_LOGPROBS 20

typedef struct xllm_sampling_params {
    int max_new_tokens;        /* default 256 */
    int do_sample;             /* 0 = greedy regardless of temperature; default 1 */
    float temperature;         /* <= 0 means greedy; default 1.0 */
    int top_k;                 /* 0 = off */
    float top_p;               /* 1.0 = off */
    float min_p;               /* 0 = off */
    float repetition_penalty;  /* HF multiplicative, over prompt + output; 1.0 = off */
    float presence_penalty;    /* OpenAI additive, over output; 0 = off */
    float frequency_penalty;   /* OpenAI additive, over output; 0 = off */
    uint64_t seed;             /* used when has_seed; else a random seed */
    int has_seed;
    int ignore_eos;            /* 1 = do not stop at the model's eos ids */
    int n_stop;                /* stop strings (caller-owned, copied at generate) */
    const char *stop[XLLM_MAX_STOP_STRINGS];
    int n_stop_ids;            /* extra stop token ids, beside the model's eos ids */
    int32_t stop_ids[XLLM_MAX_STOP_IDS];
    int logprobs;              /* 1 = report each generated token's log-probability (log-softmax of the
                                  model's raw logits, before penalties and temperature) */
    int top_logprobs;          /* with logprobs: also the top_logprobs most likely ids and their
                                  log-probabilities at each step (0..XLLM_MAX_TOP_LOGPROBS) */
    /* Constrained decoding, off when grammar_kind is XLLM_GRAMMAR_NONE (the default): every
     * generated token keeps the output a prefix of some string the constraint accepts, and
     * generation stops when the constraint is complete. grammar: the JSON Schema text
     * (XLLM_GRAMMAR_JSON_SCHEMA), GBNF text (XLLM_GRAMMAR_GBNF) or a regular expression
     * (XLLM_GRAMMAR_REGEX); unused (may be NULL) for XLLM_GRAMMAR_JSON_OBJECT.
     * grammar_prefix / grammar_suffix: literal text the output must start / end with around the
     * constrained value (NULL = none), e.g. "<tool_call>\n" and "\n</tool_call>" for a forced
     * tool call. All three strings are caller-owned and copied at submit. A constraint that does
     * not compile, or uses a feature that is not supported, fails the submit with
     * XLLM_ERR_INVALID_ARGUMENT and a message naming what is not supported. */
    int grammar_kind;          /* xllm_grammar_kind */
    const char *grammar;
    const char *grammar_prefix;
    const char *grammar_suffix;
} xllm_sampling_params;

typedef enum xllm_grammar_kind {
    XLLM_GRAMMAR_NONE = 0,
    XLLM_GRAMMAR_JSON_SCHEMA = 1,
    XLLM_GRAMMAR_JSON_OBJECT = 2,   /* any JSON object */
    XLLM_GRAMMAR_GBNF = 3,          /* llama.cpp's GBNF, root rule "root" */
    XLLM_GRAMMAR_REGEX = 4
} xllm_grammar_kind;

XLLM_API xllm_sampling_params xllm_sampling_params_default(void);

/* The scalar sampling parameters as one table (src/api/params.c): what the
 * HTTP server, `xllm run`, the response cache and the Python package read,
 * so a new parameter is one row. name is the xllm_sampling_params field (and
 * Python's SamplingParams keyword); http the OpenAI request field (NULL: not
 * on the HTTP API); cli the `xllm run` flag and cli_alias its other
 * spellings, space-separated (NULL: none); [min, max] what the library and
 * CLI accept (min excluded when min_open), [http_min, http_max] what the
 * HTTP API accepts (OpenAI's ranges); offset the field's place in
 * xllm_sampling_params (a float for XLLM_PARAM_FLOAT, else an int);
 * cache_key: the response cache keys on it. Static, thread-safe. */
typedef enum xllm_param_type { XLLM_PARAM_FLOAT = 0, XLLM_PARAM_INT = 1, XLLM_PARAM_BOOL = 2 } xllm_param_type;
typedef struct xllm_param_info {
    const char *name;
    const char *http;
    const char *cli;
    const char *cli_alias;
    int type;                  /* xllm_param_type */
    double min, max;
    int min_open;
    double http_min, http_max;
    double default_value;
    size_t offset;
    int cache_key;
    const char *help;
} xllm_param_info;
XLLM_API const xllm_param_info *xllm_sampling_params_table(size_t *n);
/* The row named name (an xllm_sampling_params field), or NULL. */
XLLM_API const xllm_param_info *xllm_sampling_param_find(const char *name);
/* Read a row's field of p as a double. */
XLLM_API double xllm_sampling_param_get(const xllm_sampling_params *p, const xllm_param_info *row);
/* Set a row's field of p: 1, or 0 (p unchanged) when v is outside [min, max] or not whole for an int/bool. */
XLLM_API int xllm_sampling_param_set(xllm_sampling_params *p, const xllm_param_info *row, double v);

/* Scheduling class of a request (the elastic preemption policy, see
 * xllm_engine_options.preempt_mode): online work preempts offline work. */
typedef enum xllm_priority {
    XLLM_PRIORITY_ONLINE = 0,    /* interactive (default) */
    XLLM_PRIORITY_OFFLINE = 1    /* batch */
} xllm_priority;

#define XLLM_MAX_SAMPLES 64

typedef struct xllm_request {
    const char *prompt;          /* UTF-8 text, tokenized with special tokens; or NULL */
    const int32_t *prompt_ids;   /* used when prompt is NULL (no BOS added) */
    size_t n_prompt_ids;
    xllm_sampling_params params;
    int n;                       /* samples from one prompt (0 or 1 = one; at most XLLM_MAX_SAMPLES). The
                                    prompt is prefilled once; sample j uses seed + j when params.has_seed.
                                    xllm_generate takes n <= 1 only (use xllm_engine for more) */
    xllm_priority priority;
} xllm_request;

typedef enum xllm_finish_reason {
    XLLM_FINISH_LENGTH = 0,      /* max_new_tokens reached (or the context filled) */
    XLLM_FINISH_STOP = 1,        /* eos id, stop id or stop string */
    XLLM_FINISH_CANCELLED = 2    /* the callback asked to stop, or the request was aborted */
} xllm_finish_reason;

typedef struct xllm_result {
    int32_t *prompt_ids;   size_t n_prompt_ids;
    int32_t *ids;          size_t n_ids;     /* generated ids only */
    char *text;                              /* decoded generated text (stop string cut off), NUL-terminated */
    size_t text_len;                         /* its length in bytes (text may hold NUL bytes) */
    xllm_finish_reason finish_reason;
    /* with params.logprobs (else NULL): per generated id its log-probability, and
     * top_logprobs alternatives per id (row-major n_ids x n_top) */
    float *logprobs;
    int32_t *top_ids;
    float *top_logprobs;
    int n_top;
    /* timings taken on the scheduler thread as tokens are produced (so they
     * do not depend on when the caller reads them): seconds from submission
     * to the first generated token, and from the first to the last one (0
     * for a response-cache hit) */
    double first_token_s;
    double decode_s;
} xllm_result;

/* Called once per generated token with the newly complete text (never half a
 * UTF-8 character; may be empty). Return nonzero to stop that request. */
typedef int (*xllm_token_callback)(void *user, size_t request_index, int32_t token,
                                   const char *text, size_t text_len);

/* Generate for n requests at once: a thin wrapper over the model's own
 * serving engine (see xllm_engine below): submit all, wait for all. On success
 * *results holds n results; free with xllm_results_free(*results, n).
 * On failure returns the status, fills err, and *results is NULL; a bad
 * request fails the call before any work. The callback runs on the calling
 * thread. Thread-safe: calls from several threads on one model share its
 * engine (their requests batch together); a callback may call anything but
 * xllm_model_free of the model it runs on (refused: XLLM_ERR_INVALID_ARGUMENT). */
XLLM_API xllm_status xllm_generate(xllm_model *model, const xllm_request *requests, size_t n,
                          xllm_token_callback cb, void *user,
                          xllm_result **results, xllm_error *err);
XLLM_API void xllm_results_free(xllm_result *results, size_t n);

/* ------------------------------------------------------------ serving engine */

/* A long-lived engine over one loaded model: requests are submitted from any
 * thread while it runs; one scheduler thread forms each step's flattened batch
 * (continuous batching, chunked prefill), samples, and streams output into
 * per-request queues. It owns a paged KV pool whose blocks are allocated as
 * sequences grow, shared between requests with the same prefix (prefix
 * cache), and reclaimed by preemption when the pool runs out.
 *
 * Exactness: a request's tokens never depend on what else runs, on
 * preemption, on a prefix-cache or response-cache hit (greedy and seeded
 * sampling alike): every kernel computes each output the same way whatever
 * the batch, and each request's sampler state follows it through preemption.
 *
 * Threading contract: every xllm_engine_* function is thread-safe and may be
 * called from any thread, except xllm_engine_free, which must not overlap any
 * other call on the same engine (it aborts what still runs and joins the
 * scheduler). Several engines may run on one model (their forward passes are
 * serialized on the model). The model must outlive its engines.
 */
typedef struct xllm_engine xllm_engine;
typedef uint64_t xllm_request_id;

typedef enum xllm_preempt_mode {
    XLLM_PREEMPT_RECOMPUTE = 0,  /* victim's blocks freed; re-queued with prompt + generated tokens */
    XLLM_PREEMPT_SWAP = 1,       /* victim's blocks copied to a page-locked host pool, back when there is room */
    XLLM_PREEMPT_ELASTIC = 2     /* offline before online, newest first; swap while the host pool has room,
                                    else recompute (default) */
} xllm_preempt_mode;

typedef enum xllm_cache_policy {
    XLLM_CACHE_LRU = 0,          /* finished requests' full blocks stay cached, evicted least-recently-used */
    XLLM_CACHE_NONE = 1          /* no prefix caching */
} xllm_cache_policy;

#define XLLM_MAX_KNOWLEDGE 16

typedef struct xllm_engine_options {
    int max_batch_size;          /* sequences per step; 0 = the model's max_batch_seqs */
    int timeout_ms;              /* dynamic batching window: when idle and a request arrives, wait up to this
                                    for more (up to max_batch_size) before the first step; 0 = none */
    xllm_preempt_mode preempt_mode;
    int64_t workspace_size;      /* bytes for scratch + KV pool + host swap pool; 0 = a KV pool of the
                                    model's kv_tokens (plus the swap pool) */
    int64_t swap_size;           /* bytes of the host swap pool (inside workspace_size when that is set);
                                    -1 = none; 0 = a quarter of the KV budget in swap/elastic modes, none in
                                    recompute */
    xllm_cache_policy cache_policy;
    int response_cache;          /* 1 = exact-match response cache on (default off) */
    int64_t response_cache_max_bytes;   /* 0 = 64 MiB */
    int response_cache_max_entries;     /* 0 = 4096 */
    int n_knowledge;             /* named texts prefilled at start and pinned (knowledge prefixes) */
    const char *knowledge_name[XLLM_MAX_KNOWLEDGE];
    const char *knowledge_path[XLLM_MAX_KNOWLEDGE];    /* a UTF-8 text file */
    const char *knowledge_kv_path[XLLM_MAX_KNOWLEDGE]; /* NULL, or a KV file: loaded when it is valid for this
                                                          model and text, else computed and written there */
    int verbose;                 /* 1 = print the memory split at start to stderr */
} xllm_engine_options;

XLLM_API xllm_engine_options xllm_engine_options_default(void);

/* Read a YAML config (docs/CONFIG.md): engine options, model options, and
 * the model path (`model:`), resolved relative to the config file. Strings in
 * *eopts and *model_path point into storage owned by the caller through
 * *storage (free with xllm_free after the options are no longer used).
 * An unknown key, a wrong type or an out-of-range value is
 * XLLM_ERR_INVALID_ARGUMENT naming the key and its line. Thread-safe. */
XLLM_API xllm_status xllm_config_load(const char *path, xllm_engine_options *eopts, xllm_model_options *mopts,
                             const char **model_path, void **storage, xllm_error *err);

/* Start an engine on a loaded model (its scheduler thread sleeps until work
 * arrives). Refuses (NULL, err filled) a workspace too small for one
 * full-context sequence, naming the sizes. Free with xllm_engine_free. */
XLLM_API xllm_engine *xllm_engine_create(xllm_model *model, const xllm_engine_options *opts, xllm_error *err);
/* Abort everything still running, join the scheduler, free all. NULL is ok. */
XLLM_API void xllm_engine_free(xllm_engine *e);
/* The engine a model creates for itself (xllm_generate's); borrowed. */
XLLM_API xllm_engine *xllm_model_engine(xllm_model *model);

/* Queue a request; *id identifies it until xllm_engine_release. The prompt
 * is tokenized and validated here (a bad request fails now, with nothing
 * queued); prompt strings and arrays are copied. notify, when not NULL, is
 * called (on the scheduler thread, without engine locks held) each time the
 * request has new output or finishes; it must return quickly and may call
 * only xllm_engine_abort. */
typedef void (*xllm_notify_fn)(void *user, xllm_request_id id);
XLLM_API xllm_status xllm_engine_submit(xllm_engine *e, const xllm_request *req, xllm_notify_fn notify, void *notify_user,
                               xllm_request_id *id, xllm_error *err);

/* One piece of a request's output stream: the tokens one sample produced
 * since the last chunk of that sample, and their newly complete text (text
 * that could still become a stop string is held back until resolved). */
typedef struct xllm_chunk {
    int sample;                  /* 0 .. n-1 */
    const int32_t *ids;          /* valid until the next poll or release of this request */
    size_t n_ids;
    const char *text;
    size_t text_len;
    const uint32_t *text_ends;   /* per id: bytes of text complete after it (text_ends[n_ids-1] == text_len) */
    int finished;                /* this sample is done (no more chunks for it) */
    xllm_finish_reason finish_reason;
    const float *logprobs;       /* with params.logprobs: per id (else NULL) */
    const int32_t *top_ids;      /* n_ids x n_top */
    const float *top_logprobs;
    int n_top;
} xllm_chunk;

typedef enum xllm_poll_result {
    XLLM_POLL_TIMEOUT = 0,       /* nothing new within timeout_ms */
    XLLM_POLL_CHUNK = 1,         /* *chunk filled */
    XLLM_POLL_DONE = 2,          /* every sample finished and was delivered; results are ready */
    XLLM_POLL_ERROR = -1         /* unknown id, or the request failed (err says why) */
} xllm_poll_result;

/* Wait up to timeout_ms (-1 = without limit, 0 = do not wait) for the next
 * chunk of a request. One thread at a time should poll a given request. */
XLLM_API xllm_poll_result xllm_engine_poll(xllm_engine *e, xllm_request_id id, xllm_chunk *chunk, int timeout_ms,
                                  xllm_error *err);
/* Stop a request: its sequences finish with XLLM_FINISH_CANCELLED and their
 * KV blocks are freed within one step. Unknown or finished ids are ignored. */
XLLM_API void xllm_engine_abort(xllm_engine *e, xllm_request_id id);
/* After XLLM_POLL_DONE (or at any time, waiting until done): the request's n
 * results (free with xllm_results_free(*results, *n)); the request is released. */
XLLM_API xllm_status xllm_engine_result(xllm_engine *e, xllm_request_id id, xllm_result **results, size_t *n,
                               xllm_error *err);
/* Forget a request (aborting it if it still runs). */
XLLM_API void xllm_engine_release(xllm_engine *e, xllm_request_id id);

/* Counters and pool state as JSON: requests_submitted, requests_finished,
 * requests_aborted, requests_running, requests_waiting, prefill_tokens
 * (tokens actually computed in prefill), decode_tokens, steps, preemptions
 * {recompute, swap}, prefix_cache {lookups, hit_blocks, hit_tokens,
 * evictions}, response_cache {hits, misses, entries, bytes}, kv
 * {block_size, blocks_total, blocks_free, blocks_cached, blocks_used,
 * blocks_pinned, swap_blocks_total, swap_blocks_used}, memory {scratch_bytes,
 * kv_bytes, swap_bytes}, knowledge [{name, tokens, blocks}]. Free with xllm_free. */
XLLM_API char *xllm_engine_stats(xllm_engine *e);

/* Knowledge prefixes: prefill `text` (tokenized with special tokens, as a
 * prompt is) once, pin its KV so LRU never evicts it; a request whose prompt
 * ids start with its ids reuses the KV. Blocks until the prefill is done. */
XLLM_API xllm_status xllm_engine_add_knowledge(xllm_engine *e, const char *name, const char *text, xllm_error *err);
/* Write a knowledge prefix's ids and KV to a file (atomic rename). */
XLLM_API xllm_status xllm_engine_save_knowledge(xllm_engine *e, const char *name, const char *path, xllm_error *err);
/* Load a knowledge prefix from a file written by save, validated against
 * this model (shapes and a fingerprint of the weights) and, when text is not
 * NULL, against text's token ids; a mismatch is XLLM_ERR_INVALID_ARGUMENT. */
XLLM_API xllm_status xllm_engine_load_knowledge(xllm_engine *e, const char *name, const char *path, const char *text,
                                       xllm_error *err);

/* ---------------------------------------------------------------- convert */

/* Progress of a long operation: stage name and fraction done in [0, 1]. */
typedef void (*xllm_progress_fn)(void *user, const char *stage, double fraction);

typedef struct xllm_convert_options {
    const char *dtype;        /* default type of matmul weights: "f32", "f16", "bf16", "q8", "q4", "q4m", llama.cpp's
                                 "q4_k", "q5_k", "q6_k", or its mixes "q4_k_m", "q5_k_m" (v_proj and down_proj
                                 of some layers and lm_head in Q6_K; not fused); NULL = f32 */
    int group_size;           /* q4/q4m group: 32, 64 or 128; 0 = 32 (q8 always uses 32) */
    const char *policy;       /* per tensor class overrides, e.g. "embed=q8,attn=q4,mlp=q4,lm_head=q8,norm=f32";
                                 classes: embed, attn, mlp, lm_head, norm, router; NULL = defaults */
    const char *calib_file;   /* text for activation-aware scaling and clipping of q4 weights; NULL = none */
    int calib_tokens;         /* at most this many calibration tokens; 0 = 8192 */
    int no_fuse;              /* 1 = keep q/k/v and gate/up as separate matrices */
    int n_threads;            /* for calibration; 0 = all CPUs */
    xllm_progress_fn progress;
    void *progress_user;
    int to_gguf;              /* 1 = write a GGUF v3 file instead of .xllm (unfused; types GGUF has) */
    /* execution switches of calibration's forward passes (backend, cpu_level,
     * attention, no_fuse, no_repack; results are the same); NULL = defaults */
    const struct xllm_model_options *calib_model_options;
} xllm_convert_options;

XLLM_API xllm_convert_options xllm_convert_options_default(void);

/* Convert a HuggingFace checkpoint directory or a GGUF file into one .xllm
 * file (or, with to_gguf, a GGUF file) at dst, written to a temporary file
 * and renamed, so a failed or interrupted convert leaves nothing at dst.
 * Returns the status and fills err. */
XLLM_API xllm_status xllm_convert(const char *src, const char *dst, const xllm_convert_options *opts, xllm_error *err);

/* Remove the temporary files that writers in progress (convert, synth, the
 * .xllm and GGUF writers) have created next to their destinations. Meant for
 * a SIGINT/SIGTERM handler before the process ends: async-signal-safe (no
 * allocation, no lock; only unlink). A writer interrupted this way must not
 * be continued. Output files are created with mode 0644 less the umask. */
XLLM_API void xllm_remove_temp_files(void);

/* ------------------------------------------------------------------ synth */

/* Random-weight models of real shapes, for benchmarks without downloads. */
typedef struct xllm_synth_options {
    const char *shape;      /* one of xllm_synth_shapes() */
    const char *dtype;      /* .xllm matmul type, policy as xllm_convert: "f32", "f16", "bf16", "q8", "q4", "q4m"; NULL = f32 */
    const char *out;        /* .xllm file, or NULL */
    const char *gguf_out;   /* GGUF file, or NULL */
    const char *gguf_type;  /* "F32", "F16", "Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K", "Q4_K_M", "Q5_K_M"; NULL = dtype's twin (q8 -> Q8_0, q4 -> Q4_0) */
    const char *hf_dir;     /* HF checkpoint directory (created), or NULL */
    uint64_t seed;          /* default 1 */
    int n_threads;          /* 0 = all CPUs */
    xllm_progress_fn progress;
    void *progress_user;
} xllm_synth_options;

XLLM_API xllm_synth_options xllm_synth_options_default(void);

/* The shape names, comma-separated (static string). */
XLLM_API const char *xllm_synth_shapes(void);

/* Write a model of a real architecture's shape with random weights (sd
 * 1/sqrt(fan_in), norms 1) and a synthesized SentencePiece-style tokenizer of
 * the shape's vocabulary size, to any of: an .xllm file (dtype), a GGUF file
 * (gguf_type; the same bytes as the .xllm when it is dtype's twin), an HF
 * directory (f32 safetensors holding the .xllm's values exactly, quantized
 * ones dequantized). Weights depend only on shape and seed; tensors are
 * streamed, so memory stays near the largest tensor. At least one output. */
XLLM_API xllm_status xllm_synth(const xllm_synth_options *opts, xllm_error *err);

/* Describe a model file or directory as JSON: {"path", "format", "metadata"
 * (the .xllm metadata, or config.json), "tensors": [{"name","type","shape",
 * "bytes"}...], "total_bytes"}. *json is freed with xllm_free. */
XLLM_API xllm_status xllm_model_info(const char *path, char **json, xllm_error *err);

/* The execution backends this build has and the devices each sees, as text
 * (one line per device; for "vulkan", what the Vulkan loader lists, or why
 * there is nothing: no loader, no driver, a device lacking a feature).
 * *text is freed with xllm_free. Thread-safe. */
XLLM_API xllm_status xllm_backend_devices(char **text, xllm_error *err);

/* ----------------------------------------------------------- chat templates */

/* Render a Jinja2 chat template exactly as HuggingFace's apply_chat_template
 * does (Jinja2's sandbox with trim_blocks, lstrip_blocks and loopcontrols,
 * a tojson that keeps non-ASCII, raise_exception, strftime_now).
 *   messages_json: a JSON array of messages ({"role": ..., "content": ...,
 *     "tool_calls": ..., ...}).
 *   options_json: NULL or a JSON object of template variables, e.g.
 *     {"add_generation_prompt": true, "tools": [...], "bos_token": "<s>",
 *      "enable_thinking": false}; add_generation_prompt defaults to false,
 *     tools and documents to None.
 * On success *out (NUL-terminated, free with xllm_free) holds the text and
 * *out_len (may be NULL) its length in bytes. Errors name the template line
 * ("chat template line 12: unknown filter 'xyz'"): a construct we do not
 * support is XLLM_ERR_UNSUPPORTED, a malformed template, bad JSON or an error
 * while rendering (a type error, an undefined attribute) XLLM_ERR_FORMAT, the
 * template's own raise_exception() XLLM_ERR_INVALID_ARGUMENT. */
XLLM_API xllm_status xllm_chat_template_render(const char *template_source, const char *messages_json,
                                      const char *options_json, char **out, size_t *out_len, xllm_error *err);

typedef struct xllm_chat_template xllm_chat_template;

/* Load the chat template(s) of a model or tokenizer directory: the
 * "chat_template" of tokenizer_config.json (a string, or a list of
 * {"name", "template"}), else a chat_template.jinja file; path may also name
 * a tokenizer_config.json. The special tokens there (bos_token, eos_token,
 * unk_token, pad_token, ..., additional_special_tokens; strings or
 * {"content": ...}) become template variables, as HF passes them. Returns
 * NULL and fills err when there is no template or the file is malformed;
 * a template that does not compile is reported when it is applied.
 * Free with xllm_chat_template_free(). */
XLLM_API xllm_chat_template *xllm_chat_template_load(const char *path, xllm_error *err);
XLLM_API void xllm_chat_template_free(xllm_chat_template *t);

/* Render messages with the loaded template (arguments as for
 * xllm_chat_template_render; options override the special tokens). name
 * selects a named template; NULL chooses as HF does: "tool_use" when options
 * give non-null "tools" and that template exists, else "default". A loaded
 * template is read-only: several threads may apply it at once. */
XLLM_API xllm_status xllm_chat_template_apply(const xllm_chat_template *t, const char *name, const char *messages_json,
                                     const char *options_json, char **out, size_t *out_len, xllm_error *err);

/* The source of a template (name NULL: "default"), or NULL; borrowed. */
XLLM_API const char *xllm_chat_template_source(const xllm_chat_template *t, const char *name);

/* A special token's text from tokenizer_config.json ("bos_token",
 * "eos_token", ...), or NULL when unset; borrowed. */
XLLM_API const char *xllm_chat_template_special_token(const xllm_chat_template *t, const char *name);

/* ---------------------------------------------------------------- profile */

/* Per-operator kernel profiling for the whole process (also switched on by
 * xllm_model_options.profile when a model loads; the CLI and Python set it
 * from XLLM_PROFILE=1). The report is JSON: {"total_ms", "ops":
 * [{"op", "ms", "share", "calls", "gflop_s", "gb_s"}...]}; free with xllm_free. */
XLLM_API void xllm_profile_enable(int on);
XLLM_API void xllm_profile_reset(void);
XLLM_API xllm_status xllm_profile_report(char **json, xllm_error *err);

/* Bytes currently allocated through libxllm's allocator (not counting mmaps). */
XLLM_API size_t xllm_allocated_bytes(void);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif
