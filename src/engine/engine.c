/*
 * engine.c - the serving engine's life: create (options checked, memory
 * planned by memory_plan.c, pools and buffers made), the scheduler thread,
 * jobs, destroy. Requests come in through engine_intake.c, output leaves
 * through engine_stream.c, counters through engine_stats.c (the design is in
 * engine.h and scheduler.c).
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
#include "base/error.h"
#include "engine/memory_plan.h"
#include "pipeline/pipeline.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAP_BUCKETS 4096
#define DEFAULT_RC_BYTES ((int64_t)64 << 20)
#define DEFAULT_RC_ENTRIES 4096

xllm_engine_options xllm_engine_options_default(void) {
    xllm_engine_options o;
    memset(&o, 0, sizeof o);
    o.preempt_mode = XLLM_PREEMPT_ELASTIC;
    o.cache_policy = XLLM_CACHE_LRU;
    return o;
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
                r->fail_msg = mem_strdup(msg);
                e->st.failed++;
            }
        }
    pthread_mutex_unlock(&e->lock);
    sched_cancel_all(e);
}

int engine_deadline(struct timespec *dl, int timeout_ms) {
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
            engine_deadline(&dl, e->o.timeout_ms);
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
            engine_publish_stats(e); /* the caller sees the job's effect in the stats at once */
            j->done = 1;
            pthread_cond_broadcast(&e->out);
            pthread_mutex_unlock(&e->lock);
            j = n;
        }
        if (stopping) sched_cancel_all(e);
        xllm_error err;
        err_clear(&err);
        xllm_status st = sched_step(e, &err);
        if (st) fail_everything(e, st, err.message);
        if (e->debug) check_pool(e, "after a step");

        pthread_mutex_lock(&e->lock);
        do {
            int n_notes = engine_publish(e, notes, (int)(sizeof notes / sizeof *notes));
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

static xllm_status check_options(const xllm_engine_options *eo, xllm_error *err) {
    if (eo->preempt_mode < XLLM_PREEMPT_RECOMPUTE || eo->preempt_mode > XLLM_PREEMPT_ELASTIC)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "preempt_mode %d is not recompute, swap or elastic",
                           eo->preempt_mode);
    if (eo->cache_policy != XLLM_CACHE_LRU && eo->cache_policy != XLLM_CACHE_NONE)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "cache_policy %d is not lru or none", eo->cache_policy);
    if (eo->timeout_ms < 0 || eo->timeout_ms > 60000 || eo->max_batch_size < 0 || eo->workspace_size < 0 ||
        eo->swap_size < -1 || eo->response_cache_max_bytes < 0 || eo->response_cache_max_entries < 0 ||
        eo->n_knowledge < 0 || eo->n_knowledge > XLLM_MAX_KNOWLEDGE)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                           "engine options out of range (timeout_ms 0..60000, sizes and counts non-negative, at most %d "
                           "knowledge prefixes)", XLLM_MAX_KNOWLEDGE);
    return XLLM_OK;
}

/* What the memory plan needs of the model: this process's layers and its
 * forward scratch. */
static memory_model memory_model_of(const model *m, int block_size, int max_context) {
    const backend *be = &m->be;
    return (memory_model){m->layer_end - m->layer_begin, m->cfg.n_kv_heads, m->cfg.head_dim, m->cfg.vocab,
                          m->s.max_tokens, m->s.bytes,
                          be->ops->own_bytes ? be->ops->own_bytes(be->ctx, block_size, max_context) : 0};
}

/* The step buffers (sized once for the largest step) and the request map. */
static xllm_status alloc_step_buffers(engine *e, xllm_error *err) {
    size_t T = (size_t)e->max_step_tokens, S = (size_t)e->max_seqs, V = (size_t)e->m->cfg.vocab;
    e->tokens = mem_malloc_array(T, sizeof(int32_t));
    e->pos = mem_malloc_array(T, sizeof(int32_t));
    e->seq = mem_malloc_array(T, sizeof(int32_t));
    e->out_idx = mem_malloc_array(T, sizeof(int32_t));
    e->tables = mem_calloc(T, sizeof(int32_t *));
    e->step_seqs = mem_calloc(T, sizeof(sequence *));
    e->out_seqs = mem_calloc(T, sizeof(sequence *));
    e->logits = mem_malloc_array(S * V, sizeof(float));
    e->fork_logits = mem_malloc_array(V, sizeof(float));
    e->lp_row = mem_malloc_array(V, sizeof(float));
    e->map_mask = MAP_BUCKETS - 1;
    e->map = mem_calloc(MAP_BUCKETS, sizeof *e->map);
    if (!e->tokens || !e->pos || !e->seq || !e->out_idx || !e->tables || !e->step_seqs || !e->out_seqs ||
        !e->logits || !e->fork_logits || !e->lp_row || !e->map)
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "cannot allocate engine buffers");
    return XLLM_OK;
}

static xllm_status start_thread(engine *e, xllm_error *err) {
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->wake, NULL);
    pthread_cond_init(&e->out, NULL);
    if (pthread_create(&e->thread, NULL, engine_thread, e)) {
        pthread_mutex_destroy(&e->lock);
        pthread_cond_destroy(&e->wake);
        pthread_cond_destroy(&e->out);
        return err_setf(err, XLLM_ERR_INTERNAL, "cannot start the engine thread");
    }
    e->thread_started = 1;
    pthread_mutex_lock(&e->lock);
    engine_publish_stats(e); /* the stats readers see from the start */
    pthread_mutex_unlock(&e->lock);
    return XLLM_OK;
}

/* The verbose line: how the memory was divided and how the engine runs. */
static void report_plan(const engine *e, const memory_plan *mp) {
    const xllm_engine_options *eo = &e->o;
    char sc[32], kv[32], sw[32], bk[32] = "";
    memory_fmt_bytes(sc, sizeof sc, (int64_t)e->scratch_bytes);
    if (mp->backend_bytes) { /* a device backend's own scratch, ring and staging */
        char b[32];
        memory_fmt_bytes(b, sizeof b, (int64_t)mp->backend_bytes);
        snprintf(bk, sizeof bk, " + backend %s", b);
    }
    memory_fmt_bytes(kv, sizeof kv, (int64_t)mp->n_blocks * mp->block_bytes);
    memory_fmt_bytes(sw, sizeof sw, (int64_t)mp->swap_blocks * mp->block_bytes);
    fprintf(stderr,
            "xllm engine: scratch %s%s | KV pool %s = %d blocks x %d tokens (%lld tokens), kv_dtype %s%s | swap "
            "pool %s = %d blocks%s | batch %d sequences, %d tokens per step | preempt %s, prefix cache %s, "
            "response cache %s\n",
            sc, bk, kv, mp->n_blocks, e->block_size, (long long)mp->n_blocks * e->block_size, kvq_name(mp->kv_dtype),
            mp->kv_auto ? " (auto)" : "", sw, mp->swap_blocks,
            mp->swap_blocks ? (e->bm.swap_locked ? " (page-locked)" : " (not page-locked: RLIMIT_MEMLOCK)") : "",
            e->max_seqs, e->max_step_tokens,
            eo->preempt_mode == XLLM_PREEMPT_RECOMPUTE ? "recompute"
            : eo->preempt_mode == XLLM_PREEMPT_SWAP    ? "swap"
                                                       : "elastic",
            eo->cache_policy == XLLM_CACHE_LRU ? "lru" : "off", eo->response_cache ? "on" : "off");
    const backend *be = &e->m->be; /* a device backend's own split (weights, device memory, staging) */
    if (be->ops->describe) fprintf(stderr, "xllm backend: %s\n", be->ops->describe(be->ctx));
}

engine *engine_create(model *m, const tokenizer *tok, pthread_mutex_t *model_lock, const xllm_model_options *mo,
                      const xllm_engine_options *eo_in, xllm_error *err) {
    xllm_engine_options eo = eo_in ? *eo_in : xllm_engine_options_default();
    const model_config *c = &m->cfg;
    if (check_options(&eo, err)) return NULL;
    engine *e = mem_calloc(1, sizeof *e);
    if (!e) {
        err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        return NULL;
    }
    e->m = m;
    e->tok = tok;
    e->model_lock = model_lock;
    e->o = eo;
    e->max_context = mo->max_context;
    e->max_step_tokens = m->s.max_tokens;
    e->block_size = mo->kv_block_size;
    e->eos.n = c->n_eos;
    e->eos.ids = c->eos_ids;
    e->debug = mo->debug_checks != 0;
    atomic_init(&e->pinned_blocks, 0);

    memory_model mm = memory_model_of(m, mo->kv_block_size, mo->max_context);
    memory_plan mp;
    if (memory_plan_make(&mm, mo, &eo, &mp, err)) {
        xllm_free(e);
        return NULL;
    }
    e->max_seqs = mp.max_seqs;
    e->scratch_bytes = mp.scratch_bytes;
    e->backend_bytes = mp.backend_bytes;
    e->kv_auto = mp.kv_auto;
    xllm_status st = kv_cache_init(&e->kv, &m->be, m->layer_end - m->layer_begin, c->n_kv_heads, c->head_dim,
                                   e->block_size, mp.n_blocks, mp.kv_dtype, err);
    if (st) {
        xllm_free(e);
        return NULL;
    }
    e->kv.layer0 = m->layer_begin;
    if ((st = bm_init(&e->bm, &e->kv, eo.cache_policy == XLLM_CACHE_LRU, mp.swap_blocks, err))) goto fail;
    if ((st = rc_init(&e->rc, (size_t)(eo.response_cache_max_bytes ? eo.response_cache_max_bytes : DEFAULT_RC_BYTES),
                      eo.response_cache_max_entries ? eo.response_cache_max_entries : DEFAULT_RC_ENTRIES, err)))
        goto fail;
    if ((st = alloc_step_buffers(e, err))) goto fail;
    e->fingerprint = model_fingerprint(m);
    if ((st = start_thread(e, err))) goto fail;
    if (eo.verbose) report_plan(e, &mp);
    return e;
fail:
    engine_destroy(e); /* everything not yet made is zero, which destroy skips */
    return NULL;
}

xllm_status engine_attach_pipeline(engine *e, struct pipeline *p, xllm_error *err) {
    if (e->o.n_knowledge > 0)
        return err_setf(err, XLLM_ERR_UNSUPPORTED, "knowledge prefixes are not supported with pipeline parallelism");
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
        request_map_remove(e, r);
        engine_request_free(r);
        r = n;
    }
    for (uint32_t b = 0; e->map && b <= e->map_mask; b++)
        for (engine_request *r = e->map[b]; r;) {
            engine_request *n = r->map_next;
            engine_request_free(r);
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

/* Queue a job for the scheduler thread and wait for it. */
xllm_status engine_run_job(engine *e, engine_job *j, xllm_error *err) {
    err_clear(&j->err);
    j->done = 0;
    pthread_mutex_lock(&e->lock);
    if (e->stopping) {
        pthread_mutex_unlock(&e->lock);
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "the engine is shutting down");
    }
    j->next = e->jobs;
    e->jobs = j;
    pthread_cond_signal(&e->wake);
    while (!j->done) pthread_cond_wait(&e->out, &e->lock);
    pthread_mutex_unlock(&e->lock);
    if (j->st && err) *err = j->err;
    return j->st;
}

