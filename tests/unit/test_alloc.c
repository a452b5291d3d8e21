/*
 * test_alloc.c - the allocator's debugging and testing hooks (src/base/alloc.c):
 *
 *  - the XLLM_DEBUG=1 tracker (turned on here before the first allocation):
 *    every live block is reported with its call site, grouped; the count
 *    returned is exact; realloc keeps tracking; four threads allocating and
 *    freeing at once leave nothing behind;
 *  - the failure injector: exactly the Nth allocation fails, once, counting
 *    every kind of call (malloc, calloc, realloc, aligned, strdup).
 */
#include "test.h"
#include "base/alloc.h"
#include "xllm.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void *churn(void *arg) {
    (void)arg;
    void *keep[64] = {0};
    for (int i = 0; i < 20000; i++) {
        int k = i % 64;
        xllm_free(keep[k]);
        keep[k] = (i % 3) ? mem_malloc((size_t)(i % 100) + 1) : mem_malloc_aligned(64);
        if (i % 3 == 0) { mem_free_aligned(keep[k]); keep[k] = mem_strdup("x"); }
        if (i % 7 == 0) {
            void *r = mem_realloc(keep[k], 300);
            if (r) keep[k] = r;
        }
    }
    for (int k = 0; k < 64; k++) xllm_free(keep[k]);
    return NULL;
}

static void tracker(void) {
    CHECK(mem_debug_enabled());
    size_t base_n = mem_debug_report("at the start (none expected)");
    CHECK(base_n == 0);
    size_t base = xllm_allocated_bytes();
    void *a[10];
    for (int i = 0; i < 10; i++) a[i] = mem_malloc(100);           /* one site, 10 blocks */
    char *s = mem_strdup("hello");                                 /* another */
    void *al = mem_malloc_aligned(1000);
    CHECK(((uintptr_t)al & 63) == 0);
    int *r = mem_malloc(4 * sizeof *r);
    r[3] = 7;
    r = mem_realloc(r, 1000 * sizeof *r);
    CHECK(r && r[3] == 7);
    CHECK(xllm_allocated_bytes() - base == (size_t)(10 * 100 + 6 + 1128 + 4000));
    CHECK(mem_debug_report("with 13 blocks live") == 13u);
    for (int i = 0; i < 10; i++) xllm_free(a[i]);
    xllm_free(s);
    mem_free_aligned(al);
    xllm_free(r);
    CHECK(mem_debug_report("after freeing them") == 0);
    CHECK(xllm_allocated_bytes() == base);

    pthread_t th[4];
    for (int i = 0; i < 4; i++) CHECK(pthread_create(&th[i], NULL, churn, NULL) == 0);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    CHECK(mem_debug_report("after 4 threads") == 0);
    CHECK(xllm_allocated_bytes() == base);
}

static void injector(void) {
    size_t base = xllm_allocated_bytes();
    mem_fail_at(3);
    void *p1 = mem_malloc(8), *p2 = mem_calloc(2, 8), *p3 = mem_malloc(8), *p4 = mem_strdup("x");
    CHECK(p1 && p2 && !p3 && p4);
    CHECK(mem_fail_happened());
    CHECK(mem_alloc_count() == 4);
    xllm_free(p1), xllm_free(p2), xllm_free(p4);
    /* a failed realloc keeps the old block */
    char *q = mem_strdup("abc");
    mem_fail_at(1);
    char *q2 = mem_realloc(q, 100);
    CHECK(q2 == NULL && !strcmp(q, "abc"));
    CHECK(mem_debug_report("one block (a failed realloc)") == 1u);
    xllm_free(q);
    /* aligned counts as one */
    mem_fail_at(1);
    CHECK(mem_malloc_aligned(10) == NULL);
    mem_fail_at(0);
    CHECK(!mem_fail_happened());
    void *ok = mem_malloc(1);
    CHECK(ok != NULL);
    xllm_free(ok);
    CHECK(xllm_allocated_bytes() == base);
}

int main(void) {
    setenv("XLLM_DEBUG", "1", 1); /* before the first allocation: it is read once */
    tracker();
    injector();
    return test_report("test_alloc");
}
