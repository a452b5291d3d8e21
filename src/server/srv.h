/*
 * srv.h - the internals shared by the files of `xllm serve` (src/server).
 *
 * The server sits on the public C API only (include/xllm.h): it never touches
 * a tensor. One process serves several models, each with its own xllm_engine.
 * Its connection layer (listener.c) holds connections on one epoll thread
 * until a request is complete, then a worker of its thread pool tokenizes, submits to the
 * engine, and waits for the request's chunks (woken by the engine's notify
 * callback) while it writes the response. The engine's scheduler thread does
 * all model work.
 *
 * Files, one concept each:
 *   server.c    start-up, the model registry, shutdown (server.h is its API)
 *   listener.c  the connection layer: epoll, deadlines, limits, the worker pool, writes
 *   http_parse.c the strict HTTP/1.1 head parser, the chunked decoder
 *   json_strict.c strict JSON with a memory bound
 *   http.c      routing and admission at the head, endpoint handlers
 *   sbuf.c      a growable byte buffer and a JSON string writer
 *   yaml_json.c a YAML file read into a cJSON tree (the server's config)
 *   config.c    the server config: models, cascades, PII policies
 *   request.c   an OpenAI request body parsed and validated into a srv_req
 *   run.c       one request's run on an engine: chunks, SSE and JSON responses
 *   metrics.c   counters and histograms, Prometheus text
 *   pii.c       PII detectors, masking and restoring (also across chunks)
 *   cascade.c   multi-model cascades
 *   messages.c  chat messages normalized for the template, rendered
 *   tool_calls.c tool-call formats, parsing, tool_choice constraints
 *   reasoning.c <think> split into reasoning_content
 *   chat_out.c  a chat choice's output: content, reasoning, tool calls
 *
 * Thread-safety: every function here may be called from any worker
 * thread at once (they touch their arguments, srv_model's atomic counters,
 * and the mutex-guarded metrics and waiter pools), except config_load_server,
 * model_open and model_close, which run on the main thread before serving
 * starts or after it stopped. A srv_req, run, pii_map or pii_stream belongs
 * to one request's thread; a pii_policy is read-only once created.
 */
#ifndef XLLM_SERVER_SRV_H
#define XLLM_SERVER_SRV_H

#include "xllm.h"
#include "server.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- sbuf.c */

/* A growable byte buffer; on allocation failure it sets oom and drops writes. */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

void sb_put(sbuf *b, const void *s, size_t n);
/* Room for need elements of size bytes in the array at items (a T **) of
 * capacity *cap: doubling from first, never past max elements. 0, or -1
 * (past max, or out of memory; the array and *cap unchanged). */
int srv_reserve(void *items, size_t *cap, size_t need, size_t size, size_t first, size_t max);
void sb_puts(sbuf *b, const char *s);
void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s[0..n) as a JSON string literal (quotes included): control bytes escaped,
 * invalid UTF-8 written as U+FFFD. */
void sb_json_str(sbuf *b, const char *s, size_t n);
/* A float as JSON (non-finite numbers as null, -inf as -9999.0 as OpenAI does). */
void sb_json_num(sbuf *b, double v);
void sb_free(sbuf *b);
/* A NUL-terminated copy of the buffer's bytes (ownership moves to the caller), or NULL. */
char *sb_take(sbuf *b);
/* 1 when s[0..n) is valid UTF-8 (no overlongs, no surrogates). */
int utf8_valid(const char *s, size_t n);

/* ------------------------------------------------------------ yaml_json.c */

/* Read a YAML file (at most 1 MiB; no aliases, anchors or tags; nesting at
 * most 32) into a cJSON tree: mappings become objects, sequences arrays,
 * plain scalars that read as numbers or booleans or null become those, the
 * rest strings. On error returns NULL with "FILE:LINE: why" in err. */
cJSON *yaml_read_json(const char *path, char *err, size_t err_cap);

/* ------------------------------------------------------------------ pii.c */

typedef struct pii_policy pii_policy;   /* compiled detectors + what to do */
typedef struct pii_map pii_map;         /* one request's placeholder -> value */
typedef struct pii_stream pii_stream;   /* one output stream's filter */

/* Build a policy from its config object ({detectors: [...], custom: [{name,
 * pattern}], restore: bool, mask_output: bool}). NULL + err on error. */
pii_policy *pii_policy_create(const cJSON *cfg, char *err, size_t err_cap);
void pii_policy_free(pii_policy *p);
int pii_policy_restores(const pii_policy *p);
int pii_policy_masks_output(const pii_policy *p);
pii_map *pii_map_create(void);
void pii_map_free(pii_map *m);
/* Mask text[0..n) into out (placeholders [TYPE_k] numbered per map and
 * type; a value seen before gets its placeholder again). Returns the number
 * of values masked. */
int pii_mask(const pii_policy *p, pii_map *m, const char *text, size_t n, sbuf *out);
/* An output filter: push raw text, get processed text (output masked if the
 * policy says so, then the map's placeholders restored if it says so),
 * holding back what could still become a match or a placeholder. */
pii_stream *pii_stream_create(const pii_policy *p, pii_map *m);
void pii_stream_free(pii_stream *s);
void pii_stream_push(pii_stream *s, const char *text, size_t n, int final, sbuf *out);

/* -------------------------------------------------------------- metrics.c */

/* endpoint ids (endpoints.c holds the table: path, method, label, handler);
 * the generating endpoints come first (ids <= EP_CHAT are logged per request) */
enum { EP_COMPLETIONS, EP_CHAT, EP_MODELS, EP_HEALTH, EP_METRICS, EP_TOKENIZE, EP_DETOKENIZE, EP_RESPONSES,
       EP_EMBEDDINGS, EP_OTHER, EP_COUNT };

void metrics_init(void);

void metrics_request(int endpoint, int status);
void metrics_ttft(double seconds);
void metrics_token_latency(double seconds);
struct srv_state;
/* The Prometheus text exposition of every counter, histogram and the
 * engines' gauges; into out. */
void metrics_render(struct srv_state *s, sbuf *out);

/* ---------------------------------------------------------- embed_batch.c */

/* xllm_model_embed, with concurrent callers' inputs combined into shared
 * calls (see embed_batch.c). Thread-safe. */
xllm_status embed_batched(xllm_model *model, const int32_t *const *ids, const size_t *len, size_t n, xllm_pooling pool,
                          int normalize, float *out, xllm_error *err);
/* Requests embedded so far, and the library calls that embedded them. */
void embed_batch_counts(long long *requests, long long *forward_calls);

/* ----------------------------------------------------------------- models */

typedef struct cascade_stage {
    char *model;          /* a served model's name */
    char *template_text;  /* with {prompt} and {previous}; NULL = "{prompt}" then "{previous}" */
    int max_tokens;       /* 0 = the request's */
    double accept_logprob; /* end the cascade here when the answer's mean token log-probability is above
                              this; NAN = never (the last stage always ends it) */
    atomic_llong runs, accepted;
} cascade_stage;

typedef struct srv_model {
    char *name;
    char *path;
    xllm_model *model;               /* NULL for a cascade */
    xllm_engine *engine;
    const xllm_tokenizer *tok;
    xllm_chat_template *tmpl;        /* NULL: no chat template (unless tmpl_src) */
    char *tmpl_src;                  /* a .jinja file's template source, rendered as it is */
    xllm_chat_template *tmpl_specials; /* with tmpl_src: the model's own template config, for its special tokens */
    void *cfg_storage;               /* xllm_config_load's strings */
    int ctx;                         /* context tokens */
    int max_batch;                   /* sequences per step */
    atomic_int inflight;             /* requests submitted and not yet done */
    atomic_llong prompt_tokens, generated_tokens;
    int parse_special;               /* request text's special-token strings become tokens (HF/vLLM behaviour) */
    pii_policy *pii;                 /* NULL: no masking */
    atomic_llong pii_masked;
    /* cascades */
    int n_stages;
    cascade_stage *stages;
    long created;
    /* what the chat template can do (messages.c, chat_features_detect) */
    int tool_fmt;                    /* tool_format */
    int thinks;                      /* writes reasoning in <think> tags */
    int knows_developer;             /* names the developer role */
    int keeps_null_content;          /* tests an assistant's content for none (DeepSeek-V3: its tool-call turns) */
    int args_as_text;                /* concatenates tool-call arguments as text (DeepSeek-V3) */
} srv_model;

/* ------------------------------------------------------------------ state */


typedef struct srv_state {
    srv_options opt;
    srv_model **models;
    int n_models;
    atomic_int ready;       /* models loaded */
    atomic_int stopping;    /* shutting down: runs abort, new requests get 503 */
    atomic_int active;      /* requests between their first byte and their completion (http.c) */
    int actual_port;
    long started;
} srv_state;

srv_model *srv_find_model(srv_state *s, const char *name);
/* Log a line to stderr with a timestamp (never prompt or output text). */
void srv_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double srv_now(void);

/* --------------------------------------------------------------- config.c */

/* Load the server config file into s->models (models loaded and engines
 * started). 0 on success; else err filled. */
int config_load_server(srv_state *s, const char *path, char *err, size_t err_cap);
/* Load one model (path: directory or file; engine config: NULL or a YAML
 * file for xllm_config_load). */
srv_model *model_open(const char *name, const char *path, const char *engine_config, const char *chat_template,
                      const srv_options *o, int response_cache_off, char *err, size_t err_cap);
void model_close(srv_model *m);

/* -------------------------------------------------------------- request.c */

typedef struct http_error {
    int status;
    char message[512];
    const char *type;       /* "invalid_request_error", ... */
    const char *param;      /* NULL or the field */
    const char *code;       /* NULL or "context_length_exceeded", ... */
    const char *allow;      /* 405: the methods the path allows (the Allow header); set after http_err */
} http_error;

int http_err(http_error *e, int status, const char *type, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

#define SRV_MAX_PROMPTS 64

typedef struct srv_req {
    int chat;                 /* 1 = /v1/chat/completions */
    srv_model *m;
    char *model_name;         /* as the request named it */
    int n_prompts;
    int32_t *ids[SRV_MAX_PROMPTS];
    size_t n_ids[SRV_MAX_PROMPTS];
    char *echo_text[SRV_MAX_PROMPTS];   /* completions with echo: the prompt as text */
    char *user_text;          /* cascades: the request's text ({prompt}) */
    pii_map *pii[SRV_MAX_PROMPTS];
    xllm_sampling_params params;
    char *stop_store[XLLM_MAX_STOP_STRINGS];
    char *grammar_text;       /* params.grammar: the constraint's text (structured.c) */
    int n;                    /* samples per prompt */
    xllm_priority priority;
    int max_tokens_set;
    int stream, include_usage;
    int logprobs;             /* completions: the int; chat: 0/1 */
    int top_logprobs;
    int echo;
    /* chat: tools and reasoning (chat_out.c) */
    int tool_parse;           /* parse tool calls out of the output (tools given, tool_choice not none) */
    int tool_fmt;             /* tool_format */
    int max_tool_calls;       /* 1 when parallel_tool_calls is false */
    char *grammar_store;      /* the tool_choice constraint's schema */
    int think;                /* split <think> into reasoning_content */
    int think_open;           /* the prompt opened <think> already */
    int no_probe;             /* an HTTP/1.0 client: never sent an interim response (client_gone_probe) */
} srv_req;

/* Parse and validate a request body for model endpoints (chat = 1 for
 * chat completions). On failure returns the HTTP status with e filled; 0 on
 * success (free r with srv_req_free). */
int srv_req_parse(srv_state *s, int chat, const char *body, size_t len, srv_req *r, http_error *e);
void srv_req_free(srv_req *r);
/* structured.c: response_format / json_schema / grammar / regex into r's
 * constraint (params.grammar_kind, grammar_text). 0, or the HTTP status with e filled. */
int srv_parse_constraint(srv_req *r, const cJSON *body, http_error *e);
/* ------------------------------------------------------------- messages.c */

/* Read the template's features into m (tool_fmt, thinks, knows_developer). */
void chat_features_detect(srv_model *m);
/* Messages normalized for m's template (content a string, null -> "",
 * arguments objects, developer -> system where unknown), PII-masked into map
 * when m masks and map is not NULL; the last user text into user_text (may be
 * NULL). Returns a new array in *out. */
int chat_messages_normalize(srv_model *m, const cJSON *msgs, pii_map *map, cJSON **out, sbuf *user_text,
                            http_error *e);
/* Set by cascade.c around its stages' srv_req_parse: the log-probabilities
 * it asks for are read by the server only (never sent), so a stage whose
 * output is PII-filtered may give them. Per thread. */
extern _Thread_local int srv_internal_logprobs;
/* (request.c) The prompt text of normalized messages rendered by m's
 * template, with the tools and the request's chat_template_kwargs (an object
 * or NULL; its add_generation_prompt / tools / messages are ignored).
 * Unless m->parse_special, the request's strings are marked first
 * (xllm_tokenizer_mark_special): tokenize the result with
 * tokenize_prompt(.., marked = 1, ..) so that only the template's own markup
 * makes special tokens. */
int render_chat(srv_model *m, const cJSON *messages, const cJSON *tools, const cJSON *kwargs, char **out,
                http_error *e);
int chat_kwargs_check(const cJSON *kwargs, http_error *e);
/* A body's messages / tools / chat_template_kwargs checked and rendered as
 * chat does (/tokenize, cascades' stages); tokenize with marked = 1. */
int render_request_messages(srv_model *m, const cJSON *body, char **out, http_error *e);
/* m's tokenize flags for request text: add_special (BOS etc.); marked: the
 * text came from render_chat. */
unsigned prompt_flags(const srv_model *m, int add_special, int marked);
/* Tokenize text for model m (prompt_flags), checking the context; *ids is malloc-ed. */
int tokenize_prompt(srv_model *m, const char *text, size_t len, int add_special, int marked, int32_t **ids,
                    size_t *n, http_error *e);
/* Resolve max_tokens and check prompt + max_tokens against the context. */
int check_context(srv_req *r, http_error *e);

/* ------------------------------------------------------------------ run.c */

typedef struct run run;
size_t run_completion_tokens(const run *u);

/* Submit r's prompts (n samples each) to its model's engine. On failure
 * returns the HTTP status with e filled, nothing left running. fd is the
 * client's socket (disconnects abort the run), or -1. */
int run_start(srv_state *s, srv_req *r, int fd, run **out, http_error *e);
/* Non-streamed: wait until done and write the JSON response. Returns 0, or
 * -1 when the client went away or the run failed (e filled then). */
int run_wait_json(run *u, sbuf *out, http_error *e);
/* Streamed: produce the next SSE bytes into out (blocking until there are
 * some). Returns 1 while more may follow, 0 at the end ([DONE] written),
 * -1 when the client went away. */
int run_next_sse(run *u, sbuf *out);
void run_free(run *u);

/* The response id's random part (thread-safe). */
void make_id(char *buf, size_t cap, const char *prefix);

/* Wait objects that the engine's notify callback signals; never freed
 * while the server runs (a late notify on a reused one only wakes it). */
typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned long seq;
    struct waiter *next;
} waiter;
waiter *waiter_get(void);
void waiter_put(waiter *w);
void waiter_notify(void *user, xllm_request_id id);
/* Wait until notified after `seen` or ms pass; returns the new seq. */
unsigned long waiter_wait(waiter *w, unsigned long seen, int ms);
void waiters_free_all(void);

/* -------------------------------------------------------------- cascade.c */

/* Run a cascade non-streamed (the stream flag only changes the writer): the
 * final answer's text and stage report go to out as the endpoint's JSON or
 * SSE bytes. */
int cascade_run(srv_state *s, srv_model *c, const char *body, size_t len, int chat, int fd, sbuf *out,
                int *is_stream, http_error *e);

/* A client that has gone: its socket reports an error or a full close (a
 * half-close, shutdown(SHUT_WR) after the request, is not a hang-up). When
 * the read side has ended and probe is set (the response has not started),
 * an interim "100 Continue" is written once per fd-state change so that a
 * peer that closed entirely answers with a reset, seen on the next call. */
int client_gone(int fd);
int client_gone_probe(int fd, int *probed);

/* ---------------------------------------------------------- json_strict.c */

/* What json_check allows cJSON to allocate for a body of len bytes. */
size_t json_alloc_limit(size_t len);
/* Strict RFC 8259 check of s[0..n), allocation-free: 0, or -1 with the byte
 * position and what is wrong. At most max_allocs values, keys and strings. */
int json_check(const char *s, size_t n, size_t max_allocs, size_t *pos, const char **why);
/* A request body checked (400 naming the position) then parsed; NULL with e
 * filled on failure. The tree's memory is bounded (json_strict.c). */
cJSON *json_parse_body(const char *body, size_t len, http_error *e);

/* ----------------------------------------------------------- http_parse.c */

#define HTTP_MAX_HEAD 16384   /* request line + header fields, bytes (431 beyond) */
#define HTTP_MAX_FIELDS 100   /* header fields (431 beyond) */

typedef struct http_head {
    char method[16];
    char target[2048];        /* as sent (414 beyond) */
    char path[2048];          /* the target without its query */
    int minor;                /* HTTP/1.minor */
    long long content_length; /* -1: none */
    int chunked, keep_alive, expect_continue, has_auth;
    char auth[512];           /* the Authorization value (cut at 511 bytes) */
    size_t auth_len;
    size_t head_len;          /* bytes of the head, CRLFCRLF included */
    char why[128];            /* what was wrong, when parsing failed */
} http_head;

/* The end of a head in buf[0..n) (the byte after its CRLFCRLF, head_len set), or NULL. Pure. */
const char *http_head_end(const char *buf, size_t n, size_t *head_len);
/* Parse a complete head strictly (RFC 9112; see http_parse.c). 0, or the
 * HTTP status to refuse with (400, 414, 417, 431, 501, 505) with h->why. Pure. */
int http_head_parse(const char *buf, size_t n, http_head *h);
/* A chunked body decoder's state (zeroed to start). */
typedef struct http_chunk {
    int state, digits, crlf, ext;
    unsigned long long size;
} http_chunk;
/* Decode from in[0..n): consumes *used bytes and yields at most one data
 * piece (*data, *data_len). 1: the body ended; 0: more needed; -1: malformed. */
int http_chunk_step(http_chunk *c, const char *in, size_t n, size_t *used, const char **data, size_t *data_len);

/* ------------------------------------------------------------- listener.c */

/* The connection layer: one epoll thread holds every connection until its
 * request's head and body are complete (no thread for a connection that is
 * still sending), with deadlines on each phase, per-address and global
 * connection limits and a global budget of request-body bytes; then a worker
 * of a pool of kept threads runs the handler (http_handle), which answers through the functions
 * below, with a write-progress deadline. */
typedef struct http_conn http_conn;

void *http_start(srv_state *s, char *err, size_t cap);
void http_stop(void *d, srv_state *s);
/* Answer with a whole body (a HEAD request gets the headers only). extra:
 * NULL or more header lines, each ending in CRLF. 0, or -1 when the client is
 * gone or read nothing for the write deadline. Worker thread only. */
int http_respond(http_conn *c, int status, const char *ctype, const char *extra, const char *body, size_t len);
/* A chunked response: the head, then pieces, then the end. Same returns. */
int http_stream_begin(http_conn *c, int status, const char *ctype, const char *extra);
int http_stream_write(http_conn *c, const char *data, size_t len);
int http_stream_end(http_conn *c);
/* The client's socket (for run_start's disconnect checks). */
int http_conn_fd(const http_conn *c);
/* The status of the answer written so far (0: none), for the log and metrics. */
int http_conn_status(const http_conn *c);
/* The request's HTTP/1.minor. */
int http_conn_minor(const http_conn *c);
int http_conn_is_head(const http_conn *c);
/* An error's JSON body ({"error":{...}}) and its extra headers (WWW-Authenticate,
 * Allow, Retry-After) for http_respond. */
void http_error_body(const http_error *e, sbuf *b);
void http_error_headers(const http_error *e, char *out, size_t cap);

/* ----------------------------------------------------------------- http.c */

/* At the end of a request's head (on the epoll thread, must not block):
 * the path, the method, the API key and the declared body size, before any
 * body byte is read. 0 admits it (*endpoint set); else the status, e filled. */
int http_admit(srv_state *s, const http_head *h, int *endpoint, http_error *e);
/* A complete admitted request, on a worker thread: answer it through c. */
void http_handle(srv_state *s, http_conn *c, const http_head *h, int endpoint, const char *body, size_t len);

/* ------------------------------------------------------------ endpoints.c */

/* One HTTP request as a transport-neutral handler sees it. The handler
 * returns 0 with either out (+ status, ctype; defaults 200 and JSON) filled,
 * or next set: a stream, next(st, out) called until it returns 0 (end; 1 =
 * more follows, -1 = the client went away), free_state(st) at the end of the
 * request (http.c). On failure it returns the HTTP status with err filled. */
typedef struct srv_call {
    srv_state *s;
    const char *path;
    const char *body;
    size_t len;
    int fd;                  /* the client's socket (disconnect checks), or -1 */
    int status;
    const char *ctype;
    sbuf out;
    http_error err;
    int (*next)(void *st, sbuf *out);
    void (*free_state)(void *st);
    void *st;
} srv_call;
typedef int (*srv_handler)(srv_call *c);

typedef struct srv_endpoint {
    const char *path;
    const char *method;
    int id;                  /* EP_* (metrics and logs) */
    const char *label;       /* the metric's endpoint label */
    int auth;                /* the API key guards it */
    int prefix;              /* path is a prefix: one more path segment follows */
    srv_handler handler;     /* NULL: one of http.c's own handlers, by id */
} srv_endpoint;

/* The endpoint for a path and method; when only the path matches, an entry
 * with another method (the caller answers 405); NULL: no such path. */
const srv_endpoint *endpoint_find(const char *path, const char *method, int *path_known);
const char *endpoint_label(int id);

int responses_handle(srv_call *c);   /* POST /v1/responses (responses.c) */
int responses_get(srv_call *c);      /* GET /v1/responses/{id} */
int embeddings_handle(srv_call *c);  /* POST /v1/embeddings (embeddings.c) */

#endif
