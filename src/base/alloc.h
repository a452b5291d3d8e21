/*
 * alloc.h - the one allocator wrapper of libxllm.
 *
 * All heap memory goes through these so that live bytes are counted
 * (xllm_allocated_bytes) and leaks are visible in tests. Sizes are checked for
 * overflow (xllm_malloc_array). Returns NULL on failure like malloc; callers
 * turn that into XLLM_ERR_OUT_OF_MEMORY.
 */
#ifndef XLLM_BASE_ALLOC_H
#define XLLM_BASE_ALLOC_H

#include <stddef.h>

void *xllm_malloc(size_t size);
void *xllm_calloc(size_t count, size_t size);
void *xllm_realloc(void *ptr, size_t size);
void *xllm_malloc_array(size_t count, size_t size); /* NULL on overflow */
/* 64-byte aligned; free with xllm_free_aligned. */
void *xllm_malloc_aligned(size_t size);
void xllm_free_aligned(void *ptr);
char *xllm_strdup(const char *s);
char *xllm_strndup(const char *s, size_t n);
/* xllm_free() is public, in xllm.h */
void xllm_free(void *ptr);

#endif
