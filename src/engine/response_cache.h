/*
 * response_cache.h - exact-match cache of finished results.
 *
 * A deterministic request (greedy, or sampling with an explicit seed) always
 * produces the same tokens on this engine, so its finished result can be
 * replayed: the key is the request's canonical bytes (prompt ids, the constraint
 * (grammar kind and texts), every
 * sampling parameter that can change the output, n), compared in full, so two
 * requests share an entry only when they are the same request. Greedy
 * requests drop the fields greedy ignores (temperature, top-k/p, min-p, seed)
 * from the key. Values keep each sample's ids, text, the text boundary after
 * each token and the finish reason, so a hit streams exactly as the original
 * run did. Bounded in bytes and entries; least recently used evicted first.
 *
 * Not thread-safe: the engine calls it under its lock.
 */
#ifndef XLLM_ENGINE_RESPONSE_CACHE_H
#define XLLM_ENGINE_RESPONSE_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include "xllm.h"

typedef struct rc_sample {
    int32_t *ids;
    size_t n_ids;
    char *text;
    size_t text_len;
    uint32_t *text_end;           /* per id: text bytes complete after it */
    xllm_finish_reason reason;
    float *lp;                    /* log-probabilities (NULL when not asked for) */
    int32_t *top_ids;
    float *top_lp;
    int n_top;
} rc_sample;

typedef struct rc_entry {
    uint64_t hash;
    unsigned char *key;
    size_t key_len, bytes;
    int n;
    rc_sample *samples;
    struct rc_entry *prev, *next; /* LRU: head = least recently used */
    struct rc_entry *chain;       /* hash bucket */
} rc_entry;

typedef struct response_cache {
    size_t max_bytes, bytes;
    int max_entries, n_entries;
    rc_entry **buckets;
    uint32_t n_buckets;
    rc_entry *head, *tail;
    uint64_t hits, misses;
} response_cache;

xllm_status rc_init(response_cache *rc, size_t max_bytes, int max_entries, xllm_error *err);
void rc_free(response_cache *rc);
/* Whether a request's output is a function of its key (greedy or seeded). */
int rc_cacheable(const xllm_sampling_params *p);
/* The canonical key of a request (free with xllm_free); NULL when out of memory. */
unsigned char *rc_key(const int32_t *prompt, size_t n_prompt, const xllm_sampling_params *p, int n, size_t *len);
/* The entry for key (made most recently used; counts a hit or a miss), or NULL. */
const rc_entry *rc_lookup(response_cache *rc, const unsigned char *key, size_t len);
/* Store a result under key (copies everything); an entry larger than the
 * whole budget is not stored. Evicts LRU entries to make room. */
void rc_insert(response_cache *rc, const unsigned char *key, size_t len, const rc_sample *samples, int n);

#endif
