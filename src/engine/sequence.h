/*
 * sequence.h - one generated sequence: its ids, its place in the KV pool, its
 * sampler, its text, and the rules that end it (eos and stop ids, stop
 * strings, max_new_tokens, the context).
 *
 * A sequence is the unit the scheduler moves around: a request with n samples
 * has n sequences that share the prompt's blocks after a fork. Everything a
 * sequence needs to continue exactly where it stopped lives here - the
 * sampler's RNG and penalty counts, the detokenizer's pending bytes - so a
 * sequence preempted by recompute (its blocks dropped, n_cached back to 0 or
 * to its prefix-cache hits) or by swap (blocks parked in host memory) resumes
 * with the same tokens as an uninterrupted run.
 *
 * Text: generated ids are detokenized incrementally; `emitted` bytes are safe
 * to stream (text that could still grow into a stop string is held back), and
 * tok_text_end[i] records `emitted` right after generated token i, so any
 * range of tokens can be streamed with exactly its text.
 *
 * Not thread-safe: owned by the scheduler thread.
 */
#ifndef XLLM_ENGINE_SEQUENCE_H
#define XLLM_ENGINE_SEQUENCE_H

#include <stddef.h>
#include <stdint.h>
#include "engine/sampler.h"
#include "model/kv_cache.h"
#include "tokenizer/tokenizer.h"
#include "xllm.h"

typedef enum seq_state {
    SEQ_WAITING = 0,   /* queued (new, or preempted by recompute) */
    SEQ_RUNNING,       /* in the running set: gets tokens every step */
    SEQ_SWAPPED,       /* preempted by swap: blocks in the host pool */
    SEQ_FORK_WAIT,     /* a sample j > 0 waiting for sample 0's prompt prefill */
    SEQ_DONE
} seq_state;

/* The model's end-of-sequence ids. */
typedef struct model_eos {
    int n;
    const int32_t *ids;
} model_eos;

typedef struct sequence {
    struct engine_request *req;
    int sample;
    seq_state state;
    int32_t *ids;                 /* prompt then generated ids */
    int n_prompt, n_ids, cap;
    int n_cached;                 /* positions whose K/V are in the pool */
    kv_seq table;
    uint64_t *hashes;             /* chain hash of each full block [0, n_registered) */
    int n_registered;
    int32_t *host;                /* swapped: host pool blocks */
    int n_host;
    sampler smp;
    detok_stream *ds;
    char *text;
    size_t text_len, text_cap, emitted;
    uint32_t *tok_text_end;       /* per generated id: `emitted` after it */
    float *lp;                    /* params.logprobs: per generated id its log-probability */
    int32_t *top_ids;             /* and n_top alternatives per id */
    float *top_lp;
    int n_top;
    int stop_len_max;
    int max_new, max_context;
    const xllm_sampling_params *p;
    const model_eos *eos;
    xllm_finish_reason reason;
    int finished;
    int in_step, step_index;      /* scheduler: in the current step, at this batch index */
    /* streaming: generated ids already handed to the request's outbox */
    int published;
    /* constrained decoding (constraint.c): the request's matcher and this
     * sample's state in it (valid while gepoch is the matcher's epoch) */
    struct gram_matcher *gm;
    int32_t gstate;
    uint32_t gepoch;
    /* CLOCK_MONOTONIC seconds when the first and the latest generated id were accepted */
    double t_first, t_last;
} sequence;

/* Set up a sequence over a prompt (ids copied). cap: most ids it will ever
 * hold (prompt + max_new_tokens, capped by the context). tok may be NULL (no
 * text). seed_offset is added to a given seed (sample j of n uses seed + j). */
xllm_status seq_init(sequence *s, const int32_t *prompt, int n_prompt, const xllm_sampling_params *p,
                     const model_eos *eos, int32_t vocab, int max_context, const tokenizer *tok, uint64_t seed_offset,
                     int block_size, xllm_error *err);
/* Free everything but the KV blocks (the scheduler returns those first). */
void seq_free(sequence *s);

/* Record a sampled token: text, stop checks, finish. Errors only for
 * internal failures (out of memory). */
xllm_status seq_accept(sequence *s, int32_t tok, xllm_error *err);
/* Constrained decoding (constraint.c): set the ids the constraint does not
 * allow to -inf in logits (eos only once the output is complete). Returns 1
 * when no id is allowed: the sequence has ended (XLLM_FINISH_STOP). */
int seq_constrain(sequence *s, float *logits, int32_t vocab);
/* Advance the constraint by an accepted (non-stop) token; 1 when the output
 * is complete and nothing more may follow (or it left the language). */
int seq_constraint_accept(sequence *s, int32_t tok);
/* End the sequence now (reason), flushing the text held back. */
xllm_status seq_finish(sequence *s, xllm_finish_reason reason, xllm_error *err);
/* End the sequence as cancelled, keeping the text streamed so far. */
void seq_cancel(sequence *s);

static inline int seq_n_generated(const sequence *s) { return s->n_ids - s->n_prompt; }

/* Free the arrays of one result and zero it. */
void result_free_one(xllm_result *r);
/* Copy r->n_ids log-probabilities (and n_top alternatives each) into r; -1 when out of memory. */
int result_set_logprobs(xllm_result *r, const float *lp, const int32_t *top_ids, const float *top_lp, int n_top);
/* The sequence's final result (arrays and text owned by r). */
xllm_status seq_result(const sequence *s, double t_submit, xllm_result *r, xllm_error *err);
/* CLOCK_MONOTONIC in seconds (the clock of t_first / t_last / t_submit). Thread-safe. */
double seq_clock_s(void);

#endif
