/*
 * threadpool.h - a persistent pool of worker threads for parallel loops.
 *
 * Workers are created once and sleep between jobs; threadpool_run splits
 * [0, n) statically into one contiguous range per thread (the caller's thread
 * takes range 0), so the same inputs always give the same split and the same
 * floating-point results. Jobs are short (one matmul, one attention), so
 * workers spin briefly before sleeping to keep wake-up latency low: PAUSE for
 * a couple of microseconds, then PAUSE with sched_yield() in between (so an
 * oversubscribed machine runs the thread being waited for) until a budget runs
 * out, then a futex (condition variable off Linux). The budget is
 * XLLM_THREADPOOL_SPIN_US microseconds (read at creation; default 200).
 * A region that needs k threads involves only workers 1..k-1.
 */
#ifndef XLLM_BASE_THREADPOOL_H
#define XLLM_BASE_THREADPOOL_H

#include <stddef.h>

typedef struct threadpool threadpool;

/* fn(ctx, begin, end, thread_index) processes items [begin, end). */
typedef void (*threadpool_fn)(void *ctx, size_t begin, size_t end, int thread_index);

/* n_threads <= 0: number of online CPUs. NULL on failure. */
threadpool *threadpool_create(int n_threads);
void threadpool_free(threadpool *tp);
int threadpool_size(const threadpool *tp);
/* Run fn over [0, n) on all threads; returns when every range is done.
 * min_per_thread: do not give a thread fewer items than this (small jobs run
 * on fewer threads). Not reentrant: call from one thread at a time. */
void threadpool_run(threadpool *tp, size_t n, size_t min_per_thread, threadpool_fn fn, void *ctx);
/* The same, but the active threads claim [0, n) `chunk` items at a time from a
 * shared counter until none is left, so a thread that a neighbour slows down
 * (another process on its core) does less of the work instead of holding up
 * the region. fn may be called several times per thread, with ranges that
 * depend on timing: use it only where each item's result does not depend on
 * which thread computes it or on the range it comes in (row tiles of a matmul).
 * Same threading rules as threadpool_run. */
void threadpool_run_chunked(threadpool *tp, size_t n, size_t min_per_thread, size_t chunk, threadpool_fn fn,
                            void *ctx);

#endif
