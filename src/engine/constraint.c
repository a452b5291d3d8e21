/*
 * constraint.c - constrained decoding on the engine side: a request's
 * constraint, each sample's state, and the mask applied before sampling.
 *
 * A request with grammar_kind set compiles its constraint once at submit
 * (a bad one fails the submit with XLLM_ERR_INVALID_ARGUMENT), and its n
 * samples share one matcher (the scheduler thread is its only user) but each
 * keeps its own state, stored in the sequence, so a sequence preempted by
 * recompute or swap resumes in the same state. Before sampling, the ids the
 * state does not allow go to -inf (an eos id only once the output is
 * complete); after, the state advances by the token's bytes and a complete
 * output with nothing more to take ends the sequence. The matcher's caches
 * are bounded: past GRAM_MATCHER_MAX_BYTES they are emptied, which moves the
 * matcher to a new epoch, and each sample rebuilds its state from its
 * generated ids (the state is a function of the output).
 */
#include "engine/engine.h"
#include "engine/grammar.h"
#include "base/alloc.h"
#include "base/error.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t g_vocab_lock = PTHREAD_MUTEX_INITIALIZER;

static xllm_status engine_vocab(engine *e, const gram_vocab **out, xllm_error *err) {
    xllm_status st = XLLM_OK;
    pthread_mutex_lock(&g_vocab_lock);
    if (!e->gvocab) st = gram_vocab_from_tokenizer(e->tok, e->m->cfg.vocab, &e->gvocab, err);
    *out = e->gvocab;
    pthread_mutex_unlock(&g_vocab_lock);
    return st;
}

void constraint_engine_free(engine *e) {
    gram_vocab_free(e->gvocab);
    e->gvocab = NULL;
}

xllm_status constraint_prepare(engine *e, engine_request *r, xllm_error *err) {
    xllm_sampling_params *p = &r->params;
    if (p->grammar_kind == XLLM_GRAMMAR_NONE) {
        p->grammar = p->grammar_prefix = p->grammar_suffix = NULL;
        return XLLM_OK;
    }
    if (!e->tok)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "constrained decoding needs the model's tokenizer (it has none)");
    /* the texts are the caller's: keep copies (the response-cache key reads them) */
    const char *src[3] = {p->grammar, p->grammar_prefix, p->grammar_suffix};
    size_t len[3], total = 0;
    for (int i = 0; i < 3; i++) total += (len[i] = src[i] ? strnlen(src[i], GRAM_MAX_TEXT + 1) : 0) + 1;
    if (len[0] > GRAM_MAX_TEXT || len[1] > GRAM_MAX_AFFIX || len[2] > GRAM_MAX_AFFIX)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                           "the constraint text is too long (grammar at most %u bytes, prefix/suffix %d)",
                           (unsigned)GRAM_MAX_TEXT, GRAM_MAX_AFFIX);
    r->grammar_store = mem_malloc(total);
    if (!r->grammar_store) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    const char **dst[3] = {&p->grammar, &p->grammar_prefix, &p->grammar_suffix};
    size_t off = 0;
    for (int i = 0; i < 3; i++) {
        if (!src[i]) continue;
        memcpy(r->grammar_store + off, src[i], len[i]);
        r->grammar_store[off + len[i]] = 0;
        *dst[i] = r->grammar_store + off;
        off += len[i] + 1;
    }
    xllm_status st = gram_compile(p->grammar_kind, p->grammar, p->grammar_prefix, p->grammar_suffix, &r->gram, err);
    if (st) return st;
    const gram_vocab *v;
    if ((st = engine_vocab(e, &v, err))) return st;
    r->gm = gram_matcher_new(r->gram, v);
    if (!r->gm) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory for the constraint's matcher");
    int32_t start = gram_start(r->gm);
    if (start < 0) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory starting the constraint");
    for (int j = 0; j < r->n; j++) {
        r->seqs[j].gm = r->gm;
        r->seqs[j].gstate = start;
        r->seqs[j].gepoch = gram_matcher_epoch(r->gm);
    }
    return XLLM_OK;
}

void constraint_free(engine_request *r) {
    gram_matcher_free(r->gm);
    gram_free(r->gram);
    xllm_free(r->grammar_store);
    r->gm = NULL;
    r->gram = NULL;
    r->grammar_store = NULL;
}

/* The sequence's state in the matcher's current epoch: after a reset, rebuilt
 * from the generated ids before index upto. */
static int32_t current_state(sequence *s, int upto) {
    gram_matcher *m = s->gm;
    if (s->gepoch == gram_matcher_epoch(m)) return s->gstate;
    int32_t st = gram_start(m);
    const gram_vocab *v = gram_matcher_vocab(m);
    for (int i = s->n_prompt; i < upto && st >= 0; i++) {
        size_t len;
        const char *b = gram_vocab_token(v, s->ids[i], &len);
        st = b ? gram_advance(m, st, b, len) : -1;
    }
    s->gstate = st;
    s->gepoch = gram_matcher_epoch(m);
    return st;
}

/* The bound on a matcher's tables: GRAM_MATCHER_MAX_BYTES, or a smaller one
 * from XLLM_GRAMMAR_MAX_BYTES (read once; tests set it tiny to reset the
 * matcher at every step and check that the output does not change). */
static size_t g_max_bytes;
static pthread_once_t g_max_once = PTHREAD_ONCE_INIT;

static void read_max_bytes(void) {
    const char *e = getenv("XLLM_GRAMMAR_MAX_BYTES");
    char *end;
    unsigned long long v = e ? strtoull(e, &end, 10) : 0;
    g_max_bytes = e && *e && !*end && v < GRAM_MATCHER_MAX_BYTES ? (size_t)v : GRAM_MATCHER_MAX_BYTES;
}

/* Before a step's masks: empty the caches when they have grown past the bound. */
static void bound_memory(sequence *s) {
    pthread_once(&g_max_once, read_max_bytes);
    if (gram_matcher_bytes(s->gm) > g_max_bytes) gram_matcher_reset(s->gm);
}

int seq_constrain(sequence *s, float *logits, int32_t vocab) {
    bound_memory(s);
    int32_t st = current_state(s, s->n_ids);
    const uint32_t *mask = st >= 0 ? gram_mask(s->gm, st) : NULL;
    if (!mask) {
        seq_finish(s, XLLM_FINISH_STOP, NULL);
        return 1;
    }
    const int accept = gram_accepting(s->gm, st) && !s->p->ignore_eos;
    float keep[8];
    int n_eos = s->eos->n < 8 ? s->eos->n : 8;
    for (int i = 0; i < n_eos; i++) {
        int32_t id = s->eos->ids[i];
        keep[i] = id >= 0 && id < vocab ? logits[id] : -INFINITY;
    }
    int any = 0;
    const int32_t words = (vocab + 31) / 32;
    for (int32_t w = 0; w < words; w++) {
        uint32_t bits = mask[w];
        if (bits == 0xffffffffu && (w + 1) * 32 <= vocab) {
            any = 1;
            continue;
        }
        if (!bits && (w + 1) * 32 <= vocab) { /* the common case outside strings: a plain fill */
            for (int32_t b = 0; b < 32; b++) logits[w * 32 + b] = -INFINITY;
            continue;
        }
        for (int32_t b = 0; b < 32 && w * 32 + b < vocab; b++) {
            if (bits >> b & 1u) any = 1;
            else logits[w * 32 + b] = -INFINITY;
        }
    }
    if (accept)
        for (int i = 0; i < n_eos; i++) {
            int32_t id = s->eos->ids[i];
            if (id >= 0 && id < vocab) logits[id] = keep[i], any = 1;
        }
    if (!any) { /* nothing may follow (the vocabulary cannot write what the constraint needs) */
        seq_finish(s, XLLM_FINISH_STOP, NULL);
        return 1;
    }
    return 0;
}

int seq_constraint_accept(sequence *s, int32_t tok) {
    int32_t st = current_state(s, s->n_ids - 1); /* tok is already the last id */
    size_t len;
    const char *b = gram_vocab_token(gram_matcher_vocab(s->gm), tok, &len);
    st = b && st >= 0 ? gram_advance(s->gm, st, b, len) : -1;
    s->gstate = st;
    return st < 0 || (gram_accepting(s->gm, st) && !gram_can_continue(s->gm, st));
}
