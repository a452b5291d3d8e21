/*
 * engine_intake.c - requests coming in: validation and tokenization
 * (prepare), the request map (ids to requests), queueing for the scheduler
 * (or answering from the response cache at once), abort, and freeing a
 * request.
 *
 * Caller threads run all of it. Preparing needs no lock (it reads only what
 * is fixed after engine_create, and the pinned-block count, atomically);
 * queueing and the map are under the engine lock; the scheduler takes the
 * queue at the start of its next iteration (engine.c).
 */
#include "engine/engine.h"
#include "base/alloc.h"
#include "base/error.h"

#include <string.h>

#define MAX_STOP_LEN 1024

void engine_request_free(engine_request *r) {
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

engine_request *request_map_find(engine *e, xllm_request_id id) {
    for (engine_request *r = e->map[id & e->map_mask]; r; r = r->map_next)
        if (r->id == id) return r;
    return NULL;
}

void request_map_remove(engine *e, engine_request *r) {
    engine_request **link = &e->map[r->id & e->map_mask];
    while (*link && *link != r) link = &(*link)->map_next;
    if (*link) *link = r->map_next;
}

/* The request's own limits (samples, priority, log-probabilities, stop
 * strings and ids, the sampling parameters); *stop_bytes: the stop strings'
 * storage. */
static xllm_status check_request(const engine *e, const xllm_request *q, size_t *stop_bytes, xllm_error *err) {
    const xllm_sampling_params *p = &q->params;
    if ((q->n <= 0 ? 1 : q->n) > XLLM_MAX_SAMPLES)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "n = %d samples; at most %d", q->n, XLLM_MAX_SAMPLES);
    if (q->priority != XLLM_PRIORITY_ONLINE && q->priority != XLLM_PRIORITY_OFFLINE)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "priority %d is neither online (0) nor offline (1)",
                           (int)q->priority);
    if (p->logprobs != 0 && p->logprobs != 1)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "logprobs must be 0 or 1 (got %d)", p->logprobs);
    if (p->top_logprobs < 0 || p->top_logprobs > XLLM_MAX_TOP_LOGPROBS || (p->top_logprobs && !p->logprobs))
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "top_logprobs must be 0..%d, with logprobs set (got %d)",
                           XLLM_MAX_TOP_LOGPROBS, p->top_logprobs);
    if (p->n_stop < 0 || p->n_stop > XLLM_MAX_STOP_STRINGS)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "%d stop strings; at most %d", p->n_stop,
                           XLLM_MAX_STOP_STRINGS);
    if (p->n_stop_ids < 0 || p->n_stop_ids > XLLM_MAX_STOP_IDS)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "%d stop ids; at most %d", p->n_stop_ids, XLLM_MAX_STOP_IDS);
    *stop_bytes = 0;
    for (int i = 0; i < p->n_stop; i++) {
        if (!p->stop[i]) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "stop string %d is NULL", i);
        size_t l = strlen(p->stop[i]);
        if (l > MAX_STOP_LEN)
            return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "stop string %d is %zu bytes long; at most %d", i, l,
                               MAX_STOP_LEN);
        *stop_bytes += l + 1;
    }
    {
        sampler probe;
        xllm_status st = sampler_init(&probe, p, e->m->cfg.vocab, err);
        if (st) return st;
        sampler_free(&probe);
    }
    return XLLM_OK;
}

/* The prompt's ids into r->prompt (tokenized when it is text), *np of them,
 * checked against the context and the vocabulary. */
static xllm_status take_prompt(const engine *e, const xllm_request *q, engine_request *r, size_t *np_out,
                               xllm_error *err) {
    xllm_status st = XLLM_OK;
    size_t np = 0;
    if (q->prompt) {
        if (!e->tok)
            st = err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "a text prompt, but the model has no tokenizer");
        else
            st = tokenizer_encode(e->tok, q->prompt, strlen(q->prompt), 1, &r->prompt, &np, err);
    } else if (q->n_prompt_ids && !q->prompt_ids) {
        st = err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "prompt_ids is NULL");
    } else if (q->n_prompt_ids >= (size_t)e->max_context) {
        np = q->n_prompt_ids;
    } else {
        np = q->n_prompt_ids;
        r->prompt = mem_malloc_array(np ? np : 1, sizeof(int32_t));
        if (!r->prompt) st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        else if (np) memcpy(r->prompt, q->prompt_ids, np * sizeof(int32_t));
    }
    if (!st && np == 0) st = err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "the prompt is empty (no tokens)");
    if (!st && np >= (size_t)e->max_context)
        st = err_setf(err, XLLM_ERR_CONTEXT_OVERFLOW,
                         "the prompt has %zu tokens but the context holds %d (at least one must be left to generate)",
                         np, e->max_context);
    for (size_t k = 0; !st && k < np; k++)
        if (r->prompt[k] < 0 || r->prompt[k] >= e->m->cfg.vocab)
            st = err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "prompt token id %d is outside the vocabulary (0..%d)",
                             r->prompt[k], e->m->cfg.vocab - 1);
    *np_out = np;
    return st;
}

/* Room in the KV pool (less the pinned blocks) for the prompt and
 * max_new_tokens, up to the context. */
static xllm_status check_room(const engine *e, size_t np, const xllm_sampling_params *p, xllm_error *err) {
    int need = (int)np + (p->max_new_tokens > 0 ? p->max_new_tokens : 0);
    if (need > e->max_context || need < 0) need = e->max_context;
    int32_t blocks = kv_blocks_for_tokens(&e->kv, need);
    int32_t usable = e->kv.n_blocks - atomic_load(&e->pinned_blocks);
    if (blocks > usable)
        return err_setf(err, XLLM_ERR_CONTEXT_OVERFLOW,
                           "the prompt and max_new_tokens need %d KV blocks (%d tokens) but the KV pool has %d "
                           "(%lld tokens); raise memory.workspace_size (or kv_tokens: xllm_model_options.kv_tokens, "
                           "Python LLM(kv_tokens=...)) or lower max_new_tokens",
                           blocks, need, usable, (long long)usable * e->block_size);
    return XLLM_OK;
}

/* Validate and tokenize a request into a fresh engine_request (not queued). */
static xllm_status request_prepare(engine *e, const xllm_request *q, engine_request **out, xllm_error *err) {
    *out = NULL;
    if (!q) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "the request is NULL");
    size_t stop_bytes;
    xllm_status st = check_request(e, q, &stop_bytes, err);
    if (st) return st;
    const xllm_sampling_params *p = &q->params;
    int n = q->n <= 0 ? 1 : q->n;
    engine_request *r = mem_calloc(1, sizeof *r);
    if (!r) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    r->n = n;
    r->priority = q->priority;
    r->params = *p;
    r->stop_store = mem_malloc(stop_bytes + 1);
    if (!r->stop_store) st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    for (size_t i = 0, off = 0; !st && i < (size_t)p->n_stop; i++) {
        size_t l = strlen(p->stop[i]);
        memcpy(r->stop_store + off, p->stop[i], l + 1);
        r->params.stop[i] = r->stop_store + off;
        off += l + 1;
    }
    /* the prompt */
    size_t np = 0;
    if (!st) st = take_prompt(e, q, r, &np, err);
    if (!st) st = check_room(e, np, p, err);
    r->n_prompt = (int)np;
    if (!st) {
        r->seqs = mem_calloc((size_t)n, sizeof *r->seqs);
        r->out = mem_calloc((size_t)n, sizeof *r->out);
        r->last = mem_calloc((size_t)n, sizeof *r->last);
        if (!r->seqs || !r->out || !r->last) st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
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
        if (!r->rc_key) st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    if (st) {
        engine_request_free(r);
        return st;
    }
    atomic_init(&r->abort_req, 0);
    *out = r;
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
        if (hit && hit->n == r->n && stream_from_cache(r, hit) == XLLM_OK) cached = 1;
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

void engine_discard(engine_request *r) { engine_request_free(r); }

xllm_status xllm_engine_submit(xllm_engine *e, const xllm_request *req, xllm_notify_fn notify, void *notify_user,
                               xllm_request_id *id, xllm_error *err) {
    err_clear(err);
    if (!e || !id) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "engine or id is NULL");
    *id = 0;
    engine_request *r;
    xllm_status st = request_prepare(e, req, &r, err);
    if (st) return st;
    pthread_mutex_lock(&e->lock);
    int stopping = e->stopping;
    pthread_mutex_unlock(&e->lock);
    if (stopping) {
        engine_request_free(r);
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "the engine is shutting down");
    }
    request_enqueue(e, r, notify, notify_user, id);
    return XLLM_OK;
}

void xllm_engine_abort(xllm_engine *e, xllm_request_id id) {
    if (!e) return;
    pthread_mutex_lock(&e->lock);
    engine_request *r = request_map_find(e, id);
    if (r && !r->done) {
        atomic_store(&r->abort_req, 1);
        pthread_cond_signal(&e->wake);
    }
    pthread_mutex_unlock(&e->lock);
}
