/*
 * threadpool.c - persistent workers woken by a job generation counter.
 *
 * The dispatcher publishes (fn, ctx, n, n_active) and bumps `generation`;
 * workers spin on it for a short while, then sleep on a condition variable.
 * Completion is an atomic count of pending workers the dispatcher spins on.
 */
#include "base/threadpool.h"
#include "base/alloc.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

#define SPIN_ITERS 20000

struct threadpool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic unsigned generation;
    _Atomic int pending;
    _Atomic int stop;
    threadpool_fn fn;
    void *ctx;
    size_t n;
    int n_active;
};

typedef struct { threadpool *tp; int index; } worker_arg;

static void range_of(size_t n, int parts, int i, size_t *b, size_t *e) {
    size_t q = n / (size_t)parts, r = n % (size_t)parts;
    *b = (size_t)i * q + ((size_t)i < r ? (size_t)i : r);
    *e = *b + q + ((size_t)i < r);
}

static void *worker_main(void *p) {
    worker_arg *wa = p;
    threadpool *tp = wa->tp;
    int index = wa->index;
    xllm_free(wa);
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&tp->generation, memory_order_acquire)) == seen &&
               !atomic_load(&tp->stop)) {
            if (++spins < SPIN_ITERS) {
                CPU_RELAX();
                continue;
            }
            pthread_mutex_lock(&tp->mu);
            while (atomic_load(&tp->generation) == seen && !atomic_load(&tp->stop))
                pthread_cond_wait(&tp->cv, &tp->mu);
            pthread_mutex_unlock(&tp->mu);
        }
        if (atomic_load(&tp->stop)) return NULL;
        seen = g;
        if (index < tp->n_active) {
            size_t b, e;
            range_of(tp->n, tp->n_active, index, &b, &e);
            if (b < e) tp->fn(tp->ctx, b, e, index);
        }
        atomic_fetch_sub_explicit(&tp->pending, 1, memory_order_acq_rel);
    }
}

threadpool *threadpool_create(int n_threads) {
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    if (n_threads > 256) n_threads = 256;
    threadpool *tp = xllm_calloc(1, sizeof *tp);
    if (!tp) return NULL;
    tp->n_threads = n_threads;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv, NULL);
    tp->threads = xllm_calloc((size_t)n_threads, sizeof(pthread_t));
    if (!tp->threads) {
        threadpool_free(tp);
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = xllm_malloc(sizeof *wa);
        if (!wa) { tp->n_threads = i; threadpool_free(tp); return NULL; }
        wa->tp = tp;
        wa->index = i;
        if (pthread_create(&tp->threads[i], NULL, worker_main, wa) != 0) {
            xllm_free(wa);
            tp->n_threads = i;
            threadpool_free(tp);
            return NULL;
        }
    }
    return tp;
}

void threadpool_free(threadpool *tp) {
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->stop, 1);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 1; i < tp->n_threads; i++)
        if (tp->threads && tp->threads[i]) pthread_join(tp->threads[i], NULL);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv);
    xllm_free(tp->threads);
    xllm_free(tp);
}

int threadpool_size(const threadpool *tp) { return tp->n_threads; }

void threadpool_run(threadpool *tp, size_t n, size_t min_per_thread, threadpool_fn fn, void *ctx) {
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
    tp->n_active = active;
    atomic_store(&tp->pending, tp->n_threads - 1);
    pthread_mutex_lock(&tp->mu);
    atomic_fetch_add_explicit(&tp->generation, 1, memory_order_release);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    size_t b, e;
    range_of(n, active, 0, &b, &e);
    fn(ctx, b, e, 0);
    /* spin briefly, then yield: when the machine is oversubscribed a worker may
     * be waiting for this very core */
    for (int spins = 0; atomic_load_explicit(&tp->pending, memory_order_acquire) > 0; spins++) {
        if (spins < 2000) CPU_RELAX();
        else sched_yield();
    }
}
