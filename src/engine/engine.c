/*
 * engine.c - the generation loop over the flattened-batch forward pass
 * (see engine.h for the scheduling policy).
 */
#include "engine/engine.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/profile.h"
#include "engine/sampler.h"

#include <string.h>

/* ---------------------------------------------------------------- setup */

xllm_status engine_init(engine *e, model *m, const tokenizer *tok, const xllm_model_options *o, xllm_error *err) {
    memset(e, 0, sizeof *e);
    e->m = m;
    e->tok = tok;
    e->max_context = o->max_context;
    e->max_seqs = o->max_batch_seqs;
    e->max_step_tokens = m->s.max_tokens;
    const model_config *c = &m->cfg;
    int32_t n_blocks = (int32_t)((o->kv_tokens + o->kv_block_size - 1) / o->kv_block_size);
    xllm_status st = kv_cache_init(&e->kv, c->n_layers, c->n_kv_heads, c->head_dim, o->kv_block_size, n_blocks, err);
    if (st) return st;
    size_t T = (size_t)e->max_step_tokens;
    e->tokens = xllm_malloc_array(T, sizeof(int32_t));
    e->pos = xllm_malloc_array(T, sizeof(int32_t));
    e->seq = xllm_malloc_array(T, sizeof(int32_t));
    e->out_idx = xllm_malloc_array(T, sizeof(int32_t));
    e->tables = xllm_calloc((size_t)e->max_seqs, sizeof(int32_t *));
    e->logits = xllm_malloc_array((size_t)e->max_seqs * (size_t)c->vocab, sizeof(float));
    if (!e->tokens || !e->pos || !e->seq || !e->out_idx || !e->tables || !e->logits) {
        engine_free(e);
        return xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "cannot allocate engine buffers");
    }
    return XLLM_OK;
}

void engine_free(engine *e) {
    kv_cache_free(&e->kv);
    xllm_free(e->tokens);
    xllm_free(e->pos);
    xllm_free(e->seq);
    xllm_free(e->out_idx);
    xllm_free((void *)e->tables);
    xllm_free(e->logits);
    memset(e, 0, sizeof *e);
}

/* ------------------------------------------------------------- sequences */

typedef struct seq_state {
    size_t req;                 /* index of the request */
    int32_t *ids;               /* prompt then generated ids */
    int n_prompt, n_ids, cap;
    int n_cached;               /* ids whose K/V are in the cache */
    int max_new;
    kv_seq kv;
    sampler smp;
    detok_stream *ds;
    char *text;                 /* generated text so far */
    size_t text_len, text_cap, emitted;
    int stop_len_max;           /* longest stop string */
    int finished;
    xllm_finish_reason reason;
    const xllm_sampling_params *p;
} seq_state;

static void seq_free(seq_state *s, kv_cache *kv) {
    kv_seq_release(&s->kv, kv);
    sampler_free(&s->smp);
    if (s->ds) detok_stream_free(s->ds);
    s->ds = NULL;
    xllm_free(s->ids);
    xllm_free(s->text);
    s->ids = NULL;
    s->text = NULL;
}

static int is_stop_id(const engine *e, const xllm_sampling_params *p, int32_t id) {
    if (!p->ignore_eos)
        for (int i = 0; i < e->m->cfg.n_eos; i++)
            if (e->m->cfg.eos_ids[i] == id) return 1;
    for (int i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] == id) return 1;
    return 0;
}

static xllm_status text_append(seq_state *s, const char *piece, size_t n, xllm_error *err) {
    if (s->text_len + n + 1 > s->text_cap) {
        size_t cap = s->text_cap ? s->text_cap : 256;
        while (cap < s->text_len + n + 1) cap *= 2;
        char *t = xllm_realloc(s->text, cap);
        if (!t) return xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory growing output text");
        s->text = t;
        s->text_cap = cap;
    }
    memcpy(s->text + s->text_len, piece, n);
    s->text_len += n;
    s->text[s->text_len] = 0;
    return XLLM_OK;
}

/* Find the earliest stop string in the text, looking only where a new match
 * can start (near the end). Returns its offset or -1. */
static long find_stop(const seq_state *s, size_t new_bytes) {
    long best = -1;
    for (int i = 0; i < s->p->n_stop; i++) {
        const char *stop = s->p->stop[i];
        size_t sl = strlen(stop);
        if (!sl || sl > s->text_len) continue;
        size_t from = s->text_len >= new_bytes + sl ? s->text_len - new_bytes - sl + 1 : 0;
        for (size_t off = from; off + sl <= s->text_len; off++)
            if (!memcmp(s->text + off, stop, sl)) {
                if (best < 0 || (long)off < best) best = (long)off;
                break;
            }
    }
    return best;
}

/* How many bytes at the end of the text could still grow into a stop string
 * (held back from streaming until resolved). */
static size_t stop_holdback(const seq_state *s) {
    size_t hold = 0;
    for (int i = 0; i < s->p->n_stop; i++) {
        const char *stop = s->p->stop[i];
        size_t sl = strlen(stop);
        for (size_t k = sl > 1 ? sl - 1 : 0; k > hold; k--)
            if (k <= s->text_len && !memcmp(s->text + s->text_len - k, stop, k)) {
                hold = k;
                break;
            }
    }
    return hold;
}

static xllm_status seq_start(engine *e, seq_state *s, size_t req_index, const xllm_request *r, int32_t *ids,
                             int n_ids, xllm_error *err) {
    memset(s, 0, sizeof *s);
    s->req = req_index;
    s->p = &r->params;
    s->n_prompt = n_ids;
    s->cap = n_ids + (r->params.max_new_tokens > 0 ? r->params.max_new_tokens : 0) + 1;
    if (s->cap > e->max_context + 1) s->cap = e->max_context + 1;
    s->ids = ids; /* grown below to cap */
    int32_t *grown = xllm_realloc(ids, (size_t)s->cap * sizeof(int32_t));
    if (!grown) return xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    s->ids = grown;
    s->n_ids = n_ids;
    s->max_new = r->params.max_new_tokens;
    xllm_status st = sampler_init(&s->smp, &r->params, e->m->cfg.vocab, err);
    if (st) return st;
    sampler_set_prompt(&s->smp, s->ids, (size_t)n_ids);
    if (e->tok) {
        s->ds = detok_stream_new(e->tok, 1);
        if (!s->ds) return xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    int need = n_ids + s->max_new;
    if (need > e->max_context) need = e->max_context;
    return kv_seq_reserve(&s->kv, &e->kv, need, err);
}

/* ----------------------------------------------------------- generation */

static xllm_status prepare_prompt(engine *e, size_t i, const xllm_request *r, int32_t **ids, int *n_ids,
                                  xllm_error *err) {
    *ids = NULL;
    size_t n = 0;
    if (r->prompt) {
        if (!e->tok) return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "request %zu: text prompt but the model has no tokenizer", i);
        xllm_status st = tokenizer_encode(e->tok, r->prompt, strlen(r->prompt), 1, ids, &n, err);
        if (st) return st;
    } else {
        if (r->n_prompt_ids && !r->prompt_ids)
            return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "request %zu: prompt_ids is NULL", i);
        *ids = xllm_malloc_array(r->n_prompt_ids ? r->n_prompt_ids : 1, sizeof(int32_t));
        if (!*ids) return xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        if (r->n_prompt_ids) memcpy(*ids, r->prompt_ids, r->n_prompt_ids * sizeof(int32_t));
        n = r->n_prompt_ids;
    }
    xllm_status st = XLLM_OK;
    if (n == 0)
        st = xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "request %zu: the prompt is empty (no tokens)", i);
    else if (n >= (size_t)e->max_context)
        st = xllm_errorf(err, XLLM_ERR_CONTEXT_OVERFLOW,
                         "request %zu: the prompt has %zu tokens but the context holds %d (at least one must be left "
                         "to generate)", i, n, e->max_context);
    for (size_t k = 0; k < n && !st; k++)
        if ((*ids)[k] < 0 || (*ids)[k] >= e->m->cfg.vocab)
            st = xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "request %zu: prompt token id %d is outside the vocabulary (0..%d)",
                             i, (*ids)[k], e->m->cfg.vocab - 1);
    if (!st) {
        int need = (int)n + (r->params.max_new_tokens > 0 ? r->params.max_new_tokens : 0);
        if (need > e->max_context) need = e->max_context;
        if (kv_blocks_for_tokens(&e->kv, need) > e->kv.n_blocks)
            st = xllm_errorf(err, XLLM_ERR_CONTEXT_OVERFLOW, "request %zu needs %d KV blocks; the pool has %d", i,
                             kv_blocks_for_tokens(&e->kv, need), e->kv.n_blocks);
    }
    if (st) {
        xllm_free(*ids);
        *ids = NULL;
        return st;
    }
    *n_ids = (int)n;
    return XLLM_OK;
}

/* After sampling `tok` for s: record it, update text, decide on finishing,
 * stream. Returns an error status only for internal failures. */
static xllm_status seq_accept(engine *e, seq_state *s, int32_t tok, xllm_token_callback cb, void *user,
                              xllm_error *err) {
    s->ids[s->n_ids++] = tok;
    int n_gen = s->n_ids - s->n_prompt;
    size_t new_bytes = 0;
    int stopped_by_string = 0;
    if (is_stop_id(e, s->p, tok)) {
        s->finished = 1;
        s->reason = XLLM_FINISH_STOP;
    } else if (s->ds) {
        const char *piece;
        size_t len;
        xllm_status st = detok_stream_push(s->ds, tok, &piece, &len, err);
        if (st) return st;
        if ((st = text_append(s, piece, len, err))) return st;
        new_bytes = len;
        long at = find_stop(s, new_bytes);
        if (at >= 0) {
            s->text_len = (size_t)at;
            s->text[at] = 0;
            stopped_by_string = 1;
            s->finished = 1;
            s->reason = XLLM_FINISH_STOP;
        }
    }
    if (!s->finished && (n_gen >= s->max_new || s->n_ids >= e->max_context)) {
        s->finished = 1;
        s->reason = XLLM_FINISH_LENGTH;
    }
    if (s->finished && s->ds && !stopped_by_string) {
        /* bytes the detokenizer still holds (an unfinished character) */
        const char *piece;
        size_t len;
        xllm_status st = detok_stream_flush(s->ds, &piece, &len, err);
        if (!st) st = text_append(s, piece, len, err);
        if (st) return st;
    }
    size_t upto = s->finished ? s->text_len : s->text_len - stop_holdback(s);
    if (upto < s->emitted) upto = s->emitted;
    if (cb) {
        int stop = cb(user, s->req, tok, s->text + s->emitted, upto - s->emitted);
        if (stop && !s->finished) {
            s->finished = 1;
            s->reason = XLLM_FINISH_CANCELLED;
            s->text_len = upto;
            if (s->text) s->text[upto] = 0;
        }
    }
    s->emitted = upto;
    return XLLM_OK;
}

static xllm_status finish_result(seq_state *s, xllm_result *r, xllm_error *err) {
    r->n_prompt_ids = (size_t)s->n_prompt;
    r->n_ids = (size_t)(s->n_ids - s->n_prompt);
    r->prompt_ids = xllm_malloc_array(r->n_prompt_ids + 1, sizeof(int32_t));
    r->ids = xllm_malloc_array(r->n_ids + 1, sizeof(int32_t));
    r->text = xllm_strndup(s->text ? s->text : "", s->text ? s->text_len : 0);
    r->text_len = s->text ? s->text_len : 0;
    if (!r->prompt_ids || !r->ids || !r->text) return xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    memcpy(r->prompt_ids, s->ids, r->n_prompt_ids * sizeof(int32_t));
    memcpy(r->ids, s->ids + s->n_prompt, r->n_ids * sizeof(int32_t));
    r->finish_reason = s->reason;
    return XLLM_OK;
}

xllm_status engine_generate(engine *e, const xllm_request *reqs, size_t n, xllm_token_callback cb, void *user,
                            xllm_result **results, xllm_error *err) {
    *results = NULL;
    if (n == 0) return XLLM_OK;
    if (!reqs) return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "requests is NULL");
    xllm_status st = XLLM_OK;
    xllm_result *res = xllm_calloc(n, sizeof *res);
    int32_t **prompts = xllm_calloc(n, sizeof *prompts);
    int *n_prompt = xllm_calloc(n, sizeof *n_prompt);
    seq_state *run = xllm_calloc((size_t)e->max_seqs, sizeof *run);
    int n_run = 0;
    size_t next = 0, done = 0;
    if (!res || !prompts || !n_prompt || !run) {
        st = xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        goto out;
    }
    /* validate every request up front: a bad one fails the call before any work */
    for (size_t i = 0; i < n && !st; i++) {
        sampler probe;
        if ((st = sampler_init(&probe, &reqs[i].params, e->m->cfg.vocab, err))) {
            xllm_error_prefix(err, "request %zu", i);
            break;
        }
        sampler_free(&probe);
        st = prepare_prompt(e, i, &reqs[i], &prompts[i], &n_prompt[i], err);
    }
    if (st) goto out;

    while (done < n) {
        /* admit waiting requests while there is a slot and room for their KV */
        while (next < n && n_run < e->max_seqs) {
            const xllm_request *r = &reqs[next];
            int need = n_prompt[next] + (r->params.max_new_tokens > 0 ? r->params.max_new_tokens : 0);
            if (need > e->max_context) need = e->max_context;
            if (kv_blocks_for_tokens(&e->kv, need) > e->kv.n_free) break;
            seq_state *s = &run[n_run];
            st = seq_start(e, s, next, r, prompts[next], n_prompt[next], err);
            prompts[next] = NULL; /* owned by the sequence now */
            n_run++;
            next++;
            if (st) goto out;
            if (s->max_new <= 0) {
                s->finished = 1;
                s->reason = XLLM_FINISH_LENGTH;
            }
        }
        /* retire finished sequences */
        for (int i = 0; i < n_run;) {
            if (!run[i].finished) {
                i++;
                continue;
            }
            if ((st = finish_result(&run[i], &res[run[i].req], err))) goto out;
            seq_free(&run[i], &e->kv);
            run[i] = run[--n_run];
            done++;
        }
        if (n_run == 0) continue; /* admit more (or finish) */

        /* build one batch: decode tokens first, then prefill chunks */
        int T = 0, n_out = 0;
        int out_seq[e->max_seqs > 0 ? e->max_seqs : 1];
        for (int i = 0; i < n_run; i++) {
            seq_state *s = &run[i];
            e->tables[i] = s->kv.blocks;
            if (s->n_cached < s->n_ids - 1 || s->n_cached == s->n_ids) continue;
            e->tokens[T] = s->ids[s->n_cached];
            e->pos[T] = s->n_cached;
            e->seq[T] = i;
            out_seq[n_out] = i;
            e->out_idx[n_out++] = T;
            s->n_cached++;
            T++;
        }
        for (int i = 0; i < n_run && T < e->max_step_tokens; i++) {
            seq_state *s = &run[i];
            if (s->n_cached >= s->n_ids - 1 && !(s->n_cached == 0 && s->n_ids == 1)) continue;
            int left = s->n_ids - s->n_cached, room = e->max_step_tokens - T;
            int chunk = left < room ? left : room;
            for (int k = 0; k < chunk; k++) {
                e->tokens[T] = s->ids[s->n_cached];
                e->pos[T] = s->n_cached;
                e->seq[T] = i;
                s->n_cached++;
                T++;
            }
            if (s->n_cached == s->n_ids) {
                out_seq[n_out] = i;
                e->out_idx[n_out++] = T - 1;
            }
        }
        fwd_batch b = {T, e->tokens, e->pos, e->seq, e->tables, n_out, e->out_idx};
        if ((st = model_forward(e->m, &e->kv, &b, e->logits, err))) goto out;
        for (int k = 0; k < n_out; k++) {
            seq_state *s = &run[out_seq[k]];
            int32_t tok;
            PROF(PROF_SAMPLE, 0, 4.0 * e->m->cfg.vocab,
                 tok = sampler_sample(&s->smp, e->logits + (size_t)k * (size_t)e->m->cfg.vocab));
            if ((st = seq_accept(e, s, tok, cb, user, err))) goto out;
        }
    }
out:
    if (run)
        for (int i = 0; i < n_run; i++) seq_free(&run[i], &e->kv);
    xllm_free(run);
    if (prompts)
        for (size_t i = 0; i < n; i++) xllm_free(prompts[i]);
    xllm_free(prompts);
    xllm_free(n_prompt);
    if (st) {
        xllm_results_free(res, n);
        return st;
    }
    *results = res;
    return XLLM_OK;
}

void xllm_results_free(xllm_result *results, size_t n) {
    if (!results) return;
    for (size_t i = 0; i < n; i++) {
        xllm_free(results[i].prompt_ids);
        xllm_free(results[i].ids);
        xllm_free(results[i].text);
    }
    xllm_free(results);
}

/* ---------------------------------------------------------------- logits */

xllm_status engine_logits(engine *e, const int32_t *ids, size_t n, int all_positions, float *out, xllm_error *err) {
    if (n == 0 || !ids || !out) return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "logits: need at least one id");
    if (n > (size_t)e->max_context)
        return xllm_errorf(err, XLLM_ERR_CONTEXT_OVERFLOW, "logits: %zu ids exceed the context of %d", n,
                           e->max_context);
    if (kv_blocks_for_tokens(&e->kv, (int32_t)n) > e->kv.n_free)
        return xllm_errorf(err, XLLM_ERR_CONTEXT_OVERFLOW, "logits: %zu ids do not fit in the free KV pool", n);
    kv_seq s = {0};
    xllm_status st = kv_seq_reserve(&s, &e->kv, (int32_t)n, err);
    const int32_t *table[1] = {s.blocks};
    size_t V = (size_t)e->m->cfg.vocab;
    for (size_t done = 0; done < n && !st;) {
        int T = (int)(n - done < (size_t)e->max_step_tokens ? n - done : (size_t)e->max_step_tokens);
        for (int t = 0; t < T; t++) {
            e->tokens[t] = ids[done + (size_t)t];
            e->pos[t] = (int32_t)(done + (size_t)t);
            e->seq[t] = 0;
            e->out_idx[t] = t;
        }
        int last = done + (size_t)T == n;
        fwd_batch b = {T, e->tokens, e->pos, e->seq, table, 0, e->out_idx};
        float *dst = out;
        if (all_positions) {
            b.n_out = T;
            dst = out + done * V;
        } else if (last) {
            b.n_out = 1;
            b.out_idx = &e->out_idx[T - 1];
        }
        st = model_forward(e->m, &e->kv, &b, dst, err);
        done += (size_t)T;
    }
    kv_seq_release(&s, &e->kv);
    return st;
}
