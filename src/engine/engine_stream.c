/*
 * engine_stream.c - output on its way to the callers: the scheduler's new
 * tokens published into per-sample outboxes, polled out as chunks, the final
 * results, and the end of a request's life on the caller's side (release).
 *
 * The scheduler thread publishes after each step, under the engine lock;
 * a poll swaps a sample's outbox with the one the caller read last time, so
 * a chunk's memory stays valid until that caller's next poll and neither side
 * copies the other's data. Notify functions are called with no lock held
 * (engine.c), so release and result wait until the scheduler is out of them.
 */
#include "engine/engine.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "base/error.h"

#include <errno.h>
#include <string.h>

void outbox_free(outbox *b) {
    xllm_free(b->ids);
    xllm_free(b->text);
    xllm_free(b->ends);
    xllm_free(b->lp);
    xllm_free(b->top_ids);
    xllm_free(b->top_lp);
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
    void *q = mem_realloc(*p, want_bytes ? want_bytes : 1);
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
        if (array_reserve(&b->ids, &cap, need, sizeof(int32_t), 16) ||
            grow((void **)&b->ends, cap * sizeof(uint32_t)))
            return XLLM_ERR_OUT_OF_MEMORY;
        if (pc->lp && (grow((void **)&b->lp, cap * sizeof(float)) ||
                       grow((void **)&b->top_ids, cap * nt * sizeof(int32_t)) ||
                       grow((void **)&b->top_lp, cap * nt * sizeof(float))))
            return XLLM_ERR_OUT_OF_MEMORY;
        b->cap_ids = cap;
    }
    if (array_reserve(&b->text, &b->cap_text, b->text_len + pc->text_len + 1, 1, 64))
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

/* A response-cache hit: the request is done at once, its outboxes hold the
 * stored output. Under the lock. */
xllm_status stream_from_cache(engine_request *r, const rc_entry *hit) {
    r->results = mem_calloc((size_t)r->n, sizeof *r->results);
    if (!r->results) return XLLM_ERR_OUT_OF_MEMORY;
    for (int j = 0; j < r->n; j++) {
        const rc_sample *s = &hit->samples[j];
        out_piece pc = {s->ids, s->n_ids, s->text, s->text_len, s->text_end, 0, s->lp, s->top_ids, s->top_lp, s->n_top};
        if (outbox_append(&r->out[j], &pc)) return XLLM_ERR_OUT_OF_MEMORY;
        r->out[j].finished = 1;
        r->out[j].reason = s->reason;
        xllm_result *res = &r->results[j];
        res->n_prompt_ids = (size_t)r->n_prompt;
        res->prompt_ids = mem_malloc_array((size_t)r->n_prompt + 1, sizeof(int32_t));
        res->ids = mem_malloc_array(s->n_ids + 1, sizeof(int32_t));
        res->text = mem_strndup(s->text, s->text_len);
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

/* ------------------------------------------------------------ publishing */

/* Move the step's output into the outboxes; finish done requests; their
 * notifications into notes[] (at most max; requests past that stay in the
 * list for the next call). Under the lock. Returns the number of notes. */
int engine_publish(engine *e, pending_notify *notes, int max) {
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
                    r->fail_msg = mem_strdup("out of memory delivering the tokens");
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
            xllm_result *res = mem_calloc((size_t)r->n, sizeof *res);
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
                    r->fail_msg = mem_strdup("out of memory building the results");
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
            request_map_remove(e, r);
            engine_request_free(r);
        }
    }
    engine_publish_stats(e);
    pthread_cond_broadcast(&e->out);
    return n_notes;
}

/* ----------------------------------------------------------------- polling */

xllm_poll_result xllm_engine_poll(xllm_engine *e, xllm_request_id id, xllm_chunk *chunk, int timeout_ms,
                                  xllm_error *err) {
    err_clear(err);
    if (!e || !chunk) {
        err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "engine or chunk is NULL");
        return XLLM_POLL_ERROR;
    }
    memset(chunk, 0, sizeof *chunk);
    struct timespec dl;
    int timed = engine_deadline(&dl, timeout_ms);
    pthread_mutex_lock(&e->lock);
    for (;;) {
        engine_request *r = request_map_find(e, id);
        if (!r || r->released) {
            pthread_mutex_unlock(&e->lock);
            err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "no request with id %llu", (unsigned long long)id);
            return XLLM_POLL_ERROR;
        }
        if (r->fail) {
            err_setf(err, r->fail, "%s", r->fail_msg ? r->fail_msg : "the request failed");
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
    while (request_map_find(e, id)) pthread_cond_wait(&e->out, &e->lock); /* publish frees it, then broadcasts */
    pthread_mutex_unlock(&e->lock);
}

void xllm_engine_release(xllm_engine *e, xllm_request_id id) {
    if (!e) return;
    pthread_mutex_lock(&e->lock);
    engine_request *r = request_map_find(e, id);
    if (r && !r->released) {
        r->released = 1;
        r->notify = NULL;
        if (r->sched_owned) {
            atomic_store(&r->abort_req, 1); /* the scheduler frees it when it is done with it */
            pthread_cond_signal(&e->wake);
        } else {
            request_map_remove(e, r);
            engine_request_free(r);
        }
    }
    wait_notifies(e);
    pthread_mutex_unlock(&e->lock);
}

xllm_status xllm_engine_result(xllm_engine *e, xllm_request_id id, xllm_result **results, size_t *n,
                               xllm_error *err) {
    err_clear(err);
    if (!e || !results || !n) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "NULL argument");
    *results = NULL;
    *n = 0;
    pthread_mutex_lock(&e->lock);
    engine_request *r;
    for (;;) {
        r = request_map_find(e, id);
        if (!r || r->released) {
            pthread_mutex_unlock(&e->lock);
            return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "no request with id %llu", (unsigned long long)id);
        }
        if (r->done) break;
        pthread_cond_wait(&e->out, &e->lock);
    }
    xllm_status st = XLLM_OK;
    if (r->fail) st = err_setf(err, r->fail, "%s", r->fail_msg ? r->fail_msg : "the request failed");
    else {
        *results = r->results;
        *n = (size_t)r->n;
        r->results = NULL;
    }
    request_map_remove(e, r);
    engine_request_free(r);
    wait_notifies(e);
    pthread_mutex_unlock(&e->lock);
    return st;
}

void result_free_one(xllm_result *r) {
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
    for (size_t i = 0; i < n; i++) result_free_one(&results[i]);
    xllm_free(results);
}
