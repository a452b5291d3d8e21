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
void xllm_free(void *ptr);

/* ---------------------------------------------------------------- tokenizer */

typedef struct xllm_tokenizer xllm_tokenizer;

/* Load a tokenizer from a directory holding tokenizer.json (and optionally
 * tokenizer_config.json), or from a tokenizer.json path. On failure returns
 * NULL and fills err. Free with xllm_tokenizer_free(). */
xllm_tokenizer *xllm_tokenizer_load(const char *path, xllm_error *err);
void xllm_tokenizer_free(xllm_tokenizer *tok);

/* Encode UTF-8 text. add_special: add the post-processor's special tokens
 * (e.g. BOS). On success *ids (free with xllm_free) holds *n_ids ids. */
xllm_status xllm_tokenize(const xllm_tokenizer *tok, const char *text, size_t len,
                          int add_special, int32_t **ids, size_t *n_ids, xllm_error *err);

/* Decode ids to UTF-8 text; skip_special drops special tokens. On success
 * *text (NUL-terminated, free with xllm_free) and, when text_len is not NULL,
 * its length in bytes (the text may itself hold NUL bytes, e.g. <0x00>). */
xllm_status xllm_detokenize(const xllm_tokenizer *tok, const int32_t *ids, size_t n_ids,
                            int skip_special, char **text, size_t *text_len, xllm_error *err);

int32_t xllm_tokenizer_vocab_size(const xllm_tokenizer *tok);

/* -------------------------------------------------------------------- model */

typedef struct xllm_model xllm_model;

typedef struct xllm_model_options {
    int n_threads;        /* 0 = all online CPUs */
    int max_context;      /* 0 = the model's max_position_embeddings (capped at 8192) */
    int kv_block_size;    /* tokens per KV block; 0 = 16 */
    int max_batch_seqs;   /* sequences in flight at once; 0 = 16 */
    int64_t kv_tokens;    /* KV pool capacity in tokens; 0 = max_context * max_batch_seqs (capped at 1 GiB) */
    int max_step_tokens;  /* most tokens in one forward step (prefill is chunked to fit); 0 = 512 */
} xllm_model_options;

xllm_model_options xllm_model_options_default(void);

/* Load a model from a HuggingFace checkpoint directory. Weights are mmap-ed.
 * opts may be NULL (defaults). Returns NULL and fills err on failure.
 * Free with xllm_model_free(). */
xllm_model *xllm_model_load(const char *path, const xllm_model_options *opts, xllm_error *err);
void xllm_model_free(xllm_model *model);

/* The model's tokenizer; borrowed, lives as long as the model. May be NULL
 * when the checkpoint has no tokenizer.json. */
const xllm_tokenizer *xllm_model_tokenizer(const xllm_model *model);
int32_t xllm_model_vocab_size(const xllm_model *model);
/* The load-time plan as JSON: kernel level, threads, and per weight shape and
 * batch bucket the measured thread choice (XLLM_PLAN=0 skips planning).
 * *json freed with xllm_free. */
xllm_status xllm_model_plan(const xllm_model *model, char **json, xllm_error *err);
int32_t xllm_model_context_size(const xllm_model *model);

/* Logits of a single sequence of ids (no BOS added). out must hold
 * vocab floats (all_positions = 0: last position only) or n_ids * vocab
 * floats (all_positions = 1, row-major). */
xllm_status xllm_model_logits(xllm_model *model, const int32_t *ids, size_t n_ids,
                              int all_positions, float *out, xllm_error *err);

/* ------------------------------------------------------------- generation */

#define XLLM_MAX_STOP_STRINGS 16
#define XLLM_MAX_STOP_IDS 16

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
} xllm_sampling_params;

xllm_sampling_params xllm_sampling_params_default(void);

typedef struct xllm_request {
    const char *prompt;          /* UTF-8 text, tokenized with special tokens; or NULL */
    const int32_t *prompt_ids;   /* used when prompt is NULL (no BOS added) */
    size_t n_prompt_ids;
    xllm_sampling_params params;
} xllm_request;

typedef enum xllm_finish_reason {
    XLLM_FINISH_LENGTH = 0,      /* max_new_tokens reached (or the context filled) */
    XLLM_FINISH_STOP = 1,        /* eos id, stop id or stop string */
    XLLM_FINISH_CANCELLED = 2    /* the callback asked to stop */
} xllm_finish_reason;

typedef struct xllm_result {
    int32_t *prompt_ids;   size_t n_prompt_ids;
    int32_t *ids;          size_t n_ids;     /* generated ids only */
    char *text;                              /* decoded generated text (stop string cut off), NUL-terminated */
    size_t text_len;                         /* its length in bytes (text may hold NUL bytes) */
    xllm_finish_reason finish_reason;
} xllm_result;

/* Called once per generated token with the newly complete text (never half a
 * UTF-8 character; may be empty). Return nonzero to stop that request. */
typedef int (*xllm_token_callback)(void *user, size_t request_index, int32_t token,
                                   const char *text, size_t text_len);

/* Generate for n requests at once (one batched forward per step). On success
 * *results holds n results; free with xllm_results_free(*results, n).
 * On failure returns the status, fills err, and *results is NULL. */
xllm_status xllm_generate(xllm_model *model, const xllm_request *requests, size_t n,
                          xllm_token_callback cb, void *user,
                          xllm_result **results, xllm_error *err);
void xllm_results_free(xllm_result *results, size_t n);

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
} xllm_convert_options;

xllm_convert_options xllm_convert_options_default(void);

/* Convert a HuggingFace checkpoint directory or a GGUF file into one .xllm
 * file (or, with to_gguf, a GGUF file) at dst, written to a temporary file
 * and renamed, so a failed or interrupted convert leaves nothing at dst.
 * Returns the status and fills err. */
xllm_status xllm_convert(const char *src, const char *dst, const xllm_convert_options *opts, xllm_error *err);

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

xllm_synth_options xllm_synth_options_default(void);

/* The shape names, comma-separated (static string). */
const char *xllm_synth_shapes(void);

/* Write a model of a real architecture's shape with random weights (sd
 * 1/sqrt(fan_in), norms 1) and a synthesized SentencePiece-style tokenizer of
 * the shape's vocabulary size, to any of: an .xllm file (dtype), a GGUF file
 * (gguf_type; the same bytes as the .xllm when it is dtype's twin), an HF
 * directory (f32 safetensors holding the .xllm's values exactly, quantized
 * ones dequantized). Weights depend only on shape and seed; tensors are
 * streamed, so memory stays near the largest tensor. At least one output. */
xllm_status xllm_synth(const xllm_synth_options *opts, xllm_error *err);

/* Describe a model file or directory as JSON: {"path", "format", "metadata"
 * (the .xllm metadata, or config.json), "tensors": [{"name","type","shape",
 * "bytes"}...], "total_bytes"}. *json is freed with xllm_free. */
xllm_status xllm_model_info(const char *path, char **json, xllm_error *err);

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
xllm_status xllm_chat_template_render(const char *template_source, const char *messages_json,
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
xllm_chat_template *xllm_chat_template_load(const char *path, xllm_error *err);
void xllm_chat_template_free(xllm_chat_template *t);

/* Render messages with the loaded template (arguments as for
 * xllm_chat_template_render; options override the special tokens). name
 * selects a named template; NULL chooses as HF does: "tool_use" when options
 * give non-null "tools" and that template exists, else "default". A loaded
 * template is read-only: several threads may apply it at once. */
xllm_status xllm_chat_template_apply(const xllm_chat_template *t, const char *name, const char *messages_json,
                                     const char *options_json, char **out, size_t *out_len, xllm_error *err);

/* The source of a template (name NULL: "default"), or NULL; borrowed. */
const char *xllm_chat_template_source(const xllm_chat_template *t, const char *name);

/* A special token's text from tokenizer_config.json ("bos_token",
 * "eos_token", ...), or NULL when unset; borrowed. */
const char *xllm_chat_template_special_token(const xllm_chat_template *t, const char *name);

/* ---------------------------------------------------------------- profile */

/* Per-operator kernel profiling for the whole process (also switched on by
 * XLLM_PROFILE=1 when a model loads). The report is JSON: {"total_ms", "ops":
 * [{"op", "ms", "share", "calls", "gflop_s", "gb_s"}...]}; free with xllm_free. */
void xllm_profile_enable(int on);
void xllm_profile_reset(void);
xllm_status xllm_profile_report(char **json, xllm_error *err);

/* Bytes currently allocated through libxllm's allocator (not counting mmaps). */
size_t xllm_allocated_bytes(void);

#ifdef __cplusplus
}
#endif
#endif
