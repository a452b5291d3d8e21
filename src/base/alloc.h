/*
 * alloc.h - the one allocator wrapper of libxllm.
 *
 * All heap memory goes through these so that live bytes are counted
 * (xllm_allocated_bytes) and leaks are visible in tests. Sizes are checked for
 * overflow (mem_malloc_array). Returns NULL on failure like malloc; callers
 * turn that into XLLM_ERR_OUT_OF_MEMORY.
 *
 * Each allocation records its call site: mem_malloc(n) is
 * mem_malloc_at(n, __FILE__, __LINE__). The site costs nothing unless the
 * process runs with XLLM_DEBUG=1 (read once, at the first allocation): then
 * every live block is kept in a list with its size and site, and
 * mem_debug_report() prints what is still allocated. Without it an
 * allocation is malloc + one atomic add.
 *
 * Tests can make the Nth allocation fail (mem_fail_at), as SQLite's
 * test harness does, to walk every out-of-memory path of an operation.
 *
 * All functions are thread-safe.
 */
#ifndef XLLM_BASE_ALLOC_H
#define XLLM_BASE_ALLOC_H

#include <stddef.h>

void *mem_malloc_at(size_t size, const char *file, int line);
void *mem_calloc_at(size_t count, size_t size, const char *file, int line);
void *mem_realloc_at(void *ptr, size_t size, const char *file, int line);
void *mem_malloc_array_at(size_t count, size_t size, const char *file, int line); /* NULL on overflow */
/* 64-byte aligned; free with mem_free_aligned. */
void *mem_malloc_aligned_at(size_t size, const char *file, int line);
char *mem_strdup_at(const char *s, const char *file, int line);
char *mem_strndup_at(const char *s, size_t n, const char *file, int line);

#define mem_malloc(n) mem_malloc_at((n), __FILE__, __LINE__)
#define mem_calloc(count, n) mem_calloc_at((count), (n), __FILE__, __LINE__)
#define mem_realloc(p, n) mem_realloc_at((p), (n), __FILE__, __LINE__)
#define mem_malloc_array(count, n) mem_malloc_array_at((count), (n), __FILE__, __LINE__)
#define mem_malloc_aligned(n) mem_malloc_aligned_at((n), __FILE__, __LINE__)
#define mem_strdup(s) mem_strdup_at((s), __FILE__, __LINE__)
#define mem_strndup(s, n) mem_strndup_at((s), (n), __FILE__, __LINE__)

void mem_free_aligned(void *ptr);
/* xllm_free() is public, in xllm.h */
void xllm_free(void *ptr);

/* ------------------------------------------------ debugging and testing */

/* Is the XLLM_DEBUG=1 tracker on (decided at the first allocation)? */
int mem_debug_enabled(void);
/* With the tracker on: print every live allocation to stderr (grouped by
 * call site: count, bytes, file:line; largest first) under a header naming
 * `when`, and return how many blocks are live. Without it: returns 0 and
 * prints nothing. */
size_t mem_debug_report(const char *when);

/* Fail the nth allocation from now (1 = the next one) once: it returns NULL
 * as malloc would; every other allocation succeeds. n <= 0 disarms. Counts
 * every call of the functions above (a realloc too) from every thread. */
void mem_fail_at(long n);
/* Allocations counted since the last mem_fail_at (while armed), and
 * whether the armed failure has happened. */
long mem_alloc_count(void);
int mem_fail_happened(void);

#endif
