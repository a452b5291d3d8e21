/*
 * bench_threadpool.c - dispatch + join overhead of threadpool_run per parallel
 * region, with a naive pthread create/join per region as the reference.
 *
 *   bench_threadpool [--max-threads N] [--time SECONDS] [--only pool|naive]
 *
 * For 1..N threads (default: twice the online CPUs, at most 8, so an
 * oversubscribed count is included), each work size and each gap:
 *   work  empty: fn does nothing on n = 1024 items (pure dispatch + join);
 *         tiny:  n = 64 items of ~40 ns each (a small decode matmul's worth);
 *   gap   0: regions back to back; busy20 / busy200: the caller computes for
 *         20 / 200 us between regions (a decode step's single-threaded work);
 *         sleep1000: the caller sleeps 1 ms (workers go to sleep; cold wake-up).
 * Prints per region: mean, median and 99th percentile ns of the threadpool_run
 * call alone, regions/s of the whole loop (gaps included), and cpu = process
 * CPU seconds / wall seconds (how many cores the loop kept busy: spinning
 * workers show as cpu near the thread count even with long gaps).
 * Figures only; the machine may be shared and noisy: compare within one run.
 */
#include "base/threadpool.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

/* ---- the work ---- */

typedef struct {
    int iters;                 /* per item */
    volatile unsigned sink[64 * 16]; /* one line per thread index */
} work_ctx;

static void work_fn(void *p, size_t b, size_t e, int thread) {
    work_ctx *w = p;
    if (w->iters == 0) return;
    unsigned x = (unsigned)b * 2654435761u + 1;
    for (size_t i = b; i < e; i++)
        for (int k = 0; k < w->iters; k++) x = x * 1664525u + 1013904223u;
    w->sink[(thread & 63) * 16] = x;
}

static void busy_for(double seconds) {
    double end = now() + seconds;
    while (now() < end) {
    }
}

/* ---- naive reference: create and join threads per region ---- */

typedef struct {
    threadpool_fn fn;
    void *ctx;
    size_t b, e;
    int index;
} naive_arg;

static void *naive_main(void *p) {
    naive_arg *a = p;
    a->fn(a->ctx, a->b, a->e, a->index);
    return NULL;
}

static void naive_run(int n_threads, size_t n, threadpool_fn fn, void *ctx) {
    pthread_t th[16];
    naive_arg args[16];
    int parts = n_threads < (int)n ? n_threads : (int)n;
    size_t q = n / (size_t)parts, r = n % (size_t)parts;
    for (int i = 0; i < parts; i++) {
        args[i].fn = fn;
        args[i].ctx = ctx;
        args[i].b = (size_t)i * q + ((size_t)i < r ? (size_t)i : r);
        args[i].e = args[i].b + q + ((size_t)i < r);
        args[i].index = i;
    }
    for (int i = 1; i < parts; i++) pthread_create(&th[i], NULL, naive_main, &args[i]);
    naive_main(&args[0]);
    for (int i = 1; i < parts; i++) pthread_join(th[i], NULL);
}

/* ---- measurement ---- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum { GAP_NONE, GAP_BUSY, GAP_SLEEP };
typedef struct {
    const char *name;
    int kind;
    double seconds;
} gap_t;

#define MAX_SAMPLES 400000

static double *g_samples;

static void measure(const char *impl, threadpool *tp, int n_threads, const char *work_name, size_t n, work_ctx *w,
                    const gap_t *gap, double budget) {
    /* warm up (and let workers settle into their steady state) */
    for (int i = 0; i < 50; i++) {
        if (tp) threadpool_run(tp, n, 1, work_fn, w);
        else naive_run(n_threads, n, work_fn, w);
    }
    int count = 0;
    double wall0 = now(), cpu0 = cpu_seconds();
    while (count < MAX_SAMPLES && (now() - wall0 < budget || count < 20)) {
        if (gap->kind == GAP_BUSY) busy_for(gap->seconds);
        else if (gap->kind == GAP_SLEEP) {
            struct timespec ts = {0, (long)(gap->seconds * 1e9)};
            nanosleep(&ts, NULL);
        }
        double t0 = now();
        if (tp) threadpool_run(tp, n, 1, work_fn, w);
        else naive_run(n_threads, n, work_fn, w);
        g_samples[count++] = now() - t0;
    }
    double wall = now() - wall0, cpu = cpu_seconds() - cpu0;
    double sum = 0;
    for (int i = 0; i < count; i++) sum += g_samples[i];
    qsort(g_samples, (size_t)count, sizeof *g_samples, cmp_double);
    double p50 = g_samples[count / 2], p99 = g_samples[(size_t)((double)count * 0.99)];
    printf("%-6s %7d  %-5s  %-9s  %10.0f %10.0f %10.0f  %11.0f  %5.2f\n", impl, n_threads, work_name, gap->name,
           1e9 * sum / count, 1e9 * p50, 1e9 * p99, count / wall, cpu / wall);
    fflush(stdout);
}

int main(int argc, char **argv) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int max_threads = ncpu > 0 ? (int)(2 * ncpu) : 2;
    if (max_threads > 8) max_threads = 8;
    double budget = 0.25;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--max-threads") && i + 1 < argc) max_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--time") && i + 1 < argc) budget = atof(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--max-threads N] [--time SECONDS] [--only pool|naive]\n", argv[0]);
            return 2;
        }
    }
    if (max_threads < 1) max_threads = 1;
    if (max_threads > 16) max_threads = 16;
    g_samples = malloc(MAX_SAMPLES * sizeof *g_samples);
    work_ctx *w = calloc(1, sizeof *w);
    if (!g_samples || !w) return 1;

    static const gap_t gaps[] = {
        {"0", GAP_NONE, 0}, {"busy20", GAP_BUSY, 20e-6}, {"busy200", GAP_BUSY, 200e-6}, {"sleep1000", GAP_SLEEP, 1e-3}};
    struct {
        const char *name;
        size_t n;
        int iters;
    } works[] = {{"empty", 1024, 0}, {"tiny", 64, 16}};

    printf("online CPUs: %ld; %.2f s per case; times are ns per threadpool_run call\n", ncpu, budget);
    printf("%-6s %7s  %-5s  %-9s  %10s %10s %10s  %11s  %5s\n", "impl", "threads", "work", "gap", "mean_ns", "p50_ns",
           "p99_ns", "regions/s", "cpu");
    for (int t = 1; t <= max_threads; t++) {
        if (!only || !strcmp(only, "pool")) {
            threadpool *tp = threadpool_create(t);
            if (!tp) return 1;
            for (size_t wi = 0; wi < sizeof works / sizeof works[0]; wi++)
                for (size_t gi = 0; gi < sizeof gaps / sizeof gaps[0]; gi++) {
                    w->iters = works[wi].iters;
                    measure("pool", tp, t, works[wi].name, works[wi].n, w, &gaps[gi], budget);
                }
            threadpool_free(tp);
        }
        if (!only || !strcmp(only, "naive")) {
            for (size_t wi = 0; wi < sizeof works / sizeof works[0]; wi++)
                for (size_t gi = 0; gi < sizeof gaps / sizeof gaps[0]; gi += 2) { /* 0 and busy200 */
                    w->iters = works[wi].iters;
                    measure("naive", NULL, t, works[wi].name, works[wi].n, w, &gaps[gi], budget);
                }
        }
    }
    free(w);
    free(g_samples);
    return 0;
}
