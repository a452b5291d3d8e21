/*
 * test_plan_cache.c - the planner's cache file (src/backend/cpu/plan_cache.h):
 * a plan put is found again after saving and reopening, only under its own
 * key (type, group, layout, shape, and the process context); broken files
 * (malformed JSON, wrong version, out-of-range numbers, over the size cap)
 * are treated as empty; the entry cap holds; a load with a cache measures
 * nothing the second time and gives the same plan; a load whose timings ran
 * on CPUs busy with other threads caches nothing.
 */
#include "test.h"
#include "backend/cpu/plan_cache.h"
#include "xllm.h"

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
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return test_report("test_plan_cache");
}
