/*
 * alloc.c - counting allocator, with an XLLM_DEBUG=1 leak tracker and an
 * allocation-failure injector for tests.
 *
 * Each block carries a header; the 16 bytes just below the data hold its size
 * so frees can be counted (the counter is atomic because worker threads may
 * allocate). With XLLM_DEBUG=1 (read once, at the first allocation, so every
 * block of the process has the same layout) the header grows by a list node
 * (prev, next, file, line): live blocks are linked under a mutex and
 * mem_debug_report prints them grouped by call site. Without it, the
 * fast path is malloc + one atomic add; the failure injector adds one relaxed
 * load of a flag.
 */
#include "base/alloc.h"
#include "xllm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HDR 16 /* size (+ padding), just below the data */

typedef struct dbg_node {
    struct dbg_node *prev, *next;
    const char *file;
    long line;
} dbg_node; /* 32 bytes: the debug header is dbg_node + HDR = 48, a multiple of 16 */

#define DBG_HDR (sizeof(dbg_node) + HDR)

static _Atomic size_t g_live_bytes;

/* 0 = not decided yet, 1 = off, 2 = on */
static atomic_int g_debug;
static pthread_once_t g_debug_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_debug_mu = PTHREAD_MUTEX_INITIALIZER;
static dbg_node g_live = {&g_live, &g_live, NULL, 0}; /* circular list head */

static void debug_init(void) {
    const char *e = getenv("XLLM_DEBUG");
    atomic_store(&g_debug, e && !strcmp(e, "1") ? 2 : 1);
}

static inline int debug_on(void) {
    int d = atomic_load_explicit(&g_debug, memory_order_acquire);
    if (!d) {
        pthread_once(&g_debug_once, debug_init);
        d = atomic_load(&g_debug);
    }
    return d == 2;
}

int mem_debug_enabled(void) { return debug_on(); }

/* ------------------------------------------------------- failure injection */

static atomic_long g_fail_at;   /* 0 = disarmed */
static atomic_long g_count;     /* allocations since armed */
static atomic_int g_fail_done;

void mem_fail_at(long n) {
    atomic_store(&g_count, 0);
    atomic_store(&g_fail_done, 0);
    atomic_store(&g_fail_at, n > 0 ? n : 0);
}

long mem_alloc_count(void) { return atomic_load(&g_count); }
int mem_fail_happened(void) { return atomic_load(&g_fail_done); }

/* Should this allocation fail? */
static inline int injected_failure(void) {
    long at = atomic_load_explicit(&g_fail_at, memory_order_relaxed);
    if (!at) return 0;
    if (atomic_fetch_add(&g_count, 1) + 1 != at) return 0;
    atomic_store(&g_fail_done, 1);
    return 1;
}

/* ------------------------------------------------------------ the blocks */

static inline size_t hdr_size(void) { return debug_on() ? DBG_HDR : HDR; }

static void link_node(dbg_node *n) {
    pthread_mutex_lock(&g_debug_mu);
    n->prev = &g_live;
    n->next = g_live.next;
    g_live.next->prev = n;
    g_live.next = n;
    pthread_mutex_unlock(&g_debug_mu);
}

static void *finish(unsigned char *base, size_t size, const char *file, int line) {
    size_t h = hdr_size();
    memcpy(base + h - HDR, &size, sizeof size);
    atomic_fetch_add_explicit(&g_live_bytes, size, memory_order_relaxed);
    if (h == DBG_HDR) {
        dbg_node *n = (dbg_node *)base;
        n->file = file;
        n->line = line;
        link_node(n);
    }
    return base + h;
}

static void unlink_node(dbg_node *n) {
    pthread_mutex_lock(&g_debug_mu);
    n->prev->next = n->next;
    n->next->prev = n->prev;
    pthread_mutex_unlock(&g_debug_mu);
}

void *mem_malloc_at(size_t size, const char *file, int line) {
    size_t h = hdr_size();
    if (size > SIZE_MAX - h || injected_failure()) return NULL;
    unsigned char *p = malloc(size + h);
    if (!p) return NULL;
    return finish(p, size, file, line);
}

void *mem_calloc_at(size_t count, size_t size, const char *file, int line) {
    if (size && count > SIZE_MAX / size) return NULL;
    void *p = mem_malloc_at(count * size, file, line);
    if (p) memset(p, 0, count * size);
    return p;
}

void *mem_malloc_array_at(size_t count, size_t size, const char *file, int line) {
    if (size && count > SIZE_MAX / size) return NULL;
    return mem_malloc_at(count * size, file, line);
}

void *mem_realloc_at(void *ptr, size_t size, const char *file, int line) {
    if (!ptr) return mem_malloc_at(size, file, line);
    size_t h = hdr_size();
    if (size > SIZE_MAX - h || injected_failure()) return NULL;
    unsigned char *base = (unsigned char *)ptr - h;
    size_t old;
    memcpy(&old, (unsigned char *)ptr - HDR, sizeof old);
    if (h == DBG_HDR) unlink_node((dbg_node *)base); /* realloc may move it */
    unsigned char *p = realloc(base, size + h);
    if (!p) { /* the old block stays as it was */
        if (h == DBG_HDR) link_node((dbg_node *)base);
        return NULL;
    }
    atomic_fetch_sub_explicit(&g_live_bytes, old, memory_order_relaxed);
    return finish(p, size, file, line);
}

void xllm_free(void *ptr) {
    if (!ptr) return;
    size_t h = hdr_size();
    unsigned char *base = (unsigned char *)ptr - h;
    size_t old;
    memcpy(&old, (unsigned char *)ptr - HDR, sizeof old);
    atomic_fetch_sub_explicit(&g_live_bytes, old, memory_order_relaxed);
    if (h == DBG_HDR) unlink_node((dbg_node *)base);
    free(base);
}

void *mem_malloc_aligned_at(size_t size, const char *file, int line) {
    /* over-allocate, align, and keep the raw pointer just below the block */
    if (size > SIZE_MAX - 128) return NULL;
    unsigned char *raw = mem_malloc_at(size + 128, file, line);
    if (!raw) return NULL;
    uintptr_t a = ((uintptr_t)raw + sizeof(void *) + 63) & ~(uintptr_t)63;
    memcpy((unsigned char *)a - sizeof(void *), &raw, sizeof raw);
    return (void *)a;
}

void mem_free_aligned(void *ptr) {
    if (!ptr) return;
    void *raw;
    memcpy(&raw, (unsigned char *)ptr - sizeof(void *), sizeof raw);
    xllm_free(raw);
}

char *mem_strndup_at(const char *s, size_t n, const char *file, int line) {
    char *d = mem_malloc_at(n + 1, file, line);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

char *mem_strdup_at(const char *s, const char *file, int line) { return mem_strndup_at(s, strlen(s), file, line); }

size_t xllm_allocated_bytes(void) { return atomic_load(&g_live_bytes); }

/* ------------------------------------------------------------- the report */

typedef struct { const char *file; long line; size_t n, bytes; } site;

static int site_cmp(const void *a, const void *b) {
    const site *x = a, *y = b;
    return x->bytes != y->bytes ? (x->bytes < y->bytes ? 1 : -1) : (x->n < y->n) - (x->n > y->n);
}

size_t mem_debug_report(const char *when) {
    if (!debug_on()) return 0;
    pthread_mutex_lock(&g_debug_mu);
    size_t live = 0, total = 0, nsites = 0, cap = 64;
    site *sites = malloc(cap * sizeof *sites); /* plain malloc: the report must not count itself */
    for (dbg_node *n = g_live.next; n != &g_live; n = n->next) {
        size_t size;
        memcpy(&size, (unsigned char *)n + sizeof(dbg_node), sizeof size);
        live++;
        total += size;
        if (!sites) continue;
        size_t i = 0;
        while (i < nsites && !(sites[i].line == n->line && !strcmp(sites[i].file, n->file))) i++;
        if (i == nsites) {
            if (nsites == cap) {
                site *ns = realloc(sites, 2 * cap * sizeof *sites);
                if (!ns) continue;
                sites = ns;
                cap *= 2;
            }
            sites[nsites++] = (site){n->file, n->line, 0, 0};
        }
        sites[i].n++;
        sites[i].bytes += size;
    }
    pthread_mutex_unlock(&g_debug_mu);
    fprintf(stderr, "xllm: XLLM_DEBUG: %zu live allocations (%zu bytes) %s\n", live, total, when ? when : "");
    if (sites) {
        qsort(sites, nsites, sizeof *sites, site_cmp);
        for (size_t i = 0; i < nsites; i++)
            fprintf(stderr, "xllm:   %6zu x %10zu bytes  %s:%ld\n", sites[i].n, sites[i].bytes, sites[i].file,
                    sites[i].line);
        free(sites);
    }
    return live;
}
