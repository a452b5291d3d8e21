/*
 * block_manager.h - who holds which KV block: reference counts, the prefix
 * cache (hashes of full blocks, LRU of unreferenced ones), pins, copy-on-write
 * and the host swap pool, over the plain physical pool of kv_cache.h.
 *
 * A block is in exactly one of four states:
 *   free    - in kv_cache's free list, refcount 0, no hash;
 *   cached  - refcount 0 but hashed: it holds a full block of some finished
 *             (or preempted) sequence and sits in the LRU list, ready to be
 *             reused by a request with the same prefix or evicted (least
 *             recently used first) when the free list is empty;
 *   used    - refcount > 0: held by block tables (one reference each) and/or
 *             pinned by a knowledge prefix (one reference per pin);
 * so free + cached + used = total (pinned blocks are a subset of used).
 *
 * Identity of a full block: h = XXH3_64(parent h, the block's token ids)
 * (parent of block 0 is a fixed seed), i.e. a hash of the whole prefix up to
 * the block's end. The block's ids are stored beside it and compared on a hit,
 * so a hash collision can never hand out wrong K/V. Only full blocks are
 * hashed; the last, partial block of a sequence is private to it - except
 * after a fork (n > 1 samples), where it is shared and the first writer
 * copies it (bm_prepare_write).
 *
 * Because every kernel computes each position's K/V the same way whatever
 * the batch, a cached block holds exactly the bits a fresh prefill would
 * write: a hit changes the work done, never the tokens.
 *
 * The swap pool is host memory of whole blocks, every layer's K and V
 * contiguous, with its own free list: the backend's pinned host memory where
 * it has one (backend_ops.host_alloc: a GPU copies to and from it directly),
 * else plain memory mlock-ed when the system allows.
 *
 * Not thread-safe: owned by the engine's scheduler thread.
 */
#ifndef XLLM_ENGINE_BLOCK_MANAGER_H
#define XLLM_ENGINE_BLOCK_MANAGER_H

#include <stdint.h>
#include "model/kv_cache.h"
#include "model/kv_ops.h"

typedef struct block_manager {
    kv_cache *kv;
    kv_mirror_fn mirror;          /* NULL, or told every data operation (pipeline parallelism, model/kv_ops.h) */
    void *mirror_ctx;
    int caching;                  /* prefix caching on (cache_policy lru) */
    int block_size;
    /* per block */
    uint64_t *hash;
    uint8_t *hashed;
    uint16_t *pins;               /* references held by knowledge prefixes (part of refcount) */
    int32_t *ids;                 /* block_size token ids of a hashed block */
    int32_t *lru_prev, *lru_next; /* cached blocks, head = least recently used */
    int32_t lru_head, lru_tail, n_cached;
    int32_t *chain;               /* hash table: next block in the bucket */
    int32_t *bucket;
    uint32_t bucket_mask;
    /* counters */
    uint64_t lookups, hit_blocks, hit_tokens, evictions;
    /* host swap pool */
    unsigned char *swap;      /* stored bytes of whole blocks (kv_cache_block_to_host) */
    size_t swap_block_bytes;
    int32_t swap_total, swap_n_free;
    int32_t *swap_free;
    int swap_locked;              /* page-locked: mlock succeeded, or swap_pinned */
    int swap_pinned;              /* from the backend's host_alloc (backend.h) */
    size_t swap_bytes;
} block_manager;

/* swap_blocks: host blocks (0 = none). Fails only for lack of memory. */
xllm_status bm_init(block_manager *bm, kv_cache *kv, int caching, int32_t swap_blocks, xllm_error *err);
void bm_free(block_manager *bm);

/* Blocks an allocation can get now: free + cached (evictable). */
static inline int32_t bm_available(const block_manager *bm) { return bm->kv->n_free + bm->n_cached; }
int32_t bm_used(const block_manager *bm);
int32_t bm_pinned(const block_manager *bm);

/* A fresh block with one reference (evicting the LRU cached block when the
 * free list is empty), or -1 when none is available. */
int32_t bm_alloc(block_manager *bm);
/* Drop one reference; at zero the block is cached (hashed, caching on) or freed. */
void bm_release(block_manager *bm, int32_t block);
/* Release every block of a table and empty it (keeps its storage). */
void bm_release_table(block_manager *bm, kv_seq *t);
void bm_pin(block_manager *bm, int32_t block);
void bm_unpin(block_manager *bm, int32_t block);

/* The chained hash of the full block `ids[0 .. block_size)` after `parent`
 * (parent of the first block: BM_ROOT_HASH). */
#define BM_ROOT_HASH 0x786c6c6d5f6b7631ull
uint64_t bm_block_hash(const block_manager *bm, uint64_t parent, const int32_t *ids);

/* Prefix lookup: for ids[0 .. n) (n a multiple of block_size is not
 * required; only full blocks count), append to table t, with a reference
 * each, the longest run of cached blocks matching the first max_blocks full
 * blocks; their chain hashes go to hashes[]. Returns the number of blocks hit.
 * Counts one lookup and the hits. Needs room in t for max_blocks. */
int32_t bm_lookup(block_manager *bm, const int32_t *ids, int32_t max_blocks, kv_seq *t, uint64_t *hashes);
/* The block registered under hash h with these ids, or -1. */
int32_t bm_find(const block_manager *bm, uint64_t h, const int32_t *ids);
/* Register block `block` (full, holding ids[0 .. block_size)) under hash h,
 * unless it is already hashed or another block holds h (then nothing). */
void bm_register(block_manager *bm, int32_t block, uint64_t h, const int32_t *ids);

/* Before writing position pos of a sequence with table t: make sure the
 * block exists (allocating it) and is private (copying a shared one, the
 * first pos % block_size slots). XLLM_ERR_OUT_OF_MEMORY when no block is
 * available (the caller preempts and retries); the table is unchanged then. */
xllm_status bm_prepare_write(block_manager *bm, kv_seq *t, int32_t pos, xllm_error *err);
/* Blocks bm_prepare_write would need for positions [from, to). */
int32_t bm_blocks_needed(const block_manager *bm, const kv_seq *t, int32_t from, int32_t to);

/* Swap: copy table t's blocks to the host pool (host[] gets the host block
 * ids) and release them; 0 when the pool has no room for all (nothing done). */
int bm_swap_out(block_manager *bm, kv_seq *t, int32_t *host, int32_t n);
/* Bring n host blocks back into fresh blocks appended to t; 0 when the
 * device pool has no room (nothing done). Host blocks are freed. */
int bm_swap_in(block_manager *bm, kv_seq *t, const int32_t *host, int32_t n);
void bm_swap_discard(block_manager *bm, const int32_t *host, int32_t n);

/* Invariants: free + cached + used = total, every free block has refcount 0
 * and no hash, every cached block refcount 0 and a hash, and each block's
 * refcount equals the references the given tables hold plus its pins.
 * Returns 0 when they hold (or when there is no memory to check them now);
 * else fills msg (naming the block) and returns -1. */
int bm_check(const block_manager *bm, const kv_seq *const *tables, int n_tables, char *msg, size_t msg_len);

#endif
