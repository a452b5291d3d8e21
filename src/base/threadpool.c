/*
 * threadpool.c - persistent workers, each with its own doorbell.
 *
 * Every worker owns a cache line (`slot`) holding a sequence number `go` that
 * only the dispatcher writes: it is bumped by one each time that worker is given
 * a range, so a worker never misses or confuses a job (no shared generation
 * that could wrap around while a worker is left out of many regions). A region
 * with n_active threads touches only workers 1..n_active-1: the dispatcher
 * publishes (fn, ctx, n, n_active) and pending = n_active - 1, bumps those
 * workers' `go`, wakes only the ones that are asleep, runs range 0 itself, then
 * waits for `pending` to reach 0. Workers run their range and then decrement
 * `pending`; the job fields are not rewritten before that, and workers outside
 * the region never read them.
 *
 * Waiting (a worker for its next job, the caller for the join): spin on the
 * word with PAUSE for a short while, then keep spinning with sched_yield()
 * between checks (an oversubscribed machine runs whoever we are waiting for)
 * until a time budget runs out, then sleep on a futex (Linux) or a condition
 * variable (elsewhere). Sleeping and waking use the "announce, then re-check"
 * handshake (Dekker, all sequentially consistent): the waiter sets its
 * `sleeping` flag and re-reads the word before it sleeps; the waker changes the
 * word and then reads the flag, so at least one of them sees the other and no
 * wake-up is lost. The futex wait itself also re-checks the word in the kernel.
 *
 * The budget is XLLM_THREADPOOL_SPIN_US (microseconds, read at creation;
 * default SPIN_US_DEFAULT): long enough to cover the gaps between the regions
 * of a decode step, short enough that idle workers stop using CPU soon.
 */
#include "base/threadpool.h"
#include "base/alloc.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield" ::: "memory")
#else
#define CPU_RELAX() ((void)0)
#endif

#if defined(__linux__) && !defined(XLLM_THREADPOOL_NO_FUTEX)
#define TP_FUTEX 1
#include <sys/syscall.h>
#ifndef FUTEX_WAIT
#define FUTEX_WAIT 0
#endif
#ifndef FUTEX_WAKE
#define FUTEX_WAKE 1
#endif
#ifndef FUTEX_PRIVATE_FLAG
#define FUTEX_PRIVATE_FLAG 128
#endif
#else
#define TP_FUTEX 0
#endif

#define SPIN_US_DEFAULT 200
#define PURE_SPINS 32  /* PAUSEs before the first sched_yield (~2 us on Zen 4) */
#define YIELD_EVERY 16 /* PAUSEs between sched_yields afterwards */
#define CACHE_LINE 64

typedef struct {
    _Alignas(CACHE_LINE) _Atomic uint32_t go; /* job sequence of this worker; written by the dispatcher */
    _Atomic uint32_t sleeping;                /* the worker is (about to be) asleep on `go` */
    threadpool *tp;
    int index;
    pthread_t thread;
    int started;
} slot;

struct threadpool {
    /* the job: written by the dispatcher before it bumps the workers' `go`,
     * read by the active workers before they decrement `pending` */
    _Alignas(CACHE_LINE) threadpool_fn fn;
    void *ctx;
    size_t n;
    size_t chunk; /* 0: one fixed range per thread; else items are claimed `chunk` at a time from `next` */
    int n_active;
    int n_threads;
    long spin_ns;
    slot *slots; /* [n_threads]; slot 0 unused (the caller) */
    _Atomic int stop;
    /* the join: decremented by each active worker, waited on by the caller */
    _Alignas(CACHE_LINE) _Atomic uint32_t pending;
    _Atomic uint32_t main_sleeping;
    /* the next unclaimed item of a chunked job */
    _Alignas(CACHE_LINE) _Atomic size_t next;
#if !TP_FUTEX
    pthread_mutex_t mu;
    pthread_cond_t cv;
#endif
};

_Static_assert(sizeof(slot) == CACHE_LINE, "one worker slot per cache line");

/* ---- blocking on a 32-bit word ---- */

#if TP_FUTEX
static void word_wait(threadpool *tp, _Atomic uint32_t *w, uint32_t v) {
    (void)tp;
    /* returns at once if *w != v; spurious returns are fine, callers loop */
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT | FUTEX_PRIVATE_FLAG, v, NULL, NULL, 0);
}
static void word_wake(threadpool *tp, _Atomic uint32_t *w) {
    (void)tp;
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, INT32_MAX, NULL, NULL, 0);
}
#else
static void word_wait(threadpool *tp, _Atomic uint32_t *w, uint32_t v) {
    pthread_mutex_lock(&tp->mu);
    if (atomic_load(w) == v) pthread_cond_wait(&tp->cv, &tp->mu);
    pthread_mutex_unlock(&tp->mu);
}
static void word_wake(threadpool *tp, _Atomic uint32_t *w) {
    (void)w;
    pthread_mutex_lock(&tp->mu);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
}
#endif

static long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* Spin until *w != v or the budget is spent; nonzero when it changed. */
static int spin_until_changed(const _Atomic uint32_t *w, uint32_t v, long budget_ns) {
    for (int i = 0; i < PURE_SPINS; i++) {
        if (atomic_load_explicit(w, memory_order_acquire) != v) return 1;
        CPU_RELAX();
    }
    if (budget_ns <= 0) return 0;
    long start = now_ns();
    for (;;) {
        for (int i = 0; i < YIELD_EVERY; i++) {
            if (atomic_load_explicit(w, memory_order_acquire) != v) return 1;
            CPU_RELAX();
        }
        if (now_ns() - start >= budget_ns) return 0;
        sched_yield();
    }
}

/* Return once *w != v: spin, then sleep with the `sleeping` handshake. */
static void wait_changed(threadpool *tp, _Atomic uint32_t *w, uint32_t v, _Atomic uint32_t *sleeping) {
    if (spin_until_changed(w, v, tp->spin_ns)) return;
    for (;;) {
        atomic_store(sleeping, 1);
        if (atomic_load(w) != v) break;
        word_wait(tp, w, v);
        if (atomic_load(w) != v) break;
    }
    atomic_store_explicit(sleeping, 0, memory_order_relaxed);
    /* the caller re-reads the word with acquire before it reads the job */
}

static void range_of(size_t n, int parts, int i, size_t *b, size_t *e) {
    size_t q = n / (size_t)parts, r = n % (size_t)parts;
    *b = (size_t)i * q + ((size_t)i < r ? (size_t)i : r);
    *e = *b + q + ((size_t)i < r);
}

/* This thread's share of the job: its fixed range, or chunks claimed until none is left. */
static void run_share(threadpool *tp, int index) {
    if (!tp->chunk) {
        size_t b, e;
        range_of(tp->n, tp->n_active, index, &b, &e);
        if (b < e) tp->fn(tp->ctx, b, e, index);
        return;
    }
    for (;;) {
        size_t b = atomic_fetch_add_explicit(&tp->next, tp->chunk, memory_order_relaxed);
        if (b >= tp->n) return;
        size_t e = tp->n - b < tp->chunk ? tp->n : b + tp->chunk;
        tp->fn(tp->ctx, b, e, index);
    }
}

static void *worker_main(void *p) {
    slot *s = p;
    threadpool *tp = s->tp;
    int index = s->index;
    uint32_t seen = 0;
    for (;;) {
        wait_changed(tp, &s->go, seen, &s->sleeping);
        seen = atomic_load_explicit(&s->go, memory_order_acquire);
        if (atomic_load_explicit(&tp->stop, memory_order_relaxed)) return NULL;
        run_share(tp, index);
        /* the last one out wakes the caller if it went to sleep; tp stays
         * valid here even if the caller has returned: threadpool_free joins
         * this thread before freeing it */
        if (atomic_fetch_sub(&tp->pending, 1) == 1 && atomic_load(&tp->main_sleeping))
            word_wake(tp, &tp->pending);
    }
}

threadpool *threadpool_create(int n_threads) {
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    if (n_threads > 256) n_threads = 256;
    threadpool *tp = mem_malloc_aligned(sizeof *tp);
    if (!tp) return NULL;
    *tp = (threadpool){0};
    tp->n_threads = n_threads;
    long spin_us = SPIN_US_DEFAULT;
    const char *env = getenv("XLLM_THREADPOOL_SPIN_US");
    if (env && *env) {
        spin_us = atol(env);
        if (spin_us < 0) spin_us = 0;
        if (spin_us > 1000000) spin_us = 1000000;
    }
    tp->spin_ns = spin_us * 1000;
#if !TP_FUTEX
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv, NULL);
#endif
    tp->slots = mem_malloc_aligned((size_t)n_threads * sizeof(slot));
    if (!tp->slots) {
        threadpool_free(tp);
        return NULL;
    }
    for (int i = 0; i < n_threads; i++) {
        tp->slots[i] = (slot){0};
        tp->slots[i].tp = tp;
        tp->slots[i].index = i;
    }
    for (int i = 1; i < n_threads; i++) {
        if (pthread_create(&tp->slots[i].thread, NULL, worker_main, &tp->slots[i]) != 0) {
            threadpool_free(tp);
            return NULL;
        }
        tp->slots[i].started = 1;
    }
    return tp;
}

void threadpool_free(threadpool *tp) {
    if (!tp) return;
    if (tp->slots) {
        atomic_store(&tp->stop, 1);
        for (int i = 1; i < tp->n_threads; i++) {
            slot *s = &tp->slots[i];
            if (!s->started) continue;
            atomic_fetch_add(&s->go, 1);
            word_wake(tp, &s->go); /* unconditionally: it may be on its way to sleep */
        }
        for (int i = 1; i < tp->n_threads; i++)
            if (tp->slots[i].started) pthread_join(tp->slots[i].thread, NULL);
        mem_free_aligned(tp->slots);
    }
#if !TP_FUTEX
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv);
#endif
    mem_free_aligned(tp);
}

int threadpool_size(const threadpool *tp) { return tp->n_threads; }

static void run_job(threadpool *tp, size_t n, size_t min_per_thread, size_t chunk, threadpool_fn fn, void *ctx) {
    if (n == 0) return;
    if (min_per_thread < 1) min_per_thread = 1;
    size_t want = (n + min_per_thread - 1) / min_per_thread;
    int active = want < (size_t)tp->n_threads ? (int)want : tp->n_threads;
    if (active <= 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    tp->fn = fn;
    tp->ctx = ctx;
    tp->n = n;
    tp->chunk = chunk;
    atomic_store_explicit(&tp->next, 0, memory_order_relaxed);
    tp->n_active = active;
    atomic_store_explicit(&tp->pending, (uint32_t)(active - 1), memory_order_relaxed);
    /* bump first (spinning workers start at once), then wake the sleepers */
    for (int i = 1; i < active; i++) atomic_fetch_add(&tp->slots[i].go, 1);
    for (int i = 1; i < active; i++)
        if (atomic_load(&tp->slots[i].sleeping)) word_wake(tp, &tp->slots[i].go);
    run_share(tp, 0);
    uint32_t left = atomic_load_explicit(&tp->pending, memory_order_acquire);
    if (left == 0) return;
    /* wait on whatever count is left: the word changes on every decrement */
    while (left != 0) {
        if (!spin_until_changed(&tp->pending, left, tp->spin_ns)) {
            atomic_store(&tp->main_sleeping, 1);
            if (atomic_load(&tp->pending) == left) word_wait(tp, &tp->pending, left);
            atomic_store_explicit(&tp->main_sleeping, 0, memory_order_relaxed);
        }
        left = atomic_load_explicit(&tp->pending, memory_order_acquire);
    }
}

void threadpool_run(threadpool *tp, size_t n, size_t min_per_thread, threadpool_fn fn, void *ctx) {
    run_job(tp, n, min_per_thread, 0, fn, ctx);
}

void threadpool_run_chunked(threadpool *tp, size_t n, size_t min_per_thread, size_t chunk, threadpool_fn fn,
                            void *ctx) {
    run_job(tp, n, min_per_thread, chunk ? chunk : 1, fn, ctx);
}
