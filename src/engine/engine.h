/*
 * engine.h - the serving engine's internals: requests, the shared queue, the
 * scheduler thread's private state.
 *
 * Two sides meet here. Caller threads (xllm_engine_submit / poll / abort /
 * result, any number at once) touch only what the engine lock guards: the
 * incoming queue, the request map, each request's outboxes and results, the
 * published statistics. The scheduler thread owns everything else - the
 * waiting, running and swapped sequences, the block manager, the step
 * buffers - and touches shared state only at the start of an iteration
 * (taking new requests and jobs) and after each step (publishing output), so
 * the forward pass itself runs without the lock. Aborts are an atomic flag the
 * scheduler reads each step. Output crosses over through per-sample outboxes:
 * the scheduler appends under the lock, a poll swaps the outbox out.
 *
 * Files: engine.c (create, the scheduler thread, jobs, destroy),
 * engine_intake.c (requests in: validation, the request map, the queue,
 * abort), engine_stream.c (output out: publishing, polls, results, release),
 * engine_stats.c (counters for readers), memory_plan.c (the memory split, a
 * pure function), sequence.c (one sequence and its stop rules),
 * block_manager.c (KV references, prefix cache, swap pool), scheduler.c
 * (admission, batching, preemption, one step), response_cache.c,
 * knowledge.c (pinned prefixes and their files), constraint.c (constrained
 * decoding: the request's grammar, each sequence's state, the mask before
 * sampling).
 */
#ifndef XLLM_ENGINE_H
#define XLLM_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include "engine/block_manager.h"
#include "engine/response_cache.h"
#include "engine/sequence.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "xllm.h"

/* New output of one sample, waiting for a poll. */
typedef struct outbox {
    int32_t *ids;
    size_t n_ids, cap_ids;
    char *text;
    size_t text_len, cap_text;
    uint32_t *ends;               /* per id: text bytes complete after it (within this box) */
    float *lp;                    /* per id, when the request asked for log-probabilities */
    int32_t *top_ids;             /* n_top per id */
    float *top_lp;
    int n_top, has_lp;
    int finished;
    xllm_finish_reason reason;
    int finish_delivered;
} outbox;

typedef struct engine_request {
    xllm_request_id id;
    struct engine_request *map_next, *next_incoming;
    struct engine_request *next_touched; /* the scheduler's list of requests with output (dirty) */
    xllm_sampling_params params;  /* stop strings point into stop_store */
    char *stop_store;
    int32_t *prompt;
    int n_prompt;
    int n;
    int priority;
    uint64_t order;               /* arrival order */
    sequence *seqs;               /* n (scheduler side) */
    int forked;                   /* samples 1..n-1 started from sample 0's prompt */
    int n_done;                   /* sequences finished (scheduler side) */
    int dirty;                    /* has output to publish this step (scheduler side) */
    /* under the engine lock */
    outbox *out, *last;           /* n each: pending output; the chunk the last poll returned */
    int rr;                       /* next sample a poll looks at first */
    int done;                     /* every sequence finished and results are built */
    int sched_owned;              /* the scheduler still refers to it */
    int released;
    xllm_result *results;         /* n, once done */
    xllm_status fail;
    char *fail_msg;
    atomic_int abort_req;
    xllm_notify_fn notify;
    void *notify_user;
    struct gram *gram;            /* constrained decoding (constraint.c): the compiled constraint, */
    struct gram_matcher *gm;      /* its matcher, shared by the n samples (scheduler side) */
    char *grammar_store;          /* params.grammar / grammar_prefix / grammar_suffix point here */
    unsigned char *rc_key;        /* response-cache key, when cacheable */
    size_t rc_key_len;
    double t_submit;              /* seq_clock_s() when queued */
} engine_request;

/* A knowledge prefix: pinned full blocks of a named text. */
typedef struct knowledge {
    char *name;
    int32_t *ids;
    int n_ids;
    int32_t *blocks;              /* n_ids / block_size pinned blocks */
    int n_blocks;
    _Atomic uint64_t hits;        /* requests that reused it (read by stats without the lock) */
} knowledge;

/* Work for the scheduler thread besides requests (it owns the pool). */
typedef enum job_kind { JOB_ADD_KNOWLEDGE, JOB_LOAD_KNOWLEDGE } job_kind;
typedef struct engine_job {
    job_kind kind;
    const char *name;
    const int32_t *ids;
    int n_ids;
    const unsigned char *kv;      /* LOAD: per position, per layer: K then V (kv.slot_bytes each, the pool's storage) */
    int n_kv_positions;
    xllm_status st;
    xllm_error err;
    int done;
    struct engine_job *next;
} engine_job;

struct pipeline;
struct pipeline_link;

typedef struct engine_stats {
    uint64_t submitted, finished, aborted, failed;
    uint64_t prefill_tokens, decode_tokens, steps;
    uint64_t preempt_recompute, preempt_swap;
    uint64_t pc_lookups, pc_hit_blocks, pc_hit_tokens, pc_evictions;
    int32_t blocks_free, blocks_cached, blocks_used, blocks_pinned, swap_used;
    int running, waiting, swapped;
} engine_stats;

typedef struct xllm_engine {
    model *m;
    const tokenizer *tok;
    pthread_mutex_t *model_lock;  /* serializes forward passes of every engine on the model */
    xllm_engine_options o;
    int max_context, max_seqs, max_step_tokens, block_size;
    int kv_auto;                  /* kv_dtype auto chose kv.dtype (stats) */
    model_eos eos;
    uint64_t fingerprint;         /* of the model's weights (knowledge files) */
    size_t scratch_bytes;
    size_t backend_bytes; /* the backend's own memory inside the workspace (memory_plan) */
    kv_cache kv;
    block_manager bm;
    response_cache rc;
    struct gram_vocab *gvocab;    /* token bytes as a trie, built at the first constrained request */
    /* step buffers, sized once */
    int32_t *tokens, *pos, *seq, *out_idx;
    const int32_t **tables;
    float *logits;                /* [max_seqs][vocab] */
    float *fork_logits;           /* [vocab] */
    float *lp_row;                /* [vocab]: the raw logits row, for log-probabilities */
    int32_t lp_top[XLLM_MAX_TOP_LOGPROBS];
    sequence **step_seqs;         /* the step's sequences, by batch index */
    sequence **out_seqs;
    /* scheduler side */
    sequence **running;           /* sorted by scheduling key */
    int n_running, cap_running;
    sequence **waiting;           /* sorted by scheduling key */
    int n_waiting, cap_waiting;
    sequence **swapped;
    int n_swapped, cap_swapped;
    /* requests with output to publish, in the order they got it (a list through
     * next_touched: publishing never needs memory, so no output is lost) */
    engine_request *touched_head, *touched_tail;
    knowledge *know;
    int n_know;
    int hold_admission;           /* a preemption happened; admit again once a sequence ends */
    engine_stats st;              /* live counters (scheduler side) */
    /* shared, under lock */
    pthread_mutex_t lock;
    pthread_cond_t wake;          /* the scheduler waits for work */
    pthread_cond_t out;           /* pollers and job submitters wait for output */
    engine_request *in_head, *in_tail;
    int n_incoming;
    atomic_int pinned_blocks;     /* blocks pinned by knowledge (read by submit for its pool check) */
    engine_job *jobs;
    engine_request **map;
    uint32_t map_mask;
    uint64_t next_id, next_order;
    int stopping;
    int notifying;                /* the scheduler is calling notify functions (lock released) */
    engine_stats pub;             /* published copy of st */
    uint64_t rc_hits, rc_misses;
    char *fatal;                  /* invariant violation: the engine stopped */
    pthread_t thread;
    int thread_started;
    int debug;                    /* model option debug_checks (XLLM_DEBUG=1 in the CLI): invariants every step */
    struct pipeline_link *pp;     /* pipeline parallelism (rank 0): steps run through every stage (src/pipeline) */
} engine;

/* engine.c: the engine behind xllm_engine_* (mo: the model's resolved
 * options: context, block size, batch, kv_tokens, step size). */
engine *engine_create(model *m, const tokenizer *tok, pthread_mutex_t *model_lock, const xllm_model_options *mo,
                      const xllm_engine_options *eo, xllm_error *err);
void engine_destroy(engine *e);
/* Pipeline parallelism: the engine's steps go through the pipeline, and the
 * block manager's KV operations are mirrored on the other ranks. Right after
 * engine_create, before any request. */
xllm_status engine_attach_pipeline(engine *e, struct pipeline *p, xllm_error *err);
/* Submit in two halves, so a batch of requests is validated before any runs. */
xllm_status engine_prepare(engine *e, const xllm_request *q, engine_request **r, xllm_error *err);
void engine_enqueue(engine *e, engine_request *r, xllm_notify_fn notify, void *user, xllm_request_id *id);
void engine_discard(engine_request *r);
/* Return once the scheduler is not inside notify calls (after which no
 * notify of a finished or released request comes). */
void engine_wait_quiet(engine *e);
/* Release request id and wait until the scheduler has let go of it and freed
 * it (an unfinished one is aborted first), so nothing of it outlives the
 * call. Thread-safe; not from a notify function. */
void engine_release_wait(engine *e, xllm_request_id id);
/* Run a job on the scheduler thread and wait for it. */
xllm_status engine_run_job(engine *e, engine_job *j, xllm_error *err);
/* A deadline timeout_ms from now (CLOCK_REALTIME, for pthread_cond_timedwait);
 * 0 when timeout_ms < 0 (wait without one). */
int engine_deadline(struct timespec *dl, int timeout_ms);

/* engine_intake.c. The request map (under the lock): id -> request. */
engine_request *request_map_find(engine *e, xllm_request_id id);
void request_map_remove(engine *e, engine_request *r);
/* Free a request and everything it owns (not in the map, or under the lock). */
void engine_request_free(engine_request *r);

/* engine_stream.c. A notify call owed to a caller, made after the lock is released. */
typedef struct pending_notify {
    xllm_notify_fn fn;
    void *user;
    xllm_request_id id;
} pending_notify;
/* Move the step's output into the outboxes, finish done requests, and queue
 * their notifications in notes[] (at most max; the rest stay for the next
 * call). Scheduler thread, under the lock. Returns the number of notes. */
int engine_publish(engine *e, pending_notify *notes, int max);
/* A response-cache hit: the request is done at once, its outboxes hold the
 * stored output. Under the lock. */
xllm_status stream_from_cache(engine_request *r, const rc_entry *hit);
void outbox_free(outbox *b);

/* engine_stats.c: copy the scheduler's counters for readers. Under the lock. */
void engine_publish_stats(engine *e);

/* scheduler.c (scheduler thread only) */
/* Take the incoming requests (already moved under the lock) into waiting. */
void sched_enqueue(engine *e, engine_request *r);
/* Handle aborts, resume, admit, build and run one step, sample. */
xllm_status sched_step(engine *e, xllm_error *err);
int sched_has_work(const engine *e);
/* Pool invariants against every live table; 0 = fine, else msg filled. */
int sched_check(engine *e, char *msg, size_t len);
/* Cancel everything (engine shutdown). */
void sched_cancel_all(engine *e);
/* Knowledge jobs (knowledge.c) */
void knowledge_run_job(engine *e, engine_job *j);
void knowledge_free_all(engine *e);
/* The knowledge prefixes named in the engine options (caller thread, after start). */
xllm_status knowledge_from_options(engine *e, xllm_error *err);

/* constraint.c: constrained decoding on the engine side. Prepare compiles
 * the request's constraint (caller thread; the vocabulary trie is built once,
 * under a lock) and starts each sequence's state. */
xllm_status constraint_prepare(engine *e, engine_request *r, xllm_error *err);
void constraint_free(engine_request *r);
void constraint_engine_free(engine *e);

#endif
