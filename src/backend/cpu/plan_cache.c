/*
 * plan_cache.c - the planner's measurements on disk (see plan_cache.h).
 */
#include "backend/cpu/plan_cache.h"
#include "base/alloc.h"
#include "base/dtype.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct plan_cache {
    char *path;
    cJSON *root, *plans; /* plans: the object inside root */
    int n, dirty;
    char ctx[256];
};

static char g_cpu_name[128];
static pthread_once_t g_cpu_once = PTHREAD_ONCE_INIT;

static void read_cpu_name(void) {
    snprintf(g_cpu_name, sizeof g_cpu_name, "unknown");
#if defined(__x86_64__)
    unsigned r[12];
    unsigned max;
    __asm__ volatile("cpuid" : "=a"(max) : "a"(0x80000000u) : "ebx", "ecx", "edx");
    if (max >= 0x80000004u) {
        for (unsigned i = 0; i < 3; i++)
            __asm__ volatile("cpuid" : "=a"(r[4 * i]), "=b"(r[4 * i + 1]), "=c"(r[4 * i + 2]), "=d"(r[4 * i + 3])
                             : "a"(0x80000002u + i), "c"(0));
        char b[49];
        memcpy(b, r, 48);
        b[48] = 0;
        const char *s = b;
        while (*s == ' ') s++;
        size_t n = strlen(s);
        while (n && s[n - 1] == ' ') n--;
        if (n) snprintf(g_cpu_name, sizeof g_cpu_name, "%.*s", (int)n, s);
        return;
    }
#endif
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) && strncmp(line, "Model", 5) && strncmp(line, "CPU part", 8)) continue;
        char *c = strchr(line, ':');
        if (!c) continue;
        c++;
        while (*c == ' ' || *c == '\t') c++;
        c[strcspn(c, "\n")] = 0;
        if (*c) snprintf(g_cpu_name, sizeof g_cpu_name, "%s", c);
        break;
    }
    fclose(f);
}

const char *plan_cache_cpu_name(void) {
    pthread_once(&g_cpu_once, read_cpu_name);
    return g_cpu_name;
}

static cJSON *empty_root(cJSON **plans) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    cJSON_AddNumberToObject(root, "version", 1);
    *plans = cJSON_AddObjectToObject(root, "plans");
    if (!*plans) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* The file's plans, or NULL (missing, unreadable, too large, malformed). */
static cJSON *load_file(const char *path, cJSON **plans, int *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = mem_malloc(PLAN_CACHE_MAX_BYTES + 1);
    size_t len = buf ? fread(buf, 1, PLAN_CACHE_MAX_BYTES + 1, f) : 0;
    fclose(f);
    if (!buf || len > PLAN_CACHE_MAX_BYTES) {
        xllm_free(buf);
        return NULL;
    }
    cJSON *root = cJSON_ParseWithLength(buf, len);
    xllm_free(buf);
    cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "plans");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (!cJSON_IsObject(p) || !cJSON_IsNumber(v) || v->valueint != 1 || cJSON_GetArraySize(p) > PLAN_CACHE_MAX_ENTRIES) {
        cJSON_Delete(root);
        return NULL;
    }
    *plans = p;
    *n = cJSON_GetArraySize(p);
    return root;
}

plan_cache *plan_cache_open(const char *path) {
    plan_cache *pc = mem_calloc(1, sizeof *pc);
    if (!pc) return NULL;
    if (!path || !*path) return pc;
    pc->path = mem_strdup(path);
    pc->root = pc->path ? load_file(path, &pc->plans, &pc->n) : NULL;
    if (!pc->root) {
        pc->n = 0;
        pc->root = empty_root(&pc->plans);
    }
    if (!pc->path || !pc->root) {
        plan_cache_close(pc);
        return NULL;
    }
    return pc;
}

void plan_cache_set_context(plan_cache *pc, const char *level, int n_threads, int max_T) {
    snprintf(pc->ctx, sizeof pc->ctx, "%s|%s|t%d|T%d", plan_cache_cpu_name(), level, n_threads, max_T);
}

static void make_key(const plan_cache *pc, const matrix *W, char *key, size_t cap) {
    snprintf(key, cap, "%s|%s/g%d%s|%lldx%lld", pc->ctx, dtype_name(W->dtype), W->group,
             W->packed ? "/packed" : "", (long long)W->rows, (long long)W->cols);
}

static int read_bytes(const cJSON *a, uint8_t out[MM_BUCKETS], int hi) {
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != MM_BUCKETS) return 0;
    for (int b = 0; b < MM_BUCKETS; b++) {
        const cJSON *x = cJSON_GetArrayItem(a, b);
        if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > hi || x->valuedouble != (int)x->valuedouble)
            return 0;
        out[b] = (uint8_t)x->valueint;
    }
    return 1;
}

int plan_cache_get(const plan_cache *pc, const matrix *W, uint8_t threads[MM_BUCKETS], uint8_t kernel[MM_BUCKETS]) {
    if (!pc || !pc->plans) return 0;
    char key[512];
    make_key(pc, W, key, sizeof key);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(pc->plans, key);
    uint8_t t[MM_BUCKETS], k[MM_BUCKETS];
    /* threads beyond this process's count, or a variant number that is not a
     * variant: a stale or hand-edited entry, ignored */
    if (!read_bytes(cJSON_GetObjectItemCaseSensitive(e, "threads"), t, 255) ||
        !read_bytes(cJSON_GetObjectItemCaseSensitive(e, "kernel"), k, 255))
        return 0;
    memcpy(threads, t, sizeof t);
    memcpy(kernel, k, sizeof k);
    return 1;
}

void plan_cache_put(plan_cache *pc, const matrix *W, const uint8_t threads[MM_BUCKETS],
                    const uint8_t kernel[MM_BUCKETS]) {
    if (!pc || !pc->plans || pc->n >= PLAN_CACHE_MAX_ENTRIES) return;
    char key[512];
    make_key(pc, W, key, sizeof key);
    int t[MM_BUCKETS], k[MM_BUCKETS];
    for (int b = 0; b < MM_BUCKETS; b++) t[b] = threads[b], k[b] = kernel[b];
    cJSON *e = cJSON_CreateObject();
    if (!e) return;
    cJSON *ta = cJSON_CreateIntArray(t, MM_BUCKETS), *ka = cJSON_CreateIntArray(k, MM_BUCKETS);
    if (!ta || !ka || !cJSON_AddItemToObject(e, "threads", ta) || !cJSON_AddItemToObject(e, "kernel", ka)) {
        cJSON_Delete(ta);
        cJSON_Delete(ka);
        cJSON_Delete(e);
        return;
    }
    if (cJSON_GetObjectItemCaseSensitive(pc->plans, key)) cJSON_ReplaceItemInObjectCaseSensitive(pc->plans, key, e);
    else if (cJSON_AddItemToObject(pc->plans, key, e)) pc->n++;
    else {
        cJSON_Delete(e);
        return;
    }
    pc->dirty = 1;
}

/* mkdir -p of path's directory (mode 0755 and the umask). */
static void make_parent(const char *path) {
    char d[4096];
    snprintf(d, sizeof d, "%s", path);
    char *slash = strrchr(d, '/');
    if (!slash || slash == d) return;
    *slash = 0;
    for (char *p = d + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        mkdir(d, 0755);
        *p = '/';
    }
    mkdir(d, 0755);
}

void plan_cache_save(plan_cache *pc) {
    if (!pc || !pc->path || !pc->dirty) return;
    char *text = cJSON_PrintUnformatted(pc->root);
    if (!text) return;
    make_parent(pc->path);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", pc->path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    size_t len = strlen(text);
    int ok = f && fwrite(text, 1, len, f) == len;
    if (f && fclose(f)) ok = 0;
    if (ok && rename(tmp, pc->path)) ok = 0;
    if (!ok) {
        if (f) unlink(tmp);
        fprintf(stderr, "xllm: note: could not write the plan cache %s (%s); plans will be measured again\n",
                pc->path, strerror(errno));
    }
    cJSON_free(text);
    pc->dirty = 0;
}

void plan_cache_close(plan_cache *pc) {
    if (!pc) return;
    cJSON_Delete(pc->root);
    xllm_free(pc->path);
    xllm_free(pc);
}
