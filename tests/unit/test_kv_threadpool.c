/* test_kv_threadpool.c - paged KV pool bookkeeping, its byte layout and
 * copies in every storage (f32, f16, q8: copy-on-write, swap to host and back,
 * one slot to and from host), and the thread pool's static split (every item
 * exactly once, any thread count, repeated runs). */
#include "test.h"
#include "base/alloc.h"
#include "base/threadpool.h"
#include "model/kv_cache.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct { _Atomic int *hits; } tp_ctx;

static void mark(void *p, size_t b, size_t e, int thread) {
    tp_ctx *c = p;
    (void)thread;
    for (size_t i = b; i < e; i++) atomic_fetch_add(&c->hits[i], 1);
}

/* A pool of each kv_dtype: sizes in its bytes; a block's stored bytes survive
 * copy_block (the first n slots only), block_to_host / from_host (swap) and
 * slot_to / from_host (knowledge files) unchanged. */
static void check_pool_copies(backend *be, kv_dtype dt) {
    xllm_error err;
    kv_cache kv;
    const int L = 3, H = 2, HD = 64, B = 4, NB = 6;
    CHECK(kv_cache_init(&kv, be, L, H, HD, B, NB, dt, &err) == XLLM_OK);
    size_t rb = kvq_row_bytes(dt, HD);
    CHECK(kv.slot_bytes == (size_t)H * rb && kv.layer_stride == (size_t)NB * B * H * rb);
    CHECK(kv_bytes_per_token(dt, L, H, HD) == 2 * (size_t)L * H * rb);
    if (dt == KV_Q8) CHECK(kv_bytes_per_token(dt, L, H, HD) * 100 <= kv_bytes_per_token(KV_F32, L, H, HD) * 27);
    /* fill block 1 through the slot writer with stored rows of random values */
    int32_t table[2] = {1, 2};
    unsigned char *k = malloc(kv.slot_bytes), *v = malloc(kv.slot_bytes), *k2 = malloc(kv.slot_bytes), *v2 = malloc(kv.slot_bytes);
    float x[64];
    uint32_t seed = 99;
    for (int l = 0; l < L; l++)
        for (int p = 0; p < 2 * B; p++) {
            for (int h = 0; h < H; h++) {
                for (int d = 0; d < HD; d++) seed = seed * 1664525u + 1013904223u, x[d] = (float)(seed >> 9) / 8388608.0f - 1.0f;
                kvq_store_row(dt, x, HD, k + (size_t)h * rb);
                for (int d = 0; d < HD; d++) x[d] = -x[d] * 0.5f;
                kvq_store_row(dt, x, HD, v + (size_t)h * rb);
            }
            kv_cache_slot_from_host(&kv, l, table, p, k, v);
            kv_cache_slot_to_host(&kv, l, table, p, k2, v2);
            CHECK(!memcmp(k, k2, kv.slot_bytes) && !memcmp(v, v2, kv.slot_bytes));
        }
    /* copy-on-write of 3 slots of block 1 into block 4: those equal, slot 3 untouched (zero) */
    size_t bb = kv_cache_block_bytes(&kv);
    unsigned char *h1 = calloc(2 * (size_t)L, bb), *h4 = calloc(2 * (size_t)L, bb), *h5 = calloc(2 * (size_t)L, bb);
    unsigned char *zero = calloc(2 * (size_t)L, bb);
    kv_cache_block_from_host(&kv, 4, zero);
    kv_cache_copy_block(&kv, 4, 1, 3);
    kv_cache_block_to_host(&kv, 1, h1);
    kv_cache_block_to_host(&kv, 4, h4);
    for (int part = 0; part < 2 * L; part++) {
        CHECK(!memcmp(h1 + (size_t)part * bb, h4 + (size_t)part * bb, 3 * kv.slot_bytes));
        CHECK(!memcmp(h4 + (size_t)part * bb + 3 * kv.slot_bytes, zero, kv.slot_bytes));
    }
    /* swap out block 1 and in as block 5: the same bytes */
    kv_cache_block_from_host(&kv, 5, h1);
    kv_cache_block_to_host(&kv, 5, h5);
    CHECK(!memcmp(h1, h5, 2 * (size_t)L * bb));
    const int32_t t5[2] = {5, 2};
    for (int l = 0; l < L; l++)
        for (int p = 0; p < B; p++) {
            kv_cache_slot_to_host(&kv, l, t5, p, k, v);
            kv_cache_slot_to_host(&kv, l, table, p, k2, v2);
            CHECK(!memcmp(k, k2, kv.slot_bytes) && !memcmp(v, v2, kv.slot_bytes));
        }
    free(k), free(v), free(k2), free(v2), free(h1), free(h4), free(h5), free(zero);
    kv_cache_free(&kv);
}

int main(void) {
    size_t before = xllm_allocated_bytes();
    kv_cache kv;
    xllm_error err;
    backend be;
    backend_options bo = {0};
    bo.n_threads = 1, bo.max_cols = 8, bo.max_tokens = 1;
    CHECK(backend_create(&be, "cpu", &bo, &err) == XLLM_OK);
    CHECK(kv_cache_init(&kv, &be, 2, 3, 8, 4, 10, KV_F32, &err) == XLLM_OK);
    CHECK(kv.n_free == 10);
    kv_seq a = {0}, b = {0};
    CHECK(kv_seq_reserve(&a, &kv, 9, &err) == XLLM_OK); /* 3 blocks */
    CHECK(a.n_blocks == 3 && kv.n_free == 7);
    CHECK(kv_seq_reserve(&a, &kv, 12, &err) == XLLM_OK && a.n_blocks == 3); /* still fits */
    CHECK(kv_seq_reserve(&b, &kv, 28, &err) == XLLM_OK && b.n_blocks == 7 && kv.n_free == 0);
    kv_seq c = {0};
    CHECK(kv_seq_reserve(&c, &kv, 1, &err) == XLLM_ERR_OUT_OF_MEMORY); /* pool full: an error, not a crash */
    /* blocks are distinct and slots do not overlap between layers */
    int used[10] = {0};
    for (int i = 0; i < a.n_blocks; i++) used[a.blocks[i]]++;
    for (int i = 0; i < b.n_blocks; i++) used[b.blocks[i]]++;
    for (int i = 0; i < 10; i++) CHECK(used[i] == 1);
    CHECK((unsigned char *)kv_cache_k(&kv, 1, 0, 0) - (unsigned char *)kv_cache_k(&kv, 0, 0, 0) ==
          (ptrdiff_t)kv.layer_stride);
    CHECK((unsigned char *)kv_cache_k(&kv, 0, 1, 0) - (unsigned char *)kv_cache_k(&kv, 0, 0, 3) == 3 * 8 * 4);
    kv_seq_release(&a, &kv);
    CHECK(kv.n_free == 3);
    CHECK(kv_seq_reserve(&c, &kv, 12, &err) == XLLM_OK && kv.n_free == 0);
    kv_seq_release(&b, &kv);
    kv_seq_release(&c, &kv);
    CHECK(kv.n_free == 10);
    kv_cache_free(&kv);
    for (int dt = KV_F32; dt <= KV_Q8; dt++) check_pool_copies(&be, (kv_dtype)dt);
    CHECK(kv_cache_init(&kv, &be, 2, 3, 10, 4, 10, KV_Q8, &err) == XLLM_ERR_INVALID_ARGUMENT); /* head_dim 10: q8 needs a multiple of 4 */
    backend_destroy(&be);

    for (int threads = 1; threads <= 4; threads++) {
        threadpool *tp = threadpool_create(threads);
        CHECK(tp && threadpool_size(tp) == threads);
        for (size_t n = 0; n < 40; n += 7) {
            _Atomic int hits[64];
            for (int i = 0; i < 64; i++) atomic_store(&hits[i], 0);
            tp_ctx c2 = {hits};
            for (int rep = 0; rep < 100; rep++) threadpool_run(tp, n, 1, mark, &c2);
            for (size_t i = 0; i < 64; i++) CHECK(atomic_load(&hits[i]) == (i < n ? 100 : 0));
        }
        threadpool_free(tp);
    }
    CHECK(xllm_allocated_bytes() == before);
    return test_report("test_kv_threadpool");
}
