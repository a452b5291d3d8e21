/*
 * alloc.c - counting allocator.
 *
 * Each block carries a 16-byte header with its size so frees can be counted;
 * the counter is atomic because worker threads may allocate.
 */
#include "base/alloc.h"
#include "xllm.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define HDR 16
static _Atomic size_t g_live_bytes;

void *xllm_malloc(size_t size) {
    if (size > SIZE_MAX - HDR) return NULL;
    unsigned char *p = malloc(size + HDR);
    if (!p) return NULL;
    memcpy(p, &size, sizeof size);
    atomic_fetch_add(&g_live_bytes, size);
    return p + HDR;
}

void *xllm_calloc(size_t count, size_t size) {
    if (size && count > SIZE_MAX / size) return NULL;
    void *p = xllm_malloc(count * size);
    if (p) memset(p, 0, count * size);
    return p;
}

void *xllm_malloc_array(size_t count, size_t size) {
    if (size && count > SIZE_MAX / size) return NULL;
    return xllm_malloc(count * size);
}

void *xllm_realloc(void *ptr, size_t size) {
    if (!ptr) return xllm_malloc(size);
    if (size > SIZE_MAX - HDR) return NULL;
    unsigned char *base = (unsigned char *)ptr - HDR;
    size_t old;
    memcpy(&old, base, sizeof old);
    unsigned char *p = realloc(base, size + HDR);
    if (!p) return NULL;
    memcpy(p, &size, sizeof size);
    atomic_fetch_sub(&g_live_bytes, old);
    atomic_fetch_add(&g_live_bytes, size);
    return p + HDR;
}

void xllm_free(void *ptr) {
    if (!ptr) return;
    unsigned char *base = (unsigned char *)ptr - HDR;
    size_t old;
    memcpy(&old, base, sizeof old);
    atomic_fetch_sub(&g_live_bytes, old);
    free(base);
}

void *xllm_malloc_aligned(size_t size) {
    /* over-allocate, align, and keep the raw pointer just below the block */
    if (size > SIZE_MAX - 128) return NULL;
    unsigned char *raw = xllm_malloc(size + 128);
    if (!raw) return NULL;
    uintptr_t a = ((uintptr_t)raw + sizeof(void *) + 63) & ~(uintptr_t)63;
    memcpy((unsigned char *)a - sizeof(void *), &raw, sizeof raw);
    return (void *)a;
}

void xllm_free_aligned(void *ptr) {
    if (!ptr) return;
    void *raw;
    memcpy(&raw, (unsigned char *)ptr - sizeof(void *), sizeof raw);
    xllm_free(raw);
}

char *xllm_strndup(const char *s, size_t n) {
    char *d = xllm_malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

char *xllm_strdup(const char *s) { return xllm_strndup(s, strlen(s)); }

size_t xllm_allocated_bytes(void) { return atomic_load(&g_live_bytes); }
