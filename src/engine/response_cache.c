/* response_cache.c - exact-match LRU cache of finished results (see response_cache.h). */
#include "engine/response_cache.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "base/error.h"

#include <stdint.h>
#include <string.h>
#include <xxhash.h>

xllm_status rc_init(response_cache *rc, size_t max_bytes, int max_entries, xllm_error *err) {
    memset(rc, 0, sizeof *rc);
    rc->max_bytes = max_bytes;
    rc->max_entries = max_entries;
    uint32_t nb = 64;
    while (nb < (uint32_t)max_entries && nb < (1u << 24)) nb <<= 1;
    rc->n_buckets = nb;
    rc->buckets = mem_calloc(nb, sizeof *rc->buckets);
    if (!rc->buckets) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "cannot allocate the response cache");
    return XLLM_OK;
}

static void entry_free(rc_entry *e) {
    for (int i = 0; i < e->n; i++) {
        xllm_free(e->samples[i].ids);
        xllm_free(e->samples[i].text);
        xllm_free(e->samples[i].text_end);
        xllm_free(e->samples[i].lp);
        xllm_free(e->samples[i].top_ids);
        xllm_free(e->samples[i].top_lp);
    }
    xllm_free(e->samples);
    xllm_free(e->key);
    xllm_free(e);
}

void rc_free(response_cache *rc) {
    for (rc_entry *e = rc->head; e;) {
        rc_entry *n = e->next;
        entry_free(e);
        e = n;
    }
    xllm_free(rc->buckets);
    memset(rc, 0, sizeof *rc);
}

int rc_cacheable(const xllm_sampling_params *p) {
    return !p->do_sample || p->temperature <= 0.0f || p->has_seed;
}

/* ------------------------------------------------------------------ key */

typedef struct keybuf {
    unsigned char *p;
    size_t n, cap;
    int oom;
} keybuf;

static void put(keybuf *k, const void *src, size_t n) {
    if (k->oom) return;
    if (n > SIZE_MAX - k->n || array_reserve(&k->p, &k->cap, k->n + n, 1, 256)) {
        k->oom = 1;
        return;
    }
    memcpy(k->p + k->n, src, n);
    k->n += n;
}

#define PUT(k, v) put((k), &(v), sizeof(v))

unsigned char *rc_key(const int32_t *prompt, size_t n_prompt, const xllm_sampling_params *p, int n, size_t *len) {
    keybuf k = {0};
    xllm_sampling_params q = *p;
    int greedy = !q.do_sample || q.temperature <= 0.0f;
    if (greedy) {
        q.do_sample = 0;
        q.temperature = 0.0f;
        q.top_k = 0;
        q.top_p = 1.0f;
        q.min_p = 0.0f;
        q.has_seed = 0;
    }
    if (!q.has_seed) q.seed = 0;
    uint32_t version = 2;
    PUT(&k, version);
    PUT(&k, n);
    /* the scalar parameters the table marks as part of the key (src/api/params.c) */
    size_t n_rows;
    const xllm_param_info *rows = xllm_sampling_params_table(&n_rows);
    for (size_t i = 0; i < n_rows; i++)
        if (rows[i].cache_key) {
            double v = xllm_sampling_param_get(&q, &rows[i]);
            PUT(&k, v);
        }
    PUT(&k, q.seed);
    PUT(&k, q.has_seed);
    PUT(&k, q.n_stop);
    for (int i = 0; i < q.n_stop && i < XLLM_MAX_STOP_STRINGS; i++) {
        uint64_t sl = strlen(q.stop[i]);
        PUT(&k, sl);
        put(&k, q.stop[i], (size_t)sl);
    }
    PUT(&k, q.logprobs);
    PUT(&k, q.top_logprobs);
    PUT(&k, q.n_stop_ids);
    put(&k, q.stop_ids, (size_t)(q.n_stop_ids > 0 ? q.n_stop_ids : 0) * sizeof(int32_t));
    /* the constraint: kind and its three texts */
    PUT(&k, q.grammar_kind);
    const char *gtext[3] = {q.grammar, q.grammar_prefix, q.grammar_suffix};
    for (int i = 0; i < 3; i++) {
        uint64_t gl = q.grammar_kind && gtext[i] ? strlen(gtext[i]) + 1 : 0; /* 0: none; NULL and "" differ */
        PUT(&k, gl);
        if (gl) put(&k, gtext[i], (size_t)gl - 1);
    }
    uint64_t np = n_prompt;
    PUT(&k, np);
    put(&k, prompt, n_prompt * sizeof(int32_t));
    if (k.oom) {
        xllm_free(k.p);
        return NULL;
    }
    *len = k.n;
    return k.p;
}

/* ---------------------------------------------------------------- table */

static void lru_unlink(response_cache *rc, rc_entry *e) {
    if (e->prev) e->prev->next = e->next; else rc->head = e->next;
    if (e->next) e->next->prev = e->prev; else rc->tail = e->prev;
    e->prev = e->next = NULL;
}

static void lru_push(response_cache *rc, rc_entry *e) {
    e->prev = rc->tail;
    e->next = NULL;
    if (rc->tail) rc->tail->next = e; else rc->head = e;
    rc->tail = e;
}

static void evict(response_cache *rc, rc_entry *e) {
    rc_entry **link = &rc->buckets[e->hash & (rc->n_buckets - 1)];
    while (*link != e) link = &(*link)->chain;
    *link = e->chain;
    lru_unlink(rc, e);
    rc->bytes -= e->bytes;
    rc->n_entries--;
    entry_free(e);
}

const rc_entry *rc_lookup(response_cache *rc, const unsigned char *key, size_t len) {
    uint64_t h = XXH3_64bits(key, len);
    for (rc_entry *e = rc->buckets[h & (rc->n_buckets - 1)]; e; e = e->chain)
        if (e->hash == h && e->key_len == len && !memcmp(e->key, key, len)) {
            lru_unlink(rc, e);
            lru_push(rc, e);
            rc->hits++;
            return e;
        }
    rc->misses++;
    return NULL;
}

void rc_insert(response_cache *rc, const unsigned char *key, size_t len, const rc_sample *samples, int n) {
    uint64_t h = XXH3_64bits(key, len);
    for (rc_entry *e = rc->buckets[h & (rc->n_buckets - 1)]; e; e = e->chain)
        if (e->hash == h && e->key_len == len && !memcmp(e->key, key, len)) return; /* already there */
    size_t bytes = sizeof(rc_entry) + len + (size_t)n * sizeof(rc_sample);
    for (int i = 0; i < n; i++)
        bytes += samples[i].n_ids * (sizeof(int32_t) + sizeof(uint32_t)) + samples[i].text_len + 1 +
                 (samples[i].lp ? samples[i].n_ids * (sizeof(float) + (size_t)samples[i].n_top * 8) : 0);
    if (bytes > rc->max_bytes || rc->max_entries <= 0) return;
    while (rc->head && (rc->bytes + bytes > rc->max_bytes || rc->n_entries + 1 > rc->max_entries)) evict(rc, rc->head);
    rc_entry *e = mem_calloc(1, sizeof *e);
    if (!e) return;
    e->hash = h;
    e->key = mem_malloc(len ? len : 1);
    e->samples = mem_calloc((size_t)n, sizeof(rc_sample));
    e->n = n;
    e->bytes = bytes;
    int ok = e->key && e->samples;
    for (int i = 0; ok && i < n; i++) {
        const rc_sample *s = &samples[i];
        rc_sample *d = &e->samples[i];
        d->ids = mem_malloc_array(s->n_ids + 1, sizeof(int32_t));
        d->text_end = mem_malloc_array(s->n_ids + 1, sizeof(uint32_t));
        d->text = mem_strndup(s->text ? s->text : "", s->text_len);
        ok = d->ids && d->text_end && d->text;
        if (!ok) break;
        if (s->lp) {
            size_t nt = s->n_ids * (size_t)s->n_top;
            d->lp = mem_malloc_array(s->n_ids + 1, sizeof(float));
            d->top_ids = mem_malloc_array(nt + 1, sizeof(int32_t));
            d->top_lp = mem_malloc_array(nt + 1, sizeof(float));
            ok = d->lp && d->top_ids && d->top_lp;
            if (!ok) break;
            memcpy(d->lp, s->lp, s->n_ids * sizeof(float));
            memcpy(d->top_ids, s->top_ids, nt * sizeof(int32_t));
            memcpy(d->top_lp, s->top_lp, nt * sizeof(float));
            d->n_top = s->n_top;
        }
        memcpy(d->ids, s->ids, s->n_ids * sizeof(int32_t));
        memcpy(d->text_end, s->text_end, s->n_ids * sizeof(uint32_t));
        d->n_ids = s->n_ids;
        d->text_len = s->text_len;
        d->reason = s->reason;
    }
    if (!ok) {
        entry_free(e);
        return;
    }
    memcpy(e->key, key, len);
    e->key_len = len;
    rc_entry **head = &rc->buckets[h & (rc->n_buckets - 1)];
    e->chain = *head;
    *head = e;
    lru_push(rc, e);
    rc->bytes += bytes;
    rc->n_entries++;
}
