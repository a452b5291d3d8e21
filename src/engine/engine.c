/*
 * engine.c - the serving engine's thread and its public functions
 * (xllm_engine_* in xllm.h; the design is in engine.h and scheduler.c).
 *
 * The scheduler thread loops: take new requests and jobs under the lock;
 * sleep when there is nothing to do (checking the KV pool's invariants first);
 * after an idle spell, hold the first step up to timeout_ms so that a burst
 * of requests starts together (dynamic batching); run one step without the
 * lock; publish its output under the lock and wake the pollers; call the
 * requests' notify functions with no lock held.
 */
#include "engine/engine.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "base/error.h"
#include "dist/pipeline.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAP_BUCKETS 4096
#define MAX_STOP_LEN 1024
#define DEFAULT_RC_BYTES ((int64_t)64 << 20)
#define DEFAULT_RC_ENTRIES 4096

xllm_engine_options xllm_engine_options_default(void) {
    xllm_engine_options o;
    memset(&o, 0, sizeof o);
    o.preempt_mode = XLLM_PREEMPT_ELASTIC;
    o.cache_policy = XLLM_CACHE_LRU;
    return o;
}

/* ------------------------------------------------------------- requests */

static void outbox_free(outbox *b) {
    xllm_free(b->ids);
    xllm_free(b->text);
    xllm_free(b->ends);
    xllm_free(b->lp);
    xllm_free(b->top_ids);
    xllm_free(b->top_lp);
}

static void request_free(engine_request *r) {
    if (!r) return;
    if (r->seqs)
        for (int j = 0; j < r->n; j++) seq_free(&r->seqs[j]);
    if (r->out)
        for (int j = 0; j < r->n; j++) outbox_free(&r->out[j]);
    if (r->last)
        for (int j = 0; j < r->n; j++) outbox_free(&r->last[j]);
    if (r->results) xllm_results_free(r->results, (size_t)r->n);
    xllm_free(r->seqs);
    xllm_free(r->out);
    xllm_free(r->last);
    xllm_free(r->prompt);
    xllm_free(r->stop_store);
    constraint_free(r);
    xllm_free(r->fail_msg);
    xllm_free(r->rc_key);
    xllm_free(r);
}

static engine_request *map_find(engine *e, xllm_request_id id) {
    for (engine_request *r = e->map[id & e->map_mask]; r; r = r->map_next)
        if (r->id == id) return r;
    return NULL;
}

static void map_remove(engine *e, engine_request *r) {
    engine_request **link = &e->map[r->id & e->map_mask];
    while (*link && *link != r) link = &(*link)->map_next;
    if (*link) *link = r->map_next;
}

/* What outbox_append copies: n ids, their text (text_ends relative to
 * end_base), and optionally their log-probabilities. */
typedef struct out_piece {
    const int32_t *ids;
    size_t n;
    const char *text;
    size_t text_len;
    const uint32_t *ends;
    uint32_t end_base;
    const float *lp;              /* NULL: none */
    const int32_t *top_ids;
    const float *top_lp;
    int n_top;
} out_piece;

static int grow(void **p, size_t want_bytes) {
    void *q = xllm_realloc(*p, want_bytes ? want_bytes : 1);
    if (!q) return -1;
    *p = q;
    return 0;
}

static xllm_status outbox_append(outbox *b, const out_piece *pc) {
    size_t n = pc->n;
    if (b->n_ids + n > b->cap_ids || (pc->lp && !b->lp)) {
        /* ids sets the capacity (16 at least); the parallel arrays follow it */
        size_t cap = b->cap_ids, need = b->n_ids + n ? b->n_ids + n : 1;
        size_t nt = (size_t)(pc->n_top > 0 ? pc->n_top : 1);
        if (xllm_array_reserve(&b->ids, &cap, need, sizeof(int32_t), 16) ||
            grow((void **)&b->ends, cap * sizeof(uint32_t)))
            return XLLM_ERR_OUT_OF_MEMORY;
        if (pc->lp && (grow((void **)&b->lp, cap * sizeof(float)) ||
                       grow((void **)&b->top_ids, cap * nt * sizeof(int32_t)) ||
                       grow((void **)&b->top_lp, cap * nt * sizeof(float))))
            return XLLM_ERR_OUT_OF_MEMORY;
        b->cap_ids = cap;
    }
    if (xllm_array_reserve(&b->text, &b->cap_text, b->text_len + pc->text_len + 1, 1, 64))
        return XLLM_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; i < n; i++) b->ends[b->n_ids + i] = (uint32_t)b->text_len + (pc->ends[i] - pc->end_base);
    memcpy(b->ids + b->n_ids, pc->ids, n * sizeof(int32_t));
    if (pc->lp) {
        size_t nt = (size_t)pc->n_top;
        memcpy(b->lp + b->n_ids, pc->lp, n * sizeof(float));
        memcpy(b->top_ids + b->n_ids * nt, pc->top_ids, n * nt * sizeof(int32_t));
        memcpy(b->top_lp + b->n_ids * nt, pc->top_lp, n * nt * sizeof(float));
        b->has_lp = 1;
        b->n_top = pc->n_top;
    }
    memcpy(b->text + b->text_len, pc->text, pc->text_len);
    b->n_ids += n;
    b->text_len += pc->text_len;
    b->text[b->text_len] = 0;
    return XLLM_OK;
}

/* Validate and tokenize a request into a fresh engine_request (not queued). */
static xllm_status request_prepare(engine *e, const xllm_request *q, engine_request **out, xllm_error *err) {
    *out = NULL;
    if (!q) return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "the request is NULL");
    const xllm_sampling_params *p = &q->params;
    int n = q->n <= 0 ? 1 : q->n;
    if (n > XLLM_MAX_SAMPLES)
        return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "n = %d samples; at most %d", q->n, XLLM_MAX_SAMPLES);
    if (q->priority != XLLM_PRIORITY_ONLINE && q->priority != XLLM_PRIORITY_OFFLINE)
        return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "priority %d is neither online (0) nor offline (1)",
                           (int)q->priority);
    if (p->logprobs != 0 && p->logprobs != 1)
        return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "logprobs must be 0 or 1 (got %d)", p->logprobs);
    if (p->top_logprobs < 0 || p->top_logprobs > XLLM_MAX_TOP_LOGPROBS || (p->top_logprobs && !p->logprobs))
        return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "top_logprobs must be 0..%d, with logprobs set (got %d)",
                           XLLM_MAX_TOP_LOGPROBS, p->top_logprobs);
    if (p->n_stop < 0 || p->n_stop > XLLM_MAX_STOP_STRINGS)
        return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "%d stop strings; at most %d", p->n_stop,
                           XLLM_MAX_STOP_STRINGS);
    if (p->n_stop_ids < 0 || p->n_stop_ids > XLLM_MAX_STOP_IDS)
        return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "%d stop ids; at most %d", p->n_stop_ids, XLLM_MAX_STOP_IDS);
    size_t stop_bytes = 0;
    for (int i = 0; i < p->n_stop; i++) {
        if (!p->stop[i]) return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "stop string %d is NULL", i);
        size_t l = strlen(p->stop[i]);
        if (l > MAX_STOP_LEN)
            return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "stop string %d is %zu bytes long; at most %d", i, l,
                               MAX_STOP_LEN);
        stop_bytes += l + 1;
    }
    {
        sampler probe;
        xllm_status st = sampler_init(&probe, p, e->m->cfg.vocab, err);
        if (st) return st;
        sampler_free(&probe);
    }
    engine_request *r = xllm_calloc(1, sizeof *r);
    if (!r) return xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    r->n = n;
    r->priority = q->priority;
    r->params = *p;
    r->stop_store = xllm_malloc(stop_bytes + 1);
    xllm_status st = XLLM_OK;
    if (!r->stop_store) st = xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    for (size_t i = 0, off = 0; !st && i < (size_t)p->n_stop; i++) {
        size_t l = strlen(p->stop[i]);
        memcpy(r->stop_store + off, p->stop[i], l + 1);
        r->params.stop[i] = r->stop_store + off;
        off += l + 1;
    }
    /* the prompt */
    size_t np = 0;
    if (!st) {
        if (q->prompt) {
            if (!e->tok)
                st = xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "a text prompt, but the model has no tokenizer");
            else
                st = tokenizer_encode(e->tok, q->prompt, strlen(q->prompt), 1, &r->prompt, &np, err);
        } else if (q->n_prompt_ids && !q->prompt_ids) {
            st = xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "prompt_ids is NULL");
        } else if (q->n_prompt_ids >= (size_t)e->max_context) {
            np = q->n_prompt_ids;
        } else {
            np = q->n_prompt_ids;
            r->prompt = xllm_malloc_array(np ? np : 1, sizeof(int32_t));
            if (!r->prompt) st = xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
            else if (np) memcpy(r->prompt, q->prompt_ids, np * sizeof(int32_t));
        }
    }
    if (!st && np == 0) st = xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "the prompt is empty (no tokens)");
    if (!st && np >= (size_t)e->max_context)
        st = xllm_errorf(err, XLLM_ERR_CONTEXT_OVERFLOW,
                         "the prompt has %zu tokens but the context holds %d (at least one must be left to generate)",
                         np, e->max_context);
    for (size_t k = 0; !st && k < np; k++)
        if (r->prompt[k] < 0 || r->prompt[k] >= e->m->cfg.vocab)
            st = xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "prompt token id %d is outside the vocabulary (0..%d)",
                             r->prompt[k], e->m->cfg.vocab - 1);
    if (!st) {
        int need = (int)np + (p->max_new_tokens > 0 ? p->max_new_tokens : 0);
        if (need > e->max_context || need < 0) need = e->max_context;
        int32_t blocks = kv_blocks_for_tokens(&e->kv, need);
        int32_t usable = e->kv.n_blocks - atomic_load(&e->pinned_blocks);
        if (blocks > usable)
            st = xllm_errorf(err, XLLM_ERR_CONTEXT_OVERFLOW,
                             "the prompt and max_new_tokens need %d KV blocks (%d tokens) but the KV pool has %d "
                             "(%lld tokens); raise memory.workspace_size (or kv_tokens: xllm_model_options.kv_tokens, "
                             "Python LLM(kv_tokens=...)) or lower max_new_tokens",
                             blocks, need, usable, (long long)usable * e->block_size);
    }
    r->n_prompt = (int)np;
    if (!st) {
        r->seqs = xllm_calloc((size_t)n, sizeof *r->seqs);
        r->out = xllm_calloc((size_t)n, sizeof *r->out);
        r->last = xllm_calloc((size_t)n, sizeof *r->last);
        if (!r->seqs || !r->out || !r->last) st = xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (int j = 0; !st && j < n; j++) {
        st = seq_init(&r->seqs[j], r->prompt, r->n_prompt, &r->params, &e->eos, e->m->cfg.vocab, e->max_context,
                      e->tok, (uint64_t)j, e->block_size, err);
        r->seqs[j].req = r;
        r->seqs[j].sample = j;
    }
    if (!st) st = constraint_prepare(e, r, err);
    if (!st && e->o.response_cache && rc_cacheable(&r->params)) {
        r->rc_key = rc_key(r->prompt, (size_t)r->n_prompt, &r->params, n, &r->rc_key_len);
        if (!r->rc_key) st = xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    if (st) {
        request_free(r);
        return st;
    }
    atomic_init(&r->abort_req, 0);
    *out = r;
    return XLLM_OK;
}

/* A response-cache hit: the request is done at once, its outboxes hold the
 * stored output. Under the lock. */
static xllm_status request_from_cache(engine_request *r, const rc_entry *hit) {
    r->results = xllm_calloc((size_t)r->n, sizeof *r->results);
    if (!r->results) return XLLM_ERR_OUT_OF_MEMORY;
    for (int j = 0; j < r->n; j++) {
        const rc_sample *s = &hit->samples[j];
        out_piece pc = {s->ids, s->n_ids, s->text, s->text_len, s->text_end, 0, s->lp, s->top_ids, s->top_lp, s->n_top};
        if (outbox_append(&r->out[j], &pc)) return XLLM_ERR_OUT_OF_MEMORY;
        r->out[j].finished = 1;
        r->out[j].reason = s->reason;
        xllm_result *res = &r->results[j];
        res->n_prompt_ids = (size_t)r->n_prompt;
        res->prompt_ids = xllm_malloc_array((size_t)r->n_prompt + 1, sizeof(int32_t));
        res->ids = xllm_malloc_array(s->n_ids + 1, sizeof(int32_t));
        res->text = xllm_strndup(s->text, s->text_len);
        if (!res->prompt_ids || !res->ids || !res->text) return XLLM_ERR_OUT_OF_MEMORY;
        memcpy(res->prompt_ids, r->prompt, (size_t)r->n_prompt * sizeof(int32_t));
        memcpy(res->ids, s->ids, s->n_ids * sizeof(int32_t));
        res->n_ids = s->n_ids;
        res->text_len = s->text_len;
        res->finish_reason = s->reason;
        if (s->lp && result_set_logprobs(res, s->lp, s->top_ids, s->top_lp, s->n_top)) return XLLM_ERR_OUT_OF_MEMORY;
    }
    for (int j = 0; j < r->n; j++) seq_free(&r->seqs[j]);
    xllm_free(r->seqs);
    r->seqs = NULL;
    r->done = 1;
    return XLLM_OK;
}

/* Queue a prepared request (or answer it from the response cache). */
static void request_enqueue(engine *e, engine_request *r, xllm_notify_fn notify, void *user, xllm_request_id *id) {
    r->notify = notify;
    r->notify_user = user;
    r->t_submit = seq_clock_s();
    pthread_mutex_lock(&e->lock);
    r->id = ++e->next_id;
    r->order = ++e->next_order;
    *id = r->id;
    e->pub.submitted++;
    e->st.submitted++;
    int cached = 0;
    if (r->rc_key) {
        const rc_entry *hit = rc_lookup(&e->rc, r->rc_key, r->rc_key_len);
        if (hit && hit->n == r->n && request_from_cache(r, hit) == XLLM_OK) cached = 1;
        else if (hit) { /* could not copy it: run the request instead */
            if (r->results) xllm_results_free(r->results, (size_t)r->n);
            r->results = NULL;
        }
        e->rc_hits = e->rc.hits;
        e->rc_misses = e->rc.misses;
    }
    r->map_next = e->map[r->id & e->map_mask];
    e->map[r->id & e->map_mask] = r;
    if (cached) {
        e->pub.finished++;
        e->st.finished++;
        pthread_cond_broadcast(&e->out);
        pthread_mutex_unlock(&e->lock);
        if (notify) notify(user, r->id);
        return;
    }
    r->sched_owned = 1;
    if (e->in_tail) e->in_tail->next_incoming = r; else e->in_head = r;
    e->in_tail = r;
    e->n_incoming++;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
}

xllm_status engine_prepare(engine *e, const xllm_request *q, engine_request **r, xllm_error *err) {
    return request_prepare(e, q, r, err);
}

void engine_enqueue(engine *e, engine_request *r, xllm_notify_fn notify, void *user, xllm_request_id *id) {
    request_enqueue(e, r, notify, user, id);
}

void engine_discard(engine_request *r) { request_free(r); }

xllm_status xllm_engine_submit(xllm_engine *e, const xllm_request *req, xllm_notify_fn notify, void *notify_user,
                               xllm_request_id *id, xllm_error *err) {
    xllm_error_clear(err);
    if (!e || !id) return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "engine or id is NULL");
    *id = 0;
    engine_request *r;
    xllm_status st = request_prepare(e, req, &r, err);
    if (st) return st;
    pthread_mutex_lock(&e->lock);
    int stopping = e->stopping;
    pthread_mutex_unlock(&e->lock);
    if (stopping) {
        request_free(r);
        return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "the engine is shutting down");
    }
    request_enqueue(e, r, notify, notify_user, id);
    return XLLM_OK;
}

/* ------------------------------------------------------------ publishing */

typedef struct pending_notify {
    xllm_notify_fn fn;
    void *user;
    xllm_request_id id;
} pending_notify;

static void publish_stats(engine *e);

/* Move the step's output into the outboxes; finish done requests; their
 * notifications into notes[] (at most max; requests past that stay in the
 * list for the next call). Under the lock. Returns the number of notes. */
static int publish(engine *e, pending_notify *notes, int max) {
    int n_notes = 0;
    while (e->touched_head && n_notes < max) {
        engine_request *r = e->touched_head;
        e->touched_head = r->next_touched;
        if (!e->touched_head) e->touched_tail = NULL;
        r->next_touched = NULL;
        r->dirty = 0;
        for (int j = 0; j < r->n; j++) {
            sequence *s = &r->seqs[j];
            int n_gen = seq_n_generated(s);
            if (s->published < n_gen) {
                uint32_t start = s->published ? s->tok_text_end[s->published - 1] : 0;
                uint32_t end = s->tok_text_end[n_gen - 1];
                if (!s->text || end > s->text_len) start = end = 0; /* no text (out of memory): ids only */
                size_t k = (size_t)s->published, nt = (size_t)s->n_top;
                out_piece pc = {s->ids + s->n_prompt + k, (size_t)(n_gen - s->published), (s->text ? s->text : "") + start,
                                end - start, s->tok_text_end + k, start, s->lp ? s->lp + k : NULL,
                                s->lp ? s->top_ids + k * nt : NULL, s->lp ? s->top_lp + k * nt : NULL, s->n_top};
                if (outbox_append(&r->out[j], &pc) == XLLM_OK) {
                    s->published = n_gen;
                } else if (!r->fail) { /* the tokens cannot be delivered: the request fails, and says so */
                    r->fail = XLLM_ERR_OUT_OF_MEMORY;
                    r->fail_msg = xllm_strdup("out of memory delivering the tokens");
                    e->st.failed++;
                    atomic_store(&r->abort_req, 1);
                }
            }
            if (s->state == SEQ_DONE && s->published == n_gen && !r->out[j].finished) {
                r->out[j].finished = 1;
                r->out[j].reason = s->reason;
            }
        }
        if (r->n_done == r->n && !r->done) {
            xllm_error err;
            xllm_result *res = xllm_calloc((size_t)r->n, sizeof *res);
            xllm_status st = res ? XLLM_OK : XLLM_ERR_OUT_OF_MEMORY;
            int cancelled = 0;
            for (int j = 0; j < r->n && !st; j++) {
                st = seq_result(&r->seqs[j], r->t_submit, &res[j], &err);
                cancelled |= r->seqs[j].reason == XLLM_FINISH_CANCELLED;
            }
            if (!st && r->rc_key && !cancelled && !r->fail) {
                rc_sample samples[XLLM_MAX_SAMPLES];
                for (int j = 0; j < r->n; j++) {
                    sequence *s = &r->seqs[j];
                    samples[j] = (rc_sample){s->ids + s->n_prompt, (size_t)seq_n_generated(s), s->text,
                                             s->text ? s->text_len : 0, s->tok_text_end, s->reason, s->lp,
                                             s->top_ids, s->top_lp, s->n_top};
                }
                rc_insert(&e->rc, r->rc_key, r->rc_key_len, samples, r->n);
            }
            if (st) {
                if (res) xllm_results_free(res, (size_t)r->n);
                res = NULL;
                if (!r->fail) {
                    r->fail = XLLM_ERR_OUT_OF_MEMORY;
                    r->fail_msg = xllm_strdup("out of memory building the results");
                }
            }
            r->results = res;
            for (int j = 0; j < r->n; j++) seq_free(&r->seqs[j]);
            r->done = 1;
            r->sched_owned = 0;
            e->st.finished++;
        }
        if (r->notify) notes[n_notes++] = (pending_notify){r->notify, r->notify_user, r->id};
        if (r->done && r->released) {
            map_remove(e, r);
            request_free(r);
        }
    }
    publish_stats(e);
    pthread_cond_broadcast(&e->out);
    return n_notes;
}

/* Copy the scheduler's counters for readers. Under the lock. */
static void publish_stats(engine *e) {
    engine_stats *p = &e->pub;
    *p = e->st;
    p->pc_lookups = e->bm.lookups;
    p->pc_hit_blocks = e->bm.hit_blocks;
    p->pc_hit_tokens = e->bm.hit_tokens;
    p->pc_evictions = e->bm.evictions;
    p->blocks_free = e->kv.n_free;
    p->blocks_cached = e->bm.n_cached;
    p->blocks_used = bm_used(&e->bm);
    p->blocks_pinned = bm_pinned(&e->bm);
    p->swap_used = e->bm.swap_total - e->bm.swap_n_free;
    p->running = e->n_running;
    p->waiting = e->n_waiting;
    p->swapped = e->n_swapped;
}

/* ---------------------------------------------------------------- thread */

static void check_pool(engine *e, const char *when) {
    char msg[512];
    if (sched_check(e, msg, sizeof msg)) {
        fprintf(stderr, "xllm: fatal: KV pool invariant violated (%s): %s\n", when, msg);
        abort();
    }
}

static void fail_everything(engine *e, xllm_status st, const char *msg) {
    pthread_mutex_lock(&e->lock);
    sequence **lists[3] = {e->running, e->waiting, e->swapped};
    int counts[3] = {e->n_running, e->n_waiting, e->n_swapped};
    for (int l = 0; l < 3; l++)
        for (int i = 0; i < counts[l]; i++) {
            engine_request *r = lists[l][i]->req;
            if (!r->fail) {
                r->fail = st;
                r->fail_msg = xllm_strdup(msg);
                e->st.failed++;
            }
        }
    pthread_mutex_unlock(&e->lock);
    sched_cancel_all(e);
}

static int deadline_from(struct timespec *dl, int timeout_ms) {
    if (timeout_ms < 0) return 0;
    clock_gettime(CLOCK_REALTIME, dl);
    dl->tv_sec += timeout_ms / 1000;
    dl->tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl->tv_nsec >= 1000000000L) {
        dl->tv_sec++;
        dl->tv_nsec -= 1000000000L;
    }
    return 1;
}

static void *engine_thread(void *arg) {
    engine *e = arg;
    pending_notify notes[64]; /* delivered in batches: no memory needed, none lost */
    pthread_mutex_lock(&e->lock);
    for (;;) {
        int was_idle = !sched_has_work(e);
        if (was_idle && !e->in_head && !e->jobs) {
            check_pool(e, "idle");
            if (e->stopping) break;
            pthread_cond_wait(&e->wake, &e->lock);
            continue;
        }
        if (was_idle && e->o.timeout_ms > 0 && e->in_head && !e->stopping) {
            /* dynamic batching: let a burst gather before the first step */
            struct timespec dl;
            deadline_from(&dl, e->o.timeout_ms);
            while (e->n_incoming < e->max_seqs && !e->stopping)
                if (pthread_cond_timedwait(&e->wake, &e->lock, &dl) == ETIMEDOUT) break;
        }
        engine_request *in = e->in_head;
        e->in_head = e->in_tail = NULL;
        e->n_incoming = 0;
        engine_job *jobs = e->jobs;
        e->jobs = NULL;
        int stopping = e->stopping;
        pthread_mutex_unlock(&e->lock);

        for (engine_request *r = in; r;) {
            engine_request *next = r->next_incoming;
            r->next_incoming = NULL;
            sched_enqueue(e, r);
            r = next;
        }
        /* jobs run in arrival order (the list is newest first) */
        engine_job *rev = NULL;
        while (jobs) {
            engine_job *n = jobs->next;
            jobs->next = rev;
            rev = jobs;
            jobs = n;
        }
        for (engine_job *j = rev; j;) {
            engine_job *n = j->next;
            knowledge_run_job(e, j);
            pthread_mutex_lock(&e->lock);
            publish_stats(e); /* the caller sees the job's effect in the stats at once */
            j->done = 1;
            pthread_cond_broadcast(&e->out);
            pthread_mutex_unlock(&e->lock);
            j = n;
        }
        if (stopping) sched_cancel_all(e);
        xllm_error err;
        xllm_error_clear(&err);
        xllm_status st = sched_step(e, &err);
        if (st) fail_everything(e, st, err.message);
        if (e->debug) check_pool(e, "after a step");

        pthread_mutex_lock(&e->lock);
        do {
            int n_notes = publish(e, notes, (int)(sizeof notes / sizeof *notes));
            if (n_notes) {
                e->notifying = 1;
                pthread_mutex_unlock(&e->lock);
                for (int i = 0; i < n_notes; i++) notes[i].fn(notes[i].user, notes[i].id);
                pthread_mutex_lock(&e->lock);
                e->notifying = 0;
                pthread_cond_broadcast(&e->out);
            }
        } while (e->touched_head);
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

/* ---------------------------------------------------------------- create */

/* A KV block of the layers this process holds (a pipeline stage: its own),
 * its rows stored as dt. */
static int64_t block_bytes(const model *m, int B, kv_dtype dt) {
    const model_config *c = &m->cfg;
    return (int64_t)B * (int64_t)kv_bytes_per_token(dt, m->layer_end - m->layer_begin, c->n_kv_heads, c->head_dim);
}

/* kv_dtype auto, the load-time choice: the widest storage in which
 * max_seqs full contexts fit the KV budget (bytes), else q8 (else f16 when
 * the head size cannot be q8). */
static kv_dtype kv_dtype_auto(const model *m, int64_t budget, int64_t need_tokens) {
    const kv_dtype order[] = {KV_F32, KV_F16, KV_Q8};
    for (int i = 0; i < 3; i++)
        if (kvq_supported(order[i], m->cfg.head_dim) &&
            need_tokens * block_bytes(m, 1, order[i]) <= budget)
            return order[i];
    return kvq_supported(KV_Q8, m->cfg.head_dim) ? KV_Q8 : KV_F16;
}

static void fmt_bytes(char *buf, size_t n, int64_t b) {
    if (b >= ((int64_t)1 << 30)) snprintf(buf, n, "%.2f GiB", (double)b / (double)((int64_t)1 << 30));
    else if (b >= ((int64_t)1 << 20)) snprintf(buf, n, "%.1f MiB", (double)b / (double)((int64_t)1 << 20));
    else snprintf(buf, n, "%.1f KiB", (double)b / 1024.0);
}

engine *engine_create(model *m, const tokenizer *tok, pthread_mutex_t *model_lock, const xllm_model_options *mo,
                      const xllm_engine_options *eo_in, xllm_error *err) {
    xllm_engine_options eo = eo_in ? *eo_in : xllm_engine_options_default();
    const model_config *c = &m->cfg;
    if (eo.preempt_mode < XLLM_PREEMPT_RECOMPUTE || eo.preempt_mode > XLLM_PREEMPT_ELASTIC) {
        xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "preempt_mode %d is not recompute, swap or elastic", eo.preempt_mode);
        return NULL;
    }
    if (eo.cache_policy != XLLM_CACHE_LRU && eo.cache_policy != XLLM_CACHE_NONE) {
        xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "cache_policy %d is not lru or none", eo.cache_policy);
        return NULL;
    }
    if (eo.timeout_ms < 0 || eo.timeout_ms > 60000 || eo.max_batch_size < 0 || eo.workspace_size < 0 ||
        eo.swap_size < -1 || eo.response_cache_max_bytes < 0 || eo.response_cache_max_entries < 0 ||
        eo.n_knowledge < 0 || eo.n_knowledge > XLLM_MAX_KNOWLEDGE) {
        xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT,
                    "engine options out of range (timeout_ms 0..60000, sizes and counts non-negative, at most %d "
                    "knowledge prefixes)", XLLM_MAX_KNOWLEDGE);
        return NULL;
    }
    engine *e = xllm_calloc(1, sizeof *e);
    if (!e) {
        xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        return NULL;
    }
    e->m = m;
    e->tok = tok;
    e->model_lock = model_lock;
    e->o = eo;
    e->max_context = mo->max_context;
    e->max_seqs = eo.max_batch_size > 0 ? eo.max_batch_size : mo->max_batch_seqs;
    e->max_step_tokens = m->s.max_tokens;
    if (e->max_seqs > e->max_step_tokens) e->max_seqs = e->max_step_tokens;
    e->block_size = mo->kv_block_size;
    e->eos.n = c->n_eos;
    e->eos.ids = c->eos_ids;
    e->debug = mo->debug_checks != 0;
    atomic_init(&e->pinned_blocks, 0);

    size_t V = (size_t)c->vocab;
    e->scratch_bytes = m->s.bytes + ((size_t)e->max_seqs + 1) * V * sizeof(float) +
                       (size_t)e->max_step_tokens * 4 * sizeof(int32_t);
    /* the KV storage: as asked, or (auto) chosen below from the budget */
    kv_dtype kdt = KV_F32;
    int kv_auto = 0;
    if (kvq_parse(mo->kv_dtype, &kdt, &kv_auto)) {
        xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "kv_dtype '%s' is not f32, f16, q8 or auto", mo->kv_dtype);
        xllm_free(e);
        return NULL;
    }
    int64_t need_tokens = (int64_t)e->max_seqs * e->max_context;
    if (kv_auto && eo.workspace_size <= 0) /* the budget: the f32 pool of kv_tokens */
        kdt = kv_dtype_auto(m, (int64_t)kv_blocks_for_tokens(&(kv_cache){.block_size = e->block_size},
                                                             (int32_t)mo->kv_tokens) * block_bytes(m, e->block_size, KV_F32),
                            need_tokens);
    if (kv_auto && eo.workspace_size > 0) { /* the budget: what the workspace leaves for KV (below) */
        int64_t rest = eo.workspace_size - (int64_t)e->scratch_bytes;
        int64_t sw = eo.swap_size > 0 ? eo.swap_size : eo.swap_size < 0 || eo.preempt_mode == XLLM_PREEMPT_RECOMPUTE ? 0 : rest / 4;
        kdt = kv_dtype_auto(m, rest - sw, need_tokens);
    }
    e->kv_auto = kv_auto;

    /* the memory split */
    int64_t bb = block_bytes(m, e->block_size, kdt);
    int32_t min_blocks = kv_blocks_for_tokens(&(kv_cache){.block_size = e->block_size}, e->max_context);
    int64_t kv_bytes, swap_bytes;
    if (eo.workspace_size > 0) {
        int64_t rest = eo.workspace_size - (int64_t)e->scratch_bytes;
        swap_bytes = eo.swap_size > 0 ? eo.swap_size
                     : eo.swap_size < 0 || eo.preempt_mode == XLLM_PREEMPT_RECOMPUTE ? 0 : rest / 4;
        kv_bytes = rest - swap_bytes;
        if (kv_bytes < (int64_t)min_blocks * bb) {
            char ws[32], sc[32], need[32], sw[32];
            fmt_bytes(ws, sizeof ws, eo.workspace_size);
            fmt_bytes(sc, sizeof sc, (int64_t)e->scratch_bytes);
            fmt_bytes(need, sizeof need, (int64_t)e->scratch_bytes + swap_bytes + (int64_t)min_blocks * bb);
            fmt_bytes(sw, sizeof sw, swap_bytes);
            xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT,
                        "memory.workspace_size %s is too small: scratch %s + swap pool %s + one full-context "
                        "sequence (%d tokens, %d KV blocks of %lld bytes) needs at least %s",
                        ws, sc, sw, e->max_context, min_blocks, (long long)bb, need);
            xllm_free(e);
            return NULL;
        }
    } else if (kv_auto) { /* the bytes of the f32 pool of kv_tokens, in the chosen storage */
        kv_bytes = (int64_t)kv_blocks_for_tokens(&(kv_cache){.block_size = e->block_size}, (int32_t)mo->kv_tokens) *
                   block_bytes(m, e->block_size, KV_F32);
        if (kv_bytes < (int64_t)min_blocks * bb) kv_bytes = (int64_t)min_blocks * bb;
        swap_bytes = eo.swap_size > 0 ? eo.swap_size
                     : eo.swap_size < 0 || eo.preempt_mode == XLLM_PREEMPT_RECOMPUTE ? 0 : kv_bytes / 4;
    } else {
        kv_bytes = (int64_t)kv_blocks_for_tokens(&(kv_cache){.block_size = e->block_size}, (int32_t)mo->kv_tokens) * bb;
        if (kv_bytes < (int64_t)min_blocks * bb) kv_bytes = (int64_t)min_blocks * bb;
        swap_bytes = eo.swap_size > 0 ? eo.swap_size
                     : eo.swap_size < 0 || eo.preempt_mode == XLLM_PREEMPT_RECOMPUTE ? 0 : kv_bytes / 4;
    }
    int64_t n_blocks64 = kv_bytes / bb;
    if (n_blocks64 > INT32_MAX / 2) n_blocks64 = INT32_MAX / 2;
    int32_t n_blocks = (int32_t)n_blocks64;
    int32_t swap_blocks = (int32_t)(swap_bytes / bb > INT32_MAX / 2 ? INT32_MAX / 2 : swap_bytes / bb);

    xllm_status st = kv_cache_init(&e->kv, &m->be, m->layer_end - m->layer_begin, c->n_kv_heads, c->head_dim,
                                   e->block_size, n_blocks, kdt, err);
    if (st) {
        xllm_free(e);
        return NULL;
    }
    e->kv.layer0 = m->layer_begin;
    if ((st = bm_init(&e->bm, &e->kv, eo.cache_policy == XLLM_CACHE_LRU, swap_blocks, err))) goto fail;
    if ((st = rc_init(&e->rc, (size_t)(eo.response_cache_max_bytes ? eo.response_cache_max_bytes : DEFAULT_RC_BYTES),
                      eo.response_cache_max_entries ? eo.response_cache_max_entries : DEFAULT_RC_ENTRIES, err)))
        goto fail;
    size_t T = (size_t)e->max_step_tokens, S = (size_t)e->max_seqs;
    e->tokens = xllm_malloc_array(T, sizeof(int32_t));
    e->pos = xllm_malloc_array(T, sizeof(int32_t));
    e->seq = xllm_malloc_array(T, sizeof(int32_t));
    e->out_idx = xllm_malloc_array(T, sizeof(int32_t));
    e->tables = xllm_calloc(T, sizeof(int32_t *));
    e->step_seqs = xllm_calloc(T, sizeof(sequence *));
    e->out_seqs = xllm_calloc(T, sizeof(sequence *));
    e->logits = xllm_malloc_array(S * V, sizeof(float));
    e->fork_logits = xllm_malloc_array(V, sizeof(float));
    e->lp_row = xllm_malloc_array(V, sizeof(float));
    e->map_mask = MAP_BUCKETS - 1;
    e->map = xllm_calloc(MAP_BUCKETS, sizeof *e->map);
    if (!e->tokens || !e->pos || !e->seq || !e->out_idx || !e->tables || !e->step_seqs || !e->out_seqs ||
        !e->logits || !e->fork_logits || !e->lp_row || !e->map) {
        st = xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "cannot allocate engine buffers");
        goto fail;
    }
    e->fingerprint = engine_model_fingerprint(m);
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->wake, NULL);
    pthread_cond_init(&e->out, NULL);
    if (pthread_create(&e->thread, NULL, engine_thread, e)) {
        pthread_mutex_destroy(&e->lock);
        pthread_cond_destroy(&e->wake);
        pthread_cond_destroy(&e->out);
        st = xllm_errorf(err, XLLM_ERR_INTERNAL, "cannot start the engine thread");
        goto fail;
    }
    e->thread_started = 1;
    pthread_mutex_lock(&e->lock);
    publish_stats(e); /* the stats readers see from the start */
    pthread_mutex_unlock(&e->lock);
    if (eo.verbose) {
        char sc[32], kv[32], sw[32];
        fmt_bytes(sc, sizeof sc, (int64_t)e->scratch_bytes);
        fmt_bytes(kv, sizeof kv, (int64_t)n_blocks * bb);
        fmt_bytes(sw, sizeof sw, (int64_t)swap_blocks * bb);
        fprintf(stderr,
                "xllm engine: scratch %s | KV pool %s = %d blocks x %d tokens (%lld tokens), kv_dtype %s%s | swap "
                "pool %s = %d blocks%s | batch %d sequences, %d tokens per step | preempt %s, prefix cache %s, "
                "response cache %s\n",
                sc, kv, n_blocks, e->block_size, (long long)n_blocks * e->block_size, kvq_name(kdt),
                kv_auto ? " (auto)" : "", sw, swap_blocks,
                swap_blocks ? (e->bm.swap_locked ? " (page-locked)" : " (not page-locked: RLIMIT_MEMLOCK)") : "",
                e->max_seqs, e->max_step_tokens,
                eo.preempt_mode == XLLM_PREEMPT_RECOMPUTE ? "recompute"
                : eo.preempt_mode == XLLM_PREEMPT_SWAP    ? "swap"
                                                          : "elastic",
                eo.cache_policy == XLLM_CACHE_LRU ? "lru" : "off", eo.response_cache ? "on" : "off");
    }
    return e;
fail:
    engine_destroy(e); /* everything not yet made is zero, which destroy skips */
    return NULL;
}

xllm_status engine_attach_pipeline(engine *e, struct pipeline *p, xllm_error *err) {
    if (e->o.n_knowledge > 0)
        return xllm_errorf(err, XLLM_ERR_UNSUPPORTED, "knowledge prefixes are not supported with pipeline parallelism");
    xllm_status st = pipeline_open(p, &e->kv, e->bm.swap_total, &e->pp, err);
    if (st) return st;
    e->bm.mirror = pipeline_mirror;
    e->bm.mirror_ctx = e->pp;
    return XLLM_OK;
}

void engine_destroy(engine *e) {
    if (!e) return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->lock);
        e->stopping = 1;
        pthread_cond_signal(&e->wake);
        pthread_mutex_unlock(&e->lock);
        pthread_join(e->thread, NULL);
    }
    pipeline_close(e->pp);
    /* requests still queued but never taken (stopped first), and everything
     * the callers did not release */
    for (engine_request *r = e->in_head; r;) {
        engine_request *n = r->next_incoming;
        map_remove(e, r);
        request_free(r);
        r = n;
    }
    for (uint32_t b = 0; e->map && b <= e->map_mask; b++)
        for (engine_request *r = e->map[b]; r;) {
            engine_request *n = r->map_next;
            request_free(r);
            r = n;
        }
    knowledge_free_all(e);
    xllm_free(e->running);
    xllm_free(e->waiting);
    xllm_free(e->swapped);
    rc_free(&e->rc);
    constraint_engine_free(e);
    bm_free(&e->bm);
    kv_cache_free(&e->kv);
    xllm_free(e->tokens);
    xllm_free(e->pos);
    xllm_free(e->seq);
    xllm_free(e->out_idx);
    xllm_free((void *)e->tables);
    xllm_free(e->step_seqs);
    xllm_free(e->out_seqs);
    xllm_free(e->logits);
    xllm_free(e->fork_logits);
    xllm_free(e->lp_row);
    xllm_free(e->map);
    if (e->thread_started) {
        pthread_mutex_destroy(&e->lock);
        pthread_cond_destroy(&e->wake);
        pthread_cond_destroy(&e->out);
    }
    xllm_free(e);
}

/* ----------------------------------------------------------------- polling */

xllm_poll_result xllm_engine_poll(xllm_engine *e, xllm_request_id id, xllm_chunk *chunk, int timeout_ms,
                                  xllm_error *err) {
    xllm_error_clear(err);
    if (!e || !chunk) {
        xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "engine or chunk is NULL");
        return XLLM_POLL_ERROR;
    }
    memset(chunk, 0, sizeof *chunk);
    struct timespec dl;
    int timed = deadline_from(&dl, timeout_ms);
    pthread_mutex_lock(&e->lock);
    for (;;) {
        engine_request *r = map_find(e, id);
        if (!r || r->released) {
            pthread_mutex_unlock(&e->lock);
            xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "no request with id %llu", (unsigned long long)id);
            return XLLM_POLL_ERROR;
        }
        if (r->fail) {
            xllm_errorf(err, r->fail, "%s", r->fail_msg ? r->fail_msg : "the request failed");
            pthread_mutex_unlock(&e->lock);
            return XLLM_POLL_ERROR;
        }
        int all_delivered = 1;
        for (int k = 0; k < r->n; k++) {
            int j = (r->rr + k) % r->n;
            outbox *b = &r->out[j];
            if (b->n_ids == 0 && (!b->finished || b->finish_delivered)) {
                all_delivered &= b->finish_delivered;
                continue;
            }
            /* swap the box out: the caller reads `last` until its next poll */
            outbox *l = &r->last[j];
            outbox tmp = *l;
            *l = *b;
            b->ids = tmp.ids;
            b->cap_ids = tmp.cap_ids;
            b->text = tmp.text;
            b->cap_text = tmp.cap_text;
            b->ends = tmp.ends;
            b->lp = tmp.lp;
            b->top_ids = tmp.top_ids;
            b->top_lp = tmp.top_lp;
            if (!b->lp) b->cap_ids = b->ids ? b->cap_ids : 0;
            b->n_ids = 0;
            b->text_len = 0;
            b->has_lp = 0;
            if (l->finished) b->finish_delivered = 1;
            b->finished = l->finished;
            b->reason = l->reason;
            chunk->sample = j;
            chunk->ids = l->ids;
            chunk->n_ids = l->n_ids;
            chunk->text = l->text ? l->text : "";
            chunk->text_len = l->text_len;
            chunk->text_ends = l->ends;
            chunk->finished = l->finished;
            chunk->finish_reason = l->reason;
            if (l->has_lp) {
                chunk->logprobs = l->lp;
                chunk->top_ids = l->top_ids;
                chunk->top_logprobs = l->top_lp;
                chunk->n_top = l->n_top;
            }
            r->rr = (j + 1) % r->n;
            pthread_mutex_unlock(&e->lock);
            return XLLM_POLL_CHUNK;
        }
        if (all_delivered && r->done) {
            pthread_mutex_unlock(&e->lock);
            return XLLM_POLL_DONE;
        }
        if (timeout_ms == 0) break;
        if (timed) {
            if (pthread_cond_timedwait(&e->out, &e->lock, &dl) == ETIMEDOUT) break;
        } else {
            pthread_cond_wait(&e->out, &e->lock);
        }
    }
    pthread_mutex_unlock(&e->lock);
    return XLLM_POLL_TIMEOUT;
}

void xllm_engine_abort(xllm_engine *e, xllm_request_id id) {
    if (!e) return;
    pthread_mutex_lock(&e->lock);
    engine_request *r = map_find(e, id);
    if (r && !r->done) {
        atomic_store(&r->abort_req, 1);
        pthread_cond_signal(&e->wake);
    }
    pthread_mutex_unlock(&e->lock);
}

/* Wait until the scheduler is not inside notify calls (unless we are it). */
static void wait_notifies(engine *e) {
    if (e->thread_started && pthread_equal(pthread_self(), e->thread)) return;
    while (e->notifying) pthread_cond_wait(&e->out, &e->lock);
}

void engine_wait_quiet(engine *e) {
    pthread_mutex_lock(&e->lock);
    wait_notifies(e);
    pthread_mutex_unlock(&e->lock);
}

void engine_release_wait(engine *e, xllm_request_id id) {
    xllm_engine_release(e, id);
    pthread_mutex_lock(&e->lock);
    while (map_find(e, id)) pthread_cond_wait(&e->out, &e->lock); /* publish frees it, then broadcasts */
    pthread_mutex_unlock(&e->lock);
}

void xllm_engine_release(xllm_engine *e, xllm_request_id id) {
    if (!e) return;
    pthread_mutex_lock(&e->lock);
    engine_request *r = map_find(e, id);
    if (r && !r->released) {
        r->released = 1;
        r->notify = NULL;
        if (r->sched_owned) {
            atomic_store(&r->abort_req, 1); /* the scheduler frees it when it is done with it */
            pthread_cond_signal(&e->wake);
        } else {
            map_remove(e, r);
            request_free(r);
        }
    }
    wait_notifies(e);
    pthread_mutex_unlock(&e->lock);
}

xllm_status xllm_engine_result(xllm_engine *e, xllm_request_id id, xllm_result **results, size_t *n,
                               xllm_error *err) {
    xllm_error_clear(err);
    if (!e || !results || !n) return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "NULL argument");
    *results = NULL;
    *n = 0;
    pthread_mutex_lock(&e->lock);
    engine_request *r;
    for (;;) {
        r = map_find(e, id);
        if (!r || r->released) {
            pthread_mutex_unlock(&e->lock);
            return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "no request with id %llu", (unsigned long long)id);
        }
        if (r->done) break;
        pthread_cond_wait(&e->out, &e->lock);
    }
    xllm_status st = XLLM_OK;
    if (r->fail) st = xllm_errorf(err, r->fail, "%s", r->fail_msg ? r->fail_msg : "the request failed");
    else {
        *results = r->results;
        *n = (size_t)r->n;
        r->results = NULL;
    }
    map_remove(e, r);
    request_free(r);
    wait_notifies(e);
    pthread_mutex_unlock(&e->lock);
    return st;
}

/* ------------------------------------------------------------------ stats */

char *xllm_engine_stats(xllm_engine *e) {
    if (!e) return NULL;
    pthread_mutex_lock(&e->lock);
    engine_stats p = e->pub;
    uint64_t rc_hits = e->rc.hits, rc_misses = e->rc.misses;
    int rc_entries = e->rc.n_entries;
    size_t rc_bytes = e->rc.bytes;
    int32_t know_n = e->n_know;
    char know[4096];
    size_t kl = 0;
    know[0] = 0;
    for (int k = 0; k < know_n && kl < sizeof know - 200; k++)
        kl += (size_t)snprintf(know + kl, sizeof know - kl, "%s{\"name\":\"%s\",\"tokens\":%d,\"blocks\":%d,\"hits\":%llu}",
                               k ? "," : "", e->know[k].name, e->know[k].n_ids, e->know[k].n_blocks,
                               (unsigned long long)atomic_load(&e->know[k].hits));
    pthread_mutex_unlock(&e->lock);
    char buf[8192];
    int len = snprintf(
        buf, sizeof buf,
        "{\"requests_submitted\":%llu,\"requests_finished\":%llu,\"requests_aborted\":%llu,\"requests_failed\":%llu,"
        "\"requests_running\":%d,\"requests_waiting\":%d,\"requests_swapped\":%d,"
        "\"prefill_tokens\":%llu,\"decode_tokens\":%llu,\"steps\":%llu,"
        "\"preemptions\":%llu,\"preemptions_by_mode\":{\"recompute\":%llu,\"swap\":%llu},"
        "\"prefix_cache\":{\"lookups\":%llu,\"hit_blocks\":%llu,\"hit_tokens\":%llu,\"evictions\":%llu},"
        "\"response_cache\":{\"hits\":%llu,\"misses\":%llu,\"entries\":%d,\"bytes\":%zu},"
        "\"kv\":{\"block_size\":%d,\"blocks_total\":%d,\"blocks_free\":%d,\"blocks_cached\":%d,\"blocks_used\":%d,"
        "\"blocks_pinned\":%d,\"swap_blocks_total\":%d,\"swap_blocks_used\":%d},"
        "\"memory\":{\"scratch_bytes\":%zu,\"kv_bytes\":%lld,\"swap_bytes\":%zu,\"swap_locked\":%s},"
        "\"kv_dtype\":\"%s\",\"kv_dtype_auto\":%s,\"kv_bytes_per_token\":%lld,"
        "\"knowledge\":[%s]}",
        (unsigned long long)p.submitted, (unsigned long long)p.finished, (unsigned long long)p.aborted,
        (unsigned long long)p.failed, p.running, p.waiting, p.swapped, (unsigned long long)p.prefill_tokens,
        (unsigned long long)p.decode_tokens, (unsigned long long)p.steps,
        (unsigned long long)(p.preempt_recompute + p.preempt_swap), (unsigned long long)p.preempt_recompute,
        (unsigned long long)p.preempt_swap, (unsigned long long)p.pc_lookups, (unsigned long long)p.pc_hit_blocks,
        (unsigned long long)p.pc_hit_tokens, (unsigned long long)p.pc_evictions, (unsigned long long)rc_hits,
        (unsigned long long)rc_misses, rc_entries, rc_bytes, e->block_size, e->kv.n_blocks, p.blocks_free,
        p.blocks_cached, p.blocks_used, p.blocks_pinned, e->bm.swap_total, p.swap_used, e->scratch_bytes,
        (long long)e->kv.n_blocks * block_bytes(e->m, e->block_size, e->kv.dtype), e->bm.swap_bytes,
        e->bm.swap_locked ? "true" : "false", kvq_name(e->kv.dtype), e->kv_auto ? "true" : "false",
        (long long)block_bytes(e->m, 1, e->kv.dtype), know);
    if (len < 0 || (size_t)len >= sizeof buf) return xllm_strdup("{}");
    return xllm_strdup(buf);
}

/* Queue a job for the scheduler thread and wait for it. */
xllm_status engine_run_job(engine *e, engine_job *j, xllm_error *err) {
    xllm_error_clear(&j->err);
    j->done = 0;
    pthread_mutex_lock(&e->lock);
    if (e->stopping) {
        pthread_mutex_unlock(&e->lock);
        return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "the engine is shutting down");
    }
    j->next = e->jobs;
    e->jobs = j;
    pthread_cond_signal(&e->wake);
    while (!j->done) pthread_cond_wait(&e->out, &e->lock);
    pthread_mutex_unlock(&e->lock);
    if (j->st && err) *err = j->err;
    return j->st;
}

void xllm_results_free_one(xllm_result *r) {
    xllm_free(r->prompt_ids);
    xllm_free(r->ids);
    xllm_free(r->text);
    xllm_free(r->logprobs);
    xllm_free(r->top_ids);
    xllm_free(r->top_logprobs);
    memset(r, 0, sizeof *r);
}

void xllm_results_free(xllm_result *results, size_t n) {
    if (!results) return;
    for (size_t i = 0; i < n; i++) xllm_results_free_one(&results[i]);
    xllm_free(results);
}
