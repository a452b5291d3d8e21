/*
 * kv_cache.h - the paged KV pool: fixed-size blocks of K and V for every
 * layer, allocated once, handed out through a free list.
 *
 * A sequence owns a block table (block ids in position order); position p of
 * a sequence lives in block table[p / block_size], slot p % block_size. The
 * forward pass reads and writes K/V only through block tables, so sequences
 * never need contiguous memory and freeing a finished request's blocks makes
 * them available to any other sequence at once (no fragmentation). Blocks are
 * reference counted so that a later prefix cache can share them.
 *
 * Layout of one layer's K (V alike): [n_blocks][block_size][n_kv_heads] rows
 * of head_dim values stored as the pool's dtype (quant/kvq.h: f32, f16 or q8,
 * kvq_row_bytes each), so every size here is in bytes: a q8 pool holds ~3.7x
 * the positions of an f32 pool in the same memory. Copies (copy-on-write,
 * swap, knowledge files) move the stored bytes as they are.
 *
 * A pipeline stage's pool holds only its layers [layer0, layer0 + n_layers):
 * the accessors take the model's layer number and subtract layer0.
 * K and V are device memory of the model's backend (backend.h): this layer
 * computes addresses (kv_cache_k / _v / _at) but moves data only through the
 * backend's copy (copy-on-write, swap to host, knowledge KV files).
 */
#ifndef XLLM_MODEL_KV_CACHE_H
#define XLLM_MODEL_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include "backend/backend.h"
#include "xllm.h"

typedef struct kv_cache {
    const backend *be;        /* whose device memory k and v are */
    int n_layers, n_kv_heads, head_dim, block_size;
    int layer0;               /* the model layer the pool's layer 0 holds (a pipeline stage's first; 0 when whole) */
    int32_t n_blocks;
    kv_dtype dtype;           /* how K/V rows are stored */
    size_t slot_bytes;        /* one position of one layer's K (V alike): n_kv_heads rows */
    size_t layer_stride;      /* bytes per layer in k (and v) */
    unsigned char *k, *v;
    int32_t *free_list;       /* stack of free block ids */
    int32_t n_free;
    uint16_t *refcount;
} kv_cache;

/* A pool of n_blocks blocks whose rows are stored as dtype
 * (kvq_supported(dtype, head_dim)). Not thread-safe (nor is anything here:
 * the engine's scheduler thread owns the pool). */
xllm_status kv_cache_init(kv_cache *kv, const backend *be, int n_layers, int n_kv_heads, int head_dim, int block_size,
                          int32_t n_blocks, kv_dtype dtype, xllm_error *err);
/* Bytes of one position's K and V over n_layers layers: the pool's cost per token. */
static inline size_t kv_bytes_per_token(kv_dtype dtype, int n_layers, int n_kv_heads, int head_dim) {
    return 2 * (size_t)n_layers * (size_t)n_kv_heads * kvq_row_bytes(dtype, head_dim);
}
void kv_cache_free(kv_cache *kv);
/* -1 when the pool is empty. The block comes with one reference. */
int32_t kv_cache_alloc_block(kv_cache *kv);
/* Drop one reference; the block returns to the free list at zero. */
void kv_cache_release_block(kv_cache *kv, int32_t block);
/* For an owner that keeps unreferenced blocks out of the free list (the
 * engine's block manager caches them): add / drop one reference without
 * touching the free list (unref returns the new count), and hand a block
 * with no reference back to the free list. */
void kv_cache_ref(kv_cache *kv, int32_t block);
int kv_cache_unref(kv_cache *kv, int32_t block);
void kv_cache_put_free(kv_cache *kv, int32_t block);
/* Bytes of one block in one layer's K (V alike). */
static inline size_t kv_cache_block_bytes(const kv_cache *kv) { return (size_t)kv->block_size * kv->slot_bytes; }
/* Copy the first n_slots slots of block src into block dst, every layer, K and V. */
void kv_cache_copy_block(kv_cache *kv, int32_t dst, int32_t src, int n_slots);
/* Copy a whole block (every layer, K then V, stored bytes) to or from a
 * contiguous host buffer of 2 * n_layers * kv_cache_block_bytes bytes. */
void kv_cache_block_to_host(const kv_cache *kv, int32_t block, void *host);
void kv_cache_block_from_host(kv_cache *kv, int32_t block, const void *host);
/* One position's K and V of one layer (slot_bytes each, stored form) to /
 * from host memory, through a block table. */
void kv_cache_slot_to_host(const kv_cache *kv, int layer, const int32_t *table, int pos, void *k, void *v);
void kv_cache_slot_from_host(kv_cache *kv, int layer, const int32_t *table, int pos, const void *k, const void *v);

/* Addresses in device memory (not to be dereferenced here). */
static inline void *kv_cache_k(const kv_cache *kv, int layer, int32_t block, int slot) {
    return kv->k + (size_t)(layer - kv->layer0) * kv->layer_stride +
           ((size_t)block * (size_t)kv->block_size + (size_t)slot) * kv->slot_bytes;
}
static inline void *kv_cache_v(const kv_cache *kv, int layer, int32_t block, int slot) {
    return kv->v + (size_t)(layer - kv->layer0) * kv->layer_stride +
           ((size_t)block * (size_t)kv->block_size + (size_t)slot) * kv->slot_bytes;
}
/* The K / V slot of position pos of a sequence with block table `table`: */
static inline void *kv_cache_k_at(const kv_cache *kv, int layer, const int32_t *table, int pos) {
    return kv_cache_k(kv, layer, table[pos / kv->block_size], pos % kv->block_size);
}
static inline void *kv_cache_v_at(const kv_cache *kv, int layer, const int32_t *table, int pos) {
    return kv_cache_v(kv, layer, table[pos / kv->block_size], pos % kv->block_size);
}

/* A sequence's block table, grown on demand. */
typedef struct kv_seq {
    int32_t *blocks;
    int32_t n_blocks, cap;
} kv_seq;

/* Make sure positions [0, n_tokens) have blocks. XLLM_ERR_OUT_OF_MEMORY when
 * the pool has no free block (the caller's admission control prevents it). */
xllm_status kv_seq_reserve(kv_seq *s, kv_cache *kv, int32_t n_tokens, xllm_error *err);
/* Room in the block table for `need` block ids (no block is allocated):
 * XLLM_OK, or XLLM_ERR_OUT_OF_MEMORY (err may be NULL). */
xllm_status kv_seq_grow(kv_seq *s, int32_t need, xllm_error *err);
/* Release every block of the sequence back to the pool. */
void kv_seq_release(kv_seq *s, kv_cache *kv);
int32_t kv_blocks_for_tokens(const kv_cache *kv, int32_t n_tokens);

#endif
