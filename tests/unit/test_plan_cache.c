/*
 * test_plan_cache.c - the planner's cache file (src/backend/cpu/plan_cache.h):
 * a plan put is found again after saving and reopening, only under its own
 * key (type, group, layout, shape, and the process context); broken files
 * (malformed JSON, wrong version, out-of-range numbers, over the size cap)
 * are treated as empty; the entry cap holds; a load with a cache measures
 * nothing the second time and gives the same plan; a load whose timings ran
 * on CPUs busy with other threads caches nothing. And the planner's T = 1
 * rule (planner.c, STREAM_BYTES): on 2 threads, a matrix of 1 MiB or more
 * gets every thread at T = 1, whether measured (1 thread is not even tried)
 * or read from a cache entry that says 1 thread; a smaller matrix, and the
 * big one at larger batches, keep what was measured or cached.
 */
#include "test.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/plan_cache.h"
#include "base/alloc.h"
#include "quant/quant.h"
#include "xllm.h"

#include <cjson/cJSON.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

typedef struct {
    int shapes, cached, saved;
    double min_share;
} plan_stats;

static atomic_int g_hog_stop;
static void *hog(void *arg) {
    (void)arg;
    volatile unsigned long x = 0;
    while (!atomic_load(&g_hog_stop)) x++;
    return NULL;
}

static int json_int(const char *s, const char *key) {
    const char *p = strstr(s, key);
    return p ? atoi(p + strlen(key)) : -1;
}

/* Load stories260k on 2 threads with the plan cache at cache_path and read
 * the plan report; with hogs, 2 busy threads per CPU run meanwhile. */
static plan_stats load_and_plan(const char *mpath, const char *cache_path, int hogs) {
    plan_stats st = {-1, -1, -1, -1};
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nh = hogs ? (int)(2 * (ncpu > 0 ? ncpu : 1)) : 0;
    pthread_t th[256];
    if (nh > 256) nh = 256;
    atomic_store(&g_hog_stop, 0);
    for (int i = 0; i < nh; i++)
        if (pthread_create(&th[i], NULL, hog, NULL)) nh = i;
    xllm_model_options mo = xllm_model_options_default();
    mo.n_threads = 2;
    mo.plan_cache = cache_path;
    xllm_error err;
    xllm_model *m = xllm_model_load(mpath, &mo, &err);
    atomic_store(&g_hog_stop, 1);
    for (int i = 0; i < nh; i++) pthread_join(th[i], NULL);
    CHECK_MSG(m != NULL, "%s", err.message);
    if (!m) return st;
    char *plan = NULL;
    CHECK(xllm_model_plan(m, &plan, &err) == XLLM_OK && plan);
    if (plan) {
        st.cached = json_int(plan, "\"cached_shapes\":");
        st.saved = json_int(plan, "\"saved_shapes\":");
        const char *ms = strstr(plan, "\"cpu_share\":");
        st.min_share = ms ? atof(ms + 12) : -1;
        st.shapes = 0;
        for (const char *p = plan; (p = strstr(p, "\"shape\":")); p++) st.shapes++;
        xllm_free(plan);
    }
    xllm_model_free(m);
    return st;
}

/* A rows x cols Q4 (group 32) matrix of random weights, in its stored layout
 * (*data: its bytes, for mem_free_aligned). */
static matrix random_q4(int64_t rows, int64_t cols, unsigned seed, void **data) {
    size_t rb = quant_row_bytes(XLLM_DT_Q4, 32, cols);
    *data = mem_malloc_aligned(rb * (size_t)rows);
    matrix w = {.dtype = XLLM_DT_Q4, .group = 32, .rows = rows, .cols = cols, .data = *data};
    float *row = malloc(sizeof(float) * (size_t)cols);
    CHECK(*data && row);
    for (int64_t r = 0; *data && row && r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
            seed = seed * 1664525u + 1013904223u;
            row[c] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
        }
        quant_quantize_row(XLLM_DT_Q4, 32, row, cols, NULL, (char *)*data + (size_t)r * rb);
    }
    free(row);
    return w;
}

/* The threads op_matmul's row tiles (4 rows each) of w go to at a batch of T:
 * the plan's count, or the default work-size rule's where the plan says 0. */
static size_t threads_used(const cpu_backend *be, const matrix *w, int T) {
    size_t units = (size_t)(w->rows + 3) / 4, per = op_units_per_thread(be, w, T, units, 4);
    size_t n = (units + per - 1) / per;
    return n < (size_t)be->n_threads ? n : (size_t)be->n_threads;
}

/* In the planner's report, the T = 1 bucket of the shape rows x cols: 1 if
 * it timed one thread ("us" has the key "1"), 0 if not, -1 if not found. */
static int measured_one_thread(const cJSON *report, int64_t rows, int64_t cols) {
    char shape[64];
    snprintf(shape, sizeof shape, "%lldx%lld", (long long)rows, (long long)cols);
    const cJSON *o;
    cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(report, "matmul")) {
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(o, "shape");
        if (!cJSON_IsString(sh) || strcmp(sh->valuestring, shape)) continue;
        const cJSON *b0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "buckets"), 0);
        const cJSON *us = cJSON_GetObjectItemCaseSensitive(b0, "us");
        return us ? cJSON_GetObjectItemCaseSensitive(us, "1") != NULL : -1;
    }
    return -1;
}

/* The T = 1 rule of planner.c: a matrix of >= 1 MiB keeps every thread at
 * T = 1 (bucket 0), measured or cached; a smaller one is not forced. */
static void check_decode_rule(const char *dir) {
    enum { MAXT = 4 };
    const int64_t cols = 4096;
    void *big_data, *small_data;
    matrix big = random_q4(512, cols, 1, &big_data), small = random_q4(64, cols, 2, &small_data);
    size_t big_bytes = quant_row_bytes(big.dtype, big.group, cols) * (size_t)big.rows;
    CHECK_MSG(big_bytes >= (1u << 20) && quant_row_bytes(small.dtype, small.group, cols) * (size_t)small.rows < (1u << 20),
              "test matrices: big %zu bytes", big_bytes);
    cpu_backend be;
    xllm_error err;
    CHECK_MSG(backend_init_kernels(&be, 2, (size_t)cols, MAXT, cpu_kernels_for(cpu_level_best()), &err) == XLLM_OK,
              "%s", err.message);
    if (be.n_threads != 2 || !big_data || !small_data) {
        CHECK_MSG(0, "backend of %d threads", be.n_threads);
        backend_free(&be);
        mem_free_aligned(big_data);
        mem_free_aligned(small_data);
        return;
    }
    matrix *ws[2] = {&big, &small};
    cJSON *report = NULL;

    /* measured (no cache): at T = 1 the big matrix is timed on 2 threads only
     * and planned on all; the small one is timed on 1 as well */
    CHECK(cpu_planner_run(&be, ws, 2, MAXT, 60000, &report, &err) == XLLM_OK && report);
    CHECK_MSG(measured_one_thread(report, big.rows, cols) == 0, "T = 1: 1 thread timed for a %zu-byte matrix",
              big_bytes);
    CHECK_MSG(measured_one_thread(report, small.rows, cols) == 1, "T = 1: the small matrix's 1 thread not timed");
    CHECK_MSG(threads_used(&be, &big, 1) == 2, "T = 1: measured plan %d gives the big matrix %zu threads",
              big.plan_threads[0], threads_used(&be, &big, 1));
    cJSON_Delete(report);

    /* cached: an entry saying 1 thread at every bucket, for both matrices */
    char path[300];
    snprintf(path, sizeof path, "%s/decode-rule.json", dir);
    plan_cache *pc = plan_cache_open(path);
    CHECK(pc != NULL);
    plan_cache_set_context(pc, backend_level_name(&be), be.n_threads, MAXT);
    uint8_t one[MM_BUCKETS], none[MM_BUCKETS] = {0};
    memset(one, 1, sizeof one);
    plan_cache_put(pc, &big, one, none);
    plan_cache_put(pc, &small, one, none);
    plan_cache_save(pc);
    plan_cache_close(pc);
    be.plan_cache = path;
    report = NULL;
    CHECK(cpu_planner_run(&be, ws, 2, MAXT, 60000, &report, &err) == XLLM_OK && report);
    const cJSON *cached = cJSON_GetObjectItemCaseSensitive(report, "cached_shapes");
    CHECK_MSG(cJSON_IsNumber(cached) && cached->valueint == 2, "cached_shapes %d", cached ? cached->valueint : -1);
    CHECK_MSG(threads_used(&be, &big, 1) == 2, "T = 1: cached 1 thread kept for the big matrix (plan %d)",
              big.plan_threads[0]);
    CHECK_MSG(big.plan_threads[1] == 1 && threads_used(&be, &big, MAXT) == 1, "T = %d: the cached plan %d was changed",
              MAXT, big.plan_threads[1]);
    CHECK_MSG(small.plan_threads[0] == 1 && threads_used(&be, &small, 1) == 1,
              "T = 1: the small matrix's cached plan %d was changed", small.plan_threads[0]);
    cJSON_Delete(report);
    unlink(path);
    be.plan_cache = NULL;
    backend_free(&be);
    mem_free_aligned(big_data);
    mem_free_aligned(small_data);
}

int main(void) {
    char dir[] = "/tmp/xllm-plan-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/sub/dir/plans.json", dir); /* the directories are made on save */

    matrix a = {.dtype = XLLM_DT_Q4, .group = 32, .rows = 2048, .cols = 5632, .packed = 1};
    matrix b = a;
    b.packed = 0; /* the stored layout is another key */
    uint8_t t[MM_BUCKETS] = {1, 2, 0, 2}, k[MM_BUCKETS] = {0, 1, 3, 0}, t2[MM_BUCKETS], k2[MM_BUCKETS];

    plan_cache *pc = plan_cache_open(path);
    CHECK(pc != NULL);
    plan_cache_set_context(pc, "avx512", 2, 128);
    CHECK(!plan_cache_get(pc, &a, t2, k2));
    plan_cache_put(pc, &a, t, k);
    CHECK(plan_cache_get(pc, &a, t2, k2) && !memcmp(t, t2, sizeof t) && !memcmp(k, k2, sizeof k));
    CHECK(!plan_cache_get(pc, &b, t2, k2));
    plan_cache_save(pc);
    plan_cache_close(pc);
    CHECK(access(path, R_OK) == 0);

    pc = plan_cache_open(path);
    plan_cache_set_context(pc, "avx512", 2, 128);
    memset(t2, 9, sizeof t2);
    CHECK(plan_cache_get(pc, &a, t2, k2) && !memcmp(t, t2, sizeof t) && !memcmp(k, k2, sizeof k));
    plan_cache_set_context(pc, "avx512", 1, 128); /* another thread count: another plan */
    CHECK(!plan_cache_get(pc, &a, t2, k2));
    plan_cache_set_context(pc, "avx2", 2, 128);
    CHECK(!plan_cache_get(pc, &a, t2, k2));
    plan_cache_close(pc);

    /* broken files are empty caches (and are replaced on the next save) */
    const char *bad[] = {"{", "[]", "{\"version\":2,\"plans\":{}}", "{\"version\":1,\"plans\":[1]}", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_file(path, bad[i]);
        pc = plan_cache_open(path);
        CHECK(pc != NULL);
        plan_cache_set_context(pc, "avx512", 2, 128);
        CHECK(!plan_cache_get(pc, &a, t2, k2));
        plan_cache_close(pc);
    }
    /* an entry with numbers out of range is ignored */
    char key_text[1024];
    pc = plan_cache_open(NULL);
    plan_cache_set_context(pc, "avx512", 2, 128);
    CHECK(!plan_cache_get(pc, &a, t2, k2)); /* no path: always a miss */
    plan_cache_put(pc, &a, t, k);           /* and put is a no-op */
    CHECK(!plan_cache_get(pc, &a, t2, k2));
    plan_cache_close(pc);
    snprintf(key_text, sizeof key_text,
             "{\"version\":1,\"plans\":{\"%s|avx512|t2|T128|Q4/g32/packed|2048x5632\":{\"threads\":[1,2,300,0],"
             "\"kernel\":[0,0,0,0]}}}",
             plan_cache_cpu_name());
    write_file(path, key_text);
    pc = plan_cache_open(path);
    plan_cache_set_context(pc, "avx512", 2, 128);
    CHECK(!plan_cache_get(pc, &a, t2, k2));
    plan_cache_close(pc);
    /* a file over the size cap */
    FILE *f = fopen(path, "wb");
    if (f) {
        for (size_t i = 0; i < PLAN_CACHE_MAX_BYTES / 8 + 1; i++) fputs("        ", f);
        fclose(f);
    }
    pc = plan_cache_open(path);
    CHECK(pc != NULL);
    plan_cache_close(pc);
    /* the entry cap */
    unlink(path);
    pc = plan_cache_open(path);
    plan_cache_set_context(pc, "avx512", 2, 128);
    matrix c = a;
    for (int i = 0; i < PLAN_CACHE_MAX_ENTRIES + 10; i++) {
        c.rows = 16 + i;
        plan_cache_put(pc, &c, t, k);
    }
    c.rows = 16 + PLAN_CACHE_MAX_ENTRIES + 5;
    CHECK(!plan_cache_get(pc, &c, t2, k2));
    c.rows = 16;
    CHECK(plan_cache_get(pc, &c, t2, k2));
    plan_cache_save(pc);
    plan_cache_close(pc);
    CHECK(strlen(plan_cache_cpu_name()) > 0);

    /* end to end: a load measures and saves; the next load reuses every shape
     * the first saved (nothing, when the first found the CPUs busy with other
     * work: the report's cpu_share) */
    char mpath[512];
    snprintf(mpath, sizeof mpath, "%s/models/stories260k", XLLM_SOURCE_DIR);
    unlink(path);
    int saved = -1;
    double share0 = -1;
    for (int round = 0; round < 2; round++) {
        plan_stats st = load_and_plan(mpath, path, 0);
        if (round == 0) {
            CHECK_MSG(st.cached == 0, "round 0: cached_shapes %d", st.cached);
            CHECK_MSG(st.shapes > 0 && st.saved >= 0 && st.saved <= st.shapes && st.min_share >= 0 && st.min_share <= 1.05,
                      "round 0: %d shapes, %d saved, cpu share %.2f", st.shapes, st.saved, st.min_share);
            CHECK_MSG((st.saved > 0) == (st.min_share >= 0.75), "round 0: %d saved at cpu share %.2f", st.saved,
                      st.min_share);
            saved = st.saved;
            share0 = st.min_share;
            if (!saved) printf("note: the plan was measured on a busy host (cpu share %.2f): nothing to reuse\n", share0);
        } else {
            CHECK_MSG(st.cached == saved, "round 1: cached_shapes %d, round 0 saved %d", st.cached, saved);
        }
    }
    /* on CPUs shared with twice as many busy threads as there are CPUs, the
     * planner must see it and cache nothing */
    unlink(path);
    plan_stats hog = load_and_plan(mpath, path, 1);
    CHECK_MSG(hog.saved == 0 && hog.min_share >= 0 && hog.min_share < 0.75,
              "under load: %d shapes, %d saved, cpu share %.2f", hog.shapes, hog.saved, hog.min_share);
    plan_stats after = load_and_plan(mpath, path, 0);
    CHECK_MSG(after.cached == 0, "a plan measured under load was reused (%d shapes)", after.cached);
    unlink(path);
    check_decode_rule(dir);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return test_report("test_plan_cache");
}
