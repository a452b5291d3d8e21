/*
 * planner.c - the CPU backend's "pre-execution analyzer": at model load, a
 * short measurement chooses how each weight shape is run per batch-size
 * bucket (backend_ops.plan).
 *
 * For every distinct matrix shape and type of the model and every bucket
 * (T = 1, 2-8, 9-64, > 64) it times the level's matmul with each thread
 * count on a slice of the rows and keeps the fastest in the matrix's
 * plan_threads, then the level's kernel variants at that count
 * (plan_kernel); the thread split and the variants never change results, so
 * plans cannot change outputs. The attention strategy is chosen per step
 * from the batch's make-up (cpu_attention_strategy). `xllm info --plan`
 * prints it all.
 */
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/plan_cache.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/profile.h"
#include "quant/quant.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define SLICE_ROWS 1024   /* rows measured per shape: enough to load every thread */
#define MAX_MATS 4096

static const int k_bucket_T[MM_BUCKETS] = {1, 4, 32, 128};

/* A measured alternative replaces the default rule only when it is faster
 * than PLAN_MARGIN x the default in each of PLAN_ROUNDS alternating rounds. */
#define PLAN_ROUNDS 3
#define PLAN_MARGIN 0.85

/* A decode step (T = 1) streams every matrix from memory, where each thread
 * adds bandwidth, but the slice above is timed from cache, where one thread
 * can look as fast as two: Q5_K's gate/up (5632x2048) was once planned on one
 * thread, and TinyLlama Q5_K_S decoded at 0.33 of the bandwidth bound instead
 * of ~0.8. So at T = 1 a matrix of at least STREAM_BYTES never gets fewer
 * threads than the pool has, whatever the slice measured or the cache holds. */
#define STREAM_BYTES (1u << 20)
/* The fewest threads a plan may give w at a batch of T tokens. */
static int least_threads(const cpu_backend *be, const matrix *w, int T) {
    int streams = (double)quant_row_bytes(w->dtype, w->group, w->cols) * (double)w->rows >= (double)STREAM_BYTES;
    return T == 1 && streams ? be->n_threads : 1;
}

/* Plans go to the plan cache only when they were measured on CPUs the
 * process had to itself. On a shared host one thread can beat two in every
 * round (the other CPU is busy): that plan is right for this run but must not
 * be reused by every later one. The probe: every pool thread spins for
 * PROBE_MS of wall time and reads its own CPU time; the share is the least
 * CPU / wall over the threads, taken before and after the measurements (the
 * smaller counts). PROBE_MS spans several scheduler time slices: a shorter
 * window can fall inside one slice and see a busy CPU as free. */
#define PLAN_MIN_CPU_SHARE 0.75
#define PROBE_MS 20

static double now_s(clockid_t c) {
    struct timespec ts;
    if (clock_gettime(c, &ts)) return 0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    double share[256];
} probe_ctx;

static void probe_thread(void *ctx, size_t begin, size_t end, int thread_index) {
    (void)begin, (void)end;
    probe_ctx *p = ctx;
    double w0 = now_s(CLOCK_MONOTONIC), c0 = now_s(CLOCK_THREAD_CPUTIME_ID), w = 0;
    while ((w = now_s(CLOCK_MONOTONIC) - w0) < PROBE_MS * 1e-3) {
    }
    if (thread_index >= 0 && thread_index < 256) p->share[thread_index] = (now_s(CLOCK_THREAD_CPUTIME_ID) - c0) / w;
}

/* The least share of its CPU any pool thread got over PROBE_MS. */
static double cpu_share_probe(cpu_backend *be) {
    int n = be->n_threads < 256 ? be->n_threads : 256;
    probe_ctx p;
    for (int i = 0; i < 256; i++) p.share[i] = 1.0;
    threadpool_run(be->tp, (size_t)n, 1, probe_thread, &p);
    double least = 1.0;
    for (int i = 0; i < n; i++) least = p.share[i] < least ? p.share[i] : least;
    return least;
}

/* The report is best effort: out of memory, an item that cannot be attached
 * (or whose parent could not be made) is freed rather than lost. */
static void add_item(cJSON *array, cJSON *item) {
    if (item && !cJSON_AddItemToArray(array, item)) cJSON_Delete(item);
}

static double median3(const double *t) {
    double a = t[0], b = t[1], c = t[2];
    return a < b ? (b < c ? b : a < c ? c : a) : (a < c ? a : b < c ? c : b);
}

static int same_shape(const matrix *a, const matrix *b) {
    return a->dtype == b->dtype && a->group == b->group && a->rows == b->rows && a->cols == b->cols;
}

/* Best of reps timings (µs) after one warm-up call. */
static double time_matmul(cpu_backend *be, const matrix *w, const float *x, int T, float *y, int reps) {
    op_matmul(be, x, T, w, NULL, y);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = prof_now_ns();
        op_matmul(be, x, T, w, NULL, y);
        double dt = (double)(prof_now_ns() - t0) / 1e3;
        if (dt < best) best = dt;
    }
    return best;
}

xllm_status cpu_planner_run(cpu_backend *be, matrix *const *ws, size_t n_ws, int max_tokens, int budget_ms,
                            cJSON **report, xllm_error *err) {
    *report = NULL;
    /* the matrices with data, at most MAX_MATS (the rest keep the default rule) */
    struct {
        matrix *m[MAX_MATS];
        int n;
    } *l = mem_calloc(1, sizeof *l);
    if (!l) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    for (size_t i = 0; i < n_ws; i++)
        if (ws[i] && ws[i]->data && l->n < MAX_MATS) l->m[l->n++] = ws[i];

    int maxT = k_bucket_T[MM_BUCKETS - 1] < max_tokens ? k_bucket_T[MM_BUCKETS - 1] : max_tokens;
    int64_t max_cols = 0;
    for (int i = 0; i < l->n; i++) max_cols = l->m[i]->cols > max_cols ? l->m[i]->cols : max_cols;
    float *x = mem_malloc_array((size_t)maxT * (size_t)max_cols, sizeof(float));
    float *y = mem_malloc_array((size_t)maxT * SLICE_ROWS, sizeof(float));
    uint8_t *done = mem_calloc((size_t)l->n + 1, 1);
    int *plans_to_save = mem_calloc((size_t)l->n + 1, sizeof(int)), n_to_save = 0;
    if (!x || !y || !done || !plans_to_save) {
        xllm_free(plans_to_save);
        xllm_free(x);
        xllm_free(y);
        xllm_free(done);
        xllm_free(l);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory for planning");
    }
    unsigned seed = 12345;
    for (size_t i = 0; i < (size_t)maxT * (size_t)max_cols; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((int)(seed >> 9) % 2001 - 1000) * 1e-3f;
    }

    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "kernel_level", backend_level_name(be));
    cJSON_AddNumberToObject(root, "threads", be->n_threads);
    cJSON *shapes = cJSON_AddArrayToObject(root, "matmul");
    uint64_t start = prof_now_ns();
    int over_budget = 0, n_cached = 0, n_saved = 0;
    double share_before = -1; /* probed once something is to be measured */
    plan_cache *pc = plan_cache_open(be->plan_cache);
    if (pc) plan_cache_set_context(pc, backend_level_name(be), be->n_threads, maxT);
    for (int i = 0; i < l->n; i++) {
        if (done[i]) continue;
        matrix *w = l->m[i];
        int count = 0;
        for (int k = i; k < l->n; k++)
            if (!done[k] && same_shape(w, l->m[k])) count++;
        matrix slice = *w;
        if (slice.rows > SLICE_ROWS) slice.rows = SLICE_ROWS;
        cJSON *o = cJSON_CreateObject();
        char shape[64], tname[16];
        snprintf(shape, sizeof shape, "%lldx%lld", (long long)w->rows, (long long)w->cols);
        snprintf(tname, sizeof tname, "%s", dtype_name(w->dtype));
        cJSON_AddStringToObject(o, "shape", shape);
        cJSON_AddStringToObject(o, "type", tname);
        if (dtype_is_quant(w->dtype)) cJSON_AddNumberToObject(o, "group", w->group);
        cJSON_AddNumberToObject(o, "matrices", count);
        cJSON *buckets = cJSON_AddArrayToObject(o, "buckets");
        uint8_t best_threads[MM_BUCKETS] = {0}, best_kernel[MM_BUCKETS] = {0};
        /* measured on this machine before (plan_cache.h): reused as it is */
        int cached = plan_cache_get(pc, w, best_threads, best_kernel), complete = 1;
        for (int b = 0; b < MM_BUCKETS && cached; b++)
            if (best_threads[b] > be->n_threads || best_kernel[b] > be->kern->n_variants) cached = 0;
        if (!cached) memset(best_threads, 0, sizeof best_threads), memset(best_kernel, 0, sizeof best_kernel);
        for (int b = 0; b < MM_BUCKETS && cached; b++) /* a plan cached before the T = 1 rule above */
            if (best_threads[b] && best_threads[b] < least_threads(be, w, k_bucket_T[b])) best_threads[b] = 0;
        if (cached) {
            n_cached++;
            cJSON_AddBoolToObject(o, "cached", 1);
        }
        for (int b = 0; b < MM_BUCKETS; b++) {
            int T = k_bucket_T[b] < maxT ? k_bucket_T[b] : maxT;
            cJSON *bo = cJSON_CreateObject();
            cJSON_AddNumberToObject(bo, "T", T);
            if (cached) {
                cJSON_AddNumberToObject(bo, "threads", best_threads[b]);
                if (best_kernel[b]) cJSON_AddStringToObject(bo, "kernel", be->kern->variant_names[best_kernel[b] - 1]);
                add_item(buckets, bo);
                continue;
            }
            if (share_before < 0 && pc) share_before = cpu_share_probe(be);
            if (over_budget || (prof_now_ns() - start) / 1000000 > (uint64_t)budget_ms) {
                over_budget = 1;
                complete = 0;
                cJSON_AddStringToObject(bo, "choice", "default rule (planning budget spent)");
                add_item(buckets, bo);
                continue;
            }
            /* the default rule (plan 0) against each explicit thread count,
             * alternating over PLAN_ROUNDS rounds; an alternative replaces
             * the default only if it is faster by PLAN_MARGIN in every round,
             * so one noisy timing cannot flip a plan */
            cJSON *us = cJSON_AddObjectToObject(bo, "us");
            int n_cand = be->n_threads < 255 ? be->n_threads : 255, least = least_threads(be, w, T);
            double t_def[PLAN_ROUNDS], t_cand[256][PLAN_ROUNDS];
            for (int r = 0; r < PLAN_ROUNDS; r++) {
                memset(slice.plan_threads, 0, sizeof slice.plan_threads);
                t_def[r] = time_matmul(be, &slice, x, T, y, 2);
                for (int th = least; th <= n_cand; th++) {
                    memset(slice.plan_threads, th, sizeof slice.plan_threads);
                    t_cand[th][r] = time_matmul(be, &slice, x, T, y, 2);
                }
            }
            cJSON_AddNumberToObject(us, "default", median3(t_def));
            double best = median3(t_def);
            for (int th = least; th <= n_cand; th++) {
                char key[8];
                snprintf(key, sizeof key, "%d", th);
                cJSON_AddNumberToObject(us, key, median3(t_cand[th]));
                int wins = 1;
                for (int r = 0; r < PLAN_ROUNDS; r++) wins &= t_cand[th][r] < PLAN_MARGIN * t_def[r];
                if (wins && median3(t_cand[th]) < best) {
                    best = median3(t_cand[th]);
                    best_threads[b] = (uint8_t)th;
                }
            }
            cJSON_AddNumberToObject(bo, "threads", best_threads[b]);
            /* then the level's kernel variants at that thread count (packed
             * matrices, batches), by the same rule against the level's own */
            const cpu_kernels *k = be->kern;
            if (w->packed && !dtype_is_kq(w->dtype) && k->n_variants > 0 && T > 1) { /* kq: no variants */
                cJSON *vus = cJSON_AddObjectToObject(bo, "variant_us");
                memset(slice.plan_threads, best_threads[b], sizeof slice.plan_threads);
                double tv[16][PLAN_ROUNDS];
                int nv = k->n_variants < 15 ? k->n_variants : 15;
                for (int r = 0; r < PLAN_ROUNDS; r++)
                    for (int v = 0; v <= nv; v++) {
                        memset(slice.plan_kernel, v, sizeof slice.plan_kernel);
                        tv[v][r] = time_matmul(be, &slice, x, T, y, 2);
                    }
                double vbest = median3(tv[0]);
                for (int v = 0; v <= nv; v++) {
                    cJSON_AddNumberToObject(vus, v ? k->variant_names[v - 1] : "default", median3(tv[v]));
                    int wins = v > 0;
                    for (int r = 0; r < PLAN_ROUNDS && wins; r++) wins &= tv[v][r] < PLAN_MARGIN * tv[0][r];
                    if (wins && median3(tv[v]) < vbest) {
                        vbest = median3(tv[v]);
                        best_kernel[b] = (uint8_t)v;
                    }
                }
                cJSON_AddStringToObject(bo, "kernel", best_kernel[b] ? k->variant_names[best_kernel[b] - 1] : "default");
            }
            add_item(buckets, bo);
        }
        if (!cached && complete) plans_to_save[n_to_save++] = i;
        for (int k = i; k < l->n; k++)
            if (!done[k] && same_shape(w, l->m[k])) {
                memcpy(l->m[k]->plan_threads, best_threads, sizeof best_threads);
                memcpy(l->m[k]->plan_kernel, best_kernel, sizeof best_kernel);
                done[k] = 1;
            }
        add_item(shapes, o);
    }
    /* the measured plans go to the cache only if the CPUs were free before
     * and after the measurements */
    double share = share_before < 0 ? -1 : share_before;
    if (share >= 0) {
        double after = cpu_share_probe(be);
        share = after < share ? after : share;
        cJSON_AddNumberToObject(root, "cpu_share", share);
    }
    if (share >= PLAN_MIN_CPU_SHARE)
        for (int j = 0; j < n_to_save; j++) {
            matrix *w = l->m[plans_to_save[j]];
            plan_cache_put(pc, w, w->plan_threads, w->plan_kernel);
            n_saved++;
        }
    else if (n_to_save)
        cJSON_AddStringToObject(root, "not_cached",
                                "the CPUs were busy with other work while the plan was measured (cpu_share)");
    plan_cache_save(pc);
    plan_cache_close(pc);
    cJSON_AddNumberToObject(root, "planning_ms", (double)(prof_now_ns() - start) / 1e6);
    cJSON_AddStringToObject(root, "plan_cache", be->plan_cache ? be->plan_cache : "");
    cJSON_AddNumberToObject(root, "cached_shapes", n_cached);
    cJSON_AddNumberToObject(root, "saved_shapes", n_saved);
    cJSON_AddStringToObject(root, "cpu", plan_cache_cpu_name());
    cJSON_AddStringToObject(root, "attention",
                            "per step: split-KV (one task per 128-key chunk, then an ordered fold) when (token, "
                            "head) items < 2 x threads and an item has > 128 keys; else shared-KV (the query heads "
                            "of one KV head over a tile of tokens share each K/V load) when groups hold >= 2 "
                            "queries on average and give every thread work; else one task per (token, head). Same "
                            "results whichever runs.");
    xllm_free(x);
    xllm_free(y);
    xllm_free(done);
    xllm_free(plans_to_save);
    xllm_free(l);
    *report = root;
    return XLLM_OK;
}
