/* kv_cache.c - paged KV pool and per-sequence block tables (see kv_cache.h);
 * K and V live in the backend's device memory and move with its copy(). */
#include "model/kv_cache.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "base/error.h"

#include <assert.h>
#include <stdint.h>
#include <string.h>

xllm_status kv_cache_init(kv_cache *kv, const backend *be, int n_layers, int n_kv_heads, int head_dim,
                          int block_size, int32_t n_blocks, kv_dtype dtype, xllm_error *err) {
    memset(kv, 0, sizeof *kv);
    if (!kvq_supported(dtype, head_dim))
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "a %s KV cache needs head_dim a multiple of 8 (this model: %d)",
                           kvq_name(dtype), head_dim);
    kv->be = be;
    kv->n_layers = n_layers;
    kv->n_kv_heads = n_kv_heads;
    kv->head_dim = head_dim;
    kv->block_size = block_size;
    kv->n_blocks = n_blocks;
    if (!backend_supports(be, BE_FEAT_KV_DTYPE, (int)dtype))
        return err_setf(err, XLLM_ERR_UNSUPPORTED, "backend '%s' does not implement a %s KV cache",
                           be->ops->name, kvq_name(dtype));
    kv->dtype = dtype;
    kv->slot_bytes = (size_t)n_kv_heads * kvq_row_bytes(dtype, head_dim);
    kv->layer_stride = (size_t)n_blocks * (size_t)block_size * kv->slot_bytes;
    size_t total = kv->layer_stride * (size_t)n_layers;
    kv->k = be->ops->alloc(be->ctx, total);
    kv->v = be->ops->alloc(be->ctx, total);
    kv->free_list = mem_malloc_array((size_t)n_blocks, sizeof(int32_t));
    kv->refcount = mem_calloc((size_t)n_blocks, sizeof(uint16_t));
    if (!kv->k || !kv->v || !kv->free_list || !kv->refcount) {
        kv_cache_free(kv);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "cannot allocate the KV cache (%zu MiB)", 2 * total >> 20);
    }
    /* lowest ids on top of the stack */
    for (int32_t i = 0; i < n_blocks; i++) kv->free_list[i] = n_blocks - 1 - i;
    kv->n_free = n_blocks;
    return XLLM_OK;
}

void kv_cache_free(kv_cache *kv) {
    if (kv->be) {
        kv->be->ops->free(kv->be->ctx, kv->k);
        kv->be->ops->free(kv->be->ctx, kv->v);
    }
    xllm_free(kv->free_list);
    xllm_free(kv->refcount);
    memset(kv, 0, sizeof *kv);
}

int32_t kv_cache_alloc_block(kv_cache *kv) {
    if (kv->n_free == 0) return -1;
    int32_t b = kv->free_list[--kv->n_free];
    assert(kv->refcount[b] == 0);
    kv->refcount[b] = 1;
    return b;
}

void kv_cache_release_block(kv_cache *kv, int32_t block) {
    assert(block >= 0 && block < kv->n_blocks && kv->refcount[block] > 0);
    if (--kv->refcount[block] == 0) kv->free_list[kv->n_free++] = block;
}

void kv_cache_ref(kv_cache *kv, int32_t block) {
    assert(block >= 0 && block < kv->n_blocks && kv->refcount[block] < UINT16_MAX);
    kv->refcount[block]++;
}

int kv_cache_unref(kv_cache *kv, int32_t block) {
    assert(block >= 0 && block < kv->n_blocks && kv->refcount[block] > 0);
    return --kv->refcount[block];
}

void kv_cache_put_free(kv_cache *kv, int32_t block) {
    assert(block >= 0 && block < kv->n_blocks && kv->refcount[block] == 0 && kv->n_free < kv->n_blocks);
    kv->free_list[kv->n_free++] = block;
}

#define COPY(dst, src, bytes, kind) kv->be->ops->copy(kv->be->ctx, (dst), (src), (bytes), (kind))

void kv_cache_copy_block(kv_cache *kv, int32_t dst, int32_t src, int n_slots) {
    size_t n = (size_t)n_slots * kv->slot_bytes;
    for (int l = kv->layer0; l < kv->layer0 + kv->n_layers; l++) {
        COPY(kv_cache_k(kv, l, dst, 0), kv_cache_k(kv, l, src, 0), n, BE_DEVICE_TO_DEVICE);
        COPY(kv_cache_v(kv, l, dst, 0), kv_cache_v(kv, l, src, 0), n, BE_DEVICE_TO_DEVICE);
    }
}

void kv_cache_block_to_host(const kv_cache *kv, int32_t block, void *host) {
    size_t n = kv_cache_block_bytes(kv);
    unsigned char *h = host;
    for (int l = 0; l < kv->n_layers; l++) {
        COPY(h + (size_t)(2 * l) * n, kv_cache_k(kv, kv->layer0 + l, block, 0), n, BE_DEVICE_TO_HOST);
        COPY(h + (size_t)(2 * l + 1) * n, kv_cache_v(kv, kv->layer0 + l, block, 0), n, BE_DEVICE_TO_HOST);
    }
}

void kv_cache_block_from_host(kv_cache *kv, int32_t block, const void *host) {
    size_t n = kv_cache_block_bytes(kv);
    const unsigned char *h = host;
    for (int l = 0; l < kv->n_layers; l++) {
        COPY(kv_cache_k(kv, kv->layer0 + l, block, 0), h + (size_t)(2 * l) * n, n, BE_HOST_TO_DEVICE);
        COPY(kv_cache_v(kv, kv->layer0 + l, block, 0), h + (size_t)(2 * l + 1) * n, n, BE_HOST_TO_DEVICE);
    }
}

void kv_cache_slot_to_host(const kv_cache *kv, int layer, const int32_t *table, int pos, void *k, void *v) {
    COPY(k, kv_cache_k_at(kv, layer, table, pos), kv->slot_bytes, BE_DEVICE_TO_HOST);
    COPY(v, kv_cache_v_at(kv, layer, table, pos), kv->slot_bytes, BE_DEVICE_TO_HOST);
}

void kv_cache_slot_from_host(kv_cache *kv, int layer, const int32_t *table, int pos, const void *k, const void *v) {
    COPY(kv_cache_k_at(kv, layer, table, pos), k, kv->slot_bytes, BE_HOST_TO_DEVICE);
    COPY(kv_cache_v_at(kv, layer, table, pos), v, kv->slot_bytes, BE_HOST_TO_DEVICE);
}
#undef COPY

int32_t kv_blocks_for_tokens(const kv_cache *kv, int32_t n_tokens) {
    return (n_tokens + kv->block_size - 1) / kv->block_size;
}

xllm_status kv_seq_grow(kv_seq *s, int32_t need, xllm_error *err) {
    if (need <= s->cap) return XLLM_OK;
    size_t cap = (size_t)s->cap;
    if (need > INT32_MAX / 2 || array_reserve(&s->blocks, &cap, (size_t)need, sizeof(int32_t), 8))
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory growing a block table");
    s->cap = (int32_t)cap;
    return XLLM_OK;
}

xllm_status kv_seq_reserve(kv_seq *s, kv_cache *kv, int32_t n_tokens, xllm_error *err) {
    int32_t need = kv_blocks_for_tokens(kv, n_tokens);
    xllm_status st = kv_seq_grow(s, need, err);
    if (st) return st;
    while (s->n_blocks < need) {
        int32_t b = kv_cache_alloc_block(kv);
        if (b < 0) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "KV cache is full (%d blocks)", kv->n_blocks);
        s->blocks[s->n_blocks++] = b;
    }
    return XLLM_OK;
}

void kv_seq_release(kv_seq *s, kv_cache *kv) {
    for (int32_t i = 0; i < s->n_blocks; i++) kv_cache_release_block(kv, s->blocks[i]);
    xllm_free(s->blocks);
    memset(s, 0, sizeof *s);
}
