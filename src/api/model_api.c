/*
 * model_api.c - the public model functions of xllm.h: option defaults, load
 * (config + weights + tokenizer + its own serving engine), logits, generate,
 * and engine creation.
 *
 * A public xllm_model bundles the model, its tokenizer and a default engine
 * (src/engine). Every engine on the model serializes its forward passes on
 * the model's forward lock, so engines, xllm_generate calls and
 * xllm_model_logits may run from any threads at once. xllm_generate is a thin
 * wrapper: submit every request, then wait on their streams, calling the
 * token callback on the calling thread. Freeing the model waits for calls in
 * flight; from inside a callback of that model, the free is deferred until
 * the outermost call returns.
 */
#include "xllm.h"
#include "base/alloc.h"
#include "base/progress.h"
#include "base/error.h"
#include "base/file.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "model/kv_cache.h"
#include "pipeline/pipeline.h"
#include "backend/vulkan/vulkan_backend.h"
#include "tokenizer/tokenizer.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct xllm_model {
    model *m;
    tokenizer *tok;
    engine *eng;              /* the model's own engine (xllm_generate) */
    xllm_model_options opts;  /* resolved */
    char *plan_json;          /* the planner's report (NULL when options.no_plan) */
    pthread_mutex_t forward_lock;
    pthread_mutex_t calls_lock;
    pthread_cond_t calls_cond;
    int active_calls;         /* xllm_generate / xllm_model_logits in flight */
    int free_pending;         /* xllm_model_free called from inside a callback */
    pipeline *pp;             /* pipeline parallelism (pp_size > 1), else NULL */
    int pp_rank;
};

/* The model whose token callback this thread is running (xllm_generate). */
static _Thread_local xllm_model *tl_in_callback;

#define DEFAULT_MAX_CONTEXT_CAP 8192
#define DEFAULT_KV_BYTES_CAP ((int64_t)1 << 30)
#define MAX_STEP_TOKENS 512
#define PLAN_BUDGET_MS 400

xllm_model_options xllm_model_options_default(void) {
    xllm_model_options o;
    memset(&o, 0, sizeof o);
    return o;
}

/* Fill zeros with defaults that fit this model. */
static void resolve_options(const model_config *c, xllm_model_options *o) {
    if (o->kv_block_size <= 0) o->kv_block_size = 16;
    if (o->max_batch_seqs <= 0) o->max_batch_seqs = 16;
    if (o->max_context <= 0) o->max_context = c->max_positions < DEFAULT_MAX_CONTEXT_CAP ? c->max_positions : DEFAULT_MAX_CONTEXT_CAP;
    if (o->kv_tokens <= 0) { /* in the kv_dtype asked for (auto: f32, which the engine may then compress) */
        kv_dtype dt = KV_F32;
        int is_auto;
        if (kvq_parse(o->kv_dtype, &dt, &is_auto)) dt = KV_F32;
        int64_t per_token = (int64_t)kv_bytes_per_token(dt, c->n_layers, c->n_kv_heads, c->head_dim);
        /* max_batch_seqs sequences at full context, each in whole blocks (a pool of
         * max_context * max_batch_seqs tokens is short of that when blocks do not
         * divide max_context: the last sequence would be preempted) */
        int64_t seq_tokens = (int64_t)kv_blocks_for_tokens(&(kv_cache){.block_size = o->kv_block_size}, o->max_context) *
                             o->kv_block_size;
        int64_t want = seq_tokens * o->max_batch_seqs;
        int64_t cap = DEFAULT_KV_BYTES_CAP / per_token;
        if (want > cap) want = cap;
        if (want < seq_tokens) want = seq_tokens;
        o->kv_tokens = want;
    }
}

xllm_model *xllm_model_load(const char *path, const xllm_model_options *opts, xllm_error *err) {
    err_clear(err);
    if (!path) {
        err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "model path is NULL");
        return NULL;
    }
    int is_dir = file_is_dir(path);
    if (!is_dir && !path_exists(path)) {
        err_setf(err, XLLM_ERR_IO, "%s: no such model; a model is a HuggingFace checkpoint directory (config.json + *.safetensors), an "
                    ".xllm file or a GGUF file",
                    path);
        return NULL;
    }
    xllm_model_options o = opts ? *opts : xllm_model_options_default();
    if (o.profile) xllm_profile_enable(1);
    xllm_model *xm = mem_calloc(1, sizeof *xm);
    if (!xm) {
        err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        return NULL;
    }
    if (o.max_step_tokens <= 0) o.max_step_tokens = MAX_STEP_TOKENS;
    kv_dtype kdt = KV_F32;
    int kv_auto = 0;
    if (kvq_parse(o.kv_dtype, &kdt, &kv_auto)) {
        err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "kv_dtype '%s' is not f32, f16, q8 or auto", o.kv_dtype);
        goto fail;
    }
    o.kv_dtype = kv_auto ? "auto" : kvq_name(kdt); /* a static string: engines read it after the caller's is gone */
    int arith_llama = o.arithmetic && !strcmp(o.arithmetic, "llama");
    if (o.arithmetic && *o.arithmetic && !arith_llama && strcmp(o.arithmetic, "xllm")) {
        err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "arithmetic '%s' is not xllm or llama", o.arithmetic);
        goto fail;
    }
    o.arithmetic = arith_llama ? "llama" : "xllm";
    model_part part = {o.layer_begin, o.layer_end, 0, 1, NULL};
    if (o.pp_size < 0 || (o.pp_size > 1 && (o.layer_begin || o.layer_end)) || o.pp_microbatches < 0 ||
        o.pp_timeout_ms < 0) {
        err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                    "pipeline options: pp_size, pp_microbatches and pp_timeout_ms must not be negative, and a "
                    "layer range goes without pp_size");
        goto fail;
    }
    if (o.pp_size > 1) {
        pipeline_options po = {o.pp_size, o.pp_microbatches, o.pp_timeout_ms, o.pp_stats, o.pp_test_fail_after,
                               o.pp_test_fail_hang};
        if (pipeline_start(&po, &xm->pp, &xm->pp_rank, err)) goto fail;
        part = (model_part){0, 0, xm->pp_rank, o.pp_size, o.pp_layers};
    }
    model_load_options lo = {o.n_threads, o.max_step_tokens, o.backend, o.cpu_level, o.attention, o.no_fuse,
                             o.no_repack, &part, o.plan_cache, arith_llama, o.device};
    if (o.progress) o.progress(o.progress_user, "loading", 0.0);
    load_progress_begin(o.progress, o.progress_user, "loading"); /* the weights' repacking reports (base/progress.h) */
    xm->m = model_load_ex(path, &lo, err);
    load_progress_end();
    if (!xm->m) goto fail;
    if (xm->pp && pipeline_ready(xm->pp, xm->m, err)) goto fail;
    int whole = xm->m->layer_begin == 0 && xm->m->layer_end == xm->m->cfg.n_layers;
    char tp[4096];
    path_join(tp, sizeof tp, path, "tokenizer.json");
    if (xm->pp_rank > 0) {
        /* a worker rank: no tokenizer, no engine */
    } else if (is_dir && path_exists(tp)) {
        xm->tok = tokenizer_load(path, err);
        if (!xm->tok) goto fail;
    } else if (!is_dir && xm->m->tok_json) {
        /* model files (.xllm, GGUF) carry their tokenizer */
        char label[4200];
        snprintf(label, sizeof label, "%s: tokenizer", path);
        xm->tok = tokenizer_load_text(xm->m->tok_json, xm->m->tok_json_len, xm->m->tok_config, xm->m->tok_config_len,
                                      label, err);
        if (!xm->tok) goto fail;
    }
    if (!kv_auto && !kvq_supported(kdt, xm->m->cfg.head_dim)) {
        err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "kv_dtype %s needs head_dim a multiple of 4 and at least 8 (this model: %d)",
                    kvq_name(kdt), xm->m->cfg.head_dim);
        goto fail;
    }
    resolve_options(&xm->m->cfg, &o);
    model_rope_context(xm->m, o.max_context); /* LongRoPE: short or long factors for this context (llama.cpp's rule) */
    if (o.max_batch_seqs > o.max_step_tokens) o.max_batch_seqs = o.max_step_tokens; /* one decode token each */
    o.backend = o.cpu_level = o.attention = NULL; /* the caller's strings: used at load only */
    xm->opts = o;
    pthread_mutex_init(&xm->forward_lock, NULL);
    pthread_mutex_init(&xm->calls_lock, NULL);
    pthread_cond_init(&xm->calls_cond, NULL);
    xllm_engine_options eo = xllm_engine_options_default();
    if ((whole || (xm->pp && xm->pp_rank == 0)) &&
        !(xm->eng = engine_create(xm->m, xm->tok, &xm->forward_lock, &o, &eo, err)))
        goto fail_locks;
    if (xm->eng && xm->pp && engine_attach_pipeline(xm->eng, xm->pp, err)) goto fail_locks;
    if (o.progress) o.progress(o.progress_user, "loading", 1.0);
    if (!o.no_plan) {
        cJSON *report;
        if (o.progress) o.progress(o.progress_user, "planning", 0.0);
        if (model_plan(xm->m, PLAN_BUDGET_MS, &report, err)) goto fail_locks;
        if (o.progress) o.progress(o.progress_user, "planning", 1.0);
        char *text = cJSON_PrintUnformatted(report);
        cJSON_Delete(report);
        xm->plan_json = text ? mem_strdup(text) : NULL;
        cJSON_free(text);
    }
    return xm;
fail_locks:
    engine_destroy(xm->eng);
    xm->eng = NULL;
    pthread_mutex_destroy(&xm->forward_lock);
    pthread_mutex_destroy(&xm->calls_lock);
    pthread_cond_destroy(&xm->calls_cond);
fail:
    if (xm->pp) pipeline_abort(xm->pp, err && err->code ? err->message : "loading the model failed");
    if (xm->tok) tokenizer_free(xm->tok);
    model_free(xm->m);
    xllm_free(xm);
    return NULL;
}

static void model_free_now(xllm_model *xm) {
    xllm_free(xm->plan_json);
    engine_destroy(xm->eng);
    pipeline_end(xm->pp); /* rank 0: the workers return from xllm_model_pp_worker */
    if (xm->tok) tokenizer_free(xm->tok);
    model_free(xm->m);
    pthread_mutex_destroy(&xm->forward_lock);
    pthread_mutex_destroy(&xm->calls_lock);
    pthread_cond_destroy(&xm->calls_cond);
    xllm_free(xm);
    /* XLLM_DEBUG=1: what libxllm still holds (other models and engines, or leaks) */
    if (mem_debug_enabled()) mem_debug_report("after xllm_model_free");
}

void xllm_model_free(xllm_model *xm) {
    if (!xm) return;
    pthread_mutex_lock(&xm->calls_lock);
    if (tl_in_callback == xm) { /* inside our own callback: the outermost call frees it */
        xm->free_pending = 1;
        pthread_mutex_unlock(&xm->calls_lock);
        return;
    }
    while (xm->active_calls > 0) pthread_cond_wait(&xm->calls_cond, &xm->calls_lock);
    pthread_mutex_unlock(&xm->calls_lock);
    model_free_now(xm);
}

/* A call on the model starts / ends (xllm_model_free waits for them). */
static void call_begin(xllm_model *xm) {
    pthread_mutex_lock(&xm->calls_lock);
    xm->active_calls++;
    pthread_mutex_unlock(&xm->calls_lock);
}

static void call_end(xllm_model *xm) {
    pthread_mutex_lock(&xm->calls_lock);
    int last = --xm->active_calls == 0;
    int pending = xm->free_pending;
    if (last) pthread_cond_broadcast(&xm->calls_cond);
    pthread_mutex_unlock(&xm->calls_lock);
    if (last && pending) model_free_now(xm);
}

const xllm_tokenizer *xllm_model_tokenizer(const xllm_model *xm) { return (const xllm_tokenizer *)xm->tok; }
int32_t xllm_model_vocab_size(const xllm_model *xm) { return xm->m->cfg.vocab; }
int32_t xllm_model_context_size(const xllm_model *xm) { return xm->opts.max_context; }
int xllm_model_pp_rank(const xllm_model *xm) { return xm ? xm->pp_rank : 0; }

xllm_status xllm_model_pp_worker(xllm_model *xm, xllm_error *err) {
    err_clear(err);
    if (!xm || !xm->pp || xm->pp_rank == 0)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                           "xllm_model_pp_worker: the model was not loaded as a pipeline worker (pp_size > 1, rank > 0)");
    return pipeline_worker(xm->pp, xm->m, err);
}

/* A model part without an engine (a layer range, or a worker rank) cannot generate. */
static xllm_status no_engine(const xllm_model *xm, xllm_error *err) {
    if (xm->pp)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                           "pipeline rank %d runs xllm_model_pp_worker; rank 0 generates", xm->pp_rank);
    return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "the model was loaded for layers [%d, %d) of %d only",
                       xm->m->layer_begin, xm->m->layer_end, xm->m->cfg.n_layers);
}

xllm_status xllm_model_logits(xllm_model *xm, const int32_t *ids, size_t n_ids, int all_positions, float *out,
                              xllm_error *err) {
    err_clear(err);
    if (!xm) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "model is NULL");
    if (n_ids > (size_t)xm->opts.max_context)
        return err_setf(err, XLLM_ERR_CONTEXT_OVERFLOW, "logits: %zu ids exceed the context of %d", n_ids,
                           xm->opts.max_context);
    if (xm->pp || !xm->eng)
        return xm->pp ? err_setf(err, XLLM_ERR_UNSUPPORTED, "xllm_model_logits is not available with --pp yet")
                      : no_engine(xm, err);
    call_begin(xm);
    pthread_mutex_lock(&xm->forward_lock);
    kv_dtype kdt = KV_F32;
    int kv_auto;
    kvq_parse(xm->opts.kv_dtype, &kdt, &kv_auto); /* checked at load; auto: f32 (a pool of exactly these ids) */
    xllm_status st = model_logits_once(xm->m, ids, n_ids, all_positions, kdt, out, err);
    pthread_mutex_unlock(&xm->forward_lock);
    call_end(xm);
    return st;
}

xllm_status xllm_model_attention(xllm_model *xm, const int32_t *ids, size_t n_ids, const int32_t *layers,
                                 size_t n_layers, int average_heads, float **probs, int64_t shape[4], xllm_error *err) {
    err_clear(err);
    if (!xm || !probs || !shape) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "xllm_model_attention: NULL argument");
    *probs = NULL;
    memset(shape, 0, 4 * sizeof *shape);
    if (n_ids > (size_t)xm->opts.max_context)
        return err_setf(err, XLLM_ERR_CONTEXT_OVERFLOW, "attention: %zu ids exceed the context of %d", n_ids,
                           xm->opts.max_context);
    if (xm->pp || !xm->eng)
        return xm->pp ? err_setf(err, XLLM_ERR_UNSUPPORTED, "xllm_model_attention is not available with --pp yet")
                      : no_engine(xm, err);
    call_begin(xm);
    pthread_mutex_lock(&xm->forward_lock);
    kv_dtype kdt = KV_F32;
    int kv_auto;
    kvq_parse(xm->opts.kv_dtype, &kdt, &kv_auto);
    xllm_status st = model_attention_once(xm->m, ids, n_ids, layers, n_layers, average_heads ? 1 : 0, kdt, probs,
                                          shape, err);
    pthread_mutex_unlock(&xm->forward_lock);
    call_end(xm);
    return st;
}

int32_t xllm_model_hidden_size(const xllm_model *xm) { return xm ? xm->m->cfg.hidden : 0; }

xllm_status xllm_model_embed(xllm_model *xm, const int32_t *const *ids, const size_t *n_ids, size_t n_inputs,
                             xllm_pooling pooling, int normalize, float *out, xllm_error *err) {
    err_clear(err);
    if (!xm || (n_inputs && (!ids || !n_ids || !out)))
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "xllm_model_embed: NULL argument");
    for (size_t i = 0; i < n_inputs; i++)
        if (n_ids[i] > (size_t)xm->opts.max_context)
            return err_setf(err, XLLM_ERR_CONTEXT_OVERFLOW, "input %zu: %zu ids exceed the context of %d", i, n_ids[i],
                               xm->opts.max_context);
    if (xm->pp || !xm->eng)
        return xm->pp ? err_setf(err, XLLM_ERR_UNSUPPORTED, "xllm_model_embed is not available with --pp yet")
                      : no_engine(xm, err);
    if (!n_inputs) return XLLM_OK;
    call_begin(xm);
    pthread_mutex_lock(&xm->forward_lock);
    kv_dtype kdt = KV_F32;
    int kv_auto;
    kvq_parse(xm->opts.kv_dtype, &kdt, &kv_auto);
    xllm_status st = model_embed_batch(xm->m, ids, n_ids, n_inputs, (int)pooling, normalize, kdt, out, err);
    pthread_mutex_unlock(&xm->forward_lock);
    call_end(xm);
    return st;
}

/* ------------------------------------------------------------- generate */

typedef struct gen_wait {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int signalled;
} gen_wait;

static void gen_notify(void *user, xllm_request_id id) {
    (void)id;
    gen_wait *w = user;
    pthread_mutex_lock(&w->lock);
    w->signalled = 1;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

typedef struct gen_item {
    xllm_request_id id;
    int done, stopped;
    size_t delivered_ids, delivered_text;
    xllm_finish_reason last_reason;
    int last_finished;
} gen_item;

static xllm_status generate(xllm_model *xm, const xllm_request *requests, size_t n, xllm_token_callback cb,
                            void *user, xllm_result **results, xllm_error *err) {
    engine *e = xm->eng;
    engine_request **prep = mem_calloc(n, sizeof *prep);
    gen_item *items = mem_calloc(n, sizeof *items);
    xllm_result *res = mem_calloc(n, sizeof *res);
    if (!prep || !items || !res) {
        xllm_free(prep);
        xllm_free(items);
        xllm_free(res);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    xllm_status st = XLLM_OK;
    /* validate every request before any runs */
    for (size_t i = 0; i < n && !st; i++) {
        if (requests[i].n > 1) {
            st = err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                             "xllm_generate takes one sample per request (n = %d): use xllm_engine_submit",
                             requests[i].n);
        } else {
            st = engine_prepare(e, &requests[i], &prep[i], err);
        }
        if (st && n > 1) err_prefix(err, "request %zu", i);
    }
    if (st) {
        for (size_t i = 0; i < n; i++) engine_discard(prep[i]);
        xllm_free(prep);
        xllm_free(items);
        xllm_free(res);
        return st;
    }
    gen_wait w;
    pthread_mutex_init(&w.lock, NULL);
    pthread_cond_init(&w.cond, NULL);
    w.signalled = 0;
    for (size_t i = 0; i < n; i++) engine_enqueue(e, prep[i], gen_notify, &w, &items[i].id);
    xllm_free(prep);
    size_t n_done = 0;
    while (n_done < n && !st) {
        int progress = 0;
        for (size_t i = 0; i < n && !st; i++) {
            gen_item *it = &items[i];
            if (it->done) continue;
            xllm_chunk c;
            xllm_poll_result pr;
            while ((pr = xllm_engine_poll(e, it->id, &c, 0, err)) == XLLM_POLL_CHUNK) {
                progress = 1;
                size_t prev = 0;
                for (size_t k = 0; k < c.n_ids; k++) {
                    size_t end = c.text_ends[k];
                    if (!it->stopped) {
                        it->delivered_ids++;
                        it->delivered_text += end - prev;
                        if (cb) {
                            xllm_model *saved = tl_in_callback;
                            tl_in_callback = xm;
                            int stop = cb(user, i, c.ids[k], c.text + prev, end - prev);
                            tl_in_callback = saved;
                            int last = c.finished && k + 1 == c.n_ids;
                            if (stop && !last) {
                                it->stopped = 1;
                                xllm_engine_abort(e, it->id);
                            }
                        }
                    }
                    prev = end;
                }
            }
            if (pr == XLLM_POLL_ERROR) {
                st = err ? err->code : XLLM_ERR_INTERNAL;
                if (!st) st = XLLM_ERR_INTERNAL;
                if (n > 1) err_prefix(err, "request %zu", i);
                break;
            }
            if (pr == XLLM_POLL_DONE) {
                xllm_result *r = NULL;
                size_t nr = 0;
                st = xllm_engine_result(e, it->id, &r, &nr, err);
                it->id = 0;
                if (st) break;
                res[i] = r[0];
                xllm_free(r);
                if (it->stopped) { /* what the callback saw, and no more */
                    if (res[i].n_ids > it->delivered_ids) res[i].n_ids = it->delivered_ids;
                    if (res[i].text_len > it->delivered_text) {
                        res[i].text_len = it->delivered_text;
                        res[i].text[res[i].text_len] = 0;
                    }
                    res[i].finish_reason = XLLM_FINISH_CANCELLED;
                }
                it->done = 1;
                n_done++;
                progress = 1;
            }
        }
        if (!progress && !st) {
            pthread_mutex_lock(&w.lock);
            while (!w.signalled) pthread_cond_wait(&w.cond, &w.lock);
            w.signalled = 0;
            pthread_mutex_unlock(&w.lock);
        }
    }
    if (st) { /* the unfinished requests end before we return: nothing of this call outlives it */
        for (size_t i = 0; i < n; i++)
            if (items[i].id) engine_release_wait(e, items[i].id);
        xllm_results_free(res, n);
        res = NULL;
    } else {
        *results = res;
    }
    /* the scheduler may be inside gen_notify for our last publication: w
     * must outlive that call */
    engine_wait_quiet(e);
    xllm_free(items);
    pthread_mutex_destroy(&w.lock);
    pthread_cond_destroy(&w.cond);
    return st;
}

xllm_status xllm_generate(xllm_model *xm, const xllm_request *requests, size_t n, xllm_token_callback cb, void *user,
                          xllm_result **results, xllm_error *err) {
    err_clear(err);
    if (!results) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "results is NULL");
    *results = NULL;
    if (!xm) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "model is NULL");
    if (n == 0) return XLLM_OK;
    if (!requests) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "requests is NULL");
    if (!xm->eng) return no_engine(xm, err);
    call_begin(xm);
    xllm_status st = generate(xm, requests, n, cb, user, results, err);
    call_end(xm);
    return st;
}

/* --------------------------------------------------------------- engines */

xllm_engine *xllm_engine_create(xllm_model *xm, const xllm_engine_options *opts, xllm_error *err) {
    err_clear(err);
    if (!xm) {
        err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "model is NULL");
        return NULL;
    }
    if (!xm->eng) {
        no_engine(xm, err);
        return NULL;
    }
    engine *e = engine_create(xm->m, xm->tok, &xm->forward_lock, &xm->opts, opts, err);
    if (!e) return NULL;
    xllm_status st = xm->pp ? engine_attach_pipeline(e, xm->pp, err) : XLLM_OK;
    if (st) {
        engine_destroy(e);
        return NULL;
    }
    st = knowledge_from_options(e, err);
    /* the option strings belong to the caller: keep no pointer to them */
    for (int k = 0; k < XLLM_MAX_KNOWLEDGE; k++)
        e->o.knowledge_name[k] = e->o.knowledge_path[k] = e->o.knowledge_kv_path[k] = NULL;
    e->o.n_knowledge = 0;
    if (st) {
        engine_destroy(e);
        return NULL;
    }
    return e;
}

void xllm_engine_free(xllm_engine *e) { engine_destroy(e); }

xllm_engine *xllm_model_engine(xllm_model *xm) { return xm ? xm->eng : NULL; }

xllm_status xllm_model_plan(const xllm_model *xm, char **json, xllm_error *err) {
    err_clear(err);
    *json = mem_strdup(xm->plan_json ? xm->plan_json : "{\"planned\":false}");
    return *json ? XLLM_OK : err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
}

xllm_status xllm_backend_devices(char **text, xllm_error *err) {
    if (!text) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "xllm_backend_devices: text is NULL");
    char *vk = vulkan_describe_devices();
    size_t n = (vk ? strlen(vk) : 0) + 128;
    char *out = mem_malloc(n);
    if (!out) {
        xllm_free(vk);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    snprintf(out, n, "backends: %s\ncpu: the host's CPUs\n%s", backend_names(), vk ? vk : "");
    xllm_free(vk);
    *text = out;
    return XLLM_OK;
}
