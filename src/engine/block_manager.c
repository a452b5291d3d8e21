/* block_manager.c - reference counts, prefix cache, pins, copy-on-write and
 * the swap pool over the KV pool (see block_manager.h). */
#include "engine/block_manager.h"
#include "base/alloc.h"
#include "base/error.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <xxhash.h>

xllm_status bm_init(block_manager *bm, kv_cache *kv, int caching, int32_t swap_blocks, xllm_error *err) {
    memset(bm, 0, sizeof *bm);
    bm->kv = kv;
    bm->caching = caching;
    bm->block_size = kv->block_size;
    size_t n = (size_t)kv->n_blocks;
    uint32_t nb = 16;
    while (nb < 2 * n && nb < (1u << 30)) nb <<= 1;
    bm->bucket_mask = nb - 1;
    bm->hash = mem_calloc(n, sizeof *bm->hash);
    bm->hashed = mem_calloc(n, 1);
    bm->pins = mem_calloc(n, sizeof *bm->pins);
    bm->ids = mem_malloc_array(n * (size_t)bm->block_size, sizeof(int32_t));
    bm->lru_prev = mem_malloc_array(n, sizeof(int32_t));
    bm->lru_next = mem_malloc_array(n, sizeof(int32_t));
    bm->chain = mem_malloc_array(n, sizeof(int32_t));
    bm->bucket = mem_malloc_array(nb, sizeof(int32_t));
    bm->lru_head = bm->lru_tail = -1;
    if (!bm->hash || !bm->hashed || !bm->pins || !bm->ids || !bm->lru_prev || !bm->lru_next || !bm->chain ||
        !bm->bucket) {
        bm_free(bm);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "cannot allocate the KV block manager");
    }
    for (uint32_t i = 0; i < nb; i++) bm->bucket[i] = -1;
    if (swap_blocks > 0) {
        bm->swap_block_bytes = 2 * (size_t)kv->n_layers * kv_cache_block_bytes(kv);
        bm->swap_bytes = (size_t)swap_blocks * bm->swap_block_bytes;
        /* the backend's pinned host memory where it has one (a GPU: swaps are
         * direct device copies), else page-locked plain memory (below) */
        const backend *be = kv->be;
        if (be->ops->host_alloc && (bm->swap = be->ops->host_alloc(be->ctx, bm->swap_bytes))) bm->swap_pinned = 1;
        else bm->swap = mem_malloc_aligned(bm->swap_bytes);
        bm->swap_free = mem_malloc_array((size_t)swap_blocks, sizeof(int32_t));
        if (!bm->swap || !bm->swap_free) {
            size_t mib = bm->swap_bytes >> 20;
            bm_free(bm);
            return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "cannot allocate the KV swap pool (%zu MiB)", mib);
        }
        /* page-locked when the limits allow (RLIMIT_MEMLOCK); else plain memory */
        bm->swap_locked = bm->swap_pinned || mlock(bm->swap, bm->swap_bytes) == 0;
        bm->swap_total = bm->swap_n_free = swap_blocks;
        for (int32_t i = 0; i < swap_blocks; i++) bm->swap_free[i] = swap_blocks - 1 - i;
    }
    return XLLM_OK;
}

void bm_free(block_manager *bm) {
    if (bm->swap_pinned) bm->kv->be->ops->host_free(bm->kv->be->ctx, bm->swap);
    else {
        if (bm->swap && bm->swap_locked) munlock(bm->swap, bm->swap_bytes);
        mem_free_aligned(bm->swap);
    }
    xllm_free(bm->swap_free);
    xllm_free(bm->hash);
    xllm_free(bm->hashed);
    xllm_free(bm->pins);
    xllm_free(bm->ids);
    xllm_free(bm->lru_prev);
    xllm_free(bm->lru_next);
    xllm_free(bm->chain);
    xllm_free(bm->bucket);
    memset(bm, 0, sizeof *bm);
}

int32_t bm_used(const block_manager *bm) { return bm->kv->n_blocks - bm->kv->n_free - bm->n_cached; }

int32_t bm_pinned(const block_manager *bm) {
    int32_t n = 0;
    for (int32_t b = 0; b < bm->kv->n_blocks; b++) n += bm->pins[b] > 0;
    return n;
}

/* ------------------------------------------------------------ hash table */

uint64_t bm_block_hash(const block_manager *bm, uint64_t parent, const int32_t *ids) {
    return XXH3_64bits_withSeed(ids, (size_t)bm->block_size * sizeof(int32_t), parent);
}

static int32_t table_find(const block_manager *bm, uint64_t h, const int32_t *ids) {
    for (int32_t b = bm->bucket[h & bm->bucket_mask]; b >= 0; b = bm->chain[b])
        if (bm->hash[b] == h &&
            !memcmp(bm->ids + (size_t)b * (size_t)bm->block_size, ids, (size_t)bm->block_size * sizeof(int32_t)))
            return b;
    return -1;
}

static void table_remove(block_manager *bm, int32_t block) {
    assert(bm->hashed[block]);
    int32_t *link = &bm->bucket[bm->hash[block] & bm->bucket_mask];
    while (*link != block) {
        assert(*link >= 0);
        link = &bm->chain[*link];
    }
    *link = bm->chain[block];
    bm->hashed[block] = 0;
}

/* --------------------------------------------------------------- the LRU */

static void lru_unlink(block_manager *bm, int32_t b) {
    int32_t p = bm->lru_prev[b], n = bm->lru_next[b];
    if (p >= 0) bm->lru_next[p] = n; else bm->lru_head = n;
    if (n >= 0) bm->lru_prev[n] = p; else bm->lru_tail = p;
    bm->n_cached--;
}

static void lru_push_mru(block_manager *bm, int32_t b) {
    bm->lru_prev[b] = bm->lru_tail;
    bm->lru_next[b] = -1;
    if (bm->lru_tail >= 0) bm->lru_next[bm->lru_tail] = b; else bm->lru_head = b;
    bm->lru_tail = b;
    bm->n_cached++;
}

/* ---------------------------------------------------------- references */

int32_t bm_alloc(block_manager *bm) {
    int32_t b = kv_cache_alloc_block(bm->kv);
    if (b >= 0) return b;
    if (bm->lru_head < 0) return -1;
    b = bm->lru_head; /* evict the least recently used cached block */
    lru_unlink(bm, b);
    table_remove(bm, b);
    bm->evictions++;
    kv_cache_ref(bm->kv, b);
    return b;
}

void bm_release(block_manager *bm, int32_t block) {
    if (kv_cache_unref(bm->kv, block) > 0) return;
    if (bm->hashed[block] && bm->caching) {
        lru_push_mru(bm, block);
        return;
    }
    if (bm->hashed[block]) table_remove(bm, block);
    kv_cache_put_free(bm->kv, block);
}

void bm_release_table(block_manager *bm, kv_seq *t) {
    /* last block first: a sequence's tail is the least likely to be shared,
     * so it becomes the least recently used among its blocks */
    for (int32_t i = t->n_blocks - 1; i >= 0; i--) bm_release(bm, t->blocks[i]);
    t->n_blocks = 0;
}

void bm_pin(block_manager *bm, int32_t block) {
    kv_cache_ref(bm->kv, block);
    bm->pins[block]++;
}

void bm_unpin(block_manager *bm, int32_t block) {
    assert(bm->pins[block] > 0);
    bm->pins[block]--;
    bm_release(bm, block);
}

int32_t bm_lookup(block_manager *bm, const int32_t *ids, int32_t max_blocks, kv_seq *t, uint64_t *hashes) {
    if (!bm->caching) return 0;
    bm->lookups++;
    uint64_t parent = BM_ROOT_HASH;
    int32_t hit = 0;
    if (kv_seq_grow(t, t->n_blocks + max_blocks, NULL)) return 0;
    for (int32_t k = 0; k < max_blocks; k++) {
        const int32_t *bid = ids + (size_t)k * (size_t)bm->block_size;
        uint64_t h = bm_block_hash(bm, parent, bid);
        int32_t b = table_find(bm, h, bid);
        if (b < 0) break;
        if (bm->kv->refcount[b] == 0) lru_unlink(bm, b);
        kv_cache_ref(bm->kv, b);
        t->blocks[t->n_blocks++] = b;
        hashes[k] = h;
        parent = h;
        hit++;
    }
    bm->hit_blocks += (uint64_t)hit;
    bm->hit_tokens += (uint64_t)hit * (uint64_t)bm->block_size;
    return hit;
}

int32_t bm_find(const block_manager *bm, uint64_t h, const int32_t *ids) { return table_find(bm, h, ids); }

void bm_register(block_manager *bm, int32_t block, uint64_t h, const int32_t *ids) {
    if (!bm->caching || bm->hashed[block] || table_find(bm, h, ids) >= 0) return;
    bm->hash[block] = h;
    bm->hashed[block] = 1;
    memcpy(bm->ids + (size_t)block * (size_t)bm->block_size, ids, (size_t)bm->block_size * sizeof(int32_t));
    int32_t *head = &bm->bucket[h & bm->bucket_mask];
    bm->chain[block] = *head;
    *head = block;
}

/* ------------------------------------------------------- copy-on-write */

int32_t bm_blocks_needed(const block_manager *bm, const kv_seq *t, int32_t from, int32_t to) {
    if (to <= from) return 0;
    int32_t B = bm->block_size, need = 0;
    int32_t first = from / B, last = (to - 1) / B;
    for (int32_t k = first; k <= last; k++)
        if (k >= t->n_blocks || bm->kv->refcount[t->blocks[k]] > 1) need++;
    return need;
}

xllm_status bm_prepare_write(block_manager *bm, kv_seq *t, int32_t pos, xllm_error *err) {
    int32_t k = pos / bm->block_size;
    assert(k <= t->n_blocks);
    if (k == t->n_blocks) {
        xllm_status st = kv_seq_grow(t, k + 1, err);
        if (st) return st;
        int32_t b = bm_alloc(bm);
        if (b < 0) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "KV pool exhausted");
        t->blocks[t->n_blocks++] = b;
        return XLLM_OK;
    }
    int32_t old = t->blocks[k];
    if (bm->kv->refcount[old] == 1) {
        /* a private block written again: it can no longer match its hash (only
         * partial blocks are written, and those are never hashed) */
        assert(!bm->hashed[old]);
        return XLLM_OK;
    }
    int32_t b = bm_alloc(bm);
    if (b < 0) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "KV pool exhausted");
    kv_cache_copy_block(bm->kv, b, old, pos % bm->block_size);
    if (bm->mirror) bm->mirror(bm->mirror_ctx, KV_OP_COPY, b, old, pos % bm->block_size);
    t->blocks[k] = b;
    bm_release(bm, old);
    return XLLM_OK;
}

/* ------------------------------------------------------------------ swap */

int bm_swap_out(block_manager *bm, kv_seq *t, int32_t *host, int32_t n) {
    if (n > bm->swap_n_free) return 0;
    assert(n == t->n_blocks);
    for (int32_t i = 0; i < n; i++) {
        host[i] = bm->swap_free[--bm->swap_n_free];
        kv_cache_block_to_host(bm->kv, t->blocks[i], bm->swap + (size_t)host[i] * bm->swap_block_bytes);
        if (bm->mirror) bm->mirror(bm->mirror_ctx, KV_OP_SWAP_OUT, t->blocks[i], host[i], 0);
    }
    bm_release_table(bm, t);
    return 1;
}

int bm_swap_in(block_manager *bm, kv_seq *t, const int32_t *host, int32_t n) {
    if (n > bm_available(bm) || kv_seq_grow(t, t->n_blocks + n, NULL)) return 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t b = bm_alloc(bm);
        assert(b >= 0);
        kv_cache_block_from_host(bm->kv, b, bm->swap + (size_t)host[i] * bm->swap_block_bytes);
        if (bm->mirror) bm->mirror(bm->mirror_ctx, KV_OP_SWAP_IN, b, host[i], 0);
        t->blocks[t->n_blocks++] = b;
    }
    bm_swap_discard(bm, host, n);
    return 1;
}

void bm_swap_discard(block_manager *bm, const int32_t *host, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        assert(bm->swap_n_free < bm->swap_total);
        bm->swap_free[bm->swap_n_free++] = host[i];
    }
}

/* ------------------------------------------------------------ invariants */

int bm_check(const block_manager *bm, const kv_seq *const *tables, int n_tables, char *msg, size_t msg_len) {
    const kv_cache *kv = bm->kv;
    int32_t N = kv->n_blocks;
    uint32_t *refs = mem_calloc((size_t)N, sizeof *refs);
    uint8_t *in_free = mem_calloc((size_t)N, 1), *in_lru = mem_calloc((size_t)N, 1);
    int rc = 0;
    if (!refs || !in_free || !in_lru) goto out; /* no memory to check now: not a violation */
    for (int i = 0; i < n_tables; i++)
        for (int32_t k = 0; k < tables[i]->n_blocks; k++) {
            int32_t b = tables[i]->blocks[k];
            if (b < 0 || b >= N) {
                snprintf(msg, msg_len, "a block table holds block id %d, outside the pool (0..%d)", b, N - 1);
                rc = -1;
                goto out;
            }
            refs[b]++;
        }
    for (int32_t i = 0; i < kv->n_free; i++) {
        int32_t b = kv->free_list[i];
        if (in_free[b]++) {
            snprintf(msg, msg_len, "block %d is twice in the free list", b);
            rc = -1;
            goto out;
        }
    }
    int32_t n_lru = 0;
    for (int32_t b = bm->lru_head; b >= 0 && n_lru <= N; b = bm->lru_next[b]) {
        in_lru[b] = 1;
        n_lru++;
    }
    if (n_lru != bm->n_cached) {
        snprintf(msg, msg_len, "the LRU list holds %d blocks but %d are counted as cached", n_lru, bm->n_cached);
        rc = -1;
        goto out;
    }
    int32_t used = 0;
    for (int32_t b = 0; b < N && !rc; b++) {
        uint32_t want = refs[b] + bm->pins[b];
        if (in_free[b] && (kv->refcount[b] || bm->hashed[b] || in_lru[b]))
            snprintf(msg, msg_len, "block %d is in the free list but has refcount %u%s%s", b, kv->refcount[b],
                     bm->hashed[b] ? ", a hash" : "", in_lru[b] ? ", and is in the LRU list" : ""), rc = -1;
        else if (in_lru[b] && (kv->refcount[b] || !bm->hashed[b]))
            snprintf(msg, msg_len, "cached block %d has refcount %u%s", b, kv->refcount[b],
                     bm->hashed[b] ? "" : " and no hash"), rc = -1;
        else if (kv->refcount[b] != want)
            snprintf(msg, msg_len, "block %d has refcount %u but %u block tables and %u pins hold it", b,
                     kv->refcount[b], refs[b], bm->pins[b]), rc = -1;
        else if (!in_free[b] && !in_lru[b] && kv->refcount[b] == 0)
            snprintf(msg, msg_len, "block %d is lost: no reference, not free, not cached", b), rc = -1;
        used += kv->refcount[b] > 0;
    }
    if (!rc && kv->n_free + bm->n_cached + used != N) {
        snprintf(msg, msg_len, "free %d + cached %d + used %d != total %d", kv->n_free, bm->n_cached, used, N);
        rc = -1;
    }
out:
    xllm_free(refs);
    xllm_free(in_free);
    xllm_free(in_lru);
    return rc;
}
