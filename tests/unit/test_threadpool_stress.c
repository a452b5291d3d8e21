/* test_threadpool_stress.c - the thread pool under churn: many regions with
 * random n and min_per_thread (so the number of active threads varies from one
 * region to the next), every index covered exactly once by the thread the
 * static split names, results of the workers visible to the caller on return,
 * regions separated by pauses long enough for the workers to fall asleep, and
 * create/free cycles (including free right after a run and free of an idle
 * pool). The chunked form (threadpool_run_chunked): every index covered exactly
 * once, each call inside one chunk, and a thread that stalls in its first chunk
 * leaves the rest to the others. Meant to be run under ThreadSanitizer or
 * helgrind too; a few seconds. */
#include "test.h"
#include "base/alloc.h"
#include "base/threadpool.h"
#include "xllm.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_N 600

typedef struct {
    int hits[MAX_N]; /* plain ints: each index belongs to one thread per region */
    int owner[MAX_N];
    size_t n;
    int n_active;
    _Atomic int bad;
} cover_ctx;

static void cover(void *p, size_t b, size_t e, int thread) {
    cover_ctx *c = p;
    if (b >= e || e > c->n || thread < 0 || thread >= c->n_active) atomic_store(&c->bad, 1);
    for (size_t i = b; i < e && i < MAX_N; i++) {
        c->hits[i]++;
        c->owner[i] = thread;
    }
}

static unsigned rng_state = 12345;
static unsigned rnd(unsigned m) {
    rng_state = rng_state * 1103515245u + 12345u;
    return (rng_state >> 8) % m;
}

/* the split threadpool_run documents: part i of `parts` contiguous ranges */
static int expected_owner(size_t n, int parts, size_t i) {
    size_t q = n / (size_t)parts, r = n % (size_t)parts;
    for (int t = 0; t < parts; t++) {
        size_t b = (size_t)t * q + ((size_t)t < r ? (size_t)t : r), e = b + q + ((size_t)t < r);
        if (i >= b && i < e) return t;
    }
    return -1;
}

static void pause_us(long us) {
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static int run_and_check(threadpool *tp, cover_ctx *c, size_t n, size_t min_per) {
    int threads = threadpool_size(tp);
    size_t mp = min_per < 1 ? 1 : min_per;
    size_t want = (n + mp - 1) / mp;
    int active = want < (size_t)threads ? (int)want : threads;
    if (active < 1) active = 1;
    memset(c->hits, 0, sizeof c->hits);
    memset(c->owner, -1, sizeof c->owner);
    c->n = n;
    c->n_active = active;
    threadpool_run(tp, n, min_per, cover, c);
    int ok = !atomic_load(&c->bad);
    for (size_t i = 0; i < MAX_N; i++) {
        if (c->hits[i] != (i < n ? 1 : 0)) ok = 0;
        if (i < n && c->owner[i] != expected_owner(n, active, i)) ok = 0;
    }
    return ok;
}

/* the chunked form: ranges are claimed at run time, so only coverage and chunk
 * bounds are fixed (with one active thread: one call for the whole range) */
static size_t g_chunk;
static void cover_chunk(void *p, size_t b, size_t e, int thread) {
    cover_ctx *c = p;
    /* one active thread runs [0, n) in one call */
    int whole = c->n_active == 1 && b == 0 && e == c->n;
    if (b >= e || e > c->n || thread < 0 || thread >= c->n_active ||
        (!whole && (b % g_chunk || e - b > g_chunk || (e - b < g_chunk && e != c->n))))
        atomic_store(&c->bad, 1);
    for (size_t i = b; i < e && i < MAX_N; i++) {
        c->hits[i]++;
        c->owner[i] = thread;
    }
}

static int run_chunked_and_check(threadpool *tp, cover_ctx *c, size_t n, size_t min_per, size_t chunk) {
    int threads = threadpool_size(tp);
    size_t mp = min_per < 1 ? 1 : min_per;
    size_t want = (n + mp - 1) / mp;
    int active = want < (size_t)threads ? (int)want : threads;
    memset(c->hits, 0, sizeof c->hits);
    c->n = n;
    c->n_active = active < 1 ? 1 : active;
    g_chunk = chunk ? chunk : 1;
    threadpool_run_chunked(tp, n, min_per, chunk, cover_chunk, c);
    int ok = !atomic_load(&c->bad);
    for (size_t i = 0; i < MAX_N; i++)
        if (c->hits[i] != (i < n ? 1 : 0)) ok = 0;
    return ok;
}

/* thread 1 stalls in its first chunk: thread 0 must take (nearly) all the others */
static _Atomic int stalled;
static void stall_one(void *p, size_t b, size_t e, int thread) {
    cover_ctx *c = p;
    if (thread == 1 && !atomic_exchange(&stalled, 1)) pause_us(30000);
    for (size_t i = b; i < e; i++) {
        c->hits[i]++;
        c->owner[i] = thread;
    }
}

int main(void) {
    size_t before = xllm_allocated_bytes();
    cover_ctx *c = mem_calloc(1, sizeof *c);
    CHECK(c != NULL);

    /* churn: random sizes on pools of 1..6 threads (more than the CPUs too) */
    for (int threads = 1; threads <= 6; threads++) {
        threadpool *tp = threadpool_create(threads);
        CHECK(tp && threadpool_size(tp) == threads);
        int ok = 1;
        for (int rep = 0; rep < 3000; rep++) {
            size_t n = rnd(MAX_N + 1);
            size_t min_per = rnd(4) == 0 ? 0 : 1 + rnd(rnd(2) ? 8 : 200);
            ok &= run_and_check(tp, c, n, min_per);
            /* now and then let the workers go to sleep before the next region */
            if (rnd(300) == 0) pause_us(1000 + rnd(2000));
        }
        CHECK(ok);
        threadpool_free(tp);
    }

    /* chunked: random sizes and chunk sizes on pools of 1..6 threads */
    for (int threads = 1; threads <= 6; threads++) {
        threadpool *tp = threadpool_create(threads);
        CHECK(tp != NULL);
        int ok = 1;
        for (int rep = 0; rep < 2000; rep++) {
            size_t n = rnd(MAX_N + 1);
            size_t min_per = rnd(4) == 0 ? 0 : 1 + rnd(rnd(2) ? 8 : 200);
            ok &= run_chunked_and_check(tp, c, n, min_per, rnd(5) == 0 ? 0 : 1 + rnd(rnd(2) ? 4 : 100));
            /* static and chunked regions interleave on the same pool */
            if (rep % 7 == 0) ok &= run_and_check(tp, c, rnd(MAX_N + 1), 1 + rnd(50));
        }
        CHECK(ok);
        threadpool_free(tp);
    }
    {
        threadpool *tp = threadpool_create(2);
        CHECK(tp != NULL);
        memset(c->hits, 0, sizeof c->hits);
        memset(c->owner, -1, sizeof c->owner);
        threadpool_run_chunked(tp, 200, 1, 1, stall_one, c);
        int ok = 1, by0 = 0;
        for (size_t i = 0; i < 200; i++) {
            ok &= c->hits[i] == 1;
            by0 += c->owner[i] == 0;
        }
        CHECK(ok);
        CHECK(by0 >= 190); /* thread 1 did at most its stalled chunk and a few before it */
        threadpool_free(tp);
    }

    /* sleeping workers: a short spin budget makes them sleep between regions */
    setenv("XLLM_THREADPOOL_SPIN_US", "0", 1);
    {
        threadpool *tp = threadpool_create(4);
        CHECK(tp != NULL);
        int ok = 1;
        for (int rep = 0; rep < 400; rep++) {
            ok &= run_and_check(tp, c, 1 + rnd(MAX_N), 1 + rnd(3) * rnd(100));
            if (rep % 4 == 0) pause_us(50 + rnd(200));
        }
        CHECK(ok);
        threadpool_free(tp);
    }
    unsetenv("XLLM_THREADPOOL_SPIN_US");

    /* create/free cycles: idle, right after one region, after a sleep */
    for (int cycle = 0; cycle < 150; cycle++) {
        threadpool *tp = threadpool_create(1 + (int)rnd(5));
        CHECK(tp != NULL);
        int kind = cycle % 3;
        if (kind >= 1) CHECK(run_and_check(tp, c, 1 + rnd(MAX_N), 1));
        if (kind == 2 && cycle % 15 == 2) pause_us(2000);
        threadpool_free(tp);
    }

    xllm_free(c);
    CHECK(xllm_allocated_bytes() == before);
    return test_report("test_threadpool_stress");
}
