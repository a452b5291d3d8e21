/* sequence.c - a generated sequence's state and stop rules (see sequence.h). */
#include "engine/sequence.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "base/error.h"

#include <stdint.h>
#include <string.h>
#include <time.h>

xllm_status seq_init(sequence *s, const int32_t *prompt, int n_prompt, const xllm_sampling_params *p,
                     const model_eos *eos, int32_t vocab, int max_context, const tokenizer *tok, uint64_t seed_offset,
                     int block_size, xllm_error *err) {
    memset(s, 0, sizeof *s);
    s->p = p;
    s->eos = eos;
    s->n_prompt = s->n_ids = n_prompt;
    s->max_new = p->max_new_tokens > 0 ? p->max_new_tokens : 0;
    s->max_context = max_context;
    s->cap = n_prompt + s->max_new + 1;
    if (s->cap > max_context + 1) s->cap = max_context + 1;
    s->ids = mem_malloc_array((size_t)s->cap, sizeof(int32_t));
    s->tok_text_end = mem_malloc_array((size_t)(s->cap - n_prompt + 1), sizeof(uint32_t));
    s->hashes = mem_malloc_array((size_t)(s->cap / block_size + 1), sizeof(uint64_t));
    s->host = mem_malloc_array((size_t)((s->cap + block_size - 1) / block_size + 1), sizeof(int32_t));
    if (p->logprobs) {
        size_t g = (size_t)(s->cap - n_prompt + 1);
        s->n_top = p->top_logprobs;
        s->lp = mem_malloc_array(g, sizeof(float));
        s->top_ids = mem_malloc_array(g * (size_t)(s->n_top ? s->n_top : 1), sizeof(int32_t));
        s->top_lp = mem_malloc_array(g * (size_t)(s->n_top ? s->n_top : 1), sizeof(float));
        if (!s->lp || !s->top_ids || !s->top_lp) {
            seq_free(s);
            return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        }
    }
    if (!s->ids || !s->tok_text_end || !s->hashes || !s->host) {
        seq_free(s);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    memcpy(s->ids, prompt, (size_t)n_prompt * sizeof(int32_t));
    xllm_sampling_params sp = *p;
    sp.seed += seed_offset;
    xllm_status st = sampler_init(&s->smp, &sp, vocab, err);
    if (st) {
        seq_free(s);
        return st;
    }
    sampler_set_prompt(&s->smp, s->ids, (size_t)n_prompt);
    /* seeded with the prompt: the text is the exact continuation of the prompt's text */
    if (tok && (!(s->ds = detok_stream_new(tok, 1)) || detok_stream_seed(s->ds, prompt, (size_t)n_prompt, NULL))) {
        seq_free(s);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    if (s->max_new == 0) {
        s->finished = 1;
        s->reason = XLLM_FINISH_LENGTH;
    }
    return XLLM_OK;
}

void seq_free(sequence *s) {
    sampler_free(&s->smp);
    if (s->ds) detok_stream_free(s->ds);
    xllm_free(s->ids);
    xllm_free(s->text);
    xllm_free(s->tok_text_end);
    xllm_free(s->lp);
    xllm_free(s->top_ids);
    xllm_free(s->top_lp);
    s->lp = NULL;
    s->top_ids = NULL;
    s->top_lp = NULL;
    xllm_free(s->hashes);
    xllm_free(s->host);
    xllm_free(s->table.blocks);
    s->ds = NULL;
    s->ids = NULL;
    s->text = NULL;
    s->tok_text_end = NULL;
    s->hashes = NULL;
    s->host = NULL;
    s->table.blocks = NULL;
}

static int is_stop_id(const sequence *s, int32_t id) {
    if (!s->p->ignore_eos)
        for (int i = 0; i < s->eos->n; i++)
            if (s->eos->ids[i] == id) return 1;
    for (int i = 0; i < s->p->n_stop_ids; i++)
        if (s->p->stop_ids[i] == id) return 1;
    return 0;
}

static xllm_status text_append(sequence *s, const char *piece, size_t n, xllm_error *err) {
    if (n > SIZE_MAX - 1 - s->text_len || array_reserve(&s->text, &s->text_cap, s->text_len + n + 1, 1, 256))
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory growing output text");
    memcpy(s->text + s->text_len, piece, n);
    s->text_len += n;
    s->text[s->text_len] = 0;
    return XLLM_OK;
}

/* The earliest stop string in the text, looking only where a new match can
 * start (near the end). Returns its offset or -1. */
static long find_stop(const sequence *s, size_t new_bytes) {
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

/* Bytes at the end of the text that could still grow into a stop string
 * (held back from streaming until resolved). */
static size_t stop_holdback(const sequence *s) {
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

double seq_clock_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

xllm_status seq_accept(sequence *s, int32_t tok, xllm_error *err) {
    s->ids[s->n_ids++] = tok;
    int n_gen = s->n_ids - s->n_prompt;
    s->t_last = seq_clock_s();
    if (n_gen == 1) s->t_first = s->t_last;
    s->tok_text_end[n_gen - 1] = (uint32_t)s->emitted; /* valid even if a step below fails */
    int stopped_by_string = 0;
    if (is_stop_id(s, tok)) {
        s->finished = 1;
        s->reason = XLLM_FINISH_STOP;
    } else if (s->ds) {
        const char *piece;
        size_t len;
        xllm_status st = detok_stream_push(s->ds, tok, &piece, &len, err);
        if (st) return st;
        if ((st = text_append(s, piece, len, err))) return st;
        long at = find_stop(s, len);
        if (at >= 0) {
            s->text_len = (size_t)at;
            s->text[at] = 0;
            stopped_by_string = 1;
            s->finished = 1;
            s->reason = XLLM_FINISH_STOP;
        }
    }
    if (!s->finished && s->gm && seq_constraint_accept(s, tok)) { /* the constrained output is complete */
        s->finished = 1;
        s->reason = XLLM_FINISH_STOP;
    }
    if (!s->finished && (n_gen >= s->max_new || s->n_ids >= s->max_context)) {
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
    s->emitted = upto;
    s->tok_text_end[n_gen - 1] = (uint32_t)upto;
    return XLLM_OK;
}

xllm_status seq_finish(sequence *s, xllm_finish_reason reason, xllm_error *err) {
    if (s->finished) return XLLM_OK;
    s->finished = 1;
    s->reason = reason;
    if (s->ds) {
        const char *piece;
        size_t len;
        xllm_status st = detok_stream_flush(s->ds, &piece, &len, err);
        if (!st) st = text_append(s, piece, len, err);
        if (st) return st;
    }
    s->emitted = s->text_len;
    return XLLM_OK;
}

void seq_cancel(sequence *s) {
    if (s->finished) return;
    s->finished = 1;
    s->reason = XLLM_FINISH_CANCELLED;
    s->text_len = s->emitted;
    if (s->text) s->text[s->text_len] = 0;
}

xllm_status seq_result(const sequence *s, double t_submit, xllm_result *r, xllm_error *err) {
    memset(r, 0, sizeof *r);
    r->n_prompt_ids = (size_t)s->n_prompt;
    r->n_ids = (size_t)(s->n_ids - s->n_prompt);
    r->prompt_ids = mem_malloc_array(r->n_prompt_ids + 1, sizeof(int32_t));
    r->ids = mem_malloc_array(r->n_ids + 1, sizeof(int32_t));
    r->text = mem_strndup(s->text ? s->text : "", s->text ? s->text_len : 0);
    r->text_len = s->text ? s->text_len : 0;
    if (!r->prompt_ids || !r->ids || !r->text) {
        xllm_free(r->prompt_ids);
        xllm_free(r->ids);
        xllm_free(r->text);
        memset(r, 0, sizeof *r);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    memcpy(r->prompt_ids, s->ids, r->n_prompt_ids * sizeof(int32_t));
    memcpy(r->ids, s->ids + s->n_prompt, r->n_ids * sizeof(int32_t));
    r->finish_reason = s->reason;
    if (r->n_ids) {
        r->first_token_s = s->t_first - t_submit;
        r->decode_s = s->t_last - s->t_first;
    }
    if (s->lp && result_set_logprobs(r, s->lp, s->top_ids, s->top_lp, s->n_top)) {
        result_free_one(r);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    return XLLM_OK;
}

int result_set_logprobs(xllm_result *r, const float *lp, const int32_t *top_ids, const float *top_lp, int n_top) {
    size_t nt = r->n_ids * (size_t)n_top;
    r->n_top = n_top;
    r->logprobs = mem_malloc_array(r->n_ids + 1, sizeof(float));
    r->top_ids = mem_malloc_array(nt + 1, sizeof(int32_t));
    r->top_logprobs = mem_malloc_array(nt + 1, sizeof(float));
    if (!r->logprobs || !r->top_ids || !r->top_logprobs) return -1;
    memcpy(r->logprobs, lp, r->n_ids * sizeof(float));
    memcpy(r->top_ids, top_ids, nt * sizeof(int32_t));
    memcpy(r->top_logprobs, top_lp, nt * sizeof(float));
    return 0;
}
