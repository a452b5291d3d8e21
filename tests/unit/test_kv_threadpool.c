/* test_kv_threadpool.c - paged KV pool bookkeeping and the thread pool's
 * static split (every item exactly once, any thread count, repeated runs). */
#include "test.h"
#include "base/alloc.h"
#include "base/threadpool.h"
#include "model/kv_cache.h"

#include <stdatomic.h>
#include <string.h>

typedef struct { _Atomic int *hits; } tp_ctx;

static void mark(void *p, size_t b, size_t e, int thread) {
    tp_ctx *c = p;
    (void)thread;
    for (size_t i = b; i < e; i++) atomic_fetch_add(&c->hits[i], 1);
}

int main(void) {
    size_t before = xllm_allocated_bytes();
    kv_cache kv;
    xllm_error err;
    backend be;
    backend_options bo = {0};
    bo.n_threads = 1, bo.max_cols = 8, bo.max_tokens = 1;
    CHECK(backend_create(&be, "cpu", &bo, &err) == XLLM_OK);
    CHECK(kv_cache_init(&kv, &be, 2, 3, 8, 4, 10, &err) == XLLM_OK);
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
    CHECK(kv_cache_k(&kv, 1, 0, 0) - kv_cache_k(&kv, 0, 0, 0) == (ptrdiff_t)kv.layer_stride);
    CHECK(kv_cache_k(&kv, 0, 1, 0) - kv_cache_k(&kv, 0, 0, 3) == 3 * 8);
    kv_seq_release(&a, &kv);
    CHECK(kv.n_free == 3);
    CHECK(kv_seq_reserve(&c, &kv, 12, &err) == XLLM_OK && kv.n_free == 0);
    kv_seq_release(&b, &kv);
    kv_seq_release(&c, &kv);
    CHECK(kv.n_free == 10);
    kv_cache_free(&kv);
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
